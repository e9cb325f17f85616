// `gpupool run [submit options] [--pty] -- COMMAND...` and `gpupool alloc [submit
// options] [-- COMMAND...]`: interactive jobs (docs/cli.md, "Interactive jobs").
//
// run submits the job, waits for it to be placed (saying why it waits; ^C cancels it),
// then attaches this terminal to its command (interactive.h) and exits with the
// command's status. alloc submits a job that holds its allocation, waits until every
// task runs, then runs COMMAND (default $SHELL) here with GPUPOOL_JOB_ID set, so that
// `gpupool exec` enters the allocation; when COMMAND ends the allocation is released.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/client/client_common.h"
#include "cli/client/interactive.h"
#include "cli/client/json_view.h"
#include "cli/client/submit_flags.h"
#include "cli/client/submit_io.h"
#include "protocol/agent_protocol.h"  // kMaxKillWaitS

namespace gpupool::cli {
namespace {

struct RunState {
  ConnectionFlags conn;
  SubmitFlags flags;
  std::vector<std::string> command;
  bool pty = false;
  bool quiet = false;
};

// From an allocation's submission until its COMMAND ends: tells the controller its client
// is alive (POST /v1/jobs/ID/alive) a third of the controller's client timeout apart (at
// most 5 s), so that an alloc killed outright, or whose machine is lost, has its request
// withdrawn (while the job waits) or its allocation released after that timeout instead
// of held for good. Stops when destroyed, or once the job has ended (or the controller
// has no such endpoint).
//
// A job that ends while COMMAND runs had its allocation revoked (a cancel, its time
// limit, its node lost): said on stderr with the job's state and reason, and COMMAND is
// hung up (SIGHUP, SIGKILL after the pool's stop grace: the alive answer's kill_wait_s,
// the server's --kill-wait), as salloc does, instead of a shell that goes on in an
// allocation that no longer exists.
class AllocKeepAlive {
 public:
  AllocKeepAlive(ApiClient api, int64_t id, std::ostream* err)
      : api_(std::move(api)),
        id_(id),
        path_("/v1/jobs/" + std::to_string(id) + "/alive"),
        err_(err),
        thread_([this] { Run(); }) {}
  ~AllocKeepAlive() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      command_ = 0;
    }
    cv_.notify_all();
    thread_.join();
  }
  AllocKeepAlive(const AllocKeepAlive&) = delete;
  AllocKeepAlive& operator=(const AllocKeepAlive&) = delete;

  // COMMAND runs as `pid` (0: it has ended, and must not be signalled any more).
  void Watch(pid_t pid) {
    {
      std::lock_guard lock(mu_);
      command_ = pid;
    }
    cv_.notify_all();
  }
  bool revoked() {
    std::lock_guard lock(mu_);
    return revoked_;
  }

 private:
  void Run() {
    int64_t every_ms = 1000;
    std::unique_lock lock(mu_);
    while (!stop_) {
      lock.unlock();
      Result<ApiAnswer> r = api_.Post(path_, "{}");
      lock.lock();
      if (r.ok()) {
        every_ms =
            std::clamp<int64_t>(GetInt(r->json, "client_timeout_s", 3) * 1000 / 3, 200, 5000);
        // A server without the field (older) stopped jobs after 10 s, the default.
        stop_grace_s_ = std::clamp<int64_t>(GetInt(r->json, "kill_wait_s", kDefaultStopGraceS), 1,
                                            protocol::kMaxKillWaitS);
      } else if (const StatusCode code = r.status().code(); code == StatusCode::kNotFound) {
        // Ended: revoked, should COMMAND run (or start) before this client released it.
        cv_.wait(lock, [this] { return stop_ || command_ != 0; });
        if (!stop_) Revoke(lock);
        return;
      } else if (code == StatusCode::kInvalidArgument || code == StatusCode::kPermissionDenied) {
        return;  // refused: nothing more to keep (an unreachable server: again)
      }
      cv_.wait_for(lock, std::chrono::milliseconds(every_ms), [this] { return stop_; });
    }
  }

  void Revoke(std::unique_lock<std::mutex>& lock) {
    lock.unlock();
    std::string why = "it has ended";
    if (Result<ApiAnswer> a = api_.Get("/v1/jobs/" + std::to_string(id_)); a.ok()) {
      const Json& job = GetObject(a->json, "job");
      const std::string reason = GetString(job, "reason");
      why = "it ended " + GetString(job, "state") + (reason.empty() ? "" : ": " + reason);
    }
    lock.lock();
    if (command_ == 0) return;  // COMMAND ended meanwhile: the usual end says the rest
    revoked_ = true;
    *err_ << "gpupool: job allocation " << id_ << " has been revoked (" << why
          << "); hanging up the command\n"
          << std::flush;
    ::kill(command_, SIGHUP);
    ::kill(command_, SIGCONT);
    // One that ignores the hangup (nohup) is killed after the pool's stop grace, as the
    // allocation's tasks were after their SIGTERM.
    if (!cv_.wait_for(lock, std::chrono::seconds(stop_grace_s_),
                      [this] { return command_ == 0; })) {
      ::kill(command_, SIGKILL);
    }
  }

  static constexpr int64_t kDefaultStopGraceS = 10;  // the server's default --kill-wait
  const ApiClient api_;
  const int64_t id_;
  const std::string path_;
  std::ostream* const err_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  pid_t command_ = 0;
  bool revoked_ = false;
  int64_t stop_grace_s_ = kDefaultStopGraceS;  // GUARDED_BY(mu_)
  std::thread thread_;                         // last: it starts once the members above are made
};

Result<int64_t> SubmitInteractive(const ClientRuntime& rt, const ApiClient& api, const RunState& s,
                                  const std::string& mode) {
  const std::string cwd = rt.env.cwd();
  if (cwd.empty() &&
      !(s.flags.workdir && !s.flags.workdir->empty() && (*s.flags.workdir)[0] == '/')) {
    return Status::InvalidArgument(
        "cannot determine the current directory; pass --workdir /absolute/path");
  }
  if (s.flags.array) {
    return Status::InvalidArgument("--array: gpupool " + mode +
                                   " is one job; submit arrays with gpupool submit");
  }
  if (s.flags.wait) {
    return Status::InvalidArgument("--wait: gpupool " + mode +
                                   " waits for its job already; --wait is for gpupool submit");
  }
  if (s.flags.mpi) {
    return Status::InvalidArgument("--mpi: gpupool " + mode +
                                   " holds every task already; run mpirun in it without --mpi");
  }
  // alloc runs nothing remotely; BuildSubmission checks a command all the same.
  const std::vector<std::string> command =
      mode == "alloc" ? std::vector<std::string>{"(allocation)"} : s.command;
  if (s.flags.output || s.flags.error) {
    return Status::InvalidArgument(std::string(s.flags.output ? "--output" : "--error") +
                                   ": gpupool " + mode +
                                   " shows the output at your terminal; -o and -e are for "
                                   "gpupool submit");
  }
  GP_ASSIGN_OR_RETURN(OrderedJson body,
                      BuildSubmission(s.flags, command, cwd, ElementIds(rt, s.conn)));
  GP_RETURN_IF_ERROR(
      AddExport(s.flags, rt.env.environ ? rt.env.environ() : std::vector<std::string>{}, &body));
  body["interactive"] = mode;
  if (mode == "alloc") {
    body["command"] = OrderedJson::array();
    // It says it is alive from now on (AllocKeepAlive): killed while the job waits, the
    // request is withdrawn instead of starting an allocation nobody holds.
    body["client_keepalive"] = true;
  }
  if (s.pty) {
    body["pty"] = true;
    // The terminal's type and language go with it whatever --export says (clear, top, vi).
    for (const auto& [name, value] :
         TerminalVariables(rt.env.environ ? rt.env.environ() : std::vector<std::string>{})) {
      if (!body.contains("env") || !body["env"].contains(name)) body["env"][name] = value;
    }
  }
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, PostSubmission(api, &body));
  PrintSubmitWarnings(answer.json, *rt.env.err);
  const int64_t id = GetInt(GetObject(answer.json, "job"), "id");
  if (id <= 0) return Status::Internal("the server accepted the job but its answer has no id");
  return id;
}

// Waits until the job is ready (run: its command's session exists; alloc: every task
// runs), printing why it waits when that changes. ^C, SIGTERM or SIGHUP cancel it.
// Returns the session id (run) or 0 (alloc), with the job's record in *job.
Result<int64_t> WaitUntilPlaced(const ClientRuntime& rt, const ApiClient& api, int64_t id,
                                bool quiet, Json* job) {
  SignalCatcher signals;
  std::string said;
  int rows = 0;
  int cols = 0;
  LocalWindowSize(&rows, &cols);
  OrderedJson body = OrderedJson::object();
  if (rows > 0) {
    body["rows"] = rows;
    body["cols"] = cols;
  }
  const std::string path = "/v1/jobs/" + std::to_string(id) + "/attach?wait_ms=1000";
  while (true) {
    if (const int sig = signals.Take(0); sig != 0 && sig != SIGWINCH) {
      (void)api.Post("/v1/jobs/" + std::to_string(id) + "/cancel", "{}");
      return Status::FailedPrecondition("cancelled job " + std::to_string(id) +
                                        " while it waited (" +
                                        std::string(sig == SIGINT ? "^C" : ::strsignal(sig)) + ")");
    }
    GP_ASSIGN_OR_RETURN(ApiAnswer a, api.Post(path, DumpJson(body)));
    *job = GetObject(a.json, "job");
    const int64_t session = GetInt(a.json, "session");
    const std::string state = GetString(*job, "state");
    if (session > 0 || state == "RUNNING") return session;
    const std::string reason = GetString(*job, "pending_reason");
    std::string now = state;
    if (!reason.empty()) now.append(": ").append(reason);
    if (!quiet && now != said) {
      *rt.env.err << "gpupool: job " << id << " waits (" << now << ")\n" << std::flush;
      said = now;
    }
  }
}

// A run job whose command a stop ended, not the command itself: a cancel or the time
// limit. The session's status is then how the stop reached the command (SIGTERM, or
// SIGKILL after the grace), so the exit status is the job's, 128 +
// the signal that ended it (docs/cli.md), and stderr says why (red team 5, finding 6).
// Only a command ended by a signal is looked at; the job settles once its tasks have
// ended too, which may come just after the session ends: asked for 10 s at most.
int RunExitStatus(const ClientRuntime& rt, const ApiClient& api, int64_t id, int session_code) {
  if (session_code <= 128 || session_code >= 255) return session_code;
  const std::string path = "/v1/jobs/" + std::to_string(id);
  for (int tries = 0; tries < 100; ++tries) {
    Result<ApiAnswer> a = api.Get(path);
    if (!a.ok()) return session_code;
    const Json& job = GetObject(a->json, "job");
    const std::string state = GetString(job, "state");
    if (state == "PENDING" || state == "ASSIGNED" || state == "RUNNING") {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (state != "CANCELLED" && state != "TIMEOUT") return session_code;
    std::string reason = GetString(job, "reason");
    const std::string why = reason.empty() ? "" : " (" + reason + ")";
    if (const size_t at = reason.find(" reached");
        state == "TIMEOUT" && reason.starts_with("time limit") && at != std::string::npos) {
      // The node's "time limit of 2 s reached (ended by SIGTERM)", said once.
      *rt.env.err << "gpupool: job " << id << " reached its " << reason.erase(at, 8) << "\n";
    } else if (state == "TIMEOUT") {
      *rt.env.err << "gpupool: job " << id << " reached its time limit" << why << "\n";
    } else if (reason.starts_with("cancelled")) {
      *rt.env.err << "gpupool: job " << id << " " << reason << "\n";
    } else {
      *rt.env.err << "gpupool: job " << id << " was cancelled" << why << "\n";
    }
    const int64_t signal = GetInt(job, "signal");
    return signal > 0 && signal < 127 ? 128 + static_cast<int>(signal) : session_code;
  }
  return session_code;
}

Status RunRun(const ClientRuntime& rt, const RunState& s) {
  if (s.command.empty() || s.command[0].empty()) {
    return Status::InvalidArgument(
        "nothing to run: give the command after --, e.g. gpupool "
        "run --gpus 1 --pty -- bash");
  }
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(int64_t id, SubmitInteractive(rt, api, s, "run"));
  if (!s.quiet) *rt.env.err << "gpupool: job " << id << " submitted\n" << std::flush;
  Json job;
  GP_ASSIGN_OR_RETURN(int64_t session, WaitUntilPlaced(rt, api, id, s.quiet, &job));
  if (!s.quiet) {
    const Json& placement = GetArray(job, "placement");
    const std::string node = placement.empty() ? std::string("?") : GetString(placement[0], "node");
    *rt.env.err << "gpupool: job " << id << " runs on " << node << "\n" << std::flush;
  }
  AttachOptions options;
  options.tty = s.pty;
  GP_ASSIGN_OR_RETURN(int code, AttachSession(rt, api, session, options));
  rt.ctx->exit_code = RunExitStatus(rt, api, id, code);
  return Status::Ok();
}

Status RunAlloc(const ClientRuntime& rt, const RunState& s) {
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(int64_t id, SubmitInteractive(rt, api, s, "alloc"));
  if (!s.quiet) *rt.env.err << "gpupool: job " << id << " submitted\n" << std::flush;
  // Alive while the job waits as while COMMAND runs (the job is marked client_keepalive).
  std::optional<AllocKeepAlive> alive;
  alive.emplace(api, id, rt.env.err);
  Json job;
  GP_RETURN_IF_ERROR(WaitUntilPlaced(rt, api, id, s.quiet, &job).status());
  std::string nodes;
  std::string hosts;  // GPUPOOL_NODES: the tasks' hosts in task order, as every task gets
  const Json& placement = GetArray(job, "placement");
  const Json& tasks = GetArray(job, "tasks");
  for (size_t t = 0; t < placement.size(); ++t) {
    const std::string node = GetString(placement[t], "node");
    const std::string host = t < tasks.size() ? GetString(tasks[t], "host") : std::string();
    nodes += (nodes.empty() ? "" : ",") + node;
    hosts += (hosts.empty() ? "" : ",") + (host.empty() ? node : host);
  }
  const std::string ids = std::to_string(id);
  if (!s.quiet) {
    *rt.env.err << "gpupool: job " << id << " holds its allocation on " << nodes
                << "; enter it with: gpupool exec --job " << id << " --pty -- bash\n"
                << std::flush;
  }
  std::vector<std::string> command = s.command;
  if (command.empty()) {
    const std::string shell = rt.env.getenv("SHELL");
    command = {shell.empty() ? "/bin/sh" : shell};
  }
  // COMMAND runs here, as salloc's does, with the job's id and its tasks' hosts.
  ::setenv("GPUPOOL_JOB_ID", ids.c_str(), 1);
  ::setenv("GPUPOOL_NODES", hosts.c_str(), 1);
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (std::string& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::cout.flush();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int code = 127;
  std::string ended = R"({"exit_code": 127})";  // how COMMAND ended, for the job's record
  if (pid > 0) {
    alive->Watch(pid);
    // Our terminal's ^C is the command's (its foreground job); we wait for it to end.
    struct sigaction ignore {};
    struct sigaction old_int {};
    struct sigaction old_quit {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGINT, &ignore, &old_int);
    ::sigaction(SIGQUIT, &ignore, &old_quit);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    alive->Watch(0);
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGQUIT, &old_quit, nullptr);
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ended = WIFEXITED(status) ? R"({"exit_code": )" + std::to_string(code) + "}"
                              : R"({"signal": )" + std::to_string(WTERMSIG(status)) + "}";
    if (code == 127) *rt.env.err << "gpupool: " << command[0] << ": command not found here\n";
  } else {
    *rt.env.err << "gpupool: cannot start " << command[0] << ": " << std::strerror(errno) << "\n";
  }
  const bool revoked = alive->revoked();
  alive.reset();
  if (revoked) {
    // Nothing left to release; never 0, as salloc's, even for a COMMAND that exited 0.
    rt.ctx->exit_code = code != 0 ? code : 1;
    return Status::Ok();
  }
  // The job ends as COMMAND did (SUCCEEDED for exit 0), as salloc's, not CANCELLED.
  Result<ApiAnswer> cancelled = RetryDuringTakeover(
      api, [&] { return api.Post("/v1/jobs/" + ids + "/cancel", ended); }, *rt.env.err);
  if (!cancelled.ok() && cancelled.status().code() != StatusCode::kFailedPrecondition) {
    *rt.env.err << "gpupool: could not release job " << id << ": " << cancelled.status().message()
                << "; run gpupool cancel " << id << "\n";
  } else if (!s.quiet) {
    *rt.env.err << "gpupool: released the allocation of job " << id << "\n";
  }
  rt.ctx->exit_code = code;
  return Status::Ok();
}

}  // namespace

void RegisterRunCommands(CLI::App& app, const RuntimePtr& rt) {
  auto run = std::make_shared<RunState>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run a command as a job with this terminal attached: gpupool run [options] [--pty] -- "
      "COMMAND [ARGS...] (like srun --pty)");
  AddSubmitOptions(*cmd, &run->flags);
  cmd->add_flag("--pty", run->pty,
                "give the command a terminal (for shells and editors; keys, ^C and the "
                "window size reach it)");
  cmd->add_flag("-q,--quiet", run->quiet, "print nothing of gpupool's own while it waits");
  AddConnectionOptions(*cmd, &run->conn);
  cmd->add_option("command", run->command, "-- COMMAND [ARGS...]");
  cmd->positionals_at_end();
  cmd->callback([rt, run] { Report(*rt, RunRun(*rt, *run)); });

  auto alloc = std::make_shared<RunState>();
  CLI::App* acmd = app.add_subcommand(
      "alloc",
      "Hold an allocation and run COMMAND (default $SHELL) here with GPUPOOL_JOB_ID set; "
      "gpupool exec enters the allocation; it is released when COMMAND ends (like salloc)");
  AddSubmitOptions(*acmd, &alloc->flags);
  acmd->add_flag("-q,--quiet", alloc->quiet, "print nothing of gpupool's own while it waits");
  AddConnectionOptions(*acmd, &alloc->conn);
  acmd->add_option("command", alloc->command, "-- COMMAND [ARGS...] to run here (default $SHELL)");
  acmd->positionals_at_end();
  acmd->callback([rt, alloc] { Report(*rt, RunAlloc(*rt, *alloc)); });
}

}  // namespace gpupool::cli
