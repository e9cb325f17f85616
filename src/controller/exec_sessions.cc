// Interactive exec sessions: the controller's part of `gpupool run`, `gpupool exec --pty`
// and `gpupool exec -i` (controller.h, "interactive sessions"; docs/api.md). The client
// and the session's agent never meet: the client's input queues here until the agent
// takes it, and the command's output waits here until the client reads it, both in
// memory and bounded. A session lives as long as its client keeps asking; one whose
// client goes silent is hung up, like a terminal whose line dropped.
#include <spdlog/spdlog.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

// Output the client has not read yet, over which the agent is told to pause.
constexpr size_t kOutputHighWater = 1 << 20;
// Input the command has not read yet, over which the client is told to wait (429).
constexpr size_t kInputHighWater = 1 << 20;
// Output held for a session at most, whatever its agent sends (it should pause at the
// high-water mark).
constexpr size_t kOutputHardLimit = 8 << 20;
// How long a client's read or an agent's input poll may wait at most.
constexpr int64_t kMaxWaitMs = 30'000;

// Where exec session ids come from unless ControllerOptions::random says otherwise.
Result<uint64_t> KernelRandom64() {
  uint64_t v = 0;
  ssize_t n;
  do {
    n = ::getrandom(&v, sizeof v, 0);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof v)) {
    return Status::Unavailable("cannot draw an exec session id: getrandom: " +
                               std::string(n < 0 ? std::strerror(errno) : "short read"));
  }
  return v;
}

// A session on another node is answered as one that does not exist.
Status NotOnNode(int64_t id, const std::string& node) {
  return Status::NotFound("exec session " + std::to_string(id) + " does not run on node " + node);
}

// The clock's monotonic time `wait_ms` from now, at most kMaxWaitMs.
int64_t Deadline(const Clock* clock, int64_t wait_ms) {
  return clock->MonotonicMicros() + 1000 * std::clamp<int64_t>(wait_ms, 0, kMaxWaitMs);
}

}  // namespace

Result<ExecSession*> Controller::CallersExecLocked(int64_t exec_id, const Caller& caller) {
  auto it = execs_.find(exec_id);
  if (it != execs_.end() && (caller.admin || caller.uid == it->second.uid)) return &it->second;
  // Not the id, which the caller knows, and not which of the two: the same bytes either way.
  return Status::NotFound(
      "no such exec session of yours: it ended long ago, the controller restarted, or the id "
      "is wrong");
}

Result<int64_t> Controller::NewExecIdLocked() {
  for (int tries = 0; tries < 16; ++tries) {
    uint64_t bits = 0;
    if (options_.random) {
      bits = options_.random();
    } else {
      GP_ASSIGN_OR_RETURN(bits, KernelRandom64());
    }
    // 53 bits: more than enough not to be guessed or counted, and an exact number in
    // every JSON reader (JavaScript's included). Agents key on the id (agent::ExecKey
    // takes ids below 2^61) and the agent protocol's int64 carries it unchanged.
    const auto id = static_cast<int64_t>(bits >> 11);
    if (id != 0 && execs_.count(id) == 0) return id;
  }
  return Status::Unavailable("cannot draw an unused exec session id: the random source repeats");
}

Result<int64_t> Controller::AttachRun(int64_t job_id, const Caller& caller, int rows, int cols,
                                      int64_t wait_ms, Job* job) {
  const int64_t deadline = Deadline(clock_, wait_ms);
  Lock lock(mu_);
  while (true) {
    auto it = active_.find(job_id);
    if (it == active_.end()) {
      lock.Unlock();  // no store read under mu_
      Result<Job> read = store_->GetJob(job_id);
      lock.Lock();
      GP_ASSIGN_OR_RETURN(Job ended, std::move(read));
      if (!caller.admin && ended.uid != caller.uid) {
        return Status::PermissionDenied("job " + lifecycle::UserJobId(ended) + " belongs to " +
                                        ended.user +
                                        "; users may only see and act on their "
                                        "own jobs");
      }
      // Its command may have ended already: the session (and its output) is still here.
      if (auto p = primary_exec_.find(job_id); p != primary_exec_.end()) return p->second;
      *job = std::move(ended);
      return Status::FailedPrecondition("job " + lifecycle::UserJobId(*job) + " has ended (" +
                                        std::string(jobs::JobStateName(job->state)) +
                                        (job->reason.empty() ? "" : ": ") + job->reason + ")");
    }
    const Job& j = it->second;
    if (!caller.admin && j.uid != caller.uid) {
      return Status::PermissionDenied("job " + lifecycle::UserJobId(j) + " belongs to " + j.user +
                                      "; users may only see and act on their own jobs");
    }
    if (j.interactive == "alloc") {
      // gpupool alloc waits here until every task holds its part.
      if (j.state == JobState::kRunning || stopping_ || clock_->MonotonicMicros() >= deadline) {
        *job = j;
        AttachPendingReason(job);
        return int64_t{0};
      }
      clock_->WaitOnce(exec_cv_, lock.native(), deadline);
      continue;
    }
    if (j.interactive != "run") {
      return Status::FailedPrecondition(
          "job " + lifecycle::UserJobId(j) +
          " is not a gpupool run job; enter a running job with gpupool exec --job ID --pty");
    }
    if (auto p = primary_exec_.find(job_id); p != primary_exec_.end()) {
      // The same client again (a retried request), or another terminal taking over.
      auto x = execs_.find(p->second);
      if (x != execs_.end()) x->second.client_seen_mono_us = clock_->MonotonicMicros();
      return p->second;
    }
    const bool task0_runs = (j.state == JobState::kAssigned || j.state == JobState::kRunning) &&
                            !j.tasks.empty() && j.tasks[0].start_time_us != 0 &&
                            !j.tasks[0].ended && !j.cancel_requested;
    if (task0_runs) {
      ExecOptions io;
      io.tty = j.pty;
      io.stdin_open = true;
      io.rows = rows;
      io.cols = cols;
      // As the job's owner: an admin attaching to someone's job runs nothing as themself.
      Caller owner{j.user, j.uid, j.gid, false};
      GP_ASSIGN_OR_RETURN(int64_t id, StartExecLocked(job_id, 0, j.command, owner, io));
      execs_.at(id).primary = true;
      primary_exec_[job_id] = id;
      return id;
    }
    if (clock_->MonotonicMicros() >= deadline || stopping_) {
      *job = j;
      AttachPendingReason(job);
      return int64_t{0};
    }
    clock_->WaitOnce(exec_cv_, lock.native(), deadline);
  }
}

Status Controller::PushExecInput(int64_t exec_id, const Caller& caller,
                                 protocol::ExecInputItem item) {
  MutexLock lock(mu_);
  GP_ASSIGN_OR_RETURN(ExecSession * found, CallersExecLocked(exec_id, caller));
  ExecSession& x = *found;
  x.client_seen_mono_us = clock_->MonotonicMicros();
  if (!x.interactive()) {
    return Status::FailedPrecondition("exec session " + std::to_string(exec_id) +
                                      " takes no input; start it with --pty or -i");
  }
  if (item.seq <= x.input_seq) return Status::Ok();  // resent
  if (item.seq != x.input_seq + 1) {
    return Status::InvalidArgument("seq: expected " + std::to_string(x.input_seq + 1) +
                                   " (items are numbered 1, 2, ... and sent in order)");
  }
  if (x.ended || x.hung_up) {
    return Status::FailedPrecondition("exec session " + std::to_string(exec_id) + " has ended");
  }
  if (x.input_bytes + item.data.size() > kInputHighWater && !item.data.empty()) {
    return Status::ResourceExhausted(
        "the command has not read 1 MiB of input yet; send again "
        "later");
  }
  x.input_seq = item.seq;
  x.input_bytes += item.data.size();
  x.input.push_back(std::move(item));
  exec_cv_.notify_all();
  return Status::Ok();
}

Result<ExecStreamRead> Controller::ReadExecStream(int64_t exec_id, const Caller& caller,
                                                  int64_t stdout_offset, int64_t stderr_offset,
                                                  bool seen_started, int64_t wait_ms) {
  const int64_t deadline = Deadline(clock_, wait_ms);
  Lock lock(mu_);
  {
    GP_ASSIGN_OR_RETURN(ExecSession * found, CallersExecLocked(exec_id, caller));
    ExecSession& x = *found;
    if (!x.interactive()) {
      return Status::FailedPrecondition("exec session " + std::to_string(exec_id) +
                                        " is not interactive; read GET /v1/exec/ID/output");
    }
    const int64_t offsets[2] = {stdout_offset, stderr_offset};
    for (int i = 0; i < 2; ++i) {
      const int64_t end = x.output_base[i] + static_cast<int64_t>(x.output[i].size());
      if (offsets[i] < x.output_base[i] || offsets[i] > end) {
        return Status::InvalidArgument(
            std::string(i == 0 ? "stdout" : "stderr") + "_offset: the session holds bytes " +
            std::to_string(x.output_base[i]) + ".." + std::to_string(end) + " of that stream");
      }
      // The client has everything before its offset.
      x.output[i].erase(0, static_cast<size_t>(offsets[i] - x.output_base[i]));
      x.output_base[i] = offsets[i];
    }
    ++x.client_waiting;
    exec_cv_.notify_all();  // an agent paused for a full buffer may go on
  }
  while (true) {
    ExecSession& x = execs_.at(exec_id);  // sessions are not erased while a client waits
    x.client_seen_mono_us = clock_->MonotonicMicros();
    const bool news = !x.output[0].empty() || !x.output[1].empty() || x.started != seen_started ||
                      (x.ended && (x.output_eof || !x.started));
    if (news || stopping_ || clock_->MonotonicMicros() >= deadline) {
      --x.client_waiting;
      ExecStreamRead r;
      r.stdout_data = x.output[0];
      r.stderr_data = x.output[1];
      r.stdout_next = x.output_base[0] + static_cast<int64_t>(x.output[0].size());
      r.stderr_next = x.output_base[1] + static_cast<int64_t>(x.output[1].size());
      r.eof = x.output_eof || (x.ended && !x.started);
      r.started = x.started;
      r.ended = x.ended;
      r.exit_code = x.exit_code;
      r.signal = x.signal;
      r.error = x.error;
      if (x.hung_up && r.error.empty() && x.ended) r.error = x.hangup_reason;
      return r;
    }
    clock_->WaitOnce(exec_cv_, lock.native(), deadline);
  }
}

Result<protocol::ExecInput> Controller::TakeExecInput(const std::string& node, int64_t exec_id,
                                                      int64_t after, int64_t wait_ms) {
  const int64_t deadline = Deadline(clock_, wait_ms);
  Lock lock(mu_);
  while (true) {
    auto it = execs_.find(exec_id);
    if (it == execs_.end() || it->second.node != node) return NotOnNode(exec_id, node);
    ExecSession& x = it->second;
    // The agent has applied everything up to `after`.
    while (!x.input.empty() && x.input.front().seq <= after) {
      x.input_bytes -= x.input.front().data.size();
      x.input.pop_front();
    }
    protocol::ExecInput in;
    in.hangup = x.hung_up || x.ended;
    if (!x.input.empty() || in.hangup || stopping_ || clock_->MonotonicMicros() >= deadline) {
      in.items.assign(x.input.begin(), x.input.end());
      return in;
    }
    clock_->WaitOnce(exec_cv_, lock.native(), deadline);
  }
}

Result<protocol::ExecOutputAck> Controller::PutExecOutput(const std::string& node, int64_t exec_id,
                                                          const protocol::ExecOutput& out,
                                                          int64_t wait_ms) {
  const int64_t deadline = Deadline(clock_, wait_ms);
  Lock lock(mu_);
  {
    auto it = execs_.find(exec_id);
    if (it == execs_.end() || it->second.node != node) return NotOnNode(exec_id, node);
    ExecSession& x = it->second;
    const int64_t offsets[2] = {out.stdout_offset, out.stderr_offset};
    const std::string* data[2] = {&out.stdout_data, &out.stderr_data};
    if (x.output[0].size() + x.output[1].size() + out.stdout_data.size() + out.stderr_data.size() >
        kOutputHardLimit) {
      return Status::ResourceExhausted("exec session " + std::to_string(exec_id) +
                                       " holds 8 MiB its client has not read: wait while "
                                       "the answer says full");
    }
    for (int i = 0; i < 2; ++i) {
      const int64_t end = x.output_base[i] + static_cast<int64_t>(x.output[i].size());
      const int64_t from = offsets[i];
      const int64_t to = from + static_cast<int64_t>(data[i]->size());
      if (from > end) {
        return Status::InvalidArgument(
            std::string(i == 0 ? "stdout" : "stderr") + "_offset: " + std::to_string(from) +
            " is past the end of what was received (" + std::to_string(end) + ")");
      }
      if (to > end) x.output[i].append(*data[i], static_cast<size_t>(end - from));  // new part
    }
    if (out.eof) x.output_eof = true;
    exec_cv_.notify_all();
  }
  while (true) {
    // The session may have gone while we waited (a long-ended one, collected).
    auto it = execs_.find(exec_id);
    if (it == execs_.end()) return NotOnNode(exec_id, node);
    const ExecSession& x = it->second;
    protocol::ExecOutputAck ack;
    ack.stdout_end = x.output_base[0] + static_cast<int64_t>(x.output[0].size());
    ack.stderr_end = x.output_base[1] + static_cast<int64_t>(x.output[1].size());
    ack.full = x.output[0].size() + x.output[1].size() > kOutputHighWater;
    ack.hangup = x.hung_up;
    if (!ack.full || ack.hangup || stopping_ || clock_->MonotonicMicros() >= deadline) {
      return ack;
    }
    clock_->WaitOnce(exec_cv_, lock.native(), deadline);
  }
}

void Controller::HangUpLocked(int64_t exec_id, const std::string& reason,
                              std::vector<CommandEnd>* ended) {
  auto it = execs_.find(exec_id);
  if (it == execs_.end()) return;
  ExecSession& x = it->second;
  if (x.hung_up || x.ended) return;
  x.hung_up = true;
  x.hangup_reason = reason;
  spdlog::info("exec session {} (job {}): hung up: {}", x.id, x.job_id, reason);
  if (!x.sent) {
    x.ended = true;
    x.error = reason;
    x.ended_mono_us = clock_->MonotonicMicros();
    if (x.primary) ended->push_back(CommandEndOf(x));
  } else if (auto n = nodes_.find(x.node); n != nodes_.end()) {
    n->second.exec_cancel_sent_us[x.id] = 0;
  }
  WakeAgents();
  exec_cv_.notify_all();
}

Controller::CommandEnd Controller::CommandEndOf(const ExecSession& x) {
  CommandEnd e;
  e.job_id = x.job_id;
  e.attempt = x.attempt;
  e.exit_code = x.exit_code;
  e.signal = x.signal;
  e.error = x.error;
  e.hung_up = x.hung_up;
  e.hangup_reason = x.hangup_reason;
  return e;
}

void Controller::CommitCommandEnds(const std::vector<CommandEnd>& ends) {
  std::vector<Change> changes;
  for (const CommandEnd& x : ends) {
    lifecycle::CommandEnded ended;
    ended.attempt = x.attempt;
    ended.exit_code = x.exit_code;
    ended.signal = x.signal;
    ended.error = x.error;
    ended.hung_up = x.hung_up;
    ended.hangup_reason = x.hangup_reason;
    // Its tasks held the allocation for it: they are released now (job_lifecycle.h).
    changes.push_back({x.job_id, std::move(ended), {}});
  }
  if (changes.empty()) return;
  Result<std::vector<Result<Job>>> answers = Commit(std::move(changes), OnConflict::kRetry);
  if (!answers.ok()) {
    spdlog::error("recording the end of `gpupool run` commands: {}", answers.status().ToString());
    return;
  }
  LogRefusals("recording the end of a `gpupool run` command", *answers);
}

Status Controller::SweepExecClients() {
  std::vector<CommandEnd> ended;
  std::vector<Change> absent;
  {
    Lock lock(mu_);
    const int64_t mono = clock_->MonotonicMicros();
    const int64_t now = clock_->NowMicros();
    const int64_t timeout = options_.exec_client_timeout_us;
    const std::string secs = std::to_string(timeout / 1'000'000) + " s";
    for (auto& [id, x] : execs_) {
      if (!x.interactive() || x.ended || x.hung_up || x.client_waiting > 0) continue;
      if (mono - x.client_seen_mono_us <= timeout) continue;
      HangUpLocked(id, "its terminal went away (no word from the client for " + secs + ")", &ended);
    }
    // Allocations whose client said it is alive (or, marked client_keepalive, was
    // submitted): released once it is silent, or withdrawn while they wait.
    for (auto it = alloc_seen_mono_us_.begin(); it != alloc_seen_mono_us_.end();) {
      auto j = active_.find(it->first);
      if (j == active_.end() ||
          !(internal::Occupies(j->second) || j->second.state == JobState::kPending)) {
        it = alloc_seen_mono_us_.erase(it);
        continue;
      }
      if (mono - it->second > timeout && !j->second.cancel_requested) {
        absent.push_back({it->first, lifecycle::ClientAbsent{timeout / 1'000'000, true}, {}});
        it = alloc_seen_mono_us_.erase(it);
        continue;
      }
      ++it;
    }
    for (int64_t id : index_.OccupyingRuns()) {
      const Job& j = active_.at(id);
      if (j.interactive != "run" || j.cancel_requested || primary_exec_.count(id) != 0) continue;
      if (j.tasks.empty() || j.tasks[0].start_time_us == 0) continue;
      if (now - j.tasks[0].start_time_us <= timeout) continue;
      Change c{id, lifecycle::ClientAbsent{timeout / 1'000'000}, {}};
      c.guard = [this](const Job& job) {  // attached meanwhile: not absent
        mu_.AssertHeld();                 // guards run under mu_ (Commit)
        if (primary_exec_.count(job.id) != 0) return Status::NotFound("attached");
        return Status::Ok();
      };
      absent.push_back(std::move(c));
    }
  }
  CommitCommandEnds(ended);
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(absent), OnConflict::kRetry));
  LogRefusals("exec client sweep", answers);
  return Status::Ok();
}

Result<int64_t> Controller::AllocAlive(int64_t id, const Caller& caller) {
  MutexLock lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) return internal::NoLongerActive(nullptr, id);
  GP_RETURN_IF_ERROR(internal::CheckOwner(it->second, caller));
  if (it->second.interactive != "alloc") {
    return Status::InvalidArgument("job " + lifecycle::UserJobId(it->second) +
                                   " is no allocation (gpupool alloc)");
  }
  alloc_seen_mono_us_[id] = clock_->MonotonicMicros();
  return options_.exec_client_timeout_us / 1'000'000;
}

void Controller::WatchAllocClientLocked(const Job& job, bool loaded) {
  if (job.interactive != "alloc" || !job.client_keepalive || jobs::IsTerminal(job.state)) return;
  // The sweep counts the timeout from here. After a restart (Load) the client may be in
  // its retries yet: it has kRestartGraceUs at least to find this controller.
  const int64_t grace =
      loaded ? std::max<int64_t>(0, internal::kRestartGraceUs - options_.exec_client_timeout_us)
             : 0;
  alloc_seen_mono_us_[job.id] = clock_->MonotonicMicros() + grace;
}

// The sessions' start, waits, cancels and reports (moved from controller.cc).
using internal::CheckOwner;
using internal::kMaxExecOutputHeld;
using internal::Occupies;

Result<int64_t> Controller::StartExec(int64_t job_id, int task_index, std::vector<std::string> argv,
                                      const Caller& caller, ExecOptions io) {
  {
    MutexLock lock(mu_);
    if (active_.count(job_id) != 0) {
      return StartExecLocked(job_id, task_index, std::move(argv), caller, io);
    }
  }
  if (argv.empty() || argv[0].empty()) {
    return Status::InvalidArgument("argv: the command to run, e.g. -- hostname");
  }
  // Not active: the store says whether it is the caller's and how it ended.
  GP_ASSIGN_OR_RETURN(Job ended, store_->GetJob(job_id));
  GP_RETURN_IF_ERROR(CheckOwner(ended, caller));
  return Status::FailedPrecondition("job " + lifecycle::UserJobId(ended) + " has ended (" +
                                    std::string(jobs::JobStateName(ended.state)) +
                                    "); exec runs only in a running job");
}

Result<int64_t> Controller::StartExecLocked(int64_t job_id, int task_index,
                                            std::vector<std::string> argv, const Caller& caller,
                                            ExecOptions io) {
  if (argv.empty() || argv[0].empty()) {
    return Status::InvalidArgument("argv: the command to run, e.g. -- hostname");
  }
  auto it = active_.find(job_id);
  if (it == active_.end()) {  // callers look first: an ended job is read without mu_
    return internal::NoLongerActive(nullptr, job_id);
  }
  const Job& job = it->second;
  GP_RETURN_IF_ERROR(CheckOwner(job, caller));
  if (!Occupies(job) || job.cancel_requested) {
    return Status::FailedPrecondition(
        "job " + lifecycle::UserJobId(job) + " is " + std::string(jobs::JobStateName(job.state)) +
        (job.cancel_requested ? " and stopping" : "") + "; exec runs only in a running job");
  }
  GP_RETURN_IF_ERROR(CheckExecTargetLocked(job, task_index, io));
  const int64_t mono = clock_->MonotonicMicros();
  PruneExecSessionsLocked(mono);
  const std::string& node = job.placement[static_cast<size_t>(task_index)].node;
  GP_ASSIGN_OR_RETURN(const int64_t new_id, NewExecIdLocked());
  ExecSession x;
  x.id = new_id;
  x.created = ++exec_created_;
  x.job_id = job_id;
  x.job_name = lifecycle::UserJobId(job);
  x.attempt = job.attempt;
  x.task_index = task_index;
  x.node = node;
  x.uid = job.uid;
  x.argv = std::move(argv);
  x.io = io;
  x.client_seen_mono_us = mono;
  const int64_t id = x.id;
  execs_.emplace(id, std::move(x));
  WakeAgents();
  return id;
}

Status Controller::CheckExecTargetLocked(const jobs::Job& job, int task_index,
                                         const ExecOptions& io) {
  if (task_index < 0 || static_cast<size_t>(task_index) >= job.placement.size()) {
    return Status::InvalidArgument("task: job " + lifecycle::UserJobId(job) + " has tasks 0.." +
                                   std::to_string(job.placement.size() - 1));
  }
  const jobs::TaskStatus& ts = job.tasks.at(static_cast<size_t>(task_index));
  if (ts.ended) {
    return Status::FailedPrecondition("task " + std::to_string(task_index) + " of job " +
                                      lifecycle::UserJobId(job) + " has ended");
  }
  const std::string& node = job.placement[static_cast<size_t>(task_index)].node;
  auto n = nodes_.find(node);
  if (n == nodes_.end() || !n->second.up) {
    return Status::Unavailable("node " + node + " of task " + std::to_string(task_index) +
                               " is down");
  }
  if (!protocol::SupportsExec(n->second.version)) {
    return Status::FailedPrecondition("the agent on node " + node + " speaks agent protocol " +
                                      protocol::VersionString(n->second.version) +
                                      ", which has no exec: upgrade gpupool there");
  }
  if ((io.tty || io.stdin_open) && !protocol::SupportsInteractiveExec(n->second.version)) {
    return Status::FailedPrecondition("the agent on node " + node + " speaks agent protocol " +
                                      protocol::VersionString(n->second.version) +
                                      ", which has no interactive exec (a terminal or stdin): "
                                      "upgrade gpupool there");
  }
  if (io.tty || io.stdin_open) {
    // Each holds a client's long poll and up to about 2 MiB here.
    int live = 0;
    for (const auto& [xid, s] : execs_) {
      if (s.uid == job.uid && s.interactive() && !s.ended) ++live;
    }
    if (live >= kMaxInteractivePerUser) {
      return Status::FailedPrecondition(
          "user " + job.user + " has " + std::to_string(live) +
          " interactive sessions open, the most at once; end one (exit its shell)");
    }
  }
  return Status::Ok();
}

void Controller::PruneExecSessionsLocked(int64_t mono) {
  // Sessions that ended long ago go; at most 10,000 are kept, the oldest going first.
  std::vector<std::pair<int64_t, int64_t>> by_age;  // (created, id)
  by_age.reserve(execs_.size());
  for (const auto& [xid, s] : execs_) by_age.emplace_back(s.created, xid);
  std::sort(by_age.begin(), by_age.end());
  for (const auto& [created, xid] : by_age) {
    auto x = execs_.find(xid);
    const bool old = x->second.ended && mono - x->second.ended_mono_us > 600'000'000;
    if (x->second.client_waiting == 0 && (old || execs_.size() > 10'000)) {
      if (x->second.primary) primary_exec_.erase(x->second.job_id);
      exec_output_held_ -=
          x->second.complete_output[0].size() + x->second.complete_output[1].size();
      execs_.erase(x);
    }
  }
}

Result<ExecSession> Controller::WaitExec(int64_t exec_id, const Caller& caller, bool seen_started,
                                         bool seen_ended, int64_t wait_ms) {
  const int64_t deadline =
      clock_->MonotonicMicros() + 1000 * std::clamp<int64_t>(wait_ms, 0, 60'000);
  Lock lock(mu_);
  while (true) {
    GP_ASSIGN_OR_RETURN(const ExecSession* found, CallersExecLocked(exec_id, caller));
    const ExecSession& x = *found;
    if (x.started != seen_started || x.ended != seen_ended || stopping_ ||
        clock_->MonotonicMicros() >= deadline) {
      return x;
    }
    clock_->WaitOnce(exec_cv_, lock.native(), deadline);
  }
}

Status Controller::CancelExec(int64_t exec_id, const Caller& caller) {
  MutexLock lock(mu_);
  GP_ASSIGN_OR_RETURN(ExecSession * found, CallersExecLocked(exec_id, caller));
  ExecSession& x = *found;
  if (x.ended) return Status::Ok();
  if (x.interactive() && !x.hung_up) {
    x.hung_up = true;
    x.hangup_reason = "stopped by " + caller.user;
  }
  if (!x.sent) {
    x.ended = true;
    x.error = "cancelled before it started";
    x.ended_mono_us = clock_->MonotonicMicros();
    exec_cv_.notify_all();
    return Status::Ok();
  }
  // The agent cancels an exec session like a task: a stray order for its launcher key.
  if (auto n = nodes_.find(x.node); n != nodes_.end()) {
    n->second.exec_cancel_sent_us[x.id] = 0;
  }
  WakeAgents();
  return Status::Ok();
}

void Controller::ExecReported(const std::string& node, const protocol::ExecReport& r,
                              std::vector<CommandEnd>* ended) {
  auto it = execs_.find(r.id);
  if (it == execs_.end() || it->second.node != node || it->second.ended) return;
  ExecSession& x = it->second;
  if (r.started && !x.started) {
    x.started = true;
    x.stdout_path = r.stdout_path;
    x.stderr_path = r.stderr_path;
  }
  if (r.ended) {
    x.ended = true;
    x.exit_code = r.exit_code;
    x.signal = r.signal;
    x.error = r.error;
    if (!r.stdout_path.empty()) x.stdout_path = r.stdout_path;
    if (!r.stderr_path.empty()) x.stderr_path = r.stderr_path;
    // Held until the session goes (10 minutes after its end), within a bound for all.
    const size_t inline_bytes = r.stdout_data.size() + r.stderr_data.size();
    if (r.output_complete && !x.interactive() &&
        exec_output_held_ + inline_bytes <= kMaxExecOutputHeld) {
      x.output_complete = true;
      x.complete_output[0] = r.stdout_data;
      x.complete_output[1] = r.stderr_data;
      exec_output_held_ += inline_bytes;
    }
    x.ended_mono_us = clock_->MonotonicMicros();
    if (auto n = nodes_.find(node); n != nodes_.end()) n->second.exec_cancel_sent_us.erase(x.id);
    if (x.primary) ended->push_back(CommandEndOf(x));
  }
  exec_cv_.notify_all();
}

}  // namespace gpupool::controller
