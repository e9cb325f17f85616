#include "server/server.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "common/clock.h"
#include "common/file_lock.h"
#include "common/host.h"
#include "controller/auth.h"
#include "controller/connection_class.h"
#include "controller/environments.h"
#include "store/open_store.h"

namespace gpupool::server {
namespace {

namespace fs = std::filesystem;

// Exit status of a controller that lost the leadership (EX_TEMPFAIL): its unit starts it
// again, as a standby.
constexpr int kExitLostLeadership = 75;
// How long such a controller lets its listeners answer what reached them before it exits.
constexpr int kLostLeadershipDrainMs = 1000;

// Files with job data (the store, job specs and logs) must be private: the daemons create
// everything with umask 077, and the state directory is made 0711 so that users reach
// the socket inside it (0666) but can list and read nothing else.
Status PrepareStateDir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return Status::Unavailable("cannot create the state directory '" + dir + "': " + ec.message() +
                               ": pass a writable --state-dir");
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("the state directory '" + dir + "' is not a directory");
  }
  // Only a directory of our own: never narrow a shared one such as /tmp.
  if (st.st_uid == ::geteuid() && (st.st_mode & 0777) != 0711 && ::chmod(dir.c_str(), 0711) != 0) {
    return Status::Unavailable("cannot make the state directory '" + dir +
                               "' private (chmod 0711): " + std::strerror(errno));
  }
  if (st.st_uid != ::geteuid()) {
    spdlog::warn(
        "the state directory '{}' belongs to uid {}, not to this daemon: other users "
        "may reach its files; use a directory of its own",
        dir, st.st_uid);
  }
  return Status::Ok();
}

// A store made by an older gpupool (or under a wider umask) was world-readable: 0600 now.
void MakeStoreFilesPrivate(const std::string& db) {
  for (const std::string& p : {db, db + "-wal", db + "-shm", db + "-journal"}) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0 && (st.st_mode & 077) != 0 &&
        ::chmod(p.c_str(), st.st_mode & 0700) != 0) {
      spdlog::warn("cannot make '{}' private: {}", p, std::strerror(errno));
    }
  }
}

// One server per state directory, and per SQLite file: the socket is no guard, as it can
// be removed (a tmp cleaner, an operator) while its server runs, and a second server on
// the same store would then serve a pool the first one does not see. The lock is held for
// the process's life (the kernel drops it at any exit, kill -9 included); `what` names
// the files it guards in the refusal.
Result<FileLock> LockForServer(const std::string& path, const std::string& what,
                               const std::string& fix) {
  Result<FileLock> lock = FileLock::TryLock(path);
  if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) return lock;
  return Status::AlreadyExists("another gpupool server (" + lock.status().message() + ") uses " +
                               what + " (it holds " + path + "): stop it first, or " + fix);
}

// The SQLite file a spec names, "" for PostgreSQL or an in-memory database.
std::string SqlitePath(const std::string& spec) {
  if (store::IsPostgresSpec(spec)) return "";
  std::string path = spec.rfind("sqlite:", 0) == 0 ? spec.substr(7) : spec;
  return path.empty() || path[0] == ':' ? "" : path;
}

}  // namespace

std::string StoreSpec(const ServerOptions& o) {
  return o.store_spec.empty() ? "sqlite:" + o.state_dir + "/gpupool.db" : o.store_spec;
}

Server::Server(ServerOptions options)
    : options_(std::move(options)), socket_path_(options_.state_dir + "/gpupool.sock") {}

Server::~Server() { Stop(); }

// The requests that reached the listeners (accepted, or waiting to be: those sent while
// this process was stopped) are answered first, as a controller without a sure lease
// answers (the lapsed 503, ServeWhileLeading), not lost with the process: clients learn
// at once to go to another controller. Bounded: a long poll does not hold the exit.
void Server::ExitLostLeadership(const Status& why) {
  // One exit: a second caller (the keeper and a fenced write at once) waits for it.
  static std::once_flag once;
  std::call_once(once, [&] {
    spdlog::critical(
        "leadership lost, exiting so that this controller starts again as a "
        "standby: {}",
        why.message());
    if (lead_ != nullptr) lead_->Lapse();  // a fenced write's news: answer nothing more
    {
      std::lock_guard lock(http_mu_);
      if (http_ != nullptr && !http_stopped_ && !http_->Drain(kLostLeadershipDrainMs)) {
        spdlog::warn("requests still under way after {} ms are cut off by the exit",
                     kLostLeadershipDrainMs);
      }
    }
    spdlog::default_logger()->flush();
    std::cerr << "gpupool: leadership lost: " << why.message() << std::endl;
    std::_Exit(kExitLostLeadership);
  });
  std::_Exit(kExitLostLeadership);  // not reached: the first caller exits
}

Status Server::OpenStore() {
  GP_RETURN_IF_ERROR(PrepareStateDir(options_.state_dir));
  const std::string db = options_.state_dir + "/gpupool.db";
  const std::string spec = StoreSpec(options_);
  // The state directory in every mode (its socket is one server's; controllers sharing a
  // PostgreSQL database each have their own), and an SQLite file kept elsewhere too.
  GP_ASSIGN_OR_RETURN(state_lock_, LockForServer(options_.state_dir + "/server.lock",
                                                 "the state directory '" + options_.state_dir + "'",
                                                 "give this one another --state-dir"));
  if (const std::string file = SqlitePath(spec); !file.empty() && file != db) {
    GP_ASSIGN_OR_RETURN(store_lock_, LockForServer(file + ".lock", "the store '" + file + "'",
                                                   "give this one another --store"));
  }
  MakeStoreFilesPrivate(db);
  GP_ASSIGN_OR_RETURN(store_, store::OpenStore(spec));
  MakeStoreFilesPrivate(db);
  spdlog::info("store: {}", store::DescribeStoreSpec(spec));  // never with a password
  WatchStoreDisk(SqlitePath(spec));
  return Status::Ok();
}

// An SQLite store's disk is watched from the start (a server started on a full disk
// refuses submissions at once), then every --disk-check-interval seconds.
void Server::WatchStoreDisk(const std::string& sqlite_file) {
  if (sqlite_file.empty() || options_.disk_min_free.kind == DiskMinFree::Kind::kOff) return;
  const std::string dir = std::filesystem::path(sqlite_file).parent_path().string();
  disk_watch_ = std::make_unique<StoreDiskWatch>(dir.empty() ? "." : dir, options_.disk_min_free);
  disk_watch_->Check();
  StoreDiskWatch* watch = disk_watch_.get();
  options_.controller.submission_room = [watch] { return watch->Room(); };
  disk_thread_ = std::make_unique<PeriodicThread>(
      SystemClock::Get(), std::max<int64_t>(options_.disk_check_interval_s, 1) * 1'000'000,
      [watch] { watch->Check(); });
  disk_thread_->Start();
}

// The controller and its API over the open store (this loads the pool's state); nothing
// runs until the caller starts them (Api::Start, Controller::Start).
Status Server::CreateController() {
  GP_ASSIGN_OR_RETURN(controller_, controller::Controller::Create(store_.get(), SystemClock::Get(),
                                                                  options_.controller));
  inspector_ = controller::NewPodmanInspector(options_.podman_args, SystemClock::Get());
  api_ = std::make_unique<controller::Api>(controller_.get(), store_.get(), SystemClock::Get(),
                                           controller::AuthOptions{options_.admin_group},
                                           inspector_.get());
  return api_->ConfigureTelemetry(options_.telemetry);
}

Status Server::StartListening(net::HttpAsyncHandler handler) {
  const ServerOptions& f = options_;
  if (f.max_connections != 0 && f.max_connections < 64) {
    return Status::InvalidArgument("--max-connections " + std::to_string(f.max_connections) +
                                   ": give 0 (from the open-files limit) or at least 64");
  }
  // Connections are bounded by what the system allows, not by a login's 1,024.
  if (Result<uint64_t> files = net::RaiseOpenFilesLimit(); files.ok()) {
    spdlog::info("open-files limit: {}", *files);
  } else {
    spdlog::warn("cannot raise the open-files limit: {}", files.status().message());
  }
  net::HttpServerOptions ho;
  ho.unix_socket_path = socket_path_;
  if (f.port > 0) {
    ho.tcp_host = f.listen;
    ho.tcp_port = f.port;
  }
  ho.may_block = &controller::Api::MayBlock;
  // A job's submission of max-submission-bytes fits, as JSON.
  ho.max_body_bytes = controller::MaxRequestBodyBytes(f.controller);
  ho.max_body_hint = " (a job's submission may be up to " +
                     std::to_string(f.controller.max_submission_bytes) +
                     " bytes: the server's max-submission-bytes, in the [server] section of its "
                     "config file)";
  ho.max_connections = f.max_connections;
  ho.max_connections_per_uid = f.max_connections_per_uid;
  ho.max_connections_per_address = f.max_connections_per_address;
  ho.max_pending_per_peer = f.max_pending_connections_per_peer;
  ho.head_timeout_ms = f.request_head_timeout_s * 1000;
  if (f.agent_request_nice > 0) {  // users' requests and the scheduler get the CPU first
    ho.background = &controller::Api::IsAgentTraffic;
    ho.background_nice = f.agent_request_nice;
  }
  // Agents (node tokens) get the connections kept for them; the classifier lives as long
  // as the server that calls it.
  auto classifier =
      std::make_shared<controller::ConnectionClassifier>(store_.get(), SystemClock::Get());
  ho.classify = [classifier](const net::HttpRequest& head) { return classifier->Classify(head); };
  GP_ASSIGN_OR_RETURN(std::unique_ptr<net::HttpServer> http,
                      net::StartHttpServer(ho, std::move(handler)));
  std::lock_guard lock(http_mu_);  // a keeper losing the lease drains it
  http_ = std::move(http);
  return Status::Ok();
}

// The address other machines reach this controller at: --advertise, else http://LISTEN:PORT
// (this host's name for a wildcard --listen), else the Unix socket.
std::string Server::AdvertisedAddress(int tcp_port) const {
  const ServerOptions& f = options_;
  if (!f.advertise.empty()) return f.advertise;
  if (f.port <= 0) return "unix:" + socket_path_;
  const bool wildcard = f.listen == "0.0.0.0" || f.listen == "::" || f.listen.empty();
  const std::string host = wildcard ? HostName() : f.listen;
  return "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(tcp_port);
}

// `gpupool up` on a PostgreSQL store takes the lease once, as a leader-elected server
// would, fences its writes and keeps the lease, so that it never shares the store with
// `gpupool server`s: whichever comes second stands by (a server) or refuses (up).
Status Server::TakeLeaseOnce() {
  GP_ASSIGN_OR_RETURN(leases_, store::OpenPostgresLeaseStore(StoreSpec(options_)));
  LeadershipOptions lo;
  lo.id = NewControllerId(HostName(), options_.port);
  lo.address = AdvertisedAddress(options_.port);
  lo.lease_ms = options_.lease_ms;
  lead_ = std::make_unique<Leadership>(leases_.get(), lo, SystemClock::Get());
  Result<int64_t> epoch = lead_->TryLead();
  if (!epoch.ok()) {
    return epoch.status().WithContext(
        "gpupool up runs a one-machine pool and cannot share its store: run `gpupool server` "
        "(several share a store, one leads) and agents instead, or give up a store of its "
        "own");
  }
  store_->SetFence(*epoch, [this](const Status& why) { ExitLostLeadership(why); });
  Leadership* lead = lead_.get();
  lease_thread_ = std::thread([lead, this] {
    if (Status kept = lead->KeepLease(keeper_stop_); !kept.ok()) ExitLostLeadership(kept);
    lead->Release();
  });
  return Status::Ok();
}

// `gpupool server` on PostgreSQL: any number of these share the database and one leads.
// Until it leads, this one answers as a standby.
Status Server::StartStandby() {
  GP_ASSIGN_OR_RETURN(leases_, store::OpenPostgresLeaseStore(StoreSpec(options_)));
  // The lease's holder is known once lead_ is made, after the listener (whose port it
  // names); until then a standby names no leader.
  GP_RETURN_IF_ERROR(
      StartListening([this](const net::HttpRequest& r, std::shared_ptr<net::HttpResponder> out) {
        Leadership* l = lead_ptr_.load();
        if (controller::Api* api = serving_.load()) {
          // A leader answers only while its lease is sure: not from memory another
          // controller may have moved past while this one was paused.
          return ServeWhileLeading(*l, r, std::move(out), [api](auto& req, auto responder) {
            api->Handle(req, std::move(responder));
          });
        }
        out->Complete(StandbyAnswer(r, l != nullptr ? l->LeaderAddress() : ""));
      }));
  LeadershipOptions lo;
  lo.address = AdvertisedAddress(http_->tcp_port());
  lo.id = NewControllerId(HostName(), http_->tcp_port());
  lo.lease_ms = options_.lease_ms;
  controller_id_ = lo.id;
  advertised_ = lo.address;
  lead_ = std::make_unique<Leadership>(leases_.get(), lo, SystemClock::Get());
  lead_ptr_ = lead_.get();
  lease_thread_ = std::thread([this] { LeadWhenElected(); });
  return Status::Ok();
}

void Server::LeadWhenElected() {
  std::optional<int64_t> epoch = lead_->WaitToLead(stop_);
  if (!epoch) return;
  // From here every write checks the epoch; one refused means another leads.
  store_->SetFence(*epoch, [this](const Status& why) { ExitLostLeadership(why); });
  // The lease is renewed from the moment it is taken until this controller has stopped
  // using the store: loading a large pool's state may take longer than the lease, which
  // must not run out meanwhile, nor during a stop that comes while it loads. Until the
  // state is loaded this controller answers as a standby (serving_ is null). The keeper
  // exits the process when the lease is lost.
  Leadership* lead = lead_.get();
  std::atomic<bool> done{false};  // ends the keeper
  std::thread keeper([this, lead, &done] {
    if (Status kept = lead->KeepLease(done); !kept.ok()) ExitLostLeadership(kept);
  });
  const Status loaded = CreateController();
  if (loaded.ok() && !stop_) {
    api_->SetControllersView([lead] { return lead->Describe(); });
    api_->Start();  // the services' threads: telemetry, accounting
    controller_->Start();
    serving_ = api_.get();
    if (options_.on_lead) options_.on_lead(*epoch);
    stop_.wait(false);  // until Stop()
  }
  if (api_) api_->Stop();
  if (controller_) controller_->Stop();
  done = true;
  lead->Interrupt();
  keeper.join();
  lead_->Release();
  if (!loaded.ok()) {
    std::lock_guard lock(failed_mu_);
    failed_ = loaded;
    failed_cv_.notify_all();  // Wait returns it
  }
}

Status Server::Start() {
  GP_RETURN_IF_ERROR(OpenStore());
  const bool postgres = store::IsPostgresSpec(StoreSpec(options_));
  if (postgres && options_.lease == ServerOptions::Lease::kStandBy) return StartStandby();
  // One controller that owns its store alone (`up`, and `server` on SQLite).
  if (postgres) GP_RETURN_IF_ERROR(TakeLeaseOnce());
  GP_RETURN_IF_ERROR(CreateController());
  api_->Start();  // the services' threads: telemetry, accounting
  controller::Api* api = api_.get();
  Leadership* lead = lead_.get();  // null on SQLite: no lease, nothing checked
  GP_RETURN_IF_ERROR(StartListening([api, lead](const net::HttpRequest& r,
                                                std::shared_ptr<net::HttpResponder> out) {
    if (lead == nullptr) return api->Handle(r, std::move(out));
    ServeWhileLeading(*lead, r, std::move(out),
                      [api](auto& req, auto responder) { api->Handle(req, std::move(responder)); });
  }));
  controller_->Start();
  return Status::Ok();
}

Status Server::Wait(std::stop_token stop) {
  std::unique_lock lock(failed_mu_);
  // A stop request wakes the wait at once (the token notifies failed_cv_), as a failure does.
  if (!failed_cv_.wait(lock, stop, [this] { return !failed_.ok(); })) return Status::Ok();
  return failed_;
}

void Server::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stop_ = true;
  stop_.notify_all();                        // a leader's lease thread waits for it
  if (lead_ != nullptr) lead_->Interrupt();  // a standby's wait ends at once
  if (options_.lease == ServerOptions::Lease::kStandBy && lead_ != nullptr) {
    // The lease thread stops what it built, then gives the lease up.
    if (lease_thread_.joinable()) lease_thread_.join();
  } else {
    if (api_) api_->Stop();
    if (controller_) controller_->Stop();
  }
  {
    std::lock_guard lock(http_mu_);  // a drain under way ends with the process
    http_stopped_ = true;
  }
  if (http_) http_->Stop();
  // `up`'s keeper gives the lease up last, once nothing here writes.
  keeper_stop_ = true;
  if (lead_ != nullptr) lead_->Interrupt();
  if (lease_thread_.joinable()) lease_thread_.join();
  if (disk_thread_) disk_thread_->Stop();
}

}  // namespace gpupool::server
