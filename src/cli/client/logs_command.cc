// `gpupool logs ID [--task N] [--stderr] [-f]`: a job's output, raw, to stdout.
#include <algorithm>
#include <chrono>
#include <thread>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "jobs/job.h"

namespace gpupool::cli {
namespace {

struct LogsState {
  ConnectionFlags conn;
  std::string id;
  bool stderr_stream = false;
  bool follow = false;
  int task = 0;
};

// Whether the job has ended, for servers whose answers do not carry the log headers.
Result<bool> JobEnded(const ApiClient& api, int64_t id) {
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get("/v1/jobs/" + std::to_string(id)));
  auto state = jobs::ParseJobState(GetString(GetObject(answer.json, "job"), "state"));
  return state.has_value() && jobs::IsTerminal(*state);
}

// Reads one chunk. The server answers 503 for bytes it could not get now (the node that
// has the log did not send them in time), never the end of the log: asked again a few
// times, then the command fails saying so, rather than end early as if complete.
constexpr int kLogReadTries = 4;
Result<LogChunk> ReadChunk(const ClientRuntime& rt, const ApiClient& api, int64_t id,
                           const std::string& stream, int64_t offset, const LogsState& s) {
  for (int attempt = 1;; ++attempt) {
    Result<LogChunk> chunk =
        api.ReadLog(id, stream, offset, s.follow ? rt.env.log_wait_ms : 0, s.task);
    if (chunk.ok() || chunk.status().code() != StatusCode::kUnavailable ||
        attempt == kLogReadTries) {
      return chunk;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rt.env.log_retry_pause_ms));
  }
}

Status RunLogs(const ClientRuntime& rt, const LogsState& s) {
  GP_ASSIGN_OR_RETURN(std::string ref, ParseJobRef(s.id));
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(int64_t id, ResolveJobId(api, ref));  // an array's element: its id
  const std::string stream = s.stderr_stream ? "stderr" : "stdout";
  int64_t offset = 0;
  bool ending = false;  // the job has ended (no headers): one more read, then stop
  while (true) {
    GP_ASSIGN_OR_RETURN(LogChunk chunk, ReadChunk(rt, api, id, stream, offset, s));
    if (!chunk.bytes.empty()) Print(rt, chunk.bytes);
    const bool progressed = chunk.next_offset > offset;
    offset = std::max(offset, chunk.next_offset);
    if (chunk.eof) return Status::Ok();
    if (progressed) continue;            // there may be more already
    if (!s.follow) return Status::Ok();  // everything written so far has been printed
    if (ending) return Status::Ok();
    // The server's wait_ms long poll paces this loop; the pause only guards against a
    // server that answers at once, so the loop cannot spin.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!chunk.offset_header_seen) {
      // Without X-Gpupool-Eof we learn the end from the job's state, and read once more
      // after it so that bytes written just before the end are not lost.
      GP_ASSIGN_OR_RETURN(ending, JobEnded(api, id));
    }
  }
}

}  // namespace

void RegisterLogsCommand(CLI::App& app, const RuntimePtr& rt) {
  auto s = std::make_shared<LogsState>();
  CLI::App* cmd = app.add_subcommand("logs", "Print a job's output (stdout, or --stderr)");
  cmd->add_option("id", s->id, "job id, or ARRAY_INDEX for an array's element")->required();
  cmd->add_flag("--stderr", s->stderr_stream, "the job's standard error instead of its output");
  cmd->add_flag("-f,--follow", s->follow, "keep printing new output until the job ends");
  cmd->add_option("--task", s->task, "which task of a multi-task job (default 0)")
      ->check(TaskIndexCheck());
  AddConnectionOptions(*cmd, &s->conn);
  cmd->callback([rt, s] { Report(*rt, RunLogs(*rt, *s)); });
}

}  // namespace gpupool::cli
