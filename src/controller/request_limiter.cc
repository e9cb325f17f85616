#include "controller/request_limiter.h"

namespace gpupool::controller {

std::optional<RequestLimiter::Slot> RequestLimiter::TryAcquire(const std::string& key,
                                                               std::string* why) {
  MutexLock lock(mu_);
  size_t& mine = in_flight_[key];
  if (mine >= per_caller_) {
    if (mine == 0) in_flight_.erase(key);
    *why = "you already have " + std::to_string(per_caller_) +
           " waiting requests (long polls, log follows, inspections) in flight: let some "
           "finish, or use wait_ms=0";
    return std::nullopt;
  }
  if (all_ >= total_) {
    if (mine == 0) in_flight_.erase(key);
    *why = "the server has " + std::to_string(total_) +
           " waiting requests in flight from all callers: retry shortly";
    return std::nullopt;
  }
  ++mine;
  ++all_;
  return Slot(this, key);
}

size_t RequestLimiter::InFlight(const std::string& key) {
  MutexLock lock(mu_);
  auto it = in_flight_.find(key);
  return it == in_flight_.end() ? 0 : it->second;
}

void RequestLimiter::Release(const std::string& key) {
  MutexLock lock(mu_);
  auto it = in_flight_.find(key);
  if (it == in_flight_.end()) return;
  if (--it->second == 0) in_flight_.erase(it);
  --all_;
}

}  // namespace gpupool::controller
