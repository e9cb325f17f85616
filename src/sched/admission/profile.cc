#include "sched/admission/profile.h"

#include <algorithm>
#include <iterator>

#include "sched/admission/explain.h"
#include "sched/queue/queue_policy_registry.h"

namespace gpupool::sched {

std::vector<std::string> DefaultGates() {
  return {"hold", "dependency", "earlier-attempt", "array-throttle", "project", "quota"};
}

std::vector<std::string> DefaultAdmissionFilters() {
  return {"drain", "enforce-memory", "env-compat"};
}

Result<std::unique_ptr<SchedulingProfile>> SchedulingProfile::Create(const ProfileSpec& spec) {
  std::unique_ptr<SchedulingProfile> p(new SchedulingProfile());
  p->spec_ = spec;
  for (const std::string& name : spec.gates) {
    GP_ASSIGN_OR_RETURN(std::unique_ptr<GatePlugin> g, BuiltinGates().Create(name));
    p->gates_.push_back(std::move(g));
  }
  for (const std::string& name : spec.filters) {
    GP_ASSIGN_OR_RETURN(std::unique_ptr<AdmissionFilter> f, BuiltinAdmissionFilters().Create(name));
    p->filters_.push_back(std::move(f));
  }
  const QueuePolicyRegistry& queues =
      spec.queues != nullptr ? *spec.queues : BuiltinQueuePolicies();
  GP_ASSIGN_OR_RETURN(p->queue_, queues.Create(spec.queue_policy, spec.queue_config));
  const PlacementPolicyRegistry* placements =
      spec.placements != nullptr ? spec.placements : &BuiltinPlacementPolicies();
  GP_ASSIGN_OR_RETURN(p->placement_,
                      placements->Create(spec.placement_policy, spec.placement_config));
  // EASY plans on private copies of the cluster with policies of their own.
  PlanningPolicyMaker planner = [placements, name = spec.placement_policy,
                                 config = spec.placement_config]() {
    return placements->Create(name, config);
  };
  p->planner_ = planner;
  p->pass_ =
      std::make_unique<SchedulingPass>(*p->queue_, *p->placement_, std::move(planner), spec.pass);
  return p;
}

// Narrows the GPU tasks of `*job` (a copy kept for the pass) to `only` (sorted), within
// what an earlier filter allowed; false, with `*why`, when nothing is left.
bool SchedulingProfile::Narrow(const std::vector<std::string>& only, const QueuedJob** job,
                               std::string* why) {
  QueuedJob& copy = narrowed_.emplace_back(**job);
  for (Task& t : copy.tasks) {
    if (!t.NeedsGpu()) continue;
    if (t.allowed_nodes.empty()) {
      t.allowed_nodes = only;
      continue;
    }
    std::vector<std::string> both;
    std::set_intersection(t.allowed_nodes.begin(), t.allowed_nodes.end(), only.begin(), only.end(),
                          std::back_inserter(both));
    if (both.empty()) {
      *why =
          "cannot run on any node: none both can run its environment and holds its share to "
          "its memory (--enforce memory)";
      return false;
    }
    t.allowed_nodes = std::move(both);
  }
  *job = &copy;
  return true;
}

void SchedulingProfile::Admit(const PassContext& ctx, std::vector<const QueuedJob*>* admitted,
                              std::vector<size_t>* admitted_index, ProfileResult* result) {
  narrowed_.clear();
  std::string why;
  PreFilterResult pre;
  for (size_t i = 0; i < ctx.pending.size(); ++i) {
    const QueuedJob* job = ctx.pending[i];
    bool ok = true;
    for (size_t g = 0; ok && g < gates_.size(); ++g) ok = gates_[g]->Admit(*job, &why);
    if (ok && !job->admission.unplaceable.empty()) {
      why = "cannot run on any node: " + job->admission.unplaceable;
      ok = false;
    }
    for (size_t f = 0; ok && f < filters_.size(); ++f) {
      pre.never.clear();
      pre.only_nodes.clear();
      if (!filters_[f]->PreFilter(*job, &pre)) continue;
      if (!pre.never.empty()) {
        why = "cannot run on any node: " + pre.never;
        ok = false;
      } else if (!pre.only_nodes.empty()) {
        ok = Narrow(pre.only_nodes, &job, &why);
      }
    }
    if (!ok) {
      result->reasons.emplace_back(i, std::move(why));
      why.clear();
      continue;
    }
    admitted->push_back(job);
    admitted_index->push_back(i);
  }
}

std::string CappedReason(size_t max_starts) {
  return "waiting for its turn: the last pass started its maximum of " +
         std::to_string(max_starts) + " jobs before reaching it; the next pass goes on";
}

void SchedulingProfile::Explain(const ClusterState& cluster, const PassContext& ctx,
                                const PassResult& pass,
                                const std::vector<const QueuedJob*>& admitted,
                                const std::vector<size_t>& admitted_index,
                                ProfileResult* result) const {
  std::vector<const FilterPlugin*> filters;
  for (const auto& f : filters_) filters.push_back(f.get());
  // A fair queue between projects says so ("fair-by-project order"): whose share a job
  // waits for is its project's, not its user's.
  std::string order(queue_->name());
  if (order == "fair" && spec_.queue_config.fair_group == FairShareGroup::kProject) {
    order = "fair-by-project";
  }
  PendingExplainer explainer(cluster, std::move(filters), fit_, std::move(order),
                             spec_.single_owner_note);
  std::vector<bool> started(admitted.size(), false);
  for (const PassResult::Started& s : pass.started) started[s.pending_index] = true;
  if (!pass.not_reached.empty()) {
    result->not_reached_reason = CappedReason(spec_.pass.max_starts);
    result->not_reached.reserve(pass.not_reached.size());
    for (size_t k : pass.not_reached) {
      started[k] = true;  // not explained below
      result->not_reached.push_back(admitted_index[k]);
    }
    std::sort(result->not_reached.begin(), result->not_reached.end());
  }
  for (size_t k = 0; k < admitted.size(); ++k) {
    if (started[k]) continue;
    PendingExplainer::Reservation reservation{pass.reservation_unplannable,
                                              pass.reservation_start_s - ctx.now_s};
    const bool reserved = pass.reserved_index && *pass.reserved_index == k;
    result->reasons.emplace_back(
        admitted_index[k], explainer.Explain(*admitted[k], reserved ? &reservation : nullptr));
  }
  std::sort(result->reasons.begin(), result->reasons.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
}

// After the pass: the jobs it started run from now, and the first ctx.plan_starts of the
// others are planned in queue order behind them.
Status SchedulingProfile::PlanStartTimes(const ClusterState& cluster, const PassContext& ctx,
                                         const PassResult& pass,
                                         const std::vector<const QueuedJob*>& admitted,
                                         const std::vector<size_t>& admitted_index,
                                         ProfileResult* result) {
  std::vector<bool> started(admitted.size(), false);
  std::vector<RunningJob> running(ctx.running.begin(), ctx.running.end());
  for (const PassResult::Started& s : pass.started) {
    started[s.pending_index] = true;
    running.push_back({admitted[s.pending_index], ctx.now_s, s.placements});
  }
  const std::vector<size_t> order =
      queue_->Order(QueueContext{ctx.now_s, admitted, running, &cluster});
  std::vector<const QueuedJob*> queue;
  std::vector<size_t> which;  // queue[i] is admitted[which[i]]
  for (size_t k : order) {
    if (started[k]) continue;
    if (queue.size() == ctx.plan_starts) break;
    queue.push_back(admitted[k]);
    which.push_back(k);
  }
  // The holds of the jobs started were given to them: their placeholders are gone.
  std::vector<HeldResources> held;
  for (const HeldResources& h : ctx.held) {
    const bool gone = std::any_of(pass.started.begin(), pass.started.end(), [&](const auto& s) {
      return admitted[s.pending_index]->id == h.for_job;
    });
    if (!gone) held.push_back(h);
  }
  GP_ASSIGN_OR_RETURN(std::vector<PlannedStart> plan,
                      PlanStarts(cluster, ctx.now_s, running, queue, planner_, held, closed_));
  for (size_t i = 0; i < plan.size(); ++i) {
    result->planned_starts.emplace_back(admitted_index[which[i]], std::move(plan[i]));
  }
  return Status::Ok();
}

Result<ProfileResult> SchedulingProfile::Run(ClusterState& cluster, const PassContext& ctx,
                                             bool explain) {
  for (const auto& g : gates_) g->BeginPass(ctx);
  for (const auto& f : filters_) f->BeginPass(ctx);
  ProfileResult result;
  std::vector<const QueuedJob*>& admitted = admitted_;  // kept between passes: no allocation
  std::vector<size_t>& admitted_index = admitted_index_;
  admitted.clear();
  admitted_index.clear();
  Admit(ctx, &admitted, &admitted_index, &result);
  for (const auto& f : filters_) f->PrepareCluster(cluster);
  closed_.clear();  // nodes no new work goes to: what runs there never comes free in a plan
  for (const auto& f : filters_) f->AddClosedNodes(&closed_);
  std::sort(closed_.begin(), closed_.end());
  closed_.erase(std::unique(closed_.begin(), closed_.end()), closed_.end());
  GP_ASSIGN_OR_RETURN(PassResult pass,
                      pass_->Run(cluster, ctx.now_s, admitted, ctx.running, ctx.held, closed_));
  if (explain) Explain(cluster, ctx, pass, admitted, admitted_index, &result);
  if (ctx.plan_starts > 0) {
    GP_RETURN_IF_ERROR(PlanStartTimes(cluster, ctx, pass, admitted, admitted_index, &result));
  }
  for (PassResult::Started& s : pass.started) {
    result.started.push_back({admitted_index[s.pending_index], std::move(s.placements)});
  }
  result.capped = pass.capped;
  if (pass.reserved_index) {
    result.reserved_index = admitted_index[*pass.reserved_index];
    result.reservation_start_s = pass.reservation_start_s;
  }
  return result;
}

}  // namespace gpupool::sched
