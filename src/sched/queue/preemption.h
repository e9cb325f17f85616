// Preemption: which running jobs to stop so that a waiting job can start (issue 28).
//
// The rule, in order:
//  1. Who may be a victim (PreemptionCandidates): a running job that is preemptible, has
//     run at least min_runtime_s, and either has a lower priority than the waiting job
//     (with priority_within_user, only a job of the waiting job's own user), or belongs to a group
//     (user, or project) holding more than its fair share of GPUs while the waiting job's group,
//     with the waiting job started, would hold no more than its own. A group's fair share is the
//     GPU capacity divided between the groups that have jobs running or waiting in proportion
//     to their weights (PreemptionOptions::weights; equally without), or, with
//     shares_by_demand, its weighted max-min share of the capacity by demand. With
//     starving_after_s, a waiting job that has waited that long counts as under its share.
//  2. Which victims (ChooseVictims): on a copy of the cluster, candidates are released
//     newest first (latest start; the larger id on ties) until the waiting job's gang
//     can be placed; then each chosen victim, oldest first, is put back if the gang still
//     places without it. So the set is small, made of the newest work (least lost), and
//     never more than needed; a gang is always taken whole. The waiting job's placement
//     comes from the same placement policy as any other start, so preemption does not
//     pick a worse-fragmenting placement than a normal start would.
//  3. Nothing is chosen when even all candidates released would not let the gang fit, nor
//     when it fits as things are (what keeps it waiting is then the queue's order or a
//     reservation, which preemption does not override).
//
// The live controller and the time-driven simulator (sim/timed) both call these.
// Pure functions over value types; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/placement_policy.h"
#include "sched/queue/queued_job.h"

namespace gpupool::sched {

struct PreemptionOptions {
  int64_t min_runtime_s = 600;  // a job that ran less is never a victim
  bool by_project = false;      // fair-share groups are projects, not users
  // Fair shares by demand (max-min, water-filling): a group's share is its demand (GPUs
  // running and waiting) when that is below an equal split, and the capacity the others
  // leave is split equally among the rest. false: capacity / groups with jobs.
  bool shares_by_demand = false;
  // A waiting job that has waited this long (since submission) counts as under its
  // group's share, whatever its group holds; 0 = off.
  int64_t starving_after_s = 0;
  // A higher priority preempts only the waiting job's user's own jobs: in the live pool
  // users choose their jobs' priorities (--priority), so across users it would let anyone
  // stop anyone's preemptible job. Between users only fair share preempts. false (the
  // simulator's traces, whose priorities are the site's): a higher priority takes from
  // anyone lower.
  bool priority_within_user = false;
  // Fair-share weight per group (the queue's QueuePolicyConfig::fair_weights): a group of
  // weight 2 is entitled to twice the share of a group of weight 1; groups not listed
  // weigh 1. Weights must be > 0.
  std::map<std::string, double, std::less<>> weights;
};

// The group's weight under options.weights: 1 for a group not listed.
double GroupWeight(const PreemptionOptions& options, std::string_view group);

// What a running job needs beyond RunningJob to be weighed.
struct PreemptibleRun {
  const RunningJob* run = nullptr;
  bool preemptible = false;
};

// The groups' GPU use (thousandths) from the running jobs, and how many groups have jobs
// running or waiting. With `cluster` (the running jobs' placements are its), a running
// job's use is what it is charged there (ChargedUse: a MIG instance by its weight, never
// less than the ask), to be weighed against cluster->TotalGpuWeightMilli() as
// `capacity_gpu_milli`; without, its request. A waiting job counts its request.
struct GroupUse {
  std::map<std::string, int64_t> gpu_milli;
  size_t active_groups = 0;
  int64_t capacity_gpu_milli = 0;
  // With PreemptionOptions::shares_by_demand or weights: each active group's share.
  // Without either every group's is FairShare(), the capacity split equally.
  std::map<std::string, int64_t> share_milli;
  int64_t FairShare() const;
  int64_t ShareOf(const std::string& group) const;
};
GroupUse UseOf(const std::vector<PreemptibleRun>& running,
               const std::vector<const QueuedJob*>& pending, int64_t capacity_gpu_milli,
               const PreemptionOptions& options, const ClusterState* cluster = nullptr);

// Rule 1: indices into `running` of the jobs `waiting` may preempt at `now_s`.
std::vector<size_t> PreemptionCandidates(const QueuedJob& waiting,
                                         const std::vector<PreemptibleRun>& running,
                                         const GroupUse& use, int64_t now_s,
                                         const PreemptionOptions& options);

struct Victims {
  std::vector<size_t> running;        // indices into the running list, newest first
  std::vector<Placement> placements;  // where the waiting job's gang goes once they stop
};

// Rules 2 and 3. `cluster` is the current state (not changed). Errors only from a policy
// bug (a refused placement).
Result<std::optional<Victims>> ChooseVictims(const ClusterState& cluster, const QueuedJob& waiting,
                                             const std::vector<PreemptibleRun>& running,
                                             const std::vector<size_t>& candidates,
                                             PlacementPolicy& policy);

}  // namespace gpupool::sched
