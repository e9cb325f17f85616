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
  if (o.memory_window_s < 600) {
    return Status::InvalidArgument("telemetry memory window: at least 10 minutes");
  }
  return Status::Ok();
}

TelemetryHub::TelemetryHub(const Clock* clock, TelemetryOptions options)
    : clock_(clock), options_(std::move(options)) {}

std::string TelemetryHub::GpuKey(const std::string& node, int index) {
  return node + "/" + std::to_string(index);
}

uint32_t TelemetryHub::GpuIdLocked(const std::string& key) {
  auto [it, added] = gpu_ids_.emplace(key, static_cast<uint32_t>(gpu_ids_.size()));
  return it->second;
}

int64_t TelemetryHub::MemoryFromLocked(int64_t now_ms) const {
  return MinuteOf(now_ms - std::min(options_.memory_window_s, options_.retention_s) * 1000);
}

int64_t TelemetryHub::MemoryFromMs() const { return MemoryFromLocked(clock_->NowMicros() / 1000); }

int64_t TelemetryHub::StepMs(int64_t step_s) {
  return std::max<int64_t>(60, step_s - step_s % 60) * 1000;
}

size_t TelemetryHub::Ingest(const std::string& node, const protocol::TelemetryBatch& batch) {
  const int64_t now_ms = clock_->NowMicros() / 1000;
  const int64_t oldest_ms = MemoryFromLocked(now_ms);
  std::vector<const protocol::GpuTelemetry*> order;
  for (const protocol::GpuTelemetry& g : batch.samples) order.push_back(&g);
  // Oldest first, so that gaps and idle spans are measured forward in time.
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->at_ms < b->at_ms; });
  // A batch that is all older than the window comes from an agent whose clock is behind:
  // its samples are taken as now. Otherwise those older than the window are an agent's
  // backlog whose minutes have left memory, and are dropped.
  const bool behind = !order.empty() && order.back()->at_ms < oldest_ms;
  std::lock_guard lock(mu_);
  size_t kept = 0;
  for (const protocol::GpuTelemetry* in : order) {
    protocol::GpuTelemetry g = *in;
    if (g.at_ms > now_ms + kMaxAheadMs || behind) {
      g.at_ms = now_ms;
    } else if (g.at_ms < oldest_ms) {
      continue;
    }
    const std::string key = GpuKey(node, g.index);
    GpuState& gs = gpus_[key];
    const int64_t prev_ms = gs.latest.at_ms;
    const int64_t gap_ms =
        prev_ms > 0 && g.at_ms > prev_ms ? std::min(g.at_ms - prev_ms, kMaxGapMs) : 0;
    if (g.at_ms >= prev_ms) gs.latest = g;
    ++kept;
    if (!g.util_pct) continue;  // no utilisation: only the latest figures change
    const double util = *g.util_pct;
    const int64_t mem = g.mem_used_mib.value_or(0);
    const int64_t minute = MinuteOf(g.at_ms);
    Bucket& b = gs.series[minute];
    const bool first_of_minute = b.samples == 0;
    const int64_t mem_before = b.mem_max_mib;
    b.util_sum += util;
    ++b.samples;
    b.peak_pct = std::max(b.peak_pct, util);
    b.mem_max_mib = std::max(b.mem_max_mib, mem);
    b.gpus = 1;
    if (dirty_gpu_.size() < kMaxDirty) dirty_gpu_.insert({key, minute});
    // The pool's minute: the sum over GPUs of each one's peak memory, and the GPUs seen.
    Bucket& p = pool_[minute];
    p.util_sum += util;
    ++p.samples;
    p.peak_pct = std::max(p.peak_pct, util);
    p.mem_max_mib += b.mem_max_mib - mem_before;
    p.gpus += first_of_minute ? 1 : 0;
    dirty_pool_.insert(minute);
    const uint32_t gpu_id = g.jobs.empty() ? 0 : GpuIdLocked(key);
    // A GPU shared by several jobs: where the source measures each process's share of the
    // GPU's time, a job used what its processes used (at most its share), not its share of
    // the whole GPU's utilisation.
    std::map<int64_t, double> process_pct;
    if (g.jobs.size() > 1) {
      for (const protocol::TelemetryProcess& proc : g.processes) {
        if (proc.util_pct && proc.job_id > 0) process_pct[proc.job_id] += *proc.util_pct;
      }
    }
    const bool by_process = std::any_of(g.processes.begin(), g.processes.end(),
                                        [](const auto& proc) { return proc.util_pct.has_value(); });
    for (const protocol::TelemetryJob& t : g.jobs) {
      JobState& js = jobs_[t.job_id];
      Bucket& jb = js.series[minute];
      const double share = t.gpu_milli / 1000.0;
      double used = share * util / 100.0;  // GPU-seconds per second
      if (g.jobs.size() > 1 && by_process) {
        auto mine = process_pct.find(t.job_id);
        used = std::min(share, (mine == process_pct.end() ? 0.0 : mine->second) / 100.0);
      }
      // Only from the job's start: a job that started after the GPU's previous sample was
      // credited the whole gap, and short jobs read as using more than they held.
      int64_t job_gap_ms = gap_ms;
      if (t.start_ms > 0) job_gap_ms = std::clamp<int64_t>(g.at_ms - t.start_ms, 0, gap_ms);
      const double used_s = used * static_cast<double>(job_gap_ms) / 1000.0;
      for (Bucket* x : {&jb, &js.total}) {
        x->util_sum += util;
        ++x->samples;
        x->peak_pct = std::max(x->peak_pct, util);
        x->mem_max_mib = std::max(x->mem_max_mib, mem);
        x->used_gpu_s += used_s;
      }
      used_untaken_s_[t.job_id] += used_s;
      if (auto at = std::lower_bound(jb.gpu_ids.begin(), jb.gpu_ids.end(), gpu_id);
          at == jb.gpu_ids.end() || *at != gpu_id) {
        jb.gpu_ids.insert(at, gpu_id);
      }
      js.total.gpus = std::max(js.total.gpus, jb.Gpus());
      if (js.first_ms == 0) js.first_ms = minute;
      if (dirty_job_.size() < kMaxDirty) dirty_job_.insert({t.job_id, minute});
      dirty_total_.insert(t.job_id);
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
  if (js.total.samples == 0) return std::nullopt;
  JobGpuUtil u;
  u.mean_pct = js.total.util_sum / static_cast<double>(js.total.samples);
  u.peak_pct = js.total.peak_pct;
  u.peak_mem_mib = js.total.mem_max_mib;
  u.used_gpu_hours = js.total.used_gpu_s / 3600.0;
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
  const int64_t step_ms = StepMs(step_s);
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

TelemetryHub::Bucket TelemetryHub::FromRecord(const store::TelemetryRecord& r) {
  Bucket b;
  b.util_sum = r.util_sum;
  b.samples = r.samples;
  b.peak_pct = r.peak_pct;
  b.mem_max_mib = r.mem_max_mib;
  b.used_gpu_s = r.used_gpu_s;
  b.gpus = r.gpus;
  return b;
}

TelemetryHub::Series TelemetryHub::Merged(const Series* memory, int64_t split_ms,
                                          const std::vector<store::TelemetryRecord>& older,
                                          const std::string& scope, const std::string& key,
                                          int64_t since_ms) {
  Series out;
  for (const store::TelemetryRecord& r : older) {
    if (r.scope != scope || r.key != key || r.t_ms >= split_ms) continue;
    // A step merged by the store starts at or before `since_ms` but holds only minutes
    // from it on: filed at since's minute, it falls in the same step and is not cut.
    out.emplace(std::max(r.t_ms, MinuteOf(since_ms)), FromRecord(r));
  }
  if (memory != nullptr) out.insert(memory->lower_bound(split_ms), memory->end());
  return out;
}

std::vector<TelemetryPoint> TelemetryHub::JobSeries(
    int64_t job_id, int64_t since_ms, int64_t step_s, int64_t split_ms,
    const std::vector<store::TelemetryRecord>& older) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(job_id);
  const Series merged = Merged(it == jobs_.end() ? nullptr : &it->second.series, split_ms, older,
                               "job", std::to_string(job_id), since_ms);
  return Downsample({&merged}, since_ms, step_s, /*per_gpu=*/false);
}

std::vector<TelemetryPoint> TelemetryHub::NodeSeries(
    const std::string& node, int gpu, int64_t since_ms, int64_t step_s, int64_t split_ms,
    const std::vector<store::TelemetryRecord>& older) const {
  std::lock_guard lock(mu_);
  std::set<std::string> keys;  // the node's GPUs, in memory or in the store's points
  const std::string prefix = node + "/";
  for (auto it = gpus_.lower_bound(prefix); it != gpus_.end() && it->first.rfind(prefix, 0) == 0;
       ++it) {
    keys.insert(it->first);
  }
  for (const store::TelemetryRecord& r : older) {
    if (r.scope == "gpu" && r.key.rfind(prefix, 0) == 0) keys.insert(r.key);
  }
  std::vector<Series> merged;
  for (const std::string& key : keys) {
    if (gpu >= 0 && key != GpuKey(node, gpu)) continue;
    auto g = gpus_.find(key);
    merged.push_back(Merged(g == gpus_.end() ? nullptr : &g->second.series, split_ms, older, "gpu",
                            key, since_ms));
  }
  std::vector<const Series*> series;
  series.reserve(merged.size());
  for (const Series& s : merged) series.push_back(&s);
  return Downsample(series, since_ms, step_s, /*per_gpu=*/true);
}

std::vector<TelemetryPoint> TelemetryHub::PoolSeries(int64_t since_ms, int64_t step_s) const {
  std::lock_guard lock(mu_);
  // One series whose minutes already sum the GPUs: per step, the fullest minute's memory
  // and GPU count.
  return Downsample({&pool_}, since_ms, step_s, /*per_gpu=*/true);
}

std::map<int64_t, double> TelemetryHub::UsedGpuHours(
    int64_t since_ms, int64_t until_ms, int64_t split_ms,
    const std::vector<store::TelemetryRecord>& older) const {
  std::map<int64_t, double> seconds;
  for (const store::TelemetryRecord& r : older) {
    if (r.scope != "job" || r.t_ms >= split_ms) continue;
    const int64_t id = std::strtoll(r.key.c_str(), nullptr, 10);
    if (id > 0) seconds[id] += r.used_gpu_s;
  }
  std::lock_guard lock(mu_);
  const int64_t from = MinuteOf(std::max(since_ms, split_ms));
  for (const auto& [id, js] : jobs_) {
    for (auto it = js.series.lower_bound(from); it != js.series.end() && it->first < until_ms;
         ++it) {
      seconds[id] += it->second.used_gpu_s;
    }
  }
  std::map<int64_t, double> out;
  for (const auto& [id, s] : seconds) {
    if (s > 0) out[id] = s / 3600.0;
  }
  return out;
}

std::map<int64_t, double> TelemetryHub::TakeUsedGpuSeconds() {
  std::lock_guard lock(mu_);
  std::map<int64_t, double> out;
  out.swap(used_untaken_s_);
  std::erase_if(out, [](const auto& e) { return e.second <= 0; });
  return out;
}

void TelemetryHub::GiveBackUsedGpuSeconds(const std::map<int64_t, double>& seconds) {
  std::lock_guard lock(mu_);
  for (const auto& [id, s] : seconds) {
    if (jobs_.count(id) != 0) used_untaken_s_[id] += s;  // not for a job already expired
  }
}

TelemetryHub::Footprint TelemetryHub::Size() const {
  std::lock_guard lock(mu_);
  Footprint f;
  for (const auto& [key, gs] : gpus_) f.gpu_points += gs.series.size();
  for (const auto& [id, js] : jobs_) f.job_points += js.series.size();
  f.pool_points = pool_.size();
  f.jobs = jobs_.size();
  return f;
}

store::TelemetryRecord TelemetryHub::Record(const std::string& scope, const std::string& key,
                                            int64_t t_ms, const Bucket& b) {
  return {scope,      key,           t_ms,         b.util_sum, b.samples,
          b.peak_pct, b.mem_max_mib, b.used_gpu_s, b.Gpus()};
}

void TelemetryHub::ExpireLocked(int64_t now_ms) {
  const int64_t window_from = MemoryFromLocked(now_ms);
  const int64_t retention_from = MinuteOf(now_ms - options_.retention_s * 1000);
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    Series& s = it->second.series;
    s.erase(s.begin(), s.lower_bound(window_from));
    if (s.empty() && it->second.latest.at_ms < retention_from) {
      it = gpus_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Series& s = it->second.series;
    s.erase(s.begin(), s.lower_bound(window_from));
    // The store drops the job's total with its first minute (t_ms < the retention's start).
    if (s.empty() && it->second.first_ms < retention_from) {
      used_untaken_s_.erase(it->first);
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  pool_.erase(pool_.begin(), pool_.lower_bound(retention_from));
}

std::vector<store::TelemetryRecord> TelemetryHub::TakeDirty(int64_t* expire_before_ms) {
  const int64_t now_ms = clock_->NowMicros() / 1000;
  std::lock_guard lock(mu_);
  *expire_before_ms = MinuteOf(now_ms - options_.retention_s * 1000);
  std::vector<store::TelemetryRecord> out = std::move(requeued_);
  requeued_.clear();
  // Gathered before anything expires, so a point leaving memory is written first.
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
  for (const int64_t id : dirty_total_) {
    if (auto j = jobs_.find(id); j != jobs_.end()) {
      out.push_back(Record("job_total", std::to_string(id), j->second.first_ms, j->second.total));
    }
  }
  for (const int64_t minute : dirty_pool_) {
    if (auto p = pool_.find(minute); p != pool_.end()) {
      out.push_back(Record("pool", "", minute, p->second));
    }
  }
  dirty_gpu_.clear();
  dirty_job_.clear();
  dirty_total_.clear();
  dirty_pool_.clear();
  ExpireLocked(now_ms);
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
  auto job_of = [](const std::string& key) { return std::strtoll(key.c_str(), nullptr, 10); };
  for (const store::TelemetryRecord& r : records) {
    if (r.scope == "gpu") {
      gpus_[r.key].series[r.t_ms] = FromRecord(r);
    } else if (r.scope == "job") {
      if (const int64_t id = job_of(r.key); id > 0) jobs_[id].series[r.t_ms] = FromRecord(r);
    } else if (r.scope == "job_total") {
      const int64_t id = job_of(r.key);
      if (id <= 0) continue;
      JobState& js = jobs_[id];
      used_untaken_s_[id] += r.used_gpu_s - js.total.used_gpu_s;
      js.total = FromRecord(r);
      js.first_ms = r.t_ms;
    } else if (r.scope == "pool") {
      pool_[r.t_ms] = FromRecord(r);
    }
  }
  // Idle spans: the job's newest minutes in which no sample reached the threshold.
  for (auto& [id, js] : jobs_) {
    if (js.series.empty()) continue;
    if (js.first_ms == 0) js.first_ms = js.series.begin()->first;  // no total stored
    js.last_ms = std::max(js.last_ms, js.series.rbegin()->first);
    js.below_since_ms = 0;
    for (auto it = js.series.rbegin(); it != js.series.rend(); ++it) {
      if (it->second.peak_pct >= options_.idle_below_pct) break;
      js.below_since_ms = it->first;
    }
  }
}

}  // namespace gpupool::controller
