// Agents' long polls without a thread each (issue 31): AwaitWork files a waiting poll,
// notifications (WakeAgent, WakeAgents) mark it dirty, and one thread answers it once
// its node has work or its deadline passes (poll_waiters.h).
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "controller/controller.h"
#include "controller/controller_internal.h"

namespace gpupool::controller {

uint64_t Controller::AwaitWork(const std::string& node, int64_t wait_ms, WorkCallback done) {
  const int64_t deadline = PollDeadline(wait_ms);
  Result<AgentWork> now = AgentWork{};
  {
    MutexLock lock(mu_);
    now = TakeWorkLocked(node, /*arrived=*/true);
    const int64_t mono = clock_->MonotonicMicros();
    if (now.ok() && now->empty() && !stopping_ && mono < deadline) {
      if (!poll_thread_.joinable()) poll_thread_ = std::thread([this] { PollLoop(); });
      const uint64_t ticket =
          polls_.Add(node, deadline, mono + internal::kResendAfterUs, std::move(done));
      poll_cv_.notify_one();  // it may be due before what the thread waits for
      return ticket;
    }
  }
  done(std::move(now));
  return 0;
}

protocol::Version Controller::NodeVersion(const std::string& node) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  return it == nodes_.end() ? protocol::Version{1, 0} : it->second.version;
}

bool Controller::NodeUp(const std::string& node) {
  MutexLock lock(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.up;
}

void Controller::CancelWorkWait(uint64_t ticket) {
  std::optional<PollWaiters::Waiter> gone;
  {
    MutexLock lock(mu_);
    gone = polls_.Remove(ticket);
  }
  // Its callback (and what it holds: the client's responder) goes here, unlocked.
}

size_t Controller::WaitingPolls() {
  MutexLock lock(mu_);
  return polls_.size();
}

void Controller::PollLoop() {
  Lock lock(mu_);
  while (true) {
    const bool stop = stopping_;
    const int64_t now = clock_->MonotonicMicros();
    std::vector<std::pair<PollWaiters::Callback, Result<AgentWork>>> answers;
    for (uint64_t ticket : stop ? polls_.All() : polls_.TakeDue(now)) {
      const PollWaiters::Waiter* w = polls_.Find(ticket);
      Result<AgentWork> work = TakeWorkLocked(w->node);
      if (work.ok() && work->empty() && !stop && now < w->deadline_us) {
        polls_.Reschedule(ticket, now + internal::kResendAfterUs);
        continue;
      }
      answers.emplace_back(std::move(polls_.Remove(ticket)->done), std::move(work));
    }
    if (!answers.empty()) {
      // Answered unlocked: an answer resumes a connection and may read the controller.
      lock.Unlock();
      for (auto& [done, work] : answers) done(std::move(work));
      answers.clear();
      lock.Lock();
      continue;  // notifications may have come meanwhile
    }
    if (stop) return;  // AwaitWork answers at once from now on
    if (polls_.dirty()) continue;
    const int64_t wake =
        polls_.NextDue().value_or(now + 3'600'000'000LL);  // a notification comes first
    clock_->WaitOnce(poll_cv_, lock.native(), wake);
  }
}

}  // namespace gpupool::controller
