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
// tried again in the same pass; this keeps long queues cheap. Not thread-safe (the
// placement policy is not).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/placement_policy.h"
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
};

struct PassResult {
  struct Started {
    size_t pending_index = 0;           // into the `pending` span given to Run
    std::vector<Placement> placements;  // one per task
  };
  std::vector<Started> started;  // in the order they were started
  // Under easy: the job holding the reservation and its planned start.
  std::optional<size_t> reserved_index;
  int64_t reservation_start_s = 0;
  // Under easy: the first blocked job could get no reservation because the jobs in its
  // way have no time limit or estimate; the pass then behaved as strict.
  bool reservation_unplannable = false;
};

class SchedulingPass {
 public:
  // The policies are borrowed and must outlive the pass. `make_planning_policy` is
  // needed only under easy.
  SchedulingPass(const QueuePolicy& queue_policy, PlacementPolicy& placement_policy,
                 PlanningPolicyMaker make_planning_policy, PassOptions options);

  Result<PassResult> Run(ClusterState& cluster, int64_t now_s,
                         std::span<const QueuedJob* const> pending,
                         std::span<const RunningJob> running);

 private:
  const QueuePolicy& queue_policy_;
  PlacementPolicy& placement_policy_;
  PlanningPolicyMaker make_planning_policy_;
  PassOptions options_;
};

}  // namespace gpupool::sched
