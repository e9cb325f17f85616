#include "common/clock.h"

#include <time.h>

#include <chrono>
#include <thread>

namespace gpupool {
namespace {

// A ManualClock waiter also looks again this often in real time, so a notify that raced
// with its registration costs at most this, never a hang.
constexpr auto kManualRecheck = std::chrono::milliseconds(2);

}  // namespace

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

int64_t SystemClock::BootMicros() const {
#ifdef CLOCK_BOOTTIME
  timespec ts{};
  if (clock_gettime(CLOCK_BOOTTIME, &ts) == 0) {
    return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
  }
#endif
  return MonotonicMicros();
}

bool SystemClock::WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                            int64_t deadline_us, const std::function<bool()>& done) const {
  // MonotonicMicros() is steady_clock's count, so the deadline converts exactly.
  const std::chrono::steady_clock::time_point deadline{std::chrono::microseconds(deadline_us)};
  return cv.wait_until(lock, deadline, done);
}

bool SystemClock::WaitOnce(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                           int64_t deadline_us) const {
  const std::chrono::steady_clock::time_point deadline{std::chrono::microseconds(deadline_us)};
  return cv.wait_until(lock, deadline) == std::cv_status::no_timeout ||
         MonotonicMicros() < deadline_us;
}

void SystemClock::SleepFor(int64_t micros) const {
  if (micros > 0) std::this_thread::sleep_for(std::chrono::microseconds(micros));
}

void ManualClock::SetMicros(int64_t t) {
  now_.store(t, std::memory_order_release);
  WakeAll();
}

void ManualClock::AdvanceMicros(int64_t d) {
  now_.fetch_add(d, std::memory_order_acq_rel);
  WakeAll();
}

void ManualClock::WakeAll() {
  std::lock_guard lock(mu_);
  for (std::condition_variable* cv : waiters_) cv->notify_all();
}

void ManualClock::Register(std::condition_variable* cv) const {
  std::lock_guard lock(mu_);
  waiters_.insert(cv);
  ++waiting_;
  waiters_cv_.notify_all();
}

void ManualClock::Unregister(std::condition_variable* cv) const {
  std::lock_guard lock(mu_);
  waiters_.erase(waiters_.find(cv));
  --waiting_;
  waiters_cv_.notify_all();
}

bool ManualClock::WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                            int64_t deadline_us, const std::function<bool()>& done) const {
  // Registered before time is read: an Advance that the read misses notifies after it.
  Register(&cv);
  bool ok = false;
  while (true) {
    if (done()) {
      ok = true;
      break;
    }
    if (NowMicros() >= deadline_us) break;
    cv.wait_for(lock, kManualRecheck);
  }
  Unregister(&cv);
  return ok;
}

bool ManualClock::WaitOnce(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                           int64_t deadline_us) const {
  Register(&cv);
  // A wake-up after at most kManualRecheck of real time counts as a spurious one.
  if (NowMicros() < deadline_us) cv.wait_for(lock, kManualRecheck);
  Unregister(&cv);
  return NowMicros() < deadline_us;
}

void ManualClock::SleepFor(int64_t micros) const {
  const int64_t deadline = NowMicros() + micros;
  std::unique_lock lock(sleep_mu_);
  WaitUntil(sleep_cv_, lock, deadline, [] { return false; });
}

int ManualClock::Waiters() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

bool ManualClock::WaitForWaiters(int n, int real_timeout_ms) const {
  std::unique_lock lock(mu_);
  return waiters_cv_.wait_for(lock, std::chrono::milliseconds(real_timeout_ms),
                              [&] { return waiting_ >= n; });
}

}  // namespace gpupool
