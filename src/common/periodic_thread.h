// PeriodicThread: a background thread that runs one task every `period` of an injected
// Clock's time, and at once when Kick() asks. Its waits are the clock's, so under a
// ManualClock it runs only when a test advances time past its next run or kicks it.
// The controller's services (the telemetry flush and idle policy, the pool's accounting)
// each run on one.
//
// The task never runs twice at once; kicks that come while it runs make one more run.
// Thread-safe. The object owns its thread: Stop() (or the destructor) ends it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "common/clock.h"

namespace gpupool {

class PeriodicThread {
 public:
  // `clock` must outlive the object; `period_us` > 0.
  PeriodicThread(const Clock* clock, int64_t period_us, std::function<void()> task)
      : clock_(clock), period_us_(period_us), task_(std::move(task)) {}
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Starts the thread; its first run is one period from now (or at a Kick). Once only.
  void Start();
  // Asks for a run now (the thread need not be started: the run waits for Start).
  void Kick();
  // Ends the thread after the run under way, if any; no run starts after it. Idempotent.
  void Stop();

  // How many runs have ended. For tests, with WaitForRuns: after advancing a ManualClock
  // a test waits for the run it caused (as ManualClock::WaitForWaiters lets loops settle).
  uint64_t runs() const;
  // Blocks, for up to `real_timeout_ms` of real time, until at least `n` runs have ended.
  // Returns whether they had.
  bool WaitForRuns(uint64_t n, int real_timeout_ms = 10'000) const;

 private:
  void Loop();

  const Clock* clock_;
  const int64_t period_us_;
  const std::function<void()> task_;
  mutable std::mutex mu_;
  std::condition_variable cv_;               // a kick or Stop
  mutable std::condition_variable runs_cv_;  // runs_ grew
  bool started_ = false;
  bool stopping_ = false;
  bool kicked_ = false;
  uint64_t runs_ = 0;
  std::thread thread_;
};

}  // namespace gpupool
