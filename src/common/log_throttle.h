// LogThrottle: at most one log line per key per period, so that a fault every caller
// hits (a full disk under the store, answered 500 to each agent's retry) is logged, and
// logged again while it lasts, without flooding the log. Pure: the caller passes the
// time. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace gpupool {

class LogThrottle {
 public:
  // Keys are forgotten once more than `max_keys` are known (the oldest-logged first is
  // not tracked: all are dropped), so that hostile keys cannot grow it without bound.
  explicit LogThrottle(int64_t period_us, size_t max_keys = 1024)
      : period_us_(period_us), max_keys_(max_keys) {}

  // Whether a line for `key` may be logged at `now_us`; when it may, *suppressed (if not
  // null) is how many were held back for the key since its last line.
  bool Allow(const std::string& key, int64_t now_us, int64_t* suppressed = nullptr);

 private:
  struct Entry {
    int64_t last_us = 0;
    int64_t suppressed = 0;
  };
  const int64_t period_us_;
  const size_t max_keys_;
  std::mutex mu_;
  std::map<std::string, Entry> keys_;  // guarded by mu_
};

}  // namespace gpupool
