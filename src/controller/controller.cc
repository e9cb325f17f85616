#include "controller/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/json.h"
#include "controller/job_lifecycle.h"
#include "controller/job_scheduler.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"

namespace gpupool::controller {

using jobs::Job;
using jobs::JobState;

namespace {

constexpr int64_t kResendAfterUs = 5'000'000;
// A node that answers stop orders for a job this long without reporting any of its
// tasks' ends runs none of them.
constexpr int64_t kStrayGiveUpUs = 60'000'000;
// The most output of ended exec sessions held for their clients (ExecReport's inline
// output, up to 16 KiB each); past it a session's output is relayed from its node.
constexpr size_t kMaxExecOutputHeld = 32 << 20;

bool OnNode(const Job& job, const std::string& node) {
  return std::any_of(job.placement.begin(), job.placement.end(),
                     [&](const jobs::TaskPlacement& p) { return p.node == node; });
}

bool Occupies(const Job& job) {
  return job.state == JobState::kAssigned || job.state == JobState::kRunning;
}

// The IP address of "1.2.3.4:5678" or "[::1]:5678"; "" for "unix" and the unknown.
std::string RemoteIp(const std::string& remote) {
  if (remote.empty() || remote == "unix") return "";
  if (remote.front() == '[') {
    const auto close = remote.find(']');
    return close == std::string::npos ? "" : remote.substr(1, close - 1);
  }
  const auto colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
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
  write_cv_.wait(lock, [&] { return writing_.count(id) == 0; });
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

size_t MaxRequestBodyBytes(const ControllerOptions& options) {
  return std::max<size_t>(size_t{1} << 20, 2 * static_cast<size_t>(options.max_submission_bytes));
}

Status Controller::CheckSubmissionSize(const Job& job) const {
  const int64_t bytes = jobs::SubmissionBytes(job);
  if (bytes <= options_.max_submission_bytes) return Status::Ok();
  return Status::ResourceExhausted(
      "the job's submission is " + std::to_string(bytes) +
      " bytes (its command, environment variables and paths, each string with its NUL), "
      "over the server's max-submission-bytes of " +
      std::to_string(options_.max_submission_bytes) +
      ": pass fewer or shorter --env variables (or a long command as a script file), or ask "
      "an admin to raise max-submission-bytes in the [server] section of its config file");
}

Result<Job> Controller::Submit(Job job, const Caller& caller, bool* duplicate) {
  if (duplicate != nullptr) *duplicate = false;
  job.user = caller.user;
  job.uid = caller.uid;
  job.gid = caller.gid;
  job.state = JobState::kPending;
  job.submit_time_us = clock_->NowMicros();
  job.attempt = 0;
  if (job.command.empty() && job.interactive != "alloc") {
    return Status::InvalidArgument(
        "command: a job needs a command to run, e.g. -- python3 train.py");
  }
  GP_RETURN_IF_ERROR(jobs::ValidateSubmission(job));
  GP_RETURN_IF_ERROR(jobs::ValidateRequest(job.request).WithContext("request"));
  GP_RETURN_IF_ERROR(CheckSubmissionSize(job));
  // An array is parsed up to the server's bound on its size, no further.
  std::optional<jobs::ArraySpec> array;
  if (!job.array.empty()) {
    GP_ASSIGN_OR_RETURN(array, jobs::ParseArraySpec(job.array, options_.max_array_size,
                                                    "the server's max-array-size; an admin "
                                                    "raises it in the [server] section of its "
                                                    "config file"));
  }
  const int64_t adding = array ? static_cast<int64_t>(array->indices.size()) : 1;
  // What its jobs hold of the controller's memory: one copy of the submission for all
  // the elements of an array (they share it, jobs::Job::env and command).
  const int64_t bytes = jobs::SubmissionBytes(job);
  // Dependencies name jobs that exist, so no chain of them can loop back to this one.
  for (const jobs::Dependency& d : job.dependencies) {
    const std::string flag =
        "--" + std::string(jobs::DependencyKindName(d.kind)) + " " + std::to_string(d.job_id);
    Result<Job> dep = store_->GetJob(d.job_id);
    if (!dep.ok()) {
      if (dep.status().code() == StatusCode::kNotFound) {
        return Status::NotFound(flag + ": there is no job " + std::to_string(d.job_id));
      }
      return dep.status();
    }
    if (!caller.admin && dep->uid != caller.uid) {
      return Status::PermissionDenied(flag + ": job " + std::to_string(d.job_id) +
                                      " is another user's; a job may depend on its owner's "
                                      "jobs only");
    }
  }
  // A retried submission (the same user and submit_key) answers with what the first made.
  auto earlier = [&]() -> Result<std::optional<Job>> {
    if (job.submit_key.empty()) return std::optional<Job>();
    GP_ASSIGN_OR_RETURN(std::optional<int64_t> id, store_->FindSubmitKey(job.uid, job.submit_key));
    if (!id) return std::optional<Job>();
    if (duplicate != nullptr) *duplicate = true;
    std::lock_guard lock(mu_);
    if (auto it = active_.find(*id); it != active_.end()) {
      Job copy = it->second;
      AttachPendingReason(&copy);
      return std::optional<Job>(std::move(copy));
    }
    GP_ASSIGN_OR_RETURN(Job stored, store_->GetJob(*id));
    return std::optional<Job>(std::move(stored));
  };
  {
    GP_ASSIGN_OR_RETURN(std::optional<Job> first, earlier());
    if (first) return std::move(*first);
  }
  // Jobs that passed the queue bounds' check but are not in active_ yet count as queued,
  // so concurrent submissions cannot pass a bound together: each is handed over to the
  // queued counts as it lands in active_, the rest released on every return.
  int64_t reserved = 0;
  int64_t reserved_bytes = 0;
  // Copies: `job` is moved from by the time this runs.
  const std::string user = job.user;
  const std::string project = jobs::AccountingProject(job);
  struct Release {
    Controller* c;
    const std::string* user;
    const std::string* project;
    int64_t* n;
    int64_t* bytes;
    ~Release() {
      if (*n == 0 && *bytes == 0) return;
      std::lock_guard lock(c->mu_);
      c->Unreserve(*user, *project, *n, *bytes);
    }
  } release{this, &user, &project, &reserved, &reserved_bytes};
  {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(CheckQueuedLimits(job, adding, bytes));
    reserved = adding;
    reserved_bytes = bytes;
    submitting_[job.user] += reserved;
    submitting_project_[project] += reserved;
    submitting_total_ += reserved;
    submitting_bytes_[job.user] += reserved_bytes;
    submitting_bytes_total_ += reserved_bytes;
    std::vector<SchedNode> nodes;
    for (const auto& [name, e] : nodes_)
      nodes.push_back({name, &e.info, e.cpu_milli, e.memory_mib});
    if (!nodes.empty()) {
      if (std::string why = JobScheduler::NeverFits(job, nodes); !why.empty()) {
        return Status::FailedPrecondition("no node of this pool can ever run this job: " + why);
      }
    }
  }
  if (array) {
    Result<Job> first = SubmitArray(job, *array, &reserved, &reserved_bytes);
    if (first.ok() || first.status().code() != StatusCode::kAlreadyExists) return first;
    // The same key, submitted again meanwhile: that one made it.
    GP_ASSIGN_OR_RETURN(std::optional<Job> made, earlier());
    if (made) return std::move(*made);
    return first;
  }
  // The store serialises writers itself; API calls need not wait for this one.
  Result<int64_t> id = store_->InsertJob(job);
  if (!id.ok() && id.status().code() == StatusCode::kAlreadyExists && !job.submit_key.empty()) {
    GP_ASSIGN_OR_RETURN(std::optional<Job> made, earlier());
    if (made) return std::move(*made);
  }
  GP_ASSIGN_OR_RETURN(job.id, std::move(id));
  job.version = 1;  // as stored
  std::lock_guard lock(mu_);
  active_[job.id] = job;
  Touched(job.id);
  Unreserve(user, project, 1, reserved_bytes);
  reserved = 0;
  reserved_bytes = 0;
  WakeSchedulerForArrival();
  return job;
}

void Controller::Unreserve(const std::string& user, const std::string& project, int64_t n,
                           int64_t bytes) {
  if ((submitting_[user] -= n) == 0) submitting_.erase(user);
  if ((submitting_project_[project] -= n) == 0) submitting_project_.erase(project);
  submitting_total_ -= n;
  if ((submitting_bytes_[user] -= bytes) == 0) submitting_bytes_.erase(user);
  submitting_bytes_total_ -= bytes;
}

Result<Job> Controller::SubmitArray(Job job, const jobs::ArraySpec& spec, int64_t* reserved,
                                    int64_t* reserved_bytes) {
  // The elements differ in their index and id only: their GPUPOOL_ARRAY_* variables are
  // added at launch (MakeLaunchOrder), so that the store keeps one copy of what they
  // share (their spec) for all of them. Each is a copy of `job`, sharing its command
  // and environment (SharedValue): one copy of those in memory too.
  job.array_max_running = spec.max_running;
  if (spec.indices.empty()) return Status::InvalidArgument("array '" + job.array + "': no index");
  std::vector<Job> elements(spec.indices.size(), job);
  for (size_t k = 0; k < spec.indices.size(); ++k) elements[k].array_index = spec.indices[k];
  // One transaction: every element or none (a retry with the same submit_key then finds
  // the whole array or nothing). The store sets the array's id, the first element's, in
  // every element, and keeps the array's submit_key on the first.
  GP_ASSIGN_OR_RETURN(elements, store_->InsertJobs(std::move(elements), store::InsertAs::kArray));
  const Job first = elements.front();
  std::lock_guard lock(mu_);
  // All the elements land together: from here on they count as queued (the array's bytes
  // once, with its first element) instead of as the submission's reservation.
  for (Job& e : elements) {
    const int64_t id = e.id;
    active_[id] = std::move(e);
    Touched(id);
  }
  const auto landed = static_cast<int64_t>(elements.size());
  Unreserve(job.user, jobs::AccountingProject(job), landed, *reserved_bytes);
  *reserved -= landed;
  *reserved_bytes = 0;
  WakeSchedulerForArrival();
  spdlog::info("array {} of {} elements submitted by {}", first.id, spec.indices.size(),
               first.user);
  return first;
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
  if (!only_active) {
    GP_ASSIGN_OR_RETURN(std::vector<Job> stored, store_->ListJobs(f));
    // A pending job's reason lives in memory, not in the store (the dashboard's queue
    // lists every state at once): one lock for all of them, after the store's read.
    if (std::any_of(stored.begin(), stored.end(),
                    [](const Job& j) { return j.state == JobState::kPending; })) {
      std::lock_guard lock(mu_);
      for (Job& job : stored) AttachPendingReason(&job);
    }
    return stored;
  }
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
  Lock lock(mu_);
  WaitUntilNotWriting(lock, id);
  auto it = active_.find(id);
  if (it == active_.end()) {
    GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
    GP_RETURN_IF_ERROR(CheckOwner(job, caller));
    // An ended job: the lifecycle says why it refuses.
    return lifecycle::Step(job, lifecycle::CancelRequested{caller.user}, clock_->NowMicros())
        .status();
  }
  GP_RETURN_IF_ERROR(CheckOwner(it->second, caller));
  return ApplyLocked(lock, id, lifecycle::CancelRequested{caller.user});
}

Status Controller::CheckQueuedLimits(const Job& job, int64_t adding, int64_t bytes) {
  const std::string& project = jobs::AccountingProject(job);
  auto count = [](const std::map<std::string, int64_t>& m, const std::string& key) -> int64_t {
    auto it = m.find(key);
    return it == m.end() ? 0 : it->second;
  };
  auto over = [&](const std::string& who, int64_t queued, const std::string& limit,
                  const std::string& fix) {
    return Status::ResourceExhausted(who + " has " + std::to_string(queued) + " jobs queued; " +
                                     std::to_string(adding) + " more would pass the limit (" +
                                     limit + "): wait for some to start, or " + fix);
  };
  const Limit& ul = limits_.ForUser(job.user);
  const int64_t user_queued = count(queued_by_user_, job.user) + count(submitting_, job.user);
  if (ul.max_queued >= 0) {
    if (user_queued + adding > ul.max_queued) {
      return over("user " + job.user, user_queued, "max_queued " + std::to_string(ul.max_queued),
                  "ask an admin (`gpupool limits`)");
    }
  } else if (user_queued + adding > options_.max_queued_per_user) {
    return over("user " + job.user, user_queued,
                "max-queued-per-user " + std::to_string(options_.max_queued_per_user),
                "ask an admin to raise it: [server] max-queued-per-user in the server's config "
                "file, or max_queued for one user with `gpupool limits`");
  }
  if (const Limit* pl = limits_.ForProject(project); pl != nullptr && pl->max_queued >= 0) {
    const int64_t queued = count(queued_by_project_, project) + count(submitting_project_, project);
    if (queued + adding > pl->max_queued) {
      return over("project " + project, queued, "max_queued " + std::to_string(pl->max_queued),
                  "ask an admin (`gpupool limits`)");
    }
  }
  const int64_t total = queued_total_ + submitting_total_;
  if (total + adding > options_.max_queued_total) {
    return over("the pool", total, "max-queued-total " + std::to_string(options_.max_queued_total),
                "ask an admin to raise it: [server] max-queued-total in the server's config "
                "file");
  }
  // What the queued jobs hold: an array's submission counted once.
  auto over_bytes = [&](const std::string& who, int64_t queued, const std::string& key,
                        int64_t limit) {
    return Status::ResourceExhausted(
        who + " has " + std::to_string(queued) +
        " bytes of submissions queued (commands, environments, paths; an array's once); " +
        std::to_string(bytes) + " more would pass the limit (" + key + " " + std::to_string(limit) +
        "): wait for some to start, submit less (an array holds one copy for all its "
        "elements), or ask an admin to raise it: [server] " +
        key + " in the server's config file");
  };
  const int64_t user_bytes =
      count(queued_bytes_by_user_, job.user) + count(submitting_bytes_, job.user);
  if (user_bytes + bytes > options_.max_queued_bytes_per_user) {
    return over_bytes("user " + job.user, user_bytes, "max-queued-bytes-per-user",
                      options_.max_queued_bytes_per_user);
  }
  const int64_t total_bytes = queued_bytes_total_ + submitting_bytes_total_;
  if (total_bytes + bytes > options_.max_queued_bytes_total) {
    return over_bytes("the pool", total_bytes, "max-queued-bytes-total",
                      options_.max_queued_bytes_total);
  }
  return Status::Ok();
}

Limits Controller::GetLimits() {
  std::lock_guard lock(mu_);
  return limits_;
}

Result<Limits> Controller::SetLimits(Limits limits, const Caller& caller) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins set limits (you are " + caller.user + ")");
  }
  // Written without mu_; settings_write_mu_ keeps two admins' writes in order.
  std::lock_guard write(settings_write_mu_);
  GP_RETURN_IF_ERROR(store_->PutSetting("limits", DumpJson(LimitsToJson(limits))));
  std::lock_guard lock(mu_);
  limits_ = std::move(limits);
  spdlog::info("usage limits set by {}: {}", caller.user, DumpJson(LimitsToJson(limits_)));
  capacity_changed_ = true;  // raised limits may let jobs start
  WakeScheduler();
  return limits_;
}

std::vector<int64_t> Controller::ArrayElements(int64_t array_id, int index) {
  std::lock_guard lock(mu_);
  std::vector<int64_t> out;
  for (const auto& [id, job] : active_) {
    if (job.array_id == array_id && (index < 0 || job.array_index == index)) out.push_back(id);
  }
  return out;
}

Result<int64_t> Controller::ArrayElementId(int64_t array_id, int index, const Caller& caller) {
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, job] : active_) {
      if (job.array_id == array_id && job.array_index == index) {
        GP_RETURN_IF_ERROR(CheckOwner(job, caller));
        return id;
      }
    }
  }
  // Errors name the array and the element (the caller's ARRAY_INDEX), and what to use.
  const std::string array = std::to_string(array_id);
  const std::string element = std::to_string(index);
  Result<Job> head = Get(array_id, caller);
  if (!head.ok() && head.status().code() == StatusCode::kNotFound) {
    return Status::NotFound("there is no array " + array + " (no job has id " + array +
                            "), so no element " + array + "_" + element);
  }
  if (!head.ok()) return head.status();
  if (head->array_id != array_id) {
    std::string what = "job " + array + " is not an array";
    std::string use = array;
    if (head->array_id != 0) {
      use += " or " + std::to_string(head->array_id) + "_" + std::to_string(head->array_index);
      what += " but element " + std::to_string(head->array_index) + " of array " +
              std::to_string(head->array_id);
    }
    return Status::NotFound(what + ", so it has no element " + element + "; name it " + use);
  }
  // The indices the array was submitted with (ascending, as its elements were stored).
  std::vector<int> indices;
  if (Result<jobs::ArraySpec> spec = jobs::ParseArraySpec(head->array); spec.ok()) {
    indices = std::move(spec->indices);
  }
  const auto at = std::find(indices.begin(), indices.end(), index);
  if (at == indices.end()) {
    return Status::NotFound("array " + array + " has no element " + element +
                            " (it was submitted with --array " + head->array + ")");
  }
  auto is_it = [&](const Job& j) { return j.array_id == array_id && j.array_index == index; };
  // Its id when no other job was stored between the array's elements (the usual case):
  // the array's id plus the element's place in the array.
  const int64_t guess = array_id + (at - indices.begin());
  if (Result<Job> j = store_->GetJob(guess); j.ok() && is_it(*j)) {
    GP_RETURN_IF_ERROR(CheckOwner(*j, caller));
    return j->id;
  }
  store::JobFilter f;
  f.user = head->user;
  f.array_id = array_id;
  GP_ASSIGN_OR_RETURN(std::vector<Job> elements, store_->ListJobs(f));
  for (const Job& j : elements) {
    if (is_it(j)) {
      GP_RETURN_IF_ERROR(CheckOwner(j, caller));
      return j.id;
    }
  }
  return Status::NotFound("array " + array + " has no element " + element + " stored");
}

Result<ArrayCancelled> Controller::CancelArray(int64_t array_id, const Caller& caller) {
  GP_ASSIGN_OR_RETURN(Job head, Get(array_id, caller));
  if (head.array_id != array_id) {
    return Status::InvalidArgument("job " + std::to_string(array_id) + " is not an array");
  }
  std::vector<std::pair<int64_t, JobState>> elements;  // still queued or running
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, job] : active_) {
      if (job.array_id == array_id) elements.emplace_back(id, job.state);
    }
  }
  ArrayCancelled out;
  Result<jobs::ArraySpec> spec = jobs::ParseArraySpec(head.array);
  out.elements = spec.ok() ? static_cast<int>(spec->indices.size()) : 0;
  for (const auto& [id, state] : elements) {
    Result<Job> j = Cancel(id, caller);
    if (!j.ok() && j.status().code() == StatusCode::kFailedPrecondition) continue;  // ended
    if (!j.ok()) {
      return j.status().WithContext("array " + std::to_string(array_id) + " (" +
                                    std::to_string(out.queued + out.running) +
                                    " elements cancelled before this one)");
    }
    ++(state == JobState::kPending ? out.queued : out.running);
  }
  if (out.queued + out.running == 0) {
    return Status::FailedPrecondition(
        "array " + std::to_string(array_id) + " has already ended: none of its " +
        std::to_string(out.elements) + " elements is queued or running");
  }
  GP_ASSIGN_OR_RETURN(out.head, Get(array_id, caller));
  spdlog::info("array {} cancelled by {}: {} queued and {} running elements", array_id, caller.user,
               out.queued, out.running);
  return out;
}

Result<Job> Controller::Hold(int64_t id, const Caller& caller, bool hold) {
  Lock lock(mu_);
  WaitUntilNotWriting(lock, id);
  auto event = [&](const Job& job) -> lifecycle::Event {
    if (hold) return lifecycle::Hold{caller.user, caller.admin && caller.uid != job.uid};
    return lifecycle::Release{caller.user, caller.admin};
  };
  auto it = active_.find(id);
  if (it == active_.end()) {
    GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
    GP_RETURN_IF_ERROR(CheckOwner(job, caller));
    return lifecycle::Step(job, event(job), clock_->NowMicros()).status();
  }
  GP_RETURN_IF_ERROR(CheckOwner(it->second, caller));
  return ApplyLocked(lock, id, event(it->second));
}

std::vector<NodeView> Controller::Nodes() {
  std::lock_guard lock(mu_);
  // The tasks on each node, from one walk of the jobs holding resources: a walk per node
  // would cost nodes x jobs (1,000 nodes and 4,000 jobs: 0.4 s per GET /metrics).
  std::map<std::string_view, std::vector<std::pair<const Job*, const jobs::TaskPlacement*>>> tasks;
  for (int64_t id : occupying_) {
    const Job& job = active_.at(id);
    for (const auto& p : job.placement) tasks[p.node].emplace_back(&job, &p);
  }
  std::vector<NodeView> out;
  out.reserve(nodes_.size());
  for (const auto& [name, e] : nodes_) {
    NodeView v;
    v.name = name;
    v.drain_reason = e.drain_reason;
    v.address = e.address;
    v.protocol = protocol::VersionString(e.version);
    v.last_seen_us = e.last_seen_us;
    v.info = e.info;
    v.cpu_milli = e.cpu_milli;
    v.memory_mib = e.memory_mib;
    v.allocated_milli.assign(e.info.gpus.size(), 0);
    if (auto here = tasks.find(name); here != tasks.end()) {
      const Job* last = nullptr;  // a job's tasks on one node are next to each other
      for (const auto& [job, p] : here->second) {
        if (job != last) ++v.running_jobs;
        last = job;
        v.cpu_allocated_milli += job->request.cpu_milli;
        v.memory_allocated_mib +=
            static_cast<int64_t>((job->request.memory_bytes + (uint64_t{1} << 20) - 1) >> 20);
        for (const std::string& uuid : p->gpu_uuids) {
          for (size_t g = 0; g < e.info.gpus.size(); ++g) {
            if (e.info.gpus[g].uuid == uuid) v.allocated_milli[g] += p->gpu_milli;
          }
        }
      }
    }
    v.state = !e.up ? "down" : !e.draining ? "up" : v.running_jobs > 0 ? "draining" : "drained";
    out.push_back(std::move(v));
  }
  return out;
}

Result<NodeView> Controller::DrainNode(const std::string& name, const std::string& reason,
                                       const Caller& caller) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins drain nodes (you are " + caller.user + ")");
  }
  if (reason.empty() || reason.size() > 256 ||
      std::any_of(reason.begin(), reason.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    return Status::InvalidArgument(
        "reason: say why the node is drained in 1..256 printable characters, e.g. --reason "
        "\"disk replacement\"");
  }
  return SetDrain(name, true, reason + " (" + caller.user + ")");
}

Result<NodeView> Controller::ResumeNode(const std::string& name, const Caller& caller) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins resume nodes (you are " + caller.user + ")");
  }
  return SetDrain(name, false, "");
}

Result<NodeView> Controller::SetDrain(const std::string& name, bool draining,
                                      const std::string& reason) {
  std::lock_guard write(node_write_mu_);
  {
    std::lock_guard lock(mu_);
    if (nodes_.count(name) == 0) {
      return Status::NotFound("node " + name + " is not known: `gpupool nodes` lists the nodes");
    }
  }
  GP_ASSIGN_OR_RETURN(std::vector<store::NodeRecord> records, store_->ListNodes());
  auto rec = std::find_if(records.begin(), records.end(),
                          [&](const store::NodeRecord& r) { return r.name == name; });
  if (rec == records.end()) return Status::NotFound("node " + name + " is not stored");
  rec->draining = draining;
  rec->drain_reason = reason;
  GP_RETURN_IF_ERROR(store_->PutNode(*rec));
  {
    std::lock_guard lock(mu_);
    NodeEntry& e = nodes_[name];
    e.draining = draining;
    e.drain_reason = reason;
    spdlog::info("node {} {}{}", name, draining ? "drained: " : "resumed", reason);
    capacity_changed_ = true;
    WakeScheduler();
  }
  for (NodeView& v : Nodes()) {
    if (v.name == name) return std::move(v);
  }
  return Status::NotFound("node " + name);
}

Result<protocol::RegistrationReply> Controller::RegisterNode(protocol::Registration reg,
                                                             const std::string& remote_ip) {
  const std::string& name = reg.node;
  if (name.empty() || name.size() > 253) {
    return Status::InvalidArgument("node: a node name of 1..253 characters is required");
  }
  GP_RETURN_IF_ERROR(
      protocol::CheckCompatible(protocol::kVersion, reg.version, "the agent on node " + name));
  std::string address = reg.address;
  if (address.empty()) address = RemoteIp(remote_ip);
  if (address.empty()) address = name;
  const int64_t now = clock_->NowMicros();
  store::NodeRecord rec;
  rec.name = name;
  rec.info_json = DumpJson(gpu::NodeToJson(reg.info));
  rec.cpu_milli = reg.cpu_milli;
  rec.memory_mib = reg.memory_mib;
  rec.registered_us = now;
  rec.last_heartbeat_us = now;
  rec.address = address;
  rec.protocol = protocol::VersionString(reg.version);
  std::lock_guard write(node_write_mu_);
  {
    std::lock_guard lock(mu_);
    if (auto it = nodes_.find(name); it != nodes_.end()) {
      rec.draining = it->second.draining;  // a drain outlives the agent's restarts
      rec.drain_reason = it->second.drain_reason;
    }
  }
  GP_RETURN_IF_ERROR(store_->PutNode(rec));

  Lock lock(mu_);
  NodeEntry& e = nodes_[name];
  e.info = std::move(reg.info);
  e.cpu_milli = reg.cpu_milli;
  e.memory_mib = reg.memory_mib;
  e.last_seen_us = now;
  e.up = true;
  e.address = address;
  e.version = reg.version;
  e.launch_sent_us.clear();  // a (re)started agent gets every open order again
  e.cancel_sent_us.clear();
  e.stray_sent_us.clear();
  e.stray_first_us.clear();
  e.stray_running.clear();
  e.exec_cancel_sent_us.clear();

  // Tasks the agent runs that no active job of ours expects there are stopped; tasks we
  // believe run there that the agent does not know are gone.
  std::set<std::pair<int64_t, int>> known;
  // A task whose end is on its way is not lost: its event follows the registration.
  for (const protocol::RunningTask& t : reg.ended) known.insert({t.job_id, t.attempt});
  for (const protocol::RunningTask& t : reg.running) {
    known.insert({t.job_id, t.attempt});
    auto it = active_.find(t.job_id);
    const bool expected = it != active_.end() && Occupies(it->second) &&
                          it->second.attempt == t.attempt && OnNode(it->second, name);
    if (!expected) {
      e.stray_sent_us[{t.job_id, t.attempt}] = 0;
      e.stray_running.insert({t.job_id, t.attempt});
    }
  }
  // Started here, not known to the agent: checked again for each job once no write of
  // it is under way, as the lock is let go while each one's end is written.
  auto lost_here = [&](const Job& job) {
    if (!Occupies(job) || !OnNode(job, name) || known.count({job.id, job.attempt}) != 0) {
      return false;
    }
    bool started_here = false;
    for (size_t t = 0; t < job.placement.size() && t < job.tasks.size(); ++t) {
      started_here = started_here || (job.placement[t].node == name &&
                                      job.tasks[t].start_time_us != 0 && !job.tasks[t].ended);
    }
    return started_here;
  };
  std::vector<int64_t> lost;
  for (int64_t id : occupying_) {
    if (lost_here(active_.at(id))) lost.push_back(id);
  }
  for (int64_t id : lost) {
    WaitUntilNotWriting(lock, id);
    auto it = active_.find(id);
    if (it == active_.end() || !lost_here(it->second)) continue;
    Result<Job> r = ApplyLocked(lock, id, lifecycle::AgentForgot{name});
    if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
  }
  WakeScheduler();
  NotifyNode(name);
  return protocol::RegistrationReply{protocol::kVersion, address};
}

LaunchOrder Controller::MakeLaunchOrder(const Job& job, size_t task_index) const {
  LaunchOrder order;
  order.job = job;
  for (auto& [k, v] : jobs::ArrayEnvironment(job)) order.job.env[k] = std::move(v);
  order.task_index = static_cast<int>(task_index);
  protocol::Rendezvous& r = order.rendezvous;
  r.task_index = static_cast<int>(task_index);
  r.num_tasks = static_cast<int>(job.placement.size());
  for (size_t t = 0; t < job.placement.size(); ++t) {
    r.hosts.push_back(t < job.tasks.size() && !job.tasks[t].host.empty() ? job.tasks[t].host
                                                                         : job.placement[t].node);
    r.slots.push_back(std::max<int>(1, static_cast<int>(job.placement[t].gpu_uuids.size())));
  }
  r.master_port = job.master_port;
  const jobs::TaskPlacement& p = job.placement[task_index];
  // The tasks this launch covers: itself, and in a gang held for mpirun (--mpi, run,
  // alloc) whose first task on this node it is, the job's other tasks on the node.
  // mpirun starts all of a node's ranks in one place (itself on task 0's node, its daemon
  // through `gpupool exec HOST`, which runs in the first task on HOST), so that place
  // holds all the node's GPUs, as a Slurm step does; the ranks pick theirs by local rank.
  // Gangs whose every task runs the command (torchrun) keep one GPU set per task.
  std::vector<size_t> covered = {task_index};
  const bool held = job.mpi || !job.interactive.empty();
  bool first_on_node = true;
  for (size_t t = 0; t < task_index && held; ++t) {
    if (job.placement[t].node == p.node) first_on_node = false;
  }
  if (held && first_on_node) {
    for (size_t t = task_index + 1; t < job.placement.size(); ++t) {
      if (job.placement[t].node == p.node) covered.push_back(t);
    }
  }
  if (covered.size() > 1) {
    for (size_t t : covered) order.node_tasks.push_back(static_cast<int>(t));
  }
  auto n = nodes_.find(p.node);
  if (n == nodes_.end()) return order;
  for (const gpu::GpuInfo& g : n->second.info.gpus) {
    int milli = 0;  // the covered tasks' shares of this GPU
    for (size_t t : covered) {
      const jobs::TaskPlacement& q = job.placement[t];
      if (std::find(q.gpu_uuids.begin(), q.gpu_uuids.end(), g.uuid) != q.gpu_uuids.end()) {
        milli += q.gpu_milli;
      }
    }
    if (milli > 0) {
      order.gpus.push_back({std::string(gpu::VendorName(g.vendor)), g.index, g.uuid, g.device_nodes,
                            std::min(milli, 1000)});
    } else {
      for (const std::string& d : g.device_nodes) order.denied_device_nodes.push_back(d);
    }
  }
  return order;
}

Result<AgentWork> Controller::WaitForWork(const std::string& node, int64_t wait_ms) {
  // A poll is answered within half the node timeout, so that a live agent polls again in
  // time and is never taken for a silent one, and a dead agent's poll left waiting here
  // does not keep its node up (a --node-timeout under the poll's length lost idle nodes).
  const int64_t longest_ms = std::max<int64_t>(options_.node_timeout_us / 2000, 100);
  const int64_t deadline =
      clock_->MonotonicMicros() +
      1000 * std::clamp<int64_t>(wait_ms, 0, std::min<int64_t>(60'000, longest_ms));
  std::unique_lock lock(mu_);
  while (true) {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) {
      return Status::NotFound("node " + node + " is not registered: register it first");
    }
    NodeEntry& e = it->second;
    const int64_t now = clock_->NowMicros();
    if (!e.up) {
      // Declared lost: its jobs were ended or requeued meanwhile. The agent registers
      // again (it does on a 404), listing what it runs, so that what outlived the loss is
      // stopped before a requeued attempt of the same job starts.
      return Status::NotFound("node " + node +
                              " was declared lost (no poll within the node timeout): register "
                              "it again");
    }
    e.last_seen_us = now;
    AgentWork work;
    for (int64_t id : occupying_) {
      const Job& job = active_.at(id);
      if (!OnNode(job, node)) continue;
      if (job.cancel_requested) {
        auto sent = e.cancel_sent_us.find(id);
        if (sent == e.cancel_sent_us.end() || now - sent->second > kResendAfterUs) {
          work.cancel.push_back({id, job.attempt});
          e.cancel_sent_us[id] = now;
        }
        continue;
      }
      if (job.state != JobState::kAssigned) continue;
      for (size_t t = 0; t < job.placement.size(); ++t) {
        if (job.placement[t].node != node) continue;
        const jobs::TaskStatus& ts = job.tasks.at(t);
        if (ts.start_time_us != 0 || ts.ended) continue;
        // The other tasks wait for task 0's agent to pick the rendezvous port, except
        // an --mpi job's held tasks: they run nothing of the user's until an exec, which
        // carries the port.
        if (t > 0 && job.master_port == 0 && !job.mpi) continue;
        auto sent = e.launch_sent_us.find({id, static_cast<int>(t)});
        if (sent != e.launch_sent_us.end() && now - sent->second <= kResendAfterUs) continue;
        work.launch.push_back(MakeLaunchOrder(job, t));
        e.launch_sent_us[{id, static_cast<int>(t)}] = now;
      }
    }
    for (auto stray = e.stray_sent_us.begin(); stray != e.stray_sent_us.end();) {
      auto& [key, sent] = *stray;
      int64_t& first = e.stray_first_us[key];
      if (first == 0) first = now;
      if (now - first > kStrayGiveUpUs) {
        e.stray_first_us.erase(key);
        e.stray_running.erase(key);
        stray = e.stray_sent_us.erase(stray);
        continue;
      }
      if (sent == 0 || now - sent > kResendAfterUs) {
        work.cancel.push_back({key.first, key.second});
        sent = now;
      }
      ++stray;
    }
    for (auto& [exec_id, sent] : e.exec_cancel_sent_us) {
      if (sent == 0 || now - sent > kResendAfterUs) {
        work.cancel.push_back({0, 0, exec_id});
        sent = now;
      }
    }
    if (protocol::SupportsExec(e.version)) {
      // In the order they were started (their ids are random).
      std::vector<ExecSession*> queued;
      for (auto& [id, x] : execs_) {
        if (x.node == node && !x.started && !x.ended) queued.push_back(&x);
      }
      std::sort(queued.begin(), queued.end(),
                [](const ExecSession* a, const ExecSession* b) { return a->created < b->created; });
      for (ExecSession* session : queued) {
        ExecSession& x = *session;
        // Resent until the agent reports it (a poll answer can be lost: a dead agent's
        // poll may take it), as launch orders are; agents ignore a session seen before.
        if (x.sent && now - x.sent_us <= kResendAfterUs) continue;
        // Sent once its task runs (mpirun may ask before the task has started).
        auto job = active_.find(x.job_id);
        if (job == active_.end() || job->second.attempt != x.attempt) continue;
        const auto t = static_cast<size_t>(x.task_index);
        if (t >= job->second.tasks.size() || job->second.tasks[t].start_time_us == 0) continue;
        work.exec.push_back({x.id, x.job_id, x.attempt, x.task_index, x.argv,
                             job->second.master_port, x.io.tty, x.io.stdin_open, x.io.rows,
                             x.io.cols});
        x.sent = true;
        x.sent_us = now;
      }
    }
    work.logs = log_relay_.Take(node);
    if (!work.empty() || stopping_ || clock_->MonotonicMicros() >= deadline) return work;
    // Wake at the deadline, on new work, or in time to resend unacknowledged orders.
    clock_->WaitOnce(work_cv_, lock,
                     std::min(deadline, clock_->MonotonicMicros() + kResendAfterUs));
  }
}

bool Controller::SchedulerLooping() const {
  const int64_t seen = loop_seen_mono_us_;
  // A round at least once per period (a long pass may take a few more).
  return seen != 0 && clock_->MonotonicMicros() - seen <=
                          std::max<int64_t>(3 * options_.scheduler_period_us, 5'000'000);
}

protocol::Version Controller::NodeVersion(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  return it == nodes_.end() ? protocol::Version{1, 0} : it->second.version;
}

bool Controller::NodeUp(const std::string& node) {
  std::lock_guard lock(mu_);
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.up;
}

std::map<int, std::vector<protocol::TelemetryJob>> Controller::GpuHolders(const std::string& node) {
  std::map<int, std::vector<protocol::TelemetryJob>> out;
  std::lock_guard lock(mu_);
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return out;
  std::map<std::string_view, int> index_of;
  for (const gpu::GpuInfo& g : n->second.info.gpus) {
    out[g.index];
    index_of[g.uuid] = g.index;
  }
  for (int64_t id : occupying_) {
    for (const jobs::TaskPlacement& p : active_.at(id).placement) {
      if (p.node != node) continue;
      for (const std::string& uuid : p.gpu_uuids) {
        if (auto i = index_of.find(uuid); i != index_of.end()) {
          out[i->second].push_back({id, p.gpu_milli});
        }
      }
    }
  }
  return out;
}

Status Controller::ApplyEvents(const std::string& node, const EventBatch& batch) {
  Lock lock(mu_);
  auto n = nodes_.find(node);  // nodes are never erased: good across the writes
  if (n != nodes_.end()) n->second.last_seen_us = clock_->NowMicros();
  for (const Event& raw : batch.events) {
    const int64_t time_us = raw.time_us != 0 ? raw.time_us : clock_->NowMicros();
    if (raw.kind != protocol::EventKind::kStarted && n != nodes_.end()) {
      n->second.stray_sent_us.erase({raw.job_id, raw.attempt});  // it ended there
      n->second.stray_first_us.erase({raw.job_id, raw.attempt});
      n->second.stray_running.erase({raw.job_id, raw.attempt});
    }
    if (active_.count(raw.job_id) == 0) continue;  // already final: a resent event
    lifecycle::Event event;
    switch (raw.kind) {
      case protocol::EventKind::kStarted:
        event = lifecycle::TaskStarted{node,           raw.task_index,  raw.attempt,
                                       time_us,        raw.stdout_path, raw.stderr_path,
                                       raw.master_port};
        break;
      case protocol::EventKind::kExited:
        event = lifecycle::TaskExited{node,          raw.task_index,  raw.attempt,    time_us,
                                      raw.exit_code, raw.signal,      raw.cancelled,  raw.timed_out,
                                      raw.reason,    raw.stdout_path, raw.stderr_path};
        break;
      case protocol::EventKind::kLost:
        event = lifecycle::TaskLost{node, raw.task_index, raw.attempt, raw.reason};
        break;
    }
    Result<Job> r = ApplyLocked(lock, raw.job_id, event);
    if (!r.ok() && r.status().code() != StatusCode::kNotFound) return r.status();
  }
  bool freed = false;
  for (const protocol::ExecReport& r : batch.exec) ExecReported(lock, node, r, &freed);
  if (freed) WakeScheduler();
  return Status::Ok();
}

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

Result<int64_t> Controller::StartExec(int64_t job_id, int task_index, std::vector<std::string> argv,
                                      const Caller& caller, ExecOptions io) {
  std::lock_guard lock(mu_);
  return StartExecLocked(job_id, task_index, std::move(argv), caller, io);
}

Result<int64_t> Controller::StartExecLocked(int64_t job_id, int task_index,
                                            std::vector<std::string> argv, const Caller& caller,
                                            ExecOptions io) {
  if (argv.empty() || argv[0].empty()) {
    return Status::InvalidArgument("argv: the command to run, e.g. -- hostname");
  }
  auto it = active_.find(job_id);
  if (it == active_.end()) {
    GP_ASSIGN_OR_RETURN(Job ended, store_->GetJob(job_id));
    GP_RETURN_IF_ERROR(CheckOwner(ended, caller));
    return Status::FailedPrecondition("job " + std::to_string(job_id) + " has ended (" +
                                      std::string(jobs::JobStateName(ended.state)) +
                                      "); exec runs only in a running job");
  }
  const Job& job = it->second;
  GP_RETURN_IF_ERROR(CheckOwner(job, caller));
  if (!Occupies(job) || job.cancel_requested) {
    return Status::FailedPrecondition(
        "job " + std::to_string(job_id) + " is " + std::string(jobs::JobStateName(job.state)) +
        (job.cancel_requested ? " and stopping" : "") + "; exec runs only in a running job");
  }
  if (task_index < 0 || static_cast<size_t>(task_index) >= job.placement.size()) {
    return Status::InvalidArgument("task: job " + std::to_string(job_id) + " has tasks 0.." +
                                   std::to_string(job.placement.size() - 1));
  }
  const jobs::TaskStatus& ts = job.tasks.at(static_cast<size_t>(task_index));
  if (ts.ended) {
    return Status::FailedPrecondition("task " + std::to_string(task_index) + " of job " +
                                      std::to_string(job_id) + " has ended");
  }
  const std::string& node = job.placement[static_cast<size_t>(task_index)].node;
  auto n = nodes_.find(node);
  if (n == nodes_.end() || !n->second.up) {
    return Status::Unavailable("node " + node + " of task " + std::to_string(task_index) +
                               " is down");
  }
  if (!protocol::SupportsExec(n->second.version)) {
    return Status::FailedPrecondition("the agent on node " + node + " speaks agent protocol " +
                                      protocol::VersionString(n->second.version) +
                                      ", which has no exec: upgrade gpupool there");
  }
  if ((io.tty || io.stdin_open) && !protocol::SupportsInteractiveExec(n->second.version)) {
    return Status::FailedPrecondition("the agent on node " + node + " speaks agent protocol " +
                                      protocol::VersionString(n->second.version) +
                                      ", which has no interactive exec (a terminal or stdin): "
                                      "upgrade gpupool there");
  }
  if (io.tty || io.stdin_open) {
    // Each holds a client's long poll and up to about 2 MiB here.
    int live = 0;
    for (const auto& [xid, s] : execs_) {
      if (s.uid == job.uid && s.interactive() && !s.ended) ++live;
    }
    if (live >= kMaxInteractivePerUser) {
      return Status::FailedPrecondition(
          "user " + job.user + " has " + std::to_string(live) +
          " interactive sessions open, the most at once; end one (exit its shell)");
    }
  }
  // Sessions that ended long ago go; at most 10,000 are kept, the oldest going first.
  const int64_t mono = clock_->MonotonicMicros();
  std::vector<std::pair<int64_t, int64_t>> by_age;  // (created, id)
  by_age.reserve(execs_.size());
  for (const auto& [xid, s] : execs_) by_age.emplace_back(s.created, xid);
  std::sort(by_age.begin(), by_age.end());
  for (const auto& [created, xid] : by_age) {
    auto x = execs_.find(xid);
    const bool old = x->second.ended && mono - x->second.ended_mono_us > 600'000'000;
    if (x->second.client_waiting == 0 && (old || execs_.size() > 10'000)) {
      if (x->second.primary) primary_exec_.erase(x->second.job_id);
      exec_output_held_ -=
          x->second.complete_output[0].size() + x->second.complete_output[1].size();
      execs_.erase(x);
    }
  }
  GP_ASSIGN_OR_RETURN(const int64_t new_id, NewExecIdLocked());
  ExecSession x;
  x.id = new_id;
  x.created = ++exec_created_;
  x.job_id = job_id;
  x.attempt = job.attempt;
  x.task_index = task_index;
  x.node = node;
  x.uid = job.uid;
  x.argv = std::move(argv);
  x.io = io;
  x.client_seen_mono_us = mono;
  const int64_t id = x.id;
  execs_.emplace(id, std::move(x));
  work_cv_.notify_all();
  return id;
}

Result<ExecSession> Controller::WaitExec(int64_t exec_id, const Caller& caller, bool seen_started,
                                         bool seen_ended, int64_t wait_ms) {
  const int64_t deadline =
      clock_->MonotonicMicros() + 1000 * std::clamp<int64_t>(wait_ms, 0, 60'000);
  Lock lock(mu_);
  while (true) {
    GP_ASSIGN_OR_RETURN(const ExecSession* found, CallersExecLocked(exec_id, caller));
    const ExecSession& x = *found;
    if (x.started != seen_started || x.ended != seen_ended || stopping_ ||
        clock_->MonotonicMicros() >= deadline) {
      return x;
    }
    clock_->WaitOnce(exec_cv_, lock, deadline);
  }
}

Status Controller::CancelExec(int64_t exec_id, const Caller& caller) {
  std::lock_guard lock(mu_);
  GP_ASSIGN_OR_RETURN(ExecSession * found, CallersExecLocked(exec_id, caller));
  ExecSession& x = *found;
  if (x.ended) return Status::Ok();
  if (x.interactive() && !x.hung_up) {
    x.hung_up = true;
    x.hangup_reason = "stopped by " + caller.user;
  }
  if (!x.sent) {
    x.ended = true;
    x.error = "cancelled before it started";
    x.ended_mono_us = clock_->MonotonicMicros();
    exec_cv_.notify_all();
    return Status::Ok();
  }
  // The agent cancels an exec session like a task: a stray order for its launcher key.
  if (auto n = nodes_.find(x.node); n != nodes_.end()) {
    n->second.exec_cancel_sent_us[x.id] = 0;
  }
  work_cv_.notify_all();
  return Status::Ok();
}

void Controller::ExecReported(Lock& lock, const std::string& node, const protocol::ExecReport& r,
                              bool* freed) {
  auto it = execs_.find(r.id);
  if (it == execs_.end() || it->second.node != node || it->second.ended) return;
  ExecSession& x = it->second;
  if (r.started && !x.started) {
    x.started = true;
    x.stdout_path = r.stdout_path;
    x.stderr_path = r.stderr_path;
  }
  if (r.ended) {
    x.ended = true;
    x.exit_code = r.exit_code;
    x.signal = r.signal;
    x.error = r.error;
    if (!r.stdout_path.empty()) x.stdout_path = r.stdout_path;
    if (!r.stderr_path.empty()) x.stderr_path = r.stderr_path;
    // Held until the session goes (10 minutes after its end), within a bound for all.
    const size_t inline_bytes = r.stdout_data.size() + r.stderr_data.size();
    if (r.output_complete && !x.interactive() &&
        exec_output_held_ + inline_bytes <= kMaxExecOutputHeld) {
      x.output_complete = true;
      x.complete_output[0] = r.stdout_data;
      x.complete_output[1] = r.stderr_data;
      exec_output_held_ += inline_bytes;
    }
    x.ended_mono_us = clock_->MonotonicMicros();
    if (auto n = nodes_.find(node); n != nodes_.end()) n->second.exec_cancel_sent_us.erase(x.id);
    if (x.primary) CommandEndedLocked(lock, CommandEndOf(x), freed);  // `x` may go meanwhile
  }
  exec_cv_.notify_all();
}

}  // namespace gpupool::controller
