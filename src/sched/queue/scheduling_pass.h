// SchedulingPass: one round of "which pending jobs start now, and where".
//
// It asks the queue policy for an order, then walks it, placing each job's gang through
// the placement policy (gang_placement.h). What happens at the first job that cannot
// start is the start rule:
//   strict  - nothing behind it starts (no job overtakes a blocked one);
//   easy    - EASY backfill: it gets a reservation at the earliest planned time enough
//             resources free up (easy_backfill.h); later jobs start now only if they fit
//             now and do not delay that reservation;
//   skip    - every job that fits starts, in order; blocked jobs simply wait (may
//             starve big jobs; what Kubernetes does).
// Started jobs are allocated on the cluster passed to Run. The pass reads no clock.
//
// Within one pass the cluster only fills up, so a job shape that failed to place is not
// tried again in the same pass; this keeps long queues cheap. Across passes, the shape
// of a one-task job that failed is not tried in the next pass either unless something
// it could use was freed: the pass compares the cluster it is given with the one the
// last pass ended with, node by node (free CPU, memory, each GPU's free share and owner,
// and what the node is), and tries such a shape again only when a node has more of
// anything (or is new or different) and the task fits there now. Its first job in the
// order is then treated exactly as if its placement had failed (it may hold the
// reservation); a failed one-task placement means no node fits it, so with nothing
// freed it would fail again. Not thread-safe (the placement policy is not).
//
// A pass may be capped (PassOptions::max_starts, Slurm's sched_max_job_start): once it
// has started that many jobs it stops before the next job of its order, and says which
// jobs it did not reach. What a capped pass starts is always the first max_starts of
// what the same pass uncapped would start, in the same order (the walk is the same up to
// the cap), and a reservation is only given when the walk reached the blocked job before
// the cap; the host runs the next pass at once for the rest. Under easy, the jobs a capped pass
// refused because they would delay the reservation are refused again by the next pass
// when that pass plans the same reservation (same head job, start and placements), as
// the uncapped pass would not have tried them again: so capped passes in a row start
// what one uncapped pass starts (a refused job placed elsewhere on a fuller cluster
// could otherwise be backfilled by the next pass).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/placement_policy.h"
#include "sched/queue/easy_backfill.h"
#include "sched/queue/queue_policy.h"
#include "sched/queue/queued_job.h"

namespace gpupool::sched {

enum class StartRule { kStrict, kEasyBackfill, kSkipBlocked };

std::string_view StartRuleName(StartRule rule);  // "strict", "easy", "skip"
Result<StartRule> ParseStartRule(std::string_view name);

// Creates a fresh placement policy for planning on private copies of the cluster.
using PlanningPolicyMaker = std::function<Result<std::unique_ptr<PlacementPolicy>>()>;

struct PassOptions {
  StartRule rule = StartRule::kStrict;
  // Under easy and skip: at most this many jobs are tried after the first blocked one
  // (like Slurm's bf_max_job_test); 0 = all.
  size_t max_backfill_tries = 0;
  // At most this many jobs start in one pass; 0 = no bound.
  size_t max_starts = 0;
};

struct PassResult {
  struct Started {
    size_t pending_index = 0;           // into the `pending` span given to Run
    std::vector<Placement> placements;  // one per task
  };
  std::vector<Started> started;  // in the order they were started
  // Under easy: the job holding the reservation and its planned start (0 when unknown).
  std::optional<size_t> reserved_index;
  int64_t reservation_start_s = 0;
  // Under easy: the reservation's start is unknown, as jobs in its way have no time limit
  // or estimate (later jobs started only off its resources; ReservationPlan).
  bool reservation_unplannable = false;
  // The pass stopped at max_starts: the jobs of its order it did not try (indices into
  // `pending`: the one it stopped at, then the others in index order, as the rest of the
  // order is not made; QueuePolicy::Lazy). Empty when it was not capped.
  bool capped = false;
  std::vector<size_t> not_reached;
};

class SchedulingPass {
 public:
  // The policies are borrowed and must outlive the pass. `make_planning_policy` is
  // needed only under easy.
  SchedulingPass(const QueuePolicy& queue_policy, PlacementPolicy& placement_policy,
                 PlanningPolicyMaker make_planning_policy, PassOptions options);

  // `held`: resources held for some of the pending jobs (HeldResources), allocated on
  // `cluster` by the caller. Those jobs are tried first, whatever the order and the start
  // rule: each on its planned placement with what is held for it released, else
  // anywhere it fits; one that starts leaves its held resources free (its own start
  // allocated instead), one that does not keeps them held, and under easy its
  // reservation is planned with them as its own. No other job is placed on them.
  // `closed`: the sorted indices of nodes that take no new work (draining; their free
  // resources taken on `cluster` by the caller): under easy, what runs there never comes
  // free for a reservation (ReservationPlan).
  Result<PassResult> Run(ClusterState& cluster, int64_t now_s,
                         std::span<const QueuedJob* const> pending,
                         std::span<const RunningJob> running,
                         std::span<const HeldResources> held = {},
                         std::span<const int32_t> closed = {});

 private:
  // Under easy, after a capped pass with a reservation: that reservation and the ids of
  // the jobs the pass refused for it.
  struct CarriedRefusals {
    std::string head;
    int64_t start_s = 0;
    std::vector<Placement> placements;
    std::unordered_set<std::string> refused;
  };

  // Under easy, the reservation of `job`, the first that cannot start, given what runs and
  // what the pass started (`own`: what is held for it, its own there). Null when none:
  // with *ever false when it would not fit even with every running job gone.
  Result<std::unique_ptr<ReservationPlan>> PlanReservation(
      ClusterState& cluster, int64_t now_s, std::span<const QueuedJob* const> pending,
      std::span<const RunningJob> running, const PassResult& result, const QueuedJob& job,
      const HeldResources* own, std::span<const int32_t> closed, bool* ever);
  // Tries the jobs `held` is for (see Run): fills `hold_of` (by pending index) and
  // `started_first`, and adds their starts to `result`.
  Status StartHeldFirst(ClusterState& cluster, std::span<const QueuedJob* const> pending,
                        std::span<const HeldResources> held,
                        std::vector<const HeldResources*>* hold_of,
                        std::vector<bool>* started_first, PassResult* result);
  // The one-task shapes that failed to place in the last pass, and the cluster it ended
  // with (per node what Fits reads).
  struct NodeFree {
    std::string name;
    int64_t cpu_free = 0, memory_free = 0, cpu_capacity = 0, memory_capacity = 0;
    int32_t model_id = -1, capability = 0;
    int64_t gpu_memory_mib = 0;
    uint64_t single_owner = 0, whole_only = 0;
    std::vector<int32_t> gpu_free;
    std::vector<int64_t> owners;  // of single-owner GPUs
  };
  struct CarriedFailures {
    std::vector<Task> tasks;  // one per shape
    std::vector<NodeFree> nodes;
  };
  Result<PassResult> Walk(ClusterState& cluster, int64_t now_s,
                          std::span<const QueuedJob* const> pending,
                          std::span<const RunningJob> running, std::span<const HeldResources> held,
                          std::span<const int32_t> closed, std::vector<Task>* carried_shapes,
                          std::vector<Task>* failed_now);
  // The carried shapes that still cannot fit: no node of `cluster` has more than at the
  // end of the last pass where one of them fits now.
  std::vector<Task> StillFailing(const ClusterState& cluster) const;
  void Remember(const ClusterState& cluster, std::vector<Task> failed);

  const QueuePolicy& queue_policy_;
  PlacementPolicy& placement_policy_;
  PlanningPolicyMaker make_planning_policy_;
  PassOptions options_;
  std::optional<CarriedRefusals> carried_;
  CarriedFailures failures_;
};

}  // namespace gpupool::sched
