#include "controller/log_relay.h"

#include <utility>

namespace gpupool::controller {

LogRelay::LogRelay(std::function<void(const std::string& node)> wake_node, const Clock* clock)
    : wake_node_(std::move(wake_node)), clock_(clock != nullptr ? clock : SystemClock::Get()) {}

Result<LogChunk> LogRelay::Fetch(const std::string& node, const std::string& path, int64_t offset,
                                 int64_t max_bytes, std::chrono::milliseconds timeout) {
  const int64_t deadline = clock_->MonotonicMicros() +
                           std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
  int64_t id = 0;
  {
    MutexLock lock(mu_);
    id = next_id_++;
    Pending p;
    p.node = node;
    p.request = LogRequest{id, path, offset, max_bytes};
    pending_.emplace(id, std::move(p));
  }
  if (wake_node_) wake_node_(node);
  UniqueLock lock(mu_);
  clock_->WaitUntil(answered_, lock.native(), deadline, [&] {
    mu_.AssertHeld();  // a predicate runs with the lock held
    return pending_.at(id).answer.has_value();
  });
  Pending done = std::move(pending_.at(id));
  pending_.erase(id);
  if (done.answer.has_value()) return std::move(*done.answer);
  return Status::Unavailable("node " + node + (done.taken ? " did not send" : " did not ask for") +
                             " the log within " + std::to_string(timeout.count()) + " ms");
}

std::vector<LogRequest> LogRelay::Take(const std::string& node) {
  MutexLock lock(mu_);
  std::vector<LogRequest> out;
  for (auto& [id, p] : pending_) {
    if (p.node != node || p.taken) continue;
    p.taken = true;
    out.push_back(p.request);
  }
  return out;
}

bool LogRelay::HasWork(const std::string& node) {
  MutexLock lock(mu_);
  for (const auto& [id, p] : pending_) {
    if (p.node == node && !p.taken) return true;
  }
  return false;
}

void LogRelay::Answer(const std::string& node, int64_t id, Result<LogChunk> answer) {
  {
    MutexLock lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end() || it->second.node != node || it->second.answer.has_value()) return;
    it->second.answer = std::move(answer);
  }
  answered_.notify_all();
}

}  // namespace gpupool::controller
