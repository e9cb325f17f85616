// ReservationPlan: the reservation EASY backfill gives the first job that cannot start.
//
// The plan walks the running jobs in order of planned end (start + time limit, else
// start + estimate), releasing each from a copy of the cluster, until the head job's
// gang can be placed there: that time is the reservation's start, and the resources the
// placement policy chose there are the reserved ones. A later job may then start now
// only if it is planned to end by the reservation's start, or if its resources are
// still free in the planned cluster beside the reservation (Admit), so a backfilled job
// never delays the head job's planned start. Jobs without a time limit or an estimate
// are assumed to run forever: where the head fits only once some of them have ended, its
// reservation's start is unknown (start_s() is kNoPlannedEnd) and its resources are
// those it gets once they are gone (the oldest gone first); a later job may then start
// now only off them, whatever its end, so that nothing keeps the head from its turn
// and nothing but the head waits for those jobs (before, the pass stopped there, as
// under strict, and one such head held every later job in the pool back).
//
// A running job's resources on a closed node (one that takes no new work: draining) never
// come free in the plan: the head is not promised what it cannot be given, and later jobs
// are not kept off resources for it there.
//
// The plan holds its own copy of the cluster; not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/placement_policy.h"
#include "sched/queue/queued_job.h"

namespace gpupool::sched {

class ReservationPlan {
 public:
  // Plans the reservation for `head`, given the cluster now and every job running on it
  // (including any started earlier in the same pass). Returns null when the head job
  // cannot fit even after every running job has ended. `policy` is used on a
  // private copy of the cluster only; give it an instance that has not seen other
  // clusters (policies may cache by node version, which copies share). `closed`: the
  // closed nodes' indices, sorted.
  static Result<std::unique_ptr<ReservationPlan>> Make(const ClusterState& cluster, int64_t now_s,
                                                       std::span<const RunningJob> running,
                                                       const QueuedJob& head,
                                                       PlacementPolicy& policy,
                                                       std::span<const int32_t> closed = {});

  int64_t start_s() const { return start_s_; }
  const std::vector<Placement>& head_placements() const { return head_placements_; }

  // Whether starting `job` now with `placements` keeps the reservation: true when it is
  // planned to end by start_s() (a known one), or when its placements are free in the planned
  // cluster beside the reservation, in which case they are recorded there so that later candidates
  // see them.
  Result<bool> Admit(const QueuedJob& job, const std::vector<Placement>& placements,
                     int64_t planned_end_s);

 private:
  ReservationPlan(int64_t start_s, ClusterState future, std::vector<Placement> head)
      : start_s_(start_s), future_(std::move(future)), head_placements_(std::move(head)) {}

  int64_t start_s_ = 0;
  ClusterState future_;  // the cluster as planned at start_s_, reservation included
  std::vector<Placement> head_placements_;
};

}  // namespace gpupool::sched
