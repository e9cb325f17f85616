#include "controller/job_scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "controller/job_lifecycle.h"
#include "controller/metrics.h"
#include "sched/admission/gates.h"
#include "sched/policy_registry.h"
#include "sched/queue/gang_placement.h"

namespace gpupool::controller {

std::string HeldReason(const jobs::Job& job) {
  return sched::HoldGate::Reason(lifecycle::UserJobId(job), job.held_by, job.held_by_admin);
}

void JobScheduler::set_project_enforcement(ProjectEnforcement e) {
  project_enforcement_ = e;
  // A careless admin's pair (the third red team): fair share by project where any user may
  // name any (known) project lets each pick their group, a fresh share.
  if (by_project_ && e != ProjectEnforcement::kMembers) {
    spdlog::warn(
        "fair-by project with enforce-projects {}: a user may name {} project and so pick "
        "their fair-share group; use enforce-projects members, with each project's members "
        "and default projects (docs/deploy.md, \"Fair share\")",
        sched::ProjectEnforcementName(e), e == ProjectEnforcement::kNone ? "any" : "any known");
  }
}

Result<std::unique_ptr<JobScheduler>> JobScheduler::Create(const std::string& placement_policy,
                                                           const std::string& queue_policy,
                                                           const std::string& start_rule,
                                                           MpsSharing mps_sharing,
                                                           size_t max_starts,
                                                           sched::FairShareGroup fair_by) {
  sched::ProfileSpec spec;
  spec.placement_policy = placement_policy;
  spec.queue_policy = queue_policy;
  spec.queue_config.fair_group = fair_by;
  spec.single_owner_note = mps_sharing == MpsSharing::kOneSize ? kMpsOneSizeNote : kMpsOneUserNote;
  GP_ASSIGN_OR_RETURN(spec.pass.rule, sched::ParseStartRule(start_rule));
  spec.pass.max_starts = max_starts;
  std::unique_ptr<JobScheduler> s(new JobScheduler());
  s->mps_sharing_ = mps_sharing;
  s->by_project_ = fair_by == sched::FairShareGroup::kProject;
  s->set_preemption(PreemptionSettings{});  // by project too
  s->cache_.by_version = true;              // the caller steps a job's version when it changes
  GP_ASSIGN_OR_RETURN(s->profile_, sched::SchedulingProfile::Create(spec));
  s->spec_ = std::move(spec);
  GP_ASSIGN_OR_RETURN(s->preempt_policy_,
                      sched::BuiltinPlacementPolicies().Create(placement_policy));
  return s;
}

Status JobScheduler::UseWeights(std::map<std::string, double, std::less<>> weights) {
  if (weights == weights_) return Status::Ok();
  sched::ProfileSpec spec = spec_;
  spec.queue_config.fair_weights = weights;
  GP_ASSIGN_OR_RETURN(profile_, sched::SchedulingProfile::Create(spec));
  spec_ = std::move(spec);
  weights_ = std::move(weights);
  if (preemption_) preemption_->weights = weights_;
  return Status::Ok();
}

std::string JobScheduler::NeverFits(const jobs::Job& job, const std::vector<SchedNode>& nodes) {
  const SchedInput in(nodes);
  return NeverFits(job, in);
}

std::string JobScheduler::NeverFits(const jobs::Job& job, const SchedInput& in) {
  Result<sched::Task> task = in.TaskFor(job);
  if (!task.ok()) return task.status().message();
  if (!job.needs.empty() && job.request.gpus > 0) {
    sched::EnvironmentNodes env = in.NodesFor(job.needs);
    if (!env.none.empty()) return env.none;
    task->allowed_nodes = std::move(env.nodes);
  }
  std::vector<sched::Task> tasks(static_cast<size_t>(job.request.tasks), *task);
  std::string reason;
  if (sched::GangObviouslyUnplaceable(in.cluster, tasks, &reason)) return reason;
  return "";
}

namespace {

// The start plan's answers by job id: a planned start, else why there is none. Jobs out
// of the plan (past the first plan_starts, or not admitted) get no note: readers say so.
void StartNotes(const SchedInput& in, const sched::ProfileResult& r, ScheduleResult* result) {
  for (const auto& [i, planned] : r.planned_starts) {
    const int64_t id = in.pending_source[i]->id;
    if (planned.start_s > 0) {
      result->start_estimates_us[id] = planned.start_s * 1'000'000;
    } else {
      result->start_notes[id] = planned.why;
    }
  }
}

}  // namespace

Result<ScheduleResult> JobScheduler::Plan(const std::vector<const jobs::Job*>& active,
                                          const std::vector<SchedNode>& nodes, int64_t now_s,
                                          const AdmissionFeed& feed, const Limits& limits,
                                          size_t plan_starts, const PreemptorHolds& holds) {
  GP_RETURN_IF_ERROR(UseWeights(sched::FairShareWeights(limits, by_project_)));
  SchedInput in(nodes, mps_sharing_, &cache_, &kept_);
  in.AddJobs(active, feed);
  const PassHolds held = AllocateHolds(in, holds);
  sched::PassContext ctx;
  ctx.now_s = now_s;
  ctx.pending = in.pending;
  ctx.running = in.running;
  ctx.occupying = in.occupying;
  ctx.limits = &limits;
  ctx.project_enforcement = project_enforcement_;
  ctx.plan_starts = plan_starts;
  ctx.draining = in.draining;
  ctx.draining_why = in.draining_why;
  std::sort(in.memory_enforced_nodes.begin(), in.memory_enforced_nodes.end());
  ctx.memory_enforced_nodes = in.memory_enforced_nodes;
  ctx.environments = [&in](std::string_view env) { return in.NodesForEnvironment(env); };
  ctx.held = held.held;
  GP_ASSIGN_OR_RETURN(sched::ProfileResult r, profile_->Run(in.cluster, ctx));
  ScheduleResult result;
  result.capped = r.capped;
  for (const auto& s : r.started) {
    result.starts[in.pending_source[s.pending_index]->id] =
        in.ToTaskPlacements(*in.pending[s.pending_index], s.placements);
  }
  if (plan_starts > 0) StartNotes(in, r, &result);
  if (r.reserved_index && r.reservation_start_s > 0) {
    result.start_estimates_us[in.pending_source[*r.reserved_index]->id] =
        r.reservation_start_s * 1'000'000;
  }
  std::vector<std::optional<std::string>> reasons(in.pending.size());
  // The jobs a capped pass did not reach share one reason, kept as one (KeepReasons),
  // unless a note of their own is added below: an out-of-service GPU's, a hold's.
  std::vector<size_t> not_reached = std::move(r.not_reached);
  if (in.any_out_of_service()) {
    for (size_t i : not_reached) r.reasons.emplace_back(i, r.not_reached_reason);
    not_reached.clear();
  }
  for (size_t i : held.pending) {
    auto it = std::lower_bound(not_reached.begin(), not_reached.end(), i);
    if (it == not_reached.end() || *it != i) continue;
    not_reached.erase(it);
    reasons[i] = r.not_reached_reason;
  }
  for (auto& [i, why] : r.reasons) {
    // A GPU out of service that keeps the job waiting is named (docs/health.md); not
    // where a gate (a hold, a dependency, a limit) keeps it.
    if (in.any_out_of_service()) {
      const std::string kind = PendingReasonClass(why);
      if (kind == "resources" || kind == "unplaceable" || kind == "queue" || kind == "other") {
        if (std::string note = in.OutOfServiceNote(*in.pending[i]); !note.empty()) {
          why += "; " + note;
        }
      }
    }
    reasons[i] = std::move(why);
  }
  if (preemption_ && !r.capped) {
    GP_ASSIGN_OR_RETURN(result.preemptions,
                        PlanPreemptions(in, now_s, *preemption_, *preempt_policy_, reasons, held,
                                        feed.preempt_barred));
  }
  for (size_t i : held.pending) {
    if (reasons[i]) *reasons[i] += "; " + std::string(kHeldNote);
  }
  KeepReasons(in, reasons, not_reached, r.not_reached_reason, &result);
  return result;
}

void JobScheduler::KeepReasons(const SchedInput& in,
                               std::vector<std::optional<std::string>>& reasons,
                               const std::vector<size_t>& shared, const std::string& shared_why,
                               ScheduleResult* result) {
  ++pass_;
  size_t given = shared.size();
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (!reasons[i]) continue;
    ++given;
    const int64_t id = in.pending_source[i]->id;
    auto [it, fresh] = reasons_.try_emplace(id);
    KeptReason& kept = it->second;
    kept.pass = pass_;
    kept.shared = false;
    if (!fresh && kept.why == *reasons[i]) continue;
    const bool resources = PendingReasonClass(*reasons[i]) == "resources";
    no_room_ += int64_t{resources} - int64_t{kept.resources};
    kept.resources = resources;
    kept.why = std::move(*reasons[i]);
    result->pending_reasons.emplace(id, kept.why);
  }
  if (!shared.empty()) {
    // A job kept with the last shared reason has this one if the text is the same: one
    // comparison for all of them.
    const bool same_text = shared_why == shared_why_;
    const bool resources = PendingReasonClass(shared_why) == "resources";
    for (size_t i : shared) {
      const int64_t id = in.pending_source[i]->id;
      auto [it, fresh] = reasons_.try_emplace(id);
      KeptReason& kept = it->second;
      kept.pass = pass_;
      if (!fresh && kept.shared && same_text) continue;
      kept.shared = true;
      if (!fresh && kept.why == shared_why) continue;
      no_room_ += int64_t{resources} - int64_t{kept.resources};
      kept.resources = resources;
      kept.why = shared_why;
      result->pending_reasons.emplace(id, kept.why);
    }
    shared_why_ = shared_why;
  }
  if (reasons_.size() > given) {
    std::erase_if(reasons_, [&](const auto& e) {
      if (e.second.pass == pass_) return false;
      no_room_ -= int64_t{e.second.resources};
      result->reasons_dropped.push_back(e.first);
      return true;
    });
  }
  result->no_room = no_room_;
}

}  // namespace gpupool::controller
