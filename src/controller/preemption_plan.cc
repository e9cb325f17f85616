#include "controller/preemption_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "controller/job_lifecycle.h"
#include "controller/metrics.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/preemption.h"
#include "sched/queue/queue_policy.h"

namespace gpupool::controller {
namespace {

bool Stopping(const jobs::Job& job) { return job.cancel_requested || job.preempted_by != 0; }

std::string Why(const jobs::Job& victim, const jobs::Job& waiting, bool by_project) {
  if (victim.priority < waiting.priority && victim.user == waiting.user) {
    return "of higher priority (" + std::to_string(waiting.priority) + " > " +
           std::to_string(victim.priority) + ")";
  }
  const std::string& group = by_project ? jobs::AccountingProject(waiting) : waiting.user;
  return std::string(by_project ? "of project " : "of user ") + group +
         ", below its fair share of GPUs";
}

// The waiting jobs weighed for preemption, after the waiting jobs that can stop nobody.
constexpr size_t kInspectedPerWeighed = 16;

// Reorders `waiting` (indices into in.pending, best first) so that each group's (user's,
// or project's) first job comes before any group's second, and so on, keeping the order
// within each round. The red team's starvation: one user's four waiting jobs that could
// stop nobody (over their share, or too large), first in the order, took every place of a
// pass, and another user below their share was never weighed.
void EachGroupsFirst(const SchedInput& in, bool by_project, std::vector<size_t>* waiting) {
  std::map<std::string, size_t> seen;
  std::vector<std::pair<size_t, size_t>> ranked;  // (round, index)
  ranked.reserve(waiting->size());
  for (size_t w : *waiting) {
    const sched::QueuedJob& q = *in.pending[w];
    ranked.emplace_back(seen[by_project ? q.project : q.user]++, w);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < ranked.size(); ++k) (*waiting)[k] = ranked[k].second;
}

}  // namespace

Result<std::vector<PlannedPreemption>> PlanPreemptions(
    const SchedInput& in, int64_t now_s, const PreemptionSettings& settings,
    sched::PlacementPolicy& policy, std::vector<std::optional<std::string>>& reasons,
    const PassHolds& holds, const std::map<std::string, std::string, std::less<>>& barred) {
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
  options.priority_within_user = true;  // users choose their priorities (--priority)
  options.weights = settings.weights;
  // Running jobs as charged (a MIG instance by its weight), against the weighed capacity.
  sched::GroupUse use =
      sched::UseOf(runs, in.pending, trial.TotalGpuWeightMilli(), options, &in.cluster);
  auto used = [&](const sched::QueuedJob& q) {  // per weight
    const std::string& g = settings.by_project ? q.project : q.user;
    auto it = use.gpu_milli.find(g);
    return it == use.gpu_milli.end()
               ? 0.0
               : static_cast<double>(it->second) / sched::GroupWeight(options, g);
  };
  std::vector<size_t> waiting;
  for (size_t i = 0; i < in.pending.size(); ++i) {
    if (!reasons[i]) continue;                            // it started in this pass
    if (holds.Holds(in.pending_source[i]->id)) continue;  // it waits for its victims
    const std::string kind = PendingReasonClass(*reasons[i]);
    if (kind == "resources" || kind == "queue") waiting.push_back(i);
  }
  std::stable_sort(waiting.begin(), waiting.end(),
                   [&](size_t a, size_t b) { return used(*in.pending[a]) < used(*in.pending[b]); });
  // A priority is its user's choice (--priority): it puts that user's jobs first among
  // their own, never ahead of another user's in the race for victims.
  sched::RankOwnJobsByPriority(sched::QueueContext{now_s, in.pending, {}, &in.cluster}, waiting,
                               /*across_users=*/false);
  EachGroupsFirst(in, settings.by_project, &waiting);
  // At most max_waiting jobs that may stop someone are weighed (placing a gang is the
  // cost), among at most kInspectedPerWeighed times as many.
  size_t weighed = 0;
  size_t inspected = 0;
  for (size_t w : waiting) {
    if (weighed >= settings.max_waiting ||
        ++inspected > settings.max_waiting * kInspectedPerWeighed) {
      break;
    }
    const sched::QueuedJob& q = *in.pending[w];
    const jobs::Job& wjob = *in.pending_source[w];
    std::vector<size_t> candidates = sched::PreemptionCandidates(q, runs, use, now_s, options);
    if (candidates.empty()) continue;
    if (auto b = barred.find(wjob.user); b != barred.end()) {
      // Barred: its user's own jobs of a lower priority only. Where it could have stopped
      // another user's, its reason says why it did not.
      const size_t could = candidates.size();
      std::erase_if(candidates, [&](size_t c) { return run_source[c]->user != wjob.user; });
      if (candidates.size() < could) *reasons[w] += "; " + b->second;
      if (candidates.empty()) continue;
    }
    ++weighed;
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
      out.push_back({victim.id, wjob.id, lifecycle::UserJobId(wjob),
                     Why(victim, wjob, settings.by_project), grace, placement});
      longest_grace = std::max(longest_grace, grace);
      names += (names.empty() ? "" : ", ") + lifecycle::UserJobId(victim);
      const sched::RunningJob& r = *runs[v].run;
      GP_RETURN_IF_ERROR(sched::ReleaseGang(trial, r.job->tasks, r.placements));
      runs[v].preemptible = false;  // taken: nobody else's victim
    }
    for (size_t k = 0; k < q.tasks.size(); ++k) {
      GP_RETURN_IF_ERROR(trial.Allocate(q.tasks[k], victims->placements[k]));
    }
    const bool several = victims->running.size() > 1;
    *reasons[w] += "; preempting job" + std::string(several ? "s " : " ") + names +
                   (several ? ", which stop within " : ", which stops within ") +
                   std::to_string(longest_grace) + " s";
  }
  return out;
}

namespace {

// A job's own value over the pool's bound: InvalidArgument naming the field and its flag.
Status OverBound(const char* field, const char* flag, int64_t asked, int64_t bound,
                 const std::string& why) {
  if (asked <= bound) return Status::Ok();
  return Status::InvalidArgument(std::string(field) + " (" + flag + "): " + std::to_string(asked) +
                                 " s is longer than the " + std::to_string(bound) + " s " + why +
                                 "; ask for at most that, or leave it out");
}

}  // namespace

Status ApplyPreemptionDefaults(const Limits& limits, const PreemptionSettings& server,
                               jobs::Job* job) {
  if (!job->interactive.empty()) return Status::Ok();  // never preempted
  const std::string& project_name = jobs::AccountingProject(*job);
  const Limit* project = limits.ForProject(project_name);
  const Limit& user = limits.ForUser(job->user);
  // The third red team: under enforce-projects none or known anyone may name any project,
  // and a project's entry came first, so a user the admin made preemptible (with a short
  // grace) named a project made unpreemptible (or with a longer grace) and was not. Only
  // the user's team's entry (listing them, or named after them) comes first; any other
  // binds only where it is stricter than the user's own.
  const bool team =
      project != nullptr && (project->members.contains(job->user) || project_name == job->user);
  auto pick = [&](auto member) -> int64_t {
    const int64_t p = project != nullptr ? project->*member : -1;
    if (p < 0) return user.*member;
    return team || user.*member < 0 ? p : std::min(p, user.*member);
  };
  // The admin's word on this job: the project's entry, else the user's (or every user's).
  std::optional<bool> admin_says =
      project != nullptr && project->preemptible ? project->preemptible : user.preemptible;
  if (!team && user.preemptible.value_or(false)) admin_says = true;
  if (!job->preemptible && admin_says) job->preemptible = *admin_says;
  if (!job->preemptible) return Status::Ok();
  // An entry's 0 (`limits set` refuses it; the API takes it) is no value, as a job's 0 is:
  // the job would take the server's default, so that is its bound too.
  const int64_t entry_min_runtime = pick(&Limit::min_runtime_s);
  const int64_t entry_grace = pick(&Limit::preempt_grace_s);
  const int64_t pool_min_runtime =
      entry_min_runtime > 0 ? entry_min_runtime : server.default_min_runtime_s;
  const int64_t pool_grace = entry_grace > 0 ? entry_grace : server.default_grace_s;
  // The red team's holes: a job made preemptible by the admin dodged it with a minimum
  // run time of a year, and any preemptible job kept its GPUs a day after its SIGTERM
  // (and its preemptor waiting) with a grace of a day. A job may ask for less, not more.
  if (admin_says.value_or(false)) {
    GP_RETURN_IF_ERROR(OverBound("min_runtime_s", "--min-runtime", job->min_runtime_s,
                                 pool_min_runtime,
                                 "this pool's admin gives preemptible jobs like this one "
                                 "(gpupool limits)"));
  }
  GP_RETURN_IF_ERROR(OverBound("preempt_grace_s", "--grace", job->preempt_grace_s, pool_grace,
                               "grace this pool gives a preempted job (the admin's `gpupool limits "
                               "set --grace`, else the server's --preempt-grace)"));
  if (job->min_runtime_s == 0) job->min_runtime_s = std::max<int64_t>(0, entry_min_runtime);
  if (job->preempt_grace_s == 0) job->preempt_grace_s = std::max<int64_t>(0, entry_grace);
  return Status::Ok();
}

}  // namespace gpupool::controller
