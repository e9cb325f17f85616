// The time-driven experiment: jobs arrive at their submission times, wait in a queue,
// run for their durations and leave; the scheduling profile the live scheduler runs
// (sched/admission/profile.h: the admission gates - holds, array throttles, limits -
// then a queue policy, a start rule and a placement policy, all from their registries,
// plus gang placement) decides who starts where. Time is simulated seconds; the wall
// clock is never read, so the same inputs and seed give the same output on every machine.
//
// Events at one instant are handled in this order: completions (resources free up),
// arrivals (jobs join the queue), releases of held jobs, then one scheduling pass. A job
// runs for its duration, or until its time limit if that is shorter (it then counts as
// timed out). A job that could not be placed even on the idle cluster is never queued and
// counts as never fitting; one that waits for ever (a limit below its size) never starts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/admission/limits.h"
#include "sched/cluster_state.h"
#include "sched/policy_registry.h"
#include "sched/queue/preemption.h"
#include "sched/queue/queue_policy.h"
#include "sched/queue/scheduling_pass.h"
#include "sim/timed/gpu_failures.h"
#include "sim/timed/resume_order.h"
#include "sim/timed/trace_job.h"

namespace gpupool::sim {

struct TimedOptions {
  std::string queue_policy = "fifo";
  // A trace's priorities are the site's, so they order every job (as they preempt any
  // lower job, PreemptionOptions::priority_within_user false); the live pool's, users'
  // own choices, order only their user's jobs.
  sched::QueuePolicyConfig queue_config = {.priority_across_users = true};
  sched::StartRule start_rule = sched::StartRule::kStrict;
  size_t max_backfill_tries = 0;  // see PassOptions
  std::string placement_policy = "default";
  // Seeds the placement policy and the node scan order (which breaks ties).
  uint64_t seed = 42;
  bool shuffle_nodes = true;
  // Called now and then with (jobs done, jobs in total); may be empty.
  std::function<void(size_t, size_t)> progress;
  // Where placement and queue policies come from; null = the built-in registries.
  const sched::PlacementPolicyRegistry* placement_registry = nullptr;
  // Per-user and per-project limits on GPUs and jobs running (the QuotaLimit gate), as
  // `gpupool limits` sets them on a live pool; max_queued does not apply here.
  sched::Limits limits;
  // Preemption (sched/queue/preemption.h; `gpupool sim timed --preemption`): every trace
  // job is preemptible. After each pass, waiting jobs (in arrival order, at most
  // max_preemptions_per_instant of them) that the rule lets preempt start at once in the
  // victims' place; the victims go back to the queue, keeping their submission time. The
  // grace period is not modelled (the waiting job starts at once). A victim keeps the
  // work of its last checkpoint (every checkpoint_interval_s of run time; 0 = none: it
  // starts over) and loses the rest.
  bool preemption = false;
  sched::PreemptionOptions preempt;
  int64_t checkpoint_interval_s = 0;  // also what a job ended by a GPU failure keeps
  size_t max_preemptions_per_instant = 4;
  // Experiments (docs/sim.md; off by default, the live pool has neither). service_order:
  // with the fair queue, groups go least served first by their service ratio so far
  // (group_service.h; sched::QueuePolicyConfig::fair_service). service_preemption: the
  // waiting jobs weighed for preemption are those of the least-served groups first, and
  // a waiting job's candidates are, besides lower-priority jobs, the jobs of every other
  // group that is better served than its own and holds more than its fair share of GPUs
  // (whatever its own group holds), by more than service_gap (a margin against
  // preempting back and forth).
  // service_by_attainment: "served" is measured by fair-share attainment so far
  // (group_shares.h: GPU-seconds received / entitled by max-min share) instead of the
  // service ratio; service_gap is then a gap in attainment.
  bool service_order = false;
  bool service_preemption = false;
  bool service_by_attainment = false;
  double service_gap = 0;
  // Experiments that keep some candidates from being victims, to protect the delay tail
  // (docs/sim.md; the live pool has neither). victim_wait_budget_s > 0: a running job whose
  // queueing delay so far (every wait before its current run) is above it is no victim;
  // victim_max_preemptions > 0: nor one already preempted that many times. The rest are
  // chosen as ever (sched::ChooseVictims: the newest first, the fewest).
  int64_t victim_wait_budget_s = 0;
  int32_t victim_max_preemptions = 0;
  // Where a victim re-enters the queue's order (resume_order.h; an experiment, the live
  // pool requeues as kQueue does): back at its place by the policy's keys (kQueue), ahead
  // of every job never preempted (kFirst; kFirstUnderShare: only while its group, with it
  // started, holds at most an equal share of the GPUs), or at its place with a
  // shortest-first key shortened by the work its checkpoints kept (kRemaining).
  PreemptResume preempt_resume = PreemptResume::kQueue;
  // GPU failures (gpu_failures.h; `--gpu-failure-rate`, `--gpu-failure-events`): each
  // Xid goes through the live health policy. An application Xid fails the job on its GPU;
  // a cordon ends the jobs on the GPU (they fail, or requeue with gpu_failures.requeue
  // or the trace job's requeue flag) and takes the GPU, or its node, out of service
  // until gpu_failures.repair_s later.
  GpuFailureOptions gpu_failures;
};

enum class JobFate {
  kFinished,      // ran for its whole duration
  kTimedOut,      // stopped at its time limit
  kNeverFits,     // no placement exists even on the idle cluster
  kNeverStarted,  // still queued when nothing else could happen (should not occur)
  kGpuFailed,     // ended by a GPU failure (not requeued)
};
std::string_view JobFateName(JobFate fate);

struct JobRecord {
  std::string id;
  std::string user;
  std::string project;
  int64_t submit_s = 0;  // relative to TimedRun::origin_s
  int64_t start_s = -1;  // -1 when it never started
  int64_t end_s = -1;
  int64_t duration_s = 0;  // as in the trace
  int64_t gpu_milli = 0;   // total over its tasks
  int32_t num_tasks = 0;
  JobFate fate = JobFate::kNeverStarted;
  std::string reason;  // why it never fit, or the GPU failure that ended it
  // Time spent waiting in the queue, over every attempt (-1: not tracked, start - submit).
  int64_t waited_s = -1;
  int32_t preemptions = 0;   // times it was preempted
  int64_t lost_s = 0;        // run time lost to preemptions and GPU failures (work after the
                             // last checkpoint)
  int32_t gpu_failures = 0;  // times a GPU failure ended a run of it
};

// The allocation just after the events of one instant, when it changed.
struct AllocationPoint {
  int64_t time_s = 0;
  int64_t gpu_milli_used = 0;
  int64_t running_jobs = 0;
  int64_t pending_jobs = 0;
};

// A group's GPU-seconds over the run against its max-min fair share (group_shares.h).
struct GroupShareTotals {
  double received_gpu_s = 0;
  double entitled_gpu_s = 0;
};

struct TimedRun {
  int64_t origin_s = 0;  // the first submission in trace time; all times are relative
  sched::Resources capacity;
  std::vector<JobRecord> jobs;            // in trace order
  std::vector<AllocationPoint> timeline;  // a step function, one point per change
  size_t passes = 0;                      // scheduling passes run
  size_t reservations = 0;                // EASY reservations made
  bool preemption = false;                // TimedOptions::preemption was on
  size_t preemptions = 0;                 // victims stopped, over the run
  double preempted_gpu_s = 0;             // GPU-seconds of work they lost
  // GPU failures (TimedOptions::gpu_failures enabled):
  bool gpu_failures = false;
  std::map<std::string, size_t> gpu_failure_events;  // by the policy's action
  size_t failed_jobs_by_gpu_failure = 0;
  size_t requeues_by_gpu_failure = 0;
  double gpu_failure_lost_gpu_s = 0;  // work lost (since the last checkpoint) x GPUs
  double out_of_service_gpu_s = 0;    // GPUs out of service x time, over the run
  // Fair-share attainment (group_shares.h), by the fair-share group (user or project).
  std::map<std::string, GroupShareTotals> group_shares;
  double share_jain_mean = 1;  // Jain's index at each moment, averaged over busy time
};

// Runs the experiment. `cluster` should be idle; it is copied. Errors: unknown policy
// names, invalid jobs (the message names the job), or a policy bug.
Result<TimedRun> RunTimedExperiment(const sched::ClusterState& cluster,
                                    const std::vector<TraceJob>& jobs, const TimedOptions& options);

}  // namespace gpupool::sim
