// `gpupool exec`: runs a command inside a running task's allocation, on that task's node,
// relays its output and exits with its exit code (docs/cli.md, "Multi-node jobs").
//
//   gpupool exec --job ID [--task N] -- CMD ARGS...   CMD runs as given (no shell)
//   gpupool exec HOST CMD...                          mpirun's rsh-agent form: the job is
//       $GPUPOOL_JOB_ID, HOST one of its task hosts, and CMD is one shell command line
//       (joined with spaces and run by /bin/sh -c, as ssh would)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "cli/client/client_common.h"
#include "cli/client/interactive.h"
#include "cli/client/json_view.h"
#include "cli/client/submit_io.h"
#include "common/strings.h"

namespace gpupool::cli {
namespace {

std::atomic<int> g_exec_signal{0};
extern "C" void OnExecSignal(int sig) { g_exec_signal = sig; }

// Calls `f` again while the server answers 429: a job's many `gpupool exec`s (mpirun
// starting a daemon per node at once) share one caller's quota of waiting requests.
template <typename F>
auto Retrying(F f) -> decltype(f()) {
  int pause_ms = 10;
  for (int tries = 0;; ++tries) {
    auto r = f();
    if (r.ok() || r.status().code() != StatusCode::kResourceExhausted || tries >= 200) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms + (tries * 7919) % pause_ms));
    pause_ms = std::min(pause_ms * 2, 500);
  }
}

struct ExecState {
  ConnectionFlags conn;
  std::string job;
  int task = -1;
  std::vector<std::string> args;
  bool pty = false;         // a terminal, with stdin
  bool stdin_open = false;  // stdin relayed, no terminal
  bool dashes = false;      // the command came after --
};

struct ExecOutcome {
  int exit_code = 255;
  std::string error;
};

// Prints what is new in one stream; true when it reached the end of a finished session.
Result<bool> Drain(const ClientRuntime& rt, const ApiClient& api, const std::string& base,
                   const std::string& stream, int64_t* offset) {
  while (true) {
    GP_ASSIGN_OR_RETURN(LogChunk c, Retrying([&] {
                          return api.ReadOutput(base + "/output?stream=" + stream, *offset, 0);
                        }));
    if (!c.bytes.empty()) {
      if (stream == "stdout") {
        Print(rt, c.bytes);
      } else {
        *rt.env.err << c.bytes << std::flush;
      }
    }
    const bool progressed = c.next_offset > *offset;
    *offset = std::max(*offset, c.next_offset);
    if (c.eof) return true;
    if (!progressed) return false;
  }
}

// The session's request (POST /v1/jobs/JOB/exec) for `gpupool exec`'s flags, and in
// *job the job it names (17, or 12_3 of an array).
Result<OrderedJson> ExecRequest(const ClientRuntime& rt, const ExecState& s, std::string* job_out) {
  OrderedJson body;
  std::string job_text = s.job;
  std::vector<std::string> argv;
  // `gpupool exec -- CMD` inside a job or `gpupool alloc`: the job is $GPUPOOL_JOB_ID.
  if (job_text.empty() && s.dashes) {
    job_text = rt.env.getenv("GPUPOOL_JOB_ID");
    if (job_text.empty()) {
      return Status::InvalidArgument(
          "exec -- CMD: give --job ID (GPUPOOL_JOB_ID is not set: this is not inside a job or "
          "gpupool alloc)");
    }
  }
  if (!job_text.empty() && (s.dashes || !s.job.empty())) {
    if (s.args.empty()) return Status::InvalidArgument("exec: give the command after --");
    argv = s.args;
    body["task"] = std::max(s.task, 0);
  } else {
    if (s.pty || s.stdin_open) {
      return Status::InvalidArgument(
          "--pty and -i go with --job ID -- CMD..., not with "
          "mpirun's HOST CMD form");
    }
    // mpirun's form: HOST COMMAND...
    if (s.args.size() < 2) {
      return Status::InvalidArgument(
          "exec: use `gpupool exec --job ID [--task N] -- CMD...`, or `gpupool exec HOST CMD...` "
          "inside a job (as mpirun calls it)");
    }
    job_text = rt.env.getenv("GPUPOOL_JOB_ID");
    if (job_text.empty()) {
      return Status::InvalidArgument(
          "exec HOST CMD: GPUPOOL_JOB_ID is not set; run it inside a job, or use --job ID");
    }
    if (s.task >= 0) {
      body["task"] = s.task;
    } else {
      body["host"] = s.args[0];
    }
    std::string line;
    for (size_t i = 1; i < s.args.size(); ++i) line += (i > 1 ? " " : "") + s.args[i];
    argv = {"/bin/sh", "-c", line};
  }
  GP_ASSIGN_OR_RETURN(*job_out, ParseJobRef(job_text));  // 17, or 12_3 of an array
  body["argv"] = argv;
  if (s.pty || s.stdin_open) {
    body["tty"] = s.pty;
    body["stdin"] = true;
    int rows = 0;
    int cols = 0;
    LocalWindowSize(&rows, &cols);
    if (rows > 0 && s.pty) {
      body["rows"] = rows;
      body["cols"] = cols;
    }
    if (s.pty) {
      // The terminal's type and language, so that clear, top and vi work over there.
      OrderedJson env = OrderedJson::object();
      for (const auto& [name, value] :
           TerminalVariables(rt.env.environ ? rt.env.environ() : std::vector<std::string>{})) {
        if (value.size() <= 256) env[name] = value;
      }
      if (!env.empty()) body["env"] = std::move(env);
    }
  }
  return body;
}

// Follows session `base` (/v1/exec/ID) to its end, printing its output; returns its last
// state. A signal to the client cancels the session (the remote command stops with us).
Result<Json> FollowExec(const ClientRuntime& rt, ApiClient& api, const std::string& base) {
  std::signal(SIGINT, OnExecSignal);
  std::signal(SIGTERM, OnExecSignal);
  std::signal(SIGHUP, OnExecSignal);
  bool seen_started = false;
  bool seen_ended = false;
  int64_t out_offset = 0;
  int64_t err_offset = 0;
  int idle_ms = 100;
  Json state;
  bool cancelled = false;
  while (true) {
    if (g_exec_signal != 0 && !cancelled) {
      cancelled = true;
      (void)api.Delete(base);  // the remote command is stopped with us
    }
    // Waits for the session to start or end (the server answers at once on a change).
    // While it runs, output is read between waits that grow while it prints nothing (an
    // mpirun daemon is quiet for the whole job) and reset when it prints.
    // output=1: once it has ended, a server that holds its whole output (a little of
    // it) answers with the rest after our offsets, sparing the output reads.
    const std::string query = base + "?wait_ms=" + std::to_string(seen_started ? idle_ms : 5000) +
                              "&started=" + (seen_started ? "1" : "0") +
                              "&ended=" + (seen_ended ? "1" : "0") +
                              "&output=1&stdout_offset=" + std::to_string(out_offset) +
                              "&stderr_offset=" + std::to_string(err_offset);
    GP_ASSIGN_OR_RETURN(ApiAnswer a, Retrying([&] { return api.Get(query); }));
    state = a.json;
    const bool just_started = !seen_started && GetBool(state, "started");
    seen_started = GetBool(state, "started");
    seen_ended = GetBool(state, "ended");
    if (seen_ended && GetBool(state, "output_complete")) {
      std::optional<std::string> out = Base64Decode(GetString(state, "stdout"));
      std::optional<std::string> err = Base64Decode(GetString(state, "stderr"));
      if (out && err) {
        if (!out->empty()) Print(rt, *out);
        if (!err->empty()) *rt.env.err << *err << std::flush;
        break;
      }
    }
    // A command that has just started has printed little: wait (up to idle_ms, less if
    // it ends) before the first read, which spares short commands a relay round trip.
    if (just_started && !seen_ended) continue;
    if (seen_started) {
      const int64_t before = out_offset + err_offset;
      GP_ASSIGN_OR_RETURN(bool out_done, Drain(rt, api, base, "stdout", &out_offset));
      GP_ASSIGN_OR_RETURN(bool err_done, Drain(rt, api, base, "stderr", &err_offset));
      if (seen_ended && out_done && err_done) break;
      idle_ms = out_offset + err_offset > before ? 100 : std::min(idle_ms * 2, 2000);
    } else if (seen_ended) {
      break;  // it never started
    }
  }
  return state;
}

// The client's exit code: the command's, 128 + its signal, or 255 (with the reason) when
// it did not run.
void SetExecExitCode(const ClientRuntime& rt, const Json& state) {
  const std::string error = GetString(state, "error");
  auto* ctx = rt.ctx;
  if (state.contains("exit_code") && state["exit_code"].is_number_integer()) {
    ctx->exit_code = state["exit_code"].get<int>();
  } else if (state.contains("signal") && state["signal"].is_number_integer()) {
    ctx->exit_code = 128 + state["signal"].get<int>();
  } else {
    ctx->exit_code = 255;
    *rt.env.err << "gpupool: exec: " << (error.empty() ? "the command did not run" : error) << "\n";
  }
}

Status RunExec(const ClientRuntime& rt, const ExecState& s) {
  std::string job;
  GP_ASSIGN_OR_RETURN(OrderedJson body, ExecRequest(rt, s, &job));
  GP_RETURN_IF_ERROR(CheckSubmissionText(body));  // DumpJson would replace stray bytes
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer started, Retrying([&] {
                        return api.Post("/v1/jobs/" + job + "/exec", DumpJson(body));
                      }));
  const int64_t id = GetInt(started.json, "id");
  if (s.pty || s.stdin_open) {
    AttachOptions options;
    options.tty = s.pty;
    GP_ASSIGN_OR_RETURN(rt.ctx->exit_code, AttachSession(rt, api, id, options));
    return Status::Ok();
  }
  GP_ASSIGN_OR_RETURN(Json state, FollowExec(rt, api, "/v1/exec/" + std::to_string(id)));
  SetExecExitCode(rt, state);
  return Status::Ok();
}

}  // namespace

void RegisterExecCommand(CLI::App& app, const RuntimePtr& rt) {
  auto s = std::make_shared<ExecState>();
  CLI::App* cmd = app.add_subcommand(
      "exec", "Run a command in a running task of a job, on its node (mpirun's rsh agent)");
  cmd->add_option(
      "--job", s->job,
      "the job, or ARRAY_INDEX for an array's element (default: $GPUPOOL_JOB_ID with HOST "
      "CMD...)");
  cmd->add_option("--task", s->task, "which task (default 0, or the task on HOST)")
      ->check(TaskIndexCheck());
  cmd->add_flag("--pty", s->pty,
                "give the command a terminal and this one's input (gpupool exec --job ID --pty "
                "-- bash)");
  cmd->add_flag("-i,--stdin", s->stdin_open, "send this process's standard input to the command");
  AddConnectionOptions(*cmd, &s->conn);
  cmd->add_option("args", s->args,
                  "-- CMD ARGS... (the job is --job, else $GPUPOOL_JOB_ID), or HOST CMD... "
                  "(mpirun's form)");
  // Everything from the first word that is not one of these options (HOST, or what
  // follows --) belongs to the command: mpirun's daemons take options of their own.
  cmd->positionals_at_end();
  cmd->callback([rt, s, cmd] {
    // CLI11 leaves a "--" separator in remaining(); that is how the two forms differ.
    const auto rest = cmd->remaining();
    s->dashes = !rest.empty() && rest.front() == "--";
    Report(*rt, RunExec(*rt, *s));
  });
}

}  // namespace gpupool::cli
