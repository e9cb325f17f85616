#include "cli/daemon_commands.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "agent/nvml_memory.h"
#include "agent/runtime/node_agent.h"
#include "agent/shim.h"
#include "cli/agent_flags.h"
#include "cli/client/units.h"
#include "cli/config_file.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/host.h"
#include "common/strings.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/telemetry.h"
#include "net/http.h"
#include "net/http_client.h"
#include "protocol/agent_protocol.h"
#include "protocol/http_controller_link.h"
#include "server/local_agent_token.h"
#include "server/server.h"
#include "store/open_store.h"

namespace gpupool::cli {
namespace {

// Ctrl-C and SIGTERM stop the daemons: the stop they wait on (Server::Wait,
// NodeAgent::WaitEnded), requested by the thread that takes those signals.
std::stop_source g_stop;

// SIGINT and SIGTERM are blocked in every thread and taken by one with sigwait: the main
// thread blocks them before it starts any other (threads inherit its mask), so no
// handler runs in the middle of anything and the waiters wake on the stop at once. Jobs
// and every other child start from an empty mask (SpawnCommand sets it). Made once
// per process, before the daemons' threads; its thread ends with the process.
// SIGHUP, which operators send out of habit to reload, is taken too and only logged:
// left to its default it would end the daemon without a word, and there is no reload.
// `how_to_restart`: the restart that does apply a change, for the warning.
void StopOnSignals(std::string how_to_restart) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // Its own handle on the stop's state, which outlives g_stop at the process's exit.
  std::thread([set, stop = g_stop, how = std::move(how_to_restart)]() mutable {
    for (;;) {
      int sig = 0;
      if (::sigwait(&set, &sig) != 0) continue;
      if (sig == SIGHUP) {
        spdlog::warn(
            "SIGHUP: gpupool does not reload its configuration; restart it to apply changes ({})",
            how);
        continue;
      }
      stop.request_stop();
    }
  }).detach();
}

// Files with job data (the store, job specs and logs) must be private: the daemons create
// everything with umask 077 (server.h and node_agent.h say which modes they then give).
void PrivateUmask() { ::umask(077); }

int Fail(const Status& s) {
  std::cerr << "gpupool: " << s.message() << "\n";
  return 1;
}

// A daemon that another one stands in the way of (AlreadyExists: a server or agent on the
// same state directory; an agent under a live node's name tries again instead) exits with 2, as for
// a bad configuration: the packaged units do not restart it (RestartPreventExitStatus=2), since
// trying again cannot help until the operator acts.
int FailStart(const Status& s) {
  Fail(s);
  return s.code() == StatusCode::kAlreadyExists ? 2 : 1;
}

// Where the config file set each option it set (for FailConfig).
ConfigOrigins g_config_origins;

// A bad option value found after parsing (checked against another option, or by the module
// that takes it): exit status 2, as for one caught while parsing (docs/deploy.md), naming
// the file and line when the value came from the config file. Found before anything
// starts, so nothing is left to undo.
int FailConfig(const Status& s, std::string_view command) {
  Fail(WithConfigOrigin(s, g_config_origins, command));
  return 2;
}

struct ServerFlags {
  std::string state_dir;
  std::string store_spec;  // --store; empty: sqlite:STATE_DIR/gpupool.db
  int port = 8421;
  std::string listen = "127.0.0.1";
  std::string admin_group;
  std::string placement_policy = "default";
  std::string queue_policy = "fair";
  std::string start_rule = "easy";
  int64_t max_starts_per_pass = 1000;
  int node_timeout_s = 30;
  std::string node_lease = "auto";  // a duration, 0 or off, or auto: NodeLeaseOf
  int exec_client_timeout_s = 15;
  int time_limit_grace_s = 60;
  std::string kill_wait = "10s";  // Slurm's KillWait
  std::string health_xid;
  std::string health_threshold;
  double health_breaker = 0.1;
  std::string health_resume_after = "24h";  // a duration, as telemetry_retention
  std::string health_strike_window = "30d";
  bool mps_multi_user = false;
  bool mps_one_size = false;
  std::string preemption = "on";  // docs/preemption.md
  std::string preempt_min_runtime = "10m";
  std::string preempt_grace = "120s";
  std::string preempt_withdraw_cooldown = "1h";
  std::string enforce_projects = "none";  // none, known or members (docs/security.md)
  std::string fair_by = "user";           // user or project (docs/deploy.md, "Fair share")
  std::vector<std::string> podman_args;   // global podman flags for image inspection
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
  int agent_request_nice = server::ServerOptions{}.agent_request_nice;
  // The watch of the SQLite store's disk (server/store_disk_watch.h).
  std::string disk_min_free = "auto";
  int disk_check_interval_s = 10;
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

// --node-lease (docs/health.md, "A node cut off from the controller"): `auto` is 5 min or
// twice --node-timeout, whichever is longer; 0 or `off`: no lease. Otherwise at least twice
// --node-timeout and 10 s more than it: an agent's polls are answered within half the
// timeout (at most 10 s), its supervisors stop fenced jobs at three quarters of the lease
// after the last one sent, and the agent rewrites the lease file in steps of 1 s.
Result<int64_t> NodeLeaseOf(const ServerFlags& f) {
  const int64_t floor_s = std::max<int64_t>(int64_t{2} * f.node_timeout_s, f.node_timeout_s + 10);
  if (f.node_lease == "auto") return std::max<int64_t>(300, floor_s) * 1'000'000;
  if (f.node_lease == "off") return 0;
  GP_ASSIGN_OR_RETURN(const int64_t s, ParseSeconds("--node-lease", f.node_lease));
  if (s > int64_t{7} * 86400) {
    // What an agent takes (protocol::DecodeRegistrationReply): a longer one would keep
    // every agent from registering.
    return Status::InvalidArgument("--node-lease: " + f.node_lease +
                                   " is longer than 7d, the most an agent takes; give at most "
                                   "7d, auto, or 0 (no lease)");
  }
  if (s != 0 && s < floor_s) {
    return Status::InvalidArgument(
        "--node-lease: " + f.node_lease + " is shorter than " + std::to_string(floor_s) +
        " s, twice --node-timeout and at least 10 s more than it: a healthy node could stop "
        "its jobs; give at least that, auto, or 0 (no lease)");
  }
  return s * 1'000'000;
}

// The flags of `up` or `server` as the Server's options.
Result<server::ServerOptions> ServerOptionsOf(const ServerFlags& f,
                                              server::ServerOptions::Lease lease) {
  server::ServerOptions o;
  o.state_dir = f.state_dir.empty() ? DefaultStateDir() : f.state_dir;
  o.store_spec = f.store_spec;
  o.port = f.port;
  o.listen = f.listen;
  o.admin_group = f.admin_group;
  if (Status s = controller::CheckAdminGroup(f.admin_group); !s.ok()) {
    if (s.code() == StatusCode::kInvalidArgument) return s;
    // A directory service that does not answer yet at boot is no configuration mistake:
    // each caller's group is looked up again when it calls.
    spdlog::warn(
        "--admin-group {}: {}; starting anyway, its members are admins once the "
        "group database answers",
        f.admin_group, s.message());
  }
  controller::ControllerOptions& co = o.controller;
  co.placement_policy = f.placement_policy;
  co.queue_policy = f.queue_policy;
  co.start_rule = f.start_rule;
  co.max_starts_per_pass = static_cast<size_t>(f.max_starts_per_pass);
  co.node_timeout_us = int64_t{f.node_timeout_s} * 1'000'000;
  GP_ASSIGN_OR_RETURN(co.node_lease_us, NodeLeaseOf(f));
  co.exec_client_timeout_us = int64_t{f.exec_client_timeout_s} * 1'000'000;
  co.time_limit_grace_s = f.time_limit_grace_s;
  GP_ASSIGN_OR_RETURN(co.kill_wait_s, ParseSeconds("--kill-wait", f.kill_wait));
  if (co.kill_wait_s < 1 || co.kill_wait_s > protocol::kMaxKillWaitS) {
    return Status::InvalidArgument("--kill-wait " + f.kill_wait +
                                   ": give 1s to 1h (Slurm's KillWait; default 10s)");
  }
  if (co.kill_wait_s >= co.time_limit_grace_s) {
    return Status::InvalidArgument(
        "--kill-wait " + f.kill_wait + " must be shorter than --time-limit-grace (" +
        std::to_string(co.time_limit_grace_s) +
        " s): past that the controller would end a job TIMEOUT while its node still waits "
        "for it to stop; raise --time-limit-grace too");
  }
  co.health_xid = f.health_xid;
  co.health_threshold = f.health_threshold;
  co.health_breaker_fraction = f.health_breaker;
  GP_ASSIGN_OR_RETURN(const int64_t resume_after_s,
                      ParseSeconds("--health-resume-after", f.health_resume_after));
  co.health_resume_after_us = resume_after_s * 1'000'000;
  GP_ASSIGN_OR_RETURN(const int64_t strike_window_s,
                      ParseSeconds("--health-strike-window", f.health_strike_window));
  co.health_strike_window_us = strike_window_s * 1'000'000;
  if (f.mps_multi_user && f.mps_one_size) {
    return Status::InvalidArgument(
        "--mps-one-size and --mps-multi-user: choose one (one size per MPS GPU holds each "
        "share to its own size; several users per GPU has no owner to keep one size for)");
  }
  co.mps_sharing = f.mps_multi_user ? controller::MpsSharing::kUsers
                   : f.mps_one_size ? controller::MpsSharing::kOneSize
                                    : controller::MpsSharing::kOneUser;
  co.preemption = f.preemption == "on";
  GP_ASSIGN_OR_RETURN(co.preempt_min_runtime_s,
                      ParseSeconds("--preempt-min-runtime", f.preempt_min_runtime));
  GP_ASSIGN_OR_RETURN(co.preempt_grace_s, ParseSeconds("--preempt-grace", f.preempt_grace));
  GP_ASSIGN_OR_RETURN(co.preempt_withdraw_cooldown_s,
                      ParseSeconds("--preempt-withdraw-cooldown", f.preempt_withdraw_cooldown));
  GP_ASSIGN_OR_RETURN(co.enforce_projects,
                      sched::ParseProjectEnforcement(f.enforce_projects, "--enforce-projects"));
  GP_ASSIGN_OR_RETURN(co.fair_by, sched::ParseFairShareGroup(f.fair_by, "--fair-by"));
  co.max_queued_per_user = f.max_queued_per_user;
  co.max_queued_total = f.max_queued_total;
  co.max_array_size = f.max_array_size;
  co.max_submission_bytes = f.max_submission_bytes;
  co.max_queued_bytes_per_user = f.max_queued_bytes_per_user;
  co.max_queued_bytes_total = f.max_queued_bytes_total;
  GP_ASSIGN_OR_RETURN(o.telemetry, TelemetryOptionsOf(f));
  o.podman_args = f.podman_args;
  o.max_connections = f.max_connections;
  o.max_connections_per_uid = f.max_connections_per_uid;
  o.max_connections_per_address = f.max_connections_per_address;
  o.max_pending_connections_per_peer = f.max_pending_connections_per_peer;
  o.request_head_timeout_s = f.request_head_timeout_s;
  o.agent_request_nice = f.agent_request_nice;
  o.lease = lease;
  o.advertise = f.advertise;
  o.lease_ms = f.lease_ms;
  GP_ASSIGN_OR_RETURN(o.disk_min_free, ParseDiskMinFree(f.disk_min_free));
  if (f.disk_check_interval_s == 0) o.disk_min_free.kind = DiskMinFree::Kind::kOff;
  o.disk_check_interval_s = f.disk_check_interval_s;
  if (f.max_connections != 0 && f.max_connections < 64) {
    return Status::InvalidArgument("--max-connections " + std::to_string(f.max_connections) +
                                   ": give 0 (from the open-files limit) or at least 64");
  }
  GP_RETURN_IF_ERROR(controller::ValidateControllerOptions(co));
  return o;
}

// The GPU health policy's flags (docs/health.md).
void AddHealthFlags(CLI::App* cmd, ServerFlags* f) {
  cmd->add_option("--health-xid", f->health_xid,
                  "overrides of the GPU health policy's Xid table, XID:ACTION[,...] with ACTION "
                  "ignore, application, suspect, cordon-gpu or cordon-node (docs/health.md)");
  cmd->add_option("--health-threshold", f->health_threshold,
                  "overrides of the GPU health policy's threshold rows, ROW:SUSPECT:CORDON[,...] "
                  "with counts (0: never), e.g. retired-pages:10:60 (docs/health.md)");
  cmd->add_option("--health-breaker", f->health_breaker,
                  "the health circuit breaker: automatic GPU or node cordons stop once this "
                  "fraction of the pool's nodes (at least 1) was cordoned within the hour "
                  "(docs/health.md)")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1.0));
  cmd->add_option("--health-resume-after", f->health_resume_after,
                  "a GPU the Xid policy cordoned returns by itself at the first passing run "
                  "of its node's health check once no Xid came for this long (90s, 30m, 12h, "
                  "7d; 0 = never, only `gpupool node resume --gpu`) (docs/health.md)")
      ->type_name("DURATION")
      ->capture_default_str();
  cmd->add_option("--health-strike-window", f->health_strike_window,
                  "a GPU the Xid policy took out of service 3 times within this long fails "
                  "(needs service); older strikes no longer count (30d, 12h; 0 = they never "
                  "expire) (docs/health.md)")
      ->type_name("DURATION")
      ->capture_default_str();
}

// docs/preemption.md.
void AddPreemptionFlags(CLI::App* cmd, ServerFlags* f) {
  cmd->add_option("--preemption", f->preemption,
                  "on: the scheduler stops --preemptible jobs for waiting jobs of higher "
                  "priority or of users (projects, with --fair-by project) below their fair "
                  "share (docs/preemption.md); off: never")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--preempt-min-runtime", f->preempt_min_runtime,
                  "a preemptible job without --min-runtime is never preempted before it ran "
                  "this long (90s, 30m, 2h)")
      ->type_name("DURATION")
      ->capture_default_str();
  cmd->add_option("--preempt-grace", f->preempt_grace,
                  "time between a preemption's SIGTERM and SIGKILL for a job without --grace")
      ->type_name("DURATION")
      ->capture_default_str();
  cmd->add_option("--preempt-withdraw-cooldown", f->preempt_withdraw_cooldown,
                  "a user who withdraws (cancels, holds) a job that preempted another user's "
                  "job before it started preempts no one for this long (0: never barred)")
      ->type_name("DURATION")
      ->capture_default_str();
}

// Associations (docs/security.md, "Projects"): who may charge which project.
void AddProjectFlags(CLI::App* cmd, ServerFlags* f) {
  cmd->add_option("--enforce-projects", f->enforce_projects,
                  "which --project a job may name: none (any), known (one with an entry in "
                  "`gpupool limits`) or members (one whose members list the user; "
                  "docs/security.md)")
      ->check(CLI::IsMember({"none", "known", "members"}))
      ->capture_default_str();
  cmd->add_option("--fair-by", f->fair_by,
                  "what fair share (the fair queue and fair-share preemption) divides the "
                  "pool between: user or project (a job's --project, else its user's name); "
                  "with project, use --enforce-projects members (docs/deploy.md)")
      ->check(CLI::IsMember({"user", "project"}))
      ->capture_default_str();
}

// Bounds on the queue: jobs and bytes queued, per user and in all (ServerFlags).
void AddQueueBoundFlags(CLI::App* cmd, ServerFlags* f) {
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
}

// Bounds on the API's connections and requests (ServerFlags).
void AddConnectionFlags(CLI::App* cmd, ServerFlags* f) {
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
  cmd->add_option("--agent-request-nice", f->agent_request_nice,
                  "request priority: agents' requests (polls, event reports, registrations) "
                  "run on threads of their own this many nice levels below users' requests "
                  "and the scheduler (0 = off: one pool of threads serves everyone)")
      ->capture_default_str()
      ->check(CLI::Range(0, 19));
}

// The watch of the SQLite store's disk, for `server` (`up` takes the agent's flags of the
// same names, AddContainerFlags, for both: one state directory, one disk).
void AddStoreDiskFlags(CLI::App* cmd, ServerFlags* f) {
  cmd->add_option("--disk-min-free", f->disk_min_free,
                  "the room the SQLite store's filesystem must keep (a size, a percentage of "
                  "it, or off); below it new jobs are refused, so that the jobs in the pool "
                  "can still be recorded; auto: 1G or 5%, the smaller")
      ->type_name("SIZE|PCT%|auto|off")
      ->capture_default_str();
  cmd->add_option("--disk-check-interval", f->disk_check_interval_s,
                  "seconds between checks of the SQLite store's free space (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
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
  cmd->add_option("--max-starts-per-pass", f->max_starts_per_pass,
                  "at most this many jobs start in one scheduling pass; the next pass goes on "
                  "at once (0 = no bound)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000}));
  cmd->add_option("--node-timeout", f->node_timeout_s,
                  "seconds without a poll before a node's jobs are LOST")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--node-lease", f->node_lease,
                  "how long a lost node may still run a --requeue or preemptible job: its "
                  "agent stops such jobs when cut off this long, and their next attempt "
                  "waits for it (auto: 5 min or twice --node-timeout; 0: no lease)")
      ->capture_default_str();
  cmd->add_option("--exec-client-timeout", f->exec_client_timeout_s,
                  "seconds without a word from the client of an interactive session (gpupool "
                  "run, exec --pty) before it is hung up, or from gpupool alloc before its "
                  "allocation is released")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--kill-wait", f->kill_wait,
                  "DURATION between the SIGTERM and the SIGKILL of a cancelled or timed-out "
                  "job on every node (Slurm's KillWait; 1s to 1h, less than --time-limit-grace)")
      ->capture_default_str();
  cmd->add_option("--time-limit-grace", f->time_limit_grace_s,
                  "seconds a job may run past its --time before the controller stops it "
                  "itself (its node's shim stops it at the limit; this is the backstop)")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  AddHealthFlags(cmd, f);
  cmd->add_flag("--mps-multi-user", f->mps_multi_user,
                "let several users' GPU shares run on one MPS GPU at once; by default an MPS "
                "GPU takes one user's shares at a time, since MPS serves one user per GPU "
                "(docs/sharing.md)");
  cmd->add_flag("--mps-one-size", f->mps_one_size,
                "let an MPS GPU take one size of a user's shares at a time, so that each share "
                "is held to its own size even if it drops its CUDA_MPS_* variables (by default "
                "one user's shares of any size share it, each held to the largest); a user may "
                "then hold several GPUs with small shares of different sizes (docs/sharing.md)");
  AddPreemptionFlags(cmd, f);
  AddProjectFlags(cmd, f);
  AddQueueBoundFlags(cmd, f);
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
  AddConnectionFlags(cmd, f);
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
  if (s.ok()) s = ApplyConfig(*cfg, sections, {"token"}, cmd, &g_config_origins);
  if (!s.ok()) {
    Fail(s);
    *exit_code = 2;
    return false;
  }
  spdlog::info("configuration file: {}", path);
  return true;
}

// The agent's node. With --fake, a file that cannot be read or read as a node is a bad
// --fake (exit status 2); discovery of real GPUs failing is not (exit status 1).
int FailDiscovery(const Status& s, const std::string& fake, std::string_view command) {
  if (fake.empty()) return Fail(s);
  return FailConfig(Status::InvalidArgument("--fake " + fake + ": " + s.message() +
                                            " (give a node description, e.g. a `gpupool gpus "
                                            "--json` capture)"),
                    command);
}

// `gpupool up`: a Server and, beside it, a local agent that reaches it through the Unix
// socket with a node token of its own.
int RunUp(const ServerFlags& flags, const std::string& fake, const ContainerFlags& containers,
          int telemetry_interval_s) {
  ServerFlags f = flags;
  f.podman_args = containers.podman_args;      // one podman store for inspection and jobs
  f.disk_min_free = containers.disk_min_free;  // one state directory: one disk, one level
  f.disk_check_interval_s = containers.disk_check_interval;
  Result<server::ServerOptions> so = ServerOptionsOf(f, server::ServerOptions::Lease::kTakeOnce);
  if (!so.ok()) return FailConfig(so.status(), "up");
  agent::NodeAgentOptions ao;
  ao.state_dir = so->state_dir;
  ao.fake_file = fake;
  ao.stand_in_when_no_gpus = true;
  ao.telemetry_interval_s = telemetry_interval_s;
  if (Status s = ApplyContainerFlags(containers, &ao); !s.ok()) return FailConfig(s, "up");
  net::ServerAddress addr;
  addr.kind = net::ServerAddress::Kind::kUnix;
  addr.path = so->state_dir + "/gpupool.sock";
  ao.server_for_jobs = addr.ToString();
  agent::NodeAgent node_agent(ao);
  if (Status s = node_agent.Discover(); !s.ok()) return FailDiscovery(s, fake, "up");
  server::Server srv(*so);
  if (Status s = srv.Start(); !s.ok()) return FailStart(s);
  // The local agent authenticates like a remote one: with a node token, kept in its
  // state directory and reused by every start.
  Result<std::string> token =
      server::LocalAgentToken(*srv.store(), so->state_dir + "/agent/node-token", HostName(),
                              SystemClock::Get()->NowMicros());
  if (!token.ok()) return Fail(token.status().WithContext("the local agent's node token"));
  // The agent's threads are named "gp-agent" (a thread inherits the name of the thread
  // that starts it), so that top -H and perf tell them from the controller's.
  char name[16] = {};
  ::prctl(PR_GET_NAME, name);
  ::prctl(PR_SET_NAME, "gp-agent");
  Status agent_started =
      node_agent.Start(protocol::NewHttpControllerLink(net::HttpClient(addr, *token)));
  ::prctl(PR_SET_NAME, name);
  if (!agent_started.ok()) return FailStart(agent_started);

  const size_t ngpus = node_agent.node().gpus.size();
  if (node_agent.stand_in()) {
    const std::string examples = FindGpupoolData("examples/nodes");
    std::cout << "No GPUs were found on this machine, so gpupool is running with a FAKE node of "
                 "8 GPUs (jobs run for real, but see no real GPU).\n"
              << "To describe your own node instead: gpupool up --fake "
              << (examples.empty() ? std::string("NODE.json (a `gpupool gpus --json` capture)")
                                   : examples + "/FILE.json")
              << "\n";
  }
  std::cout << "gpupool is up on " << HostName() << " with " << ngpus << " GPU"
            << (ngpus == 1 ? "" : "s") << ".\n"
            << "  API:       unix:" << addr.path;
  if (f.port > 0) std::cout << " and http://" << f.listen << ":" << srv.tcp_port();
  std::cout << "\n  State:     " << so->state_dir << "\n"
            << "  Containers: " << node_agent.ContainersSummary() << "\n"
            << (node_agent.EnforcementSummary().empty()
                    ? ""
                    : "  " + node_agent.EnforcementSummary() + "\n")
            << "Submit a job from another terminal:\n"
            << "  export GPUPOOL_SERVER=unix:" << addr.path << "\n"
            << "  gpupool submit --gpus 1 -- sh -c 'echo $CUDA_VISIBLE_DEVICES'\n"
            << "  gpupool queue; gpupool logs 1\n"
            << "Stop with Ctrl-C; running jobs keep running and are picked up on restart.\n"
            << std::flush;
  const Status waited = srv.Wait(g_stop.get_token());
  std::cout << "gpupool: stopping (running jobs keep running and are picked up on restart)"
            << std::endl;
  // The agent first: its calls in flight (the long poll) are cut short at once, so
  // nothing here waits out a poll period; then the controller, the listeners and the lease.
  (void)node_agent.Stop();  // the same binary as the controller: never incompatible
  srv.Stop();
  return waited.ok() ? 0 : Fail(waited);
}

// `gpupool server`: a Server alone; on PostgreSQL a standby until it leads.
int RunServer(const ServerFlags& f) {
  Result<server::ServerOptions> so = ServerOptionsOf(f, server::ServerOptions::Lease::kStandBy);
  if (!so.ok()) return FailConfig(so.status(), "server");
  const bool elected = store::IsPostgresSpec(server::StoreSpec(*so));
  so->on_lead = [](int64_t epoch) {
    std::cout << "gpupool server: leading at epoch " << epoch << "\n" << std::flush;
  };
  server::Server srv(*so);
  if (Status s = srv.Start(); !s.ok()) return FailStart(s);
  std::cout << "gpupool server: ";
  if (elected) {
    std::cout << "controller " << srv.controller_id() << " (reached at " << srv.advertised_address()
              << "), ";
  }
  std::cout << "API on unix:" << srv.socket_path();
  if (f.port > 0) std::cout << " and http://" << f.listen << ":" << srv.tcp_port();
  std::cout << "\n";
  if (elected) std::cout << "  standby until it holds the lease (" << f.lease_ms << " ms)\n";
  std::cout << std::flush;
  const Status waited = srv.Wait(g_stop.get_token());
  srv.Stop();
  return waited.ok() ? 0 : Fail(waited);
}

struct AgentFlags {
  std::string controller;
  std::string token;
  std::string state_dir;
  std::string fake;
  std::string node_name;
  std::string address;
  int telemetry_interval_s = 5;
  ContainerFlags containers;
};

// `gpupool agent`; `token_flag`: --token was given (it beats GPUPOOL_TOKEN, which beats
// the config file's token).
int RunAgent(const AgentFlags& af, bool token_flag) {
  if (af.controller.empty()) {
    std::cerr << "gpupool: --controller is required: pass it, or set `controller = ...` "
                 "under [agent] in the config file\n";
    return 2;
  }
  Result<std::vector<net::ServerAddress>> controllers = net::ParseServerAddressList(af.controller);
  if (!controllers.ok()) {
    std::cerr << "gpupool: --controller: " << controllers.status().message() << "\n";
    return 2;
  }
  std::string token = af.token;
  if (!token_flag) {
    if (const char* t = std::getenv("GPUPOOL_TOKEN"); t != nullptr && *t != '\0') token = t;
  }
  agent::NodeAgentOptions ao;
  ao.state_dir = af.state_dir.empty() ? DefaultStateDir() : af.state_dir;
  ao.fake_file = af.fake;
  ao.node_name = af.node_name;
  ao.address = af.address;
  ao.telemetry_interval_s = af.telemetry_interval_s;
  // The whole list: a job's `gpupool exec` finds the leader as the agent does.
  ao.server_for_jobs = net::ServerAddressListToString(*controllers);
  if (Status s = ApplyContainerFlags(af.containers, &ao); !s.ok()) return FailConfig(s, "agent");
  agent::NodeAgent node_agent(ao);
  if (Status s = node_agent.Discover(); !s.ok()) return FailDiscovery(s, af.fake, "agent");
  if (Status s =
          node_agent.Start(protocol::NewHttpControllerLink(net::HttpClient(*controllers, token)));
      !s.ok())
    return FailStart(s);
  std::cout << "gpupool agent: node " << node_agent.node_name() << " with "
            << node_agent.node().gpus.size() << " GPUs, controller "
            << net::ServerAddressListToString(*controllers) << "\n"
            << "  containers: " << node_agent.ContainersSummary() << "\n"
            << (node_agent.EnforcementSummary().empty()
                    ? ""
                    : "  " + node_agent.EnforcementSummary() + "\n")
            << std::flush;
  // A controller this agent cannot talk to ends it (its protocol is too far off).
  (void)node_agent.WaitEnded(g_stop.get_token());
  if (Status ended = node_agent.Stop(); !ended.ok()) return FailStart(ended);
  return 0;
}

// Flag storage must outlive the registration (the callbacks run later); statics are
// neither dangling nor leaked.
void RegisterUpCommand(CLI::App& app, CommandContext& ctx) {
  static ServerFlags flags;
  static std::string fake;
  static ContainerFlags containers;
  static int telemetry_interval_s = 5;
  CLI::App* up = app.add_subcommand("up", "run the whole pool on this machine: controller + agent");
  AddServerFlags(up, &flags);
  up->add_option("--fake", fake, "use this node description instead of discovery");
  up->add_option("--telemetry-interval", telemetry_interval_s,
                 "seconds between GPU telemetry samples of the local agent (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  AddContainerFlags(up, &containers);
  AddConfigFlag(up);
  up->callback([&ctx, up] {
    if (!ApplyConfigFile({"server", "agent"}, up, &ctx.exit_code)) return;
    StopOnSignals("stop it and run `gpupool up` again");
    PrivateUmask();
    ctx.exit_code = RunUp(flags, fake, containers, telemetry_interval_s);
  });
}

void RegisterServerCommand(CLI::App& app, CommandContext& ctx) {
  static ServerFlags flags;
  CLI::App* server =
      app.add_subcommand("server", "run the controller only (REST API, scheduler, store)");
  AddServerFlags(server, &flags);
  AddStoreDiskFlags(server, &flags);
  server->add_option("--advertise", flags.advertise,
                     "with several controllers (PostgreSQL store): the API address clients and "
                     "agents reach this one at (default http://LISTEN:PORT, this host's name "
                     "for a wildcard --listen)");
  server
      ->add_option("--lease-ms", flags.lease_ms,
                   "with several controllers (PostgreSQL store): how long a leader that stopped "
                   "renewing keeps the lease before a standby takes over")
      ->capture_default_str()
      ->check(CLI::Range(500, 600000));
  server
      ->add_option("--podman-arg", flags.podman_args,
                   "global podman argument for inspecting job images, repeatable")
      ->allow_extra_args(false);
  AddConfigFlag(server);
  server->callback([&ctx, server] {
    if (!ApplyConfigFile({"server"}, server, &ctx.exit_code)) return;
    StopOnSignals("systemctl restart gpupool-server");
    PrivateUmask();
    ctx.exit_code = RunServer(flags);
  });
  g_server_cmd = server;
}

void RegisterAgentCommand(CLI::App& app, CommandContext& ctx) {
  static AgentFlags af;
  CLI::App* cmd = app.add_subcommand("agent", "run a node agent for a controller");
  cmd->add_option("--controller", af.controller,
                  "unix:PATH or http://HOST:PORT, or a comma list of the pool's "
                  "controllers (the agent and its jobs find the leader among them; "
                  "required, here or in the config file)");
  cmd->add_option("--token", af.token, "node join token (or GPUPOOL_TOKEN)");
  cmd->add_option("--state-dir", af.state_dir, "where job state and logs live");
  cmd->add_option("--fake", af.fake, "use this node description instead of discovery");
  cmd->add_option("--node-name", af.node_name, "name of this node (default: hostname)");
  cmd->add_option("--telemetry-interval", af.telemetry_interval_s,
                  "seconds between GPU telemetry samples sent to the controller (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  cmd->add_option("--address", af.address,
                  "the address other nodes reach this one at, for multi-node jobs "
                  "(MASTER_ADDR, host files; default: the address the controller sees "
                  "this agent connect from)");
  AddContainerFlags(cmd, &af.containers);
  AddConfigFlag(cmd);
  cmd->callback([&ctx, cmd] {
    const bool token_flag = cmd->count("--token") > 0;  // GPUPOOL_TOKEN beats the file
    if (!ApplyConfigFile({"agent"}, cmd, &ctx.exit_code)) return;
    StopOnSignals("systemctl restart gpupool-agent");
    PrivateUmask();
    ctx.exit_code = RunAgent(af, token_flag);
  });
  g_agent_cmd = cmd;
}

// `agent-shim` (hidden): the per-job supervisor.
void RegisterShimCommand(CLI::App& app, CommandContext& ctx) {
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
    ctx.exit_code = agent::RunShim(static_cast<int>(argv.size() - 1), argv.data(),
                                   &agent::ApplyNvmlMemoryLimit);
  });
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

void RegisterDaemonCommands(CLI::App& app, CommandContext& ctx) {
  RegisterUpCommand(app, ctx);
  RegisterServerCommand(app, ctx);
  RegisterAgentCommand(app, ctx);
  RegisterShimCommand(app, ctx);
}

}  // namespace gpupool::cli
