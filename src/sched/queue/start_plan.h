// PlanStarts: when each pending job is expected to start (`gpupool queue --start`, as
// Slurm's squeue --start), from the planned ends of the jobs that hold resources.
//
// The jobs are planned one after another in queue order on a copy of the cluster, each
// the way EASY backfill reserves for its head job (easy_backfill.h): the jobs in the plan
// are released in order of planned end (start + time limit, else estimate) until the job
// fits, and that time is its planned start; it then holds what it was given there until
// its own planned end. A job starts in the plan no earlier than the one before it (a plan
// without backfill): a backfilled job may start sooner, and a job that ends early brings
// the rest forward. A job with no time limit and no estimate holds its resources forever
// in the plan; a job that fits only once such a job ends gets no start, with the reason,
// and the jobs after it are planned without it.
//
// Resources held for a waiting job (HeldResources, the live pool's preemptors): that job
// starts at its hold's ready_s (now if that has passed), on its held placement, out of
// the queue's order (the pass tries it first); the placeholders are freed for the other
// jobs at the hold's expires_s. A hold without those times holds its placeholders for
// ever, and its job is planned as any other.
//
// Pure over its inputs; not thread-safe (the policies it makes are its own).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/queue/queued_job.h"
#include "sched/queue/scheduling_pass.h"

namespace gpupool::sched {

struct PlannedStart {
  int64_t start_s = 0;  // the planned start (>= now); 0 when none
  std::string why;      // when none: why not
};

// One entry per job of `queue` (pending jobs, in queue order). `cluster` holds every job
// of `running` (with its start); it is not changed: the plan is made on one copy of it,
// with one placement policy from `make_policy` (one that has seen no other cluster).
// `held`: resources held for pending jobs, their placeholders allocated on `cluster`.
// `closed`: sorted indices of nodes that take no new work (draining): what runs there
// never comes free in the plan (ReleaseGangOutside).
Result<std::vector<PlannedStart>> PlanStarts(const ClusterState& cluster, int64_t now_s,
                                             std::span<const RunningJob> running,
                                             std::span<const QueuedJob* const> queue,
                                             const PlanningPolicyMaker& make_policy,
                                             std::span<const HeldResources> held = {},
                                             std::span<const int32_t> closed = {});

}  // namespace gpupool::sched
