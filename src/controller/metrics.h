// The pool's Prometheus metrics (GET /metrics, docs/api.md "Metrics"): counters and
// histograms the controller and the API feed as things happen, and the text exposition
// format (version 0.0.4) they are served in with a snapshot of the pool's state.
//
// Names are gpupool_*; base units (seconds), `_total` on counters, one HELP and TYPE per
// family, label values escaped. Thread-safe: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpupool::controller {

// A Prometheus histogram: cumulative buckets by upper bound, a sum and a count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends the `name`_bucket/_sum/_count lines with `labels` ("" or `k="v",...`).
  void Render(const std::string& name, const std::string& labels, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// One GPU's latest telemetry for the dcgm-exporter compatible gauges (DCGM_FI_DEV_*),
// with dcgm-exporter's labels.
struct GpuGauges {
  int gpu = 0;             // label gpu: the index on its node
  std::string uuid;        // UUID
  std::string device;      // device: "nvidia0"
  std::string model_name;  // modelName
  std::string hostname;    // Hostname: the node
  std::string hpc_job;     // hpc_job: the job(s) holding it ("12", "12,40_3"), "" when free
  std::string user;        // user: their owner(s), "" when free
  std::optional<double> util_pct;
  std::optional<double> fb_used_mib;
  std::optional<double> fb_free_mib;
  std::optional<double> power_w;
  std::optional<double> temp_c;
  std::optional<double> xid_errors;         // the last Xid (0: none since the agent started)
  std::optional<double> ecc_dbe_vol_total;  // uncorrected ECC errors since the driver loaded
};

// One GPU that is not healthy (gpu/health_policy.h): gpupool_gpu_health_state's series.
struct GpuHealthGauge {
  std::string hostname;  // Hostname: the node
  int index = 0;         // gpu
  std::string uuid;      // UUID
  std::string state;     // suspect, cordoned or failed
};

// A node's last disk watch report (docs/health.md): gpupool_node_disk_*'s series.
struct NodeDiskGauge {
  std::string hostname;  // Hostname: the node
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  bool pressure = false;
};

// What the pool looks like at the moment of a scrape (Controller::MetricsSnapshot).
struct PoolSnapshot {
  std::map<std::string, int64_t> jobs_by_state;      // every job in the store, by state
  std::map<std::string, int64_t> pending_by_reason;  // PendingReasonClass of each
  std::map<std::string, int64_t> nodes_by_state;     // up, down, draining, drained
  int64_t gpus_total = 0;
  // GPUs of the nodes that are not down by health state (gpu/health_policy.h).
  std::map<std::string, int64_t> gpus_by_health;
  std::vector<GpuHealthGauge> unhealthy_gpus;  // of those nodes, in node and GPU order
  std::vector<NodeDiskGauge> node_disks;       // of those nodes with a report, in node order
  // Cordons the health circuit breaker held back since the controller started.
  int64_t health_actions_held = 0;
  double gpus_allocated = 0;  // shares added up (0.5 = half a GPU)
  // Allocated GPU-hours of every job so far (running ones up to now), by (user, project).
  std::map<std::pair<std::string, std::string>, double> gpu_hours;
  // Utilisation-weighted GPU-hours used (telemetry.h), by (user, project).
  std::map<std::pair<std::string, std::string>, double> used_gpu_hours;
  std::vector<GpuGauges> gpus;  // GPUs of nodes that are up with telemetry
};

// The class of a pending reason, for the gpupool_jobs_pending label: "resources" (no room
// now), "unplaceable" (no node could ever host it), "queue" (jobs ahead), "dependency",
// "held", "limit" (a usage limit), "array_limit", or "other".
std::string PendingReasonClass(const std::string& reason);

class PoolMetrics {
 public:
  PoolMetrics();

  // One scheduling pass: its duration and how many pending jobs it could not place for
  // want of resources.
  void ObservePass(double seconds, int64_t placement_failures);
  // An API request that was not a long poll, by route pattern ("/v1/jobs/{id}").
  void ObserveRequest(const std::string& method, const std::string& route, double seconds);
  // Preemption: a victim told to stop; a preempted attempt ended, having run `gpu_hours`.
  void CountPreemption();
  void CountPreemptedGpuHours(double gpu_hours);
  // A preemptor withdrawn by its user after it preempted another user's job.
  void CountWithdrawnPreemptor();

  // The whole exposition.
  std::string Render(const PoolSnapshot& pool) const;

 private:
  mutable std::mutex mu_;
  Histogram pass_seconds_;
  uint64_t passes_ = 0;
  uint64_t placement_failures_ = 0;
  uint64_t preemptions_ = 0;
  double preempted_gpu_hours_ = 0;
  uint64_t preemptors_withdrawn_ = 0;
  std::map<std::pair<std::string, std::string>, Histogram> requests_;
};

// A label value escaped for the exposition format (backslash, quote, newline).
std::string EscapeLabel(const std::string& value);

}  // namespace gpupool::controller
