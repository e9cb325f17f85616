// TelemetryHub: what the agents' telemetry batches (protocol 1.3) tell the controller.
//
// It keeps, in memory: the latest sample of every GPU (GET /v1/nodes); per-job figures
// (mean and peak utilisation, peak memory, utilisation-weighted GPU-hours, whether the
// job's GPUs sit idle) as running totals, for the retention; the pool's 1-minute series,
// for the retention (one point a minute); and the 1-minute series of every GPU and job
// for the last `memory_window_s` only. Older GPU and job points are the store's: the
// caller reads them (store::ListTelemetry, points before MemoryFromMs()) and hands them to
// the series calls, which merge them with memory's. So memory grows with the pool and the
// number of jobs, not with the retention.
//
// Points go to the store in batches (TakeDirty), written by the caller without any
// controller lock; a point that changes after it was written (a late batch) is written
// again. Besides each GPU's and job's minutes ("gpu", "job"), the store keeps each job's
// running total ("job_total", at the job's first minute) and the pool's minutes ("pool"),
// so that Load() rebuilds figures after a restart from a few rows per job and per minute.
//
// Used GPU-hours: a job's share of the GPU x the GPU's utilisation x time; on a GPU held
// by several jobs whose source measures per-process utilisation (NVML), what the job's
// processes used instead, at most its share.
//
// Times: a sample carries the agent's wall clock; one more than 60 s ahead of the
// controller's is taken as now, and so are all of a batch that is all older than the
// memory window (a clock behind); otherwise a sample older than the window is dropped
// (a backlog whose minutes have left memory). Between two samples of
// one GPU at most 60 s count towards GPU-hours, so an agent that was away adds nothing.
//
// Thread-safe: one mutex of its own, never held while calling out (not the controller's
// mutex, and no store call is made under it).
#pragma once

#include <algorithm>
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
  int64_t retention_s = int64_t{7} * 24 * 3600;  // series points older than this are dropped
  double idle_below_pct = 5;                     // a job's GPUs all below this ...
  int64_t idle_after_s = int64_t{30} * 60;       // ... for this long: the job is idle
  std::string idle_action;                       // "" (off), "warn" or "cancel"
  // With "cancel": an idle job is cancelled once idle this much longer than idle_after_s
  // (it was warned meanwhile).
  int64_t idle_cancel_after_s = 0;
  // GPU and job series points younger than this stay in memory; older ones are read from
  // the store. At most the retention (the whole retention with a store that keeps no
  // telemetry: TelemetryService::Configure).
  int64_t memory_window_s = 3600;
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

  // Series points before this minute are the store's, from this one on memory's (the
  // start of the memory window, which only moves forward).
  int64_t MemoryFromMs() const;
  // The step, in ms, that the series calls use for `step_s` (whole minutes, at least one);
  // ask the store for older points in the same steps.
  static int64_t StepMs(int64_t step_s);

  // Series from `since_ms` in steps of `step_s` (a multiple of 60, at least 60). `older`:
  // the store's points of the same job or GPUs before `split_ms` (a MemoryFromMs() read
  // before the store was), as stored or merged per StepMs(step_s); memory gives the points
  // from `split_ms` on.
  std::vector<TelemetryPoint> JobSeries(
      int64_t job_id, int64_t since_ms, int64_t step_s, int64_t split_ms = 0,
      const std::vector<store::TelemetryRecord>& older = {}) const;
  // gpu < 0: every GPU of the node.
  std::vector<TelemetryPoint> NodeSeries(
      const std::string& node, int gpu, int64_t since_ms, int64_t step_s, int64_t split_ms = 0,
      const std::vector<store::TelemetryRecord>& older = {}) const;
  // The pool's series is in memory for the whole retention. With a step over a minute, the
  // memory and GPU counts are those of the step's fullest minute.
  std::vector<TelemetryPoint> PoolSeries(int64_t since_ms, int64_t step_s) const;
  // The utilisation-weighted GPU-hours of each job with points in [since_ms, until_ms);
  // `older`: the store's job points before `split_ms`, in that range (any step).
  std::map<int64_t, double> UsedGpuHours(
      int64_t since_ms, int64_t until_ms, int64_t split_ms = 0,
      const std::vector<store::TelemetryRecord>& older = {}) const;
  // Each job's used GPU-seconds gathered since the last call (after Load: the stored
  // totals), for the gpupool_used_gpu_seconds_total counter, which the caller keeps.
  // A job whose figures expire before anyone takes its seconds loses them.
  std::map<int64_t, double> TakeUsedGpuSeconds();
  // Puts back seconds the caller took but could not count yet (their job's owner could
  // not be read): the next TakeUsedGpuSeconds returns them again.
  void GiveBackUsedGpuSeconds(const std::map<int64_t, double>& seconds);

  // Points changed since the last call, for the store; and the time before which the
  // store's points are past the retention. Then drops from memory what is past the memory
  // window (series) or the retention (job totals, the pool's series).
  std::vector<store::TelemetryRecord> TakeDirty(int64_t* expire_before_ms);
  // Puts points that could not be written back in the queue.
  void Requeue(std::vector<store::TelemetryRecord> records);
  // Rebuilds figures from stored points at start-up: "gpu" and "job" points from
  // MemoryFromMs(), "job_total" and "pool" points of the retention. Idle spans are rebuilt
  // from the job points in the window.
  void Load(const std::vector<store::TelemetryRecord>& records);

  // What the hub holds, for benchmarks and tests.
  struct Footprint {
    size_t gpu_points = 0;
    size_t job_points = 0;
    size_t pool_points = 0;
    size_t jobs = 0;
  };
  Footprint Size() const;

 private:
  struct Bucket {
    double util_sum = 0;
    int64_t samples = 0;
    double peak_pct = 0;
    int64_t mem_max_mib = 0;
    double used_gpu_s = 0;
    int gpus = 0;                   // from the store, or summed (the pool)
    std::vector<uint32_t> gpu_ids;  // which GPUs contributed (a job's minute), sorted
    int Gpus() const { return std::max<int>(gpus, static_cast<int>(gpu_ids.size())); }
  };
  using Series = std::map<int64_t, Bucket>;  // minute start (ms) -> bucket
  struct JobState {
    Series series;               // the memory window
    Bucket total;                // every sample since first_ms (gpus: the most in one minute)
    int64_t first_ms = 0;        // the minute its total is stored at (never changes)
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
  // `memory` from `split_ms` on, with `older` (those of `scope` and `key`) before it.
  static Series Merged(const Series* memory, int64_t split_ms,
                       const std::vector<store::TelemetryRecord>& older, const std::string& scope,
                       const std::string& key, int64_t since_ms);
  static Bucket FromRecord(const store::TelemetryRecord& r);
  static store::TelemetryRecord Record(const std::string& scope, const std::string& key,
                                       int64_t t_ms, const Bucket& b);
  int64_t MemoryFromLocked(int64_t now_ms) const;
  uint32_t GpuIdLocked(const std::string& key);
  void ExpireLocked(int64_t now_ms);

  const Clock* clock_;
  TelemetryOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, GpuState> gpus_;     // GpuKey -> state
  std::map<std::string, uint32_t> gpu_ids_;  // GpuKey -> a small number (job buckets)
  std::map<int64_t, JobState> jobs_;
  Series pool_;
  std::set<std::pair<std::string, int64_t>> dirty_gpu_;  // (GpuKey, minute)
  std::set<std::pair<int64_t, int64_t>> dirty_job_;      // (job, minute)
  std::set<int64_t> dirty_total_;                        // jobs
  std::set<int64_t> dirty_pool_;                         // minutes
  std::vector<store::TelemetryRecord> requeued_;
  std::map<int64_t, double> used_untaken_s_;  // by job, since the last TakeUsedGpuSeconds
};

}  // namespace gpupool::controller
