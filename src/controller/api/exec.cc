// Commands in the tasks of running jobs (gpupool exec) and interactive sessions
// (gpupool run, alloc, exec --pty / -i), as their clients see them; the agents' side is
// agent.cc.
#include <algorithm>

#include "common/strings.h"
#include "controller/api/handlers.h"
#include "controller/job_lifecycle.h"
#include "jobs/job_json.h"
#include "protocol/terminal_env.h"

namespace gpupool::controller::api {

// POST /v1/jobs/ID/exec {"task": N | "host": H, "argv": [...]}: starts a command in a task
// of a running job (gpupool exec).
net::HttpResponse StartExec(const ApiContext& ctx, const Call& c) {
  const net::HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  const int64_t id = c.id;
  Result<Json> body = BodyJson(r, 1 << 20, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  int task = -1;
  std::string host;
  std::vector<std::string> argv;
  JsonFields f(*body, "");
  f.Optional("task", &task, 0, 4095);
  f.Optional("host", &host);
  f.Optional("argv", &argv);
  ExecOptions io;
  f.Optional("tty", &io.tty);
  f.Optional("stdin", &io.stdin_open);
  f.Optional("rows", &io.rows, 0, 10000);
  f.Optional("cols", &io.cols, 0, 10000);
  Result<std::map<std::string, std::string>> env =
      protocol::TerminalEnvFromJson(f.Member("env"), "env");
  if (!env.ok()) return ErrorResponse(env.status());
  io.env = std::move(*env);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  if (io.tty) io.stdin_open = true;  // a terminal is typed into
  if (argv.empty() || argv.size() > 4096) {
    return ErrorResponse(Status::InvalidArgument("argv: 1..4096 arguments, e.g. [\"hostname\"]"));
  }
  for (const std::string& a : argv) {
    if (a.find('\0') != std::string::npos || a.size() > 65536) {
      return ErrorResponse(
          Status::InvalidArgument("argv: an argument has a NUL byte or is too long"));
    }
  }
  if ((task < 0) == host.empty()) {
    return ErrorResponse(Status::InvalidArgument("give task (an index) or host (a task's host)"));
  }
  if (task < 0) {
    Result<jobs::Job> job = ctx.controller->Get(id, caller);
    if (!job.ok()) return ErrorResponse(job.status());
    for (size_t t = 0; t < job->tasks.size() && task < 0; ++t) {
      if (job->tasks[t].host == host || job->placement[t].node == host) task = static_cast<int>(t);
    }
    if (task < 0) {
      std::string hosts;
      for (const jobs::TaskStatus& t : job->tasks) hosts += (hosts.empty() ? "" : ", ") + t.host;
      return ErrorResponse(Status::InvalidArgument(
          "host: '" + host + "' runs no task of job " + lifecycle::UserJobId(*job) +
          " (its hosts: " + (hosts.empty() ? "none yet" : hosts) + ")"));
    }
  }
  Result<int64_t> x = ctx.controller->StartExec(id, task, std::move(argv), caller, io);
  if (!x.ok()) return ErrorResponse(x.status());
  // The session names its job as its user does; it was just started, so is there (else
  // the id: a started command must not be answered with an error, which a client retries).
  Result<ExecSession> started = ctx.controller->WaitExec(*x, caller, false, false, 0);
  return JsonResponse(201, {{"id", *x},
                            {"job_id", id},
                            {"job_name", started.ok() ? started->job_name : std::to_string(id)},
                            {"task", task}});
}

// POST /v1/jobs/ID/attach?wait_ms {"rows", "cols"}: gpupool run and alloc wait here for
// their job to be placed (controller.h, AttachRun).
net::HttpResponse AttachJob(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 16 << 10, 4, /*empty_is_object=*/true);
  if (!body.ok()) return ErrorResponse(body.status());
  int rows = 0;
  int cols = 0;
  JsonFields f(*body, "");
  f.Optional("rows", &rows, 0, 10000);
  f.Optional("cols", &cols, 0, 10000);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  jobs::Job job;
  Result<int64_t> session = ctx.controller->AttachRun(c.id, c.caller, rows, cols, *wait_ms, &job);
  if (!session.ok()) return ErrorResponse(session.status());
  if (job.id == 0) {
    Result<jobs::Job> j = ctx.controller->Get(c.id, c.caller);
    if (!j.ok()) return ErrorResponse(j.status());
    job = std::move(*j);
  }
  return JsonResponse(200, {{"session", *session}, {"job", jobs::JobToJson(job)}});
}

// GET /v1/exec/EID?wait_ms&started&ended: the session (long poll until it differs).
net::HttpResponse GetExec(const ApiContext& ctx, const Call& c) {
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 60'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<int64_t> stdout_offset = QueryInt(c.r, "stdout_offset", 0, 0, INT64_MAX);
  if (!stdout_offset.ok()) return ErrorResponse(stdout_offset.status());
  Result<int64_t> stderr_offset = QueryInt(c.r, "stderr_offset", 0, 0, INT64_MAX);
  if (!stderr_offset.ok()) return ErrorResponse(stderr_offset.status());
  Result<ExecSession> x = ctx.controller->WaitExec(c.id, c.caller, c.r.Query("started") == "1",
                                                   c.r.Query("ended") == "1", *wait_ms);
  if (!x.ok()) return ErrorResponse(x.status());
  OrderedJson j;
  j["id"] = x->id;
  j["job_id"] = x->job_id;
  j["job_name"] = x->job_name;
  j["task"] = x->task_index;
  j["node"] = x->node;
  j["started"] = x->started;
  j["ended"] = x->ended;
  if (x->exit_code) j["exit_code"] = *x->exit_code;
  if (x->signal) j["signal"] = *x->signal;
  if (!x->error.empty()) j["error"] = x->error;
  if (c.r.Query("output") == "1" && x->ended && x->output_complete) {
    // The rest of its output, which came with its end: the client needs no output reads.
    const int64_t from[2] = {*stdout_offset, *stderr_offset};
    const char* key[2] = {"stdout", "stderr"};
    j["output_complete"] = true;
    for (int i = 0; i < 2; ++i) {
      const std::string& all = x->complete_output[i];
      const size_t at = static_cast<size_t>(std::min<int64_t>(from[i], std::ssize(all)));
      j[key[i]] = Base64Encode(std::string_view(all).substr(at));
    }
  }
  return JsonResponse(200, j);
}

// GET /v1/exec/EID/output?stream&offset: the session's output, relayed from its node.
net::HttpResponse ReadExecOutput(const ApiContext& ctx, const Call& c) {
  const std::string stream = c.r.Query("stream", "stdout");
  if (stream != "stdout" && stream != "stderr") {
    return ErrorResponse(Status::InvalidArgument("stream: use stdout or stderr"));
  }
  Result<int64_t> offset = QueryInt(c.r, "offset", 0, 0, INT64_MAX);
  if (!offset.ok()) return ErrorResponse(offset.status());
  Result<ExecSession> x = ctx.controller->WaitExec(c.id, c.caller, false, false, 0);
  if (!x.ok()) return ErrorResponse(x.status());
  const std::string& path = stream == "stdout" ? x->stdout_path : x->stderr_path;
  net::HttpResponse resp;
  resp.content_type = "application/octet-stream";
  int64_t size = 0;
  if (x->output_complete) {
    // The whole output came with the session's end: no relay from the node.
    const std::string& all = x->complete_output[stream == "stdout" ? 0 : 1];
    size = static_cast<int64_t>(all.size());
    if (*offset < size) {
      resp.body = all.substr(static_cast<size_t>(*offset), static_cast<size_t>(kMaxRelayedChunk));
    }
  } else if (!path.empty() && ctx.controller->NodeUp(x->node)) {
    Result<LogChunk> chunk =
        ctx.controller->log_relay().Fetch(x->node, path, *offset, kMaxRelayedChunk, kRelayTimeout);
    if (!chunk.ok() && chunk.status().code() != StatusCode::kNotFound) {
      return ErrorResponse(chunk.status());
    }
    if (chunk.ok()) {
      resp.body = std::move(chunk->data);
      size = chunk->size;
    }
  }
  const int64_t next = *offset + static_cast<int64_t>(resp.body.size());
  resp.headers["X-Gpupool-Next-Offset"] = std::to_string(next);
  resp.headers["X-Gpupool-Eof"] = x->ended && next >= size ? "1" : "0";
  return resp;
}

// GET /v1/exec/EID/stream?stdout_offset&stderr_offset&started&wait_ms: an interactive
// session's output from those offsets and its state (long poll until there is news).
net::HttpResponse ReadExecStream(const ApiContext& ctx, const Call& c) {
  Result<int64_t> out = QueryInt(c.r, "stdout_offset", 0, 0, INT64_MAX);
  if (!out.ok()) return ErrorResponse(out.status());
  Result<int64_t> err = QueryInt(c.r, "stderr_offset", 0, 0, INT64_MAX);
  if (!err.ok()) return ErrorResponse(err.status());
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<ExecStreamRead> x = ctx.controller->ReadExecStream(c.id, c.caller, *out, *err,
                                                            c.r.Query("started") == "1", *wait_ms);
  if (!x.ok()) return ErrorResponse(x.status());
  OrderedJson j;
  j["id"] = c.id;
  j["stdout"] = Base64Encode(x->stdout_data);
  j["stderr"] = Base64Encode(x->stderr_data);
  j["stdout_next"] = x->stdout_next;
  j["stderr_next"] = x->stderr_next;
  j["eof"] = x->eof;
  j["started"] = x->started;
  j["ended"] = x->ended;
  if (x->exit_code) j["exit_code"] = *x->exit_code;
  if (x->signal) j["signal"] = *x->signal;
  if (!x->error.empty()) j["error"] = x->error;
  return JsonResponse(200, j);
}

// POST /v1/exec/EID/input: one input item (protocol::ExecInputItem) for the session.
net::HttpResponse PushExecInput(const ApiContext& ctx, const Call& c) {
  Result<Json> body = BodyJson(c.r, 1 << 20, 4);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::ExecInputItem> item = protocol::DecodeExecInputItem(*body, "input");
  if (!item.ok()) return ErrorResponse(item.status());
  Status s = ctx.controller->PushExecInput(c.id, c.caller, std::move(*item));
  if (!s.ok()) return ErrorOrTooMany(s);
  return JsonResponse(200, {{"ok", true}});
}

// DELETE /v1/exec/EID: stops the session's command.
net::HttpResponse CancelExec(const ApiContext& ctx, const Call& c) {
  Status s = ctx.controller->CancelExec(c.id, c.caller);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, {{"ok", true}});
}

}  // namespace gpupool::controller::api
