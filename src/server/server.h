// Server: one controller process's serving parts, below the CLI. It opens the store,
// builds the controller and its REST API over it, and serves them on the Unix socket
// STATE_DIR/gpupool.sock and (with a port) on TCP; `gpupool up` and `gpupool server`
// differ only in the options they give it (src/cli/daemon_commands.cc).
//
// On a PostgreSQL store several controllers may share one database, one leading
// (leadership.h). With Lease::kStandBy (`gpupool server`) Start() serves at once as a
// standby (503 naming the leader) and a thread of its own waits for the lease, then
// renews it from that moment on (another thread) while it loads the state, and serves
// once loaded; with Lease::kTakeOnce (`gpupool up`) Start()
// takes the lease or fails, so a one-machine pool never shares its store. A leader that
// loses the lease exits the process with status 75 (ExitLostLeadership) rather than trust
// memory another controller may have moved past. SQLite stores have no lease.
//
// Whatever the store, one server runs per state directory: Start() takes an exclusive
// lock on STATE/server.lock (common/file_lock.h), and on SQLITE_FILE.lock for an SQLite
// file kept elsewhere, and refuses to start while another process holds it.
//
// Start and Stop are called from one thread; the accessors are safe from any thread once
// Start has returned. The destructor stops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/file_lock.h"
#include "common/periodic_thread.h"
#include "common/status.h"
#include "controller/api.h"
#include "controller/controller.h"
#include "controller/telemetry.h"
#include "net/http_server.h"
#include "server/leadership.h"
#include "server/store_disk_watch.h"
#include "store/lease.h"
#include "store/store.h"

namespace gpupool::server {

struct ServerOptions {
  std::string state_dir;   // the socket, and by default the SQLite store, live here
  std::string store_spec;  // sqlite:PATH or a PostgreSQL URL; empty: sqlite:STATE_DIR/gpupool.db
  int port = 8421;         // TCP port on `listen` for the API; 0: the Unix socket only
  std::string listen = "127.0.0.1";
  std::string admin_group;  // members are admins
  controller::ControllerOptions controller;
  controller::TelemetryOptions telemetry;
  std::vector<std::string> podman_args;  // global podman flags for inspecting job images
  // Connections to the API (docs/security.md, "Connection exhaustion").
  int max_connections = 0;  // 0: the open-files limit less a tenth; else at least 64
  int max_connections_per_uid = 256;
  int max_connections_per_address = 256;
  int max_pending_connections_per_peer = 64;
  int request_head_timeout_s = 10;
  // Request priority (docs/deploy.md): agents' requests run on threads this many nice
  // levels below users' requests and the scheduler; 0: one pool serves everyone.
  int agent_request_nice = 10;
  // PostgreSQL only: how this controller leads.
  enum class Lease { kTakeOnce, kStandBy };
  Lease lease = Lease::kTakeOnce;
  std::string advertise;  // the address clients and agents reach it at; "" = from listen/port
  int64_t lease_ms = 5000;
  // The watch of the SQLite store's disk (store_disk_watch.h; not for PostgreSQL, whose
  // disk is its server's): the room to keep, and how often it is read.
  DiskMinFree disk_min_free;
  int64_t disk_check_interval_s = 10;
  // Called on the lease thread when a standby starts leading (for the CLI's message).
  std::function<void(int64_t epoch)> on_lead;
};

// The store the options name: STORE_SPEC or sqlite:STATE_DIR/gpupool.db.
std::string StoreSpec(const ServerOptions& options);

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Locks the state directory, opens the store and serves (see above). Errors: another
  // server on the state directory or SQLite file (AlreadyExists, naming its pid), an
  // unusable state directory or store (Unavailable, FailedPrecondition), bad options
  // (InvalidArgument), a lease held by another controller under kTakeOnce
  // (FailedPrecondition), a listener that cannot bind.
  Status Start();
  // Blocks until `stop` is requested (Ok) or the server failed on its own (a standby that
  // won the lease but could not load the state: that error); wakes at either, no polling.
  Status Wait(std::stop_token stop);
  // Ends waits in the API, stops the controller and the listeners, and gives a held lease
  // up. Idempotent.
  void Stop();

  const std::string& socket_path() const { return socket_path_; }
  int tcp_port() const { return http_ ? http_->tcp_port() : 0; }
  // The store, once started (the local agent's node token is written there).
  store::Store* store() const { return store_.get(); }
  // kStandBy: this controller's id and the address written in the lease.
  const std::string& controller_id() const { return controller_id_; }
  const std::string& advertised_address() const { return advertised_; }

 private:
  Status OpenStore();
  void WatchStoreDisk(const std::string& sqlite_file);
  Status CreateController();
  Status StartListening(net::HttpAsyncHandler handler);
  Status TakeLeaseOnce();
  Status StartStandby();
  void LeadWhenElected();  // the standby's lease thread
  std::string AdvertisedAddress(int tcp_port) const;
  // Lets the listeners answer what reached them (at most 1 s, net::HttpServer::Drain),
  // then exits the process with 75. Any thread; the first caller exits.
  [[noreturn]] void ExitLostLeadership(const Status& why);

  ServerOptions options_;
  // STATE/server.lock, and SQLITE_FILE.lock for a file outside it: held until destroyed.
  FileLock state_lock_;
  FileLock store_lock_;
  std::string socket_path_;
  std::string controller_id_;
  std::string advertised_;
  std::atomic<bool> stop_{false};
  bool stopped_ = false;
  std::mutex failed_mu_;
  std::condition_variable_any failed_cv_;  // Wait's: failed_ was set, or stop requested
  Status failed_;                          // guarded by failed_mu_

  std::unique_ptr<store::LeaseStore> leases_;
  std::unique_ptr<Leadership> lead_;
  std::atomic<Leadership*> lead_ptr_{nullptr};  // kStandBy: read by the standby's answers
  std::atomic<bool> keeper_stop_{false};        // kTakeOnce: ends the keeper, which releases
  std::thread lease_thread_;  // kTakeOnce: the keeper; kStandBy: waits, leads, renews
  std::unique_ptr<StoreDiskWatch> disk_watch_;   // SQLite: refuses submissions when short
  std::unique_ptr<PeriodicThread> disk_thread_;  // runs disk_watch_->Check
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<controller::Controller> controller_;
  std::unique_ptr<controller::EnvInspector> inspector_;  // images inspected at submit
  std::unique_ptr<controller::Api> api_;
  std::atomic<controller::Api*> serving_{nullptr};  // kStandBy: set once leading
  std::mutex http_mu_;         // orders setting http_, stopping it and ExitLostLeadership's drain
  bool http_stopped_ = false;  // guarded by http_mu_: Stop() began stopping http_
  std::unique_ptr<net::HttpServer> http_;
};

}  // namespace gpupool::server
