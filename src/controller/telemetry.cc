#include "controller/telemetry.h"

#include <algorithm>

namespace gpupool::controller {
namespace {

constexpr int64_t kMinuteMs = 60'000;
constexpr int64_t kMaxGapMs = 60'000;     // at most this much counts between samples
constexpr int64_t kMaxAheadMs = 60'000;   // agent clocks ahead of ours by more: now
constexpr int64_t kMaxDirty = 1'000'000;  // points queued for the store at most

int64_t MinuteOf(int64_t t_ms) { return t_ms - t_ms % kMinuteMs; }

}  // namespace

Status ValidateTelemetryOptions(const TelemetryOptions& o) {
  if (o.retention_s < 3600 || o.retention_s > int64_t{366} * 24 * 3600) {
    return Status::InvalidArgument("--telemetry-retention: between 1h and 366d");
  }
  if (!(o.idle_below_pct >= 0 && o.idle_below_pct <= 100)) {
    return Status::InvalidArgument("--idle-threshold: a percentage, 0 to 100");
  }
  if (o.idle_after_s < 60) return Status::InvalidArgument("--idle-after: at least 1m");
  if (!o.idle_action.empty() && o.idle_action != "warn" && o.idle_action != "cancel") {
    return Status::InvalidArgument("--idle-action: use warn or cancel (or leave it out: off)");
  }
  if (o.idle_cancel_after_s < 0) return Status::InvalidArgument("--idle-cancel-after: >= 0");
  return Status::Ok();
}

TelemetryHub::TelemetryHub(const Clock* clock, TelemetryOptions options)
    : clock_(clock), options_(std::move(options)) {}

std::string TelemetryHub::GpuKey(const std::string& node, int index) {
  return node + "/" + std::to_string(index);
}

size_t TelemetryHub::Ingest(const std::string& node, const protocol::TelemetryBatch& batch) {
  const int64_t now_ms = clock_->NowMicros() / 1000;
  const int64_t oldest_ms = now_ms - options_.retention_s * 1000;
  std::vector<const protocol::GpuTelemetry*> order;
  for (const protocol::GpuTelemetry& g : batch.samples) order.push_back(&g);
  // Oldest first, so that gaps and idle spans are measured forward in time.
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->at_ms < b->at_ms; });
  std::lock_guard lock(mu_);
  size_t kept = 0;
  for (const protocol::GpuTelemetry* in : order) {
    protocol::GpuTelemetry g = *in;
    if (g.at_ms > now_ms + kMaxAheadMs || g.at_ms < oldest_ms) g.at_ms = now_ms;
    const std::string key = GpuKey(node, g.index);
    GpuState& gs = gpus_[key];
    const int64_t prev_ms = gs.latest.at_ms;
    const int64_t gap_ms =
        prev_ms > 0 && g.at_ms > prev_ms ? std::min(g.at_ms - prev_ms, kMaxGapMs) : 0;
    if (g.at_ms >= prev_ms) gs.latest = g;
    ++kept;
    if (!g.util_pct) continue;  // no utilisation: only the latest figures change
    const double util = *g.util_pct;
    const int64_t minute = MinuteOf(g.at_ms);
    Bucket& b = gs.series[minute];
    b.util_sum += util;
    ++b.samples;
    b.peak_pct = std::max(b.peak_pct, util);
    b.mem_max_mib = std::max(b.mem_max_mib, g.mem_used_mib.value_or(0));
    b.gpus.insert(key);
    if (dirty_gpu_.size() < kMaxDirty) dirty_gpu_.insert({key, minute});
    for (const protocol::TelemetryJob& t : g.jobs) {
      JobState& js = jobs_[t.job_id];
      Bucket& jb = js.series[minute];
      jb.util_sum += util;
      ++jb.samples;
      jb.peak_pct = std::max(jb.peak_pct, util);
      jb.mem_max_mib = std::max(jb.mem_max_mib, g.mem_used_mib.value_or(0));
      const double used_s =
          t.gpu_milli / 1000.0 * util / 100.0 * static_cast<double>(gap_ms) / 1000.0;
      jb.used_gpu_s += used_s;
      used_total_s_[t.job_id] += used_s;
      jb.gpus.insert(key);
      if (dirty_job_.size() < kMaxDirty) dirty_job_.insert({t.job_id, minute});
      if (g.at_ms >= js.last_ms) {
        if (util < options_.idle_below_pct) {
          if (js.below_since_ms == 0) js.below_since_ms = g.at_ms;
        } else {
          js.below_since_ms = 0;
        }
        js.last_ms = g.at_ms;
      }
    }
  }
  return kept;
}

std::map<int, protocol::GpuTelemetry> TelemetryHub::LatestOfNode(const std::string& node) const {
  std::map<int, protocol::GpuTelemetry> out;
  std::lock_guard lock(mu_);
  const std::string prefix = node + "/";
  for (auto it = gpus_.lower_bound(prefix); it != gpus_.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    if (it->second.latest.at_ms > 0) out[it->second.latest.index] = it->second.latest;
  }
  return out;
}

std::vector<LatestGpu> TelemetryHub::AllLatest() const {
  std::vector<LatestGpu> out;
  std::lock_guard lock(mu_);
  for (const auto& [key, gs] : gpus_) {
    if (gs.latest.at_ms == 0) continue;
    out.push_back({key.substr(0, key.rfind('/')), gs.latest});
  }
  return out;
}

void TelemetryHub::ForgetNode(const std::string& node) {
  std::lock_guard lock(mu_);
  const std::string prefix = node + "/";
  for (auto it = gpus_.lower_bound(prefix); it != gpus_.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    it->second.latest = {};
  }
}

std::optional<JobGpuUtil> TelemetryHub::Job(int64_t job_id) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  const JobState& js = it->second;
  JobGpuUtil u;
  double sum = 0;
  int64_t n = 0;
  for (const auto& [t, b] : js.series) {
    sum += b.util_sum;
    n += b.samples;
    u.peak_pct = std::max(u.peak_pct, b.peak_pct);
    u.peak_mem_mib = std::max(u.peak_mem_mib, b.mem_max_mib);
    u.used_gpu_hours += b.used_gpu_s / 3600.0;
  }
  if (n == 0) return std::nullopt;
  u.mean_pct = sum / static_cast<double>(n);
  u.last_ms = js.last_ms;
  if (js.below_since_ms > 0 && js.last_ms - js.below_since_ms >= options_.idle_after_s * 1000) {
    u.idle = true;
    u.idle_since_ms = js.below_since_ms;
  }
  return u;
}

std::map<int64_t, int64_t> TelemetryHub::IdleJobs() const {
  std::map<int64_t, int64_t> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, js] : jobs_) {
    if (js.below_since_ms > 0 && js.last_ms - js.below_since_ms >= options_.idle_after_s * 1000) {
      out[id] = js.below_since_ms;
    }
  }
  return out;
}

std::vector<TelemetryPoint> TelemetryHub::Downsample(const std::vector<const Series*>& series,
                                                     int64_t since_ms, int64_t step_s,
                                                     bool per_gpu) {
  const int64_t step_ms = std::max<int64_t>(60, step_s - step_s % 60) * 1000;
  // Per step: utilisation sums over all series; memory: per series the peak in the step,
  // then the peak over series (a job) or their sum (a node, the pool).
  struct Acc {
    double util_sum = 0;
    int64_t samples = 0;
    int64_t mem = 0;
    int gpus = 0;
  };
  std::map<int64_t, Acc> steps;
  for (const Series* s : series) {
    std::map<int64_t, std::pair<int64_t, int>> mine;  // step -> (mem peak, gpus)
    for (auto it = s->lower_bound(MinuteOf(since_ms)); it != s->end(); ++it) {
      const int64_t t = it->first - it->first % step_ms;
      Acc& a = steps[t];
      a.util_sum += it->second.util_sum;
      a.samples += it->second.samples;
      auto& [mem, gpus] = mine[t];
      mem = std::max(mem, it->second.mem_max_mib);
      gpus = std::max(gpus, it->second.Gpus());
    }
    for (const auto& [t, mg] : mine) {
      Acc& a = steps[t];
      a.mem = per_gpu ? a.mem + mg.first : std::max(a.mem, mg.first);
      a.gpus = per_gpu ? a.gpus + mg.second : std::max(a.gpus, mg.second);
    }
  }
  std::vector<TelemetryPoint> out;
  for (const auto& [t, a] : steps) {
    if (a.samples == 0) continue;
    out.push_back({t, a.util_sum / static_cast<double>(a.samples), a.mem, a.gpus});
  }
  return out;
}

std::vector<TelemetryPoint> TelemetryHub::JobSeries(int64_t job_id, int64_t since_ms,
                                                    int64_t step_s) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return {};
  return Downsample({&it->second.series}, since_ms, step_s, /*per_gpu=*/false);
}

std::vector<TelemetryPoint> TelemetryHub::NodeSeries(const std::string& node, int gpu,
                                                     int64_t since_ms, int64_t step_s) const {
  std::lock_guard lock(mu_);
  std::vector<const Series*> series;
  const std::string prefix = node + "/";
  for (auto it = gpus_.lower_bound(prefix); it != gpus_.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    if (gpu < 0 || it->first == GpuKey(node, gpu)) series.push_back(&it->second.series);
  }
  return Downsample(series, since_ms, step_s, /*per_gpu=*/true);
}

std::vector<TelemetryPoint> TelemetryHub::PoolSeries(int64_t since_ms, int64_t step_s) const {
  std::lock_guard lock(mu_);
  std::vector<const Series*> series;
  for (const auto& [key, gs] : gpus_) series.push_back(&gs.series);
  return Downsample(series, since_ms, step_s, /*per_gpu=*/true);
}

std::map<int64_t, double> TelemetryHub::UsedGpuHours(int64_t since_ms, int64_t until_ms) const {
  std::map<int64_t, double> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, js] : jobs_) {
    double s = 0;
    for (auto it = js.series.lower_bound(MinuteOf(since_ms));
         it != js.series.end() && it->first < until_ms; ++it) {
      s += it->second.used_gpu_s;
    }
    if (s > 0) out[id] = s / 3600.0;
  }
  return out;
}

std::map<int64_t, double> TelemetryHub::UsedGpuSecondsTotal() const {
  std::lock_guard lock(mu_);
  return used_total_s_;
}

store::TelemetryRecord TelemetryHub::Record(const std::string& scope, const std::string& key,
                                            int64_t t_ms, const Bucket& b) {
  return {scope,      key,           t_ms,         b.util_sum, b.samples,
          b.peak_pct, b.mem_max_mib, b.used_gpu_s, b.Gpus()};
}

void TelemetryHub::ExpireLocked(int64_t now_ms) {
  const int64_t before = MinuteOf(now_ms - options_.retention_s * 1000);
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    Series& s = it->second.series;
    s.erase(s.begin(), s.lower_bound(before));
    if (s.empty() && it->second.latest.at_ms < before) {
      it = gpus_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Series& s = it->second.series;
    s.erase(s.begin(), s.lower_bound(before));
    if (s.empty()) {
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<store::TelemetryRecord> TelemetryHub::TakeDirty(int64_t* expire_before_ms) {
  const int64_t now_ms = clock_->NowMicros() / 1000;
  std::lock_guard lock(mu_);
  ExpireLocked(now_ms);
  *expire_before_ms = MinuteOf(now_ms - options_.retention_s * 1000);
  std::vector<store::TelemetryRecord> out = std::move(requeued_);
  requeued_.clear();
  for (const auto& [key, minute] : dirty_gpu_) {
    auto g = gpus_.find(key);
    if (g == gpus_.end()) continue;
    if (auto b = g->second.series.find(minute); b != g->second.series.end()) {
      out.push_back(Record("gpu", key, minute, b->second));
    }
  }
  for (const auto& [id, minute] : dirty_job_) {
    auto j = jobs_.find(id);
    if (j == jobs_.end()) continue;
    if (auto b = j->second.series.find(minute); b != j->second.series.end()) {
      out.push_back(Record("job", std::to_string(id), minute, b->second));
    }
  }
  dirty_gpu_.clear();
  dirty_job_.clear();
  return out;
}

void TelemetryHub::Requeue(std::vector<store::TelemetryRecord> records) {
  std::lock_guard lock(mu_);
  // A later TakeDirty writes the newest value of a point that changed meanwhile after
  // this older copy (the store keeps the last write).
  if (requeued_.size() + records.size() > static_cast<size_t>(kMaxDirty)) return;
  for (auto& r : records) requeued_.push_back(std::move(r));
}

void TelemetryHub::Load(const std::vector<store::TelemetryRecord>& records) {
  std::lock_guard lock(mu_);
  for (const store::TelemetryRecord& r : records) {
    Bucket b;
    b.util_sum = r.util_sum;
    b.samples = r.samples;
    b.peak_pct = r.peak_pct;
    b.mem_max_mib = r.mem_max_mib;
    b.used_gpu_s = r.used_gpu_s;
    b.gpu_count = r.gpus;
    if (r.scope == "gpu") {
      gpus_[r.key].series[r.t_ms] = std::move(b);
    } else if (r.scope == "job") {
      const int64_t id = std::strtoll(r.key.c_str(), nullptr, 10);
      if (id <= 0) continue;
      JobState& js = jobs_[id];
      if (auto old = js.series.find(r.t_ms); old != js.series.end()) {
        used_total_s_[id] -= old->second.used_gpu_s;
      }
      used_total_s_[id] += b.used_gpu_s;
      js.series[r.t_ms] = std::move(b);
      js.last_ms = std::max(js.last_ms, r.t_ms);
    }
  }
}

}  // namespace gpupool::controller
