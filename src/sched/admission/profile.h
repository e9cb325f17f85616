// SchedulingProfile: one scheduling pass as the live scheduler and the simulator both run
// it, made of plugins created by name:
//
//   gates (admission.h)        hold, dependency, earlier-attempt, array-throttle, project, quota
//   unplaceable jobs           the host's own finding (AdmissionFacts::unplaceable)
//   admission filters          drain, enforce-memory, env-compat: PreFilter per job, PrepareCluster
//   once SchedulingPass             queue policy + start rule + gang placement + placement
//                              policy (its fit filter and score), queue/scheduling_pass.h
//   explain (explain.h)        why each admitted job that did not start waits
//
// A job refused by a gate, found unplaceable or refused by a PreFilter is not tried; its
// reason is the refusal. The cluster given to Run holds the running jobs and is changed
// by the pass: drained nodes' free shares are taken and started jobs are allocated, so
// callers pass a copy they may spend (the controller builds one per pass) or, like the
// simulator, never drain.
//
// Not thread-safe (policies and plugins cache); one profile serves one scheduling loop.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sched/admission/admission.h"
#include "sched/admission/explain.h"
#include "sched/framework.h"
#include "sched/policy_registry.h"
#include "sched/queue/queue_policy.h"
#include "sched/queue/queue_policy_registry.h"
#include "sched/queue/scheduling_pass.h"
#include "sched/queue/start_plan.h"

namespace gpupool::sched {

// The gates and filters of the profile both the controller and `gpupool sim timed` run.
std::vector<std::string> DefaultGates();
std::vector<std::string> DefaultAdmissionFilters();

struct ProfileSpec {
  std::vector<std::string> gates = DefaultGates();
  std::vector<std::string> filters = DefaultAdmissionFilters();
  std::string queue_policy = "fifo";
  QueuePolicyConfig queue_config;
  std::string placement_policy = "default";
  PolicyConfig placement_config;
  PassOptions pass;
  // Where placement policies come from; null = BuiltinPlacementPolicies().
  const PlacementPolicyRegistry* placements = nullptr;
  // Where queue policies come from; null = BuiltinQueuePolicies() (the simulator passes
  // one whose policies wrap the built-in ones, sim/timed/resume_order.h).
  const QueuePolicyRegistry* queues = nullptr;
  // Ends the pending reason of a share that waits only for single-owner GPUs another
  // owner holds (explain.h); the controller names MPS and its switch.
  std::string single_owner_note = PendingExplainer::kSingleOwnerNote;
};

struct ProfileResult {
  // Indices are into PassContext::pending.
  std::vector<PassResult::Started> started;
  std::optional<size_t> reserved_index;  // under easy: who holds the reservation
  int64_t reservation_start_s = 0;       // and when it is planned to start
  // Why each pending job that did not start waits, in pending order: every refused one,
  // and (when Run was asked to explain) every admitted one but those in `not_reached`.
  std::vector<std::pair<size_t, std::string>> reasons;
  // When Run was asked to explain and the pass was capped: the admitted jobs it did not
  // reach (in pending order), which all wait with `not_reached_reason` (CappedReason's):
  // one string for what can be most of the queue, not one per job.
  std::vector<size_t> not_reached;
  std::string not_reached_reason;
  // With PassContext::plan_starts = N: the first N admitted jobs that did not start, in
  // queue order, with their planned starts (queue/start_plan.h); indices are into
  // PassContext::pending.
  std::vector<std::pair<size_t, PlannedStart>> planned_starts;
  // The pass stopped at PassOptions::max_starts before trying every admitted job (those
  // it did not reach wait with CappedReason's reason); the host runs another at once.
  bool capped = false;
};

// The pending reason of an admitted job a capped pass did not reach ("waiting for its
// turn", the queue class).
std::string CappedReason(size_t max_starts);

class SchedulingProfile {
 public:
  static Result<std::unique_ptr<SchedulingProfile>> Create(const ProfileSpec& spec);

  Result<ProfileResult> Run(ClusterState& cluster, const PassContext& ctx, bool explain = true);

  const QueuePolicy& queue_policy() const { return *queue_; }

 private:
  SchedulingProfile() = default;
  // Runs gates and filters' PreFilter over ctx.pending: fills `admitted` (pointers the pass
  // may use, narrowed copies where a filter narrowed the nodes) and `admitted_index`, and
  // the reasons of the refused.
  bool Narrow(const std::vector<std::string>& only, const QueuedJob** job, std::string* why);
  void Admit(const PassContext& ctx, std::vector<const QueuedJob*>* admitted,
             std::vector<size_t>* admitted_index, ProfileResult* result);
  void Explain(const ClusterState& cluster, const PassContext& ctx, const PassResult& pass,
               const std::vector<const QueuedJob*>& admitted,
               const std::vector<size_t>& admitted_index, ProfileResult* result) const;
  Status PlanStartTimes(const ClusterState& cluster, const PassContext& ctx, const PassResult& pass,
                        const std::vector<const QueuedJob*>& admitted,
                        const std::vector<size_t>& admitted_index, ProfileResult* result);

  ProfileSpec spec_;
  std::vector<std::unique_ptr<GatePlugin>> gates_;
  std::vector<std::unique_ptr<AdmissionFilter>> filters_;
  FitFilter fit_;
  std::unique_ptr<QueuePolicy> queue_;
  std::unique_ptr<PlacementPolicy> placement_;
  std::unique_ptr<SchedulingPass> pass_;
  PlanningPolicyMaker planner_;     // for EASY's and the start plan's private copies
  std::deque<QueuedJob> narrowed_;  // this pass's copies with narrowed nodes
  std::vector<const QueuedJob*> admitted_;
  std::vector<size_t> admitted_index_;  // admitted_[k] is PassContext::pending[admitted_index_[k]]
  std::vector<int32_t> closed_;         // this pass's closed nodes (AddClosedNodes), sorted
};

}  // namespace gpupool::sched
