#include "controller/preemption_plan.h"

#include <algorithm>

#include "controller/metrics.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/preemption.h"

namespace gpupool::controller {
namespace {

bool Stopping(const jobs::Job& job) { return job.cancel_requested || job.preempted_by != 0; }

std::string Why(const jobs::Job& victim, const jobs::Job& waiting, bool by_project) {
  if (victim.priority < waiting.priority) {
    return "of higher priority (" + std::to_string(waiting.priority) + " > " +
           std::to_string(victim.priority) + ")";
  }
  const std::string& group = by_project ? jobs::AccountingProject(waiting) : waiting.user;
  return std::string(by_project ? "of project " : "of user ") + group +
         ", below its fair share of GPUs";
}

}  // namespace

Result<std::vector<PlannedPreemption>> PlanPreemptions(
    const SchedInput& in, int64_t now_s, const PreemptionSettings& settings,
    sched::PlacementPolicy& policy, std::vector<std::optional<std::string>>& reasons,
    const PassHolds& holds) {
  std::vector<PlannedPreemption> out;
  std::vector<sched::PreemptibleRun> runs;
  std::vector<const jobs::Job*> run_source;
  std::vector<size_t> stopping;
  bool any_candidate = false;
  for (size_t i = 0; i < in.running.size(); ++i) {
    const jobs::Job& job = *in.running_source[i];
    const sched::RunningJob& r = in.running[i];
    if (Stopping(job)) {
      stopping.push_back(i);
      continue;
    }
    const int64_t min_runtime =
        job.min_runtime_s > 0 ? job.min_runtime_s : settings.default_min_runtime_s;
    const bool candidate = job.preemptible && job.state == jobs::JobState::kRunning &&
                           now_s - r.start_s >= min_runtime;
    any_candidate |= candidate;
    runs.push_back({&r, candidate});
    run_source.push_back(&job);
  }
  // No victim to choose (the common case: no preemptible job has run its minimum time):
  // neither the copy of the cluster nor the sort of the waiting jobs below is needed.
  if (!any_candidate) return out;
  sched::ClusterState trial = in.cluster;
  for (size_t i : stopping) {
    // Its GPUs are as good as free for the waiting jobs: they come back when it ends.
    const sched::RunningJob& r = in.running[i];
    GP_RETURN_IF_ERROR(sched::ReleaseGang(trial, r.job->tasks, r.placements));
  }
  // ... except those held for their preemptors.
  GP_RETURN_IF_ERROR(GiveHoldsToPreemptors(trial, in, holds, reasons));
  sched::PreemptionOptions options;
  options.min_runtime_s = 0;  // each job's own, above
  options.by_project = settings.by_project;
  sched::GroupUse use = sched::UseOf(runs, in.pending, trial.TotalCapacity().gpu_milli, options);
  auto used = [&](const sched::QueuedJob& q) {
    auto it = use.gpu_milli.find(settings.by_project ? q.project : q.user);
    return it == use.gpu_milli.end() ? int64_t{0} : it->second;
  };
  std::vector<size_t> waiting;
  for (size_t i = 0; i < in.pending.size(); ++i) {
    if (!reasons[i]) continue;                            // it started in this pass
    if (holds.Holds(in.pending_source[i]->id)) continue;  // it waits for its victims
    const std::string kind = PendingReasonClass(*reasons[i]);
    if (kind == "resources" || kind == "queue") waiting.push_back(i);
  }
  std::stable_sort(waiting.begin(), waiting.end(), [&](size_t a, size_t b) {
    const sched::QueuedJob& qa = *in.pending[a];
    const sched::QueuedJob& qb = *in.pending[b];
    if (qa.priority != qb.priority) return qa.priority > qb.priority;
    return used(qa) < used(qb);
  });
  if (waiting.size() > settings.max_waiting) waiting.resize(settings.max_waiting);
  for (size_t w : waiting) {
    const sched::QueuedJob& q = *in.pending[w];
    const jobs::Job& wjob = *in.pending_source[w];
    const std::vector<size_t> candidates =
        sched::PreemptionCandidates(q, runs, use, now_s, options);
    if (candidates.empty()) continue;
    GP_ASSIGN_OR_RETURN(std::optional<sched::Victims> victims,
                        sched::ChooseVictims(trial, q, runs, candidates, policy));
    if (!victims) continue;
    std::string names;
    int64_t longest_grace = 0;
    const std::vector<jobs::TaskPlacement> placement = in.ToTaskPlacements(q, victims->placements);
    for (size_t v : victims->running) {
      const jobs::Job& victim = *run_source[v];
      const int64_t grace =
          victim.preempt_grace_s > 0 ? victim.preempt_grace_s : settings.default_grace_s;
      out.push_back({victim.id, wjob.id, Why(victim, wjob, settings.by_project), grace, placement});
      longest_grace = std::max(longest_grace, grace);
      names += (names.empty() ? "" : ", ") + std::to_string(victim.id);
      const sched::RunningJob& r = *runs[v].run;
      GP_RETURN_IF_ERROR(sched::ReleaseGang(trial, r.job->tasks, r.placements));
      runs[v].preemptible = false;  // taken: nobody else's victim
    }
    for (size_t k = 0; k < q.tasks.size(); ++k) {
      GP_RETURN_IF_ERROR(trial.Allocate(q.tasks[k], victims->placements[k]));
    }
    *reasons[w] += "; preempting job" + std::string(victims->running.size() > 1 ? "s " : " ") +
                   names + ", which stop within " + std::to_string(longest_grace) + " s";
  }
  return out;
}

void ApplyPreemptionDefaults(const Limits& limits, jobs::Job* job) {
  if (!job->interactive.empty()) return;  // never preempted
  const Limit* project = limits.ForProject(jobs::AccountingProject(*job));
  const Limit& user = limits.ForUser(job->user);
  auto pick = [&](auto member) {
    if (project != nullptr && (project->*member) >= 0) return project->*member;
    return user.*member;
  };
  if (!job->preemptible) {
    if (project != nullptr && project->preemptible) {
      job->preemptible = *project->preemptible;
    } else if (user.preemptible) {
      job->preemptible = *user.preemptible;
    }
  }
  if (!job->preemptible) return;
  if (job->min_runtime_s == 0)
    job->min_runtime_s = std::max<int64_t>(0, pick(&Limit::min_runtime_s));
  if (job->preempt_grace_s == 0) {
    job->preempt_grace_s = std::max<int64_t>(0, pick(&Limit::preempt_grace_s));
  }
}

}  // namespace gpupool::controller
