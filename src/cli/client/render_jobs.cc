// Job views: `gpupool queue` and `gpupool show`. Declared in render.h.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>
#include <string_view>

#include "cli/client/json_view.h"
#include "cli/client/render.h"
#include "cli/client/table.h"
#include "cli/client/units.h"

namespace gpupool::cli {
namespace {

std::vector<std::string> StringList(const Json& array) {
  std::vector<std::string> out;
  for (const Json& e : array) {
    if (e.is_string()) out.push_back(e.get<std::string>());
  }
  return out;
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

// "73%", "2.5%".
std::string Percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 && v != static_cast<int64_t>(v) ? "%.1f%%" : "%.0f%%", v);
  return buf;
}

std::string RequestText(const Json& r) {
  std::vector<std::string> parts;
  const int64_t gpus = GetInt(r, "gpus");
  const int64_t milli = GetInt(r, "gpu_milli", 1000);
  const int64_t gpu_mem = GetInt(r, "gpu_memory_bytes");
  if (gpus == 0) {
    parts.push_back("no GPU");
  } else if (gpu_mem > 0) {
    parts.push_back("a share of 1 GPU sized by " + FormatBytes(static_cast<uint64_t>(gpu_mem)) +
                    " of its memory");
  } else if (milli < 1000) {
    parts.push_back(FormatMilli(milli) + " of 1 GPU");
  } else {
    parts.push_back(std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs"));
  }
  std::vector<std::string> constraints;
  if (auto models = StringList(GetArray(r, "gpu_models")); !models.empty()) {
    constraints.push_back("model " + Join(models, " or "));
  }
  if (auto v = GetString(r, "vendor"); !v.empty()) constraints.push_back("vendor " + v);
  if (auto c = GetString(r, "min_capability"); !c.empty()) {
    constraints.push_back("capability >= " + c);
  }
  if (!constraints.empty()) parts.back() += " (" + Join(constraints, ", ") + ")";
  parts.push_back(FormatMilli(GetInt(r, "cpu_milli", 1000)) + " CPU");
  if (const int64_t mem = GetInt(r, "memory_bytes"); mem > 0) {
    parts.push_back(FormatBytes(static_cast<uint64_t>(mem)) + " memory");
  }
  if (const int64_t tasks = GetInt(r, "tasks", 1); tasks != 1) {
    parts.push_back("each of " + std::to_string(tasks) + " tasks");
  }
  return Join(parts, ", ");
}

// The job's own node choice: "on node0 or node1 (--nodelist); not on gpu3 (--exclude)";
// empty when it made none. Long lists are cut (the JSON, --json, has them whole).
std::string NodeChoiceText(const Json& r) {
  auto names = [](std::vector<std::string> v) {
    constexpr size_t kShown = 16;
    const size_t more = v.size() > kShown ? v.size() - kShown : 0;
    v.resize(std::min(v.size(), kShown));
    return Join(v, ", ") + (more > 0 ? " and " + std::to_string(more) + " more" : "");
  };
  std::vector<std::string> parts;
  if (auto only = StringList(GetArray(r, "nodelist")); !only.empty()) {
    parts.push_back("only on " + names(std::move(only)) + " (--nodelist)");
  }
  if (auto not_on = StringList(GetArray(r, "exclude")); !not_on.empty()) {
    parts.push_back("not on " + names(std::move(not_on)) + " (--exclude)");
  }
  return Join(parts, "; ");
}

}  // namespace

// Runtime for started jobs (to the end, or to now), time waited for jobs not started.
std::string FormatJobTime(const Json& job, int64_t now_us) {
  const int64_t start = GetInt(job, "start_time_us");
  const int64_t end = GetInt(job, "end_time_us");
  const int64_t submit = GetInt(job, "submit_time_us");
  if (start > 0) return FormatDuration(((end > 0 ? end : now_us) - start) / 1'000'000);
  if (end > 0 || submit <= 0) return "-";
  return FormatDuration((now_us - submit) / 1'000'000);
}

std::string ShellJoin(const std::vector<std::string>& argv) {
  std::vector<std::string> words;
  for (const std::string& a : argv) {
    bool plain = !a.empty();
    for (char c : a) {
      const bool ok = std::isalnum(static_cast<unsigned char>(c)) ||
                      std::string_view("-_./=:,+@%").find(c) != std::string_view::npos;
      if (!ok) plain = false;
    }
    if (plain) {
      words.push_back(a);
      continue;
    }
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    words.push_back(q + "'");
  }
  return Join(words, " ");
}

std::string FormatJobGpus(const Json& job) {
  const Json& r = GetObject(job, "request");
  const int64_t gpus = GetInt(r, "gpus");
  const int64_t tasks = GetInt(r, "tasks", 1);
  const std::string prefix = tasks > 1 ? std::to_string(tasks) + "x" : "";
  if (gpus == 0) return "0";
  if (gpus == 1) {
    // A placed share shows what it got; a memory-sized share waiting shows its size.
    const Json& placement = GetArray(job, "placement");
    int64_t milli = GetInt(r, "gpu_milli", 1000);
    if (!placement.empty()) milli = GetInt(placement[0], "gpu_milli", milli);
    if (milli < 1000) return prefix + FormatMilli(milli);
    if (const int64_t mem = GetInt(r, "gpu_memory_bytes"); mem > 0) {
      return prefix + "1 (" + FormatBytes(static_cast<uint64_t>(mem)) + ")";
    }
  }
  return prefix + std::to_string(gpus);
}

std::string PreemptorName(const Json& job, int64_t by) {
  const std::string name = GetString(job, "preempted_by_name");
  return name.empty() ? std::to_string(by) : name;
}

namespace {

// `show`'s lines about preemption (docs/preemption.md): being stopped, or a cancel; the
// job's preemptibility; its preemptions so far.
// The tasks of a gang being preempted that said checkpoint-done (their own grace ended):
// " (checkpoint done: tasks 1, 3)", or "" when none did.
std::string TasksCheckpointed(const Json& job) {
  std::string tasks;
  const Json& list = GetArray(job, "tasks");
  for (size_t t = 0; t < list.size(); ++t) {
    if (!GetBool(list[t], "checkpoint_done")) continue;
    tasks += (tasks.empty() ? "" : ", ") + std::to_string(t);
  }
  if (tasks.empty()) return "";
  return " (checkpoint done: task" +
         std::string(tasks.find(',') == std::string::npos ? " " : "s ") + tasks + ")";
}

template <class Line>
void PreemptionLines(const Json& job, const Line& line) {
  if (const int64_t by = GetInt(job, "preempted_by"); by > 0) {
    line("Preempted", "by job " + PreemptorName(job, by) + "; SIGKILL at " +
                          FormatTimeUtc(GetInt(job, "preempt_deadline_s") * 1'000'000) +
                          (GetBool(job, "checkpoint_done") ? " (checkpoint done: now)"
                                                           : TasksCheckpointed(job)));
  } else if (const std::string state = GetString(job, "state");
             GetBool(job, "cancel_requested") && (state == "RUNNING" || state == "ASSIGNED")) {
    line("Cancel", "requested; the job is being stopped");  // once ended, its state says it
  }
  if (GetBool(job, "preemptible")) {
    std::string p = "yes";
    if (const int64_t m = GetInt(job, "min_runtime_s"); m > 0)
      p += ", min runtime " + FormatDuration(m);
    if (const int64_t g = GetInt(job, "preempt_grace_s"); g > 0)
      p += ", grace " + FormatDuration(g);
    line("Preemptible", p);
  }
  if (const int64_t n = GetInt(job, "preemptions"); n > 0) {
    char hours[64];
    std::snprintf(hours, sizeof hours, "%.3f", GetDouble(job, "preempted_gpu_hours"));
    line("Preemptions", std::to_string(n) + ", costing " + hours + " GPU-hours of work");
  }
}

}  // namespace

namespace {

// `show`'s GPU utilisation lines, from the job's telemetry (docs/monitoring.md).
template <class Line>
void UtilLines(const Json& job, const Line& line) {
  if (const Json* util = Field(job, "gpu_util"); util != nullptr && util->is_object()) {
    char mem[64];
    std::snprintf(mem, sizeof mem, "%.1f GiB",
                  static_cast<double>(GetInt(*util, "peak_mem_mib")) / 1024);
    char used[64];
    std::snprintf(used, sizeof used, "%.2f", GetDouble(*util, "used_gpu_hours"));
    line("GPU util", "mean " + Percent(GetDouble(*util, "mean_pct")) + ", peak " +
                         Percent(GetDouble(*util, "peak_pct")) + ", peak memory " + mem +
                         ", used " + used + " GPU-hours");
    if (GetBool(*util, "idle")) {
      line("Idle", "its GPUs sit unused since " +
                       FormatTimeUtc(GetInt(*util, "idle_since_ms") * 1000) +
                       (Field(*util, "warning") ? " (" + GetString(*util, "warning") + ")" : ""));
    }
  }
}

// Why an ended task was killed, by its cause's name (docs/api.md, "kill_cause"): shown
// unless it is "none" for a task no signal ended; empty for a task of an older agent.
std::string KillCause(const Json& task) {
  std::string cause = GetString(task, "kill_cause");
  if (cause == "none" && Field(task, "signal") == nullptr) return "";
  return cause;
}

// `show`'s placement: one line, or one per task of a gang with what became of it.
template <class Line>
void PlacementLines(const Json& job, const Line& line) {
  const Json& placement = GetArray(job, "placement");
  for (size_t i = 0; i < placement.size(); ++i) {
    const Json& p = placement[i];
    std::vector<std::string> idx;
    for (const Json& e : GetArray(p, "gpu_indices")) idx.push_back(e.dump());
    std::string text = GetString(p, "node");
    if (!idx.empty()) text += ": GPU " + Join(idx, ",");
    if (auto uuids = StringList(GetArray(p, "gpu_uuids")); !uuids.empty()) {
      text += " (" + Join(uuids, ", ") + ")";
      // A MIG instance (docs/sharing.md): `gpupool node NODE` names its profile.
      if (std::any_of(uuids.begin(), uuids.end(),
                      [](const std::string& u) { return u.rfind("MIG-", 0) == 0; })) {
        text += ", MIG instance held whole";
      }
    }
    if (const int64_t milli = GetInt(p, "gpu_milli", 1000); milli < 1000) {
      text += ", share " + FormatMilli(milli);
    }
    // What it is charged, where that is more than its share (a MIG instance held whole).
    if (const int64_t charged = GetInt(p, "charged_milli", 0); charged > 0) {
      text += ", charged " + FormatMilli(charged) + " GPU";
    }
    // What happened to the task (gangs: each one's own state).
    const Json& tasks = GetArray(job, "tasks");
    if (placement.size() > 1 && i < tasks.size()) {
      const Json& ts = tasks[i];
      if (auto host = GetString(ts, "host"); !host.empty() && host != GetString(p, "node")) {
        text += ", host " + host;
      }
      if (GetBool(ts, "ended")) {
        std::string how = GetBool(ts, "cancelled")   ? "stopped"
                          : GetBool(ts, "timed_out") ? "timed out"
                                                     : "ended";
        if (const Json* code = Field(ts, "exit_code")) how += ", exit code " + code->dump();
        if (const Json* sig = Field(ts, "signal")) how += ", signal " + sig->dump();
        if (auto r = GetString(ts, "reason"); !r.empty()) how += " (" + r + ")";
        if (auto c = KillCause(ts); !c.empty()) how += ", kill cause " + c;
        text += "; " + how;
      } else if (GetInt(ts, "start_time_us") > 0) {
        text += "; running";
      } else {
        text += "; not started";
      }
    }
    line(placement.size() > 1 ? "Task " + std::to_string(i) : "Placement", text);
  }
}

// `show`'s earlier attempts (requeued: preempted, lost, their GPU failed), oldest first:
// when each ran, for how long, its GPU-hours and why it ended. A record of the older
// preempted_attempts form has no number; a merged one stands for several.
template <class Line>
void EarlierAttemptLines(const Json& job, const Line& line) {
  for (const Json& a : GetArray(job, "earlier_attempts")) {
    const int64_t n = GetInt(a, "attempt");
    const int64_t merged = GetInt(a, "merged", 1);
    std::string key = n <= 0 ? "Earlier run"
                      : merged > 1
                          ? "Attempts " + std::to_string(n) + "-" + std::to_string(n + merged - 1)
                          : "Attempt " + std::to_string(n);
    const int64_t start = GetInt(a, "start_time_us");
    const int64_t ran_s = (GetInt(a, "end_time_us") - start) / 1'000'000;
    char hours[64];
    std::snprintf(hours, sizeof hours, "%.3f", GetDouble(a, "gpu_hours"));
    const std::string how = GetString(a, "ended_by", "preempted");
    std::string text = FormatTimeUtc(start) + ", ran " + FormatDuration(ran_s) + ", " + hours +
                       " GPU-hours; " + (how == "gpu_failed" ? "its GPU failed" : how);
    if (auto r = GetString(a, "reason"); !r.empty()) text += ": " + r;
    if (auto late = GetString(a, "late_reason"); !late.empty()) {
      // A gang's names each task reported ("task 0 (node n1) exited ...; task 1 ..."),
      // the end the latest of theirs.
      const std::string at = FormatTimeUtc(GetInt(a, "end_time_us"));
      text += late.starts_with("task ") ? "; then " + late + " (the last at " + at + ")"
                                        : "; then it " + late + " at " + at;
    }
    line(key, text);
  }
}

// A LOST job whose node reported its real end afterwards (docs/health.md): a gang's each
// reported task with its own end (tasks[].reported_late; late_end_time_us is only the
// latest of them), else that end and the words.
template <class Line>
void LateEndLines(const Json& job, const Line& line) {
  const int64_t late = GetInt(job, "late_end_time_us");
  if (late <= 0) return;
  const Json& tasks = GetArray(job, "tasks");
  const Json& placement = GetArray(job, "placement");
  bool named = false;
  for (size_t t = 0; tasks.size() > 1 && t < tasks.size(); ++t) {
    if (!GetBool(tasks[t], "reported_late")) continue;
    // Servers before 2026-11-30 wrote "its node was lost", also for a task whose own node
    // was not (a gang's task stopped because another node was lost).
    std::string what = GetString(tasks[t], "reason");
    for (std::string_view prefix :
         {"reported after the loss: ", "reported after its node was lost: "}) {
      if (what.starts_with(prefix)) what.erase(0, prefix.size());
    }
    std::string name = "task " + std::to_string(t);
    if (t < placement.size()) name += " (node " + GetString(placement[t], "node") + ")";
    line("Late end", FormatTimeUtc(GetInt(tasks[t], "end_time_us")) + ", " + name + " " + what +
                         ", reported after the loss");
    named = true;
  }
  if (!named) line("Late end", FormatTimeUtc(late) + ", " + GetString(job, "late_reason"));
}

}  // namespace

std::string RenderJob(const Json& job, int64_t now_us) {
  std::string out;
  auto line = [&](const std::string& key, const std::string& value) {
    std::string pad(key.size() < 11 ? 11 - key.size() : 1, ' ');
    out += "  " + key + ":" + pad + CleanCell(value) + "\n";
  };
  // An array's element as its user names it, ARRAY_INDEX (12_3), not by its store id.
  const int64_t array_of = GetInt(job, "array_id");
  std::string title = "Job " + (array_of != 0 ? std::to_string(array_of) + "_" +
                                                    std::to_string(GetInt(job, "array_index"))
                                              : std::to_string(GetInt(job, "id")));
  if (auto name = GetString(job, "name"); !name.empty()) title += " (" + CleanCell(name) + ")";
  out += title + ": " + GetString(job, "state", "?") + "\n";
  line("User", GetString(job, "user") + " (uid " + std::to_string(GetInt(job, "uid")) + ", gid " +
                   std::to_string(GetInt(job, "gid")) + ")");
  if (auto p = GetString(job, "project"); !p.empty()) line("Project", p);
  line("Command", ShellJoin(StringList(GetArray(job, "command"))));
  line("Workdir", GetString(job, "workdir"));
  if (auto image = GetString(job, "image"); !image.empty()) line("Image", image);
  const Json& env = GetObject(job, "env");
  if (env.size() > 8) {  // an exported shell environment (--export=ALL)
    line("Env", std::to_string(env.size()) + " variables (gpupool show ID --json lists them)");
  } else {
    for (auto it = env.begin(); it != env.end(); ++it) {
      line("Env", it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump()));
    }
  }
  if (auto script = GetString(job, "script"); !script.empty()) {
    line("Script",
         std::to_string(script.size()) + " bytes, copied at submit (gpupool show ID --script)");
  }
  if (auto o = GetString(job, "output"); !o.empty()) line("Output", o);
  if (auto e = GetString(job, "error"); !e.empty()) line("Error", e);
  line("Request", RequestText(GetObject(job, "request")));
  if (auto nodes = NodeChoiceText(GetObject(job, "request")); !nodes.empty()) line("Nodes", nodes);
  line("Priority", std::to_string(GetInt(job, "priority")));
  const int64_t limit = GetInt(job, "time_limit_s");
  line("Time limit", limit > 0 ? FormatDuration(limit) : "none");
  if (const int64_t sig = GetInt(job, "warn_signal"); sig > 0) {
    // As Slurm's --signal is written: [B:]SIG@SECONDS.
    const char* abbrev = ::sigabbrev_np(static_cast<int>(sig));
    const std::string name = abbrev != nullptr ? abbrev : std::to_string(sig);
    const bool main_only = GetBool(job, "warn_main_only");
    const int64_t before = GetInt(job, "warn_time_s");
    line("Warn signal", std::string(main_only ? "B:" : "") + name + "@" + std::to_string(before) +
                            " (SIG" + name + " " + std::to_string(before) +
                            " s before the time limit, to " +
                            (main_only ? "its main process only)" : "every process of the job)"));
  }
  line("Requeue",
       GetBool(job, "requeue") ? "yes, if its node is lost or a GPU it holds fails" : "no");
  if (GetBool(job, "enforce_memory")) line("Enforce", "memory (shares only on GPUs that hold it)");
  if (const std::string mode = GetString(job, "gpu_enforcement"); !mode.empty()) {
    line("GPU mode", mode == "exclusive" ? "exclusive (whole GPUs)"
                     : mode == "none"    ? "none (a share, scheduled but not enforced)"
                                         : mode);
  }
  if (GetBool(job, "mpi")) line("Launch", "mpi: the command runs in task 0, the others are held");
  if (const std::string mode = GetString(job, "interactive"); mode == "run") {
    line("Interactive", std::string("run: the command runs in task 0 with its client's ") +
                            (GetBool(job, "pty") ? "terminal (--pty)" : "stdin and output"));
  } else if (mode == "alloc") {
    line("Interactive", "alloc: an allocation held for gpupool exec");
  }
  if (const int64_t array = GetInt(job, "array_id"); array != 0) {
    const int64_t at_once = GetInt(job, "array_max_running");
    line("Array", "element " + std::to_string(GetInt(job, "array_index")) + " of array " +
                      std::to_string(array) + " (" + GetString(job, "array") + ")" +
                      (at_once > 0 ? ", at most " + std::to_string(at_once) + " at once" : ""));
  }
  std::vector<std::string> deps;
  for (const Json& d : GetArray(job, "dependencies")) {
    // job_name: as its user names it (12_3 for an array's element); older servers: the id.
    const std::string name = GetString(d, "job_name");
    deps.push_back(GetString(d, "kind") + " " +
                   (name.empty() ? std::to_string(GetInt(d, "job_id")) : name));
  }
  if (!deps.empty()) line("Depends", Join(deps, ", "));
  if (auto h = GetString(job, "held_by"); !h.empty()) {
    line("Held", "by " + h + (GetBool(job, "held_by_admin") ? " (admin)" : ""));
  }
  line("Submitted", FormatTimeUtc(GetInt(job, "submit_time_us")));
  // The current attempt's placement (servers from 2026-11-29 on); a requeued job waiting
  // again keeps its last one, which says nothing of the next.
  if (const int64_t placed = GetInt(job, "placed_time_us");
      placed > 0 && (GetInt(job, "start_time_us") > 0 || GetString(job, "state") == "ASSIGNED")) {
    line("Placed", FormatTimeUtc(placed));
  }
  line("Started", FormatTimeUtc(GetInt(job, "start_time_us")));
  line("Ended", FormatTimeUtc(GetInt(job, "end_time_us")));
  if (GetInt(job, "start_time_us") > 0) line("Runtime", FormatJobTime(job, now_us));
  if (const Json* code = Field(job, "exit_code")) line("Exit code", code->dump());
  if (const Json* sig = Field(job, "signal")) line("Signal", sig->dump());
  if (auto r = GetString(job, "pending_reason"); !r.empty()) line("Waiting", r);
  if (auto r = GetString(job, "reason"); !r.empty()) line("Reason", r);
  LateEndLines(job, line);
  if (const Json& tasks = GetArray(job, "tasks"); tasks.size() == 1) {
    if (auto c = KillCause(tasks[0]); !c.empty()) line("Kill cause", c);
  }
  PreemptionLines(job, line);
  UtilLines(job, line);
  EarlierAttemptLines(job, line);
  line("Attempt", std::to_string(GetInt(job, "attempt")));
  if (const int64_t n = GetInt(job, "launch_failures"); n > 0) {
    // Attempts that never ran: a node could not start them (docs/health.md).
    line("Not started", std::to_string(n) + (n == 1 ? " time" : " times") +
                            " by a node's fault (each put it back in the queue)");
  }
  PlacementLines(job, line);
  if (const int64_t port = GetInt(job, "master_port"); port > 0) {
    line("Rendezvous",
         GetString(GetArray(job, "tasks").empty() ? Json::object() : GetArray(job, "tasks")[0],
                   "host") +
             ":" + std::to_string(port));
  }
  if (auto p = GetString(job, "stdout_path"); !p.empty()) line("Stdout", p);
  if (auto p = GetString(job, "stderr_path"); !p.empty()) line("Stderr", p);
  return out;
}

}  // namespace gpupool::cli
