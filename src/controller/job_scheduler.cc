#include "controller/job_scheduler.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "common/strings.h"
#include "envcheck/needs.h"
#include "sched/policy_registry.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/queue_policy_registry.h"

namespace gpupool::controller {
namespace {

std::string JoinModels(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : "|") + s;
  return out;
}

constexpr uint64_t kMiB = 1024 * 1024;

std::string FormatShare(int milli) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", milli / 1000.0);
  return buf;
}

std::string FormatGiB(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * kMiB));
  return buf;
}

// "2 CPUs", "0.5 CPU and 4096 MiB memory".
std::string CpuMemText(const sched::Task& t) {
  std::string out =
      FormatShare(static_cast<int>(t.cpu_milli)) + (t.cpu_milli <= 1000 ? " CPU" : " CPUs");
  if (t.memory_mib > 0) out += " and " + std::to_string(t.memory_mib) + " MiB memory";
  return out;
}

int32_t CapabilityOf(const gpu::GpuInfo& g) {
  return g.compute_capability ? g.compute_capability->major * 10 + g.compute_capability->minor : 0;
}

struct ModelFacts {
  std::string key;
  std::string full_name;
  std::string vendor;
  uint64_t memory_bytes = 0;
};

// Everything about the nodes' GPU models a request's constraints are matched against.
std::vector<ModelFacts> Models(const std::vector<SchedNode>& nodes) {
  std::vector<ModelFacts> out;
  for (const SchedNode& n : nodes) {
    if (n.info == nullptr || n.info->gpus.empty()) continue;
    const gpu::GpuInfo& g = n.info->gpus.front();
    ModelFacts f{GpuModelKey(g.name), g.name, std::string(gpu::VendorName(g.vendor)),
                 g.memory_total_bytes};
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& m) { return m.key == f.key; });
    if (it == out.end()) {
      out.push_back(f);
    } else {
      it->memory_bytes = std::min(it->memory_bytes, f.memory_bytes);
    }
  }
  return out;
}

bool ModelMatches(const ModelFacts& m, const std::string& wanted) {
  const std::string w = ToLower(wanted);
  return ToLower(m.key) == w || ToLower(m.full_name).find(w) != std::string::npos;
}

// Builds the scheduling core's task for one task of `job`; on failure returns a reason
// the job can never run here.
Result<sched::Task> TaskFor(const jobs::Job& job, const std::vector<ModelFacts>& models) {
  const jobs::ResourceRequest& r = job.request;
  sched::Task t;
  t.name = std::to_string(job.id);
  t.job_id = std::to_string(job.id);
  t.cpu_milli = r.cpu_milli;
  t.memory_mib = static_cast<int64_t>((r.memory_bytes + kMiB - 1) / kMiB);
  t.num_gpu = r.gpus;
  t.gpu_milli = r.gpus > 0 ? r.gpu_milli : 0;
  if (!r.min_capability.empty()) {
    const auto dot = r.min_capability.find('.');
    t.min_capability = std::atoi(r.min_capability.substr(0, dot).c_str()) * 10 +
                       std::atoi(r.min_capability.substr(dot + 1).c_str());
  }
  if (r.gpus == 0) return t;

  std::vector<const ModelFacts*> allowed;
  for (const ModelFacts& m : models) {
    if (!r.vendor.empty() && m.vendor != r.vendor) continue;
    if (!r.gpu_models.empty() &&
        std::none_of(r.gpu_models.begin(), r.gpu_models.end(),
                     [&](const std::string& w) { return ModelMatches(m, w); })) {
      continue;
    }
    allowed.push_back(&m);
  }
  if (!r.gpu_models.empty() || !r.vendor.empty()) {
    if (allowed.empty()) {
      std::string have;
      for (const ModelFacts& m : models) have += (have.empty() ? "" : ", ") + m.key;
      return Status::FailedPrecondition(
          "no node has GPUs of " +
          (r.gpu_models.empty() ? "vendor " + r.vendor : "model " + JoinModels(r.gpu_models)) +
          " (models here: " + (have.empty() ? "none" : have) + ")");
    }
    for (const ModelFacts* m : allowed) t.gpu_models.push_back(m->key);
  }
  if (r.gpu_memory_bytes > 0) {
    // Size the share against the smallest GPU that has the memory: safe on bigger ones.
    uint64_t best = 0;
    uint64_t largest = 0;
    for (const ModelFacts& m : models) {
      const bool eligible =
          allowed.empty() || std::find(allowed.begin(), allowed.end(), &m) != allowed.end();
      if (!eligible) continue;
      largest = std::max(largest, m.memory_bytes);
      if (m.memory_bytes >= r.gpu_memory_bytes && (best == 0 || m.memory_bytes < best)) {
        best = m.memory_bytes;
      }
    }
    if (best == 0) {
      return Status::FailedPrecondition("needs " + FormatGiB(r.gpu_memory_bytes) +
                                        " of GPU memory; the largest GPU here has " +
                                        FormatGiB(largest));
    }
    t.gpu_milli = static_cast<int32_t>(
        std::clamp<uint64_t>((r.gpu_memory_bytes * 1000 + best - 1) / best, 1, 1000));
  }
  return t;
}

// The nodes that can run the job's environment, sorted; empty when every node can (or
// the job needs no GPU). FailedPrecondition, with each node's reason, when none can.
Result<std::vector<std::string>> AllowedNodes(const jobs::Job& job,
                                              const std::vector<SchedNode>& nodes) {
  std::vector<std::string> allowed;
  if (job.needs.empty() || job.request.gpus == 0) return allowed;
  std::string why;
  size_t considered = 0;
  for (const SchedNode& n : nodes) {
    if (n.info == nullptr || n.info->gpus.empty()) continue;
    ++considered;
    Status s = envcheck::CheckNeeds(job.needs, envcheck::OfferFromNode(*n.info, n.name));
    if (s.ok()) {
      allowed.push_back(n.name);
    } else if (why.size() < 2000) {
      why += (why.empty() ? "" : "; ") + s.message();
    }
  }
  if (allowed.empty() && considered > 0) {
    return Status::FailedPrecondition(job.needs.source + " " + why);
  }
  if (allowed.size() == considered) allowed.clear();  // no constraint
  std::sort(allowed.begin(), allowed.end());
  return allowed;
}

// Takes everything still free on a draining node, so nothing new is placed there while
// what runs there keeps its share.
void Cordon(sched::ClusterState& cluster, int32_t i) {
  sched::Task rest;
  rest.name = "drained";
  rest.cpu_milli = cluster.node(i).cpu_free_milli;
  rest.memory_mib = cluster.node(i).memory_free_mib;
  if (rest.cpu_milli > 0 || rest.memory_mib > 0) (void)cluster.Allocate(rest, {i, {}});
  for (int32_t g = 0; g < cluster.node(i).num_gpus(); ++g) {
    const int32_t free = cluster.node(i).gpu_free_milli[static_cast<size_t>(g)];
    if (free <= 0) continue;
    sched::Task share;
    share.name = "drained";
    share.num_gpu = 1;
    share.gpu_milli = free;
    (void)cluster.Allocate(share, {i, {g}});
  }
}

}  // namespace

std::string HeldReason(const jobs::Job& job) {
  return "held by " + job.held_by + (job.held_by_admin ? " (admin)" : "") + ": `gpupool release " +
         std::to_string(job.id) + "` lets it start";
}

std::string GpuModelKey(const std::string& gpu_name) {
  static const std::set<std::string> kNoise = {"nvidia",   "tesla",  "geforce", "quadro", "amd",
                                               "instinct", "radeon", "intel",   "pro",    "rtx"};
  for (const std::string& word : Split(gpu_name, ' ')) {
    if (word.empty() || kNoise.count(ToLower(word)) > 0) continue;
    if (std::any_of(word.begin(), word.end(), [](char c) { return std::isdigit(c); })) {
      std::string key = word;
      for (char& c : key) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      // "A100-SXM4-80GB" -> "A100"
      if (auto dash = key.find('-'); dash != std::string::npos && dash > 0) key.resize(dash);
      return key;
    }
  }
  return gpu_name.empty() ? std::string("GPU") : gpu_name;
}

Result<std::unique_ptr<JobScheduler>> JobScheduler::Create(const std::string& placement_policy,
                                                           const std::string& queue_policy,
                                                           const std::string& start_rule) {
  std::unique_ptr<JobScheduler> s(new JobScheduler());
  s->placement_policy_name_ = placement_policy;
  GP_ASSIGN_OR_RETURN(s->placement_policy_,
                      sched::BuiltinPlacementPolicies().Create(placement_policy));
  GP_ASSIGN_OR_RETURN(s->queue_policy_, sched::BuiltinQueuePolicies().Create(queue_policy));
  GP_ASSIGN_OR_RETURN(s->pass_options_.rule, sched::ParseStartRule(start_rule));
  return s;
}

std::string JobScheduler::NeverFits(const jobs::Job& job, const std::vector<SchedNode>& nodes) {
  const std::vector<ModelFacts> models = Models(nodes);
  Result<sched::Task> task = TaskFor(job, models);
  if (!task.ok()) return task.status().message();
  Result<std::vector<std::string>> allowed = AllowedNodes(job, nodes);
  if (!allowed.ok()) return allowed.status().message();
  task->allowed_nodes = std::move(*allowed);
  sched::ClusterState cluster;
  for (const SchedNode& n : nodes) {
    sched::NodeSpec spec{n.name, n.cpu_milli, n.memory_mib,
                         n.info ? static_cast<int32_t>(n.info->gpus.size()) : 0};
    if (spec.num_gpus > 0) {
      spec.gpu_model = GpuModelKey(n.info->gpus.front().name);
      spec.gpu_memory_mib = static_cast<int64_t>(n.info->gpus.front().memory_total_bytes / kMiB);
      spec.gpu_capability = CapabilityOf(n.info->gpus.front());
    }
    if (!cluster.AddNode(spec).ok()) continue;
  }
  std::vector<sched::Task> tasks(static_cast<size_t>(job.request.tasks), *task);
  std::string reason;
  if (sched::GangObviouslyUnplaceable(cluster, tasks, &reason)) return reason;
  return "";
}

Result<ScheduleResult> JobScheduler::Plan(const std::vector<const jobs::Job*>& active,
                                          const std::vector<SchedNode>& nodes, int64_t now_s,
                                          const std::map<int64_t, std::string>& blocked,
                                          const Limits& limits) {
  ScheduleResult result;
  const std::vector<ModelFacts> models = Models(nodes);

  sched::ClusterState cluster;
  std::vector<const SchedNode*> node_of;  // cluster index -> node
  for (const SchedNode& n : nodes) {
    sched::NodeSpec spec{n.name, n.cpu_milli, n.memory_mib,
                         n.info ? static_cast<int32_t>(n.info->gpus.size()) : 0};
    if (spec.num_gpus > 0) {
      const gpu::GpuInfo& g = n.info->gpus.front();
      spec.gpu_model = GpuModelKey(g.name);
      uint64_t min_mem = g.memory_total_bytes;
      for (const auto& other : n.info->gpus) min_mem = std::min(min_mem, other.memory_total_bytes);
      spec.gpu_memory_mib = static_cast<int64_t>(min_mem / kMiB);
      spec.gpu_capability = CapabilityOf(g);
    }
    if (cluster.AddNode(spec).ok()) node_of.push_back(&n);
  }

  // Queued jobs for everything active; running ones also occupy the cluster.
  std::vector<sched::QueuedJob> queued;
  queued.reserve(active.size());
  std::vector<const jobs::Job*> queued_source;
  std::map<int64_t, std::string> never;
  // Environment checks per distinct environment (jobs of one image share the answer).
  std::map<std::string, Result<std::vector<std::string>>> allowed_by_env;
  // Arrays with a limit on elements running at once: how many run, and how many pending
  // ones this pass may start (the lowest ids first).
  std::map<int64_t, int> array_running;
  std::map<int64_t, int> array_admitted;
  // What each user and project has placed or running (GPUs, jobs), for their limits; the
  // jobs this pass may start count as they are admitted.
  struct Use {
    int64_t gpus = 0;
    int64_t running = 0;
  };
  std::map<std::string, Use> user_use;
  std::map<std::string, Use> project_use;
  auto gpus_of = [](const jobs::Job& j) {
    return int64_t{j.request.gpus} * std::max(1, j.request.tasks);
  };
  for (const jobs::Job* job : active) {
    if (job->array_id != 0 && job->state != jobs::JobState::kPending) {
      ++array_running[job->array_id];
    }
    if (job->state != jobs::JobState::kPending) {
      for (Use* u : {&user_use[job->user], &project_use[jobs::AccountingProject(*job)]}) {
        u->gpus += gpus_of(*job);
        ++u->running;
      }
    }
  }
  for (const jobs::Job* job : active) {
    if (job->state == jobs::JobState::kPending && job->array_max_running > 0 &&
        job->held_by.empty() && blocked.count(job->id) == 0) {
      const int running = array_running[job->array_id];
      int& admitted = array_admitted[job->array_id];
      if (running + admitted >= job->array_max_running) {
        result.pending_reasons[job->id] =
            "array " + std::to_string(job->array_id) + " runs at most " +
            std::to_string(job->array_max_running) + " elements at once (--array ...%" +
            std::to_string(job->array_max_running) + "); its earlier elements come first";
        continue;
      }
      ++admitted;
    }
    if (job->state == jobs::JobState::kPending && job->held_by.empty() &&
        blocked.count(job->id) == 0) {
      Use& u = user_use[job->user];
      Use& p = project_use[jobs::AccountingProject(*job)];
      std::string why = LimitReason("user " + job->user, limits.ForUser(job->user), u.gpus,
                                    u.running, gpus_of(*job));
      if (const Limit* pl = limits.ForProject(jobs::AccountingProject(*job));
          why.empty() && pl != nullptr) {
        why = LimitReason("project " + jobs::AccountingProject(*job), *pl, p.gpus, p.running,
                          gpus_of(*job));
      }
      if (!why.empty()) {
        result.pending_reasons[job->id] = "waits: " + why;
        continue;
      }
      // Admitted: counted as if it starts (it may not fit; then it only waits longer).
      for (Use* x : {&u, &p}) {
        x->gpus += gpus_of(*job);
        ++x->running;
      }
    }
    if (job->state == jobs::JobState::kPending && !job->held_by.empty()) {
      result.pending_reasons[job->id] = HeldReason(*job);
      continue;
    }
    if (auto b = blocked.find(job->id);
        b != blocked.end() && job->state == jobs::JobState::kPending) {
      result.pending_reasons[job->id] = b->second;
      continue;
    }
    Result<sched::Task> task = TaskFor(*job, models);
    if (task.ok() && job->state == jobs::JobState::kPending && !job->needs.empty() &&
        job->request.gpus > 0) {
      auto it = allowed_by_env.find(job->needs.source);
      if (it == allowed_by_env.end()) {
        it = allowed_by_env.emplace(job->needs.source, AllowedNodes(*job, nodes)).first;
      }
      if (it->second.ok()) {
        task->allowed_nodes = *it->second;
      } else {
        task = it->second.status();
      }
    }
    if (!task.ok()) {
      if (job->state == jobs::JobState::kPending) never[job->id] = task.status().message();
      continue;
    }
    sched::QueuedJob q;
    q.id = std::to_string(job->id);
    q.user = job->user;
    q.project = jobs::AccountingProject(*job);
    q.priority = job->priority;
    q.submit_s = job->submit_time_us / 1'000'000;
    q.time_limit_s = job->time_limit_s;
    q.tasks.assign(static_cast<size_t>(job->request.tasks), *task);
    queued.push_back(std::move(q));
    queued_source.push_back(job);
  }

  std::vector<sched::RunningJob> running;
  std::vector<const sched::QueuedJob*> pending;
  std::vector<const jobs::Job*> pending_source;
  for (size_t i = 0; i < queued.size(); ++i) {
    const jobs::Job* job = queued_source[i];
    if (job->state == jobs::JobState::kPending) {
      pending.push_back(&queued[i]);
      pending_source.push_back(job);
      continue;
    }
    sched::RunningJob r;
    r.job = &queued[i];
    r.start_s = (job->start_time_us > 0 ? job->start_time_us : job->submit_time_us) / 1'000'000;
    bool complete = job->placement.size() == queued[i].tasks.size();
    for (size_t t = 0; complete && t < job->placement.size(); ++t) {
      const jobs::TaskPlacement& p = job->placement[t];
      sched::Placement sp;
      sp.node = cluster.FindNode(p.node);
      if (sp.node < 0) {
        complete = false;
        break;
      }
      const gpu::NodeInfo* info = node_of[static_cast<size_t>(sp.node)]->info;
      for (size_t k = 0; k < p.gpu_uuids.size(); ++k) {
        auto it = std::find_if(info->gpus.begin(), info->gpus.end(),
                               [&](const auto& g) { return g.uuid == p.gpu_uuids[k]; });
        if (it == info->gpus.end()) {
          complete = false;
          break;
        }
        sp.gpus.push_back(static_cast<int32_t>(it - info->gpus.begin()));
      }
      r.placements.push_back(std::move(sp));
    }
    if (!complete) continue;  // its node is gone: the sweep will mark it LOST
    bool allocated = true;
    for (size_t t = 0; t < r.placements.size(); ++t) {
      if (!cluster.Allocate(queued[i].tasks[t], r.placements[t]).ok()) allocated = false;
    }
    if (allocated) running.push_back(std::move(r));
  }

  std::string draining;  // "n1, n2": named in pending reasons
  for (size_t i = 0; i < node_of.size(); ++i) {
    if (!node_of[i]->draining) continue;
    Cordon(cluster, static_cast<int32_t>(i));
    draining += (draining.empty() ? "" : ", ") + node_of[i]->name;
  }

  const std::string policy_name = placement_policy_name_;
  sched::SchedulingPass pass(
      *queue_policy_, *placement_policy_,
      [policy_name]() { return sched::BuiltinPlacementPolicies().Create(policy_name); },
      pass_options_);
  GP_ASSIGN_OR_RETURN(sched::PassResult pr, pass.Run(cluster, now_s, pending, running));

  std::set<size_t> started;
  for (const auto& s : pr.started) {
    started.insert(s.pending_index);
    const jobs::Job* job = pending_source[s.pending_index];
    const sched::QueuedJob& q = *pending[s.pending_index];
    std::vector<jobs::TaskPlacement> out;
    for (size_t t = 0; t < s.placements.size(); ++t) {
      const sched::Placement& sp = s.placements[t];
      const SchedNode& n = *node_of[static_cast<size_t>(sp.node)];
      jobs::TaskPlacement tp;
      tp.node = n.name;
      tp.gpu_milli = q.tasks[t].num_gpu > 0 ? q.tasks[t].gpu_milli : 0;
      for (int32_t g : sp.gpus) {
        const gpu::GpuInfo& gi = n.info->gpus[static_cast<size_t>(g)];
        tp.gpu_indices.push_back(gi.index);
        tp.gpu_uuids.push_back(gi.uuid);
      }
      out.push_back(std::move(tp));
    }
    result.starts[job->id] = std::move(out);
  }

  // Pending reasons, from the cluster as it is after this pass.
  for (const auto& [id, why] : never) result.pending_reasons[id] = "cannot run on any node: " + why;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (started.count(i) > 0) continue;
    const jobs::Job* job = pending_source[i];
    const sched::Task& t = pending[i]->tasks.front();
    std::string reason;
    std::string never_reason;
    if (sched::GangObviouslyUnplaceable(cluster, pending[i]->tasks, &never_reason)) {
      reason = "cannot run on any node: " + never_reason;
    } else if (pr.reserved_index && *pr.reserved_index == i) {
      reason = pr.reservation_unplannable
                   ? "next in line; waits for running jobs to end (they have no time limit)"
                   : "next in line; resources reserved from " +
                         std::to_string(pr.reservation_start_s - now_s) +
                         " s from now, when running jobs reach their time limits";
    } else if (t.num_gpu > 0) {
      int32_t best_block = 0;
      int32_t best_milli = 0;
      bool cpu_mem_short = false;
      for (int32_t n = 0; n < cluster.num_nodes(); ++n) {
        const sched::NodeState& ns = cluster.node(n);
        if (ns.num_gpus() == 0) continue;
        if (!t.gpu_models.empty() && std::find(t.gpu_models.begin(), t.gpu_models.end(),
                                               ns.gpu_model) == t.gpu_models.end()) {
          continue;
        }
        if (t.min_capability > 0 && ns.gpu_capability < t.min_capability) continue;
        if (!t.allowed_nodes.empty() &&
            !std::binary_search(t.allowed_nodes.begin(), t.allowed_nodes.end(), ns.name)) {
          continue;
        }
        int32_t block = 0;
        for (int32_t f : ns.gpu_free_milli) {
          if (f >= t.gpu_milli) ++block;
          best_milli = std::max(best_milli, f);
        }
        best_block = std::max(best_block, block);
        if (block >= t.num_gpu &&
            (ns.cpu_free_milli < t.cpu_milli || ns.memory_free_mib < t.memory_mib)) {
          cpu_mem_short = true;
        }
      }
      std::string of_model = t.gpu_models.empty() ? "" : " of model " + JoinModels(t.gpu_models);
      if (!t.allowed_nodes.empty()) {
        of_model += " on the " + std::to_string(t.allowed_nodes.size()) + " node" +
                    (t.allowed_nodes.size() == 1 ? "" : "s") + " that can run its environment";
      }
      if (t.IsFractional() && best_milli < t.gpu_milli) {
        reason = "needs " + FormatShare(t.gpu_milli) + " of one GPU" + of_model +
                 "; the most free on any GPU: " + FormatShare(best_milli);
      } else if (best_block < t.num_gpu) {
        reason = "needs " + std::to_string(t.num_gpu) + " idle GPU" + (t.num_gpu == 1 ? "" : "s") +
                 of_model + "; largest idle block on any node: " + std::to_string(best_block);
      } else if (cpu_mem_short) {
        reason = "needs " + CpuMemText(t) + " beside its GPUs; no node with the GPUs has them free";
      } else if (pending[i]->tasks.size() > 1) {
        reason = "needs " + std::to_string(pending[i]->tasks.size()) +
                 " tasks placed together; not all fit at once now";
      } else {
        reason = "waiting for its turn: jobs ahead of it in the queue (" +
                 std::string(queue_policy_->name()) + " order) come first";
      }
    } else {
      reason = "needs " + CpuMemText(t) + "; no node has them free";
    }
    if (!draining.empty() && never_reason.empty()) {
      reason += " (nothing new starts on draining node" +
                std::string(draining.find(',') == std::string::npos ? " " : "s ") + draining + ")";
    }
    result.pending_reasons[job->id] = reason;
  }
  return result;
}

}  // namespace gpupool::controller
