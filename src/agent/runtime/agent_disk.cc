// AgentLoop's disk watch (agent_loop.h, disk_watch.h): reads the room left on the
// filesystem of the state directory and reports pressure to the controller, which drains
// the node while it lasts.
#include <spdlog/spdlog.h>

#include "agent/runtime/agent_loop.h"
#include "agent/runtime/disk_watch.h"

namespace gpupool::agent {

void AgentLoop::CheckDiskNow() {
  if (options_.disk_check_interval_s <= 0) return;
  {
    std::lock_guard lock(telemetry_mu_);
    disk_check_now_ = true;
  }
  telemetry_cv_.notify_all();
}

bool AgentLoop::SendDisk(const protocol::DiskReport& report) {
  if (!registered_ || controller_minor_ < 3) return false;  // before 1.3: no telemetry path
  protocol::TelemetryBatch batch;
  batch.node = options_.node_name;
  batch.disk = report;
  if (Status s = link_->PostTelemetry(batch); !s.ok()) {
    spdlog::warn("agent: cannot send the disk watch's report yet: {}", s.message());
    return false;
  }
  return true;
}

void AgentLoop::DiskLoop() {
  const int64_t period = int64_t{options_.disk_check_interval_s} * 1'000'000;
  const std::string& path = options_.state_dir;
  bool under = false;          // under pressure at the last check
  bool sent_under = false;     // what the controller last heard
  int sent_registration = -1;  // the registration it heard it after (-1: none)
  int seen_registration = -1;  // the registration of the last check
  std::string last_error;      // the last read error logged, logged once
  while (!stopping_) {
    int registration = 0;
    bool registered = false;
    {
      // Read together (Register changes them together): a report sent while registered_
      // was already set but registrations_ not yet counted would go out twice.
      std::lock_guard lock(telemetry_mu_);
      disk_check_now_ = false;
      registration = registrations_;
      registered = registered_;
    }
    seen_registration = registration;
    Result<DiskUsage> usage = options_.disk_usage ? options_.disk_usage(path) : ReadDiskUsage(path);
    bool sent = true;
    if (!usage.ok()) {
      if (usage.status().message() != last_error) {
        last_error = usage.status().message();
        spdlog::warn("agent: disk watch: {}", last_error);
      }
    } else {
      last_error.clear();
      protocol::DiskReport r =
          JudgeDisk(path, *usage, options_.disk_min_free, under, clock_->NowMicros() / 1000);
      if (r.pressure && !under) {
        spdlog::error("agent: disk pressure: {}", r.reason);
      } else if (!r.pressure && under) {
        spdlog::info("agent: disk pressure over: {} has {} free", path,
                     BytesForPeople(r.free_bytes));
      }
      under = r.pressure;
      // While under pressure every check is sent (an admin's resume does not outlast it);
      // otherwise only news: the end of it, or a registration that has not heard yet.
      if (under || under != sent_under || registration != sent_registration) {
        sent = registered && SendDisk(r);
        if (sent) {
          sent_under = under;
          sent_registration = registration;
        }
      }
    }
    // A report that did not go is tried again within two seconds; a registration or a
    // task the node could not start wakes the watch at once.
    const int64_t now = clock_->MonotonicMicros();
    const int64_t wake = now + (sent ? period : std::min<int64_t>(period, 2'000'000));
    std::unique_lock lock(telemetry_mu_);
    clock_->WaitUntil(telemetry_cv_, lock, wake, [&] {
      return stopping_.load() || disk_check_now_.load() ||
             registrations_.load() != seen_registration;
    });
  }
}

}  // namespace gpupool::agent
