// The agent protocol's endpoints: where each message goes (one definition for the agent's
// link and the controller's route table), and the one message carried in a request's
// query and raw body rather than in a JSON body: the answer to a log read (LogAnswer).
// docs/api.md, "Agent protocol". Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpupool::protocol {

inline constexpr char kRegisterPath[] = "/v1/agent/register";    // POST Registration
inline constexpr char kWorkPath[] = "/v1/agent/work";            // GET ?node&wait_ms: Work
inline constexpr char kEventsPath[] = "/v1/agent/events";        // POST EventBatch
inline constexpr char kLogsPath[] = "/v1/agent/logs";            // POST LogAnswer
inline constexpr char kTelemetryPath[] = "/v1/agent/telemetry";  // POST TelemetryBatch
// GET ?node&after&wait_ms: ExecInput; POST ?node&wait_ms ExecOutput: ExecOutputAck.
inline constexpr char kExecInputPattern[] = "/v1/agent/exec/{id}/input";
inline constexpr char kExecOutputPattern[] = "/v1/agent/exec/{id}/output";
std::string ExecInputPath(int64_t exec_id);   // kExecInputPattern for one session
std::string ExecOutputPath(int64_t exec_id);  // kExecOutputPattern for one session

// POST /v1/agent/logs?node=NODE&id=ID&size=SIZE with the bytes read as the body, or
// ?node=NODE&id=ID&error=not_found|refused|io with the agent's words as the body: the
// answer to one LogRequest of the work.
struct LogAnswer {
  std::string node;  // the answering node ("" when its token says which)
  int64_t id = 0;    // the LogRequest's id
  // Ok: `data` holds the bytes read. NotFound (not_found: no such file), PermissionDenied
  // (refused: not a log file of the node's jobs), anything else Unavailable (io); the
  // message is the agent's words.
  Status status;
  std::string data;
  int64_t size = 0;  // the file's size when it was read
};

// The answer's query parameters (name, value, in order; values not yet URL-encoded) and
// its body.
std::vector<std::pair<std::string, std::string>> LogAnswerQuery(const LogAnswer& a);
std::string LogAnswerBody(const LogAnswer& a);

// The controller's reading of an answer from its query parameters (`query(name)`: the
// decoded value, "" when absent) and body. InvalidArgument naming the parameter: a
// missing or bad id, a bad size, an unknown error.
Result<LogAnswer> DecodeLogAnswer(const std::function<std::string(const std::string&)>& query,
                                  std::string body);

}  // namespace gpupool::protocol
