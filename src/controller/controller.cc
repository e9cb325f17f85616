#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/json.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"
#include "controller/job_scheduler.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"

namespace gpupool::controller {

using internal::Occupies;
using internal::OnNode;
using jobs::Job;
using jobs::JobState;

Controller::Controller(store::Store* store, const Clock* clock, ControllerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      log_relay_(
          [this](const std::string&) {
            // Taking the lock orders this wake after a poll's check for work, so the wake
            // cannot fall between that check and the poll's wait.
            { std::lock_guard lock(mu_); }
            work_cv_.notify_all();
          },
          clock) {}

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
  // The queued counts: out with what slim_ had (the job as last touched), in with what
  // the job is now. A job's user and project never change.
  if (auto old = slim_.find(id); old != slim_.end() && old->second->state == JobState::kPending) {
    CountQueued(*old->second, -1);
  }
  if (it == active_.end()) {
    occupying_.erase(id);
    slim_.erase(id);
    return;
  }
  const Job& job = it->second;
  if (job.state == JobState::kPending) CountQueued(job, +1);
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
  slim->dependencies = job.dependencies;
  slim->array_id = job.array_id;  // an array's limit on elements running at once
  slim->array_max_running = job.array_max_running;
  slim->held_by = job.held_by;  // held jobs are not started
  slim->held_by_admin = job.held_by_admin;
  if (job.state == JobState::kPending) slim->needs = job.needs;  // placement filter
  slim_[id] = std::move(slim);
}

void Controller::CountQueued(const Job& job, int64_t delta) {
  auto add = [delta](std::map<std::string, int64_t>& m, const std::string& key) {
    auto [e, inserted] = m.emplace(key, 0);
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

void Controller::WaitUntilNotWriting(Lock& lock, int64_t id) {
  if (writing_.count(id) == 0) return;
  ++write_waiters_;
  write_cv_.notify_all();  // WaitForWritersWaiting
  write_cv_.wait(lock, [&] { return writing_.count(id) == 0; });
  --write_waiters_;
}

bool Controller::WaitForWritersWaiting(int n, int timeout_ms) {
  Lock lock(mu_);
  return write_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [&] { return write_waiters_ >= n; });
}

Status Controller::WriteJobsUnlocked(Lock& lock, std::vector<store::Store::JobUpdate>& updates) {
  if (updates.empty()) return Status::Ok();
  for (const auto& u : updates) writing_.insert(u.job.id);
  lock.unlock();
  Status s = store_->UpdateJobs(updates, nullptr);
  lock.lock();
  for (const auto& u : updates) writing_.erase(u.job.id);
  write_cv_.notify_all();
  if (s.ok()) {
    for (auto& u : updates) u.job.version = u.expected_version + 1;  // as stored
  }
  return s;
}

Status Controller::WriteJobUnlocked(Lock& lock, Job& next, JobState expected) {
  // `next` is a copy of the job in memory, changed: its version is the one read.
  std::vector<store::Store::JobUpdate> one = {{next, expected, next.version}};
  GP_RETURN_IF_ERROR(WriteJobsUnlocked(lock, one));
  next.version = one[0].job.version;
  return Status::Ok();
}

Result<Job> Controller::ApplyLocked(Lock& lock, int64_t id, const lifecycle::Event& event) {
  WaitUntilNotWriting(lock, id);
  auto it = active_.find(id);
  if (it == active_.end()) {
    return Status::NotFound("job " + std::to_string(id) + " is no longer active");
  }
  GP_ASSIGN_OR_RETURN(lifecycle::Transition t,
                      lifecycle::Step(it->second, event, clock_->NowMicros()));
  if (!t.changed) return std::move(t.next);
  GP_RETURN_IF_ERROR(WriteJobUnlocked(lock, t.next, t.expected));
  Job next = t.next;
  Install(std::move(t));
  return next;
}

Result<std::vector<Job>> Controller::ApplyManyLocked(
    Lock& lock, std::vector<std::pair<int64_t, lifecycle::Event>> events) {
  std::vector<lifecycle::Transition> steps;
  std::vector<store::Store::JobUpdate> updates;
  const int64_t now = clock_->NowMicros();
  for (const auto& [id, event] : events) {
    auto it = active_.find(id);
    if (it == active_.end() || writing_.count(id) != 0) continue;  // that writer's now
    Result<lifecycle::Transition> t = lifecycle::Step(it->second, event, now);
    if (!t.ok()) {
      spdlog::error("job {}: {}: {}", id, lifecycle::EventName(event), t.status().ToString());
      continue;
    }
    if (!t->changed) continue;
    updates.push_back({t->next, t->expected, t->next.version});
    steps.push_back(std::move(*t));
  }
  // Written together without the lock; the jobs stay as they were meanwhile (writing_).
  GP_RETURN_IF_ERROR(WriteJobsUnlocked(lock, updates));
  std::vector<Job> out;
  out.reserve(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    lifecycle::Transition& t = steps[i];
    t.next.version = updates[i].job.version;  // as stored
    out.push_back(t.next);
    Install(std::move(t));
  }
  return out;
}

void Controller::Install(lifecycle::Transition t) {
  const int64_t id = t.next.id;
  const lifecycle::Effects& fx = t.effects;
  for (const lifecycle::StrayStop& s : fx.strays) {
    auto n = nodes_.find(s.node);
    if (n == nodes_.end()) continue;
    n->second.stray_sent_us[{id, s.attempt}] = 0;
    if (s.started_there && n->second.up) n->second.stray_running.insert({id, s.attempt});
  }
  if (fx.stop_execs) {
    // Commands run by gpupool exec in the job end with it.
    for (auto& [xid, x] : execs_) {
      if (x.job_id != id || x.ended) continue;
      if (auto n = nodes_.find(x.node); n != nodes_.end()) {
        n->second.stray_sent_us[{id, t.next.attempt}] = 0;
      }
    }
  }
  if (fx.resend_stop) {
    for (const jobs::TaskPlacement& p : t.next.placement) {
      if (auto n = nodes_.find(p.node); n != nodes_.end()) n->second.cancel_sent_us.erase(id);
    }
  }
  if (!fx.log.empty()) {
    if (fx.log_warning) {
      spdlog::warn("{}", fx.log);
    } else {
      spdlog::info("{}", fx.log);
    }
  }
  if (fx.ended) {
    // Dependants ask; an ended job's state never changes. (An array's id names all its
    // elements together: EndedState works that out when asked.)
    if (t.next.array_id == 0) {
      if (ended_states_.size() > 100'000) ended_states_.clear();
      ended_states_[id] = t.next.state;
    }
    pending_reasons_.erase(id);
    active_.erase(id);
  } else {
    if (fx.pending_reason_changed) {
      if (t.next.pending_reason.empty()) {
        pending_reasons_.erase(id);
      } else {
        pending_reasons_[id] = t.next.pending_reason;
      }
    }
    active_[id] = std::move(t.next);
  }
  Touched(id);
  if (fx.freed) WakeScheduler();
  if (fx.queue_changed) WakeSchedulerForArrival();
  if (fx.notify_nodes) work_cv_.notify_all();
  if (fx.notify_exec) exec_cv_.notify_all();
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
    if (Occupies(j)) lifecycle::NormalizeTasks(j);
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
    e.address = r.address.empty() ? r.name : r.address;
    e.draining = r.draining;
    e.drain_reason = r.drain_reason;
    if (Result<protocol::Version> v = protocol::ParseVersion(r.protocol); v.ok()) e.version = *v;
    // A restarted controller gives every known node a full timeout to poll again.
    e.last_seen_us = now;
    e.up = true;
    nodes_.emplace(r.name, std::move(e));
  }
  GP_ASSIGN_OR_RETURN(std::optional<std::string> limits, store_->GetSetting("limits"));
  if (limits) {
    Result<Json> j = ParseJson(*limits, "stored limits");
    Result<Limits> l = j.ok() ? LimitsFromJson(*j) : Result<Limits>(j.status());
    if (!l.ok()) return l.status().WithContext("the stored usage limits");
    limits_ = std::move(*l);
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
  exec_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
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
        clock_->WaitOnce(scheduler_cv_, lock,
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
      clock_->WaitFor(scheduler_cv_, lock, std::clamp<int64_t>(pass_us, 1000, 20'000),
                      [this] { return stopping_; });
    }
    last_pass_end = clock_->MonotonicMicros();
    const int64_t now = clock_->MonotonicMicros();
    if (now - last_sweep >= options_.scheduler_period_us) {
      last_sweep = now;
      if (Status s = SweepNodes(); !s.ok()) spdlog::error("node sweep: {}", s.ToString());
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

void Controller::NotifyNode(const std::string&) { work_cv_.notify_all(); }

Result<JobState> Controller::EndedState(int64_t id) {
  if (auto it = ended_states_.find(id); it != ended_states_.end()) return it->second;
  // An array (named by its id, its first element's) is as its elements together: active
  // while any is, then SUCCEEDED if every one succeeded, else the first other end state.
  std::optional<JobState> active;
  for (const auto& [other, job] : active_) {
    if (job.array_id == id || other == id) {
      active = job.state;
      break;
    }
  }
  if (active) return *active;
  GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
  JobState state = job.state;
  if (job.array_id == id && jobs::IsTerminal(state)) {
    store::JobFilter f;
    f.user = job.user;
    GP_ASSIGN_OR_RETURN(std::vector<Job> mine, store_->ListJobs(f));
    for (const Job& e : mine) {
      if (e.array_id == id && e.state != JobState::kSucceeded) {
        state = e.state;
        break;
      }
    }
  }
  if (jobs::IsTerminal(state)) {
    if (ended_states_.size() > 100'000) ended_states_.clear();
    ended_states_[id] = state;  // an ended job's state never changes
  }
  return state;
}

Status Controller::ResolveDependencies(Lock& lock, std::map<int64_t, std::string>* blocked) {
  // In id order: a dependency is older than its dependant, so a chain of jobs that can
  // never run ends in one pass.
  std::vector<int64_t> ids;
  for (const auto& [id, job] : active_) {
    // A job whose cancel or hold is being written (writing_) is that writer's.
    if (job.state == JobState::kPending && !job.dependencies.empty() && writing_.count(id) == 0) {
      ids.push_back(id);
    }
  }
  // Jobs that end here, written together afterwards; a dependant later in the pass sees
  // them as ended already.
  std::map<int64_t, JobState> ending;
  std::vector<std::pair<int64_t, lifecycle::Event>> ends;
  for (int64_t id : ids) {
    const Job& job = active_.at(id);
    std::string waiting;
    std::string never;
    for (const jobs::Dependency& d : job.dependencies) {
      auto e = ending.find(d.job_id);
      Result<JobState> st = e != ending.end() ? Result<JobState>(e->second) : EndedState(d.job_id);
      const std::string flag = "--" + std::string(jobs::DependencyKindName(d.kind));
      const std::string other = "job " + std::to_string(d.job_id);
      if (!st.ok()) {
        never = other + " is gone (" + st.status().message() + ")";
        break;
      }
      const std::string name(jobs::JobStateName(*st));
      const char* wants = d.kind == jobs::Dependency::Kind::kAfterOk      ? "succeed"
                          : d.kind == jobs::Dependency::Kind::kAfterNotOk ? "fail"
                                                                          : "end";
      if (!jobs::IsTerminal(*st)) {
        if (waiting.empty()) {
          waiting = "waits for " + other + " (" + name + ") to " + wants + " (" + flag + ")";
        }
        continue;
      }
      const bool ok = *st == JobState::kSucceeded;
      if ((d.kind == jobs::Dependency::Kind::kAfterOk && !ok) ||
          (d.kind == jobs::Dependency::Kind::kAfterNotOk && ok)) {
        never = other + " ended " + name + ", and " + flag + " needs it to " + wants;
        break;
      }
    }
    if (!never.empty()) {
      ending[id] = JobState::kCancelled;
      ends.emplace_back(id, lifecycle::DependencyFailed{never});
      continue;
    }
    if (!waiting.empty()) (*blocked)[id] = waiting;
  }
  // Written together without the lock (writing_): cancels and holds of these jobs wait.
  return ApplyManyLocked(lock, std::move(ends)).status();
}

void Controller::BlockWhileEarlierAttemptsStop(
    std::map<int64_t, std::pair<int32_t, std::string>>* stopping) const {
  // A requeued job whose earlier attempt a returning node still runs (its supervisor
  // outlived the agent) is stopped there first: at most one attempt runs at a time. The
  // stop order is resent until the attempt's end is reported, or given up on with it.
  for (const auto& [name, e] : nodes_) {
    for (const auto& key : e.stray_running) {
      auto it = active_.find(key.first);
      if (it == active_.end() || it->second.state != JobState::kPending) continue;
      if (key.second > it->second.attempt) continue;
      stopping->emplace(key.first, std::make_pair(key.second, name));  // the first one found
    }
  }
}

Status Controller::ScheduleOnce() {
  const int64_t pass_start_us = clock_->MonotonicMicros();
  // Planning takes milliseconds with a long queue; API calls must not wait for it. So the
  // pass plans on a snapshot (jobs without their command lines and variables) taken
  // under the lock, and applies the result under the lock after checking that nothing
  // it relied on changed meanwhile.
  std::vector<std::shared_ptr<const Job>> snapshot;
  std::vector<std::pair<std::string, NodeEntry>> nodes_copy;
  AdmissionFeed feed;  // pending jobs whose dependencies or earlier attempts hold them
  Limits limits;
  {
    Lock lock(mu_);
    limits = limits_;
    GP_RETURN_IF_ERROR(ResolveDependencies(lock, &feed.waiting));
    BlockWhileEarlierAttemptsStop(&feed.stopping);
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
      if (!e.up) continue;
      NodeEntry copy;
      copy.info = e.info;
      copy.cpu_milli = e.cpu_milli;
      copy.memory_mib = e.memory_mib;
      copy.draining = e.draining;
      nodes_copy.emplace_back(name, std::move(copy));
    }
  }
  std::vector<SchedNode> nodes;
  nodes.reserve(nodes_copy.size());
  for (const auto& [name, e] : nodes_copy)
    nodes.push_back({name, &e.info, e.cpu_milli, e.memory_mib, e.draining});
  std::vector<const Job*> active;
  active.reserve(snapshot.size());
  for (const auto& j : snapshot) active.push_back(j.get());
  const int64_t now = clock_->NowMicros();
  GP_ASSIGN_OR_RETURN(ScheduleResult plan,
                      scheduler_->Plan(active, nodes, now / 1'000'000, feed, limits));

  std::unique_lock lock(mu_);
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
  std::vector<std::pair<int64_t, lifecycle::Event>> placements;
  for (auto& [id, placement] : plan.starts) {
    auto it = active_.find(id);
    if (it == active_.end() || it->second.state != JobState::kPending) continue;
    if (!it->second.held_by.empty()) continue;  // held while the plan was made
    if (writing_.count(id) != 0) continue;      // being cancelled or held right now
    bool nodes_up = true;
    bool drained = false;
    std::vector<std::string> hosts;
    for (const jobs::TaskPlacement& p : placement) {
      auto n = nodes_.find(p.node);
      nodes_up = nodes_up && n != nodes_.end() && n->second.up;
      drained = drained || (n != nodes_.end() && n->second.draining);
      hosts.push_back(n != nodes_.end() ? n->second.address : p.node);
    }
    if (!nodes_up || drained) continue;  // drained while the plan was made
    placements.emplace_back(id, lifecycle::Placed{std::move(placement), std::move(hosts)});
  }
  last_pass_blocked_ = placements.empty();
  if (!placements.empty()) {
    // The assignments are written without the lock, so that API calls and agents' polls
    // never wait on the database for them. Meanwhile the jobs are PENDING in memory, and
    // Cancel and Hold of one of them wait for the write (writing_); nothing else changes
    // a pending job, and this is the one scheduling thread.
    GP_ASSIGN_OR_RETURN(std::vector<Job> placed, ApplyManyLocked(lock, std::move(placements)));
    std::vector<std::pair<int64_t, std::string>> orphans;  // placed on a node now down
    for (const Job& job : placed) {
      for (const jobs::TaskPlacement& p : job.placement) {
        if (auto n = nodes_.find(p.node); n == nodes_.end() || !n->second.up) {
          orphans.emplace_back(job.id, p.node);
          break;
        }
      }
    }
    // A node that was declared down while the write was under way: its sweep did not see
    // these jobs, so they end here as they would have there.
    for (const auto& [id, node] : orphans) {
      Result<Job> r =
          ApplyLocked(lock, id,
                      lifecycle::NodeLost{
                          node, "node " + node + " stopped responding while the job was placed"});
      if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
    }
  }
  // Readers attach these to pending jobs; the old map is freed after the lock.
  pending_reasons_.swap(plan.pending_reasons);
  int64_t no_room = 0;
  for (const auto& [id, why] : pending_reasons_) {
    if (PendingReasonClass(why) == "resources") ++no_room;
  }
  metrics_.ObservePass(static_cast<double>(clock_->MonotonicMicros() - pass_start_us) / 1e6,
                       no_room);
  return Status::Ok();
}

PoolSnapshot Controller::MetricsSnapshot(std::vector<NodeView>* nodes_out) {
  std::vector<NodeView> nodes = Nodes();
  PoolSnapshot s;
  for (const NodeView& v : nodes) {
    ++s.nodes_by_state[v.state];
    if (v.state == "down") continue;
    s.gpus_total += static_cast<int64_t>(v.info.gpus.size());
    for (int milli : v.allocated_milli) s.gpus_allocated += milli / 1000.0;
  }
  if (nodes_out != nullptr) *nodes_out = std::move(nodes);
  std::lock_guard lock(mu_);
  for (const auto& [id, job] : active_) {
    ++s.jobs_by_state[std::string(jobs::JobStateName(job.state))];
    if (job.state != JobState::kPending) continue;
    auto why = pending_reasons_.find(id);
    ++s.pending_by_reason[PendingReasonClass(why == pending_reasons_.end() ? "" : why->second)];
  }
  return s;
}

Status Controller::SweepNodes() {
  Lock lock(mu_);
  const int64_t now = clock_->NowMicros();
  std::vector<std::string> silent;
  for (auto& [name, e] : nodes_) {
    if (!e.up || now - e.last_seen_us <= options_.node_timeout_us) continue;
    e.up = false;
    spdlog::warn("node {} stopped responding ({} s without a poll)", name,
                 (now - e.last_seen_us) / 1'000'000);
    silent.push_back(name);
  }
  if (silent.empty()) return Status::Ok();
  const std::string timeout = std::to_string(options_.node_timeout_us / 1'000'000) + " s";
  for (const std::string& name : silent) {
    std::vector<int64_t> victims;
    for (int64_t id : occupying_) {
      if (OnNode(active_.at(id), name)) victims.push_back(id);
    }
    const std::string reason =
        "node " + name + " stopped responding (no heartbeat for " + timeout + ")";
    for (int64_t id : victims) {
      // Each end is written without the lock: looked at again once no write of it is
      // under way. A node that registered again meanwhile has dealt with its jobs.
      WaitUntilNotWriting(lock, id);
      auto it = active_.find(id);
      if (it == active_.end() || !Occupies(it->second) || !OnNode(it->second, name) ||
          nodes_.at(name).up) {
        continue;
      }
      Result<Job> r = ApplyLocked(lock, id, lifecycle::NodeLost{name, reason});
      if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
    }
  }
  WakeScheduler();
  return Status::Ok();
}

}  // namespace gpupool::controller
