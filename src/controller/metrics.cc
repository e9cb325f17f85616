#include "controller/metrics.h"

#include <charconv>
#include <cmath>

#include "common/strings.h"

namespace gpupool::controller {
namespace {

// Scheduling passes take microseconds to seconds (docs/benchmarks.md); with 100,000
// queued jobs on thousands of nodes, several seconds (issue 31: bench/pool/scale.py reads
// its p99 from here, so the buckets go on to 30 s).
const std::vector<double> kPassBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                         0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                         1,      2.5,     5,      10,    30};
// API requests that do not wait: sub-millisecond to a store write or an image inspection.
const std::vector<double> kRequestBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                            0.05,   0.1,   0.25,   0.5,   1,    2.5};

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest text that reads back as the same double (0.0005, not 0.00050000000000000001).
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

void Family(const std::string& name, const std::string& type, const std::string& help,
            std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Sample(const std::string& name, const std::string& labels, double value, std::string* out) {
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += " " + Number(value) + "\n";
}

std::string Label(const std::string& key, const std::string& value) {
  return key + "=\"" + EscapeLabel(value) + "\"";
}

// Preemption's counters (docs/preemption.md).
void RenderPreemptions(uint64_t preemptions, double gpu_hours, uint64_t withdrawn,
                       std::string* out) {
  Family("gpupool_preemptions_total", "counter",
         "Running jobs the scheduler told to stop so that waiting jobs could start.", out);
  Sample("gpupool_preemptions_total", "", static_cast<double>(preemptions), out);
  // Prometheus wants base units: GPU-seconds (GPU-hours x 3600).
  Family("gpupool_preempted_gpu_seconds_total", "counter",
         "GPU-seconds the preempted attempts had run when they were stopped (work lost, at "
         "most).",
         out);
  Sample("gpupool_preempted_gpu_seconds_total", "", gpu_hours * 3600, out);
  Family("gpupool_preemptors_withdrawn_total", "counter",
         "Jobs that preempted another user's job and were withdrawn by their user (cancelled, "
         "held) before they started; each barred its user from preempting for a while.",
         out);
  Sample("gpupool_preemptors_withdrawn_total", "", static_cast<double>(withdrawn), out);
}

}  // namespace

std::string EscapeLabel(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string* out) const {
  const std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
    Sample(name + "_bucket", sep + Label("le", Number(le)), static_cast<double>(cumulative), out);
  }
  Sample(name + "_sum", labels, sum_, out);
  Sample(name + "_count", labels, static_cast<double>(count_), out);
}

std::string PendingReasonClass(const std::string& reason) {
  if (StartsWith(reason, "held by ")) return "held";
  if (StartsWith(reason, "waits for attempt ")) return "stopping";
  if (StartsWith(reason, "waits for job") || StartsWith(reason, "waits for array")) {
    return "dependency";
  }
  if (StartsWith(reason, "waits: ")) return "limit";
  if (StartsWith(reason, "array ")) return "array_limit";
  if (StartsWith(reason, "cannot run on any node")) return "unplaceable";
  if (StartsWith(reason, "waiting for its turn")) return "queue";
  if (StartsWith(reason, "needs ")) return "resources";
  return "other";
}

PoolMetrics::PoolMetrics() : pass_seconds_(kPassBounds) {}

void PoolMetrics::ObservePass(double seconds, int64_t placement_failures) {
  std::lock_guard lock(mu_);
  pass_seconds_.Observe(seconds);
  ++passes_;
  placement_failures_ += static_cast<uint64_t>(std::max<int64_t>(placement_failures, 0));
}

void PoolMetrics::CountPreemption() {
  std::lock_guard lock(mu_);
  ++preemptions_;
}

void PoolMetrics::CountWithdrawnPreemptor() {
  std::lock_guard lock(mu_);
  ++preemptors_withdrawn_;
}

void PoolMetrics::CountPreemptedGpuHours(double gpu_hours) {
  std::lock_guard lock(mu_);
  preempted_gpu_hours_ += gpu_hours;
}

void PoolMetrics::ObserveRequest(const std::string& method, const std::string& route,
                                 double seconds) {
  std::lock_guard lock(mu_);
  auto it = requests_.find({method, route});
  if (it == requests_.end()) {
    it = requests_.emplace(std::make_pair(method, route), Histogram(kRequestBounds)).first;
  }
  it->second.Observe(seconds);
}

namespace {

// The GPU health families (docs/health.md).
void RenderHealth(const PoolSnapshot& pool, std::string* out) {
  Family("gpupool_gpu_health", "gauge",
         "GPUs of the nodes that are not down, by health state (docs/health.md): cordoned "
         "and failed GPUs take no new work.",
         out);
  for (const char* state : {"healthy", "suspect", "cordoned", "failed"}) {
    auto it = pool.gpus_by_health.find(state);
    Sample("gpupool_gpu_health", Label("state", state),
           it == pool.gpus_by_health.end() ? 0 : static_cast<double>(it->second), out);
  }
  Family("gpupool_gpu_health_state", "gauge",
         "1 for each GPU of a node that is not down and is not healthy, labelled with its "
         "state (docs/health.md); its reason is in GET /v1/nodes.",
         out);
  for (const GpuHealthGauge& g : pool.unhealthy_gpus) {
    Sample("gpupool_gpu_health_state",
           Label("Hostname", g.hostname) + "," + Label("gpu", std::to_string(g.index)) + "," +
               Label("UUID", g.uuid) + "," + Label("state", g.state),
           1, out);
  }
  Family("gpupool_health_actions_held_total", "counter",
         "GPU or node cordons the health circuit breaker held back (docs/health.md): errors "
         "recorded, not acted on. Alert on any increase.",
         out);
  Sample("gpupool_health_actions_held_total", "", static_cast<double>(pool.health_actions_held),
         out);
  Family("gpupool_node_disk_free_bytes", "gauge",
         "Room left on the filesystem of each node's agent state directory, as its disk watch "
         "last reported it (docs/health.md).",
         out);
  for (const NodeDiskGauge& d : pool.node_disks) {
    Sample("gpupool_node_disk_free_bytes", Label("Hostname", d.hostname),
           static_cast<double>(d.free_bytes), out);
  }
  Family("gpupool_node_disk_size_bytes", "gauge", "Size of that filesystem, as last reported.",
         out);
  for (const NodeDiskGauge& d : pool.node_disks) {
    Sample("gpupool_node_disk_size_bytes", Label("Hostname", d.hostname),
           static_cast<double>(d.total_bytes), out);
  }
  Family("gpupool_node_disk_pressure", "gauge",
         "1 while the node's disk watch reports too little room (the node is drained), else 0.",
         out);
  for (const NodeDiskGauge& d : pool.node_disks) {
    Sample("gpupool_node_disk_pressure", Label("Hostname", d.hostname), d.pressure ? 1 : 0, out);
  }
}

}  // namespace

std::string PoolMetrics::Render(const PoolSnapshot& pool) const {
  std::string out;
  Family("gpupool_jobs", "gauge", "Jobs in the store, by state.", &out);
  for (const char* state :
       {"PENDING", "ASSIGNED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "TIMEOUT", "LOST"}) {
    auto it = pool.jobs_by_state.find(state);
    Sample("gpupool_jobs", Label("state", state),
           it == pool.jobs_by_state.end() ? 0 : static_cast<double>(it->second), &out);
  }
  Family("gpupool_jobs_pending", "gauge",
         "Pending jobs by why they wait (the class of their pending reason).", &out);
  for (const char* why : {"resources", "unplaceable", "queue", "dependency", "held", "limit",
                          "array_limit", "stopping", "other"}) {
    auto it = pool.pending_by_reason.find(why);
    Sample("gpupool_jobs_pending", Label("reason", why),
           it == pool.pending_by_reason.end() ? 0 : static_cast<double>(it->second), &out);
  }
  Family("gpupool_nodes", "gauge", "Nodes by state.", &out);
  for (const char* state : {"up", "unknown", "down", "draining", "drained"}) {
    auto it = pool.nodes_by_state.find(state);
    Sample("gpupool_nodes", Label("state", state),
           it == pool.nodes_by_state.end() ? 0 : static_cast<double>(it->second), &out);
  }
  Family("gpupool_gpus", "gauge", "GPUs of the nodes that are up.", &out);
  Sample("gpupool_gpus", "", static_cast<double>(pool.gpus_total), &out);
  RenderHealth(pool, &out);
  Family("gpupool_gpus_allocated", "gauge",
         "GPUs held by jobs, shares added up (two half-GPU jobs are 1).", &out);
  Sample("gpupool_gpus_allocated", "", pool.gpus_allocated, &out);
  // Prometheus wants base units: GPU-seconds (GPU-hours x 3600).
  Family("gpupool_allocated_gpu_seconds_total", "counter",
         "GPU time held by jobs, by user and project (running jobs up to now); / 3600 for "
         "GPU-hours.",
         &out);
  for (const auto& [key, hours] : pool.gpu_hours) {
    Sample("gpupool_allocated_gpu_seconds_total",
           Label("user", key.first) + "," + Label("project", key.second), hours * 3600, &out);
  }
  Family("gpupool_used_gpu_seconds_total", "counter",
         "GPU time used by jobs: their share x their GPUs' measured utilisation x time, by "
         "user and project (GPU telemetry); / 3600 for GPU-hours.",
         &out);
  for (const auto& [key, hours] : pool.used_gpu_hours) {
    Sample("gpupool_used_gpu_seconds_total",
           Label("user", key.first) + "," + Label("project", key.second), hours * 3600, &out);
  }
  // dcgm-exporter's names, types, units and labels (its default counters), so its
  // dashboards and alerts work unchanged.
  struct Gauge {
    const char* name;
    const char* type;
    const char* help;
    std::optional<double> GpuGauges::*value;
  };
  const Gauge kGauges[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", &GpuGauges::util_pct},
      {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
       &GpuGauges::fb_used_mib},
      {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
       &GpuGauges::fb_free_mib},
      {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", &GpuGauges::power_w},
      {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", &GpuGauges::temp_c},
      {"DCGM_FI_DEV_XID_ERRORS", "gauge",
       "Value of the last XID error encountered (0: none since the node's agent started).",
       &GpuGauges::xid_errors},
      {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
       "Volatile double-bit ECC errors (uncorrected, since the driver loaded).",
       &GpuGauges::ecc_dbe_vol_total},
  };
  for (const Gauge& g : kGauges) {
    bool any = false;
    for (const GpuGauges& gpu : pool.gpus) any = any || (gpu.*g.value).has_value();
    if (!any) continue;
    Family(g.name, g.type, g.help, &out);
    for (const GpuGauges& gpu : pool.gpus) {
      if (!(gpu.*g.value)) continue;
      std::string labels = Label("gpu", std::to_string(gpu.gpu)) + "," + Label("UUID", gpu.uuid) +
                           "," + Label("device", gpu.device) + "," +
                           Label("modelName", gpu.model_name) + "," +
                           Label("Hostname", gpu.hostname);
      if (!gpu.hpc_job.empty()) {
        labels += "," + Label("hpc_job", gpu.hpc_job) + "," + Label("user", gpu.user);
      }
      Sample(g.name, labels, *(gpu.*g.value), &out);
    }
  }
  std::lock_guard lock(mu_);
  Family("gpupool_scheduling_pass_seconds", "histogram",
         "How long a scheduling pass took (planning and applying).", &out);
  pass_seconds_.Render("gpupool_scheduling_pass_seconds", "", &out);
  Family("gpupool_placement_failures_total", "counter",
         "Pending jobs a pass could not place for want of resources, added up over passes.", &out);
  Sample("gpupool_placement_failures_total", "", static_cast<double>(placement_failures_), &out);
  RenderPreemptions(preemptions_, preempted_gpu_hours_, preemptors_withdrawn_, &out);
  Family("gpupool_api_request_duration_seconds", "histogram",
         "API requests that do not wait (no long polls), by method and route.", &out);
  for (const auto& [key, h] : requests_) {
    h.Render("gpupool_api_request_duration_seconds",
             Label("method", key.first) + "," + Label("route", key.second), &out);
  }
  return out;
}

}  // namespace gpupool::controller
