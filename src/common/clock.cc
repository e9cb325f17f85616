#include "common/clock.h"

#include <chrono>

namespace gpupool {

SystemClock* SystemClock::Get() {
  static SystemClock* const kClock = new SystemClock();  // never destroyed, by design
  return kClock;
}

int64_t SystemClock::NowMicros() const {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  return duration_cast<microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t SystemClock::MonotonicMicros() const {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  return duration_cast<microseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace gpupool
