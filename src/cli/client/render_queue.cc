// `gpupool queue`: the job table, its fields by name (--format) and the start view
// (--start). Declared in render.h.
#include <algorithm>
#include <set>

#include "cli/client/json_view.h"
#include "cli/client/render.h"
#include "cli/client/table.h"
#include "cli/client/units.h"
#include "common/strings.h"

namespace gpupool::cli {
namespace {

std::string JoinParts(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// Distinct placement nodes in placement order, "-" when not placed.
std::string Nodes(const Json& job) {
  std::vector<std::string> nodes;
  std::set<std::string> seen;
  for (const Json& p : GetArray(job, "placement")) {
    std::string n = GetString(p, "node");
    if (!n.empty() && seen.insert(n).second) nodes.push_back(n);
  }
  return nodes.empty() ? "-" : JoinParts(nodes, ",");
}

std::string Why(const Json& job, int64_t now_us) {
  const std::string state = GetString(job, "state");
  // A job preempted before: how often, after its pending reason.
  const int64_t preemptions = GetInt(job, "preemptions");
  const std::string times =
      preemptions > 0 ? " [preempted " + std::to_string(preemptions) + "x]" : std::string();
  if (state == "PENDING") return GetString(job, "pending_reason") + times;
  if (const int64_t by = GetInt(job, "preempted_by"); by > 0) {
    return "PREEMPTED by job " + PreemptorName(job, by) + ": stopping" + times;
  }
  if (GetBool(job, "cancel_requested") && (state == "RUNNING" || state == "ASSIGNED")) {
    return "cancelling";
  }
  // A running job whose GPUs sit idle (the server's --idle-threshold and --idle-after).
  const Json& util = GetObject(job, "gpu_util");
  if (state == "RUNNING" && GetBool(util, "idle")) {
    const int64_t since_ms = GetInt(util, "idle_since_ms");
    return "IDLE: GPUs unused" +
           (since_ms > 0
                ? " for " + FormatDuration(std::max<int64_t>(0, now_us / 1000 - since_ms) / 1000)
                : std::string());
  }
  return GetString(job, "reason");
}

// When the job started, or for a pending one when the scheduler plans to start it:
// "2026-11-27T09:00:00Z (in 1h02m)"; "N/A (why)" when it has no plan for it (the server's
// start_estimate_note), "-" for a job that ended unstarted.
std::string StartCell(const Json& job, int64_t now_us) {
  if (const int64_t start = GetInt(job, "start_time_us"); start > 0) return FormatTimeUtc(start);
  if (GetString(job, "state") != "PENDING") return "-";
  const int64_t planned = GetInt(job, "start_estimate_us");
  if (planned <= 0) {
    const std::string note = GetString(job, "start_estimate_note");
    return note.empty() ? std::string("N/A") : "N/A (" + note + ")";
  }
  return FormatTimeUtc(planned) + " (in " +
         FormatDuration(std::max<int64_t>(0, planned - now_us) / 1'000'000) + ")";
}

// The exit code, "signal N", or "-" while it has neither.
std::string ExitCell(const Json& job) {
  if (const Json* sig = Field(job, "signal"); sig != nullptr && sig->is_number_integer()) {
    return "signal " + std::to_string(sig->get<int64_t>());
  }
  const Json* code = Field(job, "exit_code");
  return code != nullptr && code->is_number_integer() ? std::to_string(code->get<int64_t>()) : "-";
}

std::string CommandCell(const Json& job) {
  std::vector<std::string> argv;
  for (const Json& a : GetArray(job, "command")) {
    if (a.is_string()) argv.push_back(a.get<std::string>());
  }
  return ShellJoin(argv);
}

struct QueueField {
  const char* name;
  const char* header;  // '>' at the end: right-aligned
  const char* what;    // for --help and the error naming the fields
  std::string (*cell)(const Json& job, int64_t now_us);
};

// Every field `queue --format` takes, in the order `--format help` lists them.
const QueueField kFields[] = {
    {"id", "ID>", "job id; ARRAY_INDEX for an array's element", nullptr},
    {"user", "USER", "owner", [](const Json& j, int64_t) { return GetString(j, "user"); }},
    {"name", "NAME", "--name, else the script's or command's base name",
     [](const Json& j, int64_t) { return GetString(j, "name"); }},
    {"state", "STATE", "PENDING, RUNNING, ...",
     [](const Json& j, int64_t) { return GetString(j, "state"); }},
    {"gpus", "GPUS>", "GPUs asked for or held",
     [](const Json& j, int64_t) { return FormatJobGpus(j); }},
    {"nodes", "NODES", "nodes it runs on", [](const Json& j, int64_t) { return Nodes(j); }},
    {"time", "TIME>", "runtime, or time waited", &FormatJobTime},
    // runtime and wait as --sort orders by them (jobs/job_sort.h).
    {"runtime", "RUNTIME>", "start to end, else to now (- while not started)",
     [](const Json& j, int64_t now_us) {
       const int64_t start = GetInt(j, "start_time_us");
       if (start <= 0) return std::string("-");
       const int64_t end = GetInt(j, "end_time_us");
       return FormatDuration(std::max<int64_t>(0, (end > 0 ? end : now_us) - start) / 1'000'000);
     }},
    {"wait", "WAIT>", "submit to start, else to its end, else to now",
     [](const Json& j, int64_t now_us) {
       const int64_t start = GetInt(j, "start_time_us");
       const int64_t end = GetInt(j, "end_time_us");
       const int64_t until = start > 0 ? start : end > 0 ? end : now_us;
       const int64_t submit = GetInt(j, "submit_time_us");
       if (submit <= 0) return std::string("-");
       return FormatDuration(std::max<int64_t>(0, until - submit) / 1'000'000);
     }},
    {"reason", "REASON", "why it waits, or how it ended", &Why},
    {"project", "PROJECT", "--project",
     [](const Json& j, int64_t) { return GetString(j, "project"); }},
    {"priority", "PRIORITY>", "--priority",
     [](const Json& j, int64_t) { return std::to_string(GetInt(j, "priority")); }},
    {"tasks", "TASKS>", "tasks (-n)",
     [](const Json& j, int64_t) {
       return std::to_string(GetInt(GetObject(j, "request"), "tasks", 1));
     }},
    {"cpus", "CPUS>", "CPUs per task",
     [](const Json& j, int64_t) {
       return FormatMilli(GetInt(GetObject(j, "request"), "cpu_milli", 1000));
     }},
    {"memory", "MEMORY>", "memory per task",
     [](const Json& j, int64_t) {
       const int64_t b = GetInt(GetObject(j, "request"), "memory_bytes");
       return b > 0 ? FormatBytes(static_cast<uint64_t>(b)) : std::string("-");
     }},
    {"time_limit", "TIME_LIMIT>", "--time",
     [](const Json& j, int64_t) {
       const int64_t s = GetInt(j, "time_limit_s");
       return s > 0 ? FormatDuration(s) : std::string("none");
     }},
    {"submitted", "SUBMITTED", "submit time (UTC)",
     [](const Json& j, int64_t) { return FormatTimeUtc(GetInt(j, "submit_time_us")); }},
    {"start", "START", "start time, or the scheduler's planned start of a pending job (N/A: none)",
     &StartCell},
    {"ended", "ENDED", "end time (UTC)",
     [](const Json& j, int64_t) { return FormatTimeUtc(GetInt(j, "end_time_us")); }},
    {"exit", "EXIT>", "exit code or signal", [](const Json& j, int64_t) { return ExitCell(j); }},
    {"command", "COMMAND", "command and arguments",
     [](const Json& j, int64_t) { return CommandCell(j); }},
    {"workdir", "WORKDIR", "working directory",
     [](const Json& j, int64_t) { return GetString(j, "workdir"); }},
};

const QueueField* FindField(std::string_view name) {
  for (const QueueField& f : kFields) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// "0-4,7,9-10" from ascending indices.
std::string IndexRanges(const std::vector<int64_t>& idx) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && idx[j + 1] == idx[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(idx[i])
                           : std::to_string(idx[i]) + "-" + std::to_string(idx[j]));
    i = j + 1;
  }
  return JoinParts(parts, ",");
}

// The ID cell of jobs[*i]; an array's pending elements that follow it share its row, as
// squeue shows them (12_[5-99%10]): *i moves past them. Held elements (`hold 12_[7-8]`)
// and elements not held do not share a row, so the hold and its reason show.
std::string IdCell(const Json& jobs, size_t* i) {
  const Json& job = jobs[*i];
  const int64_t array = GetInt(job, "array_id");
  if (array == 0) return std::to_string(GetInt(job, "id"));
  std::string id = std::to_string(array) + "_" + std::to_string(GetInt(job, "array_index"));
  if (GetString(job, "state") != "PENDING") return id;
  std::vector<int64_t> indices = {GetInt(job, "array_index")};
  const std::string held_by = GetString(job, "held_by");
  while (*i + 1 < jobs.size() && GetInt(jobs[*i + 1], "array_id") == array &&
         GetString(jobs[*i + 1], "state") == "PENDING" &&
         GetString(jobs[*i + 1], "held_by") == held_by) {
    indices.push_back(GetInt(jobs[++*i], "array_index"));
  }
  if (indices.size() == 1) return id;
  const int64_t limit = GetInt(job, "array_max_running");
  return std::to_string(array) + "_[" + IndexRanges(indices) +
         (limit > 0 ? "%" + std::to_string(limit) : "") + "]";
}

}  // namespace

const std::vector<std::string>& DefaultQueueFields() {
  static const std::vector<std::string> fields = {"id",   "user",  "name", "state",
                                                  "gpus", "nodes", "time", "reason"};
  return fields;
}

const std::vector<std::string>& StartQueueFields() {
  static const std::vector<std::string> fields = {"id",   "user",  "name",  "state",
                                                  "gpus", "start", "reason"};
  return fields;
}

std::string QueueFieldsHelp() {
  std::string out;
  for (const QueueField& f : kFields) out += std::string("  ") + f.name + ": " + f.what + "\n";
  return out;
}

Result<std::vector<std::string>> ParseQueueFields(const std::string& text) {
  std::vector<std::string> fields;
  for (const std::string& raw : Split(text, ',')) {
    std::string name(Trim(raw));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name.empty()) continue;
    if (FindField(name) == nullptr) {
      std::vector<std::string> names;
      for (const QueueField& f : kFields) names.emplace_back(f.name);
      return Status::InvalidArgument("--format " + text + ": unknown field '" + raw +
                                     "'; the fields are " + JoinParts(names, ","));
    }
    fields.push_back(std::move(name));
  }
  if (fields.empty()) {
    return Status::InvalidArgument("--format: give fields, e.g. --format id,name,state,start");
  }
  return fields;
}

std::string RenderQueue(const Json& answer, int64_t now_us,
                        const std::vector<std::string>& field_names) {
  std::vector<const QueueField*> fields;
  std::vector<std::string> headers;
  for (const std::string& name : field_names) {
    if (const QueueField* f = FindField(name); f != nullptr) {
      fields.push_back(f);
      headers.emplace_back(f->header);
    }
  }
  Table t(headers);
  const Json& jobs = GetArray(answer, "jobs");
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Json& job = jobs[i];
    std::vector<std::string> row;
    row.reserve(fields.size());
    for (const QueueField* f : fields)
      row.push_back(f->cell == nullptr ? "" : f->cell(job, now_us));
    const std::string id = IdCell(jobs, &i);
    for (size_t k = 0; k < fields.size(); ++k) {
      if (fields[k]->cell == nullptr) row[k] = id;
    }
    t.AddRow(std::move(row));
  }
  return t.Render();
}

std::string RenderQueue(const Json& answer, int64_t now_us) {
  return RenderQueue(answer, now_us, DefaultQueueFields());
}

}  // namespace gpupool::cli
