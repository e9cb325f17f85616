// Clock: the source of time, injected everywhere time matters so that the simulator
// and tests drive production code deterministically. It can also wait, as RocksDB's
// SystemClock and Mesos's libprocess Clock do: every timed wait of the controller and
// the agent goes through WaitUntil / SleepFor, so under a ManualClock their loops,
// long polls and timeouts move only when a test advances time.
//
// Implementations are thread-safe. Callers do not own the process-wide SystemClock.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>

namespace gpupool {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time in microseconds since the Unix epoch.
  virtual int64_t NowMicros() const = 0;
  // Monotonic time in microseconds from an arbitrary origin, for intervals.
  virtual int64_t MonotonicMicros() const = 0;
  // Like MonotonicMicros (same origin where the system allows), but it also counts the time
  // the host spent suspended (and, on some hypervisors, a VM paused), which
  // MonotonicMicros leaves out: for the intervals another machine times as well, such as
  // a lease in the database's time. Not a wait's deadline. Defaults to MonotonicMicros().
  virtual int64_t BootMicros() const { return MonotonicMicros(); }

  int64_t NowSeconds() const { return NowMicros() / 1'000'000; }

  // Waits on `cv`, with `lock` (on the mutex that guards what `done` reads) held on entry
  // and on return, until `done()` holds or MonotonicMicros() reaches `deadline_us`.
  // Returns done(). Spurious wake-ups are absorbed; a notify of `cv` makes it look at
  // `done` again.
  virtual bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         int64_t deadline_us, const std::function<bool()>& done) const = 0;
  // One wait on `cv` (lock held on entry and return): returns after a notify, a
  // spurious wake-up, or once MonotonicMicros() reaches `deadline_us`. Returns false when
  // the deadline has passed. For loops that look at their state after every wake-up.
  virtual bool WaitOnce(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                        int64_t deadline_us) const = 0;
  // Blocks the calling thread for `micros` of this clock's time.
  virtual void SleepFor(int64_t micros) const = 0;

  // WaitUntil with a deadline `micros` from now.
  bool WaitFor(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, int64_t micros,
               const std::function<bool()>& done) const {
    return WaitUntil(cv, lock, MonotonicMicros() + micros, done);
  }
};

// The operating system's clocks.
class SystemClock final : public Clock {
 public:
  static SystemClock* Get();  // process-wide instance, never destroyed
  int64_t NowMicros() const override;
  int64_t MonotonicMicros() const override;
  // CLOCK_BOOTTIME on Linux; MonotonicMicros() where the system has no such clock.
  int64_t BootMicros() const override;
  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 int64_t deadline_us, const std::function<bool()>& done) const override;
  bool WaitOnce(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                int64_t deadline_us) const override;
  void SleepFor(int64_t micros) const override;
};

// A clock that moves only when told to. Wall and monotonic time are the same value; boot
// time is that value plus what SuspendMicros added (nothing unless a test suspends).
// Waits end when done() holds or when Advance/Set moves time past their deadline, never
// by the passing of real time; a test that advances time and then expects a woken
// thread to have acted first waits for it (WaitForWaiters, or a condition of its own).
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_micros = 0) : now_(start_micros) {}
  int64_t NowMicros() const override { return now_.load(std::memory_order_acquire); }
  int64_t MonotonicMicros() const override { return NowMicros(); }
  int64_t BootMicros() const override {
    return NowMicros() + suspended_.load(std::memory_order_acquire);
  }
  void SetMicros(int64_t t);
  void AdvanceMicros(int64_t d);
  // As if the host slept for `d`: boot time moves, wall and monotonic time stand still
  // (and no wait ends, as monotonic deadlines do not pass).
  void SuspendMicros(int64_t d) { suspended_.fetch_add(d, std::memory_order_acq_rel); }

  bool WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                 int64_t deadline_us, const std::function<bool()>& done) const override;
  bool WaitOnce(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                int64_t deadline_us) const override;
  void SleepFor(int64_t micros) const override;

  // How many threads wait in WaitUntil or SleepFor now.
  int Waiters() const;
  // Blocks (in real time, up to `real_timeout_ms`) until at least `n` threads wait on
  // this clock: a test's way to let background loops reach their next wait (Mesos's
  // Clock::settle). Returns whether they did.
  bool WaitForWaiters(int n, int real_timeout_ms = 10'000) const;

 private:
  void Register(std::condition_variable* cv) const;
  void Unregister(std::condition_variable* cv) const;
  void WakeAll();

  std::atomic<int64_t> now_;
  std::atomic<int64_t> suspended_ = 0;  // added to now_ by BootMicros
  // Guards waiters_ and waiting_. Notifies happen under it, so a registered condition
  // variable is alive while it is notified (its waiter unregisters under it).
  mutable std::mutex mu_;
  mutable std::condition_variable waiters_cv_;  // waiting_ changed
  mutable std::multiset<std::condition_variable*> waiters_;
  mutable int waiting_ = 0;
  // SleepFor's own wait.
  mutable std::mutex sleep_mu_;
  mutable std::condition_variable sleep_cv_;
};

}  // namespace gpupool
