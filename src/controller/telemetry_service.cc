#include "controller/telemetry_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace gpupool::controller {

TelemetryService::TelemetryService(Controller* controller, store::Store* store, const Clock* clock)
    : controller_(controller),
      store_(store),
      clock_(clock),
      hub_(std::make_unique<TelemetryHub>(clock)),
      worker_(clock, kFlushPeriodUs, [this] { RunOnce(); }) {}

void TelemetryService::Stop() {
  worker_.Stop();
  Flush();
}

Status TelemetryService::Configure(TelemetryOptions options) {
  GP_RETURN_IF_ERROR(ValidateTelemetryOptions(options));
  const int64_t now_ms = clock_->NowMicros() / 1000;
  const int64_t retention_from = now_ms - options.retention_s * 1000;
  // From the store: each job's total and the pool's minutes over the retention, and the
  // GPUs' and jobs' minutes of the memory window.
  Result<std::vector<store::TelemetryRecord>> stored =
      store_->ListTelemetry({.since_ms = retention_from, .scope = "job_total"});
  if (!stored.ok() && stored.status().code() == StatusCode::kUnimplemented) {
    options.memory_window_s = options.retention_s;  // memory keeps everything
    hub_ = std::make_unique<TelemetryHub>(clock_, options);
    return Status::Ok();
  }
  if (!stored.ok()) return stored.status().WithContext("load the stored GPU telemetry");
  auto hub = std::make_unique<TelemetryHub>(clock_, options);
  std::vector<store::TelemetryRecord> records = std::move(*stored);
  const int64_t window_from = hub->MemoryFromMs();
  for (const store::TelemetryQuery& q :
       {store::TelemetryQuery{.since_ms = retention_from, .scope = "pool"},
        store::TelemetryQuery{.since_ms = window_from, .scope = "gpu"},
        store::TelemetryQuery{.since_ms = window_from, .scope = "job"}}) {
    Result<std::vector<store::TelemetryRecord>> more = store_->ListTelemetry(q);
    if (!more.ok()) return more.status().WithContext("load the stored GPU telemetry");
    records.insert(records.end(), std::make_move_iterator(more->begin()),
                   std::make_move_iterator(more->end()));
  }
  hub->Load(records);
  hub_ = std::move(hub);
  return Status::Ok();
}

size_t TelemetryService::Ingest(protocol::TelemetryBatch batch) {
  const std::map<int, std::vector<protocol::TelemetryJob>> holders =
      controller_->GpuHolders(batch.node);
  std::erase_if(batch.samples,
                [&](const protocol::GpuTelemetry& g) { return holders.count(g.index) == 0; });
  for (protocol::GpuTelemetry& g : batch.samples) {
    const std::vector<protocol::TelemetryJob>& now = holders.at(g.index);
    auto holds = [&](int64_t job) {
      return std::find_if(now.begin(), now.end(),
                          [&](const protocol::TelemetryJob& t) { return t.job_id == job; });
    };
    std::vector<protocol::TelemetryJob> jobs;
    for (const protocol::TelemetryJob& t : g.jobs) {
      if (auto h = holds(t.job_id); h != now.end()) jobs.push_back(*h);
    }
    g.jobs = std::move(jobs);
    for (protocol::TelemetryProcess& p : g.processes) {
      if (holds(p.job_id) == now.end()) p.job_id = 0;
    }
  }
  const size_t kept = hub_->Ingest(batch.node, batch);
  worker_.Kick();
  return kept;
}

void TelemetryService::RunOnce() {
  ApplyIdlePolicy();
  if (clock_->MonotonicMicros() - flushed_us_ >= kFlushPeriodUs) Flush();
}

void TelemetryService::Flush() {
  std::unique_lock lock(flush_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another caller is writing them
  flushed_us_ = clock_->MonotonicMicros();
  int64_t expire_before_ms = 0;
  std::vector<store::TelemetryRecord> points = hub_->TakeDirty(&expire_before_ms);
  if (!points.empty()) {
    if (Status s = store_->PutTelemetry(points); !s.ok()) {
      if (s.code() == StatusCode::kUnimplemented) return;
      spdlog::warn("telemetry: cannot store {} points yet: {}", points.size(), s.message());
      hub_->Requeue(std::move(points));
      return;
    }
  }
  // The retention: old points leave the store about once an hour.
  const int64_t now = clock_->MonotonicMicros();
  if (expired_us_ == 0 || now - expired_us_ >= kExpirePeriodUs) {
    expired_us_ = now;
    Result<int64_t> gone = store_->DeleteTelemetryBefore(expire_before_ms);
    if (!gone.ok() && gone.status().code() != StatusCode::kUnimplemented) {
      spdlog::warn("telemetry: cannot drop old points: {}", gone.status().message());
    }
  }
}

std::string TelemetryService::IdleThreshold() const {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g%%", options().idle_below_pct);
  return buf;
}

std::vector<int64_t> TelemetryService::ApplyIdlePolicy() {
  const TelemetryOptions& o = options();
  std::vector<int64_t> cancelled;
  if (o.idle_action.empty()) return cancelled;
  const int64_t now_ms = clock_->NowMicros() / 1000;
  Caller policy;
  policy.admin = true;
  for (const auto& [id, since_ms] : hub_->IdleJobs()) {
    Result<jobs::Job> job = controller_->Get(id, policy);
    if (!job.ok() || job->state != jobs::JobState::kRunning || job->cancel_requested) continue;
    const std::string why = "its GPUs sat below " + IdleThreshold() + " for " +
                            std::to_string((now_ms - since_ms) / 60'000) + " minutes";
    {
      std::lock_guard lock(idle_mu_);
      if (idle_warned_.insert(id).second) {
        spdlog::warn("idle policy: job {} of {}: {}", id, job->user, why);
      }
    }
    if (o.idle_action != "cancel") continue;
    if (now_ms - since_ms < (o.idle_after_s + o.idle_cancel_after_s) * 1000) continue;
    policy.user = "the idle policy (" + why + ")";
    if (Result<jobs::Job> c = controller_->Cancel(id, policy); c.ok()) {
      spdlog::warn("idle policy: cancelled job {} of {}: {}", id, job->user, why);
      cancelled.push_back(id);
    } else {
      spdlog::warn("idle policy: cannot cancel job {}: {}", id, c.status().message());
    }
  }
  return cancelled;
}

}  // namespace gpupool::controller
