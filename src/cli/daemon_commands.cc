#include "cli/daemon_commands.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "agent/cdi_spec.h"
#include "agent/container.h"
#include "agent/launcher.h"
#include "agent/runtime/agent_loop.h"
#include "agent/shim.h"
#include "cli/config_file.h"
#include "common/file_util.h"
#include "common/strings.h"
#include "controller/api.h"
#include "controller/auth.h"
#include "controller/connection_class.h"
#include "controller/controller.h"
#include "gpu/gpu_backend.h"
#include "gpu/telemetry.h"
#include "net/http_server.h"
#include "server/leadership.h"
#include "server/local_agent_token.h"
#include "store/lease.h"
#include "store/open_store.h"
#include "store/store.h"

namespace gpupool::cli {
namespace {

using agent::AgentLoop;
using agent::AgentLoopOptions;
using server::Leadership;
using server::LeadershipOptions;
using server::LocalAgentToken;
using server::NewControllerId;
using server::StandbyAnswer;

namespace fs = std::filesystem;

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("gpupool") : p.string();
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

int Fail(const Status& s) {
  std::cerr << "gpupool: " << s.message() << "\n";
  return 1;
}

// A stand-in 8-GPU node for machines without GPUs, so `make run` works anywhere.
gpu::NodeInfo FakeEightGpuNode() {
  gpu::NodeInfo n;
  n.hostname = Hostname();
  n.nvidia = gpu::DriverInfo{"fake", "13.0", {}, {}};
  for (int i = 0; i < 8; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "Fake GPU F100 16GB";
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
    g.uuid = uuid;
    char bus[32];
    std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + i);
    g.pci_bus_id = bus;
    g.memory_total_bytes = uint64_t{16} << 30;
    g.compute_capability = gpu::ComputeCapability{8, 0};
    g.minor_number = i;
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    g.backend = "fake";
    n.gpus.push_back(g);
  }
  return n;
}

struct NodeChoice {
  gpu::NodeInfo node;
  bool stand_in = false;
};

Result<NodeChoice> DiscoverForAgent(const std::string& fake_file, bool allow_stand_in) {
  gpu::DiscoveryOptions opts = gpu::WithEnvironmentOverrides({});
  if (!fake_file.empty()) {
    opts.backends = {"fake"};
    opts.fake_node_file = fake_file;
  }
  GP_ASSIGN_OR_RETURN(gpu::NodeInfo node, gpu::DiscoverNode(opts));
  if (!node.gpus.empty() || !allow_stand_in) return NodeChoice{std::move(node), false};
  return NodeChoice{FakeEightGpuNode(), true};
}

// The agent's telemetry source for the node it runs (the fake file's profile with --fake);
// null, with a note, where none fits: the agent then sends no telemetry.
std::shared_ptr<gpu::TelemetrySampler> TelemetrySamplerFor(const std::string& fake_file,
                                                           const gpu::NodeInfo& node) {
  gpu::DiscoveryOptions opts = gpu::WithEnvironmentOverrides({});
  opts.fake_node_file = fake_file;
  Result<std::unique_ptr<gpu::TelemetrySampler>> s = gpu::CreateTelemetrySampler(opts, node);
  if (!s.ok()) {
    spdlog::info("agent: no GPU telemetry: {}", s.status().message());
    return nullptr;
  }
  // What the source lacks for good (Xid events, say): said once here, not every sample.
  if (const std::string note = (*s)->note(); !note.empty()) {
    spdlog::info("agent: GPU telemetry: {}", note);
  }
  return std::shared_ptr<gpu::TelemetrySampler>(std::move(*s));
}

struct ServerParts {
  ServerParts() = default;
  ServerParts(ServerParts&&) = default;
  ServerParts& operator=(ServerParts&&) = default;
  ~ServerParts() { StopKeeper(); }
  // Ends the lease keeper (which gives the lease up) and waits for it.
  void StopKeeper() {
    if (!keeper.joinable()) return;
    *keeper_stop = true;
    keeper.join();
  }

  // `up` on PostgreSQL: the lease it holds against `gpupool server`s on the same store,
  // renewed by `keeper` until the stop.
  std::unique_ptr<store::LeaseStore> leases;
  std::unique_ptr<Leadership> lead;
  std::shared_ptr<std::atomic<bool>> keeper_stop = std::make_shared<std::atomic<bool>>(false);
  std::thread keeper;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<controller::Controller> controller;
  std::unique_ptr<controller::EnvInspector> inspector;  // images inspected at submit
  std::unique_ptr<controller::Api> api;
  std::unique_ptr<net::HttpServer> http;
};

struct ServerFlags {
  std::string state_dir;
  std::string store_spec;  // --store; empty: sqlite:STATE_DIR/gpupool.db
  int port = 8421;
  std::string listen = "127.0.0.1";
  std::string admin_group;
  std::string placement_policy = "default";
  std::string queue_policy = "fair";
  std::string start_rule = "easy";
  int node_timeout_s = 30;
  int exec_client_timeout_s = 15;
  std::vector<std::string> podman_args;  // global podman flags for image inspection
  std::string advertise;  // `server`: the API address other machines use (--advertise)
  int lease_ms = 5000;    // `server` on PostgreSQL: the leadership lease (--lease-ms)
  // GPU telemetry (controller/telemetry.h); durations as 90s, 30m, 7d or seconds.
  std::string telemetry_retention = "7d";
  double idle_threshold_pct = 5;
  std::string idle_after = "30m";
  std::string idle_action;  // "" off, warn, cancel
  std::string idle_cancel_after = "0";
  // Bounds on the queue (controller.h, ControllerOptions).
  int64_t max_queued_per_user = controller::ControllerOptions{}.max_queued_per_user;
  int64_t max_queued_total = controller::ControllerOptions{}.max_queued_total;
  int max_array_size = controller::ControllerOptions{}.max_array_size;
  int64_t max_submission_bytes = controller::ControllerOptions{}.max_submission_bytes;
  int64_t max_queued_bytes_per_user = controller::ControllerOptions{}.max_queued_bytes_per_user;
  int64_t max_queued_bytes_total = controller::ControllerOptions{}.max_queued_bytes_total;
  // Connections to the API (docs/security.md, "Connection exhaustion").
  int max_connections = 0;  // 0: the open-files limit less a tenth
  int max_connections_per_uid = 256;
  int max_connections_per_address = 256;
  int max_pending_connections_per_peer = 64;
  int request_head_timeout_s = 10;
};

// "90" or "90s", "30m", "12h", "7d" -> seconds; InvalidArgument naming `flag`.
Result<int64_t> ParseSeconds(const std::string& flag, const std::string& text) {
  int64_t unit = 1;
  std::string digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 's':
        unit = 1;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      default:
        unit = 0;
    }
    if (unit != 0)
      digits.pop_back();
    else
      unit = 1;
  }
  std::optional<int64_t> n = ParseInt64(digits);
  if (!n || *n < 0 || *n > int64_t{10} * 366 * 86400 / unit) {
    return Status::InvalidArgument(flag + ": '" + text +
                                   "' is not a duration; use seconds or 90s, 30m, 12h, 7d");
  }
  return *n * unit;
}

Result<controller::TelemetryOptions> TelemetryOptionsOf(const ServerFlags& f) {
  controller::TelemetryOptions o;
  GP_ASSIGN_OR_RETURN(o.retention_s, ParseSeconds("--telemetry-retention", f.telemetry_retention));
  o.idle_below_pct = f.idle_threshold_pct;
  GP_ASSIGN_OR_RETURN(o.idle_after_s, ParseSeconds("--idle-after", f.idle_after));
  o.idle_action = f.idle_action == "off" ? "" : f.idle_action;
  GP_ASSIGN_OR_RETURN(o.idle_cancel_after_s,
                      ParseSeconds("--idle-cancel-after", f.idle_cancel_after));
  GP_RETURN_IF_ERROR(controller::ValidateTelemetryOptions(o));
  return o;
}

// Files with job data (the store, job specs and logs) must be private: the daemons create
// everything with umask 077, and the state directory is made 0711 so that users reach
// the socket inside it (0666) but can list and read nothing else.
void PrivateUmask() { ::umask(077); }

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

std::string StoreSpec(const ServerFlags& f) {
  return f.store_spec.empty() ? "sqlite:" + f.state_dir + "/gpupool.db" : f.store_spec;
}

Status OpenServerStore(const ServerFlags& f, ServerParts* p) {
  GP_RETURN_IF_ERROR(PrepareStateDir(f.state_dir));
  const std::string db = f.state_dir + "/gpupool.db";
  const std::string spec = StoreSpec(f);
  MakeStoreFilesPrivate(db);
  GP_ASSIGN_OR_RETURN(p->store, store::OpenStore(spec));
  MakeStoreFilesPrivate(db);
  spdlog::info("store: {}", store::DescribeStoreSpec(spec));  // never with a password
  return Status::Ok();
}

controller::ControllerOptions ControllerOptionsOf(const ServerFlags& f) {
  controller::ControllerOptions co;
  co.placement_policy = f.placement_policy;
  co.queue_policy = f.queue_policy;
  co.start_rule = f.start_rule;
  co.node_timeout_us = int64_t{f.node_timeout_s} * 1'000'000;
  co.exec_client_timeout_us = int64_t{f.exec_client_timeout_s} * 1'000'000;
  co.max_queued_per_user = f.max_queued_per_user;
  co.max_queued_total = f.max_queued_total;
  co.max_array_size = f.max_array_size;
  co.max_submission_bytes = f.max_submission_bytes;
  co.max_queued_bytes_per_user = f.max_queued_bytes_per_user;
  co.max_queued_bytes_total = f.max_queued_bytes_total;
  return co;
}

// The controller and its API over the open store (this loads the pool's state).
Status CreateController(const ServerFlags& f, ServerParts* p) {
  const controller::ControllerOptions co = ControllerOptionsOf(f);
  GP_ASSIGN_OR_RETURN(p->controller,
                      controller::Controller::Create(p->store.get(), SystemClock::Get(), co));
  p->inspector = controller::NewPodmanInspector(f.podman_args, SystemClock::Get());
  p->api =
      std::make_unique<controller::Api>(p->controller.get(), p->store.get(), SystemClock::Get(),
                                        controller::AuthOptions{f.admin_group}, p->inspector.get());
  GP_ASSIGN_OR_RETURN(controller::TelemetryOptions telemetry, TelemetryOptionsOf(f));
  GP_RETURN_IF_ERROR(p->api->ConfigureTelemetry(telemetry));
  return Status::Ok();
}

Result<std::unique_ptr<net::HttpServer>> StartApiServer(const ServerFlags& f, store::Store* store,
                                                        net::HttpHandler handler) {
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
  ho.unix_socket_path = f.state_dir + "/gpupool.sock";
  if (f.port > 0) {
    ho.tcp_host = f.listen;
    ho.tcp_port = f.port;
  }
  ho.may_block = &controller::Api::MayBlock;
  // A job's submission of max-submission-bytes fits, as JSON.
  ho.max_body_bytes = controller::MaxRequestBodyBytes(ControllerOptionsOf(f));
  ho.max_body_hint = " (a job's submission may be up to " + std::to_string(f.max_submission_bytes) +
                     " bytes: the server's max-submission-bytes, in the [server] section of its "
                     "config file)";
  ho.max_connections = f.max_connections;
  ho.max_connections_per_uid = f.max_connections_per_uid;
  ho.max_connections_per_address = f.max_connections_per_address;
  ho.max_pending_per_peer = f.max_pending_connections_per_peer;
  ho.head_timeout_ms = f.request_head_timeout_s * 1000;
  // Agents (node tokens) get the connections kept for them; the classifier lives as long
  // as the server that calls it.
  auto classifier = std::make_shared<controller::ConnectionClassifier>(store, SystemClock::Get());
  ho.classify = [classifier](const net::HttpRequest& head) { return classifier->Classify(head); };
  return net::StartHttpServer(ho, std::move(handler));
}

// Exit status of a controller that lost the leadership (EX_TEMPFAIL): its unit starts it
// again, as a standby.
constexpr int kExitLostLeadership = 75;

[[noreturn]] void ExitLostLeadership(const Status& why) {
  spdlog::critical(
      "leadership lost, exiting so that this controller starts again as a "
      "standby: {}",
      why.message());
  spdlog::default_logger()->flush();
  std::cerr << "gpupool: leadership lost: " << why.message() << std::endl;
  std::_Exit(kExitLostLeadership);
}

// The address other machines reach this controller at: --advertise, else http://LISTEN:PORT
// (this host's name for a wildcard --listen), else the Unix socket.
std::string AdvertisedAddress(const ServerFlags& f, int tcp_port) {
  if (!f.advertise.empty()) return f.advertise;
  if (f.port <= 0) return "unix:" + f.state_dir + "/gpupool.sock";
  const bool wildcard = f.listen == "0.0.0.0" || f.listen == "::" || f.listen.empty();
  const std::string host = wildcard ? Hostname() : f.listen;
  return "http://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(tcp_port);
}

// `gpupool up` on a PostgreSQL store takes the lease once, as a leader-elected server
// would, fences its writes and keeps the lease, so that it never shares the store with
// `gpupool server`s: whichever comes second stands by (a server) or refuses (up).
Status HoldLeaseForUp(const ServerFlags& f, ServerParts* p) {
  GP_ASSIGN_OR_RETURN(p->leases, store::OpenPostgresLeaseStore(StoreSpec(f)));
  LeadershipOptions lo;
  lo.id = NewControllerId(Hostname(), f.port);
  lo.address = AdvertisedAddress(f, f.port);
  lo.lease_ms = f.lease_ms;
  p->lead = std::make_unique<Leadership>(p->leases.get(), lo, SystemClock::Get());
  Result<int64_t> epoch = p->lead->TryLead();
  if (!epoch.ok()) {
    return epoch.status().WithContext(
        "gpupool up runs a one-machine pool and cannot share its store: run `gpupool server` "
        "(several share a store, one leads) and agents instead, or give up a store of its "
        "own");
  }
  p->store->SetFence(*epoch, [](const Status& why) { ExitLostLeadership(why); });
  Leadership* lead = p->lead.get();
  p->keeper = std::thread([lead, stop = p->keeper_stop] {
    if (Status kept = lead->KeepLease(*stop); !kept.ok()) ExitLostLeadership(kept);
    lead->Release();
  });
  return Status::Ok();
}

// One controller that owns its store alone (`up`, and `server` on SQLite).
Result<ServerParts> StartServer(const ServerFlags& f) {
  ServerParts p;
  GP_RETURN_IF_ERROR(OpenServerStore(f, &p));
  if (store::IsPostgresSpec(StoreSpec(f))) GP_RETURN_IF_ERROR(HoldLeaseForUp(f, &p));
  GP_RETURN_IF_ERROR(CreateController(f, &p));
  controller::Api* api = p.api.get();
  GP_ASSIGN_OR_RETURN(p.http, StartApiServer(f, p.store.get(), [api](const net::HttpRequest& r) {
                        return api->Handle(r);
                      }));
  p.controller->Start();
  return p;
}

// `gpupool server` on PostgreSQL: any number of these share the database and one leads
// (leadership.h). Until it leads, this one answers as a standby.
int RunLeaderElectedServer(const ServerFlags& f) {
  ServerParts p;
  if (Status s = OpenServerStore(f, &p); !s.ok()) return Fail(s);
  Result<std::unique_ptr<store::LeaseStore>> leases = store::OpenPostgresLeaseStore(StoreSpec(f));
  if (!leases.ok()) return Fail(leases.status());
  std::atomic<controller::Api*> serving{nullptr};
  std::atomic<Leadership*> lead_ptr{nullptr};  // set once the controller has its id
  Result<std::unique_ptr<net::HttpServer>> http =
      StartApiServer(f, p.store.get(), [&serving, &lead_ptr](const net::HttpRequest& r) {
        if (controller::Api* api = serving.load()) return api->Handle(r);
        Leadership* l = lead_ptr.load();
        return StandbyAnswer(r, l != nullptr ? l->LeaderAddress() : "");
      });
  if (!http.ok()) return Fail(http.status());
  LeadershipOptions lo;
  lo.address = AdvertisedAddress(f, (*http)->tcp_port());
  lo.id = NewControllerId(Hostname(), (*http)->tcp_port());
  lo.lease_ms = f.lease_ms;
  Leadership lead(leases->get(), lo, SystemClock::Get());
  lead_ptr = &lead;
  std::cout << "gpupool server: controller " << lo.id << " (reached at " << lo.address
            << "), API on unix:" << f.state_dir << "/gpupool.sock";
  if (f.port > 0) std::cout << " and http://" << f.listen << ":" << (*http)->tcp_port();
  std::cout << "\n  standby until it holds the lease (" << f.lease_ms << " ms)\n" << std::flush;
  std::optional<int64_t> epoch = lead.WaitToLead(g_stop);
  if (!epoch) {
    (*http)->Stop();
    return 0;
  }
  // From here every write checks the epoch; one refused means another leads.
  p.store->SetFence(*epoch, [](const Status& why) { ExitLostLeadership(why); });
  if (Status s = CreateController(f, &p); !s.ok()) {
    lead.Release();
    (*http)->Stop();
    return Fail(s);
  }
  p.api->SetControllersView([&lead] { return lead.Describe(); });
  p.controller->Start();
  serving = p.api.get();
  std::cout << "gpupool server: leading at epoch " << *epoch << "\n" << std::flush;
  Status kept = lead.KeepLease(g_stop);
  if (!kept.ok()) ExitLostLeadership(kept);
  p.api->Stop();
  p.controller->Stop();
  lead.Release();
  (*http)->Stop();
  return 0;
}

void AddServerFlags(CLI::App* cmd, ServerFlags* f) {
  cmd->add_option("--state-dir", f->state_dir, "where the store, socket and job logs live");
  cmd->add_option("--store", f->store_spec,
                  "the store: sqlite:PATH, or a PostgreSQL connection string "
                  "(postgresql://USER@HOST/DB, host=... dbname=...; the password from "
                  "PGPASSFILE or ~/.pgpass); default sqlite:STATE_DIR/gpupool.db");
  cmd->add_option("--port", f->port, "TCP port on --listen for the API (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--listen", f->listen, "TCP address for the API")->capture_default_str();
  cmd->add_option("--admin-group", f->admin_group, "members of this group are admins");
  cmd->add_option("--policy", f->placement_policy, "placement policy")->capture_default_str();
  cmd->add_option("--queue", f->queue_policy, "queue policy: fifo, priority, sjf, fair")
      ->capture_default_str();
  cmd->add_option("--start-rule", f->start_rule, "strict, easy (EASY backfill) or skip")
      ->capture_default_str();
  cmd->add_option("--node-timeout", f->node_timeout_s,
                  "seconds without a poll before a node's jobs are LOST")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--exec-client-timeout", f->exec_client_timeout_s,
                  "seconds without a word from the client of an interactive session (gpupool "
                  "run, exec --pty) before it is hung up")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  // Issue 25 item 7 (queue flooding): Slurm-like defaults, so that no one user, and not
  // all together, can fill the store's disk and the controller's memory with queued jobs.
  cmd->add_option("--max-queued-per-user", f->max_queued_per_user,
                  "jobs one user may have queued (pending or held; an array counts each "
                  "element), unless `gpupool limits` sets their max_queued")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}));
  cmd->add_option("--max-queued-total", f->max_queued_total,
                  "jobs all users together may have queued")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}));
  cmd->add_option("--max-array-size", f->max_array_size, "elements one --array may have")
      ->capture_default_str()
      ->check(CLI::Range(1, jobs::kMaxArraySize));
  // And on bytes: the job bounds alone let one user hold 10,000 x 1 MiB of memory.
  cmd->add_option("--max-submission-bytes", f->max_submission_bytes,
                  "bytes of one job's submission: its command, environment variables and "
                  "paths, each string with its NUL (as ARG_MAX counts them)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4096}, int64_t{64} << 20));
  cmd->add_option("--max-queued-bytes-per-user", f->max_queued_bytes_per_user,
                  "bytes of submissions one user's queued jobs may hold (an array's elements "
                  "share one)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 40));
  cmd->add_option("--max-queued-bytes-total", f->max_queued_bytes_total,
                  "bytes of submissions all users' queued jobs together may hold")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{4096}, int64_t{1} << 40));
  cmd->add_option("--telemetry-retention", f->telemetry_retention,
                  "how long GPU telemetry points (1 per minute per GPU and job) are kept")
      ->capture_default_str();
  cmd->add_option("--idle-threshold", f->idle_threshold_pct,
                  "a running job whose GPUs all stay below this utilisation (percent) for "
                  "--idle-after is idle (flagged in gpupool queue)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--idle-after", f->idle_after, "see --idle-threshold")->capture_default_str();
  cmd->add_option("--idle-action", f->idle_action,
                  "what the pool does about idle jobs: warn (a warning on the job) or cancel "
                  "(after --idle-cancel-after more); default off")
      ->check(CLI::IsMember({"off", "warn", "cancel"}));
  cmd->add_option("--idle-cancel-after", f->idle_cancel_after,
                  "with --idle-action cancel: how much longer than --idle-after an idle job "
                  "runs (warned) before it is cancelled")
      ->capture_default_str();
  cmd->add_option("--max-connections", f->max_connections,
                  "API connections open at once, every listener together (0 = the open-files "
                  "limit, raised to its hard limit, less a tenth); a quarter is kept for agents "
                  "and root")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-connections-per-uid", f->max_connections_per_uid,
                  "API connections of one local user (Unix socket, or TCP from this host) with "
                  "a request under way; more are answered 503 (root and the server's own uid "
                  "are exempt)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-connections-per-address", f->max_connections_per_address,
                  "API connections from one remote address with a request under way; more are "
                  "answered 503 (agents' node tokens are exempt)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-pending-connections-per-peer", f->max_pending_connections_per_peer,
                  "API connections of one uid or address that have not shown who they are (no "
                  "complete request head yet, idle between requests, no valid token); a new "
                  "one past it closes the oldest")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--request-head-timeout", f->request_head_timeout_s,
                  "seconds a new API connection has to send its whole request head (request "
                  "line and headers), however it trickles in")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
}

// How the agent runs container jobs: `agent` and `up` share these flags.
struct ContainerFlags {
  bool allow_unisolated_devices = false;
  std::string cdi_kind = "gpupool.local/gpu";
  std::string dev_root = "/dev";
  std::string podman = "podman";
  std::vector<std::string> podman_args;
};

void AddContainerFlags(CLI::App* cmd, ContainerFlags* f) {
  cmd->add_option("--cdi-kind", f->cdi_kind,
                  "kind of the CDI spec the agent writes for container jobs (VENDOR/CLASS)")
      ->capture_default_str();
  cmd->add_option("--dev-root", f->dev_root,
                  "where the host's GPU device nodes live (stand-ins for fake nodes)")
      ->capture_default_str();
  cmd->add_option("--podman", f->podman, "podman binary for container jobs")->capture_default_str();
  cmd->add_option("--podman-arg", f->podman_args,
                  "global podman argument, repeatable: --podman-arg=--root --podman-arg=DIR")
      ->allow_extra_args(false);
  cmd->add_flag("--allow-unisolated-devices", f->allow_unisolated_devices,
                "start process jobs even when the GPUs they were not given cannot be denied "
                "(missing device nodes, no devices cgroup); by default such jobs fail");
}

// What the agent found and wrote for container jobs; the CDI spec is removed on a clean
// shutdown (Cleanup).
struct ContainerSetup {
  agent::ContainerOptions container;
  std::string cdi_kind;
  std::string cdi_error;  // why no spec was written
  std::string cdi_path;   // the spec written, to remove on shutdown
  std::string cdi_notes;  // what writing it did (stand-in libraries, device nodes made)
  bool allow_unisolated_devices = false;
  void Cleanup() {
    if (!cdi_path.empty() && ::unlink(cdi_path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("cannot remove the CDI spec '{}': {}", cdi_path, std::strerror(errno));
    }
    cdi_path.clear();
  }
  std::string Summary() const {
    std::string s = container.unavailable.empty() ? container.note
                                                  : "unavailable (" + container.unavailable + ")";
    s += cdi_path.empty() ? "; no CDI spec (" + cdi_error + "): GPU container jobs fail"
                          : "; CDI spec " + cdi_path + " (kind " + cdi_kind + ")" + cdi_notes;
    return s;
  }
};

// `fake_node`: the node comes from a file; its stand-in driver libraries, if it needs
// any, go under the agent's `state_dir`.
ContainerSetup SetUpContainers(const gpu::NodeInfo& node, const ContainerFlags& f, bool fake_node,
                               const std::string& state_dir) {
  ContainerSetup c;
  agent::ContainerOptions base;
  base.podman = f.podman;
  base.global_args = f.podman_args;
  c.container = agent::DetectContainerOptions(base);
  c.cdi_kind = f.cdi_kind;
  c.allow_unisolated_devices = f.allow_unisolated_devices;
  agent::CdiSpecOptions cdi;
  cdi.kind = f.cdi_kind;
  cdi.dev_root = f.dev_root.empty() ? "/dev" : f.dev_root;
  cdi.hook_path = SelfExe();
  cdi.fake_node = fake_node;
  cdi.stand_in_root = state_dir + "/stand-in-driver";
  std::vector<std::string> notes;
  Result<std::string> path = agent::WriteNodeCdiSpec(node, cdi, &notes);
  for (const std::string& n : notes) c.cdi_notes += "; " + n;
  if (path.ok()) {
    c.cdi_path = *path;
  } else {
    c.cdi_error = path.status().message();
  }
  spdlog::info("agent: container jobs: {}", c.Summary());
  return c;
}

// The slim supervisor binary beside this one (a faster exec per job), else this binary's
// own `agent-shim` subcommand.
std::vector<std::string> ShimCommand() {
  const std::string self = SelfExe();
  const std::string slim = (fs::path(self).parent_path() / "gpupool-agent-shim").string();
  if (::access(slim.c_str(), X_OK) == 0) return {slim};
  return {self, "agent-shim"};
}

// What mpirun runs as its rsh agent in a task: the slim gpupool-exec beside this binary
// (it starts in a third of gpupool's time; mpirun starts one per host at once), else
// this binary's `exec` subcommand.
std::string ExecAgentCommand() {
  const std::string self = SelfExe();
  const std::string slim = (fs::path(self).parent_path() / "gpupool-exec").string();
  if (::access(slim.c_str(), X_OK) == 0) return slim;
  return self + " exec";
}

std::unique_ptr<agent::Launcher> MakeLauncher(const std::string& state_dir,
                                              const agent::ContainerOptions& container) {
  agent::LauncherOptions lo;
  lo.state_dir = state_dir;
  lo.shim_command = ShimCommand();
  lo.container = container;
  return agent::NewProcessLauncher(lo);
}

void SetContainerOptions(const ContainerSetup& c, AgentLoopOptions* ao) {
  ao->allow_unisolated_devices = c.allow_unisolated_devices;
  ao->container = c.container;
  ao->cdi_kind = c.cdi_kind;
  ao->cdi_error = c.cdi_error;
}

// A job reads a file of its own in its job directory (its host file, GPUPOOL_HOSTFILE) by
// path, as its user: every directory on the way must let it through, whatever mode it
// had or was made with (the daemons' umask 077 makes a new one 0700). The state directory,
// when it is the daemon's own, gets execute (traverse) for all added and nothing taken
// away (so a shared one such as /tmp keeps its 1777; a new one becomes 0711); STATE/agent
// is 0711: traversable, not listable. What is inside keeps its own mode (node token 0600,
// job directories 0711, their spec and status 0600 root's, the host file and logs 0600
// the job user's). Returns STATE/agent.
Result<std::string> OpenAgentStateDir(const std::string& state_dir) {
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec) {
    return Status::Unavailable("cannot create the state directory '" + state_dir +
                               "': " + ec.message() + ": pass a writable --state-dir");
  }
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("the state directory '" + state_dir + "' is not a directory");
  }
  if (st.st_uid == ::geteuid() && (st.st_mode & 0111) != 0111 &&
      ::chmod(state_dir.c_str(), (st.st_mode & 07777) | 0111) != 0) {
    return Status::Unavailable("cannot make the state directory '" + state_dir +
                               "' traversable (chmod a+x): " + std::strerror(errno));
  }
  const std::string dir = state_dir + "/agent";
  if (::mkdir(dir.c_str(), 0711) != 0 && errno != EEXIST) {
    return Status::Unavailable("cannot create '" + dir + "': " + std::strerror(errno));
  }
  if (::chmod(dir.c_str(), 0711) != 0) {
    return Status::Unavailable("cannot make '" + dir +
                               "' traversable (chmod 0711): " + std::strerror(errno));
  }
  // Jobs run as other users only under a root agent. A directory on the way that they
  // cannot pass and that is not ours to change is named.
  const fs::path absolute = fs::absolute(dir, ec);
  fs::path prefix;
  for (const fs::path& part : absolute) {
    prefix /= part;
    struct stat up {};
    if (::geteuid() == 0 && ::stat(prefix.c_str(), &up) == 0 && (up.st_mode & S_IXOTH) == 0) {
      spdlog::warn(
          "'{}' (mode {:o}) does not let other users through: jobs of users other than root "
          "cannot read their host file (GPUPOOL_HOSTFILE) under '{}'; chmod o+x it or choose "
          "another --state-dir",
          prefix.string(), up.st_mode & 07777, dir);
      break;
    }
  }
  return dir;
}

void WaitForStop() {
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// The config file (docs/deploy.md): [server] takes the long options of `gpupool server`,
// [agent] those of `gpupool agent`. One --config for whichever command runs.
std::string g_config_path;
CLI::App* g_server_cmd = nullptr;
CLI::App* g_agent_cmd = nullptr;

void AddConfigFlag(CLI::App* cmd) {
  cmd->add_option("--config", g_config_path,
                  std::string("INI file of options; command-line options win (default: ") +
                      kDefaultConfigPath + " when it exists; '' for none)");
}

// Sets the options of `cmd` that its command line left out from the file's `sections`.
// Exit status 2 and the message when the file is wrong.
bool ApplyConfigFile(const std::vector<std::string>& sections, CLI::App* cmd, int* exit_code) {
  std::string path = g_config_path;
  if (path.empty()) {
    // --config '' reads no file (tests, a second pool on a packaged host).
    if (cmd->count("--config") > 0 || ::access(kDefaultConfigPath, F_OK) != 0) return true;
    path = kDefaultConfigPath;
  }
  Result<ConfigFile> cfg = ReadConfigFile(path);
  Status s = cfg.status();
  if (s.ok()) {
    s = CheckConfigKeys(
        *cfg, {{"server", ConfigKeysOf(*g_server_cmd)}, {"agent", ConfigKeysOf(*g_agent_cmd)}});
  }
  if (s.ok()) s = ApplyConfig(*cfg, sections, {"token"}, cmd);
  if (!s.ok()) {
    Fail(s);
    *exit_code = 2;
    return false;
  }
  spdlog::info("configuration file: {}", path);
  return true;
}

}  // namespace

std::string DefaultStateDir() {
  if (geteuid() == 0) return "/var/lib/gpupool";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x != nullptr && *x == '/') {
    return std::string(x) + "/gpupool";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "/tmp") + "/.local/state/gpupool";
}

void RegisterDaemonCommands(CLI::App& app, cli::CommandContext& ctx) {
  // --- up ---
  // Flag storage must outlive this function (the callbacks run later); statics are
  // neither dangling nor leaked.
  static ServerFlags up_flags_storage;
  static std::string up_fake_storage;
  static ContainerFlags up_container_storage;
  static int up_telemetry_interval_storage = 5;
  int* up_telemetry_interval = &up_telemetry_interval_storage;
  ServerFlags* up_flags = &up_flags_storage;
  std::string* up_fake = &up_fake_storage;
  ContainerFlags* up_container = &up_container_storage;
  CLI::App* up = app.add_subcommand("up", "run the whole pool on this machine: controller + agent");
  AddServerFlags(up, up_flags);
  up->add_option("--fake", *up_fake, "use this node description instead of discovery");
  up->add_option("--telemetry-interval", *up_telemetry_interval,
                 "seconds between GPU telemetry samples of the local agent (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  AddContainerFlags(up, up_container);
  AddConfigFlag(up);
  up->callback([&ctx, up, up_flags, up_fake, up_container, up_telemetry_interval] {
    if (!ApplyConfigFile({"server", "agent"}, up, &ctx.exit_code)) return;
    InstallSignalHandlers();
    PrivateUmask();
    ServerFlags f = *up_flags;
    if (f.state_dir.empty()) f.state_dir = DefaultStateDir();
    f.podman_args = up_container->podman_args;  // one podman store for inspection and jobs
    Result<NodeChoice> node = DiscoverForAgent(*up_fake, /*allow_stand_in=*/true);
    if (!node.ok()) {
      ctx.exit_code = Fail(node.status());
      return;
    }
    Result<ServerParts> server = StartServer(f);
    if (!server.ok()) {
      ctx.exit_code = Fail(server.status());
      return;
    }
    // The local agent authenticates like a remote one: with a node token, kept in its
    // state directory and reused by every start.
    Result<std::string> token = LocalAgentToken(*server->store, f.state_dir + "/agent/node-token",
                                                Hostname(), SystemClock::Get()->NowMicros());
    if (!token.ok()) {
      ctx.exit_code = Fail(token.status().WithContext("the local agent's node token"));
      return;
    }
    net::ServerAddress addr;
    addr.kind = net::ServerAddress::Kind::kUnix;
    addr.path = f.state_dir + "/gpupool.sock";
    if (Result<std::string> agent_dir = OpenAgentStateDir(f.state_dir); !agent_dir.ok()) {
      ctx.exit_code = Fail(agent_dir.status());
      return;
    }
    ContainerSetup containers = SetUpContainers(
        node->node, *up_container, node->stand_in || !up_fake->empty(), f.state_dir + "/agent");
    std::unique_ptr<agent::Launcher> launcher =
        MakeLauncher(f.state_dir + "/agent", containers.container);
    AgentLoopOptions ao;
    ao.node_name = Hostname();
    ao.state_dir = f.state_dir + "/agent";
    ao.node = node->node;
    ao.fake_node = node->stand_in || !up_fake->empty();
    ao.telemetry_interval_s = *up_telemetry_interval;
    if (ao.telemetry_interval_s > 0) ao.sampler = TelemetrySamplerFor(*up_fake, ao.node);
    ao.exec_agent = ExecAgentCommand();
    ao.server_for_jobs = addr.ToString();
    SetContainerOptions(containers, &ao);
    AgentLoop loop(ao, net::HttpClient(addr, *token), launcher.get());
    std::thread agent_thread([&loop] { loop.Run(); });

    const size_t ngpus = node->node.gpus.size();
    if (node->stand_in) {
      std::cout << "No GPUs were found on this machine, so gpupool is running with a FAKE node of "
                   "8 GPUs (jobs run for real, but see no real GPU).\n"
                << "To describe your own node instead: gpupool up --fake "
                << (FindGpupoolData("examples/nodes").empty()
                        ? std::string("NODE.json (a `gpupool gpus --json` capture)")
                        : FindGpupoolData("examples/nodes") + "/FILE.json")
                << "\n";
    }
    std::cout << "gpupool is up on " << Hostname() << " with " << ngpus << " GPU"
              << (ngpus == 1 ? "" : "s") << ".\n"
              << "  API:       unix:" << addr.path;
    if (f.port > 0) std::cout << " and http://" << f.listen << ":" << server->http->tcp_port();
    std::cout << "\n  State:     " << f.state_dir << "\n"
              << "  Containers: " << containers.Summary() << "\n"
              << "Submit a job from another terminal:\n"
              << "  export GPUPOOL_SERVER=unix:" << addr.path << "\n"
              << "  gpupool submit --gpus 1 -- sh -c 'echo $CUDA_VISIBLE_DEVICES'\n"
              << "  gpupool queue; gpupool logs 1\n"
              << "Stop with Ctrl-C; running jobs keep running and are picked up on restart.\n"
              << std::flush;
    WaitForStop();
    std::cout << "gpupool: stopping (running jobs keep running and are picked up on restart)"
              << std::endl;
    // The controller first: stopping it ends the local agent's long poll at once, and the
    // API's waits end with it, so nothing here waits out a poll period.
    loop.Stop();
    server->api->Stop();
    server->controller->Stop();
    agent_thread.join();
    containers.Cleanup();
    server->http->Stop();
    server->StopKeeper();  // it gives the lease up
  });

  // --- server ---
  static ServerFlags server_flags_storage;
  ServerFlags* server_flags = &server_flags_storage;
  CLI::App* server =
      app.add_subcommand("server", "run the controller only (REST API, scheduler, store)");
  AddServerFlags(server, server_flags);
  server->add_option("--advertise", server_flags->advertise,
                     "with several controllers (PostgreSQL store): the API address clients and "
                     "agents reach this one at (default http://LISTEN:PORT, this host's name "
                     "for a wildcard --listen)");
  server
      ->add_option("--lease-ms", server_flags->lease_ms,
                   "with several controllers (PostgreSQL store): how long a leader that stopped "
                   "renewing keeps the lease before a standby takes over")
      ->capture_default_str()
      ->check(CLI::Range(500, 600000));
  server
      ->add_option("--podman-arg", server_flags->podman_args,
                   "global podman argument for inspecting job images, repeatable")
      ->allow_extra_args(false);
  AddConfigFlag(server);
  server->callback([&ctx, server, server_flags] {
    if (!ApplyConfigFile({"server"}, server, &ctx.exit_code)) return;
    InstallSignalHandlers();
    PrivateUmask();
    ServerFlags f = *server_flags;
    if (f.state_dir.empty()) f.state_dir = DefaultStateDir();
    if (store::IsPostgresSpec(StoreSpec(f))) {
      ctx.exit_code = RunLeaderElectedServer(f);
      return;
    }
    Result<ServerParts> parts = StartServer(f);
    if (!parts.ok()) {
      ctx.exit_code = Fail(parts.status());
      return;
    }
    std::cout << "gpupool server: API on unix:" << f.state_dir << "/gpupool.sock";
    if (f.port > 0) std::cout << " and http://" << f.listen << ":" << parts->http->tcp_port();
    std::cout << "\n" << std::flush;
    WaitForStop();
    parts->api->Stop();
    parts->controller->Stop();
    parts->http->Stop();
  });

  // --- agent ---
  struct AgentFlags {
    std::string controller;
    std::string token;
    std::string state_dir;
    std::string fake;
    std::string node_name;
    std::string address;
    int telemetry_interval_s = 5;
  };
  static AgentFlags af_storage;
  AgentFlags* af = &af_storage;
  CLI::App* agent_cmd = app.add_subcommand("agent", "run a node agent for a controller");
  agent_cmd->add_option("--controller", af->controller,
                        "unix:PATH or http://HOST:PORT, or a comma list of the pool's "
                        "controllers (the agent and its jobs find the leader among them; "
                        "required, here or in the config file)");
  agent_cmd->add_option("--token", af->token, "node join token (or GPUPOOL_TOKEN)");
  agent_cmd->add_option("--state-dir", af->state_dir, "where job state and logs live");
  agent_cmd->add_option("--fake", af->fake, "use this node description instead of discovery");
  agent_cmd->add_option("--node-name", af->node_name, "name of this node (default: hostname)");
  agent_cmd
      ->add_option("--telemetry-interval", af->telemetry_interval_s,
                   "seconds between GPU telemetry samples sent to the controller (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  agent_cmd->add_option("--address", af->address,
                        "the address other nodes reach this one at, for multi-node jobs "
                        "(MASTER_ADDR, host files; default: the address the controller sees "
                        "this agent connect from)");
  static ContainerFlags agent_container_storage;
  ContainerFlags* agent_container = &agent_container_storage;
  AddContainerFlags(agent_cmd, agent_container);
  AddConfigFlag(agent_cmd);
  agent_cmd->callback([&ctx, agent_cmd, af, agent_container] {
    const bool token_flag = agent_cmd->count("--token") > 0;  // GPUPOOL_TOKEN beats the file
    if (!ApplyConfigFile({"agent"}, agent_cmd, &ctx.exit_code)) return;
    if (af->controller.empty()) {
      ctx.exit_code = 2;
      std::cerr << "gpupool: --controller is required: pass it, or set `controller = ...` "
                   "under [agent] in the config file\n";
      return;
    }
    InstallSignalHandlers();
    PrivateUmask();
    Result<std::vector<net::ServerAddress>> controllers =
        net::ParseServerAddressList(af->controller);
    if (!controllers.ok()) {
      ctx.exit_code = 2;
      std::cerr << "gpupool: --controller: " << controllers.status().message() << "\n";
      return;
    }
    std::string token = af->token;
    if (!token_flag) {
      if (const char* t = std::getenv("GPUPOOL_TOKEN"); t != nullptr && *t != '\0') token = t;
    }
    Result<NodeChoice> node = DiscoverForAgent(af->fake, /*allow_stand_in=*/false);
    if (!node.ok()) {
      ctx.exit_code = Fail(node.status());
      return;
    }
    Result<std::string> agent_dir =
        OpenAgentStateDir(af->state_dir.empty() ? DefaultStateDir() : af->state_dir);
    if (!agent_dir.ok()) {
      ctx.exit_code = Fail(agent_dir.status());
      return;
    }
    const std::string state = *agent_dir;
    ContainerSetup containers =
        SetUpContainers(node->node, *agent_container, !af->fake.empty(), state);
    std::unique_ptr<agent::Launcher> launcher = MakeLauncher(state, containers.container);
    AgentLoopOptions ao;
    ao.node_name = af->node_name.empty() ? Hostname() : af->node_name;
    ao.state_dir = state;
    ao.node = node->node;
    ao.fake_node = !af->fake.empty();
    ao.address = af->address;
    ao.telemetry_interval_s = af->telemetry_interval_s;
    if (ao.telemetry_interval_s > 0) ao.sampler = TelemetrySamplerFor(af->fake, ao.node);
    ao.exec_agent = ExecAgentCommand();
    // The whole list: a job's `gpupool exec` finds the leader as the agent does.
    ao.server_for_jobs = net::ServerAddressListToString(*controllers);
    SetContainerOptions(containers, &ao);
    AgentLoop loop(ao, net::HttpClient(*controllers, token), launcher.get());
    std::thread t([&loop] { loop.Run(); });
    std::cout << "gpupool agent: node " << ao.node_name << " with " << ao.node.gpus.size()
              << " GPUs, controller " << net::ServerAddressListToString(*controllers) << "\n"
              << "  containers: " << containers.Summary() << "\n"
              << std::flush;
    WaitForStop();
    loop.Stop();
    t.join();
    containers.Cleanup();
  });

  g_server_cmd = server;
  g_agent_cmd = agent_cmd;

  // --- agent-shim (hidden): the per-job supervisor ---
  CLI::App* shim = app.add_subcommand("agent-shim", "");
  shim->group("");  // hidden from help
  shim->allow_extras();
  shim->prefix_command();
  shim->callback([&ctx, shim] {
    std::vector<std::string> args = shim->remaining();
    std::vector<char*> argv;
    static std::string name = "agent-shim";
    argv.push_back(name.data());
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ctx.exit_code = agent::RunShim(static_cast<int>(argv.size() - 1), argv.data());
  });
}

}  // namespace gpupool::cli
