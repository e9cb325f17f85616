#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/json.h"
#include "controller/job_scheduler.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"

namespace gpupool::controller {

using jobs::Job;
using jobs::JobState;

namespace {

constexpr int64_t kResendAfterUs = 5'000'000;

bool OnNode(const Job& job, const std::string& node) {
  return std::any_of(job.placement.begin(), job.placement.end(),
                     [&](const jobs::TaskPlacement& p) { return p.node == node; });
}

bool Occupies(const Job& job) {
  return job.state == JobState::kAssigned || job.state == JobState::kRunning;
}

Status CheckOwner(const Job& job, const Caller& caller) {
  if (caller.admin || job.uid == caller.uid) return Status::Ok();
  return Status::PermissionDenied("job " + std::to_string(job.id) + " belongs to " + job.user +
                                  "; users may only see and act on their own jobs");
}

}  // namespace

Controller::Controller(store::Store* store, const Clock* clock, ControllerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      log_relay_([this](const std::string&) {
        // Taking the lock orders this wake after a poll's check for work, so the wake
        // cannot fall between that check and the poll's wait.
        { std::lock_guard lock(mu_); }
        work_cv_.notify_all();
      }) {}

Controller::~Controller() { Stop(); }

Result<std::unique_ptr<Controller>> Controller::Create(store::Store* store, const Clock* clock,
                                                       ControllerOptions options) {
  Result<std::unique_ptr<JobScheduler>> scheduler =
      JobScheduler::Create(options.placement_policy, options.queue_policy, options.start_rule);
  if (!scheduler.ok()) return scheduler.status().WithContext("scheduler configuration");
  std::unique_ptr<Controller> c(new Controller(store, clock, std::move(options)));
  c->scheduler_ = std::move(scheduler).value();
  GP_RETURN_IF_ERROR(c->Load());
  return c;
}

void Controller::Touched(int64_t id) {
  auto it = active_.find(id);
  if (it == active_.end()) {
    occupying_.erase(id);
    slim_.erase(id);
    return;
  }
  const Job& job = it->second;
  if (Occupies(job)) {
    occupying_.insert(id);
  } else {
    occupying_.erase(id);
  }
  // What planning needs, without command lines, variables or paths.
  auto slim = std::make_shared<Job>();
  slim->id = job.id;
  slim->user = job.user;
  slim->project = job.project;
  slim->request = job.request;
  slim->priority = job.priority;
  slim->time_limit_s = job.time_limit_s;
  slim->state = job.state;
  slim->submit_time_us = job.submit_time_us;
  slim->start_time_us = job.start_time_us;
  slim->placement = job.placement;
  if (job.state == JobState::kPending) slim->needs = job.needs;  // placement filter
  slim_[id] = std::move(slim);
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
  for (Job& j : jobs) {
    const int64_t id = j.id;
    active_.emplace(id, std::move(j));
    Touched(id);
  }
  GP_ASSIGN_OR_RETURN(std::vector<store::NodeRecord> nodes, store_->ListNodes());
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
    e.cpu_milli = r.cpu_milli;
    e.memory_mib = r.memory_mib;
    // A restarted controller gives every known node a full timeout to poll again.
    e.last_seen_us = now;
    e.up = true;
    nodes_.emplace(r.name, std::move(e));
  }
  spdlog::info("controller: loaded {} active jobs and {} nodes", active_.size(), nodes_.size());
  return Status::Ok();
}

void Controller::Start() {
  std::lock_guard lock(mu_);
  if (loop_.joinable()) return;
  stopping_ = false;
  loop_ = std::thread([this] { Loop(); });
}

void Controller::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  scheduler_cv_.notify_all();
  work_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

void Controller::Loop() {
  using std::chrono::steady_clock;
  int64_t last_sweep = clock_->MonotonicMicros();
  steady_clock::time_point last_pass_end = steady_clock::now();
  while (true) {
    {
      // A pass runs when resources changed, when jobs arrived (batched for up to
      // arrival_batch_us while the last pass could start nothing: with a full pool and a
      // long queue, a pass per submission would only keep the lock from API calls), or
      // once per period.
      std::unique_lock lock(mu_);
      const auto period_end =
          steady_clock::now() + std::chrono::microseconds(options_.scheduler_period_us);
      const auto batch_end = last_pass_end + std::chrono::microseconds(options_.arrival_batch_us);
      while (!stopping_ && !capacity_changed_) {
        const auto now = steady_clock::now();
        if (jobs_arrived_ && (!last_pass_blocked_ || now >= batch_end)) break;
        if (now >= period_end) break;
        scheduler_cv_.wait_until(lock,
                                 jobs_arrived_ ? std::min(period_end, batch_end) : period_end);
      }
      if (stopping_) return;
      capacity_changed_ = false;
      jobs_arrived_ = false;
    }
    const int64_t pass_start = clock_->MonotonicMicros();
    if (Status s = ScheduleOnce(); !s.ok()) spdlog::error("scheduler pass: {}", s.ToString());
    // Under a stream of submissions, passes would run back to back; a short gap lets
    // them batch (each pass sees many new jobs) and leaves the lock to API calls.
    const int64_t pass_us = clock_->MonotonicMicros() - pass_start;
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::clamp<int64_t>(pass_us, 1000, 20'000)));
    last_pass_end = steady_clock::now();
    const int64_t now = clock_->MonotonicMicros();
    if (now - last_sweep >= options_.scheduler_period_us) {
      last_sweep = now;
      if (Status s = SweepNodes(); !s.ok()) spdlog::error("node sweep: {}", s.ToString());
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

void Controller::NotifyNode(const std::string&) { work_cv_.notify_all(); }

Result<Job> Controller::Submit(Job job, const Caller& caller) {
  job.user = caller.user;
  job.uid = caller.uid;
  job.gid = caller.gid;
  job.state = JobState::kPending;
  job.submit_time_us = clock_->NowMicros();
  job.attempt = 0;
  if (job.command.empty()) {
    return Status::InvalidArgument(
        "command: a job needs a command to run, e.g. -- python3 train.py");
  }
  GP_RETURN_IF_ERROR(jobs::ValidateSubmission(job));
  GP_RETURN_IF_ERROR(jobs::ValidateRequest(job.request).WithContext("request"));
  {
    std::lock_guard lock(mu_);
    std::vector<SchedNode> nodes;
    for (const auto& [name, e] : nodes_)
      nodes.push_back({name, &e.info, e.cpu_milli, e.memory_mib});
    if (!nodes.empty()) {
      if (std::string why = JobScheduler::NeverFits(job, nodes); !why.empty()) {
        return Status::FailedPrecondition("no node of this pool can ever run this job: " + why);
      }
    }
  }
  // The store serialises writers itself; API calls need not wait for this one.
  GP_ASSIGN_OR_RETURN(job.id, store_->InsertJob(job));
  std::lock_guard lock(mu_);
  active_[job.id] = job;
  Touched(job.id);
  WakeSchedulerForArrival();
  return job;
}

std::vector<int64_t> Controller::JobsUsingEnvironment(const std::string& ref) {
  std::vector<int64_t> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, job] : active_) {
    if (job.environment == ref) out.push_back(id);
  }
  return out;
}

Result<Job> Controller::Get(int64_t id, const Caller& caller) {
  {
    std::lock_guard lock(mu_);
    if (auto it = active_.find(id); it != active_.end()) {
      GP_RETURN_IF_ERROR(CheckOwner(it->second, caller));
      Job job = it->second;
      AttachPendingReason(&job);
      return job;
    }
  }
  GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
  GP_RETURN_IF_ERROR(CheckOwner(job, caller));
  return job;
}

Result<std::vector<Job>> Controller::List(const store::JobFilter& filter, const Caller& caller) {
  store::JobFilter f = filter;
  if (!caller.admin) f.user = caller.user;
  const bool only_active =
      f.active_only ||
      (!f.states.empty() && std::all_of(f.states.begin(), f.states.end(),
                                        [](JobState s) { return !jobs::IsTerminal(s); }));
  if (!only_active) return store_->ListJobs(f);
  // Active jobs are served from memory: they carry fresh pending reasons.
  std::vector<Job> out;
  std::lock_guard lock(mu_);
  auto matches = [&](const Job& job) {
    if (f.user && job.user != *f.user) return false;
    if (!f.states.empty() &&
        std::find(f.states.begin(), f.states.end(), job.state) == f.states.end()) {
      return false;
    }
    return !f.node || OnNode(job, *f.node);
  };
  if (f.limit > 0) {  // newest first, like the store
    for (auto it = active_.rbegin(); it != active_.rend() && out.size() < f.limit; ++it) {
      if (matches(it->second)) out.push_back(it->second);
    }
  } else {
    for (const auto& [id, job] : active_) {
      if (matches(job)) out.push_back(job);
    }
  }
  for (Job& job : out) AttachPendingReason(&job);
  return out;
}

Result<Job> Controller::Cancel(int64_t id, const Caller& caller) {
  std::lock_guard lock(mu_);
  auto it = active_.find(id);
  if (it == active_.end()) {
    GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
    GP_RETURN_IF_ERROR(CheckOwner(job, caller));
    return Status::FailedPrecondition("job " + std::to_string(id) + " has already ended (" +
                                      std::string(jobs::JobStateName(job.state)) + ")");
  }
  Job& job = it->second;
  GP_RETURN_IF_ERROR(CheckOwner(job, caller));
  if (job.state == JobState::kPending) {
    Job next = job;
    next.state = JobState::kCancelled;
    next.end_time_us = clock_->NowMicros();
    next.reason = "cancelled by " + caller.user + " while pending";
    next.pending_reason.clear();
    GP_RETURN_IF_ERROR(store_->UpdateJob(next, job.state));
    active_.erase(it);
    Touched(id);
    WakeScheduler();
    return next;
  }
  if (!job.cancel_requested) {
    Job next = job;
    next.cancel_requested = true;
    next.reason = "cancelled by " + caller.user;
    GP_RETURN_IF_ERROR(store_->UpdateJob(next, job.state));
    job = std::move(next);
    Touched(id);
    for (const auto& p : job.placement) {
      if (auto n = nodes_.find(p.node); n != nodes_.end()) n->second.cancel_sent_us.erase(id);
    }
    NotifyNode("");
  }
  return job;
}

std::vector<NodeView> Controller::Nodes() {
  std::lock_guard lock(mu_);
  std::vector<NodeView> out;
  for (const auto& [name, e] : nodes_) {
    NodeView v;
    v.name = name;
    v.state = e.up ? "up" : "down";
    v.last_seen_us = e.last_seen_us;
    v.info = e.info;
    v.cpu_milli = e.cpu_milli;
    v.memory_mib = e.memory_mib;
    v.allocated_milli.assign(e.info.gpus.size(), 0);
    for (int64_t id : occupying_) {
      const Job& job = active_.at(id);
      if (!OnNode(job, name)) continue;
      ++v.running_jobs;
      for (const auto& p : job.placement) {
        if (p.node != name) continue;
        for (const std::string& uuid : p.gpu_uuids) {
          for (size_t g = 0; g < e.info.gpus.size(); ++g) {
            if (e.info.gpus[g].uuid == uuid) v.allocated_milli[g] += p.gpu_milli;
          }
        }
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

Status Controller::RegisterNode(const std::string& name, gpu::NodeInfo info, int64_t cpu_milli,
                                int64_t memory_mib,
                                const std::vector<std::pair<int64_t, int>>& running) {
  if (name.empty() || name.size() > 253) {
    return Status::InvalidArgument("node: a node name of 1..253 characters is required");
  }
  const int64_t now = clock_->NowMicros();
  store::NodeRecord rec;
  rec.name = name;
  rec.info_json = DumpJson(gpu::NodeToJson(info));
  rec.cpu_milli = cpu_milli;
  rec.memory_mib = memory_mib;
  rec.registered_us = now;
  rec.last_heartbeat_us = now;
  GP_RETURN_IF_ERROR(store_->PutNode(rec));

  std::lock_guard lock(mu_);
  NodeEntry& e = nodes_[name];
  e.info = std::move(info);
  e.cpu_milli = cpu_milli;
  e.memory_mib = memory_mib;
  e.last_seen_us = now;
  e.up = true;
  e.launch_sent_us.clear();  // a (re)started agent gets every open order again
  e.cancel_sent_us.clear();

  // Jobs we believe run there that the agent does not know are gone.
  std::set<std::pair<int64_t, int>> known(running.begin(), running.end());
  std::vector<int64_t> lost;
  for (int64_t id : occupying_) {
    const Job& job = active_.at(id);
    if (job.state == JobState::kRunning && OnNode(job, name) &&
        known.count({id, job.attempt}) == 0) {
      lost.push_back(id);
    }
  }
  for (int64_t id : lost) {
    Job& job = active_.at(id);
    GP_RETURN_IF_ERROR(FinishOnNodeLoss(
        job, "the agent on node " + name + " restarted and no longer knows this job"));
  }
  WakeScheduler();
  NotifyNode(name);
  return Status::Ok();
}

Status Controller::FinishOnNodeLoss(Job& job, const std::string& reason) {
  Job lost = job;
  lost.state = JobState::kLost;
  lost.end_time_us = clock_->NowMicros();
  lost.reason = reason;
  if (job.requeue && !job.cancel_requested) {
    // LOST is recorded, then the job goes back to the queue, in one transaction.
    Job again = lost;
    again.state = JobState::kPending;
    again.placement.clear();
    again.start_time_us = 0;
    again.end_time_us = 0;
    again.reason = "requeued: " + reason;
    GP_RETURN_IF_ERROR(store_->UpdateJobs({{lost, job.state}, {again, JobState::kLost}}));
    job = std::move(again);
    Touched(job.id);
    spdlog::warn("job {} LOST and requeued: {}", job.id, reason);
    return Status::Ok();
  }
  GP_RETURN_IF_ERROR(store_->UpdateJob(lost, job.state));
  spdlog::warn("job {} LOST: {}", job.id, reason);
  const int64_t id = job.id;  // `job` lives in active_
  active_.erase(id);
  Touched(id);
  return Status::Ok();
}

LaunchOrder Controller::MakeLaunchOrder(const Job& job, size_t task_index) const {
  LaunchOrder order;
  order.job = job;
  order.task_index = static_cast<int>(task_index);
  const jobs::TaskPlacement& p = job.placement[task_index];
  auto n = nodes_.find(p.node);
  if (n == nodes_.end()) return order;
  for (const gpu::GpuInfo& g : n->second.info.gpus) {
    const bool granted =
        std::find(p.gpu_uuids.begin(), p.gpu_uuids.end(), g.uuid) != p.gpu_uuids.end();
    if (granted) {
      order.gpus.push_back(
          {std::string(gpu::VendorName(g.vendor)), g.index, g.uuid, g.device_nodes, p.gpu_milli});
    } else {
      for (const std::string& d : g.device_nodes) order.denied_device_nodes.push_back(d);
    }
  }
  return order;
}

Result<AgentWork> Controller::WaitForWork(const std::string& node, int64_t wait_ms) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(std::clamp<int64_t>(wait_ms, 0, 60'000));
  std::unique_lock lock(mu_);
  while (true) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      return Status::NotFound("node " + node + " is not registered: register it first");
    }
    NodeEntry& e = it->second;
    const int64_t now = clock_->NowMicros();
    e.last_seen_us = now;
    if (!e.up) {
      e.up = true;
      WakeScheduler();
    }
    AgentWork work;
    for (int64_t id : occupying_) {
      const Job& job = active_.at(id);
      if (!OnNode(job, node)) continue;
      if (job.cancel_requested) {
        auto sent = e.cancel_sent_us.find(id);
        if (sent == e.cancel_sent_us.end() || now - sent->second > kResendAfterUs) {
          work.cancel.push_back(id);
          e.cancel_sent_us[id] = now;
        }
        continue;
      }
      if (job.state != JobState::kAssigned) continue;
      auto sent = e.launch_sent_us.find(id);
      if (sent != e.launch_sent_us.end() && now - sent->second <= kResendAfterUs) continue;
      for (size_t t = 0; t < job.placement.size(); ++t) {
        if (job.placement[t].node == node) work.launch.push_back(MakeLaunchOrder(job, t));
      }
      e.launch_sent_us[id] = now;
    }
    work.logs = log_relay_.Take(node);
    if (!work.launch.empty() || !work.cancel.empty() || !work.logs.empty() || stopping_ ||
        std::chrono::steady_clock::now() >= deadline) {
      return work;
    }
    // Wake at the deadline, on new work, or in time to resend unacknowledged orders.
    work_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                     std::chrono::microseconds(kResendAfterUs)));
  }
}

bool Controller::NodeUp(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.up;
}

Status Controller::ApplyEvents(const std::string& node, const std::vector<AgentEvent>& events) {
  std::lock_guard lock(mu_);
  if (auto it = nodes_.find(node); it != nodes_.end())
    it->second.last_seen_us = clock_->NowMicros();
  bool freed = false;
  for (const AgentEvent& ev : events) {
    auto it = active_.find(ev.job_id);
    if (it == active_.end()) continue;  // already final: a resent event
    Job& job = it->second;
    if (ev.attempt != job.attempt || !OnNode(job, node) || !Occupies(job)) continue;
    Job next = job;
    switch (ev.kind) {
      case AgentEvent::Kind::kStarted:
        if (job.state != JobState::kAssigned) continue;
        next.state = JobState::kRunning;
        next.start_time_us = ev.time_us;
        if (!ev.stdout_path.empty()) next.stdout_path = ev.stdout_path;
        if (!ev.stderr_path.empty()) next.stderr_path = ev.stderr_path;
        GP_RETURN_IF_ERROR(store_->UpdateJob(next, job.state));
        job = std::move(next);
        Touched(job.id);
        continue;
      case AgentEvent::Kind::kExited: {
        const bool clean = ev.exit_code && *ev.exit_code == 0 && !ev.signal;
        bool gang_failed = false;
        if (job.request.tasks > 1) {
          // A gang ends when every task has ended; the first failure stops the rest.
          auto& exits = task_exits_[job.id];
          exits[ev.task_index] = !clean;
          const bool any_failed =
              std::any_of(exits.begin(), exits.end(), [](const auto& e) { return e.second; });
          if (static_cast<int>(exits.size()) < job.request.tasks) {
            if (any_failed && !job.cancel_requested) {
              Job stop = job;
              stop.cancel_requested = true;
              stop.reason = "task " + std::to_string(ev.task_index) + " failed";
              GP_RETURN_IF_ERROR(store_->UpdateJob(stop, job.state));
              job = std::move(stop);
              Touched(job.id);
              work_cv_.notify_all();
            }
            continue;
          }
          gang_failed = any_failed;
          task_exits_.erase(job.id);
        }
        if (gang_failed) {
          next.state = JobState::kFailed;
        } else if (ev.cancelled || job.cancel_requested) {
          next.state = JobState::kCancelled;
        } else if (ev.timed_out) {
          next.state = JobState::kTimeout;
        } else {
          next.state = clean ? JobState::kSucceeded : JobState::kFailed;
        }
        next.exit_code = ev.exit_code;
        next.signal = ev.signal;
        next.end_time_us = ev.time_us;
        if (next.start_time_us == 0 && ev.reason.empty()) next.start_time_us = ev.time_us;
        if (!ev.reason.empty()) next.reason = ev.reason;
        if (!ev.stdout_path.empty()) next.stdout_path = ev.stdout_path;
        if (!ev.stderr_path.empty()) next.stderr_path = ev.stderr_path;
        GP_RETURN_IF_ERROR(store_->UpdateJob(next, job.state));
        const int64_t id = it->first;
        active_.erase(it);
        Touched(id);
        freed = true;
        continue;
      }
      case AgentEvent::Kind::kLost:
        GP_RETURN_IF_ERROR(
            FinishOnNodeLoss(job, ev.reason.empty() ? "lost on " + node : ev.reason));
        freed = true;
        continue;
    }
  }
  if (freed) WakeScheduler();
  return Status::Ok();
}

Status Controller::ScheduleOnce() {
  // Planning takes milliseconds with a long queue; API calls must not wait for it. So the
  // pass plans on a snapshot (jobs without their command lines and variables) taken
  // under the lock, and applies the result under the lock after checking that nothing
  // it relied on changed meanwhile.
  std::vector<std::shared_ptr<const Job>> snapshot;
  std::vector<std::pair<std::string, NodeEntry>> nodes_copy;
  {
    std::lock_guard lock(mu_);
    bool any_pending = false;
    snapshot.reserve(slim_.size());
    for (const auto& [id, slim] : slim_) {  // shared, immutable copies: no deep copy here
      any_pending = any_pending || slim->state == JobState::kPending;
      snapshot.push_back(slim);
    }
    if (!any_pending) {
      last_pass_blocked_ = false;
      return Status::Ok();
    }
    for (const auto& [name, e] : nodes_) {
      if (e.up)
        nodes_copy.emplace_back(name,
                                NodeEntry{e.info, e.cpu_milli, e.memory_mib, 0, true, {}, {}});
    }
  }
  std::vector<SchedNode> nodes;
  nodes.reserve(nodes_copy.size());
  for (const auto& [name, e] : nodes_copy)
    nodes.push_back({name, &e.info, e.cpu_milli, e.memory_mib});
  std::vector<const Job*> active;
  active.reserve(snapshot.size());
  for (const auto& j : snapshot) active.push_back(j.get());
  const int64_t now = clock_->NowMicros();
  GP_ASSIGN_OR_RETURN(ScheduleResult plan, scheduler_->Plan(active, nodes, now / 1'000'000));

  std::lock_guard lock(mu_);
  // Apply only if every job the plan saw occupying resources still does, every job it
  // starts is still pending, and every node it used is still up; otherwise plan again.
  for (const auto& slim : snapshot) {
    const Job& j = *slim;
    if (j.state == JobState::kPending) continue;
    auto it = active_.find(j.id);
    if (it == active_.end()) continue;  // ended: resources freed, the plan stays safe
    if (it->second.placement != j.placement) {
      WakeScheduler();
      return Status::Ok();
    }
  }
  std::vector<store::Store::JobUpdate> updates;
  for (auto& [id, placement] : plan.starts) {
    auto it = active_.find(id);
    if (it == active_.end() || it->second.state != JobState::kPending) continue;
    bool nodes_up = true;
    for (const jobs::TaskPlacement& p : placement) {
      auto n = nodes_.find(p.node);
      nodes_up = nodes_up && n != nodes_.end() && n->second.up;
    }
    if (!nodes_up) continue;
    Job next = it->second;
    next.state = JobState::kAssigned;
    next.placement = std::move(placement);
    next.pending_reason.clear();
    next.attempt += 1;
    updates.push_back({std::move(next), JobState::kPending});
  }
  last_pass_blocked_ = updates.empty();
  if (!updates.empty()) {
    GP_RETURN_IF_ERROR(store_->UpdateJobs(updates));
    for (auto& u : updates) {
      const int64_t id = u.job.id;
      active_[id] = std::move(u.job);
      Touched(id);
    }
    NotifyNode("");
  }
  // Readers attach these to pending jobs; the old map is freed after the lock.
  pending_reasons_.swap(plan.pending_reasons);
  return Status::Ok();
}

Status Controller::SweepNodes() {
  std::lock_guard lock(mu_);
  const int64_t now = clock_->NowMicros();
  for (auto& [name, e] : nodes_) {
    if (!e.up || now - e.last_seen_us <= options_.node_timeout_us) continue;
    e.up = false;
    spdlog::warn("node {} stopped responding ({} s without a poll)", name,
                 (now - e.last_seen_us) / 1'000'000);
    std::vector<int64_t> victims;
    for (int64_t id : occupying_) {
      if (OnNode(active_.at(id), name)) victims.push_back(id);
    }
    const std::string reason = "node " + name + " stopped responding (no heartbeat for " +
                               std::to_string(options_.node_timeout_us / 1'000'000) + " s)";
    for (int64_t id : victims) GP_RETURN_IF_ERROR(FinishOnNodeLoss(active_.at(id), reason));
    WakeScheduler();
  }
  return Status::Ok();
}

}  // namespace gpupool::controller
