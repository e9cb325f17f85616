#include "sim/timed/timed_experiment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>

#include "sched/queue/gang_placement.h"
#include "sched/queue/queue_policy_registry.h"
#include "sched/rng.h"

namespace gpupool::sim {
namespace {

using sched::ClusterState;
using sched::PlacementPolicy;
using sched::QueuedJob;
using sched::RunningJob;

Result<QueuedJob> ToQueuedJob(const TraceJob& t, int64_t origin_s) {
  QueuedJob q;
  q.id = t.id;
  q.user = t.user;
  q.project = t.project;
  q.priority = t.priority;
  q.submit_s = t.submit_s - origin_s;
  q.time_limit_s = t.time_limit_s;
  q.runtime_estimate_s = t.runtime_estimate_s;
  if (t.tasks.empty()) return Status::InvalidArgument(fmt::format("job '{}' has no tasks", t.id));
  for (size_t k = 0; k < t.tasks.size(); ++k) {
    const TraceTask& tt = t.tasks[k];
    sched::Task task;
    task.name = t.tasks.size() == 1 ? t.id : fmt::format("{}/{}", t.id, k);
    task.job_id = t.id;
    task.cpu_milli = tt.cpu_milli;
    task.memory_mib = tt.memory_mib;
    task.num_gpu = tt.num_gpu;
    task.gpu_milli = tt.gpu_milli;
    task.gpu_models = tt.gpu_models;
    GP_RETURN_IF_ERROR(sched::ValidateTask(task));
    q.tasks.push_back(std::move(task));
  }
  return q;
}

// Decides once per distinct gang shape whether a job could ever be placed: the cheap
// static test first, then a real placement on an idle copy of the cluster with its own
// policy instance (policies cache by node version, which copies share).
class FeasibilityCheck {
 public:
  FeasibilityCheck(const ClusterState& idle, std::unique_ptr<PlacementPolicy> policy)
      : idle_(idle), policy_(std::move(policy)) {}

  // Returns an empty string when the job can run, else why not.
  Result<std::string> WhyNever(const QueuedJob& job) {
    std::string key;
    for (const sched::Task& t : job.tasks) {
      key += fmt::format("{}/{}/{}/{}/{}/{};", t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli,
                         fmt::join(t.gpu_models, "|"), t.min_capability);
    }
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    std::string why;
    if (!sched::GangObviouslyUnplaceable(idle_, job.tasks, &why)) {
      GP_ASSIGN_OR_RETURN(sched::GangPlacement g, sched::PlaceGang(idle_, job.tasks, *policy_));
      if (g.placed) {
        GP_RETURN_IF_ERROR(sched::ReleaseGang(idle_, job.tasks, g.placements));
      } else {
        why = fmt::format("does not fit even on the idle cluster: {}", g.reason);
      }
    }
    cache_.emplace(std::move(key), why);
    return why;
  }

 private:
  ClusterState idle_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::map<std::string, std::string> cache_;
};

int64_t RunTime(const QueuedJob& job, int64_t duration_s) {
  return job.time_limit_s > 0 ? std::min(duration_s, job.time_limit_s) : duration_s;
}

}  // namespace

std::string_view JobFateName(JobFate fate) {
  switch (fate) {
    case JobFate::kFinished:
      return "finished";
    case JobFate::kTimedOut:
      return "timed_out";
    case JobFate::kNeverFits:
      return "never_fits";
    case JobFate::kNeverStarted:
      return "never_started";
  }
  return "unknown";
}

Result<TimedRun> RunTimedExperiment(const ClusterState& idle_cluster,
                                    const std::vector<TraceJob>& trace,
                                    const TimedOptions& options) {
  const sched::PlacementPolicyRegistry& placements = options.placement_registry != nullptr
                                                         ? *options.placement_registry
                                                         : sched::BuiltinPlacementPolicies();
  sched::PolicyConfig policy_config;
  policy_config.seed = options.seed;
  auto make_policy = [&]() { return placements.Create(options.placement_policy, policy_config); };
  GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy, make_policy());
  GP_ASSIGN_OR_RETURN(
      std::unique_ptr<sched::QueuePolicy> queue,
      sched::BuiltinQueuePolicies().Create(options.queue_policy, options.queue_config));
  ClusterState cluster = idle_cluster;
  if (options.shuffle_nodes) {
    std::vector<int32_t> order(static_cast<size_t>(cluster.num_nodes()));
    std::iota(order.begin(), order.end(), 0);
    sched::Rng rng(options.seed);
    rng.Shuffle(order);
    GP_RETURN_IF_ERROR(cluster.SetScanOrder(std::move(order)));
  }
  GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> feasibility_policy, make_policy());
  FeasibilityCheck feasibility(cluster, std::move(feasibility_policy));

  TimedRun run;
  run.capacity = cluster.TotalCapacity();
  const size_t n = trace.size();
  if (n == 0) return run;

  // Arrival order: by submission time, trace order on ties.
  std::vector<size_t> arrival(n);
  std::iota(arrival.begin(), arrival.end(), size_t{0});
  std::stable_sort(arrival.begin(), arrival.end(),
                   [&](size_t a, size_t b) { return trace[a].submit_s < trace[b].submit_s; });
  run.origin_s = trace[arrival[0]].submit_s;

  // Jobs live here for the whole run; the queue and running list point into it.
  std::vector<QueuedJob> jobs;
  jobs.reserve(n);
  run.jobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    GP_ASSIGN_OR_RETURN(QueuedJob q, ToQueuedJob(trace[i], run.origin_s));
    JobRecord& rec = run.jobs[i];
    rec.id = q.id;
    rec.user = q.user;
    rec.project = q.project;
    rec.submit_s = q.submit_s;
    rec.duration_s = trace[i].duration_s;
    rec.gpu_milli = q.Total().gpu_milli;
    rec.num_tasks = static_cast<int32_t>(q.tasks.size());
    jobs.push_back(std::move(q));
  }

  sched::SchedulingPass pass(*queue, *policy, make_policy,
                             sched::PassOptions{options.start_rule, options.max_backfill_tries});
  std::vector<const QueuedJob*> pending;  // arrival order
  std::multiset<int64_t> pending_gpu;     // GPU demand of pending jobs, to skip hopeless passes
  std::vector<RunningJob> running;
  std::vector<size_t> running_pos(n, SIZE_MAX);  // job index -> position in `running`
  // (end time, job index): a total order, so ties end in trace order.
  using Completion = std::pair<int64_t, size_t>;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions;
  auto index_of = [&](const QueuedJob* j) { return static_cast<size_t>(j - jobs.data()); };

  size_t next = 0;
  size_t done = 0;
  const size_t progress_step = std::max<size_t>(1, n / 200);
  size_t next_progress = progress_step;
  AllocationPoint last{-1, -1, -1, -1};
  while (next < n || !completions.empty()) {
    int64_t now = std::numeric_limits<int64_t>::max();
    if (next < n) now = jobs[arrival[next]].submit_s;
    if (!completions.empty()) now = std::min(now, completions.top().first);
    bool freed = false;
    while (!completions.empty() && completions.top().first == now) {
      const size_t j = completions.top().second;
      completions.pop();
      const size_t pos = running_pos[j];
      GP_RETURN_IF_ERROR(sched::ReleaseGang(cluster, jobs[j].tasks, running[pos].placements));
      if (pos + 1 != running.size()) {
        running[pos] = std::move(running.back());
        running_pos[index_of(running[pos].job)] = pos;
      }
      running.pop_back();
      running_pos[j] = SIZE_MAX;
      JobRecord& rec = run.jobs[j];
      rec.end_s = now;
      rec.fate = rec.end_s - rec.start_s < rec.duration_s ? JobFate::kTimedOut : JobFate::kFinished;
      ++done;
      freed = true;
    }
    bool arrived = false;
    while (next < n && jobs[arrival[next]].submit_s == now) {
      const size_t j = arrival[next++];
      GP_ASSIGN_OR_RETURN(std::string why, feasibility.WhyNever(jobs[j]));
      if (!why.empty()) {
        run.jobs[j].fate = JobFate::kNeverFits;
        run.jobs[j].reason = std::move(why);
        ++done;
        continue;
      }
      pending.push_back(&jobs[j]);
      pending_gpu.insert(jobs[j].Total().gpu_milli);
      arrived = true;
    }
    // A pass can start something only if resources were freed or jobs arrived, and
    // only if the free GPUs cover the smallest pending GPU demand.
    if ((freed || arrived) && !pending.empty() &&
        cluster.TotalFree().gpu_milli >= *pending_gpu.begin()) {
      GP_ASSIGN_OR_RETURN(sched::PassResult result, pass.Run(cluster, now, pending, running));
      ++run.passes;
      if (result.reserved_index) ++run.reservations;
      if (!result.started.empty()) {
        std::vector<bool> started(pending.size(), false);
        for (sched::PassResult::Started& s : result.started) {
          const QueuedJob* job = pending[s.pending_index];
          const size_t j = index_of(job);
          started[s.pending_index] = true;
          run.jobs[j].start_s = now;
          running_pos[j] = running.size();
          running.push_back(RunningJob{job, now, std::move(s.placements)});
          completions.emplace(now + RunTime(*job, run.jobs[j].duration_s), j);
          pending_gpu.erase(pending_gpu.find(job->Total().gpu_milli));
        }
        size_t w = 0;
        for (size_t r = 0; r < pending.size(); ++r) {
          if (!started[r]) pending[w++] = pending[r];
        }
        pending.resize(w);
      }
    }
    AllocationPoint point{now, cluster.TotalGpuMilliUsed(), static_cast<int64_t>(running.size()),
                          static_cast<int64_t>(pending.size())};
    if (std::tie(point.gpu_milli_used, point.running_jobs, point.pending_jobs) !=
        std::tie(last.gpu_milli_used, last.running_jobs, last.pending_jobs)) {
      run.timeline.push_back(point);
      last = point;
    }
    if (options.progress && done >= next_progress) {
      options.progress(done, n);
      next_progress = done + progress_step;
    }
  }
  // Nothing runs and nothing arrives any more: whatever still waits never started.
  for (const QueuedJob* job : pending) run.jobs[index_of(job)].fate = JobFate::kNeverStarted;
  if (options.progress) options.progress(n, n);
  return run;
}

}  // namespace gpupool::sim
