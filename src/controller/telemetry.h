// TelemetryHub: what the agents' telemetry batches (protocol 1.3) tell the controller.
//
// It keeps, in memory: the latest sample of every GPU (GET /v1/nodes), per-job figures
// (mean and peak utilisation, peak memory, utilisation-weighted GPU-hours, whether the
// job's GPUs sit idle), and 1-minute series per GPU and per job for `retention`
// (GET /v1/telemetry). Series points go to the store in batches (TakeDirty), written by
// the caller without any controller lock; a point that changes after it was written
// (a late batch) is written again. Load() rebuilds series and per-job figures from the
// store after a restart.
//
// Times: a sample carries the agent's wall clock; one more than 60 s ahead of the
// controller's, or older than the retention, is taken as now. Between two samples of one
// GPU at most 60 s count towards GPU-hours, so an agent that was away adds nothing.
//
// Thread-safe: one mutex of its own, never held while calling out (not the controller's
// mutex, and no store call is made under it).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "protocol/agent_protocol.h"
#include "store/store.h"

namespace gpupool::controller {

struct TelemetryOptions {
  int64_t retention_s = 7 * 24 * 3600;  // series points older than this are dropped
  double idle_below_pct = 5;            // a job's GPUs all below this ...
  int64_t idle_after_s = 30 * 60;       // ... for this long: the job is idle
  std::string idle_action;              // "" (off), "warn" or "cancel"
  // With "cancel": an idle job is cancelled once idle this much longer than idle_after_s
  // (it was warned meanwhile).
  int64_t idle_cancel_after_s = 0;
};

// Checks the options: InvalidArgument naming the flag.
Status ValidateTelemetryOptions(const TelemetryOptions& o);

// What the samples say about one job.
struct JobGpuUtil {
  double mean_pct = 0;        // over every sample of every GPU of the job
  double peak_pct = 0;        // the highest GPU utilisation seen
  int64_t peak_mem_mib = 0;   // the most memory one of its GPUs held
  double used_gpu_hours = 0;  // sum of share x utilisation x time
  bool idle = false;          // all its GPUs below idle_below_pct for idle_after_s
  int64_t idle_since_ms = 0;  // since when they are below (set while idle)
  int64_t last_ms = 0;        // its newest sample
};

// One point of a series: the mean utilisation over the step, the memory (the peak of a
// job's GPUs; the sum over GPUs for a node or the pool) and how many GPUs were sampled.
struct TelemetryPoint {
  int64_t t_ms = 0;
  double util_pct = 0;
  int64_t mem_used_mib = 0;
  int gpus = 0;
  friend bool operator==(const TelemetryPoint&, const TelemetryPoint&) = default;
};

// A GPU's latest sample, with its node.
struct LatestGpu {
  std::string node;
  protocol::GpuTelemetry sample;
};

class TelemetryHub {
 public:
  // `clock` must outlive the hub.
  TelemetryHub(const Clock* clock, TelemetryOptions options = {});

  const TelemetryOptions& options() const { return options_; }

  // Takes in one agent batch for `node`. Returns the number of samples kept.
  size_t Ingest(const std::string& node, const protocol::TelemetryBatch& batch);

  // The latest sample of every GPU of `node` (by GPU index); of all nodes.
  std::map<int, protocol::GpuTelemetry> LatestOfNode(const std::string& node) const;
  std::vector<LatestGpu> AllLatest() const;
  // Forgets a node's latest samples (it went down): they would be shown as current.
  void ForgetNode(const std::string& node);

  // Per-job figures; nullopt before the job's first sample.
  std::optional<JobGpuUtil> Job(int64_t job_id) const;
  // Jobs whose figures say idle now, with since when.
  std::map<int64_t, int64_t> IdleJobs() const;

  // Series from `since_ms` in steps of `step_s` (a multiple of 60, at least 60).
  std::vector<TelemetryPoint> JobSeries(int64_t job_id, int64_t since_ms, int64_t step_s) const;
  // gpu < 0: every GPU of the node.
  std::vector<TelemetryPoint> NodeSeries(const std::string& node, int gpu, int64_t since_ms,
                                         int64_t step_s) const;
  std::vector<TelemetryPoint> PoolSeries(int64_t since_ms, int64_t step_s) const;
  // The utilisation-weighted GPU-hours of each job with points in [since_ms, until_ms).
  std::map<int64_t, double> UsedGpuHours(int64_t since_ms, int64_t until_ms) const;
  // Each job's used GPU-seconds since this hub started (plus what Load found): never
  // decreases, for the gpupool_used_gpu_seconds_total counter.
  std::map<int64_t, double> UsedGpuSecondsTotal() const;

  // Points changed since the last call, for the store; and the time before which the
  // store's points are past the retention. Drops expired points from memory.
  std::vector<store::TelemetryRecord> TakeDirty(int64_t* expire_before_ms);
  // Puts points that could not be written back in the queue.
  void Requeue(std::vector<store::TelemetryRecord> records);
  // Rebuilds series and per-job figures from stored points (at start-up).
  void Load(const std::vector<store::TelemetryRecord>& records);

 private:
  struct Bucket {
    double util_sum = 0;
    int64_t samples = 0;
    double peak_pct = 0;
    int64_t mem_max_mib = 0;
    double used_gpu_s = 0;
    std::set<std::string> gpus;  // which GPUs contributed (job series)
    int gpu_count = 0;           // from the store, when `gpus` is not known
    int Gpus() const { return std::max<int>(gpu_count, static_cast<int>(gpus.size())); }
  };
  using Series = std::map<int64_t, Bucket>;  // minute start (ms) -> bucket
  struct JobState {
    Series series;
    int64_t below_since_ms = 0;  // 0: some GPU was busy at its last sample
    int64_t last_ms = 0;
  };
  struct GpuState {
    protocol::GpuTelemetry latest;
    Series series;
  };

  static std::string GpuKey(const std::string& node, int index);
  static std::vector<TelemetryPoint> Downsample(const std::vector<const Series*>& series,
                                                int64_t since_ms, int64_t step_s, bool per_gpu);
  static store::TelemetryRecord Record(const std::string& scope, const std::string& key,
                                       int64_t t_ms, const Bucket& b);
  void ExpireLocked(int64_t now_ms);

  const Clock* clock_;
  TelemetryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, GpuState> gpus_;  // GpuKey -> state
  std::map<int64_t, JobState> jobs_;
  std::set<std::pair<std::string, int64_t>> dirty_gpu_;  // (GpuKey, minute)
  std::set<std::pair<int64_t, int64_t>> dirty_job_;      // (job, minute)
  std::vector<store::TelemetryRecord> requeued_;
  std::map<int64_t, double> used_total_s_;  // by job; not expired (a counter)
};

}  // namespace gpupool::controller
