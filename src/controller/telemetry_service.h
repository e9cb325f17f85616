// TelemetryService: GPU telemetry (issue 17) as a service of its own. It owns the
// TelemetryHub (telemetry.h) that keeps what agents report, and does the work their
// reports call for apart from the reports themselves: the store writes of the hub's
// points (at most every kFlushPeriodUs; the retention's deletions about hourly) and the
// idle policy (--idle-action), which warns about or cancels running jobs whose GPUs sit
// idle. Both run on the service's own thread (PeriodicThread), every kFlushPeriodUs of
// the injected clock and at once after each report, never on an agent's request thread
// and never under the controller's lock.
//
// Thread-safe. Configure before Start and before the first report.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/periodic_thread.h"
#include "controller/controller.h"
#include "controller/telemetry.h"
#include "store/store.h"

namespace gpupool::controller {

class TelemetryService {
 public:
  static constexpr int64_t kFlushPeriodUs = 30'000'000;
  static constexpr int64_t kExpirePeriodUs = int64_t{3600} * 1'000'000;

  // All three must outlive the service. The hub has the default options until Configure.
  TelemetryService(Controller* controller, store::Store* store, const Clock* clock);
  ~TelemetryService() { Stop(); }

  // Replaces the hub with one of `options`, and loads from the store the job totals and
  // pool series of the retention and the GPU and job points of the memory window.
  // InvalidArgument for bad options (naming the flag); the store's error, with context,
  // when it cannot be read. With a store that keeps no telemetry the hub keeps the whole
  // retention in memory.
  Status Configure(TelemetryOptions options);

  TelemetryHub& hub() { return *hub_; }
  const TelemetryOptions& options() const { return hub_->options(); }

  // Starts the service's thread. Stop ends it, writing the points gathered since the
  // last write first; idempotent.
  void Start() { worker_.Start(); }
  void Stop();

  // Takes in `batch` from the agent of `batch.node`: only that node's GPUs, and on each
  // only the jobs that hold it now, at the share they were given (a process of another
  // job counts for none), so that a node cannot charge or idle another node's jobs,
  // inflate a share, or grow the hub with made-up GPU indices and job ids. Returns how
  // many samples were kept, and has the thread run.
  size_t Ingest(protocol::TelemetryBatch batch);

  // One run of the thread: the idle policy, then the store write when kFlushPeriodUs has
  // passed since the last. Tests without the thread call it, or the two parts, directly.
  void RunOnce();
  // Writes the points gathered since the last write to the store and, about hourly, drops
  // those past the retention. A store that fails keeps the points for the next write.
  void Flush();
  // The idle policy: warns (once a job) about running jobs whose GPUs sit idle, and with
  // idle_action "cancel" cancels those idle for idle_after_s + idle_cancel_after_s.
  // Returns the jobs it cancelled.
  std::vector<int64_t> ApplyIdlePolicy();

  // "5%": the idle threshold as messages name it.
  std::string IdleThreshold() const;

  // The thread, for tests that wait for its runs (PeriodicThread::WaitForRuns).
  const PeriodicThread& worker() const { return worker_; }

 private:
  Controller* controller_;
  store::Store* store_;
  const Clock* clock_;
  std::unique_ptr<TelemetryHub> hub_;
  std::mutex flush_mu_;  // one write at a time
  std::atomic<int64_t> flushed_us_{0};
  std::atomic<int64_t> expired_us_{0};
  std::mutex idle_mu_;
  std::set<int64_t> idle_warned_;  // jobs the policy warned about (guarded by idle_mu_)
  PeriodicThread worker_;          // last: it runs on the members above
};

}  // namespace gpupool::controller
