// Controller's requests about jobs (controller.h): submission (one job or an array, with
// the queue bounds and limits), reading, cancelling, holding and releasing them.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/json.h"
#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"
#include "controller/job_scheduler.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_sort.h"
#include "jobs/job_validation.h"

namespace gpupool::controller {

using internal::CheckOwner;
using internal::OnNode;
using jobs::Job;
using jobs::JobState;

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

Status Controller::CheckDependencies(const Job& job, const Caller& caller) {
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
      // An array's element other than its first as its user named it (ARRAY_INDEX).
      const bool element = dep->array_id != 0 && dep->array_id != d.job_id;
      const std::string name = element ? lifecycle::UserJobId(*dep) : std::to_string(d.job_id);
      return Status::PermissionDenied("--" + std::string(jobs::DependencyKindName(d.kind)) + " " +
                                      name + ": job " + name +
                                      " is another user's; a job may depend on its owner's "
                                      "jobs only");
    }
  }
  return Status::Ok();
}

Result<std::optional<Job>> Controller::EarlierSubmission(const Job& job, bool* duplicate) {
  if (job.submit_key.empty()) return std::optional<Job>();
  GP_ASSIGN_OR_RETURN(std::optional<int64_t> id, store_->FindSubmitKey(job.uid, job.submit_key));
  if (!id) return std::optional<Job>();
  if (duplicate != nullptr) *duplicate = true;
  {
    MutexLock lock(mu_);
    if (auto it = active_.find(*id); it != active_.end()) {
      Job copy = it->second;
      AttachPendingReason(&copy);
      return std::optional<Job>(std::move(copy));
    }
  }
  GP_ASSIGN_OR_RETURN(Job stored, store_->GetJob(*id));
  return std::optional<Job>(std::move(stored));
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
  // A retried submission (the same user and submit_key) answers with what the first made,
  // even where its user has since lost the project (that job waits at the project gate).
  auto earlier = [&] { return EarlierSubmission(job, duplicate); };
  {
    GP_ASSIGN_OR_RETURN(std::optional<Job> first, earlier());
    if (first) return std::move(*first);
  }
  // A store short of room keeps it for the jobs in the pool (a retry above needed none).
  if (options_.submission_room) GP_RETURN_IF_ERROR(options_.submission_room());
  {
    // The project: the user's default if none is named, one they may charge (associations,
    // project_access.h), not one that prints like another the pool lists. Before the queue
    // bounds (they count per project) and the bytes.
    MutexLock lock(mu_);
    GP_RETURN_IF_ERROR(sched::AdmitProject(limits_.limits, options_.enforce_projects, job.user,
                                           &job.project, true, &listed_projects_));
  }
  const int64_t adding = array ? static_cast<int64_t>(array->indices.size()) : 1;
  // What its jobs hold of the controller's memory: one copy of the submission for all
  // the elements of an array (they share it, jobs::Job::env and command).
  // As Slurm names it: after its script or command. Held as the submission's own name is,
  // so counted in `bytes`; not in the size the user is told about (CheckSubmissionSize).
  if (job.name.empty()) job.name = jobs::DefaultJobName(job);
  const int64_t bytes = jobs::SubmissionBytes(job);
  // Dependencies name jobs that exist, so no chain of them can loop back to this one.
  GP_RETURN_IF_ERROR(CheckDependencies(job, caller));
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
      MutexLock lock(c->mu_);
      c->Unreserve(*user, *project, *n, *bytes);
    }
  } release{this, &user, &project, &reserved, &reserved_bytes};
  {
    MutexLock lock(mu_);
    PreemptionSettings server;
    server.default_min_runtime_s = options_.preempt_min_runtime_s;
    server.default_grace_s = options_.preempt_grace_s;
    // The admin's QoS (docs/preemption.md).
    GP_RETURN_IF_ERROR(ApplyPreemptionDefaults(limits_.limits, server, &job));
    GP_RETURN_IF_ERROR(CheckQueuedLimits(job, adding, bytes));
    reserved = adding;
    reserved_bytes = bytes;
    submitting_[job.user] += reserved;
    submitting_project_[project] += reserved;
    submitting_total_ += reserved;
    submitting_bytes_[job.user] += reserved_bytes;
    submitting_bytes_total_ += reserved_bytes;
    if (std::string why = NeverFitsLocked(job); !why.empty()) {
      return Status::FailedPrecondition("no node of this pool can ever run this job: " + why);
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
  MutexLock lock(mu_);
  active_[job.id] = job;
  Touched(job.id);
  WatchAllocClientLocked(job, false);
  Unreserve(user, project, 1, reserved_bytes);
  reserved = 0;
  reserved_bytes = 0;
  WakeSchedulerForArrival();
  return job;
}

// Every node (down and draining ones too: the check is whether any could ever run the
// job) as a SchedInput with no jobs. SchedInput refers to `nodes` and through them to
// nodes_' NodeInfo, which stays put until nodes_generation_ steps.
struct FitCheck {
  uint64_t generation = 0;
  std::vector<SchedNode> nodes;
  std::optional<SchedInput> in;
};

std::string Controller::NeverFitsLocked(const Job& job) {
  if (nodes_.empty()) return "";
  if (fit_check_ == nullptr || fit_check_->generation != nodes_generation_) {
    auto check = std::make_shared<FitCheck>();
    check->generation = nodes_generation_;
    check->nodes.reserve(nodes_.size());
    for (const auto& [name, e] : nodes_) {
      check->nodes.push_back({name, &e.info, e.cpu_milli, e.memory_mib});
    }
    check->in.emplace(check->nodes);
    fit_check_ = std::move(check);
    ++fit_checks_built_;
  }
  return JobScheduler::NeverFits(job, *fit_check_->in);
}

uint64_t Controller::FitChecksBuilt() {
  MutexLock lock(mu_);
  return fit_checks_built_;
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
  MutexLock lock(mu_);
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
  MutexLock lock(mu_);
  for (const auto& [id, job] : active_) {
    if (job.environment == ref) out.push_back(id);
  }
  return out;
}

std::map<int64_t, int64_t> Controller::StartEstimates() {
  MutexLock lock(mu_);
  return start_estimates_us_;
}

std::map<int64_t, std::string> Controller::StartNotes() {
  MutexLock lock(mu_);
  return start_notes_;
}

Result<Job> Controller::Get(int64_t id, const Caller& caller) {
  {
    MutexLock lock(mu_);
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
  if (!f.sort.empty() && f.now_us == 0) f.now_us = clock_->NowMicros();
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
      MutexLock lock(mu_);
      for (Job& job : stored) AttachPendingReason(&job);
    }
    return stored;
  }
  // Active jobs are served from memory: they carry fresh pending reasons.
  std::vector<Job> out;
  Lock lock(mu_);
  auto matches = [&](const Job& job) {
    if (f.user && job.user != *f.user) return false;
    if (!f.states.empty() &&
        std::find(f.states.begin(), f.states.end(), job.state) == f.states.end()) {
      return false;
    }
    return !f.node || OnNode(job, *f.node);
  };
  if (!f.sort.empty()) return SortedActive(f, matches);
  if (f.user) {  // a user's jobs only (index_), not the whole queue
    const std::set<int64_t>& ids = index_.OfUser(*f.user);
    if (f.limit > 0) {  // newest first, like the store
      for (auto it = ids.rbegin(); it != ids.rend() && out.size() < f.limit; ++it) {
        if (const Job& job = active_.at(*it); matches(job)) out.push_back(job);
      }
    } else {
      for (int64_t id : ids) {
        if (const Job& job = active_.at(id); matches(job)) out.push_back(job);
      }
    }
  } else if (f.limit > 0) {
    for (auto it = active_.rbegin(); it != active_.rend() && out.size() < f.limit; ++it) {
      if (matches(it->second)) out.push_back(it->second);
    }
  } else {  // every active job: kChunkUnderLock at a time, mu_ let go between chunks
    auto it = active_.begin();
    while (true) {
      for (size_t n = 0; it != active_.end() && n < internal::kChunkUnderLock; ++it, ++n) {
        if (!matches(it->second)) continue;
        out.push_back(it->second);
        AttachPendingReason(&out.back());
      }
      if (it == active_.end()) return out;
      const int64_t next = it->first;  // the next chunk's first job, or one after it
      lock.Unlock();
      if (options_.between_chunks_for_test) options_.between_chunks_for_test();
      lock.Lock();
      it = active_.lower_bound(next);
    }
  }
  for (Job& job : out) AttachPendingReason(&job);
  return out;
}

// The active jobs that match, in the order of `f.sort`: the order is taken over pointers,
// and only the first `f.limit` (all when 0) are copied.
std::vector<Job> Controller::SortedActive(const store::JobFilter& f,
                                          const std::function<bool(const Job&)>& matches) {
  std::vector<const Job*> picked;
  if (f.user) {
    for (int64_t id : index_.OfUser(*f.user)) {
      if (const Job& job = active_.at(id); matches(job)) picked.push_back(&job);
    }
  } else {
    picked.reserve(active_.size());
    for (const auto& [id, job] : active_) {
      if (matches(job)) picked.push_back(&job);
    }
  }
  auto less = [&](const Job* a, const Job* b) {
    return jobs::JobSortLess(*a, *b, f.sort, f.now_us);
  };
  const size_t n = f.limit > 0 ? std::min(f.limit, picked.size()) : picked.size();
  std::partial_sort(picked.begin(), picked.begin() + static_cast<std::ptrdiff_t>(n), picked.end(),
                    less);
  std::vector<Job> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(*picked[i]);
    AttachPendingReason(&out.back());
  }
  return out;
}

Result<Job> Controller::NotActiveAnswer(int64_t id, const Caller& caller,
                                        const lifecycle::Event& event) {
  GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
  GP_RETURN_IF_ERROR(CheckOwner(job, caller));
  // An ended job: the lifecycle says why it refuses.
  GP_RETURN_IF_ERROR(lifecycle::Step(job, event, clock_->NowMicros()).status());
  // Stored and not active: a submission that is not in memory yet.
  return Status::FailedPrecondition("job " + lifecycle::UserJobId(job) +
                                    " is still being submitted: try again in a moment");
}

Result<Job> Controller::Cancel(int64_t id, const Caller& caller) {
  const lifecycle::Event cancel = lifecycle::CancelRequested{caller.user};
  Result<Job> r =
      CommitOne({id, cancel, [&caller](const Job& job) { return CheckOwner(job, caller); }});
  if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
  return NotActiveAnswer(id, caller, cancel);
}

Result<Job> Controller::EndAllocation(int64_t id, const Caller& caller,
                                      std::optional<int> exit_code, std::optional<int> signal) {
  lifecycle::CommandEnded ended;
  ended.exit_code = exit_code;
  ended.signal = signal;
  bool cancel = true;
  {
    MutexLock lock(mu_);
    auto it = active_.find(id);
    // Ended: its answer as a cancel's. A pending allocation (requeued, or its client gave
    // up waiting) holds nothing to end and its client is gone: cancelled.
    if (it != active_.end() &&
        !(it->second.state == JobState::kPending && it->second.interactive == "alloc")) {
      cancel = false;
      ended.attempt = it->second.attempt;
    }
  }
  if (cancel) return Cancel(id, caller);
  auto guard = [&caller](const Job& job) -> Status {
    GP_RETURN_IF_ERROR(CheckOwner(job, caller));
    if (job.interactive != "alloc") {
      return Status::InvalidArgument("job " + lifecycle::UserJobId(job) +
                                     " is no allocation (gpupool alloc): cancel it instead");
    }
    return Status::Ok();
  };
  Result<Job> r = CommitOne({id, std::move(ended), guard});
  if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
  return Cancel(id, caller);
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
  const Limit ul = limits_.limits.ForUser(job.user);
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
  if (const Limit* pl = limits_.limits.ForProject(project); pl != nullptr && pl->max_queued >= 0) {
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

RevisedLimits Controller::GetLimits() {
  MutexLock lock(mu_);
  return limits_;
}

Result<RevisedLimits> internal::StoredLimits(const store::SettingRecord& stored) {
  if (!stored.value) return RevisedLimits{{}, stored.revision};  // never set: at 0
  Result<Json> j = ParseJson(*stored.value, "stored limits");
  Result<Limits> l = j.ok() ? LimitsFromJson(*j) : Result<Limits>(j.status());
  if (!l.ok()) return l.status().WithContext("the stored usage limits");
  return RevisedLimits{std::move(*l), stored.revision};
}

Result<int64_t> Controller::FollowStoredLimits() {
  GP_ASSIGN_OR_RETURN(store::SettingRecord record, store_->GetSettingRecord("limits"));
  Result<RevisedLimits> parsed = internal::StoredLimits(record);
  MutexLock lock(mu_);
  if (!parsed.ok()) {
    // Written by hand: the limits held stay enforced, at the stored revision, so that a
    // write (an overwrite, or one at what GET answers) replaces what cannot be read.
    spdlog::warn("usage limits: keeping the ones held at the store's revision {}: {}",
                 record.revision, parsed.status().message());
    limits_.revision = record.revision;
    return record.revision;
  }
  RevisedLimits& stored = *parsed;
  if (stored.revision != limits_.revision) {
    spdlog::warn(
        "usage limits: the store holds revision {}, this controller held {} (a write whose "
        "answer was lost, or the database changed by hand): now the store's: {}",
        stored.revision, limits_.revision, DumpJson(LimitsToJson(stored.limits)));
    limits_ = std::move(stored);
    listed_projects_.AddAll(limits_.limits);
    capacity_changed_ = true;  // raised limits may let jobs start
    WakeScheduler();
  }
  return limits_.revision;
}

Result<RevisedLimits> Controller::SetLimits(Limits limits, const Caller& caller, int64_t expected,
                                            const LimitsCheck& check) {
  if (!caller.admin) {
    return Status::PermissionDenied("only admins set limits (you are " + caller.user + ")");
  }
  // Written without mu_; settings_write_mu_ keeps two admins' writes in order. Each is a
  // compare-and-set in the store at the revision held (every write is this controller's
  // while it leads), which must be `expected`, the one the caller read, when it names one;
  // then, once, at the store's if that moved all the same: a write without a revision
  // overwrites. A store that moved (or a revision other than the one held) is followed
  // first, so that GET answers what a retry must name, rather than a revision that is
  // refused until a restart. `check` reads the limits each try replaces, not ones read
  // before the write: an admin's change landing in between is checked against too.
  MutexLock write(settings_write_mu_);
  const std::string value = DumpJson(LimitsToJson(limits));
  RevisedLimits held = GetLimits();
  Result<int64_t> revision = Status::Internal("the limits were not written");
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt > 0 || (expected >= 0 && expected != held.revision)) {
      GP_ASSIGN_OR_RETURN(const int64_t stored, FollowStoredLimits());
      held = GetLimits();
      if (expected >= 0 && expected != stored) {
        return Status::FailedPrecondition(
            "the limits changed since they were read: they are at revision " +
            std::to_string(stored) + ", not " + std::to_string(expected) +
            " (If-Match, or the body's \"revision\"); read them again (GET /v1/limits), apply "
            "the change to what that answers and send its revision, or send none to overwrite "
            "them");
      }
    }
    if (check) GP_RETURN_IF_ERROR(check(limits, held.limits));
    revision = store_->PutSettingIf("limits", value, held.revision);
    if (!store::IsConflict(revision.status())) break;
  }
  if (revision.status().code() == StatusCode::kUnavailable) {
    // Whether it was written is unknown (the answer was lost with the connection): hold
    // what the store has, if it can say now; else the next write's conflict will.
    if (Result<int64_t> now = FollowStoredLimits(); !now.ok()) {
      spdlog::warn("usage limits: cannot read them back: {}", now.status().message());
    }
  }
  if (!revision.ok()) return revision.status();
  MutexLock lock(mu_);
  limits_ = {std::move(limits), *revision};
  listed_projects_.AddAll(limits_.limits);
  spdlog::info("usage limits set by {} (revision {}): {}", caller.user, *revision,
               DumpJson(LimitsToJson(limits_.limits)));
  capacity_changed_ = true;  // raised limits may let jobs start
  WakeScheduler();
  return limits_;
}

void Controller::NoteListedProjects(const std::set<std::string>& names) {
  MutexLock lock(mu_);
  for (const std::string& name : names) listed_projects_.Add(name);
}

std::vector<int64_t> Controller::ArrayElements(int64_t array_id, int index) {
  MutexLock lock(mu_);
  std::vector<int64_t> out;
  for (int64_t id : index_.ArrayElements(array_id)) {
    if (index < 0 || active_.at(id).array_index == index) out.push_back(id);
  }
  return out;
}

Result<int64_t> Controller::ArrayElementId(int64_t array_id, int index, const Caller& caller) {
  {
    MutexLock lock(mu_);
    for (int64_t id : index_.ArrayElements(array_id)) {
      if (const Job& job = active_.at(id); job.array_index == index) {
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
    return Status::InvalidArgument("job " + lifecycle::UserJobId(head) + " is not an array");
  }
  struct Element {
    int64_t id = 0;
    JobState state = JobState::kPending;
    bool stopping = false;  // an earlier cancel is stopping it: not this one's to count
  };
  std::vector<Element> elements;  // still queued or running
  {
    MutexLock lock(mu_);
    for (int64_t id : index_.ArrayElements(array_id)) {
      const Job& j = active_.at(id);
      elements.push_back({id, j.state, j.cancel_requested && j.preempted_by == 0});
    }
  }
  ArrayCancelled out;
  Result<jobs::ArraySpec> spec = jobs::ParseArraySpec(head.array);
  out.elements = spec.ok() ? static_cast<int>(spec->indices.size()) : 0;
  // In one transaction: all the elements' cancels, or none.
  std::vector<Change> cancels;
  cancels.reserve(elements.size());
  for (const Element& e : elements) {
    cancels.push_back({e.id, lifecycle::CancelRequested{caller.user},
                       [&caller](const Job& job) { return CheckOwner(job, caller); }});
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(cancels), OnConflict::kRetry));
  for (size_t k = 0; k < answers.size(); ++k) {
    const Result<Job>& j = answers[k];
    // Ended meanwhile, or already being stopped: not this cancel's.
    if (!j.ok() && (j.status().code() == StatusCode::kNotFound ||
                    j.status().code() == StatusCode::kFailedPrecondition)) {
      continue;
    }
    if (!j.ok()) {
      return j.status().WithContext("array " + std::to_string(array_id) + ", element job " +
                                    std::to_string(elements[k].id));
    }
    // A second cancel while the first stops the running elements: as scancel, no error,
    // and they are told apart from the ones this cancel stops.
    ++(elements[k].stopping                      ? out.stopping
       : elements[k].state == JobState::kPending ? out.queued
                                                 : out.running);
  }
  if (out.queued + out.running + out.stopping == 0) {
    return Status::FailedPrecondition(
        "array " + std::to_string(array_id) + " has already ended: none of its " +
        std::to_string(out.elements) + " elements is queued or running");
  }
  GP_ASSIGN_OR_RETURN(out.head, Get(array_id, caller));
  spdlog::info("array {} cancelled by {}: {} queued and {} running elements ({} already stopping)",
               array_id, caller.user, out.queued, out.running, out.stopping);
  return out;
}

Result<Job> Controller::Hold(int64_t id, const Caller& caller, bool hold, bool* changed) {
  auto event = [&](const Job& job) -> lifecycle::Event {
    if (hold) return lifecycle::Hold{caller.user, caller.admin && caller.uid != job.uid};
    return lifecycle::Release{caller.user, caller.admin};
  };
  std::optional<Job> owner;  // the job's ids and owner, which never change
  bool held_before = false;
  bool admin_before = false;  // a user's hold that an admin's hold replaces is a change
  {
    Lock lock(mu_);
    if (auto it = active_.find(id); it != active_.end()) {
      owner.emplace();
      owner->id = id;
      owner->uid = it->second.uid;
      owner->user = it->second.user;
      held_before = !it->second.held_by.empty();
      admin_before = it->second.held_by_admin;
    }
  }
  if (owner) {
    Result<Job> r = CommitOne(
        {id, event(*owner), [&caller](const Job& job) { return CheckOwner(job, caller); }});
    if (r.ok() && changed != nullptr) {
      *changed = held_before != !r->held_by.empty() || admin_before != r->held_by_admin;
    }
    if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
  }
  GP_ASSIGN_OR_RETURN(Job job, store_->GetJob(id));
  return NotActiveAnswer(id, caller, event(job));
}

}  // namespace gpupool::controller
