#include "controller/controller.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <utility>

#include "common/json.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"
#include "controller/job_scheduler.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"

namespace gpupool::controller {

using internal::kRestartGraceUs;
using internal::Occupies;
using internal::OnNode;
using jobs::Job;
using jobs::JobState;

namespace {

// Whether no poll answer carried a launch of `job`'s attempt (NodeLost::never_launched).
// `unlaunched` (Controller::unlaunched_): the jobs this controller placed, id -> attempt,
// until the first launch order of one is produced for a poll (TakeWorkLocked: produced
// counts, as the answer may reach its agent as it dies) or it leaves ASSIGNED (Install).
// Empty after a restart: a job not in it counts as launched, and its loss is as before.
bool NeverLaunched(const std::map<int64_t, int>& unlaunched, const Job& job) {
  auto it = unlaunched.find(job.id);
  return it != unlaunched.end() && it->second == job.attempt && job.state == JobState::kAssigned;
}

}  // namespace

Controller::Controller(store::Store* store, const Clock* clock, ControllerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      log_relay_(
          [this](const std::string& node) {
            // Taking the lock orders this wake after a poll's check for work, so the wake
            // cannot fall between that check and the poll's wait.
            MutexLock lock(mu_);
            WakeAgent(node);
          },
          clock) {}

Controller::~Controller() { Stop(); }

Result<std::unique_ptr<Controller>> Controller::Create(store::Store* store, const Clock* clock,
                                                       ControllerOptions options) {
  GP_RETURN_IF_ERROR(ValidateControllerOptions(options));
  Result<std::unique_ptr<JobScheduler>> scheduler =
      JobScheduler::Create(options.placement_policy, options.queue_policy, options.start_rule,
                           options.mps_sharing, options.max_starts_per_pass, options.fair_by);
  if (!scheduler.ok()) return scheduler.status().WithContext("scheduler configuration");
  Result<gpu::HealthPolicy> health =
      gpu::HealthPolicy::Create(options.health_xid, options.health_threshold);
  if (!health.ok()) return health.status().WithContext("--health-xid/--health-threshold");
  health->strike_window_us = options.health_strike_window_us;
  std::unique_ptr<Controller> c(new Controller(store, clock, std::move(options)));
  c->scheduler_ = std::move(scheduler).value();
  c->scheduler_->set_project_enforcement(c->options_.enforce_projects);
  std::optional<PreemptionSettings> p;
  if (c->options_.preemption) {
    p = PreemptionSettings{c->options_.preempt_min_runtime_s, c->options_.preempt_grace_s};
  }
  c->scheduler_->set_preemption(p);
  c->health_policy_ = std::move(health).value();
  GP_RETURN_IF_ERROR(c->Load());
  return c;
}

void Controller::Touched(int64_t id) {
  auto it = active_.find(id);
  // The queued counts: out with what slim_ had (the job as last touched), in with what
  // the job is now. A job's user and project never change.
  auto old = slim_.find(id);
  if (old != slim_.end()) NoteGpusLetGo(*old->second, it == active_.end() ? nullptr : &it->second);
  if (old != slim_.end() && old->second->state == JobState::kPending) {
    CountQueued(*old->second, -1);
  }
  NoteSlimChange(id);
  if (it == active_.end()) {
    index_.Update(id, nullptr);
    slim_.erase(id);
    return;
  }
  const Job& job = it->second;
  if (job.state == JobState::kPending) CountQueued(job, +1);
  // New to active_ (submitted, or loaded): its project lists from now on.
  if (old == slim_.end()) listed_projects_.Add(jobs::AccountingProject(job));
  index_.Update(id, &job);
  // What planning needs, without command lines, variables or paths.
  auto slim = std::make_shared<Job>();
  slim->id = job.id;
  slim->version = job.version;  // the scheduler's conversions are kept by (id, version)
  slim->user = job.user;
  slim->uid = job.uid;  // owns its share of an MPS GPU (sched_input.h)
  slim->project = job.project;
  slim->request = job.request;
  slim->priority = job.priority;
  slim->time_limit_s = job.time_limit_s;
  slim->state = job.state;
  slim->submit_time_us = job.submit_time_us;
  slim->start_time_us = job.start_time_us;
  slim->placement = job.placement;
  slim->dependencies = job.dependencies;
  slim->array_id = job.array_id;        // an array's limit on elements running at once
  slim->array_index = job.array_index;  // reasons name an element ARRAY_INDEX
  slim->array_max_running = job.array_max_running;
  slim->held_by = job.held_by;  // held jobs are not started
  slim->held_by_admin = job.held_by_admin;
  slim->attempt = job.attempt;  // held back by the lease of a lost node (sched_input.cc)
  slim->fences = job.fences;
  slim->enforce_memory = job.enforce_memory;  // its shares only where memory is enforced
  // Held for mpirun (--mpi, run, alloc): a gang whose shares pack (Task::pack_shares).
  slim->mpi = job.mpi;
  slim->interactive = job.interactive;
  // Preemption (preemption_plan.h): who may be a victim, when, with what grace, who stops.
  slim->preemptible = job.preemptible;
  slim->min_runtime_s = job.min_runtime_s;
  slim->preempt_grace_s = job.preempt_grace_s;
  slim->cancel_requested = job.cancel_requested;
  slim->preempted_by = job.preempted_by;
  if (job.state == JobState::kPending) slim->needs = job.needs;  // placement filter
  slim_[id] = std::move(slim);
}

void Controller::NoteSlimChange(int64_t id) {
  if (slim_resync_) return;
  // Bounded: a scheduler that has not run for a long while takes every job at once.
  if (slim_changed_.size() >= slim_.size() + 10'000) {
    slim_resync_ = true;
    slim_changed_.clear();
    slim_changed_.shrink_to_fit();
    return;
  }
  slim_changed_.push_back(id);
}

Status Controller::VerifyIndexes() {
  MutexLock lock(mu_);
  return index_.Verify(active_);
}

void Controller::CountQueued(const Job& job, int64_t delta) {
  auto add = [delta](std::map<std::string, int64_t>& m, const std::string& key) {
    auto e = m.find(key);  // found: no node made and freed again (a load counts 300,000)
    if (e == m.end()) e = m.emplace(key, 0).first;
    if ((e->second += delta) == 0) m.erase(e);
  };
  add(queued_by_user_, job.user);
  add(queued_by_project_, jobs::AccountingProject(job));
  queued_total_ += delta;
  CountQueuedSubmission(job, delta);
}

void Controller::CountQueuedSubmission(const Job& job, int64_t delta) {
  // Once per submission, however many queued jobs share it.
  const int64_t holder = job.array_id != 0 ? job.array_id : job.id;
  auto sub = queued_submissions_.find(holder);
  if (delta > 0) {
    if (sub == queued_submissions_.end()) {
      sub = queued_submissions_.emplace(holder, QueuedSubmission{job.user, 0, 0}).first;
      sub->second.bytes = jobs::SubmissionBytes(job);
      queued_bytes_by_user_[job.user] += sub->second.bytes;
      queued_bytes_total_ += sub->second.bytes;
    }
    sub->second.jobs += delta;
  } else if (sub != queued_submissions_.end() && (sub->second.jobs += delta) <= 0) {
    auto u = queued_bytes_by_user_.find(sub->second.user);
    if (u != queued_bytes_by_user_.end() && (u->second -= sub->second.bytes) <= 0) {
      queued_bytes_by_user_.erase(u);
    }
    queued_bytes_total_ -= sub->second.bytes;
    queued_submissions_.erase(sub);
  }
}

void Controller::Install(lifecycle::Transition t) {
  const int64_t id = t.next.id;
  const lifecycle::Effects& fx = t.effects;
  if (jobs::IsTerminal(t.expected)) {
    // An ended job's record took a lost attempt's late end: nothing in memory changes.
    if (!fx.log.empty()) spdlog::warn("{}", fx.log);
    if (ends_watched_ && fx.late_gpu_hours > 0) {
      ends_.late.push_back({std::move(t.next), fx.late_gpu_hours});
    }
    return;
  }
  // The agents whose polls may have new orders: where the job is or was placed, where
  // strays of it are stopped, where its exec sessions run.
  std::set<std::string> wake;
  if (fx.notify_nodes) {
    for (const jobs::TaskPlacement& p : t.next.placement) wake.insert(p.node);
    if (auto was = active_.find(id); was != active_.end()) {
      for (const jobs::TaskPlacement& p : was->second.placement) wake.insert(p.node);
    }
    for (const lifecycle::StrayStop& s : fx.strays) wake.insert(s.node);
  }
  for (const lifecycle::StrayStop& s : fx.strays) {
    auto n = nodes_.find(s.node);
    if (n == nodes_.end()) continue;
    n->second.stray_sent_us[{id, s.attempt}] = 0;
    n->second.stray_gpus[{id, s.attempt}] = s.gpu_uuids;
    if (s.started_there && n->second.up) n->second.stray_running.insert({id, s.attempt});
  }
  if (fx.stop_execs) {
    // Commands run by gpupool exec in the job end with it.
    for (auto& [xid, x] : execs_) {
      if (x.job_id != id || x.ended) continue;
      if (auto n = nodes_.find(x.node); n != nodes_.end()) {
        n->second.stray_sent_us[{id, t.next.attempt}] = 0;
      }
      if (fx.notify_nodes) wake.insert(x.node);
    }
  }
  if (fx.resend_stop) {
    for (const jobs::TaskPlacement& p : t.next.placement) {
      if (auto n = nodes_.find(p.node); n != nodes_.end()) n->second.cancel_sent_us.erase(id);
    }
  }
  for (int task : fx.stop_tasks) {
    // Only that task's node polls again for its stop orders (StopOrders).
    if (task < 0 || static_cast<size_t>(task) >= t.next.placement.size()) continue;
    const std::string& node = t.next.placement[static_cast<size_t>(task)].node;
    if (auto n = nodes_.find(node); n != nodes_.end()) n->second.cancel_sent_us.erase(id);
  }
  if (!fx.node_time_log.empty()) spdlog::warn("{}", fx.node_time_log);
  if (!fx.log.empty()) {
    if (fx.log_warning) {
      spdlog::warn("{}", fx.log);
    } else {
      spdlog::info("{}", fx.log);
    }
  }
  if (t.next.state != JobState::kAssigned) {
    unlaunched_.erase(id);
  } else if (t.expected == JobState::kPending) {
    unlaunched_[id] = t.next.attempt;  // placed: no agent has its launch yet
  }
  if (fx.ended) {
    NoteEnded(t.next);  // dependants ask
    NotePreemptorEnded(t.next);
    if (ends_watched_ && ends_.complete && ends_.jobs.size() < kMaxKeptEnds) {
      ends_.jobs.push_back(std::move(t.next));  // not read below
    } else if (ends_watched_) {
      ends_.complete = false;
      ends_.jobs.clear();
    }
    pending_reasons_.erase(id);
    reasons_touched_.insert(id);
    active_.erase(id);
  } else {
    if (fx.pending_reason_changed) {
      reasons_touched_.insert(id);
      if (t.next.pending_reason.empty()) {
        pending_reasons_.erase(id);
      } else {
        pending_reasons_[id] = t.next.pending_reason;
      }
    }
    active_[id] = std::move(t.next);
    if (fx.requeued) BlockPreemptedWhilePreemptorsWait(&pending_reasons_, id);  // a victim
  }
  Touched(id);
  if (fx.preempting) metrics_.CountPreemption();
  if (fx.preempted_gpu_hours >= 0) metrics_.CountPreemptedGpuHours(fx.preempted_gpu_hours);
  if (fx.freed) WakeScheduler();
  if (fx.queue_changed) WakeSchedulerForArrival();
  for (const std::string& node : wake) WakeAgent(node);
  if (fx.notify_exec) exec_cv_.notify_all();
}

void Controller::WatchEnds() {
  MutexLock lock(mu_);
  ends_watched_ = true;
}

Controller::Ends Controller::TakeEnds() {
  MutexLock lock(mu_);
  return std::exchange(ends_, Ends{});
}

void Controller::AttachPendingReason(Job* job) const {
  if (job->state != JobState::kPending) return;
  if (auto r = pending_reasons_.find(job->id); r != pending_reasons_.end()) {
    job->pending_reason = r->second;
  }
}

Status Controller::Load() {
  store::JobFilter active;
  active.active_only = true;
  GP_ASSIGN_OR_RETURN(std::vector<Job> jobs, store_->ListJobs(active));
  GP_ASSIGN_OR_RETURN(std::vector<store::NodeRecord> nodes, store_->ListNodes());
  GP_ASSIGN_OR_RETURN(store::SettingRecord limits, store_->GetSettingRecord("limits"));
  GP_ASSIGN_OR_RETURN(std::vector<store::PreemptHoldRecord> holds, store_->ListPreemptHolds());
  GP_ASSIGN_OR_RETURN(std::optional<std::string> bars, store_->GetSetting(kPreemptBarsKey));
  MutexLock lock(mu_);  // nobody else has the controller yet; the analysis asks for it
  for (Job& j : jobs) {
    const int64_t id = j.id;
    if (Occupies(j)) lifecycle::NormalizeTasks(j);
    WatchAllocClientLocked(j, true);
    active_.emplace_hint(active_.end(), id, std::move(j));  // listed by id: each goes last
    Touched(id);
  }
  const int64_t now = clock_->NowMicros();
  for (const store::NodeRecord& r : nodes) {
    Result<Json> j = ParseJson(r.info_json, "stored node " + r.name);
    if (!j.ok()) {
      spdlog::warn("ignoring stored node {}: {}", r.name, j.status().message());
      continue;
    }
    Result<gpu::NodeInfo> info = gpu::NodeFromJson(*j, "stored node " + r.name);
    if (!info.ok()) {
      spdlog::warn("ignoring stored node {}: {}", r.name, info.status().message());
      continue;
    }
    NodeEntry e;
    e.info = std::move(*info);
    e.info_version = ++node_info_versions_;
    e.cpu_milli = r.cpu_milli;
    e.memory_mib = r.memory_mib;
    e.address = r.address.empty() ? r.name : r.address;
    e.draining = r.draining;
    e.drain_reason = r.drain_reason;
    e.agent_id = r.agent_id;  // a second agent under its name is still refused
    Result<std::map<std::string, gpu::GpuHealth>> health =
        GpuHealthFromJson(r.gpu_health_json, "stored GPU health of node " + r.name);
    if (health.ok()) {
      e.gpu_health = std::move(*health);
    } else {
      spdlog::warn("{}: taken as healthy", health.status().message());
    }
    if (Result<protocol::Version> v = protocol::ParseVersion(r.protocol); v.ok()) e.version = *v;
    e.last_seen_us = now;  // a full timeout to poll again, at least kRestartGraceUs
    e.heard = false;
    e.up = true;
    nodes_.emplace(r.name, std::move(e));
    ++nodes_generation_;
  }
  GP_ASSIGN_OR_RETURN(limits_, internal::StoredLimits(limits));
  listed_projects_.AddAll(limits_.limits);
  RestoreHolds(holds, bars);
  for (const auto& [name, e] : nodes_) UpdateLayoutHolds(name);
  spdlog::info("controller: loaded {} active jobs and {} nodes", active_.size(), nodes_.size());
  return Status::Ok();
}

void Controller::Start() {
  MutexLock lock(mu_);
  if (loop_.joinable()) return;
  stopping_ = false;
  loop_ = std::thread([this] { Loop(); });
}

void Controller::Stop() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
    WakeAgents();  // waiting polls are answered with what there is
  }
  scheduler_cv_.notify_all();
  exec_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
}

void Controller::Loop() {
  int64_t last_sweep = clock_->MonotonicMicros();
  int64_t last_pass_end = clock_->MonotonicMicros();
  while (true) {
    loop_seen_mono_us_ = clock_->MonotonicMicros();
    {
      // A pass runs when resources changed, when jobs arrived (batched for up to
      // arrival_batch_us while the last pass could start nothing: with a full pool and a
      // long queue, a pass per submission would only keep the lock from API calls), or
      // once per period. Every wait is the clock's, so a ManualClock drives the loop.
      Lock lock(mu_);
      const int64_t period_end = clock_->MonotonicMicros() + options_.scheduler_period_us;
      const int64_t batch_end = last_pass_end + options_.arrival_batch_us;
      while (!stopping_ && !capacity_changed_) {
        const int64_t now = clock_->MonotonicMicros();
        if (jobs_arrived_ && (!last_pass_blocked_ || now >= batch_end)) break;
        if (now >= period_end) break;
        clock_->WaitOnce(scheduler_cv_, lock.native(),
                         jobs_arrived_ ? std::min(period_end, batch_end) : period_end);
      }
      if (stopping_) {
        loop_seen_mono_us_ = 0;
        return;
      }
      capacity_changed_ = false;
      jobs_arrived_ = false;
    }
    const int64_t pass_start = clock_->MonotonicMicros();
    if (Status s = ScheduleOnce(); !s.ok()) spdlog::error("scheduler pass: {}", s.ToString());
    // Under a stream of submissions, passes would run back to back; a short gap lets
    // them batch (each pass sees many new jobs) and leaves the lock to API calls.
    const int64_t pass_us = clock_->MonotonicMicros() - pass_start;
    {
      Lock lock(mu_);
      clock_->WaitFor(scheduler_cv_, lock.native(), std::clamp<int64_t>(pass_us, 1000, 20'000),
                      [this] {
                        mu_.AssertHeld();
                        return stopping_;
                      });
    }
    last_pass_end = clock_->MonotonicMicros();
    const int64_t now = clock_->MonotonicMicros();
    if (now - last_sweep >= options_.scheduler_period_us) {
      last_sweep = now;
      if (Status s = SweepNodes(); !s.ok()) spdlog::error("node sweep: {}", s.ToString());
      if (Status s = SweepTimeLimits(); !s.ok()) {
        spdlog::error("time limit sweep: {}", s.ToString());
      }
      if (Status s = SweepExecClients(); !s.ok()) {
        spdlog::error("exec client sweep: {}", s.ToString());
      }
    }
  }
}

void Controller::WakeScheduler() {
  capacity_changed_ = true;
  scheduler_cv_.notify_one();
}

void Controller::WakeSchedulerForArrival() {
  jobs_arrived_ = true;
  scheduler_cv_.notify_one();
}

void Controller::WakeAgents() {
  work_cv_.notify_all();
  polls_.MarkAllDirty();
  poll_cv_.notify_one();
}

void Controller::WakeAgent(const std::string& node) {
  work_cv_.notify_all();
  polls_.MarkDirty(node);
  poll_cv_.notify_one();
}

Result<Controller::PlanApplied> Controller::ApplyPlan(ScheduleResult& plan) {
  // Apply only if every job the plan saw occupying resources still does, every job it
  // starts is still pending, and every node it used is still up; otherwise plan again.
  // Only this thread places jobs, so what occupies resources cannot grow meanwhile.
  auto still_placeable = [this](const Job& job, const std::vector<jobs::TaskPlacement>& placement) {
    mu_.AssertHeld();  // a guard: Commit calls it under mu_
    if (job.state != JobState::kPending) return Status::NotFound("no longer pending");
    if (!job.held_by.empty()) return Status::NotFound("held while the plan was made");
    for (const jobs::TaskPlacement& p : placement) {
      auto n = nodes_.find(p.node);
      if (n == nodes_.end() || !n->second.up || !n->second.heard || n->second.draining ||
          n->second.health_pending) {
        return Status::NotFound("node " + p.node + " went down or was drained meanwhile");
      }
    }
    return Status::Ok();
  };
  if (options_.after_plan_for_test) options_.after_plan_for_test();
  std::vector<Change> placements;
  {
    Lock lock(mu_);
    // What the pass saw is sched_jobs_; only a job Touched since differs (all after a resync).
    auto moved = [this](const Job& seen) {
      mu_.AssertHeld();
      if (seen.state == JobState::kPending) return false;
      auto it = active_.find(seen.id);
      // Ended: resources freed, the plan stays safe.
      return it != active_.end() && it->second.placement != seen.placement;
    };
    bool stale = false;
    if (slim_resync_) {
      for (const auto& [id, seen] : sched_jobs_) stale = stale || moved(*seen);
    } else {
      for (int64_t id : slim_changed_) {
        auto seen = sched_jobs_.find(id);
        stale = stale || (seen != sched_jobs_.end() && moved(*seen->second));
      }
    }
    if (stale) {
      WakeScheduler();
      return PlanApplied::kStale;
    }
    for (auto& [id, placement] : plan.starts) {
      auto it = active_.find(id);
      if (it == active_.end() || !still_placeable(it->second, placement).ok()) continue;
      std::vector<std::string> hosts;
      for (const jobs::TaskPlacement& p : placement) hosts.push_back(nodes_.at(p.node).address);
      Change c{id, lifecycle::Placed{placement, std::move(hosts)}, {}};
      c.guard = [still_placeable, where = placement](const Job& job) {
        return still_placeable(job, where);
      };
      placements.push_back(std::move(c));
    }
  }
  if (placements.empty()) return PlanApplied::kNone;
  {
    // The assignments are written without the lock, so that API calls and agents' polls
    // never wait on the database for them. Meanwhile the jobs are PENDING in memory; one
    // cancelled or held meanwhile is left out (OnConflict::kDrop).
    GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> placed,
                        Commit(std::move(placements), OnConflict::kDrop));
    std::vector<Change> orphans;  // placed on a node declared down while being written
    {
      MutexLock lock(mu_);
      for (const Result<Job>& job : placed) {
        if (!job.ok()) continue;
        for (const jobs::TaskPlacement& p : job->placement) {
          if (auto n = nodes_.find(p.node); n == nodes_.end() || !n->second.up) {
            // Its sweep did not see the job: it ends here as it would have there.
            const std::string why =
                "node " + p.node + " stopped responding while the job was placed";
            orphans.push_back(
                {job->id,
                 lifecycle::NodeLost{p.node, why, 0, NeverLaunched(unlaunched_, *job)},
                 {}});
            break;
          }
        }
      }
    }
    GP_RETURN_IF_ERROR(Commit(std::move(orphans), OnConflict::kRetry).status());
  }
  return PlanApplied::kSome;
}

void Controller::ApplyPendingReasons(ScheduleResult* plan) {
  if (plan != nullptr) {
    for (auto& [id, why] : plan->pending_reasons) pending_reasons_[id] = std::move(why);
    for (int64_t id : plan->reasons_dropped) pending_reasons_.erase(id);
  }
  // Set or cleared by a transition since: the scheduler's last word (as if swapped in).
  const auto& kept = scheduler_->pending_reasons();
  for (int64_t id : reasons_touched_) {
    if (auto it = kept.find(id); it != kept.end()) {
      pending_reasons_[id] = it->second.why;
    } else {
      pending_reasons_.erase(id);
    }
  }
  reasons_touched_.clear();
}

bool Controller::TakeJobChanges(
    std::vector<std::pair<int64_t, std::shared_ptr<const Job>>>* changes, bool* all) {
  if (slim_resync_) {
    *all = true;
    changes->reserve(slim_.size());
    for (const auto& [id, slim] : slim_) changes->emplace_back(id, slim);  // shared, immutable
    slim_resync_ = false;
  } else {
    changes->reserve(slim_changed_.size());
    for (int64_t id : slim_changed_) {
      auto it = slim_.find(id);
      changes->emplace_back(id, it == slim_.end() ? nullptr : it->second);
    }
  }
  slim_changed_.clear();
  return queued_total_ > 0;  // the pending jobs of slim_ (Touched counts them)
}

void Controller::TakeNodes(
    std::vector<std::pair<SchedNode, std::shared_ptr<const gpu::NodeInfo>>>* out) {
  out->reserve(nodes_.size());
  const auto user_id = [this](int64_t id) {
    mu_.AssertHeld();
    auto it = active_.find(id);
    return it == active_.end() ? std::to_string(id) : lifecycle::UserJobId(it->second);
  };
  for (const auto& [name, e] : nodes_) {
    if (!e.up) continue;
    // A node whose health verdict is still to come takes no work, as a draining one; nor
    // does one not heard from since the load (its agent may have died before the restart).
    SchedNode copy{
        name, nullptr, e.cpu_milli, e.memory_mib, e.draining || e.health_pending || !e.heard, {}};
    if (!e.draining && !e.heard) copy.closed_why = "unknown";
    if (!e.draining && e.heard && e.health_pending) copy.closed_why = "health check pending";
    internal::ReserveStrayGpus(e.stray_running, e.stray_gpus, user_id, &copy);
    internal::ReserveLayoutHolds(layout_holds_, name, active_, &copy);
    for (const auto& [uuid, health] : e.gpu_health) {
      if (gpu::TakesWork(health.state)) continue;
      copy.out_of_service_gpus.push_back(
          {uuid, std::string(gpu::GpuHealthStateName(health.state)) + ": " + health.reason});
    }
    // The info is copied when it changed (registration), not on every pass.
    auto& [version, info] = sched_infos_[name];
    if (!info || version != e.info_version) {
      info = std::make_shared<const gpu::NodeInfo>(e.info);
      version = e.info_version;
    }
    out->emplace_back(std::move(copy), info);
  }
  if (sched_infos_.size() > nodes_.size()) {
    std::erase_if(sched_infos_, [this](const auto& i) {
      mu_.AssertHeld();
      return nodes_.count(i.first) == 0;
    });
  }
}

Status Controller::ScheduleOnce() {
  const int64_t pass_start_us = clock_->MonotonicMicros();
  // Planning takes milliseconds with a long queue; API calls must not wait for it. So the pass
  // plans on its own copy of the jobs (sched_jobs_: shared slim copies, without command lines and
  // variables), brought up to date under the lock with the jobs Touched since the last pass, and
  // applies the result under the lock after checking that nothing it relied on changed meanwhile.
  // The nodes' copies: SchedNode points into them, so the vector is not changed again.
  std::vector<std::pair<SchedNode, std::shared_ptr<const gpu::NodeInfo>>> nodes_copy;
  std::vector<std::pair<int64_t, std::shared_ptr<const Job>>> changes;
  bool all_jobs = false;
  bool any_pending = false;
  AdmissionFeed feed;  // pending jobs whose dependencies or earlier attempts hold them
  Limits limits;
  PreemptorHolds holds;  // GPUs held for preemptors
  std::vector<int64_t> holds_ended;
  // Dependencies first: the jobs that can never run end before the snapshot is taken.
  GP_RETURN_IF_ERROR(EndUnmeetableDependencies(&feed.waiting));
  {
    Lock lock(mu_);
    limits = limits_.limits;
    BlockWhileEarlierAttemptsStop(&feed.stopping);
    holds = HoldsForPass(clock_->NowMicros(), &holds_ended);
    BlockPreemptedWhilePreemptorsWait(&feed.waiting);  // while their holds last
    feed.preempt_barred = PreemptBarsForPass(clock_->NowMicros());
    any_pending = TakeJobChanges(&changes, &all_jobs);
    if (!any_pending) {
      last_pass_blocked_ = false;
      ApplyPendingReasons(nullptr);
    } else {
      TakeNodes(&nodes_copy);
    }
  }
  ForgetHolds(holds_ended);
  // The jobs as of now: what changed since the last pass, applied without the lock.
  if (all_jobs) sched_jobs_.clear();
  for (auto& [id, job] : changes) {
    if (job) {
      sched_jobs_[id] = std::move(job);
    } else {
      sched_jobs_.erase(id);
    }
  }
  changes.clear();
  if (!any_pending) return Status::Ok();
  std::vector<SchedNode> nodes;
  nodes.reserve(nodes_copy.size());
  for (auto& [node, info] : nodes_copy) {
    node.info = info.get();
    nodes.push_back(node);
  }
  std::vector<const Job*> active;
  active.reserve(sched_jobs_.size());
  for (const auto& [id, j] : sched_jobs_) active.push_back(j.get());
  const int64_t now = clock_->NowMicros();
  // The start plan of the queue (`queue --start`) every kStartPlanPeriodUs at most: it
  // searches a placement per planned job, the passes between keep its answers.
  const bool plan_starts =
      !start_planned_ || pass_start_us - last_start_plan_mono_us_ >= kStartPlanPeriodUs;
  GP_ASSIGN_OR_RETURN(ScheduleResult plan,
                      scheduler_->Plan(active, nodes, now / 1'000'000, feed, limits,
                                       plan_starts ? kStartPlanJobs : 0, holds));

  Result<PlanApplied> applied = ApplyPlan(plan);
  {
    // Whatever became of its starts: the scheduler keeps the reasons it gave.
    Lock lock(mu_);
    ApplyPendingReasons(&plan);
  }
  GP_RETURN_IF_ERROR(applied.status());
  if (*applied == PlanApplied::kStale) return Status::Ok();  // planned again at once
  GP_RETURN_IF_ERROR(ApplyPreemptions(plan));
  Lock lock(mu_);
  last_pass_blocked_ = *applied == PlanApplied::kNone && !plan.capped;
  // A capped pass left jobs untried: the next one goes on at once, not after batch or period.
  if (plan.capped) WakeScheduler();
  if (plan_starts) {
    start_planned_ = true;
    last_start_plan_mono_us_ = pass_start_us;
    start_estimates_us_.swap(plan.start_estimates_us);
    start_notes_.swap(plan.start_notes);
  } else {  // the reservation's start is this pass's
    for (const auto& [id, at] : plan.start_estimates_us) {
      start_estimates_us_[id] = at;
      start_notes_.erase(id);
    }
  }
  metrics_.ObservePass(static_cast<double>(clock_->MonotonicMicros() - pass_start_us) / 1e6,
                       plan.no_room);
  return Status::Ok();
}

PoolSnapshot Controller::MetricsSnapshot(std::vector<NodeView>* nodes_out) {
  std::vector<NodeView> nodes = Nodes();
  PoolSnapshot s;
  for (const NodeView& v : nodes) {
    ++s.nodes_by_state[v.state];
    if (v.state == "down") continue;
    s.gpus_total += static_cast<int64_t>(v.info.gpus.size());
    for (const gpu::GpuInfo& g : v.info.gpus) {
      auto h = v.gpu_health.find(g.uuid);
      if (h == v.gpu_health.end()) {
        ++s.gpus_by_health["healthy"];
        continue;
      }
      const std::string state(gpu::GpuHealthStateName(h->second.state));
      ++s.gpus_by_health[state];
      s.unhealthy_gpus.push_back({v.name, g.index, g.uuid, state});
    }
    if (v.disk)
      s.node_disks.push_back({v.name, v.disk->free_bytes, v.disk->total_bytes, v.disk->pressure});
    for (int milli : v.allocated_milli) s.gpus_allocated += milli / 1000.0;
  }
  if (nodes_out != nullptr) *nodes_out = std::move(nodes);
  Lock lock(mu_);
  s.health_actions_held = health_actions_held_;
  // Counted internal::kChunkUnderLock jobs per hold of mu_, each job once.
  auto it = active_.begin();
  while (true) {
    for (size_t n = 0; it != active_.end() && n < internal::kChunkUnderLock; ++it, ++n) {
      const Job& job = it->second;
      ++s.jobs_by_state[std::string(jobs::JobStateName(job.state))];
      if (job.state != JobState::kPending) continue;
      AddWaitingGpuHours(job, &s.gpu_hours);  // a requeued job's earlier attempts
      auto why = pending_reasons_.find(it->first);
      ++s.pending_by_reason[PendingReasonClass(why == pending_reasons_.end() ? "" : why->second)];
    }
    if (it == active_.end()) return s;
    const int64_t next = it->first;
    lock.Unlock();
    if (options_.between_chunks_for_test) options_.between_chunks_for_test();
    lock.Lock();
    it = active_.lower_bound(next);
  }
}

Status Controller::SweepNodes() {
  std::vector<Change> lost;
  {
    Lock lock(mu_);
    const int64_t now = clock_->NowMicros();
    for (auto& [name, e] : nodes_) {
      // Unheard since Load: its agent may be in its back-off after failed calls.
      const int64_t limit =
          e.heard ? options_.node_timeout_us : std::max(options_.node_timeout_us, kRestartGraceUs);
      if (!e.up || now - e.last_seen_us <= limit) continue;
      e.up = false;
      spdlog::warn("node {} stopped responding ({} s without a poll)", name,
                   (now - e.last_seen_us) / 1'000'000);
      const std::string reason = fmt::format("node {} stopped responding (no heartbeat for {} s)",
                                             name, limit / 1'000'000);
      // Its supervisors stop what a requeue would start again by then (docs/health.md).
      const int64_t lease_until =
          options_.node_lease_us > 0 ? e.last_seen_us + options_.node_lease_us : 0;
      // Its jobs, and the requeued ones whose lost attempt may still run a task here (a
      // gang's other node, lost in this sweep too or later): they wait for its lease.
      std::set<int64_t> ids = index_.OnNode(name);
      for (int64_t id : index_.PendingFenced()) {
        if (jobs::FenceOn(active_.at(id), name) != nullptr) ids.insert(id);
      }
      for (int64_t id : ids) {
        // Looked at again when committed: a node that registered again meanwhile has
        // dealt with its jobs, and a job may have ended or moved (or, requeued by the
        // loss of its other node a step before, waits for this one's lease too).
        // No launch of it handed out: none will be while the node is down (TakeWorkLocked).
        Change c{id,
                 lifecycle::NodeLost{name, reason, lease_until,
                                     NeverLaunched(unlaunched_, active_.at(id))},
                 {}};
        c.guard = [this, name = name](const Job& job) {
          mu_.AssertHeld();  // guards run under mu_ (Commit)
          const bool here = (Occupies(job) && OnNode(job, name)) ||
                            (job.state == JobState::kPending && jobs::FenceOn(job, name));
          if (!here || nodes_.at(name).up) return Status::NotFound("no longer on a lost node");
          return Status::Ok();
        };
        lost.push_back(std::move(c));
      }
      WakeScheduler();
    }
    // Each lost node's lease that ran out ends the wait for it (FenceLifted: one node).
    for (int64_t id : index_.PendingFenced()) {
      for (const jobs::NodeFence& f : active_.at(id).fences) {
        if (f.until_us != 0 && f.until_us <= now) {
          lost.push_back({id, lifecycle::FenceLifted{f.node}, {}});
        }
      }
    }
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(lost), OnConflict::kRetry));
  LogRefusals("node sweep", answers);
  return Status::Ok();
}

Status Controller::SweepTimeLimits() {
  std::vector<Change> over;
  {
    MutexLock lock(mu_);
    const int64_t now = clock_->NowMicros();
    const int64_t grace = options_.time_limit_grace_s;
    for (int64_t id : index_.OccupyingWithTimeLimit()) {
      const Job& job = active_.at(id);
      if (job.time_limit_s <= 0 || job.start_time_us == 0 || job.cancel_requested) continue;
      if (now < lifecycle::TimeLimitDeadlineUs(job, grace)) continue;
      over.push_back({id, lifecycle::TimeLimit{grace}, {}});  // Step checks it again
    }
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(over), OnConflict::kRetry));
  LogRefusals("time limit sweep", answers);
  return Status::Ok();
}

void Controller::LogRefusals(std::string_view what, const std::vector<Result<Job>>& answers) {
  for (const Result<Job>& a : answers) {
    if (!a.ok() && a.status().code() != StatusCode::kNotFound) {
      spdlog::error("{}: {}", what, a.status().ToString());
    }
  }
}

}  // namespace gpupool::controller
