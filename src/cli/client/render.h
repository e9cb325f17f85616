// Human-readable output of the client commands, rendered from the server's JSON answers
// (docs/api.md) with lenient readers (json_view.h): a field this client does not know,
// or one that is missing, never makes a command fail; `--json` prints the answer itself.
// Pure functions of their inputs (the current time is passed in); times are UTC.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "common/status.h"

namespace gpupool::cli {

// `gpupool queue`: {"jobs": [JOB...]} as a table of DefaultQueueFields().
std::string RenderQueue(const Json& answer, int64_t now_us);
// The same with the columns `fields` (names from ParseQueueFields), in that order
// (render_queue.cc). An array's pending elements that follow each other share a row.
std::string RenderQueue(const Json& answer, int64_t now_us, const std::vector<std::string>& fields);
// id,user,name,state,gpus,nodes,time,reason: what `gpupool queue` shows.
const std::vector<std::string>& DefaultQueueFields();
// id,user,name,state,gpus,start,reason: `gpupool queue --start`.
const std::vector<std::string>& StartQueueFields();
// `queue --format`: a comma list of field names (any case), else kInvalidArgument naming
// the unknown one and every field there is.
Result<std::vector<std::string>> ParseQueueFields(const std::string& text);
// One line per field, "  NAME: what it shows", for --help.
std::string QueueFieldsHelp();
// A job's runtime (started: to its end, or to now), else the time it waited: "3m12s".
std::string FormatJobTime(const Json& job, int64_t now_us);
// `gpupool show`: one JOB, every field on its own line.
std::string RenderJob(const Json& job, int64_t now_us);
// `gpupool nodes`: {"nodes": [...]} as a table.
// `gpupool limits`: one row for the default and each user and project; '-' = no limit.
std::string RenderLimits(const Json& answer);
std::string RenderNodes(const Json& answer, int64_t now_us);
// `gpupool node show NAME`: one node of GET /v1/nodes in full: its state, resources, drain,
// and per GPU its model, allocation, enforcement, health (state, reason, evidence, since,
// by, strikes) and latest telemetry. NotFound naming the node when the answer lacks it.
Result<std::string> RenderNode(const Json& answer, const std::string& name, int64_t now_us);
// `gpupool usage`: {"since_us", "until_us", "by", "rows": [...]} as a table with a total.
// With used_gpu_hours in the rows (a server with GPU telemetry), USED and EFFICIENCY too.
std::string RenderUsage(const Json& answer);
// `gpupool usage --csv`: KEY,gpu_hours,used_gpu_hours,efficiency,jobs, one line per row.
std::string RenderUsageCsv(const Json& answer);
// `gpupool token list`: {"tokens": [...]} as a table.
// Expiry and last use are shown against `now_us` ("(expired)", "3m ago").
std::string RenderTokens(const Json& answer, int64_t now_us);
// `gpupool whoami`: "alice (uid 1000)", with ", admin" when so.
std::string RenderWhoami(const Json& answer);
// GET /v1/controllers: who leads, and every controller seen lately.
std::string RenderControllers(const Json& answer);

// The GPUs a job asks for or holds, compactly: "2", "0.25", "1 (20 GiB)", "4x2", "0".
std::string FormatJobGpus(const Json& job);
// argv as a shell would need it typed: words with special characters are quoted.
std::string ShellJoin(const std::vector<std::string>& argv);
// The job preempting `job` (its preempted_by, `by`) as its user names it: the server's
// preempted_by_name ("51_3" for an array's element), else the id.
std::string PreemptorName(const Json& job, int64_t by);

}  // namespace gpupool::cli
