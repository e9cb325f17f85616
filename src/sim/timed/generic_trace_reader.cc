#include "sim/timed/generic_trace_reader.h"

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "sim/timed/civil_time.h"

namespace gpupool::sim {
namespace {

constexpr std::string_view kColumns[] = {
    "job_id",           "user",     "project",       "submit_time",       "duration",  "time_limit",
    "runtime_estimate", "tasks",    "gpus_per_task", "gpu_milli",         "cpu_milli", "memory_mib",
    "gpu_model",        "priority", "array",         "array_max_running", "held_for",  "requeue",
    "gpu_memory_mib"};

// Fields of one job as read, before the shared checks.
struct RawJob {
  std::string id;
  std::string user = "default";
  std::string project;
  int64_t submit_s = 0;
  int64_t duration_s = 0;
  int64_t time_limit_s = 0;
  int64_t estimate_s = 0;
  int64_t tasks = 1;
  int64_t gpus = 0;
  std::optional<int64_t> gpu_milli;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t gpu_memory_mib = 0;
  std::string gpu_model;
  int64_t priority = 0;
  std::string array;
  int64_t array_max_running = 0;
  int64_t held_for_s = 0;
  int64_t requeue = 0;
};

std::vector<std::string> SplitModels(std::string_view text) {
  std::vector<std::string> models;
  for (const std::string& m : Split(text, '|')) {
    std::string t(Trim(m));
    if (!t.empty()) models.push_back(std::move(t));
  }
  return models;
}

// Shared checks and conversion. `where(field)` prefixes messages about a field.
template <typename Where>
Result<TraceJob> Finish(RawJob raw, const Where& where) {
  if (raw.id.empty()) return Status::InvalidArgument(where("job_id") + ": empty; name the job");
  if (raw.tasks < 1)
    return Status::InvalidArgument(where("tasks") + ": a job needs 1 task or more");
  if (raw.array_max_running > 0 && raw.array.empty()) {
    return Status::InvalidArgument(where("array_max_running") +
                                   ": bounds an array's elements; name the array in 'array'");
  }
  const int64_t milli = raw.gpu_milli.value_or(raw.gpus > 0 ? 1000 : 0);
  if (milli > 1000) {
    return Status::InvalidArgument(fmt::format(
        "{}: GPU share {} is above 1000 (thousandths of one GPU; ask for more GPUs instead)",
        where("gpu_milli"), milli));
  }
  TraceJob job;
  job.id = std::move(raw.id);
  job.user = raw.user.empty() ? "default" : std::move(raw.user);
  job.project = raw.project.empty() ? job.user : std::move(raw.project);
  job.submit_s = raw.submit_s;
  job.duration_s = raw.duration_s;
  job.time_limit_s = raw.time_limit_s;
  job.runtime_estimate_s = raw.estimate_s;
  job.priority = static_cast<int>(raw.priority);
  job.array = std::move(raw.array);
  job.array_max_running = static_cast<int>(raw.array_max_running);
  job.held_for_s = raw.held_for_s;
  job.requeue = raw.requeue != 0;
  TraceTask task;
  task.num_gpu = static_cast<int>(raw.gpus);
  task.gpu_milli = static_cast<int>(milli);
  task.cpu_milli = raw.cpu_milli;
  task.memory_mib = raw.memory_mib;
  task.gpu_models = SplitModels(raw.gpu_model);
  task.gpu_memory_mib = raw.gpu_memory_mib;
  if (task.gpu_memory_mib > 0 && !(task.num_gpu == 1 && task.gpu_milli < 1000)) {
    return Status::InvalidArgument(where("gpu_memory_mib") +
                                   ": only a share (gpus_per_task 1, gpu_milli below 1000) "
                                   "asks for GPU memory");
  }
  GP_RETURN_IF_ERROR(ValidateTraceTask(task, where("gpu_milli")));
  job.tasks.assign(static_cast<size_t>(raw.tasks), task);
  return job;
}

}  // namespace

Result<std::vector<TraceJob>> ReadGenericCsv(const CsvTable& t) {
  GP_RETURN_IF_ERROR(t.RequireColumns({"job_id", "submit_time", "duration"}));
  // Unknown columns are refused: "gpu_modle" must not silently mean "any model".
  for (const std::string& column : t.header()) {
    bool known = false;
    for (std::string_view k : kColumns) known |= column == k;
    if (!known) {
      return Status::InvalidArgument(
          fmt::format("{}:1: unknown column '{}'; the generic format's columns are documented in "
                      "docs/sim.md",
                      t.source(), SanitizeUtf8(column.substr(0, 40))));
    }
  }
  std::vector<TraceJob> jobs;
  jobs.reserve(t.num_rows());
  constexpr int64_t kMaxInt = int64_t{1} << 31;
  for (size_t r = 0; r < t.num_rows(); ++r) {
    RawJob raw;
    raw.id = std::string(Trim(t.Field(r, "job_id")));
    raw.user = std::string(Trim(t.Field(r, "user")));
    raw.project = std::string(Trim(t.Field(r, "project")));
    std::optional<int64_t> submit = ParseTimestampSeconds(t.Field(r, "submit_time"));
    if (!submit) {
      return Status::InvalidArgument(fmt::format(
          "{}: '{}' is not a time; expected seconds or 'YYYY-MM-DD HH:MM:SS'",
          t.Where(r, "submit_time"), SanitizeUtf8(t.Field(r, "submit_time").substr(0, 40))));
    }
    if (*submit < 0) {
      return Status::InvalidArgument(t.Where(r, "submit_time") + ": negative time is not allowed");
    }
    raw.submit_s = *submit;
    GP_ASSIGN_OR_RETURN(raw.duration_s, t.Int(r, "duration", 0));
    GP_ASSIGN_OR_RETURN(raw.time_limit_s, t.Int(r, "time_limit", 0, INT64_MAX, 0));
    GP_ASSIGN_OR_RETURN(raw.estimate_s, t.Int(r, "runtime_estimate", 0, INT64_MAX, 0));
    GP_ASSIGN_OR_RETURN(raw.tasks, t.Int(r, "tasks", 0, 100000, 1));
    GP_ASSIGN_OR_RETURN(raw.gpus, t.Int(r, "gpus_per_task", 0, 4096, 0));
    if (!Trim(t.Field(r, "gpu_milli")).empty()) {
      GP_ASSIGN_OR_RETURN(raw.gpu_milli, t.Int(r, "gpu_milli", 0));
    }
    GP_ASSIGN_OR_RETURN(raw.cpu_milli, t.Int(r, "cpu_milli", 0, INT64_MAX, 0));
    GP_ASSIGN_OR_RETURN(raw.memory_mib, t.Int(r, "memory_mib", 0, INT64_MAX, 0));
    GP_ASSIGN_OR_RETURN(raw.gpu_memory_mib, t.Int(r, "gpu_memory_mib", 0, INT64_MAX, 0));
    raw.gpu_model = std::string(t.Field(r, "gpu_model"));
    GP_ASSIGN_OR_RETURN(raw.priority, t.Int(r, "priority", -kMaxInt, kMaxInt, 0));
    raw.array = std::string(Trim(t.Field(r, "array")));
    GP_ASSIGN_OR_RETURN(raw.array_max_running, t.Int(r, "array_max_running", 0, 1000000, 0));
    GP_ASSIGN_OR_RETURN(raw.held_for_s, t.Int(r, "held_for", 0, INT64_MAX, 0));
    GP_ASSIGN_OR_RETURN(raw.requeue, t.Int(r, "requeue", 0, 1, 0));
    auto where = [&](std::string_view field) { return t.Where(r, field); };
    GP_ASSIGN_OR_RETURN(TraceJob job, Finish(std::move(raw), where));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<TraceJob>> ReadGenericJson(std::string_view text, const std::string& source) {
  GP_ASSIGN_OR_RETURN(Json doc, ParseJson(text, source));
  const Json* list = &doc;
  if (doc.is_object()) {
    JsonFields top(doc, source);
    list = top.Array("jobs");
    GP_RETURN_IF_ERROR(top.Finish());
    if (list == nullptr) {
      return Status::InvalidArgument(source + ": missing \"jobs\"; expected {\"jobs\": [...]}");
    }
  } else if (!doc.is_array()) {
    return Status::InvalidArgument(
        fmt::format("{}: found {} at the top; expected an array of jobs or {{\"jobs\": [...]}}",
                    source, JsonTypeName(doc)));
  }
  std::vector<TraceJob> jobs;
  jobs.reserve(list->size());
  constexpr int kMaxInt = 1 << 30;
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& j = (*list)[i];
    const std::string path = fmt::format("{}: jobs[{}]", source, i);
    if (!j.is_object()) {
      return Status::InvalidArgument(
          fmt::format("{}: found {} where a job object was expected", path, JsonTypeName(j)));
    }
    JsonFields f(j, path);
    RawJob raw;
    int64_t milli = -1;
    f.Required("job_id", &raw.id);
    f.Optional("user", &raw.user);
    f.Optional("project", &raw.project);
    f.Required("submit_time", &raw.submit_s, 0);
    f.Required("duration", &raw.duration_s, 0);
    f.Optional("time_limit", &raw.time_limit_s, 0);
    f.Optional("runtime_estimate", &raw.estimate_s, 0);
    f.Optional("tasks", &raw.tasks, 0, 100000);
    f.Optional("gpus_per_task", &raw.gpus, 0, 4096);
    f.Optional("gpu_milli", &milli, -1);
    f.Optional("cpu_milli", &raw.cpu_milli, 0);
    f.Optional("memory_mib", &raw.memory_mib, 0);
    f.Optional("gpu_memory_mib", &raw.gpu_memory_mib, 0);
    f.Optional("gpu_model", &raw.gpu_model);
    f.Optional("priority", &raw.priority, -kMaxInt, kMaxInt);
    f.Optional("array", &raw.array);
    f.Optional("array_max_running", &raw.array_max_running, 0, 1000000);
    f.Optional("held_for", &raw.held_for_s, 0);
    f.Optional("requeue", &raw.requeue, 0, 1);
    GP_RETURN_IF_ERROR(f.Finish());
    if (milli >= 0) raw.gpu_milli = milli;
    auto where = [&](std::string_view field) { return f.PathOf(field); };
    GP_ASSIGN_OR_RETURN(TraceJob job, Finish(std::move(raw), where));
    jobs.push_back(std::move(job));
  }
  return jobs;
}

Result<std::vector<TraceJob>> ReadGenericTraceText(std::string_view text,
                                                   const std::string& source) {
  std::string_view rest = Trim(text);
  if (!rest.empty() && (rest.front() == '[' || rest.front() == '{')) {
    return ReadGenericJson(text, source);
  }
  GP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Parse(text, source));
  return ReadGenericCsv(table);
}

Result<std::vector<TraceJob>> ReadGenericTraceFile(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, size_t{1} << 30));
  return ReadGenericTraceText(text, path);
}

}  // namespace gpupool::sim
