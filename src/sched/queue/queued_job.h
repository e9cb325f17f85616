// QueuedJob and RunningJob: what queue policies and the scheduling pass see of a job.
//
// A job is one or more tasks placed all together or not at all (a gang). Times are
// seconds on the caller's clock (simulated or real); queue policies never read a clock.
// Value types, thread-compatible. A RunningJob points at its QueuedJob, which the caller
// owns and keeps alive while the RunningJob is in use.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/resources.h"
#include "sched/task.h"

namespace gpupool::sched {

// Planned end of a job that has neither a time limit nor an estimate.
inline constexpr int64_t kNoPlannedEnd = std::numeric_limits<int64_t>::max();

// What admission (admission/gates.h and filters.h) knows of a job beyond its tasks. The
// host fills it: the controller from its jobs, the simulator from its trace.
struct AdmissionFacts {
  // HoldGate: who holds the job (empty: not held), and whether an admin did.
  std::string held_by;
  bool held_by_admin = false;
  // DependencyGate: why the job's dependencies are unmet (empty: met or none). The host
  // resolves them (the controller reads ended jobs from its store).
  std::string waits_for;
  // EarlierAttemptGate: an earlier attempt of the job that a node still runs and is
  // being stopped there; attempt 0 = none. With stopping_until_s (epoch seconds; 0: not),
  // the node is cut off, and its lease stops the attempt by then (docs/health.md); a gang
  // cut off on several nodes names them all in stopping_node ("n1 and n2", as
  // stopping_nodes says), stopping_until_s the last of their leases.
  int32_t stopping_attempt = 0;
  std::string stopping_node;
  int32_t stopping_nodes = 1;
  int64_t stopping_until_s = 0;
  // HoldGate: how the job's user names it when that is not `id` (the controller's array
  // elements: ARRAY_INDEX, "582_2"); empty: `id`.
  std::string user_id;
  // ArrayThrottle: the array the job is an element of (empty: none) and how many of its
  // elements may run at once (0: no bound).
  std::string array_id;
  int32_t array_max_running = 0;
  // QuotaLimit: the GPUs the job holds or asks for, shares counting whole.
  int64_t gpus = 0;
  // EnvCompatFilter: the software environment the job's GPU tasks need (empty: none).
  std::string environment;
  // Why the job can never run on these nodes, found by the host while translating it
  // (no node has its GPU model); empty when it may.
  std::string unplaceable;
};

struct QueuedJob {
  std::string id;
  std::string user;
  std::string project;
  int32_t priority = 0;            // larger first under the `priority` policy
  int64_t submit_s = 0;            // when it entered the queue
  int64_t time_limit_s = 0;        // hard limit on run time; 0 = none
  int64_t runtime_estimate_s = 0;  // the user's or a predictor's guess; 0 = none
  std::vector<Task> tasks;         // at least one; a gang when more (none when unplaceable)
  AdmissionFacts admission;

  // Sum of every task's request.
  Resources Total() const;
  // The run time shortest-job-first sorts by: the estimate, else the time limit.
  std::optional<int64_t> SjfRuntime() const;
  // The run time a reservation may rely on: the time limit (the job cannot run longer),
  // else the estimate.
  std::optional<int64_t> PlanningRuntime() const;
};

struct RunningJob {
  const QueuedJob* job = nullptr;
  int64_t start_s = 0;
  std::vector<Placement> placements;  // one per job->tasks entry, same order

  // start + PlanningRuntime(), or kNoPlannedEnd.
  int64_t PlannedEnd() const;
};

// What a running job is charged (fair share, preemption's fair shares): its tasks' CPU
// and memory as asked, their GPU as placed on `cluster` (ClusterState::ChargedGpuMilli: a
// MIG instance by its weight, never less than the ask). Its request (Total) where its
// placements do not match its tasks.
Resources ChargedUse(const ClusterState& cluster, const RunningJob& run);

// Resources held for one waiting job (the GPUs its preemption's victims free, held for
// it against the other waiting jobs; docs/preemption.md). The caller allocates `tasks`
// on `placements` on the cluster before the pass, so no other job is placed there; the
// pass lets only the job `for_job` use them (SchedulingPass::Run).
struct HeldResources {
  std::string for_job;                // the QueuedJob::id they are held for
  std::vector<Task> tasks;            // placeholders, allocated on the cluster
  std::vector<Placement> placements;  // one per task
  // Where the job is to start (one per task of the job): tried first, then any
  // placement; may be empty.
  std::vector<Placement> planned;
  // For the start plan (start_plan.h), in seconds since the epoch; 0: unknown. The job
  // starts on `planned` by `ready_s` (when what it waits for is freed at the latest),
  // and the placeholders are freed by `expires_s` (when the hold ends, started or not).
  int64_t ready_s = 0;
  int64_t expires_s = 0;
};

}  // namespace gpupool::sched
