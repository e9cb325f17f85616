#include "common/log_throttle.h"

namespace gpupool {

bool LogThrottle::Allow(const std::string& key, int64_t now_us, int64_t* suppressed) {
  std::lock_guard lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    if (keys_.size() >= max_keys_) keys_.clear();
    keys_[key] = Entry{now_us, 0};
    if (suppressed != nullptr) *suppressed = 0;
    return true;
  }
  Entry& e = it->second;
  if (now_us - e.last_us < period_us_) {
    ++e.suppressed;
    return false;
  }
  if (suppressed != nullptr) *suppressed = e.suppressed;
  e = Entry{now_us, 0};
  return true;
}

}  // namespace gpupool
