#include "controller/pool_accounting.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "controller/job_lifecycle.h"
#include "controller/usage.h"

namespace gpupool::controller {
namespace {

// GPU `gi` of node `v`'s latest sample `s` with dcgm-exporter's labels; `jobs`: the
// active jobs, for their users.
GpuGauges GaugesOf(const NodeView& v, const gpu::GpuInfo& gi, const protocol::GpuTelemetry& s,
                   const std::map<int64_t, const jobs::Job*>& jobs) {
  GpuGauges g;
  g.gpu = gi.index;
  g.uuid = gi.uuid;
  const bool nvidia = gi.vendor == gpu::Vendor::kNvidia;
  g.device = std::string(gi.vendor == gpu::Vendor::kAmd ? "card" : "nvidia") +
             std::to_string(gi.minor_number >= 0 && nvidia ? gi.minor_number : gi.index);
  g.model_name = gi.name;
  g.hostname = v.name;
  std::set<std::string> users;
  for (const protocol::TelemetryJob& tj : s.jobs) {
    // As its user names it (an array's element ARRAY_INDEX); its id when not active.
    auto j = jobs.find(tj.job_id);
    g.hpc_job += (g.hpc_job.empty() ? "" : ",") +
                 (j != jobs.end() ? lifecycle::UserJobId(*j->second) : std::to_string(tj.job_id));
    if (j != jobs.end()) users.insert(j->second->user);
  }
  for (const std::string& u : users) g.user += (g.user.empty() ? "" : ",") + u;
  g.util_pct = s.util_pct;
  if (s.mem_used_mib) g.fb_used_mib = static_cast<double>(*s.mem_used_mib);
  if (s.mem_used_mib && s.mem_total_mib) {
    g.fb_free_mib = static_cast<double>(std::max<int64_t>(0, *s.mem_total_mib - *s.mem_used_mib));
  }
  g.power_w = s.power_w;
  g.temp_c = s.temp_c;
  if (s.xid_errors) g.xid_errors = static_cast<double>(*s.xid_errors);
  if (s.ecc_uncorrected) g.ecc_dbe_vol_total = static_cast<double>(*s.ecc_uncorrected);
  return g;
}

}  // namespace

PoolAccounting::PoolAccounting(Controller* controller, store::Store* store, const Clock* clock,
                               TelemetryService* telemetry)
    : controller_(controller),
      store_(store),
      clock_(clock),
      telemetry_(telemetry),
      worker_(clock, kFoldPeriodUs, [this] {
        if (Status s = Fold(); !s.ok()) spdlog::warn("metrics: {}", s.message());
      }) {
  controller_->WatchEnds();
}

void PoolAccounting::CountEndedLocked(const jobs::Job& j, int64_t now_us,
                                      std::map<int64_t, Key>* keys) {
  (*keys)[j.id] = MetricsKey(j);
  if (!jobs::IsTerminal(j.state) || !recent_.insert(j.id).second) return;
  if (j.end_time_us > 0) recent_order_.emplace_back(now_us, j.id);
  ++ended_by_state_[std::string(jobs::JobStateName(j.state))];
  if (const double hours = JobGpuHours(j, 0, INT64_MAX, now_us); hours > 0) {
    ended_gpu_hours_[MetricsKey(j)] += hours;
  }
}

Status PoolAccounting::FoldEndedLocked(int64_t now_us, std::map<int64_t, Key>* keys) {
  // Taken before the store is read: a job that ends between the two is in both.
  Controller::Ends fed = controller_->TakeEnds();
  // Until a read succeeds: the ends taken by a run whose read failed are in the store.
  if (!fed.complete) read_store_ = true;
  std::set<int64_t> read;  // counted by this run's store read, late ends included
  if (read_store_) {
    store::JobFilter recent;
    recent.states = {jobs::JobState::kSucceeded, jobs::JobState::kFailed,
                     jobs::JobState::kCancelled, jobs::JobState::kTimeout, jobs::JobState::kLost};
    recent.ended_after_us = std::max<int64_t>(1, read_until_us_ - kEndedOverlapUs);
    GP_ASSIGN_OR_RETURN(std::vector<jobs::Job> ended, store_->ListJobs(recent));
    ++store_reads_;
    read_store_ = false;
    std::set<std::string> projects;  // after a restart, the controller knows none of them
    for (const jobs::Job& j : ended) {
      if (recent_.count(j.id) == 0) read.insert(j.id);
      CountEndedLocked(j, now_us, keys);
      projects.insert(jobs::AccountingProject(j));
    }
    controller_->NoteListedProjects(projects);
  }
  for (const jobs::Job& j : fed.jobs) CountEndedLocked(j, now_us, keys);
  // A late end's GPU-hours on a job counted before (by its end, or a read before this
  // one); a job this run's read counted has them in its record already.
  for (const Controller::LateCharge& c : fed.late) {
    if (read.count(c.job.id) == 0) ended_gpu_hours_[MetricsKey(c.job)] += c.gpu_hours;
  }
  read_until_us_ = now_us;
  while (!recent_order_.empty() && recent_order_.front().first < now_us - 2 * kEndedOverlapUs) {
    recent_.erase(recent_order_.front().second);
    recent_order_.pop_front();
  }
  return Status::Ok();
}

PoolAccounting::EndedTotals PoolAccounting::ended_totals() {
  std::lock_guard lock(mu_);
  return {ended_by_state_, ended_gpu_hours_};
}

int64_t PoolAccounting::store_reads() {
  std::lock_guard lock(mu_);
  return store_reads_;
}

void PoolAccounting::FoldUsedLocked(const std::map<int64_t, Key>& keys) {
  TelemetryHub& hub = telemetry_->hub();
  std::map<int64_t, double> later;
  for (const auto& [id, seconds] : hub.TakeUsedGpuSeconds()) {
    Key key;
    if (auto k = keys.find(id); k != keys.end()) {
      key = k->second;
    } else if (Result<jobs::Job> j = store_->GetJob(id); j.ok()) {
      key = MetricsKey(*j);
    } else {
      if (j.status().code() != StatusCode::kNotFound) later[id] = seconds;
      continue;
    }
    used_gpu_s_[key] += seconds;
  }
  if (!later.empty()) hub.GiveBackUsedGpuSeconds(later);
}

Result<std::vector<jobs::Job>> PoolAccounting::FoldLocked(int64_t now_us) {
  std::map<int64_t, Key> keys;
  GP_RETURN_IF_ERROR(FoldEndedLocked(now_us, &keys));
  store::JobFilter holding;
  holding.states = {jobs::JobState::kAssigned, jobs::JobState::kRunning};
  GP_ASSIGN_OR_RETURN(std::vector<jobs::Job> active,
                      controller_->List(holding, Caller{"root", 0, 0, true}));
  for (const jobs::Job& j : active) keys[j.id] = MetricsKey(j);
  FoldUsedLocked(keys);
  return active;
}

Status PoolAccounting::Fold() {
  std::lock_guard lock(mu_);
  return FoldLocked(clock_->NowMicros()).status();
}

Result<std::string> PoolAccounting::Scrape() {
  std::vector<NodeView> nodes;
  PoolSnapshot pool = controller_->MetricsSnapshot(&nodes);  // active jobs by state
  const int64_t now = clock_->NowMicros();
  std::lock_guard lock(mu_);
  GP_ASSIGN_OR_RETURN(std::vector<jobs::Job> active, FoldLocked(now));
  for (const auto& [state, n] : ended_by_state_) pool.jobs_by_state[state] += n;
  for (const auto& [key, hours] : ended_gpu_hours_) pool.gpu_hours[key] += hours;
  for (const auto& [key, seconds] : used_gpu_s_) pool.used_gpu_hours[key] += seconds / 3600;
  // Jobs holding resources now: their GPU-hours so far, and who they are.
  std::map<int64_t, const jobs::Job*> by_id;
  for (const jobs::Job& j : active) {
    by_id[j.id] = &j;
    if (const double hours = JobGpuHours(j, 0, INT64_MAX, now); hours > 0) {
      pool.gpu_hours[MetricsKey(j)] += hours;
    }
  }
  // The latest telemetry of the GPUs of nodes that are up.
  for (const NodeView& v : nodes) {
    if (v.state == "down") continue;
    const std::map<int, protocol::GpuTelemetry> latest = telemetry_->hub().LatestOfNode(v.name);
    for (const gpu::GpuInfo& gi : v.info.gpus) {
      if (auto t = latest.find(gi.index); t != latest.end()) {
        pool.gpus.push_back(GaugesOf(v, gi, t->second, by_id));
      }
    }
  }
  return controller_->metrics().Render(pool);
}

}  // namespace gpupool::controller
