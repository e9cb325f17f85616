// Clock: the source of time, injected everywhere time matters so that the simulator
// and tests drive production code deterministically.
//
// Implementations are thread-safe. Callers do not own the process-wide SystemClock.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpupool {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time in microseconds since the Unix epoch.
  virtual int64_t NowMicros() const = 0;
  // Monotonic time in microseconds from an arbitrary origin, for intervals.
  virtual int64_t MonotonicMicros() const = 0;

  int64_t NowSeconds() const { return NowMicros() / 1'000'000; }
};

// The operating system's clocks.
class SystemClock final : public Clock {
 public:
  static SystemClock* Get();  // process-wide instance, never destroyed
  int64_t NowMicros() const override;
  int64_t MonotonicMicros() const override;
};

// A clock that moves only when told to. Wall and monotonic time are the same value.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t start_micros = 0) : now_(start_micros) {}
  int64_t NowMicros() const override { return now_.load(std::memory_order_acquire); }
  int64_t MonotonicMicros() const override { return NowMicros(); }
  void SetMicros(int64_t t) { now_.store(t, std::memory_order_release); }
  void AdvanceMicros(int64_t d) { now_.fetch_add(d, std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace gpupool
