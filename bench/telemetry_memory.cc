// Controller memory for GPU telemetry (controller/telemetry.h), side by side: a hub that
// keeps GPU and job series for its memory window (the default, one hour) against one whose
// window is the whole retention (what the controller held before the window: every point
// in memory). Both take the same samples: N nodes x 8 GPUs, one sample per GPU a minute
// (memory grows with minutes, not with samples), each GPU running a sequence of 2-hour
// jobs, flushed (TakeDirty) every 10 minutes as the API does. Prints the heap each hub
// holds (mallinfo2) and its points after each simulated day.
//
//   build/release/bench/telemetry_memory [--nodes 100] [--days 3]
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/clock.h"
#include "controller/telemetry.h"

namespace {

using gpupool::ManualClock;
using gpupool::controller::TelemetryHub;
using gpupool::controller::TelemetryOptions;

size_t HeapBytes() { return mallinfo2().uordblks; }

}  // namespace

int main(int argc, char** argv) {
  int nodes = 100;
  int days = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--nodes") == 0) nodes = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--days") == 0) days = std::atoi(argv[i + 1]);
  }
  if (nodes <= 0 || days <= 0) {
    (void)std::fprintf(stderr, "usage: telemetry_memory [--nodes N>0] [--days D>0]\n");
    return 2;
  }
  constexpr int kGpus = 8;
  constexpr int64_t kT0Ms = 1'700'000'040'000;
  ManualClock clock(kT0Ms * 1000);
  TelemetryOptions windowed;  // defaults: 7-day retention, 1-hour window
  TelemetryOptions everything = windowed;
  everything.memory_window_s = everything.retention_s;

  std::printf("nodes %d x %d GPUs, one sample per GPU a minute, 2-hour jobs\n", nodes, kGpus);
  std::printf("%4s  %-10s %12s %12s %12s %8s\n", "day", "window", "heap MiB", "gpu points",
              "job points", "jobs");
  std::unique_ptr<TelemetryHub> hubs[2];
  size_t heap[2] = {0, 0};
  // Build each hub alone, so that its heap is its own: first the windowed one, then the
  // other, over the same samples.
  for (int which = 0; which < 2; ++which) {
    clock.SetMicros(kT0Ms * 1000);
    const size_t before = HeapBytes();
    hubs[which] = std::make_unique<TelemetryHub>(&clock, which == 0 ? windowed : everything);
    TelemetryHub& hub = *hubs[which];
    for (int64_t minute = 0; minute < int64_t{days} * 1440; ++minute) {
      const int64_t at = kT0Ms + minute * 60'000;
      clock.SetMicros(at * 1000);
      for (int n = 0; n < nodes; ++n) {
        gpupool::protocol::TelemetryBatch b;
        b.node = "node-" + std::to_string(n);
        for (int g = 0; g < kGpus; ++g) {
          gpupool::protocol::GpuTelemetry s;
          s.index = g;
          s.at_ms = at;
          s.util_pct = static_cast<double>((minute * 7 + n * 13 + g * 29) % 101);
          s.mem_used_mib = 1000 + (minute + g) % 4000;
          s.mem_total_mib = 81920;
          const int64_t job = 1 + (int64_t{n} * kGpus + g) * 1000 + minute / 120;
          s.jobs.push_back({job, 1000});
          b.samples.push_back(std::move(s));
        }
        hub.Ingest(b.node, b);
      }
      if (minute % 10 == 9) {
        int64_t expire = 0;
        (void)hub.TakeDirty(&expire);  // the store's part; dropped here
      }
      if (minute % 1440 == 1439) {
        const TelemetryHub::Footprint f = hub.Size();
        heap[which] = HeapBytes() - before;
        std::printf("%4lld  %-10s %12.1f %12zu %12zu %8zu\n",
                    static_cast<long long>(minute / 1440 + 1), which == 0 ? "1 hour" : "retention",
                    static_cast<double>(heap[which]) / (1 << 20), f.gpu_points, f.job_points,
                    f.jobs);
        (void)std::fflush(stdout);
      }
    }
    if (which == 0) hubs[0].reset();  // its heap is not counted in the other's
  }
  std::printf("after %d days: windowed %.1f MiB, everything in memory %.1f MiB (%.1fx)\n", days,
              static_cast<double>(heap[0]) / (1 << 20), static_cast<double>(heap[1]) / (1 << 20),
              static_cast<double>(heap[1]) / static_cast<double>(std::max<size_t>(heap[0], 1)));
  return 0;
}
