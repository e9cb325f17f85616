// The job lifecycle: one pure function from (job, event, time) to the job's next state
// and what must happen because of it, after etcd raft's Step and Nomad's FSM. Every
// change of a job's state goes through Step: placement, a task's start, end or loss, a
// lost node, an agent that forgot a task, cancel, hold and release, a dependency that
// can never be met, the end of a `gpupool run` command, a `run` client that never
// came, a preemption and its checkpoint's end. The controller finds the job, calls
// Step, commits the transition to the store (compare-and-set on the state it expected)
// and carries out the effects; it decides no outcome itself.
//
// Gang rules live here: the first task that fails stops the others; an --mpi job ends
// when task 0 (mpirun) does; a `gpupool run` job's outcome is its command's; a --requeue
// job whose node is lost, one whose node is lost before any agent had its launch, and a
// preempted job once its tasks have ended, go back to the queue as a new attempt.
//
// Pure: no I/O, no clock (now_us is given), no locks; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/status.h"
#include "jobs/job.h"
#include "protocol/kill_cause.h"

namespace gpupool::controller::lifecycle {

// The scheduler placed a pending job: a new attempt starts. `hosts[t]` is the address
// task t's peers reach it at (its node's advertised address).
struct Placed {
  std::vector<jobs::TaskPlacement> placement;
  std::vector<std::string> hosts;
};
// A node's agent reports that task `task` of attempt `attempt` runs (or ran) there.
struct TaskStarted {
  std::string node;
  int task = 0;
  int attempt = 0;
  int64_t time_us = 0;
  std::string stdout_path;
  std::string stderr_path;
  int master_port = 0;  // task 0: the rendezvous port its agent picked
};
// ... that it ended, or could not be started.
struct TaskExited {
  std::string node;
  int task = 0;
  int attempt = 0;
  int64_t time_us = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool cancelled = false;
  bool timed_out = false;
  std::string reason;
  std::string stdout_path;
  std::string stderr_path;
  // Why it was killed and those words without the signal (protocol::Event's fields);
  // nullopt from an agent older than them, whose `reason` is read instead.
  std::optional<protocol::KillCause> kill_cause;
  std::string kill_detail;
};
// ... that its supervisor vanished without recording an end.
struct TaskLost {
  std::string node;
  int task = 0;
  int attempt = 0;
  std::string reason;  // empty: "task T (node N) was lost on N"
  // The node could not start the task, by a fault of its own (protocol::Event): nothing
  // of it ran, so the job goes back to the queue whether or not it asked for --requeue,
  // at most kMaxLaunchFailures times.
  bool not_started = false;
};
// How many times nodes may fail to start a job (TaskLost::not_started) before it is
// lost like any other job instead of requeued.
inline constexpr int kMaxLaunchFailures = 5;
// `node` stopped answering (or went down while the job was being placed on it).
// `lease_until_us` (0: none): when the node's lease runs out, by which its supervisors
// have stopped the tasks of a job its loss requeues (jobs::FencedOnLoss); such a job,
// requeued with a task of it there not known to have ended, waits until then
// (Job::fences: Placed is refused before it) unless FenceLifted comes first. The job's
// other nodes with such a task are kept in Job::fences too: if one of them is lost
// before the next attempt is placed (the job PENDING), the job waits for its lease as
// well, each lost node's wait ending on its own.
//
// `never_launched`: the controller knows that no poll answer of any agent carried a launch
// order of the job's current attempt (it placed the attempt itself and has handed out
// none since; after a restart it cannot know: false). Nothing of it can run: an ASSIGNED
// job none of whose tasks started or ended goes back to the queue, --requeue or not,
// with no earlier attempt recorded and no launch failure counted (docs/health.md).
struct NodeLost {
  std::string node;
  std::string reason;
  int64_t lease_until_us = 0;
  bool never_launched = false;
};
// `node`'s agent registered again: it listed what it still runs (the controller stops
// those strays before the job starts again), so the job waits for its lease no more; or
// its lease ran out. It ends the wait for that node only (Job::fences): the job is
// placed once no lost node is left.
struct FenceLifted {
  std::string node;
};
// `node`'s agent registered again without the job's task among what it runs or ended.
struct AgentForgot {
  std::string node;
};
// A user (or admin) cancels the job.
struct CancelRequested {
  std::string by;
};
// `gpupool hold` / `release`. `admin`: the caller is an admin acting on another user's
// job (such a hold is released by admins only).
struct Hold {
  std::string by;
  bool admin = false;
};
struct Release {
  std::string by;
  bool admin = false;
};
// One of the job's dependencies ended in a way that can never satisfy it.
struct DependencyFailed {
  std::string why;  // "job 3 ended FAILED, and --after-ok needs it to succeed"
};
// The command of a `gpupool run` job ended (or could not start, or was hung up).
struct CommandEnded {
  int attempt = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string error;  // it could not run
  bool hung_up = false;
  std::string hangup_reason;
};
// A `gpupool run` job's client did not attach within `timeout_s` of its start; with
// `alloc`, a `gpupool alloc` job's client said nothing for `timeout_s` (POST
// /v1/jobs/ID/alive): the allocation is released, or, while it waits, the request is
// withdrawn (it ends CANCELLED).
struct ClientAbsent {
  int64_t timeout_s = 0;
  bool alloc = false;
};

// The controller's backstop for a job's time limit (--time): the job runs `grace_s` past
// its limit and its node has not ended it (the node's shim enforces the limit; its agent
// may be cut off, or its supervisor gone). Its tasks are told to stop and it ends TIMEOUT.
// Nothing for a job without a limit, not yet running, within it, or already stopping.
struct TimeLimit {
  int64_t grace_s = 0;
};

// A GPU the job holds failed (issue 29, gpu/health_policy.h: a reset- or reboot-class
// Xid on it): the job ends FAILED with the reason, or goes back to the queue with
// --requeue; its tasks everywhere are stopped. Nothing for a job not holding that GPU.
struct GpuFailed {
  std::string node;
  std::string gpu_uuid;
  std::string reason;
  // The GPU's MIG instances (docs/sharing.md): a job holding one of them is on the GPU.
  std::vector<std::string> mig_uuids;
};

// The scheduler chose the job as a victim of preemption (issue 28, sched/queue/
// preemption.h) for job `by_job`: its tasks are told to stop with a grace period of
// `grace_s` ending at `deadline_s` (epoch seconds); it keeps its resources until they
// have ended, then goes back to the queue as a new attempt, whatever their outcome.
// FailedPrecondition for a job that is not preemptible; nothing for one not placed or
// already stopping.
struct Preempt {
  int64_t by_job = 0;
  std::string why;  // "of higher priority (10 > 0)"
  int64_t grace_s = 0;
  int64_t deadline_s = 0;
  std::string by_name;  // by_job as its user names it (UserJobId); empty: its id
};
// The preempted job's user says it has checkpointed (`gpupool checkpoint-done`): its
// grace ends now (a stop order without grace). With `task`, in a job of several tasks,
// only that task's grace ends (a stop order without grace for it alone), as its exit
// would end it; the job's once every task has ended or said it
// (job_lifecycle_checkpoint.h). FailedPrecondition for a job not being preempted;
// InvalidArgument naming `task` for an index the job does not have.
struct CheckpointDone {
  std::string by;
  // The task that says it (the client run inside it); nullopt: the whole job (said from
  // outside it, or by a client older than the field).
  std::optional<int> task;
};

using Event =
    std::variant<Placed, TaskStarted, TaskExited, TaskLost, NodeLost, AgentForgot, CancelRequested,
                 Hold, Release, DependencyFailed, CommandEnded, ClientAbsent, TimeLimit, GpuFailed,
                 Preempt, CheckpointDone, FenceLifted>;

// "Placed", "TaskStarted", ...: for logs and the table test.
std::string_view EventName(const Event& e);

// A stop order for whatever of the job's `attempt` may still run on `node`.
struct StrayStop {
  std::string node;
  int attempt = 0;
  // The controller's record says a task of it started there and did not end: it runs
  // there unless the node is down (the controller checks that).
  bool started_there = false;
  // The GPUs the attempt's tasks hold there (by UUID): used until its end is reported.
  std::vector<std::string> gpu_uuids;
};

struct Effects {
  bool ended = false;          // the job is final now: it leaves the active jobs
  bool freed = false;          // it held resources and holds none now: plan again at once
  bool requeued = false;       // it went back to the queue (a new attempt will be placed)
  bool queue_changed = false;  // a pending job may start now (released): an arrival pass
  bool resend_stop = false;    // stop orders for its tasks go out at the next poll of each node
  // Tasks whose own grace ended (checkpoint-done said inside them): the stop order without
  // grace for each (internal::StopOrders) goes out at the next poll of its node.
  std::vector<int> stop_tasks;
  bool notify_nodes = false;            // agents' polls may have new work (launches, stops)
  bool notify_exec = false;             // exec clients waiting on the job's tasks look again
  bool stop_execs = false;              // exec sessions in the job end with it
  bool pending_reason_changed = false;  // next.pending_reason replaces the one shown
  bool preempting = false;              // a preemption began: its tasks are being stopped
  double preempted_gpu_hours = -1;      // >= 0: a preempted attempt ended and was requeued
  // The GPU-hours an ended job's record gained from a lost attempt's end reported late
  // (job_lifecycle_late.h): charged to its user and project on top of what its end was.
  double late_gpu_hours = 0;
  std::vector<StrayStop> strays;  // tasks that may outlive the job's record
  std::string log;                // one line for the log, when worth one
  bool log_warning = false;       // ... at warning level
  // A time the node reported that was kept bounded (BoundNodeTime): one line, at warning
  // level, with the node, job, task and the reported and kept times.
  std::string node_time_log;
};

struct Transition {
  bool changed = false;  // false: nothing to write (a resent event, a stale attempt)
  jobs::Job next;
  jobs::JobState expected = jobs::JobState::kPending;  // the state it was in, for the CAS
  Effects effects;
};

// The steps' two outcomes (job_lifecycle*.cc): nothing to write; or `next`, written if
// `job` is still in its state.
inline Transition Unchanged(const jobs::Job& job) {
  Transition t;
  t.next = job;
  t.expected = job.state;
  return t;
}
inline Transition Changed(const jobs::Job& job, jobs::Job next) {
  Transition t;
  t.changed = true;
  t.next = std::move(next);
  t.expected = job.state;
  return t;
}

// What `event` does to `job` at `now_us`. FailedPrecondition (naming the job, its state
// and what can be done) for an event the job's state refuses, as a user's request on
// an ended or running job; PermissionDenied for a release of an admin's hold by a
// non-admin. An event that no longer applies (resent, for another attempt or node,
// about a task that already ended) is not an error: changed = false.
Result<Transition> Step(const jobs::Job& job, const Event& event, int64_t now_us);

// The times a node's agent reports for its tasks are hostile input (docs/security.md,
// "Times a node reports"): a compromised or buggy agent could otherwise charge the job's
// user any GPU-hours or push its time limit's deadline past int64. Step keeps a task's
// start inside [AttemptFloorUs(job), now_us] and its end inside [its kept start (the
// floor if it never started), now_us]; a time inside is kept as sent, so an agent whose
// clock is a few seconds off still works.
//
// The earliest a task of the job's current attempt can have started: the attempt's
// placement (Job::placed_time_us, set by Placed), else, for a job stored before that was
// kept, its submit time or the end of its last earlier attempt (requeued), the latest of
// these. At least 1 (a kept start of 0 would mark the task unstarted).
int64_t AttemptFloorUs(const jobs::Job& job);
// `reported_us` bounded to [floor_us, now_us]; a floor past now_us is now_us.
int64_t BoundNodeTime(int64_t reported_us, int64_t floor_us, int64_t now_us);
// How far a kept time may be from the reported one without a warning: an agent's clock a
// little ahead of the controller's, or a report on its way.
inline constexpr int64_t kNodeTimeSlackUs = 1'000'000;
// The moment a running job passes its time limit and `grace_s` more: its start plus
// both, saturating at INT64_MAX (never past it, whatever the stored start).
int64_t TimeLimitDeadlineUs(const jobs::Job& job, int64_t grace_s);

// Fills the per-task records of a job placed before they existed (an older store).
void NormalizeTasks(jobs::Job& job);

// Why a held job waits: "held by alice: `gpupool release 12` lets it start".
std::string HeldReason(const jobs::Job& job);

// How its user names a job: "582_2" for element 2 of array 582 (its id in the store,
// which users do not see, may be 584), else its id.
std::string UserJobId(const jobs::Job& job);

}  // namespace gpupool::controller::lifecycle
