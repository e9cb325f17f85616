// AgentLoop's GPU telemetry and health reports (agent_loop.h): the telemetry rounds and
// their thread, which also watches the Xid counts between rounds to send a new Xid at
// once, and the health program's thread and its verdicts.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "agent/run_id.h"
#include "agent/runtime/agent_loop.h"
#include "agent/runtime/gpu_mem_watch.h"
#include "agent/runtime/health_check.h"
#include "agent/stop_request.h"
#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {

int64_t JobOfProcess(const std::string& proc_root, int64_t pid) {
  Result<std::string> text =
      ReadFileToString(proc_root + "/" + std::to_string(pid) + "/cgroup", 64 << 10);
  if (!text.ok()) return 0;
  // "0::/gpupool/job-JOB-TASK.ATTEMPT-INSTANCE" (v2) or "5:cpu:/gpupool/job-..." (v1);
  // "job-KEY-ATTEMPT-INSTANCE" where an agent of the previous layout made it (run_id.h).
  // Only a path that starts with the agent's own tree counts: a user may make cgroups of
  // any name in a tree delegated to them (systemd's user@UID.service), and a process of
  // theirs in ".../user@1001.service/gpupool/job-5-0.1-0" is not job 5's.
  constexpr std::string_view kLeaf = "/gpupool/job-";
  for (std::string_view line : Split(*text, '\n')) {
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view path = line.substr(c2 + 1);
    if (!path.starts_with(kLeaf)) continue;
    size_t end = kLeaf.size();
    while (end < path.size() && path[end] >= '0' && path[end] <= '9') ++end;
    std::optional<int64_t> key = ParseInt64(path.substr(kLeaf.size(), end - kLeaf.size()));
    if (!key || *key <= 0) return 0;
    return agent::JobOfLegacyKey(*key);  // a job id is its own legacy key
  }
  return 0;
}

protocol::GpuTelemetry TelemetryOfSample(const gpu::GpuSample& s, int64_t at_ms,
                                         const std::string& proc_root) {
  protocol::GpuTelemetry t;
  t.index = s.index;
  t.uuid = s.uuid;
  t.at_ms = at_ms;
  t.util_pct = s.util_pct;
  t.mem_used_mib = s.mem_used_mib;
  t.mem_total_mib = s.mem_total_mib;
  t.power_w = s.power_w;
  t.temp_c = s.temp_c;
  t.xid_errors = s.xid_errors;
  t.xid_count = s.xid_count;
  t.ecc_uncorrected = s.ecc_uncorrected;
  t.hw = s.hw;
  for (const gpu::ProcessSample& p : s.processes) {
    t.processes.push_back({p.pid, JobOfProcess(proc_root, p.pid), p.used_mib, p.util_pct});
  }
  return t;
}

std::optional<WatchedShare> AgentLoop::WatchedShareOf(const RunId& id,
                                                      const agent::LaunchSpec& spec) const {
  if (options_.gpu_mem_slack_bytes < 0 || spec.share_enforcement.empty() ||
      spec.share_enforcement == "mig" || spec.gpus.size() != 1 || spec.share_memory_bytes == 0 ||
      mem_stopped_.contains(id)) {
    return std::nullopt;
  }
  return WatchedShare{id, spec.gpus[0].index, spec.share_memory_bytes, spec.share_enforcement};
}

void AgentLoop::StopSharesOverMemory(const std::vector<protocol::GpuTelemetry>& round,
                                     const std::vector<WatchedShare>& shares) {
  if (shares.empty()) return;
  for (const MemOverrun& o :
       FindMemOverruns(round, shares,
                       static_cast<uint64_t>(std::max<int64_t>(0, options_.gpu_mem_slack_bytes)))) {
    for (const RunId& id : o.runs) {
      spdlog::warn("agent: {}: {}", agent::ToString(id), o.reason);
      {
        std::lock_guard lock(mu_);
        mem_stopped_.insert(id);
      }
      if (Status s = launcher_->Stop(id, StopRequest{0, 0, o.reason}); !s.ok()) {
        spdlog::warn("agent: cannot stop {}: {}", agent::ToString(id), s.message());
      }
    }
  }
}

size_t AgentLoop::TelemetryRound() {
  const int64_t now_us = clock_->NowMicros();
  Result<std::vector<gpu::GpuSample>> samples = options_.sampler->Sample(now_us);
  if (!samples.ok()) {
    spdlog::warn("agent: telemetry: {}", samples.status().message());
  }
  // Which tasks hold which GPU: from the specs of what runs here; and the shares the GPU
  // memory watch looks at.
  std::map<int, std::vector<protocol::TelemetryJob>> holders;
  std::vector<WatchedShare> shares;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, run] : held_) {
      if (id.is_exec()) continue;
      if (const std::optional<WatchedShare> w = WatchedShareOf(id, run.spec); w) {
        shares.push_back(*w);
      }
      for (const protocol::GpuGrant& g : run.spec.gpus) {
        // Once per job: a node's launch unit holds the GPUs of the job's other tasks there
        // too (LaunchOrder::node_tasks), and the controller counts each listing.
        std::vector<protocol::TelemetryJob>& h = holders[g.index];
        if (std::none_of(h.begin(), h.end(), [&](const auto& t) { return t.job_id == id.job; })) {
          h.push_back({id.job, g.gpu_milli});
        }
      }
    }
  }
  std::vector<protocol::GpuTelemetry> round;
  if (samples.ok()) {
    for (const gpu::GpuSample& s : *samples) {
      protocol::GpuTelemetry t = TelemetryOfSample(s, now_us / 1000, options_.proc_root);
      if (auto h = holders.find(s.index); h != holders.end()) t.jobs = h->second;
      round.push_back(std::move(t));
    }
    StopSharesOverMemory(round, shares);
  }
  protocol::TelemetryBatch batch;
  batch.node = options_.node_name;
  {
    std::lock_guard lock(telemetry_mu_);
    for (auto& t : round) unsent_telemetry_.push_back(std::move(t));
    // While the controller is away the oldest samples go first.
    while (unsent_telemetry_.size() > protocol::kMaxTelemetrySamples) {
      unsent_telemetry_.pop_front();
    }
    if (!registered_ || controller_minor_ < 3) {
      // A controller older than 1.3 takes no telemetry: keep only the newest round.
      if (registered_) unsent_telemetry_.clear();
      return unsent_telemetry_.size();
    }
    batch.samples.assign(unsent_telemetry_.begin(), unsent_telemetry_.end());
  }
  if (batch.samples.empty()) return 0;
  const Status ack = link_->PostTelemetry(batch);
  std::lock_guard lock(telemetry_mu_);
  if (!ack.ok()) {
    spdlog::warn("agent: cannot send {} telemetry samples yet: {}", batch.samples.size(),
                 ack.message());
    if (ack.code() == StatusCode::kNotFound) registered_ = false;
    return unsent_telemetry_.size();
  }
  // Samples added meanwhile stay (none are: one round at a time).
  const size_t sent = std::min(batch.samples.size(), unsent_telemetry_.size());
  unsent_telemetry_.erase(unsent_telemetry_.begin(),
                          unsent_telemetry_.begin() + static_cast<std::ptrdiff_t>(sent));
  return unsent_telemetry_.size();
}

void AgentLoop::TelemetryLoop() {
  const int64_t period = int64_t{options_.telemetry_interval_s} * 1'000'000;
  const int64_t watch = int64_t{std::max(0, options_.xid_watch_ms)} * 1000;
  int64_t next = clock_->MonotonicMicros();
  std::map<int, int64_t> xids;  // each GPU's Xid count as last read
  while (!stopping_) {
    TelemetryRound();
    next += period;
    int64_t now = clock_->MonotonicMicros();
    if (next < now) next = now + period;  // a round that took too long: no catching up
    if (watch > 0) xids = options_.sampler->XidCounts(clock_->NowMicros());
    // Until the next round, the Xid counts every `watch`: a new Xid is sent at once (the
    // controller cordons within seconds, docs/health.md), not with the next round.
    while (!stopping_ && now < next) {
      const int64_t wake = watch > 0 && !xids.empty() ? std::min(next, now + watch) : next;
      {
        std::unique_lock lock(telemetry_mu_);
        clock_->WaitUntil(telemetry_cv_, lock, wake, [this] { return stopping_.load(); });
      }
      now = clock_->MonotonicMicros();
      if (stopping_ || now >= next || watch <= 0 || xids.empty()) continue;
      std::map<int, int64_t> seen = options_.sampler->XidCounts(clock_->NowMicros());
      const bool fresh = std::any_of(seen.begin(), seen.end(), [&](const auto& s) {
        auto it = xids.find(s.first);
        return it == xids.end() || s.second > it->second;
      });
      xids = std::move(seen);
      if (!fresh) continue;
      spdlog::info("agent: a new Xid: sending telemetry at once");
      TelemetryRound();
    }
  }
}

bool AgentLoop::SendHealth() {
  protocol::TelemetryBatch batch;
  batch.node = options_.node_name;
  {
    std::lock_guard lock(health_mu_);
    if (!unsent_health_) return true;
    batch.health = unsent_health_;
  }
  if (!registered_ || controller_minor_ < 3) return false;  // before 1.3: no telemetry path
  if (Status s = link_->PostTelemetry(batch); !s.ok()) {
    spdlog::warn("agent: cannot send the health check's verdict yet: {}", s.message());
    return false;
  }
  std::lock_guard lock(health_mu_);
  if (unsent_health_ == batch.health) unsent_health_.reset();
  return true;
}

void AgentLoop::HealthLoop() {
  const int64_t period = int64_t{std::max(1, options_.health_check_interval_s)} * 1'000'000;
  int64_t next = clock_->MonotonicMicros() + period;  // Run() did the first
  while (!stopping_) {
    // Until the verdict is sent, retry every few seconds; then wait for the next run.
    const int64_t now = clock_->MonotonicMicros();
    const int64_t wake = SendHealth() ? next : std::min(next, now + 2'000'000);
    {
      std::unique_lock lock(telemetry_mu_);
      clock_->WaitUntil(telemetry_cv_, lock, wake, [this] { return stopping_.load(); });
    }
    if (stopping_ || clock_->MonotonicMicros() < next) continue;
    protocol::HealthReport r = RunHealthCheck(
        options_.health_check, options_.health_check_timeout_s, clock_->NowMicros() / 1000);
    if (!r.passed)
      spdlog::warn("agent: health check failed: {}",
                   r.node_reason.empty() ? r.output : r.node_reason);
    {
      std::lock_guard lock(health_mu_);
      unsent_health_ = std::move(r);
    }
    next = clock_->MonotonicMicros() + period;
  }
}

}  // namespace gpupool::agent
