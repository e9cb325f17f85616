#include "controller/job_lifecycle.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>

#include "controller/job_lifecycle_checkpoint.h"
#include "controller/job_lifecycle_fences.h"
#include "controller/job_lifecycle_late.h"
#include "controller/job_words.h"

namespace gpupool::controller::lifecycle {
namespace {

using jobs::Job;
using jobs::JobState;
using words::SignalText;
using words::TaskName;
using words::TaskOutcome;

constexpr std::string_view kRequeuedPrefix = "requeued: ";  // a requeued job's reason

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

using jobs::Occupies;
using jobs::OnNode;

// The store id, for logs; what its user reads names the job as they do (UserJobId).
std::string Id(const Job& job) { return std::to_string(job.id); }
std::string StateOf(const Job& job) { return std::string(jobs::JobStateName(job.state)); }

// a + b, at INT64_MAX or INT64_MIN where it would overflow.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
}

// The line BoundNodeTime's change of a reported time is logged with, or "" when the kept
// time is within kNodeTimeSlackUs of the reported one.
std::string NodeTimeLog(const Job& job, const std::string& node, int task, const char* what,
                        int64_t reported_us, int64_t kept_us) {
  // The distance, exact in unsigned arithmetic whatever the two are.
  const uint64_t off = reported_us > kept_us
                           ? static_cast<uint64_t>(reported_us) - static_cast<uint64_t>(kept_us)
                           : static_cast<uint64_t>(kept_us) - static_cast<uint64_t>(reported_us);
  if (off <= static_cast<uint64_t>(kNodeTimeSlackUs)) return "";
  return "job " + Id(job) + " task " + std::to_string(task) + ": node " + node + " reported its " +
         what + " at " + std::to_string(reported_us) + " us; kept " + std::to_string(kept_us) +
         " us (" + (reported_us > kept_us ? "after" : "before") +
         " what the controller allows: a task runs between its attempt's placement and now)";
}
// The job preempting `job` as its user names it; its id for one preempted before the name
// was kept.
std::string PreemptorName(const Job& job) {
  return job.preempted_by_name.empty() ? std::to_string(job.preempted_by) : job.preempted_by_name;
}

// Whether a task event names a task of the job's current attempt placed on `node`.
bool IsTaskOf(const Job& job, const std::string& node, int task, int attempt) {
  return Occupies(job) && attempt == job.attempt && task >= 0 &&
         static_cast<size_t>(task) < job.placement.size() &&
         job.placement[static_cast<size_t>(task)].node == node;
}

// A one-task job's reason from its task's. A stop the controller asked for (a cancel, its
// time-limit backstop, ...) keeps the controller's reason, which says who asked or why,
// and adds how the task ended: "cancelled by alice (ended by SIGTERM)", not the node's
// "cancelled (ended by SIGTERM)".
std::string StoppedReason(const Job& next, const std::string& reason_before,
                          const jobs::TaskStatus& task) {
  if (!next.cancel_requested || !task.cancelled || reason_before.empty()) return task.reason;
  constexpr std::string_view kCancelled = "cancelled";
  if (std::string_view(task.reason).starts_with(kCancelled)) {
    return reason_before + task.reason.substr(kCancelled.size());
  }
  return reason_before + " (" + task.reason + ")";
}

// The job back in the queue (its submit time keeps its place there): the next placement
// makes a new attempt.
Job Requeued(const Job& job, const std::string& reason) {
  Job again = job;
  again.state = JobState::kPending;
  again.placement.clear();
  again.tasks.clear();
  again.master_port = 0;
  again.placed_time_us = 0;  // the next placement sets it
  again.start_time_us = 0;
  again.end_time_us = 0;
  again.cancel_requested = false;
  again.preempted_by = 0;
  again.preempted_by_name.clear();
  again.preempt_deadline_s = 0;
  again.checkpoint_done = false;
  again.reason = std::string(kRequeuedPrefix) + reason;
  return again;
}

// The GPU-hours the tasks of `job`'s attempt ran.
double AttemptGpuHours(const Job& job) {
  double hours = 0;
  for (size_t t = 0; t < job.tasks.size() && t < job.placement.size(); ++t) {
    const jobs::TaskStatus& ts = job.tasks[t];
    if (ts.start_time_us == 0 || ts.end_time_us <= ts.start_time_us) continue;
    hours += jobs::PlacedGpus(job.placement[t]) *
             static_cast<double>(ts.end_time_us - ts.start_time_us) / 3.6e9;
  }
  return hours;
}

// `ended`'s attempt as the job keeps it once requeued (Requeued clears its times): from
// its first task's start to its last task's end, and the GPU-hours its tasks ran.
// Nothing (start 0) for an attempt no task of which started.
jobs::EarlierAttempt EndedAttempt(const Job& ended, jobs::AttemptEnd how,
                                  const std::string& reason) {
  jobs::EarlierAttempt run{.attempt = ended.attempt,
                           .ended_by = how,
                           .start_time_us = ended.start_time_us,
                           .gpu_hours = AttemptGpuHours(ended),
                           .reason = reason};
  for (const jobs::TaskPlacement& p : ended.placement) {
    run.gpus += jobs::PlacedGpus(p);
    run.nodes.push_back(p.node);
  }
  for (const jobs::TaskStatus& ts : ended.tasks) {
    if (ts.start_time_us == 0) continue;
    if (run.start_time_us == 0 || ts.start_time_us < run.start_time_us) {
      run.start_time_us = ts.start_time_us;
    }
    run.end_time_us = std::max(run.end_time_us, ts.end_time_us);
  }
  run.end_time_us = std::max(run.end_time_us, run.start_time_us);
  return run;
}

// A preempted attempt whose tasks have all ended, however they ended: back to the queue.
Transition Preempted(const Job& job, const Job& ended) {
  const jobs::EarlierAttempt run = EndedAttempt(ended, jobs::AttemptEnd::kPreempted, ended.reason);
  const double gpu_hours = run.gpu_hours;
  Job again = Requeued(ended, ended.reason + " (attempt " + std::to_string(ended.attempt) + ")");
  again.preemptions += 1;
  again.preempted_gpu_hours += gpu_hours;
  if (run.start_time_us > 0) jobs::AddEarlierAttempt(again, run);
  Transition t = Changed(job, std::move(again));
  t.effects.requeued = true;
  t.effects.freed = true;
  t.effects.stop_execs = true;
  t.effects.notify_nodes = true;
  t.effects.notify_exec = true;
  t.effects.preempted_gpu_hours = gpu_hours;
  t.effects.log = "job " + Id(job) + " " + t.next.reason;
  return t;
}

// Whether a stop reached a task of `job` (it was signalled, or not started): a preempted
// job whose tasks all ended on their own first, its stop order crossing their end, was
// not stopped by the preemption.
bool StopReachedATask(const Job& job) {
  return std::any_of(job.tasks.begin(), job.tasks.end(),
                     [](const jobs::TaskStatus& s) { return s.cancelled || s.timed_out; });
}

// A preempted job whose tasks all ended before its stop reached them: it ends as they
// ended (SUCCEEDED: its work was done; it must not run again), not requeued.
Job EndedBeforeItsStop(Job job) {
  job.reason = "ended before its preemption by job " + PreemptorName(job) + " reached it";
  job.preempted_by = 0;
  job.preempted_by_name.clear();
  job.preempt_deadline_s = 0;
  job.checkpoint_done = false;
  job.cancel_requested = false;
  return job;
}

// The job's outcome once every task has ended; else the job as it is, waiting for them.
// With cancel_requested, tasks whose launch orders never went out (they wait for task
// 0's port) will not start: they end here.
Transition Settle(const Job& job, Job next, int64_t now_us) {
  NormalizeTasks(next);
  if (next.cancel_requested) {
    for (size_t t = 1; t < next.tasks.size(); ++t) {
      jobs::TaskStatus& ts = next.tasks[t];
      if (next.master_port == 0 && ts.start_time_us == 0 && !ts.ended) {
        ts.ended = true;
        ts.cancelled = true;
        ts.end_time_us = now_us;
        ts.reason = "not started";
      }
    }
  }
  const bool all_ended = std::all_of(next.tasks.begin(), next.tasks.end(),
                                     [](const jobs::TaskStatus& s) { return s.ended; });
  if (!all_ended || next.tasks.empty()) {
    // The tasks left all said checkpoint-done: the job's grace as a whole is over.
    if (EveryTaskCheckpointedOrEnded(next)) next.checkpoint_done = true;
    Transition t = Changed(job, std::move(next));
    t.effects.notify_nodes = true;
    return t;
  }
  if (next.preempted_by != 0) {
    if (StopReachedATask(next)) return Preempted(job, next);
    next = EndedBeforeItsStop(std::move(next));
  }
  const jobs::TaskStatus* failed = nullptr;
  size_t failed_index = 0;
  for (size_t t = 0; t < next.tasks.size() && failed == nullptr; ++t) {
    if (next.tasks[t].failed()) {
      failed = &next.tasks[t];
      failed_index = t;
    }
  }
  const jobs::TaskStatus& first = next.tasks[0];
  auto any = [&](bool jobs::TaskStatus::*flag) {
    return std::any_of(next.tasks.begin(), next.tasks.end(),
                       [&](const jobs::TaskStatus& s) { return s.*flag; });
  };
  const std::string reason_before = next.reason;
  if (failed != nullptr) {
    next.state = failed->timed_out ? JobState::kTimeout : JobState::kFailed;
    next.exit_code = failed->exit_code;
    next.signal = failed->signal;
    if (next.tasks.size() > 1) {
      next.reason = TaskName(next, failed_index) + " " + TaskOutcome(*failed);
    } else if (!failed->reason.empty()) {
      next.reason = failed->reason;
    }
  } else {
    next.exit_code = first.exit_code;
    next.signal = first.signal;
    if (next.mpi && !first.cancelled && !first.timed_out) {
      next.state = JobState::kSucceeded;
      next.reason.clear();  // the held tasks' release is how an MPI job ends, not news
    } else if (any(&jobs::TaskStatus::timed_out) || next.time_limit_hit) {
      next.state = JobState::kTimeout;
    } else if (any(&jobs::TaskStatus::cancelled) || next.cancel_requested) {
      next.state = JobState::kCancelled;
    } else {
      next.state = JobState::kSucceeded;
    }
    if (next.tasks.size() == 1 && !first.reason.empty()) {
      next.reason = StoppedReason(next, reason_before, first);
    }
    if ((next.interactive == "run" || next.interactive == "alloc") && next.command_ended &&
        !any(&jobs::TaskStatus::timed_out)) {
      // gpupool run and alloc: the tasks were released when the command ended (on the node,
      // or alloc's on the client's machine); it is the outcome.
      next.exit_code = next.command_exit_code;
      next.signal = next.command_signal;
      const bool ok = next.exit_code && *next.exit_code == 0 && !next.signal;
      next.state = ok ? JobState::kSucceeded : JobState::kFailed;
      next.reason = reason_before;
    }
  }
  next.end_time_us = 0;
  for (const jobs::TaskStatus& ts : next.tasks) {
    next.end_time_us = std::max(next.end_time_us, ts.end_time_us);
  }
  if (next.start_time_us == 0 && first.start_time_us != 0) next.start_time_us = first.start_time_us;
  if (next.start_time_us == 0 && failed == nullptr) next.start_time_us = next.end_time_us;
  Transition t = Changed(job, std::move(next));
  t.effects.ended = true;
  t.effects.freed = true;
  t.effects.stop_execs = true;  // commands run by gpupool exec in it end with it
  t.effects.notify_nodes = true;
  t.effects.notify_exec = true;
  return t;
}

// Asks for the job's tasks to stop (once): a cancel, the end of a `run` command, ...
Transition StopAll(const Job& job, Job next, int64_t now_us) {
  const bool newly = !job.cancel_requested;
  next.cancel_requested = true;
  Transition t = Settle(job, std::move(next), now_us);
  t.effects.resend_stop = newly;
  t.effects.notify_nodes = true;
  return t;
}

// A node of the job is lost (or no longer knows its task): the job ends LOST, or goes
// back to the queue with --requeue. Its tasks elsewhere must not go on without it.
Transition Lose(const Job& job, const std::string& reason, const std::string& gone_from,
                int64_t now_us, JobState end_state = JobState::kLost, bool requeue_anyway = false) {
  Job lost = job;
  NormalizeTasks(lost);
  std::map<std::string, StrayStop> nodes;  // started_there: a task of it started there, runs
  for (size_t t = 0; t < lost.placement.size(); ++t) {
    const jobs::TaskPlacement& p = lost.placement[t];
    StrayStop& s = nodes[p.node];
    s.node = p.node;
    s.attempt = job.attempt;
    s.started_there = s.started_there || (p.node != gone_from && lost.tasks[t].start_time_us != 0 &&
                                          !lost.tasks[t].ended);
    s.gpu_uuids.insert(s.gpu_uuids.end(), p.gpu_uuids.begin(), p.gpu_uuids.end());
  }
  std::vector<StrayStop> strays;
  for (auto& [node, s] : nodes) strays.push_back(std::move(s));
  // The tasks that still ran ran until now, for the GPU-hours of a requeued attempt.
  Job ran = lost;
  for (jobs::TaskStatus& ts : ran.tasks) {
    if (ts.start_time_us != 0 && !ts.ended) ts.end_time_us = now_us;
  }
  Transition t;
  if (job.preempted_by != 0) {
    // Being preempted, it was going back to the queue anyway: its preemption counts (its
    // tasks were told to stop), its tasks' run up to now, and the loss is named.
    ran.reason += "; " + reason;
    t = Preempted(job, ran);
    t.effects.log = "job " + Id(job) + " " + std::string(jobs::JobStateName(end_state)) +
                    " while being preempted, and requeued: " + reason;
  } else if ((job.requeue || requeue_anyway) && !job.cancel_requested) {
    // Its attempt's GPU-hours stay with the job (accounting, usage), as a preempted one's.
    Job again = Requeued(job, reason);
    const jobs::EarlierAttempt run = EndedAttempt(
        ran,
        end_state == JobState::kFailed ? jobs::AttemptEnd::kGpuFailed : jobs::AttemptEnd::kLost,
        reason);
    if (run.start_time_us > 0) jobs::AddEarlierAttempt(again, run);
    t = Changed(job, std::move(again));
    t.effects.requeued = true;
    t.effects.log = "job " + Id(job) + " " + std::string(jobs::JobStateName(end_state)) +
                    " and requeued: " + reason;
  } else {
    lost.state = end_state;
    lost.end_time_us = now_us;
    lost.reason = reason;
    // Its tasks' records end with it: what still ran there is stopped as a stray, and its
    // end, if it comes, is for an ended job and not recorded. A task shown running for
    // ever, and the GPU time of the ones that ran left out of its record, would follow.
    for (jobs::TaskStatus& ts : lost.tasks) {
      if (ts.ended) continue;
      ts.ended = true;
      if (ts.start_time_us != 0) ts.end_time_us = now_us;
      ts.reason = ts.start_time_us != 0 ? "stopped: " + reason : "not started";
    }
    t = Changed(job, std::move(lost));
    t.effects.ended = true;
    t.effects.notify_exec = true;
    t.effects.log =
        "job " + Id(job) + " " + std::string(jobs::JobStateName(end_state)) + ": " + reason;
  }
  t.effects.freed = true;
  t.effects.stop_execs = true;
  t.effects.notify_nodes = true;
  t.effects.strays = std::move(strays);
  t.effects.log_warning = true;
  return t;
}

Status NotPending(const Job& job, const std::string& what, const std::string& hint) {
  if (jobs::IsTerminal(job.state)) {
    return Status::FailedPrecondition("job " + UserJobId(job) + " has ended (" + StateOf(job) +
                                      "); only pending jobs are " + what);
  }
  return Status::FailedPrecondition("job " + UserJobId(job) + " is " + StateOf(job) +
                                    "; only pending jobs are " + what + hint);
}

Result<Transition> OnPlaced(const Job& job, const Placed& e, int64_t now_us) {
  if (job.state != JobState::kPending) return NotPending(job, "placed", "");
  if (!job.held_by.empty()) {
    return Status::FailedPrecondition("job " + UserJobId(job) + " is " + HeldReason(job));
  }
  if (e.placement.empty()) {
    return Status::InvalidArgument("job " + Id(job) + ": a placement needs at least one task");
  }
  for (const jobs::NodeFence& f : job.fences) {
    if (f.until_us > now_us) {
      return Status::FailedPrecondition("job " + UserJobId(job) + " waits for node " + f.node +
                                        "'s lease to run out");
    }
  }
  Job next = job;
  next.fences.clear();
  next.state = JobState::kAssigned;
  next.placement = e.placement;
  next.tasks.assign(next.placement.size(), jobs::TaskStatus{});
  for (size_t t = 0; t < next.placement.size(); ++t) {
    next.tasks[t].host =
        t < e.hosts.size() && !e.hosts[t].empty() ? e.hosts[t] : next.placement[t].node;
  }
  next.master_port = 0;
  next.pending_reason.clear();
  next.attempt += 1;
  next.placed_time_us = now_us;
  Transition t = Changed(job, std::move(next));
  t.effects.notify_nodes = true;
  t.effects.pending_reason_changed = true;
  return t;
}

Result<Transition> OnStarted(const Job& job, const TaskStarted& e, int64_t now_us) {
  if (!IsTaskOf(job, e.node, e.task, e.attempt)) return Unchanged(job);
  const auto t = static_cast<size_t>(e.task);
  Job next = job;
  NormalizeTasks(next);
  jobs::TaskStatus& ts = next.tasks[t];
  if (ts.ended || ts.start_time_us != 0) return Unchanged(job);  // a resent event
  const int64_t start_us = BoundNodeTime(e.time_us, AttemptFloorUs(job), now_us);
  ts.start_time_us = start_us;
  ts.stdout_path = e.stdout_path;
  ts.stderr_path = e.stderr_path;
  std::string log;
  if (t == 0) {
    next.stdout_path = e.stdout_path;
    next.stderr_path = e.stderr_path;
    if (e.master_port > 0) next.master_port = e.master_port;
    if (next.master_port == 0) {
      // Agents pick one when they start task 0; this keeps a gang going if one did not.
      log = "job " + Id(job) + ": node " + e.node + " reported no rendezvous port; using 29500";
      next.master_port = 29500;
    }
  }
  const bool all_started =
      std::all_of(next.tasks.begin(), next.tasks.end(),
                  [](const jobs::TaskStatus& s) { return s.start_time_us != 0; });
  if (all_started && job.state == JobState::kAssigned) {
    next.state = JobState::kRunning;
    next.start_time_us = start_us;
    // Why an earlier attempt went back to the queue is no longer this attempt's reason (its
    // record keeps it: earlier_attempts, launch_failures); it would outlive the job's end.
    if (next.reason.starts_with(kRequeuedPrefix)) next.reason.clear();
  }
  Transition tr = Changed(job, std::move(next));
  tr.effects.node_time_log = NodeTimeLog(job, e.node, e.task, "start", e.time_us, start_us);
  // Task 0's port lets the others go; a started task takes the exec requests held for it.
  tr.effects.notify_nodes = true;
  tr.effects.notify_exec = true;
  tr.effects.log_warning = !log.empty();
  tr.effects.log = std::move(log);
  return tr;
}

Result<Transition> OnExited(const Job& job, const TaskExited& e, int64_t now_us) {
  if (std::optional<Transition> late = LateEnd(job, e, now_us)) return *std::move(late);
  if (!IsTaskOf(job, e.node, e.task, e.attempt)) return Unchanged(job);
  const auto t = static_cast<size_t>(e.task);
  if (e.kill_cause == protocol::KillCause::kNodeLease && !job.cancel_requested &&
      (t >= job.tasks.size() || !job.tasks[t].ended)) {
    // Its node, cut off from the controller past its lease, stopped it (the controller
    // had not declared the node lost yet): the job is lost with the node, as if it had.
    const std::string why = !e.kill_detail.empty() ? e.kill_detail
                            : !e.reason.empty()    ? e.reason
                                                   : "its lease ran out";
    return Lose(job, TaskName(job, t) + " was stopped by its node: " + why, e.node, now_us,
                JobState::kLost, /*requeue_anyway=*/jobs::FencedOnLoss(job));
  }
  Job next = job;
  NormalizeTasks(next);
  jobs::TaskStatus& ts = next.tasks[t];
  if (ts.ended) return Unchanged(job);  // a resent event
  ts.ended = true;
  // Not before its start (its attempt's placement if it never started), not after now.
  ts.end_time_us = BoundNodeTime(
      e.time_us, ts.start_time_us != 0 ? ts.start_time_us : AttemptFloorUs(job), now_us);
  const std::string time_log = NodeTimeLog(job, e.node, e.task, "end", e.time_us, ts.end_time_us);
  ts.exit_code = e.exit_code;
  ts.signal = e.signal;
  ts.cancelled = e.cancelled;
  ts.timed_out = e.timed_out;
  ts.reason = e.reason;
  ts.kill_cause = e.kill_cause ? std::string(protocol::KillCauseName(*e.kill_cause)) : "";
  ts.kill_detail = e.kill_detail;
  if (!e.stdout_path.empty()) ts.stdout_path = e.stdout_path;
  if (!e.stderr_path.empty()) ts.stderr_path = e.stderr_path;
  if (t == 0) {
    if (!e.stdout_path.empty()) next.stdout_path = e.stdout_path;
    if (!e.stderr_path.empty()) next.stderr_path = e.stderr_path;
  }
  bool stop_rest = false;
  if (!next.cancel_requested) {
    if (ts.failed()) {
      // The first failure stops the rest of the gang.
      stop_rest = next.tasks.size() > 1;
      next.reason = TaskName(next, t) + " " + TaskOutcome(ts);
    } else if (next.mpi && t == 0 && next.tasks.size() > 1) {
      stop_rest = true;  // mpirun ended: release the held tasks
      next.reason = "task 0 ended; the held tasks were released";
    }
  }
  Transition tr =
      stop_rest ? StopAll(job, std::move(next), now_us) : Settle(job, std::move(next), now_us);
  tr.effects.node_time_log = time_log;
  return tr;
}

Result<Transition> OnTaskLost(const Job& job, const TaskLost& e, int64_t now_us) {
  if (!IsTaskOf(job, e.node, e.task, e.attempt)) return Unchanged(job);
  const std::string reason =
      e.reason.empty() ? TaskName(job, static_cast<size_t>(e.task)) + " was lost on " + e.node
                       : e.reason;
  const auto t = static_cast<size_t>(e.task);
  if (e.not_started && (t >= job.tasks.size() || job.tasks[t].start_time_us == 0)) {
    // Nothing of it ran, and the node says the fault is its own: back to the queue.
    Job counted = job;
    counted.launch_failures += 1;
    if (counted.launch_failures < kMaxLaunchFailures) {
      return Lose(counted, reason, e.node, now_us, JobState::kLost, /*requeue_anyway=*/true);
    }
    return Lose(counted,
                reason + " (" + std::to_string(counted.launch_failures) +
                    " times nodes could not start it: not requeued again)",
                e.node, now_us);
  }
  return Lose(job, reason, e.node, now_us);
}

// Whether nothing of the job's attempt can run anywhere: placed (ASSIGNED), no launch of
// it handed to an agent (NodeLost::never_launched), no task started or ended, not being
// stopped.
bool NeverLaunched(const Job& job, const NodeLost& e) {
  if (!e.never_launched || job.state != JobState::kAssigned || job.cancel_requested ||
      job.preempted_by != 0) {
    return false;
  }
  return std::none_of(job.tasks.begin(), job.tasks.end(),
                      [](const jobs::TaskStatus& s) { return s.start_time_us != 0 || s.ended; });
}

// A job whose node was lost before any agent had its launch: back to the queue as it was
// (no attempt of it ran: none recorded, no launch failure counted). Stop orders still go
// to its nodes for its attempt: a node that registered again while the loss was written
// may have polled its launch meanwhile.
Transition NeverStarted(const Job& job, const NodeLost& e) {
  Job again = Requeued(job, "placed on node " + e.node +
                                ", whose agent stopped answering before it could be started; "
                                "it was put back in the queue");
  Transition t = Changed(job, std::move(again));
  std::map<std::string, StrayStop> nodes;
  for (const jobs::TaskPlacement& p : job.placement) {
    StrayStop& s = nodes[p.node];
    s.node = p.node;
    s.attempt = job.attempt;
    s.gpu_uuids.insert(s.gpu_uuids.end(), p.gpu_uuids.begin(), p.gpu_uuids.end());
  }
  for (auto& [node, s] : nodes) t.effects.strays.push_back(std::move(s));
  t.effects.requeued = true;
  t.effects.freed = true;
  t.effects.notify_nodes = true;
  t.effects.stop_execs = true;
  t.effects.log = "job " + Id(job) + " " + t.next.reason;
  return t;
}

Result<Transition> OnNodeLost(const Job& job, const NodeLost& e, int64_t now_us) {
  if (job.state == JobState::kPending) return FencedNodeLost(job, e, now_us);
  if (!Occupies(job) || !OnNode(job, e.node)) return Unchanged(job);
  if (NeverLaunched(job, e)) return NeverStarted(job, e);
  // Under a lease the node stops a preemptible job itself (jobs::FencedOnLoss): it goes
  // back to the queue, as a preempted one does, rather than ending LOST.
  Transition t = Lose(job, e.reason, e.node, now_us, JobState::kLost,
                      /*requeue_anyway=*/job.preemptible && e.lease_until_us != 0);
  if (t.next.state != JobState::kPending || e.lease_until_us <= now_us ||
      !jobs::FencedOnLoss(job)) {
    return t;
  }
  // A task sent there and not known to have ended may run on, its node cut off: the next
  // attempt waits for the node's lease, by which its supervisors have stopped it.
  t.next.fences = FencesOnLoss(job, e, now_us);
  if (jobs::FenceUntilUs(t.next) != 0) {
    t.effects.log += "; it waits for the node's lease, until " +
                     std::to_string(e.lease_until_us / 1'000'000) + " (epoch s)";
  }
  return t;
}

Result<Transition> OnFenceLifted(const Job& job, const FenceLifted& e) {
  if (job.state != JobState::kPending || jobs::FenceOn(job, e.node) == nullptr) {
    return Unchanged(job);
  }
  Job next = job;
  const bool free = DropFence(next, e.node);
  Transition t = Changed(job, std::move(next));
  t.effects.queue_changed = free;  // it may start now: an arrival pass
  return t;
}

Result<Transition> OnAgentForgot(const Job& job, const AgentForgot& e, int64_t now_us) {
  if (!Occupies(job)) return Unchanged(job);
  bool started_there = false;
  for (size_t t = 0; t < job.placement.size() && t < job.tasks.size(); ++t) {
    started_there = started_there || (job.placement[t].node == e.node &&
                                      job.tasks[t].start_time_us != 0 && !job.tasks[t].ended);
  }
  if (!started_there) return Unchanged(job);
  return Lose(job, "the agent on node " + e.node + " restarted and no longer knows this job",
              e.node, now_us);
}

// A pending job ends CANCELLED for `reason`; a pass at once: what it held back in the
// plan may start.
Transition CancelPending(const Job& job, std::string reason, int64_t now_us) {
  Job next = job;
  next.state = JobState::kCancelled;
  next.end_time_us = now_us;
  next.reason = std::move(reason);
  next.pending_reason.clear();
  Transition t = Changed(job, std::move(next));
  t.effects.ended = true;
  t.effects.freed = true;
  t.effects.pending_reason_changed = true;
  return t;
}

Result<Transition> OnCancel(const Job& job, const CancelRequested& e, int64_t now_us) {
  if (jobs::IsTerminal(job.state)) {
    return Status::FailedPrecondition("job " + UserJobId(job) + " has already ended (" +
                                      StateOf(job) + ")");
  }
  if (job.state == JobState::kPending) {
    return CancelPending(job, "cancelled by " + e.by + " while pending", now_us);
  }
  if (job.cancel_requested && job.preempted_by == 0) return Unchanged(job);
  Job next = job;
  next.reason = "cancelled by " + e.by;
  if (job.preempted_by != 0) {
    // Its tasks are being stopped already: it ends CANCELLED instead of going back.
    next.preempted_by = 0;
    next.preempted_by_name.clear();
    next.preempt_deadline_s = 0;
    next.reason += " while being preempted";
    return Changed(job, std::move(next));
  }
  return StopAll(job, std::move(next), now_us);
}

Result<Transition> OnHold(const Job& job, const Hold& e) {
  if (job.state != JobState::kPending) {
    return NotPending(job, "held", " (`gpupool cancel` stops it)");
  }
  // An admin's hold on a job its user held makes it an admin hold, as Slurm's: else the
  // user could release it and it would start against the admin's wish.
  const bool to_admin = e.admin && !job.held_by_admin;
  if (!job.held_by.empty() && !to_admin) return Unchanged(job);  // already held
  Job next = job;
  next.held_by = e.by;
  next.held_by_admin = e.admin;
  next.pending_reason = HeldReason(next);
  Transition t = Changed(job, std::move(next));
  t.effects.pending_reason_changed = true;
  t.effects.log = "job " + Id(job) + " held by " + e.by +
                  (job.held_by.empty() ? "" : " (admin hold; was held by " + job.held_by + ")");
  return t;
}

Result<Transition> OnRelease(const Job& job, const Release& e) {
  if (job.state != JobState::kPending) return NotPending(job, "released", "");
  if (job.held_by.empty()) return Unchanged(job);  // not held
  if (job.held_by_admin && !e.admin) {
    return Status::PermissionDenied("job " + UserJobId(job) + " was held by admin " + job.held_by +
                                    "; ask an admin to release it");
  }
  Job next = job;
  next.held_by.clear();
  next.held_by_admin = false;
  next.pending_reason.clear();
  Transition t = Changed(job, std::move(next));
  t.effects.pending_reason_changed = true;
  t.effects.queue_changed = true;
  t.effects.log = "job " + Id(job) + " released by " + e.by;
  return t;
}

Result<Transition> OnDependencyFailed(const Job& job, const DependencyFailed& e, int64_t now_us) {
  if (job.state != JobState::kPending) return Unchanged(job);
  Transition t = CancelPending(job, "dependency can never be met: " + e.why, now_us);
  t.effects.log = "job " + Id(job) + " ended: " + t.next.reason;
  return t;
}

Result<Transition> OnCommandEnded(const Job& job, const CommandEnded& e, int64_t now_us) {
  if (!Occupies(job) || e.attempt != job.attempt || job.command_ended) return Unchanged(job);
  // A run or an allocation already being stopped (a cancel, the controller's time-limit
  // backstop, a client that never attached) ends as that stop does: CANCELLED "cancelled
  // by bob", TIMEOUT, not FAILED from the command the stop ended (red team 5, finding 6).
  if ((job.interactive == "alloc" || job.interactive == "run") && job.cancel_requested) {
    return Unchanged(job);
  }
  Job next = job;
  next.command_ended = true;
  next.command_exit_code = e.exit_code;
  next.command_signal = e.signal;
  if (e.hung_up) {
    next.reason = e.hangup_reason;
  } else if (!e.error.empty()) {
    next.reason = "the command did not run: " + e.error;
  } else if (e.signal) {
    next.reason = "the command was ended by " + SignalText(*e.signal);
  } else if (e.exit_code && *e.exit_code != 0) {
    next.reason = "the command exited with code " + std::to_string(*e.exit_code);
  } else {
    next.reason.clear();
  }
  if (!e.exit_code && !e.signal) next.command_exit_code = 255;  // it never ran
  // Its tasks held the allocation for it: they are released now.
  return StopAll(job, std::move(next), now_us);
}

Result<Transition> OnClientAbsent(const Job& job, const ClientAbsent& e, int64_t now_us) {
  if (e.alloc && job.interactive == "alloc" && job.state == JobState::kPending) {
    // Its client went away while it waited (gpupool alloc killed): nobody would use it.
    Transition t = CancelPending(job,
                                 "its client went away (no word from gpupool alloc for " +
                                     std::to_string(e.timeout_s) + " s): the request was withdrawn",
                                 now_us);
    t.effects.log = "job " + Id(job) + " ended: " + t.next.reason;
    return t;
  }
  if (!Occupies(job) || job.interactive != (e.alloc ? "alloc" : "run") || job.cancel_requested) {
    return Unchanged(job);
  }
  Job next = job;
  next.reason = e.alloc ? "its client went away (no word from gpupool alloc for " +
                              std::to_string(e.timeout_s) + " s): the allocation was released"
                        : "no terminal attached within " + std::to_string(e.timeout_s) +
                              " s of its start (gpupool run was interrupted, or the controller "
                              "restarted)";
  return StopAll(job, std::move(next), now_us);
}

Result<Transition> OnTimeLimit(const Job& job, const TimeLimit& e, int64_t now_us) {
  if (job.state != JobState::kRunning || job.time_limit_s <= 0 || job.start_time_us == 0 ||
      job.cancel_requested || job.time_limit_hit) {
    return Unchanged(job);
  }
  if (now_us < TimeLimitDeadlineUs(job, e.grace_s)) return Unchanged(job);
  Job next = job;
  next.time_limit_hit = true;
  next.reason = "ran " + std::to_string(e.grace_s) + " s past its time limit of " +
                std::to_string(job.time_limit_s) +
                " s without its node ending it: stopped by the controller";
  Transition t = StopAll(job, std::move(next), now_us);
  t.effects.log = "job " + Id(job) + ": " + t.next.reason;
  t.effects.log_warning = true;
  return t;
}

Result<Transition> OnGpuFailed(const Job& job, const GpuFailed& e, int64_t now_us) {
  if (!Occupies(job)) return Unchanged(job);
  const bool holds = std::any_of(job.placement.begin(), job.placement.end(), [&](const auto& p) {
    return p.node == e.node && std::any_of(p.gpu_uuids.begin(), p.gpu_uuids.end(), [&](auto& u) {
             return u == e.gpu_uuid ||
                    std::find(e.mig_uuids.begin(), e.mig_uuids.end(), u) != e.mig_uuids.end();
           });
  });
  if (!holds) return Unchanged(job);
  return Lose(job, "GPU " + e.gpu_uuid + " on node " + e.node + " failed: " + e.reason, "", now_us,
              JobState::kFailed);
}

Result<Transition> OnPreempt(const Job& job, const Preempt& e, int64_t now_us) {
  if (!Occupies(job) || job.cancel_requested || job.preempted_by != 0) return Unchanged(job);
  if (!job.preemptible) {
    return Status::FailedPrecondition("job " + UserJobId(job) +
                                      " is not preemptible (it was not submitted with "
                                      "--preemptible)");
  }
  Job next = job;
  next.preempted_by = e.by_job;
  next.preempted_by_name = e.by_name.empty() ? std::to_string(e.by_job) : e.by_name;
  next.preempt_deadline_s = e.deadline_s;
  next.checkpoint_done = false;
  next.reason = "preempted by job " + next.preempted_by_name + (e.why.empty() ? "" : ", ") + e.why;
  Transition t = StopAll(job, std::move(next), now_us);
  t.effects.preempting = true;
  t.effects.log = "job " + Id(job) + " " + t.next.reason + ": SIGTERM, SIGKILL after " +
                  std::to_string(e.grace_s) + " s";
  return t;
}

}  // namespace

int64_t AttemptFloorUs(const Job& job) {
  int64_t floor_us = std::max<int64_t>(job.submit_time_us, 1);  // 0 marks "not started"
  if (!job.earlier_attempts.empty()) {
    floor_us = std::max(floor_us, job.earlier_attempts.back().end_time_us);
  }
  return std::max(floor_us, job.placed_time_us);
}

int64_t BoundNodeTime(int64_t reported_us, int64_t floor_us, int64_t now_us) {
  return std::clamp(reported_us, std::min(floor_us, now_us), now_us);
}

int64_t TimeLimitDeadlineUs(const Job& job, int64_t grace_s) {
  const int64_t span_s = SaturatingAdd(job.time_limit_s, grace_s);
  int64_t span_us = 0;
  if (__builtin_mul_overflow(span_s, int64_t{1'000'000}, &span_us)) {
    span_us =
        span_s > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return SaturatingAdd(job.start_time_us, span_us);
}

void NormalizeTasks(Job& job) {
  if (job.tasks.size() == job.placement.size()) return;
  job.tasks.resize(job.placement.size());
  for (size_t t = 0; t < job.placement.size(); ++t) {
    if (job.tasks[t].host.empty()) job.tasks[t].host = job.placement[t].node;
    if (job.state == JobState::kRunning && job.tasks[t].start_time_us == 0) {
      job.tasks[t].start_time_us = job.start_time_us;
    }
  }
}

std::string UserJobId(const Job& job) {
  if (job.array_id == 0) return std::to_string(job.id);
  return std::to_string(job.array_id) + "_" + std::to_string(job.array_index);
}

std::string HeldReason(const Job& job) {
  // As sched::HoldGate::Reason: an admin's hold is released by admins only.
  return "held by " + job.held_by + (job.held_by_admin ? " (admin)" : "") + ": `gpupool release " +
         UserJobId(job) + "`" + (job.held_by_admin ? " by an admin" : "") + " lets it start";
}

std::string_view EventName(const Event& e) {
  return std::visit(
      Overloaded{[](const Placed&) { return std::string_view("Placed"); },
                 [](const TaskStarted&) { return std::string_view("TaskStarted"); },
                 [](const TaskExited&) { return std::string_view("TaskExited"); },
                 [](const TaskLost&) { return std::string_view("TaskLost"); },
                 [](const NodeLost&) { return std::string_view("NodeLost"); },
                 [](const AgentForgot&) { return std::string_view("AgentForgot"); },
                 [](const CancelRequested&) { return std::string_view("CancelRequested"); },
                 [](const Hold&) { return std::string_view("Hold"); },
                 [](const Release&) { return std::string_view("Release"); },
                 [](const DependencyFailed&) { return std::string_view("DependencyFailed"); },
                 [](const CommandEnded&) { return std::string_view("CommandEnded"); },
                 [](const ClientAbsent&) { return std::string_view("ClientAbsent"); },
                 [](const TimeLimit&) { return std::string_view("TimeLimit"); },
                 [](const GpuFailed&) { return std::string_view("GpuFailed"); },
                 [](const Preempt&) { return std::string_view("Preempt"); },
                 [](const CheckpointDone&) { return std::string_view("CheckpointDone"); },
                 [](const FenceLifted&) { return std::string_view("FenceLifted"); }},
      e);
}

Result<Transition> Step(const Job& job, const Event& event, int64_t now_us) {
  Result<Transition> t =
      std::visit(Overloaded{
                     [&](const Placed& e) { return OnPlaced(job, e, now_us); },
                     [&](const TaskStarted& e) { return OnStarted(job, e, now_us); },
                     [&](const TaskExited& e) { return OnExited(job, e, now_us); },
                     [&](const TaskLost& e) { return OnTaskLost(job, e, now_us); },
                     [&](const NodeLost& e) { return OnNodeLost(job, e, now_us); },
                     [&](const AgentForgot& e) { return OnAgentForgot(job, e, now_us); },
                     [&](const CancelRequested& e) { return OnCancel(job, e, now_us); },
                     [&](const Hold& e) { return OnHold(job, e); },
                     [&](const Release& e) { return OnRelease(job, e); },
                     [&](const DependencyFailed& e) { return OnDependencyFailed(job, e, now_us); },
                     [&](const CommandEnded& e) { return OnCommandEnded(job, e, now_us); },
                     [&](const ClientAbsent& e) { return OnClientAbsent(job, e, now_us); },
                     [&](const TimeLimit& e) { return OnTimeLimit(job, e, now_us); },
                     [&](const GpuFailed& e) { return OnGpuFailed(job, e, now_us); },
                     [&](const Preempt& e) { return OnPreempt(job, e, now_us); },
                     [&](const CheckpointDone& e) { return OnCheckpointDone(job, e); },
                     [&](const FenceLifted& e) { return OnFenceLifted(job, e); },
                 },
                 event);
  if (!t.ok() || !t->changed) return t;
  // The one table of allowed states (jobs::IsValidTransition) holds for every step.
  if (!jobs::IsValidTransition(job.state, t->next.state)) {
    return Status::Internal("job " + Id(job) + ": " + std::string(EventName(event)) +
                            " would take it from " + StateOf(job) + " to " +
                            std::string(jobs::JobStateName(t->next.state)) +
                            ", which the job state machine does not allow");
  }
  return t;
}

}  // namespace gpupool::controller::lifecycle
