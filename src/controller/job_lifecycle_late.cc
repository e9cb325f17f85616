#include "controller/job_lifecycle_late.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "controller/job_lifecycle_fences.h"
#include "controller/job_words.h"
#include "controller/usage.h"

namespace gpupool::controller::lifecycle {
namespace {

using jobs::Job;
using jobs::JobState;

// How the reported task ended, in words, with what the report adds.
std::string LateOutcome(const jobs::TaskStatus& ts, const TaskExited& e) {
  std::string out = words::TaskOutcome(ts);
  if (e.cancelled) out += " (stopped by the controller, its job lost)";
  return out;
}

// Cuts `s` to at most `max` bytes, on a UTF-8 character's first byte.
void CutUtf8(std::string& s, size_t max) {
  if (s.size() <= max) return;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
  s.resize(n);
}

// Adds one task's late end, in words, to `reason`, which names each task reported so far
// in the order they came ("task 0 (node n1) exited with code 0; task 1 (node n2) ...")
// followed by `suffix`; at most `max` bytes: tasks past that are "and others".
void AddLateTask(std::string& reason, const std::string& words, std::string_view suffix,
                 size_t max) {
  constexpr std::string_view kOthers = "; and others";
  std::string head = reason;
  if (head.ends_with(suffix)) head.resize(head.size() - suffix.size());
  if (head.ends_with(kOthers)) return;  // full already
  std::string next = head.empty() ? words : head + "; " + words;
  if (next.size() + suffix.size() > max) {
    if (head.empty()) {
      next = words;
      CutUtf8(next, max - suffix.size());
    } else {
      next = head;
      CutUtf8(next, max - suffix.size() - kOthers.size());
      next += kOthers;
    }
  }
  reason = next + std::string(suffix);
}

// A LOST job's late_reason, at most this long: a gang's names each reported task.
constexpr size_t kMaxLateReason = 1024;

std::optional<Transition> LateEndOfLostJob(const Job& job, const TaskExited& e, int64_t now_us) {
  if (e.task < 0 || static_cast<size_t>(e.task) >= job.placement.size() ||
      job.placement[static_cast<size_t>(e.task)].node != e.node) {
    return Unchanged(job);
  }
  const auto t = static_cast<size_t>(e.task);
  Job next = job;
  NormalizeTasks(next);
  jobs::TaskStatus& ts = next.tasks[t];
  // Only a task whose record the loss closed (no end of its own), once; one never known
  // to have started has no start to charge from.
  if (ts.reported_late || ts.exit_code || ts.signal || ts.start_time_us == 0) return Unchanged(job);
  ts.end_time_us = BoundNodeTime(e.time_us, ts.start_time_us, now_us);
  ts.exit_code = e.exit_code;
  ts.signal = e.signal;
  ts.cancelled = e.cancelled;
  ts.timed_out = e.timed_out;
  ts.kill_cause = e.kill_cause ? std::string(protocol::KillCauseName(*e.kill_cause)) : "";
  ts.kill_detail = e.kill_detail;
  ts.reported_late = true;
  const std::string outcome = LateOutcome(ts, e);
  ts.reason = "reported after the loss: " + outcome;
  next.late_end_time_us = std::max(next.late_end_time_us, ts.end_time_us);
  // Task 0's outcome, or the first failure's, speaks for the job's late exit status.
  const bool failed_before = next.late_signal || (next.late_exit_code && *next.late_exit_code != 0);
  const bool speaks = next.late_reason.empty() || (!failed_before && (t == 0 || ts.failed()));
  if (speaks) {
    next.late_exit_code = ts.exit_code;
    next.late_signal = ts.signal;
  }
  // The words name every task reported (each with its own end: show pairs them).
  AddLateTask(next.late_reason,
              (next.tasks.size() > 1 ? words::TaskName(next, t) + " " : std::string()) + outcome,
              ", reported after the loss (the job stays LOST)", kMaxLateReason);
  Transition tr = Unchanged(job);
  tr.changed = true;
  tr.next = std::move(next);
  // This task's GPUs up to its own end, past the loss (usage.h's JobGpuHours).
  tr.effects.late_gpu_hours = LateGpuHours(tr.next, 0, INT64_MAX) - LateGpuHours(job, 0, INT64_MAX);
  tr.effects.log = "job " + std::to_string(job.id) + ": " + words::TaskName(job, t) + " ended at " +
                   std::to_string(ts.end_time_us) + " us and " + outcome +
                   ", reported after the loss: recorded and charged; the job stays LOST";
  tr.effects.log_warning = true;
  return tr;
}

// The lost (or GPU-failed) earlier attempt `e` reports about, or nullptr.
const jobs::EarlierAttempt* LostAttempt(const Job& job, int attempt) {
  for (const jobs::EarlierAttempt& a : job.earlier_attempts) {
    if (a.attempt == attempt && a.merged == 1 &&
        (a.ended_by == jobs::AttemptEnd::kLost || a.ended_by == jobs::AttemptEnd::kGpuFailed)) {
      return &a;
    }
  }
  return nullptr;
}

// The GPUs an earlier attempt held: as kept, else as the job asks for them.
double AttemptGpus(const Job& job, const jobs::EarlierAttempt& a) {
  if (a.gpus > 0) return a.gpus;
  const double milli = job.request.gpu_memory_bytes > 0 ? 1000 : job.request.gpu_milli;
  return job.request.gpus * milli / 1000.0 * std::max(1, job.request.tasks);
}

// Attempt `a`'s nodes in words, each once, in task order: "node n1", "nodes n1 and n2",
// "nodes n1, n2, n3 and 5 more".
std::string NodesInWords(const jobs::EarlierAttempt& a) {
  std::vector<std::string> names;
  for (const std::string& n : a.nodes) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  if (names.size() == 1) return "node " + names[0];
  constexpr size_t kNamed = 3;
  std::string out = "nodes ";
  const size_t shown = std::min(names.size(), kNamed);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

// Whether every task of `a` reported that it exited 0 without being told to stop.
bool EveryTaskSucceeded(const jobs::EarlierAttempt& a) {
  return !a.nodes.empty() && a.late_ends.size() == a.nodes.size() &&
         std::all_of(a.late_ends.begin(), a.late_ends.end(),
                     [](jobs::LateTaskEnd e) { return e == jobs::LateTaskEnd::kSucceeded; });
}

// Whether a task of `a` on `node` has not reported its end yet.
bool UnreportedOn(const jobs::EarlierAttempt& a, const std::string& node) {
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (a.nodes[i] == node &&
        (i >= a.late_ends.size() || a.late_ends[i] == jobs::LateTaskEnd::kUnreported)) {
      return true;
    }
  }
  return false;
}

// The job ends SUCCEEDED at its lost attempt `a`'s end: every task of it succeeded.
void SucceededLate(const jobs::EarlierAttempt& a, const TaskExited& e, Job& next) {
  next.state = JobState::kSucceeded;
  next.start_time_us = a.start_time_us != 0 ? a.start_time_us : a.end_time_us;
  next.end_time_us = a.end_time_us;
  next.exit_code = e.exit_code;
  next.signal = e.signal;
  next.late_end_time_us = a.end_time_us;
  next.late_exit_code = e.exit_code;
  next.late_signal = e.signal;
  next.late_reason = a.late_reason;
  const bool one_node = NodesInWords(a).starts_with("node ");
  next.reason = "attempt " + std::to_string(e.attempt) + " on " + NodesInWords(a) + " succeeded" +
                (a.nodes.size() > 1 ? " (all " + std::to_string(a.nodes.size()) + " tasks)" : "") +
                "; its end was reported after the " + (one_node ? "node was" : "nodes were") +
                " lost and the job requeued: not run again";
  next.pending_reason.clear();
  next.fences.clear();
}

// Charges task `task` of lost attempt `a` (declared lost at lost_us), whose node reported
// it ended at end_us: its GPUs (the attempt's over its tasks) from the loss up to that
// end, kept by task (EarlierAttempt::late_end_times_us; usage.h's JobGpuHours windows
// them). A record whose reports an older server took, without each task's end: all its
// GPUs up to the latest end, as then.
void ChargeLateTask(const Job& job, size_t task, int64_t lost_us, int64_t end_us,
                    jobs::EarlierAttempt& a) {
  const double gpus = AttemptGpus(job, a);
  const bool by_task =
      !a.nodes.empty() && (a.lost_time_us == 0 || a.late_end_times_us.size() == a.nodes.size());
  if (by_task) {
    a.gpus = gpus;
    a.late_end_times_us.resize(a.nodes.size(), 0);
    a.late_end_times_us[task] = end_us;
    if (end_us > lost_us) {
      a.gpu_hours += gpus / static_cast<double>(a.nodes.size()) *
                     static_cast<double>(end_us - lost_us) / 3.6e9;
    }
  } else {
    const double at_loss =
        std::max(0.0, a.gpu_hours - gpus * static_cast<double>(a.end_time_us - lost_us) / 3.6e9);
    a.gpu_hours =
        at_loss +
        gpus * static_cast<double>(std::max({lost_us, end_us, a.end_time_us}) - lost_us) / 3.6e9;
  }
  a.lost_time_us = lost_us;
  // A task of a gang that ended before another one reported leaves the end as it is.
  a.end_time_us = std::max({lost_us, end_us, a.end_time_us});
}

std::optional<Transition> LateEndOfEarlierAttempt(const Job& job, const TaskExited& e,
                                                  int64_t now_us) {
  const jobs::EarlierAttempt* found = LostAttempt(job, e.attempt);
  // Only the task's own node speaks for it: another node (a hostile one) could otherwise
  // end a requeued job SUCCEEDED or charge its user. A record without nodes takes none.
  if (found == nullptr || e.task < 0 || static_cast<size_t>(e.task) >= found->nodes.size() ||
      found->nodes[static_cast<size_t>(e.task)] != e.node) {
    return Unchanged(job);
  }
  const auto task = static_cast<size_t>(e.task);
  if (task < found->late_ends.size() && found->late_ends[task] != jobs::LateTaskEnd::kUnreported) {
    return Unchanged(job);  // resent
  }
  Job next = job;
  jobs::EarlierAttempt& a =
      next.earlier_attempts[static_cast<size_t>(found - job.earlier_attempts.data())];
  const int64_t lost_us = a.lost_time_us != 0 ? a.lost_time_us : a.end_time_us;
  const int64_t start_us = a.start_time_us != 0 ? a.start_time_us : lost_us;
  const int64_t end_us = BoundNodeTime(e.time_us, start_us, now_us);
  // A record an older server kept took one report (it has no late_ends): resent, or earlier.
  if (a.lost_time_us != 0 && a.late_ends.empty() && end_us <= a.end_time_us) return Unchanged(job);
  ChargeLateTask(job, task, lost_us, end_us, a);
  jobs::TaskStatus ts;
  ts.ended = true;
  ts.exit_code = e.exit_code;
  ts.signal = e.signal;
  ts.timed_out = e.timed_out;
  ts.kill_detail = e.kill_detail;
  const std::string outcome = LateOutcome(ts, e);
  // Told to stop (a cancel, the stray stop after the loss, its node's lease): not done,
  // whatever its exit status.
  const bool stopped =
      e.cancelled || e.timed_out || (e.kill_cause && *e.kill_cause != protocol::KillCause::kNone);
  const bool succeeded = !ts.failed() && !stopped;
  a.late_ends.resize(a.nodes.size(), jobs::LateTaskEnd::kUnreported);
  a.late_ends[task] =
      succeeded ? jobs::LateTaskEnd::kSucceeded : jobs::LateTaskEnd::kFailedOrStopped;
  // The words name every task reported, in the order they came.
  AddLateTask(a.late_reason,
              (a.nodes.size() > 1 ? "task " + std::to_string(e.task) + " (node " + e.node + ") "
                                  : std::string()) +
                  outcome,
              ", reported after the loss", jobs::kMaxAttemptReason);
  const double charged = a.gpu_hours - found->gpu_hours;
  Transition tr = Unchanged(job);
  tr.changed = true;
  tr.effects.log_warning = true;
  const std::string id = std::to_string(job.id);
  if (EveryTaskSucceeded(a) && job.state == JobState::kPending && job.attempt == e.attempt &&
      job.interactive.empty() && !job.cancel_requested) {
    // Its work is done, and no other attempt of it was placed: it must not run again.
    SucceededLate(a, e, next);
    tr.effects.ended = true;
    tr.effects.freed = true;
    tr.effects.pending_reason_changed = true;
    tr.effects.notify_exec = true;
    tr.effects.log = "job " + id + " SUCCEEDED: " + next.reason;
  } else {
    if (jobs::IsTerminal(job.state)) tr.effects.late_gpu_hours = charged;
    // Its node reported the lost attempt's end: nothing of it runs there any more, once
    // every task of it there has reported (a gang's others may yet succeed: the next
    // attempt waits for them, or for the lease). Another lost node of the attempt still
    // holds the job back until it is heard from too (Job::fences).
    if (job.state == JobState::kPending && !UnreportedOn(a, e.node)) {
      tr.effects.queue_changed = DropFence(next, e.node);
    }
    tr.effects.log = "job " + id + ": its lost attempt " + std::to_string(e.attempt) + " on node " +
                     e.node + " " +
                     (a.nodes.size() > 1 ? "task " + std::to_string(e.task) + " " : std::string()) +
                     outcome + ", reported after the loss: recorded and charged" +
                     (jobs::IsTerminal(job.state) ? "" : "; the job goes on");
  }
  tr.next = std::move(next);
  return tr;
}

}  // namespace

std::optional<Transition> LateEnd(const Job& job, const TaskExited& e, int64_t now_us) {
  if (job.state == JobState::kLost && e.attempt == job.attempt) {
    return LateEndOfLostJob(job, e, now_us);
  }
  // A report of an attempt before the current one (or of the one a requeue closed).
  // A requeue clears the placement: the job's attempt number is still the closed one's
  // until the next placement (a PENDING job, or one cancelled while it waited).
  const bool closed_attempt =
      e.attempt < job.attempt || (e.attempt == job.attempt && job.placement.empty());
  if (closed_attempt && e.attempt > 0) return LateEndOfEarlierAttempt(job, e, now_us);
  return std::nullopt;
}

}  // namespace gpupool::controller::lifecycle
