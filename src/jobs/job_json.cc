#include "jobs/job_json.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool::jobs {
namespace {

constexpr int kMaxGpusPerTask = 1024;
constexpr int64_t kMaxCpuMilli = 100'000'000;  // 100k cores
constexpr size_t kMaxArgs = 4096;
constexpr size_t kMaxEnv = 1024;
constexpr size_t kMaxString = size_t{64} * 1024;
constexpr size_t kMaxMounts = 64;

Status CheckString(std::string_view field, const std::string& s) {
  if (s.size() > kMaxString) {
    return Status::InvalidArgument(std::string(field) + ": longer than " +
                                   std::to_string(kMaxString) + " bytes");
  }
  if (s.find('\0') != std::string::npos) {
    return Status::InvalidArgument(std::string(field) + ": contains a NUL byte");
  }
  return Status::Ok();
}

// --nodelist / --exclude: node names as the agents register them (expanded: the client
// expands Slurm's node[01-03]), so that a name that cannot be a node's is refused here.
// How many a list may have is a submit-time bound (ValidateNodeChoice, kMaxNodeNames):
// a job stored by an earlier server, with up to 65536 names each, still loads.
Status CheckNodeNames(std::string_view field, const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    bool ok = !n.empty() && n.size() <= 255;
    for (size_t i = 0; ok && i < n.size(); ++i) {
      const auto c = static_cast<unsigned char>(n[i]);
      ok = c > ' ' && c != 0x7f && c != ',' && c != '[' && c != ']';
    }
    if (!ok) {
      return Status::InvalidArgument(
          std::string(field) + ": '" + n +
          "' is not a node name (1..255 characters, no spaces, commas or brackets; expand a "
          "hostlist like node[01-03] into its names)");
    }
  }
  return Status::Ok();
}

// No name in both lists. Every decode of a stored job checks this again, so it sorts
// (O(n log n) for any lists, whatever their names) rather than search one list per name
// of the other: 65536 + 65536 names took 25 s that way, on each read of the job.
Status CheckNotInBoth(const ResourceRequest& r) {
  if (r.nodelist.empty() || r.exclude.empty()) return Status::Ok();
  std::vector<std::string_view> exclude(r.exclude.begin(), r.exclude.end());
  std::sort(exclude.begin(), exclude.end());
  for (const std::string& n : r.nodelist) {
    if (std::binary_search(exclude.begin(), exclude.end(), std::string_view(n))) {
      return Status::InvalidArgument("nodelist, exclude: node '" + n +
                                     "' is in both; leave it out of one of them");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateRequest(const ResourceRequest& r) {
  if (r.gpus < 0 || r.gpus > kMaxGpusPerTask) {
    return Status::InvalidArgument("gpus: " + std::to_string(r.gpus) + " is outside 0.." +
                                   std::to_string(kMaxGpusPerTask));
  }
  if (r.gpus > 0 && (r.gpu_milli < 1 || r.gpu_milli > 1000)) {
    return Status::InvalidArgument("gpu_milli: " + std::to_string(r.gpu_milli) +
                                   " is outside 1..1000 (thousandths of one GPU)");
  }
  if (r.gpus > 1 && r.gpu_milli < 1000) {
    return Status::InvalidArgument(
        "gpu_milli: a GPU share below 1000 needs gpus = 1; ask for whole GPUs or for one shared "
        "GPU");
  }
  if (r.gpu_memory_bytes > 0 && r.gpus != 1) {
    return Status::InvalidArgument("gpu_memory_bytes: a share sized by memory needs gpus = 1");
  }
  if (r.gpus == 0 && (r.gpu_milli != 1000 || r.gpu_memory_bytes != 0)) {
    return Status::InvalidArgument("gpu_milli, gpu_memory_bytes: a GPU share needs gpus = 1");
  }
  if (r.cpu_milli < 0 || r.cpu_milli > kMaxCpuMilli) {
    return Status::InvalidArgument("cpu_milli: " + std::to_string(r.cpu_milli) + " is outside 0.." +
                                   std::to_string(kMaxCpuMilli));
  }
  if (r.tasks < 1 || r.tasks > kMaxTasks) {
    return Status::InvalidArgument("tasks: " + std::to_string(r.tasks) + " is outside 1.." +
                                   std::to_string(kMaxTasks));
  }
  if (!r.vendor.empty() && r.vendor != "nvidia" && r.vendor != "amd") {
    return Status::InvalidArgument("vendor: '" + r.vendor + "' is not nvidia or amd");
  }
  if (!r.min_capability.empty()) {
    const auto dot = r.min_capability.find('.');
    bool ok = dot != std::string::npos && dot > 0 && dot + 1 < r.min_capability.size();
    for (size_t i = 0; ok && i < r.min_capability.size(); ++i) {
      ok = i == dot || std::isdigit(static_cast<unsigned char>(r.min_capability[i]));
    }
    if (!ok) {
      return Status::InvalidArgument("min_capability: '" + r.min_capability +
                                     "' is not MAJOR.MINOR, e.g. 8.0");
    }
  }
  for (const auto& m : r.gpu_models) GP_RETURN_IF_ERROR(CheckString("gpu_models", m));
  GP_RETURN_IF_ERROR(CheckNodeNames("nodelist", r.nodelist));
  GP_RETURN_IF_ERROR(CheckNodeNames("exclude", r.exclude));
  GP_RETURN_IF_ERROR(CheckNotInBoth(r));
  // A GPU constraint on a job that asks for no GPU would be dropped without a word.
  if (r.gpus == 0) {
    const char* field = !r.vendor.empty()           ? "vendor"
                        : !r.min_capability.empty() ? "min_capability"
                        : !r.gpu_models.empty()     ? "gpu_models"
                                                    : nullptr;
    if (field != nullptr) {
      return Status::InvalidArgument(std::string(field) +
                                     ": a GPU constraint on a job that asks for no GPU; add "
                                     "--gpus N (or leave the constraint out)");
    }
  }
  return Status::Ok();
}

OrderedJson RequestToJson(const ResourceRequest& r) {
  OrderedJson j;
  j["gpus"] = r.gpus;
  j["gpu_milli"] = r.gpu_milli;
  if (r.gpu_memory_bytes > 0) j["gpu_memory_bytes"] = r.gpu_memory_bytes;
  j["cpu_milli"] = r.cpu_milli;
  j["memory_bytes"] = r.memory_bytes;
  if (!r.gpu_models.empty()) j["gpu_models"] = r.gpu_models;
  if (!r.vendor.empty()) j["vendor"] = r.vendor;
  if (!r.min_capability.empty()) j["min_capability"] = r.min_capability;
  j["tasks"] = r.tasks;
  if (!r.nodelist.empty()) j["nodelist"] = r.nodelist;
  if (!r.exclude.empty()) j["exclude"] = r.exclude;
  return j;
}

Result<ResourceRequest> RequestFromJson(const Json& j, std::string_view path, bool reject_unknown) {
  ResourceRequest r;
  JsonFields f(j, std::string(path), reject_unknown);
  f.Optional("gpus", &r.gpus, 0, kMaxGpusPerTask);
  f.Optional("gpu_milli", &r.gpu_milli, 1, 1000);
  f.Optional("gpu_memory_bytes", &r.gpu_memory_bytes);
  f.Optional("cpu_milli", &r.cpu_milli, 0, kMaxCpuMilli);
  f.Optional("memory_bytes", &r.memory_bytes);
  f.Optional("gpu_models", &r.gpu_models);
  f.Optional("vendor", &r.vendor);
  f.Optional("min_capability", &r.min_capability);
  f.Optional("tasks", &r.tasks, 1, kMaxTasks);
  f.Optional("nodelist", &r.nodelist);
  f.Optional("exclude", &r.exclude);
  GP_RETURN_IF_ERROR(f.Finish());
  GP_RETURN_IF_ERROR(ValidateRequest(r).WithContext(std::string(path)));
  return r;
}

OrderedJson NeedsToJson(const EnvNeeds& n) {
  OrderedJson j;
  j["source"] = n.source;
  j["cuda"] = n.cuda;
  j["min_driver"] = n.min_driver;
  j["min_driver_minor_compat"] = n.min_driver_minor_compat;
  j["sass"] = n.sass;
  j["ptx"] = n.ptx;
  j["gfx_targets"] = n.gfx_targets;
  return j;
}

Result<EnvNeeds> NeedsFromJson(const Json& j, std::string_view path, bool reject_unknown) {
  EnvNeeds n;
  JsonFields f(j, std::string(path), reject_unknown);
  f.Required("source", &n.source);
  f.Optional("cuda", &n.cuda);
  f.Optional("min_driver", &n.min_driver);
  f.Optional("min_driver_minor_compat", &n.min_driver_minor_compat);
  f.Optional("sass", &n.sass);
  f.Optional("ptx", &n.ptx);
  f.Optional("gfx_targets", &n.gfx_targets);
  GP_RETURN_IF_ERROR(f.Finish());
  return n;
}

OrderedJson TaskStatusToJson(const TaskStatus& t) {
  OrderedJson j;
  j["host"] = t.host;
  j["start_time_us"] = t.start_time_us;
  j["end_time_us"] = t.end_time_us;
  j["ended"] = t.ended;
  if (t.exit_code) j["exit_code"] = *t.exit_code;
  if (t.signal) j["signal"] = *t.signal;
  if (t.cancelled) j["cancelled"] = true;
  if (t.timed_out) j["timed_out"] = true;
  if (!t.reason.empty()) j["reason"] = t.reason;
  if (!t.kill_cause.empty()) j["kill_cause"] = t.kill_cause;
  if (!t.kill_detail.empty()) j["kill_detail"] = t.kill_detail;
  if (!t.stdout_path.empty()) j["stdout_path"] = t.stdout_path;
  if (!t.stderr_path.empty()) j["stderr_path"] = t.stderr_path;
  if (t.reported_late) j["reported_late"] = true;
  if (t.checkpoint_done) j["checkpoint_done"] = true;
  return j;
}

Result<TaskStatus> TaskStatusFromJson(const Json& j, std::string_view path, bool reject_unknown) {
  TaskStatus t;
  JsonFields f(j, std::string(path), reject_unknown);
  f.Optional("host", &t.host);
  f.Optional("start_time_us", &t.start_time_us, 0);
  f.Optional("end_time_us", &t.end_time_us, 0);
  f.Optional("ended", &t.ended);
  f.Optional("exit_code", &t.exit_code);
  f.Optional("signal", &t.signal);
  f.Optional("cancelled", &t.cancelled);
  f.Optional("timed_out", &t.timed_out);
  f.Optional("reason", &t.reason);
  f.Optional("kill_cause", &t.kill_cause);
  f.Optional("kill_detail", &t.kill_detail);
  f.Optional("stdout_path", &t.stdout_path);
  f.Optional("stderr_path", &t.stderr_path);
  f.Optional("reported_late", &t.reported_late);
  f.Optional("checkpoint_done", &t.checkpoint_done);
  GP_RETURN_IF_ERROR(f.Finish());
  for (const auto* s :
       {&t.host, &t.reason, &t.kill_cause, &t.kill_detail, &t.stdout_path, &t.stderr_path}) {
    GP_RETURN_IF_ERROR(CheckString(path, *s));
  }
  return t;
}

namespace {

OrderedJson MountsToJson(const std::vector<Mount>& list) {
  OrderedJson mounts = OrderedJson::array();
  for (const Mount& m : list) {
    mounts.push_back({{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
  }
  return mounts;
}

// How the job ended, and a LOST job's end reported late (docs/health.md).
void EndToJson(const Job& job, OrderedJson& j) {
  if (job.exit_code) j["exit_code"] = *job.exit_code;
  if (job.late_end_time_us != 0) {
    j["late_end_time_us"] = job.late_end_time_us;
    if (job.late_exit_code) j["late_exit_code"] = *job.late_exit_code;
    if (job.late_signal) j["late_signal"] = *job.late_signal;
    j["late_reason"] = job.late_reason;
  }
  if (job.signal) j["signal"] = *job.signal;
}

OrderedJson PlacementToJson(const std::vector<TaskPlacement>& tasks) {
  OrderedJson placement = OrderedJson::array();
  for (const TaskPlacement& p : tasks) {
    placement.push_back({{"node", p.node},
                         {"gpu_indices", p.gpu_indices},
                         {"gpu_uuids", p.gpu_uuids},
                         {"gpu_milli", p.gpu_milli}});
    // Only where it differs (a MIG instance held whole): other records stay as they were.
    if (p.charged_milli > 0 && p.charged_milli != p.gpu_milli) {
      placement.back()["charged_milli"] = p.charged_milli;
    }
  }
  return placement;
}

// Job::fences as `fences`, and the lost node whose lease ends last as `fence_node` and
// `fence_until_us`: what a job stored before `fences` had (one node), for older readers.
void FencesToJson(const Job& job, OrderedJson& j) {
  if (job.fences.empty()) return;
  OrderedJson fences = OrderedJson::array();
  const NodeFence* last = nullptr;
  for (const NodeFence& f : job.fences) {
    fences.push_back(OrderedJson{{"node", f.node}, {"until_us", f.until_us}});
    if (f.until_us != 0 && (last == nullptr || f.until_us > last->until_us)) last = &f;
  }
  if (last != nullptr) {
    j["fence_node"] = last->node;
    j["fence_until_us"] = last->until_us;
  }
  j["fences"] = std::move(fences);
}

}  // namespace

OrderedJson JobToJson(const Job& job) {
  OrderedJson j;
  j["id"] = job.id;
  j["user"] = job.user;
  j["uid"] = job.uid;
  j["gid"] = job.gid;
  j["project"] = job.project;
  j["name"] = job.name;
  j["command"] = job.command.get();
  j["env"] = job.env.get();
  j["workdir"] = job.workdir;
  if (!job.image.empty()) j["image"] = job.image;
  if (!job.mounts.empty()) j["mounts"] = MountsToJson(job.mounts);
  if (!job.environment.empty()) j["environment"] = job.environment;
  if (!job.env_dir.empty()) j["env_dir"] = job.env_dir;
  if (!job.needs.empty()) j["needs"] = NeedsToJson(job.needs);
  if (!job.script.empty()) j["script"] = job.script.get();
  if (!job.output.empty()) j["output"] = job.output;
  if (!job.error.empty()) j["error"] = job.error;
  j["request"] = RequestToJson(job.request);
  j["priority"] = job.priority;
  j["time_limit_s"] = job.time_limit_s;
  if (job.warn_signal != 0) {
    j["warn_signal"] = job.warn_signal;
    j["warn_time_s"] = job.warn_time_s;
    if (job.warn_main_only) j["warn_main_only"] = true;
  }
  j["requeue"] = job.requeue;
  if (job.enforce_memory) j["enforce_memory"] = true;
  if (job.mpi) j["mpi"] = true;
  if (!job.interactive.empty()) j["interactive"] = job.interactive;
  if (job.client_keepalive) j["client_keepalive"] = true;
  if (!job.submit_key.empty()) j["submit_key"] = job.submit_key;
  if (job.pty) j["pty"] = true;
  if (job.command_ended) {
    j["command_ended"] = true;
    if (job.command_exit_code) j["command_exit_code"] = *job.command_exit_code;
    if (job.command_signal) j["command_signal"] = *job.command_signal;
  }
  if (job.shm_bytes > 0) j["shm_bytes"] = job.shm_bytes;
  if (!job.init) j["init"] = false;
  if (!job.array.empty()) j["array"] = job.array;
  if (job.array_id != 0) {
    j["array_id"] = job.array_id;
    j["array_index"] = job.array_index;
    if (job.array_max_running > 0) j["array_max_running"] = job.array_max_running;
  }
  if (!job.dependencies.empty()) {
    OrderedJson deps = OrderedJson::array();
    for (const Dependency& d : job.dependencies) {
      deps.push_back({{"job_id", d.job_id}, {"kind", DependencyKindName(d.kind)}});
    }
    j["dependencies"] = std::move(deps);
  }
  j["state"] = JobStateName(job.state);
  j["submit_time_us"] = job.submit_time_us;
  if (job.placed_time_us != 0) j["placed_time_us"] = job.placed_time_us;
  if (job.launch_failures != 0) j["launch_failures"] = job.launch_failures;
  j["start_time_us"] = job.start_time_us;
  j["end_time_us"] = job.end_time_us;
  EndToJson(job, j);
  j["placement"] = PlacementToJson(job.placement);
  if (!job.tasks.empty()) {
    OrderedJson tasks = OrderedJson::array();
    for (const TaskStatus& t : job.tasks) tasks.push_back(TaskStatusToJson(t));
    j["tasks"] = std::move(tasks);
  }
  if (job.master_port != 0) j["master_port"] = job.master_port;
  j["pending_reason"] = job.pending_reason;
  j["reason"] = job.reason;
  j["attempt"] = job.attempt;
  j["cancel_requested"] = job.cancel_requested;
  if (job.time_limit_hit) j["time_limit_hit"] = true;
  FencesToJson(job, j);
  if (!job.held_by.empty()) {
    j["held_by"] = job.held_by;
    j["held_by_admin"] = job.held_by_admin;
  }
  if (job.preemptible) j["preemptible"] = true;
  if (job.min_runtime_s > 0) j["min_runtime_s"] = job.min_runtime_s;
  if (job.preempt_grace_s > 0) j["preempt_grace_s"] = job.preempt_grace_s;
  if (job.preempted_by != 0) {
    j["preempted_by"] = job.preempted_by;
    if (!job.preempted_by_name.empty()) j["preempted_by_name"] = job.preempted_by_name;
    j["preempt_deadline_s"] = job.preempt_deadline_s;
  }
  if (job.checkpoint_done) j["checkpoint_done"] = true;
  if (job.preemptions > 0) {
    j["preemptions"] = job.preemptions;
    j["preempted_gpu_hours"] = job.preempted_gpu_hours;
  }
  if (!job.earlier_attempts.empty()) {
    OrderedJson runs = OrderedJson::array();
    for (const EarlierAttempt& a : job.earlier_attempts) {
      OrderedJson r = {{"attempt", a.attempt}};
      if (a.merged != 1) r["merged"] = a.merged;
      r["ended_by"] = AttemptEndName(a.ended_by);
      r["start_time_us"] = a.start_time_us;
      r["end_time_us"] = a.end_time_us;
      r["gpu_hours"] = a.gpu_hours;
      if (!a.reason.empty()) r["reason"] = a.reason;
      if (a.gpus > 0) r["gpus"] = a.gpus;
      if (!a.nodes.empty()) r["nodes"] = a.nodes;
      if (a.lost_time_us != 0) {
        r["lost_time_us"] = a.lost_time_us;
        r["late_reason"] = a.late_reason;
      }
      if (!a.late_ends.empty()) {
        OrderedJson ends = OrderedJson::array();
        for (LateTaskEnd e : a.late_ends) ends.push_back(LateTaskEndName(e));
        r["late_ends"] = std::move(ends);
      }
      if (!a.late_end_times_us.empty()) r["late_end_times_us"] = a.late_end_times_us;
      runs.push_back(std::move(r));
    }
    j["earlier_attempts"] = std::move(runs);
  }
  if (!job.stdout_path.empty()) j["stdout_path"] = job.stdout_path;
  if (!job.stderr_path.empty()) j["stderr_path"] = job.stderr_path;
  return j;
}

namespace {

// JobFromJson's parts: each reads its fields of `f` into `job`. An error in a nested
// object is returned; one in a field of `f` is recorded there (f.Finish says it).
void EnvFromJson(JsonFields& f, Job* job_out) {
  Job& job = *job_out;
  if (const Json* env = f.Member("env")) {
    if (!env->is_object()) {
      f.Fail("env", "expected an object of NAME: value strings");
    } else {
      std::map<std::string, std::string> vars;
      for (auto it = env->begin(); it != env->end(); ++it) {
        if (!it->is_string()) {
          f.Fail("env." + it.key(), "expected a string value");
          break;
        }
        vars[it.key()] = it->get<std::string>();
      }
      job.env = std::move(vars);
    }
  }
}

Status MountsFromJson(JsonFields& f, bool reject_unknown, Job* job_out) {
  Job& job = *job_out;
  if (const Json* mounts = f.Array("mounts")) {
    for (size_t i = 0; i < mounts->size(); ++i) {
      Mount m;
      JsonFields mf((*mounts)[i], f.PathOf("mounts") + "[" + std::to_string(i) + "]",
                    reject_unknown);
      mf.Required("source", &m.source);
      mf.Required("target", &m.target);
      mf.Optional("read_only", &m.read_only);
      GP_RETURN_IF_ERROR(mf.Finish());
      job.mounts.push_back(std::move(m));
    }
  }
  return Status::Ok();
}

Status DependenciesFromJson(JsonFields& f, bool reject_unknown, Job* job_out) {
  Job& job = *job_out;
  if (const Json* deps = f.Array("dependencies")) {
    if (deps->size() > kMaxDependencies) {
      return Status::InvalidArgument(f.PathOf("dependencies") + ": at most " +
                                     std::to_string(kMaxDependencies) + " dependencies");
    }
    for (size_t i = 0; i < deps->size(); ++i) {
      const std::string at = f.PathOf("dependencies") + "[" + std::to_string(i) + "]";
      JsonFields df((*deps)[i], at, reject_unknown);
      Dependency d;
      std::string kind;
      df.Required("job_id", &d.job_id, 1);
      df.Required("kind", &kind);
      GP_RETURN_IF_ERROR(df.Finish());
      std::optional<Dependency::Kind> k = ParseDependencyKind(kind);
      if (!k) {
        return Status::InvalidArgument(at + ".kind: '" + kind +
                                       "'; use after-ok, after-any or after-not-ok");
      }
      d.kind = *k;
      job.dependencies.push_back(d);
    }
  }
  return Status::Ok();
}

// `fences`, else (a job stored before it) `fence_node` and `fence_until_us` as one.
Status FencesFromJson(JsonFields& f, bool reject_unknown, Job* job_out) {
  std::string node;
  int64_t until_us = 0;
  f.Optional("fence_node", &node);
  f.Optional("fence_until_us", &until_us, 0);
  const Json* fences = f.Array("fences");
  if (fences == nullptr) {
    if (until_us != 0) job_out->fences.push_back({std::move(node), until_us});
    return Status::Ok();
  }
  if (fences->size() > kMaxFences) {
    return Status::InvalidArgument(f.PathOf("fences") + ": at most " + std::to_string(kMaxFences) +
                                   " nodes");
  }
  for (size_t i = 0; i < fences->size(); ++i) {
    const std::string path = f.PathOf("fences") + "[" + std::to_string(i) + "]";
    NodeFence nf;
    JsonFields ff((*fences)[i], path, reject_unknown);
    ff.Required("node", &nf.node);
    ff.Optional("until_us", &nf.until_us, 0);
    GP_RETURN_IF_ERROR(ff.Finish());
    if (nf.node.empty() || nf.node.size() > 253 || FenceOn(*job_out, nf.node) != nullptr) {
      return Status::InvalidArgument(path + ".node: expected a node name of 1..253 bytes, " +
                                     "each node once");
    }
    job_out->fences.push_back(std::move(nf));
  }
  return Status::Ok();
}

// One record of earlier_attempts (or of the older preempted_attempts, which had only
// the span and the GPU-hours: every one a preempted attempt).
Status EarlierAttemptFromJson(const Json& run, const std::string& path, bool old_form,
                              bool reject_unknown, EarlierAttempt* out) {
  EarlierAttempt a;
  std::vector<std::string> late_ends;
  JsonFields af(run, path, reject_unknown);
  af.Required("start_time_us", &a.start_time_us, 0);
  af.Required("end_time_us", &a.end_time_us, 0);
  af.Required("gpu_hours", &a.gpu_hours);
  std::string ended_by = "preempted";
  if (!old_form) {
    af.Optional("attempt", &a.attempt, 0);
    af.Optional("merged", &a.merged, 1);
    af.Required("ended_by", &ended_by);
    af.Optional("reason", &a.reason);
    af.Optional("gpus", &a.gpus);
    af.Optional("nodes", &a.nodes);
    af.Optional("lost_time_us", &a.lost_time_us, 0);
    af.Optional("late_reason", &a.late_reason);
    af.Optional("late_ends", &late_ends);
    if (const Json* times = af.Array("late_end_times_us")) {
      for (const Json& t : *times) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
            a.late_end_times_us.size() >= kMaxAttemptNodes) {
          af.Fail("late_end_times_us", "expected at most " + std::to_string(kMaxAttemptNodes) +
                                           " times in microseconds (0 or more), one per task");
          break;
        }
        a.late_end_times_us.push_back(t.get<int64_t>());
      }
    }
  }
  GP_RETURN_IF_ERROR(af.Finish());
  const std::optional<AttemptEnd> end = ParseAttemptEnd(ended_by);
  if (!end) {
    return Status::InvalidArgument(path + ".ended_by: unknown '" + ended_by +
                                   "'; expected preempted, lost or gpu_failed");
  }
  a.ended_by = *end;
  if (late_ends.size() > kMaxAttemptNodes) {
    return Status::InvalidArgument(path + ".late_ends: expected at most " +
                                   std::to_string(kMaxAttemptNodes) + " entries, one per task");
  }
  for (size_t i = 0; i < late_ends.size(); ++i) {
    const std::optional<LateTaskEnd> e = ParseLateTaskEnd(late_ends[i]);
    if (!e) {
      return Status::InvalidArgument(path + ".late_ends[" + std::to_string(i) + "]: unknown '" +
                                     late_ends[i] +
                                     "'; expected unreported, succeeded or failed_or_stopped");
    }
    a.late_ends.push_back(*e);
  }
  if (a.nodes.size() > kMaxAttemptNodes ||
      std::any_of(a.nodes.begin(), a.nodes.end(),
                  [](const std::string& n) { return n.empty() || n.size() > 253; })) {
    return Status::InvalidArgument(path + ".nodes: expected at most " +
                                   std::to_string(kMaxAttemptNodes) +
                                   " node names of 1..253 bytes, one per task");
  }
  if (!std::isfinite(a.gpu_hours) || a.gpu_hours < 0 || a.end_time_us < a.start_time_us ||
      !std::isfinite(a.gpus) || a.gpus < 0 || a.reason.size() > kMaxAttemptReason ||
      a.late_reason.size() > kMaxAttemptReason) {
    return Status::InvalidArgument(path +
                                   ": expected gpu_hours >= 0, gpus >= 0, end_time_us >= "
                                   "start_time_us and a reason and late_reason of at most " +
                                   std::to_string(kMaxAttemptReason) + " bytes");
  }
  *out = std::move(a);
  return Status::Ok();
}

Status EarlierAttemptsFromJson(JsonFields& f, bool reject_unknown, Job* job_out) {
  const Json* runs = f.Array("earlier_attempts");
  const Json* old = f.Array("preempted_attempts");  // stored by an older server
  if (runs != nullptr && old != nullptr) {
    return Status::InvalidArgument(f.PathOf("preempted_attempts") +
                                   ": an older form of earlier_attempts; give only one");
  }
  const std::string key = runs != nullptr ? "earlier_attempts" : "preempted_attempts";
  if (runs == nullptr) runs = old;
  if (runs == nullptr) return Status::Ok();
  if (runs->size() > kMaxEarlierAttempts) {
    return Status::InvalidArgument(f.PathOf(key) + ": at most " +
                                   std::to_string(kMaxEarlierAttempts) + " attempts");
  }
  for (size_t i = 0; i < runs->size(); ++i) {
    EarlierAttempt a;
    GP_RETURN_IF_ERROR(EarlierAttemptFromJson((*runs)[i],
                                              f.PathOf(key) + "[" + std::to_string(i) + "]",
                                              runs == old, reject_unknown, &a));
    job_out->earlier_attempts.push_back(std::move(a));
  }
  return Status::Ok();
}

Status PlacementFromJson(JsonFields& f, bool reject_unknown, Job* job_out) {
  Job& job = *job_out;
  if (const Json* placement = f.Array("placement")) {
    for (size_t i = 0; i < placement->size(); ++i) {
      TaskPlacement p;
      JsonFields pf((*placement)[i], f.PathOf("placement") + "[" + std::to_string(i) + "]",
                    reject_unknown);
      pf.Required("node", &p.node);
      if (const Json* idx = pf.Array("gpu_indices")) {
        for (const Json& e : *idx) {
          if (!e.is_number_integer()) {
            pf.Fail("gpu_indices", "expected integers");
            break;
          }
          p.gpu_indices.push_back(e.get<int>());
        }
      }
      pf.Optional("gpu_uuids", &p.gpu_uuids);
      pf.Optional("gpu_milli", &p.gpu_milli, 0, 1000);          // 0 for CPU-only tasks
      pf.Optional("charged_milli", &p.charged_milli, 0, 1000);  // absent: as gpu_milli
      GP_RETURN_IF_ERROR(pf.Finish());
      job.placement.push_back(std::move(p));
    }
  }
  return Status::Ok();
}

// The bounds on a job's lists and the strings' contents (CheckString).
Status CheckBounds(const Job& job, std::string_view path) {
  if (job.command.size() > kMaxArgs) {
    return Status::InvalidArgument(std::string(path) + ".command: more than " +
                                   std::to_string(kMaxArgs) + " arguments");
  }
  if (job.env.size() > kMaxEnv) {
    return Status::InvalidArgument(std::string(path) + ".env: more than " +
                                   std::to_string(kMaxEnv) + " variables");
  }
  for (const auto& a : job.command) GP_RETURN_IF_ERROR(CheckString("command", a));
  for (const auto& [k, v] : job.env) {
    GP_RETURN_IF_ERROR(CheckString("env", k));
    GP_RETURN_IF_ERROR(CheckString("env", v));
  }
  // Each named by its field ("job.name: longer than 65536 bytes").
  for (const auto& [field, s] : {std::pair<const char*, const std::string*>{"user", &job.user},
                                 {"project", &job.project},
                                 {"name", &job.name},
                                 {"workdir", &job.workdir},
                                 {"image", &job.image},
                                 {"environment", &job.environment},
                                 {"env_dir", &job.env_dir}}) {
    GP_RETURN_IF_ERROR(CheckString(std::string(path) + "." + field, *s));
  }
  if (job.mounts.size() > kMaxMounts) {
    return Status::InvalidArgument(std::string(path) + ".mounts: more than " +
                                   std::to_string(kMaxMounts) + " mounts");
  }
  for (const Mount& m : job.mounts) {
    GP_RETURN_IF_ERROR(CheckString("mounts.source", m.source));
    GP_RETURN_IF_ERROR(CheckString("mounts.target", m.target));
  }
  return Status::Ok();
}

}  // namespace

Result<Job> JobFromJson(const Json& j, std::string_view path, bool reject_unknown) {
  Job job;
  JsonFields f(j, std::string(path), reject_unknown);
  f.Optional("id", &job.id, 0);
  f.Optional("user", &job.user);
  int64_t uid = 0;
  int64_t gid = 0;
  f.Optional("uid", &uid, 0, UINT32_MAX);
  f.Optional("gid", &gid, 0, UINT32_MAX);
  job.uid = static_cast<uint32_t>(uid);
  job.gid = static_cast<uint32_t>(gid);
  f.Optional("project", &job.project);
  f.Optional("name", &job.name);
  std::vector<std::string> command;
  f.Optional("command", &command);
  job.command = std::move(command);
  EnvFromJson(f, &job);
  f.Optional("workdir", &job.workdir);
  f.Optional("image", &job.image);
  GP_RETURN_IF_ERROR(MountsFromJson(f, reject_unknown, &job));
  f.Optional("shm_bytes", &job.shm_bytes, uint64_t{1} << 40);
  f.Optional("init", &job.init);
  f.Optional("array", &job.array);
  f.Optional("array_id", &job.array_id, 0);
  f.Optional("array_index", &job.array_index, 0, kMaxArrayIndex);
  f.Optional("array_max_running", &job.array_max_running, 0, kMaxArraySize);
  GP_RETURN_IF_ERROR(DependenciesFromJson(f, reject_unknown, &job));
  f.Optional("environment", &job.environment);
  f.Optional("env_dir", &job.env_dir);
  std::string script;
  f.Optional("script", &script);
  if (!script.empty()) job.script = std::move(script);
  f.Optional("output", &job.output);
  f.Optional("error", &job.error);
  if (const Json* needs = f.Member("needs")) {
    Result<EnvNeeds> n = NeedsFromJson(*needs, f.PathOf("needs"), reject_unknown);
    if (!n.ok()) return n.status();
    job.needs = std::move(*n);
  }
  if (const Json* req = f.Member("request")) {
    Result<ResourceRequest> r = RequestFromJson(*req, f.PathOf("request"), reject_unknown);
    if (!r.ok()) return r.status();
    job.request = *r;
  }
  f.Optional("priority", &job.priority, -1'000'000, 1'000'000);
  f.Optional("time_limit_s", &job.time_limit_s, 0, int64_t{10} * 365 * 24 * 3600);
  f.Optional("warn_signal", &job.warn_signal, 0, 64);
  f.Optional("warn_time_s", &job.warn_time_s, 0, 65535);  // Slurm's bound
  f.Optional("warn_main_only", &job.warn_main_only);
  f.Optional("requeue", &job.requeue);
  f.Optional("enforce_memory", &job.enforce_memory);
  f.Optional("mpi", &job.mpi);
  f.Optional("interactive", &job.interactive);
  f.Optional("client_keepalive", &job.client_keepalive);
  f.Optional("submit_key", &job.submit_key);
  f.Optional("pty", &job.pty);
  f.Optional("command_ended", &job.command_ended);
  f.Optional("command_exit_code", &job.command_exit_code);
  f.Optional("command_signal", &job.command_signal);
  std::string state = "PENDING";
  f.Optional("state", &state);
  if (auto s = ParseJobState(state)) {
    job.state = *s;
  } else {
    f.Fail("state", "unknown state '" + state + "'");
  }
  f.Optional("submit_time_us", &job.submit_time_us, 0);
  f.Optional("placed_time_us", &job.placed_time_us, 0);
  f.Optional("launch_failures", &job.launch_failures, 0);
  f.Optional("start_time_us", &job.start_time_us, 0);
  f.Optional("end_time_us", &job.end_time_us, 0);
  f.Optional("exit_code", &job.exit_code);
  f.Optional("signal", &job.signal);
  f.Optional("late_end_time_us", &job.late_end_time_us, 0);
  f.Optional("late_exit_code", &job.late_exit_code);
  f.Optional("late_signal", &job.late_signal);
  f.Optional("late_reason", &job.late_reason);
  GP_RETURN_IF_ERROR(PlacementFromJson(f, reject_unknown, &job));
  if (const Json* tasks = f.Array("tasks")) {
    for (size_t i = 0; i < tasks->size(); ++i) {
      Result<TaskStatus> t = TaskStatusFromJson(
          (*tasks)[i], f.PathOf("tasks") + "[" + std::to_string(i) + "]", reject_unknown);
      if (!t.ok()) return t.status();
      job.tasks.push_back(std::move(*t));
    }
  }
  f.Optional("master_port", &job.master_port, 0, 65535);
  f.Optional("pending_reason", &job.pending_reason);
  f.Optional("reason", &job.reason);
  f.Optional("attempt", &job.attempt, 0);
  f.Optional("cancel_requested", &job.cancel_requested);
  f.Optional("time_limit_hit", &job.time_limit_hit);
  f.Optional("held_by", &job.held_by);
  GP_RETURN_IF_ERROR(FencesFromJson(f, reject_unknown, &job));
  f.Optional("held_by_admin", &job.held_by_admin);
  f.Optional("preemptible", &job.preemptible);
  f.Optional("min_runtime_s", &job.min_runtime_s, 0, int64_t{365} * 24 * 3600);
  f.Optional("preempt_grace_s", &job.preempt_grace_s, 0, int64_t{24} * 3600);
  f.Optional("preempted_by", &job.preempted_by, 0);
  f.Optional("preempted_by_name", &job.preempted_by_name);
  f.Optional("preempt_deadline_s", &job.preempt_deadline_s, 0);
  f.Optional("checkpoint_done", &job.checkpoint_done);
  f.Optional("preemptions", &job.preemptions, 0);
  f.Optional("preempted_gpu_hours", &job.preempted_gpu_hours);
  GP_RETURN_IF_ERROR(EarlierAttemptsFromJson(f, reject_unknown, &job));
  f.Optional("stdout_path", &job.stdout_path);
  f.Optional("stderr_path", &job.stderr_path);
  GP_RETURN_IF_ERROR(f.Finish());
  GP_RETURN_IF_ERROR(CheckBounds(job, path));
  return job;
}

}  // namespace gpupool::jobs
