#include "sim/timed/timed_experiment.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>

#include "sched/admission/profile.h"
#include "sched/queue/gang_placement.h"
#include "sched/rng.h"
#include "sim/timed/group_service.h"
#include "sim/timed/group_shares.h"

namespace gpupool::sim {
namespace {

using sched::ClusterState;
using sched::PlacementPolicy;
using sched::QueuedJob;
using sched::RunningJob;

Result<QueuedJob> ToQueuedJob(const TraceJob& t, int64_t origin_s) {
  QueuedJob q;
  q.id = t.id;
  q.user = t.user;
  q.project = t.project;
  q.priority = t.priority;
  q.submit_s = t.submit_s - origin_s;
  q.time_limit_s = t.time_limit_s;
  q.runtime_estimate_s = t.runtime_estimate_s;
  if (t.tasks.empty()) return Status::InvalidArgument(fmt::format("job '{}' has no tasks", t.id));
  for (size_t k = 0; k < t.tasks.size(); ++k) {
    const TraceTask& tt = t.tasks[k];
    sched::Task task;
    task.name = t.tasks.size() == 1 ? t.id : fmt::format("{}/{}", t.id, k);
    task.job_id = t.id;
    task.cpu_milli = tt.cpu_milli;
    task.memory_mib = tt.memory_mib;
    task.num_gpu = tt.num_gpu;
    task.gpu_milli = tt.gpu_milli;
    task.gpu_models = tt.gpu_models;
    task.gpu_memory_mib = tt.gpu_memory_mib;
    GP_RETURN_IF_ERROR(sched::ValidateTask(task));
    q.admission.gpus += tt.num_gpu;  // shares count whole, as in the live scheduler
    q.tasks.push_back(std::move(task));
  }
  q.admission.array_id = t.array;
  q.admission.array_max_running = t.array_max_running;
  if (t.held_for_s > 0) q.admission.held_by = t.user;  // released held_for_s after submission
  return q;
}

// Decides once per distinct gang shape whether a job could ever be placed: the cheap
// static test first, then a real placement on an idle copy of the cluster with its own
// policy instance (policies cache by node version, which copies share).
class FeasibilityCheck {
 public:
  FeasibilityCheck(const ClusterState& idle, std::unique_ptr<PlacementPolicy> policy)
      : idle_(idle), policy_(std::move(policy)) {}

  // Returns an empty string when the job can run, else why not.
  Result<std::string> WhyNever(const QueuedJob& job) {
    std::string key;
    for (const sched::Task& t : job.tasks) {
      key += fmt::format("{}/{}/{}/{}/{}/{};", t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli,
                         fmt::join(t.gpu_models, "|"), t.min_capability);
    }
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    std::string why;
    if (!sched::GangObviouslyUnplaceable(idle_, job.tasks, &why)) {
      GP_ASSIGN_OR_RETURN(sched::GangPlacement g, sched::PlaceGang(idle_, job.tasks, *policy_));
      if (g.placed) {
        GP_RETURN_IF_ERROR(sched::ReleaseGang(idle_, job.tasks, g.placements));
      } else {
        why = fmt::format("does not fit even on the idle cluster: {}", g.reason);
      }
    }
    cache_.emplace(std::move(key), why);
    return why;
  }

 private:
  ClusterState idle_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::map<std::string, std::string> cache_;
};

int64_t RunTime(const QueuedJob& job, int64_t duration_s) {
  return job.time_limit_s > 0 ? std::min(duration_s, job.time_limit_s) : duration_s;
}

// The event loop: completions, arrivals and releases at one instant, then one pass of
// the scheduling profile the live scheduler runs.
class TimedLoop {
 public:
  TimedLoop(const std::vector<TraceJob>& trace, const TimedOptions& options, TimedRun* run)
      : trace_(trace), options_(options), run_(*run), n_(trace.size()) {}

  Status Init(const ClusterState& idle);
  Status Run();

 private:
  // (time, job index): a total order, so ties are handled in trace order.
  using Event = std::pair<int64_t, size_t>;
  using EventQueue = std::priority_queue<Event, std::vector<Event>, std::greater<>>;

  size_t IndexOf(const QueuedJob* j) const { return static_cast<size_t>(j - jobs_.data()); }
  Status Complete(int64_t now, bool* freed);
  Status Arrive(int64_t now, bool* arrived);
  bool Release(int64_t now);
  Status Pass(int64_t now);
  // Starts job `j` at `now` on `placements` (from a pass or a preemption).
  void Start(int64_t now, size_t j, std::vector<sched::Placement> placements);
  Status Preempt(int64_t now, bool* preempted);
  // The waiting jobs weighed for preemption at `now`, in the order to weigh them.
  std::vector<const QueuedJob*> PreemptOrder(int64_t now, const sched::GroupUse& use) const;
  // service_preemption's candidates: see TimedOptions.
  std::vector<size_t> ServiceCandidates(int64_t now, const QueuedJob& waiting,
                                        const std::vector<sched::PreemptibleRun>& runs,
                                        const sched::GroupUse& use) const;
  // Drops the candidates that victim_wait_budget_s or victim_max_preemptions protect.
  void Protect(const std::vector<sched::PreemptibleRun>& runs,
               std::vector<size_t>* candidates) const;
  const std::string& GroupOf(size_t j) const {
    return by_project_ ? jobs_[j].project : jobs_[j].user;
  }
  // Takes the running job `j` off the cluster (its resources freed, out-of-service
  // capacity there held again).
  Status Remove(size_t j);
  // Stops the running job `j` at `now`: it keeps the work of its last checkpoint; returns
  // the GPU-seconds of work it lost.
  Result<double> Stop(int64_t now, size_t j);
  void Requeue(int64_t now, size_t j);
  // Stops the running job `j` at `now` and queues it again.
  Status StopVictim(int64_t now, size_t j);
  // GPU failures and repairs due at `now`.
  Status Failures(int64_t now, bool* freed, bool* arrived);
  bool OnOutOfService(const std::vector<sched::Placement>& placements) const;
  void Record(int64_t now);

  const std::vector<TraceJob>& trace_;
  const TimedOptions& options_;
  TimedRun& run_;
  const size_t n_;
  ClusterState cluster_;
  // The victims waiting, for kFirst and kFirstUnderShare (null otherwise), and the queue
  // policies that put them first.
  std::shared_ptr<ResumeFront> front_;
  std::unique_ptr<sched::QueuePolicyRegistry> queues_;
  std::unique_ptr<sched::SchedulingProfile> profile_;
  std::unique_ptr<FeasibilityCheck> feasibility_;
  std::vector<size_t> arrival_;  // job indices by submission time, trace order on ties
  // Jobs live here for the whole run; the queue and running list point into it.
  std::vector<QueuedJob> jobs_;
  std::vector<const QueuedJob*> pending_;  // arrival order
  std::multiset<int64_t> pending_gpu_;     // GPU demand of pending jobs, to skip hopeless passes
  std::vector<RunningJob> running_;
  std::vector<const QueuedJob*> occupying_;  // running_'s jobs, for the gates
  std::vector<size_t> running_pos_;          // job index -> position in running_
  // Per job: run time still to do, when it last joined the queue, when its current run
  // ends (a completion event at another time is a stale one of a preempted run), and
  // whether that run ends at its time limit.
  std::vector<int64_t> remaining_s_;
  std::vector<int64_t> queued_at_;
  std::vector<int64_t> end_at_;
  std::vector<bool> times_out_;
  std::unique_ptr<PlacementPolicy> preempt_policy_;
  std::unique_ptr<GpuFailureModel> failures_;  // null without GPU failures
  // The groups' service so far; null unless service_order or service_preemption.
  std::shared_ptr<GroupService> service_;
  std::shared_ptr<GroupShares> shares_;  // each group's GPUs against its fair share
  // How served a group is, for service_order and service_preemption: service_ or shares_.
  const sched::GroupServiceSource* served_ = nullptr;
  bool by_project_ = false;  // the service's groups are projects
  EventQueue completions_;
  EventQueue releases_;  // held jobs' releases
  size_t next_ = 0;      // into arrival_
  size_t done_ = 0;
  size_t next_progress_ = 0;
  AllocationPoint last_{-1, -1, -1, -1};
};

Status TimedLoop::Init(const ClusterState& idle) {
  const sched::PlacementPolicyRegistry& placements = options_.placement_registry != nullptr
                                                         ? *options_.placement_registry
                                                         : sched::BuiltinPlacementPolicies();
  sched::ProfileSpec spec;
  spec.queue_policy = options_.queue_policy;
  spec.queue_config = options_.queue_config;
  by_project_ = options_.queue_config.fair_group == sched::FairShareGroup::kProject;
  shares_ = std::make_shared<GroupShares>(idle.TotalCapacity().gpu_milli);
  if (options_.service_order || options_.service_preemption) {
    std::shared_ptr<const sched::GroupServiceSource> served = shares_;
    if (!options_.service_by_attainment) {
      service_ = std::make_shared<GroupService>();
      served = service_;
    }
    served_ = served.get();
    if (options_.service_order) spec.queue_config.fair_service = std::move(served);
  }
  spec.placement_policy = options_.placement_policy;
  spec.placement_config.seed = options_.seed;
  spec.placements = &placements;
  spec.pass = sched::PassOptions{options_.start_rule, options_.max_backfill_tries};
  const PreemptResume resume = options_.preempt_resume;
  if (options_.preemption &&
      (resume == PreemptResume::kFirst || resume == PreemptResume::kFirstUnderShare)) {
    front_ = std::make_shared<ResumeFront>();
    queues_ = ResumeFirstPolicies(front_, resume == PreemptResume::kFirstUnderShare);
    spec.queues = queues_.get();
  }
  GP_ASSIGN_OR_RETURN(profile_, sched::SchedulingProfile::Create(spec));
  cluster_ = idle;
  if (options_.shuffle_nodes) {
    std::vector<int32_t> order(static_cast<size_t>(cluster_.num_nodes()));
    std::iota(order.begin(), order.end(), 0);
    sched::Rng rng(options_.seed);
    rng.Shuffle(order);
    GP_RETURN_IF_ERROR(cluster_.SetScanOrder(std::move(order)));
  }
  GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> feasibility_policy,
                      placements.Create(options_.placement_policy, spec.placement_config));
  feasibility_ = std::make_unique<FeasibilityCheck>(cluster_, std::move(feasibility_policy));
  run_.capacity = cluster_.TotalCapacity();
  if (n_ == 0) return Status::Ok();
  arrival_.resize(n_);
  std::iota(arrival_.begin(), arrival_.end(), size_t{0});
  std::stable_sort(arrival_.begin(), arrival_.end(),
                   [&](size_t a, size_t b) { return trace_[a].submit_s < trace_[b].submit_s; });
  run_.origin_s = trace_[arrival_[0]].submit_s;
  jobs_.reserve(n_);
  run_.jobs.resize(n_);
  for (size_t i = 0; i < n_; ++i) {
    GP_ASSIGN_OR_RETURN(QueuedJob q, ToQueuedJob(trace_[i], run_.origin_s));
    JobRecord& rec = run_.jobs[i];
    rec.id = q.id;
    rec.user = q.user;
    rec.project = q.project;
    rec.submit_s = q.submit_s;
    rec.duration_s = trace_[i].duration_s;
    rec.gpu_milli = q.Total().gpu_milli;
    rec.num_tasks = static_cast<int32_t>(q.tasks.size());
    jobs_.push_back(std::move(q));
  }
  running_pos_.assign(n_, SIZE_MAX);
  remaining_s_.resize(n_);
  for (size_t i = 0; i < n_; ++i) remaining_s_[i] = trace_[i].duration_s;
  queued_at_.assign(n_, 0);
  end_at_.assign(n_, -1);
  times_out_.assign(n_, false);
  if (options_.preemption) {
    GP_ASSIGN_OR_RETURN(preempt_policy_,
                        placements.Create(options_.placement_policy, spec.placement_config));
  }
  if (options_.gpu_failures.enabled()) {
    GP_ASSIGN_OR_RETURN(GpuFailureModel model,
                        GpuFailureModel::Create(cluster_, options_.gpu_failures));
    failures_ = std::make_unique<GpuFailureModel>(std::move(model));
  }
  next_progress_ = std::max<size_t>(1, n_ / 200);
  return Status::Ok();
}

Status TimedLoop::Complete(int64_t now, bool* freed) {
  while (!completions_.empty() && completions_.top().first == now) {
    const size_t j = completions_.top().second;
    completions_.pop();
    if (running_pos_[j] == SIZE_MAX || end_at_[j] != now) continue;  // a stopped run's
    GP_RETURN_IF_ERROR(Remove(j));
    JobRecord& rec = run_.jobs[j];
    rec.end_s = now;
    rec.fate = times_out_[j] ? JobFate::kTimedOut : JobFate::kFinished;
    shares_->Change(GroupOf(j), 0, -jobs_[j].Total().gpu_milli);
    if (service_) service_->End(GroupOf(j), rec.submit_s, rec.waited_s, rec.lost_s, now);
    ++done_;
    *freed = true;
  }
  return Status::Ok();
}

Status TimedLoop::Arrive(int64_t now, bool* arrived) {
  while (next_ < n_ && jobs_[arrival_[next_]].submit_s == now) {
    const size_t j = arrival_[next_++];
    GP_ASSIGN_OR_RETURN(std::string why, feasibility_->WhyNever(jobs_[j]));
    if (!why.empty()) {
      run_.jobs[j].fate = JobFate::kNeverFits;
      run_.jobs[j].reason = std::move(why);
      ++done_;
      continue;
    }
    if (!jobs_[j].admission.held_by.empty()) {
      releases_.emplace(now + trace_[j].held_for_s, j);
    } else {
      shares_->Change(GroupOf(j), 0, jobs_[j].Total().gpu_milli);  // held: on release
    }
    pending_.push_back(&jobs_[j]);
    pending_gpu_.insert(jobs_[j].Total().gpu_milli);
    queued_at_[j] = now;
    run_.jobs[j].waited_s = 0;
    if (service_) service_->Join(GroupOf(j), jobs_[j].submit_s, now);
    *arrived = true;
  }
  return Status::Ok();
}

bool TimedLoop::Release(int64_t now) {
  bool released = false;
  while (!releases_.empty() && releases_.top().first == now) {
    const size_t j = releases_.top().second;
    jobs_[j].admission.held_by.clear();
    shares_->Change(GroupOf(j), 0, jobs_[j].Total().gpu_milli);
    releases_.pop();
    released = true;
  }
  return released;
}

Status TimedLoop::Pass(int64_t now) {
  occupying_.clear();
  for (const RunningJob& r : running_) occupying_.push_back(r.job);
  sched::PassContext ctx;
  ctx.now_s = now;
  ctx.pending = pending_;
  ctx.running = running_;
  ctx.occupying = occupying_;
  ctx.limits = &options_.limits;
  GP_ASSIGN_OR_RETURN(sched::ProfileResult result, profile_->Run(cluster_, ctx, /*explain=*/false));
  ++run_.passes;
  if (result.reserved_index) ++run_.reservations;
  if (result.started.empty()) return Status::Ok();
  std::vector<bool> started(pending_.size(), false);
  for (sched::PassResult::Started& s : result.started) {
    started[s.pending_index] = true;
    Start(now, IndexOf(pending_[s.pending_index]), std::move(s.placements));
  }
  size_t w = 0;
  for (size_t r = 0; r < pending_.size(); ++r) {
    if (!started[r]) pending_[w++] = pending_[r];
  }
  pending_.resize(w);
  return Status::Ok();
}

void TimedLoop::Start(int64_t now, size_t j, std::vector<sched::Placement> placements) {
  const QueuedJob* job = &jobs_[j];
  JobRecord& rec = run_.jobs[j];
  if (rec.start_s < 0) rec.start_s = now;
  if (front_ != nullptr && !front_->empty()) front_->Remove(job->id);
  rec.waited_s += now - queued_at_[j];
  if (service_) service_->Start(GroupOf(j), queued_at_[j], now);
  shares_->Change(GroupOf(j), job->Total().gpu_milli, 0);
  running_pos_[j] = running_.size();
  running_.push_back(RunningJob{job, now, std::move(placements)});
  // Each attempt gets its whole time limit, as a requeued job does on a live pool.
  const int64_t run_for = RunTime(*job, remaining_s_[j]);
  times_out_[j] = run_for < remaining_s_[j];
  end_at_[j] = now + run_for;
  completions_.emplace(end_at_[j], j);
  pending_gpu_.erase(pending_gpu_.find(job->Total().gpu_milli));
}

Status TimedLoop::Remove(size_t j) {
  const size_t pos = running_pos_[j];
  std::vector<sched::Placement> placements = std::move(running_[pos].placements);
  GP_RETURN_IF_ERROR(sched::ReleaseGang(cluster_, jobs_[j].tasks, placements));
  if (pos + 1 != running_.size()) {
    running_[pos] = std::move(running_.back());
    running_pos_[IndexOf(running_[pos].job)] = pos;
  }
  running_.pop_back();
  running_pos_[j] = SIZE_MAX;
  shares_->Change(GroupOf(j), -jobs_[j].Total().gpu_milli, 0);
  if (failures_ != nullptr) {
    for (const sched::Placement& p : placements) {
      if (failures_->Affects(p.node)) GP_RETURN_IF_ERROR(failures_->Rehold(p.node, cluster_));
    }
  }
  return Status::Ok();
}

Result<double> TimedLoop::Stop(int64_t now, size_t j) {
  const int64_t ran = now - running_[running_pos_[j]].start_s;
  GP_RETURN_IF_ERROR(Remove(j));
  const int64_t c = options_.checkpoint_interval_s;
  const int64_t kept = c > 0 ? ran / c * c : 0;
  remaining_s_[j] -= kept;
  run_.jobs[j].lost_s += ran - kept;
  if (service_) service_->Stop(GroupOf(j), ran - kept, /*requeue=*/false, now);
  end_at_[j] = -1;
  return static_cast<double>(ran - kept) * static_cast<double>(jobs_[j].Total().gpu_milli) / 1000.0;
}

void TimedLoop::Requeue(int64_t now, size_t j) {
  pending_.push_back(&jobs_[j]);
  pending_gpu_.insert(jobs_[j].Total().gpu_milli);
  queued_at_[j] = now;
  if (service_) service_->Stop(GroupOf(j), 0, /*requeue=*/true, now);
}

Status TimedLoop::StopVictim(int64_t now, size_t j) {
  GP_ASSIGN_OR_RETURN(const double lost_gpu_s, Stop(now, j));
  ++run_.jobs[j].preemptions;
  ++run_.preemptions;
  run_.preempted_gpu_s += lost_gpu_s;
  if (options_.preempt_resume == PreemptResume::kRemaining) {
    // The key sjf and the fair shortest-first orders read (QueuedJob::SjfRuntime); the
    // time limit, and so the run time each attempt gets, is unchanged.
    const TraceJob& t = trace_[j];
    const int64_t key = t.runtime_estimate_s > 0 ? t.runtime_estimate_s : t.time_limit_s;
    jobs_[j].runtime_estimate_s = RemainingSjfKey(key, t.duration_s - remaining_s_[j]);
  }
  if (front_ != nullptr) front_->Add(jobs_[j].id);
  Requeue(now, j);
  return Status::Ok();
}

bool TimedLoop::OnOutOfService(const std::vector<sched::Placement>& placements) const {
  if (failures_ == nullptr) return false;
  for (const sched::Placement& p : placements) {
    for (int32_t g : p.gpus) {
      if (failures_->OutOfService(p.node, g)) return true;
    }
  }
  return false;
}

Status TimedLoop::Failures(int64_t now, bool* freed, bool* arrived) {
  if (failures_ == nullptr) return Status::Ok();
  if (failures_->NextRepair() <= now) GP_RETURN_IF_ERROR(failures_->Repair(now, cluster_, freed));
  if (failures_->NextFailure() > now) return Status::Ok();
  GP_ASSIGN_OR_RETURN(std::vector<GpuHit> hits, failures_->Fail(now, cluster_));
  for (const GpuHit& hit : hits) {
    // The jobs holding the GPU (any share of it, any task of a gang).
    std::vector<size_t> on_gpu;
    for (const RunningJob& r : running_) {
      for (const sched::Placement& p : r.placements) {
        if (p.node == hit.node &&
            std::find(p.gpus.begin(), p.gpus.end(), hit.gpu) != p.gpus.end()) {
          on_gpu.push_back(IndexOf(r.job));
          break;
        }
      }
    }
    for (size_t j : on_gpu) {
      GP_ASSIGN_OR_RETURN(const double lost_gpu_s, Stop(now, j));
      run_.gpu_failure_lost_gpu_s += lost_gpu_s;
      JobRecord& rec = run_.jobs[j];
      ++rec.gpu_failures;
      *freed = true;
      // An application Xid is the job's own failure; a cordon requeues it when allowed.
      if (!hit.fail_jobs && (options_.gpu_failures.requeue || trace_[j].requeue)) {
        ++run_.requeues_by_gpu_failure;
        Requeue(now, j);
        *arrived = true;
        continue;
      }
      ++run_.failed_jobs_by_gpu_failure;
      rec.end_s = now;
      rec.fate = JobFate::kGpuFailed;
      rec.reason = hit.why;
      shares_->Change(GroupOf(j), 0, -jobs_[j].Total().gpu_milli);
      if (service_) service_->End(GroupOf(j), rec.submit_s, rec.waited_s, rec.lost_s, now);
      ++done_;
    }
  }
  return Status::Ok();
}

std::vector<const QueuedJob*> TimedLoop::PreemptOrder(int64_t now,
                                                      const sched::GroupUse& use) const {
  // The waiting jobs weighed: those of the least-served groups first (their group's GPUs
  // in use, or with service_preemption its service ratio; then arrival; starving ones
  // before them), a few of them, so that an instant costs a bounded number of trial
  // placements however long the queue is.
  auto used = [&](const QueuedJob* q) {  // per weight (PreemptionOptions::weights)
    const std::string& g = options_.preempt.by_project ? q->project : q->user;
    auto it = use.gpu_milli.find(g);
    return it == use.gpu_milli.end()
               ? 0.0
               : static_cast<double>(it->second) / sched::GroupWeight(options_.preempt, g);
  };
  // Jobs that have waited starving_after_s (when set) are weighed first, oldest first.
  auto starving = [&](const QueuedJob* q) {
    const int64_t after = options_.preempt.starving_after_s;
    return after > 0 && now - q->submit_s >= after;
  };
  std::vector<const QueuedJob*> order;
  for (const QueuedJob* q : pending_) {
    if (q->admission.held_by.empty()) order.push_back(q);
  }
  std::map<std::string_view, double> ratio;  // service_preemption: by group
  if (options_.service_preemption) {
    for (const QueuedJob* q : order) {
      const std::string& g = GroupOf(IndexOf(q));
      if (!ratio.contains(g)) ratio[g] = served_->ServiceRatio(g, now);
    }
  }
  const size_t look = std::min(order.size(), 4 * options_.max_preemptions_per_instant);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(look), order.end(),
                    [&](const QueuedJob* a, const QueuedJob* b) {
                      const bool sa = starving(a), sb = starving(b);
                      if (sa != sb) return sa;
                      if (sa) return IndexOf(a) < IndexOf(b);
                      if (!ratio.empty()) {
                        const double ra = ratio[GroupOf(IndexOf(a))];
                        const double rb = ratio[GroupOf(IndexOf(b))];
                        if (ra != rb) return ra < rb;
                      }
                      const double ua = used(a), ub = used(b);
                      return ua != ub ? ua < ub : IndexOf(a) < IndexOf(b);
                    });
  order.resize(look);
  return order;
}

std::vector<size_t> TimedLoop::ServiceCandidates(int64_t now, const QueuedJob& waiting,
                                                 const std::vector<sched::PreemptibleRun>& runs,
                                                 const sched::GroupUse& use) const {
  const std::string& mine = GroupOf(IndexOf(&waiting));
  const double my_ratio = served_->ServiceRatio(mine, now);
  std::map<std::string_view, bool> better;  // by group: better served and over its share
  std::vector<size_t> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    const sched::RunningJob& r = *runs[i].run;
    if (now - r.start_s < options_.preempt.min_runtime_s) continue;
    const std::string& theirs = GroupOf(IndexOf(r.job));
    auto it = better.find(theirs);
    if (it == better.end()) {
      auto u = use.gpu_milli.find(theirs);
      const bool over = u != use.gpu_milli.end() && u->second > use.ShareOf(theirs);
      it = better
               .emplace(theirs,
                        theirs != mine && over &&
                            served_->ServiceRatio(theirs, now) > my_ratio + options_.service_gap)
               .first;
    }
    if (it->second || r.job->priority < waiting.priority) out.push_back(i);
  }
  return out;
}

void TimedLoop::Protect(const std::vector<sched::PreemptibleRun>& runs,
                        std::vector<size_t>* candidates) const {
  const int64_t budget = options_.victim_wait_budget_s;
  const int32_t max_times = options_.victim_max_preemptions;
  if (budget <= 0 && max_times <= 0) return;
  std::erase_if(*candidates, [&](size_t i) {
    const JobRecord& rec = run_.jobs[IndexOf(runs[i].run->job)];
    return (budget > 0 && rec.waited_s > budget) || (max_times > 0 && rec.preemptions >= max_times);
  });
}

Status TimedLoop::Preempt(int64_t now, bool* preempted) {
  size_t done = 0;
  std::vector<sched::PreemptibleRun> runs;
  runs.reserve(running_.size());
  for (const RunningJob& r : running_) runs.push_back({&r, true});
  sched::GroupUse use =
      sched::UseOf(runs, pending_, cluster_.TotalGpuWeightMilli(), options_.preempt, &cluster_);
  const std::vector<const QueuedJob*> order = PreemptOrder(now, use);
  bool stale = false;
  for (const QueuedJob* waiting : order) {
    if (done >= options_.max_preemptions_per_instant) break;
    if (stale) {
      runs.clear();
      for (const RunningJob& r : running_) runs.push_back({&r, true});
      use =
          sched::UseOf(runs, pending_, cluster_.TotalGpuWeightMilli(), options_.preempt, &cluster_);
      stale = false;
    }
    std::vector<size_t> candidates =
        options_.service_preemption
            ? ServiceCandidates(now, *waiting, runs, use)
            : sched::PreemptionCandidates(*waiting, runs, use, now, options_.preempt);
    Protect(runs, &candidates);
    if (candidates.empty()) continue;
    GP_ASSIGN_OR_RETURN(
        std::optional<sched::Victims> victims,
        sched::ChooseVictims(cluster_, *waiting, runs, candidates, *preempt_policy_));
    if (!victims || OnOutOfService(victims->placements)) continue;
    std::vector<size_t> stop;
    for (size_t i : victims->running) stop.push_back(IndexOf(running_[i].job));
    for (size_t j : stop) GP_RETURN_IF_ERROR(StopVictim(now, j));
    const size_t j = IndexOf(waiting);
    for (size_t k = 0; k < waiting->tasks.size(); ++k) {
      GP_RETURN_IF_ERROR(cluster_.Allocate(waiting->tasks[k], victims->placements[k]));
    }
    pending_.erase(std::find(pending_.begin(), pending_.end(), waiting));
    Start(now, j, std::move(victims->placements));
    ++done;
    *preempted = true;
    stale = true;
  }
  return Status::Ok();
}

void TimedLoop::Record(int64_t now) {
  const int64_t held = failures_ != nullptr ? failures_->held_gpu_milli() : 0;
  AllocationPoint point{now, cluster_.TotalGpuMilliUsed() - held,
                        static_cast<int64_t>(running_.size()),
                        static_cast<int64_t>(pending_.size())};
  if (std::tie(point.gpu_milli_used, point.running_jobs, point.pending_jobs) !=
      std::tie(last_.gpu_milli_used, last_.running_jobs, last_.pending_jobs)) {
    run_.timeline.push_back(point);
    last_ = point;
  }
  if (options_.progress && done_ >= next_progress_) {
    options_.progress(done_, n_);
    next_progress_ = done_ + std::max<size_t>(1, n_ / 200);
  }
}

Status TimedLoop::Run() {
  if (n_ == 0) return Status::Ok();
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // Failures come only while something else is still to happen; repairs also while
  // jobs wait for the capacity they bring back.
  auto repair = [&] {
    return failures_ != nullptr && !pending_.empty() ? failures_->NextRepair() : kNever;
  };
  int64_t last = 0;
  while (next_ < n_ || !completions_.empty() || !releases_.empty() || repair() != kNever) {
    int64_t now = repair();
    if (next_ < n_) now = std::min(now, jobs_[arrival_[next_]].submit_s);
    if (!completions_.empty()) now = std::min(now, completions_.top().first);
    if (!releases_.empty()) now = std::min(now, releases_.top().first);
    if (failures_ != nullptr) {
      now = std::min({now, failures_->NextFailure(), failures_->NextRepair()});
    }
    last = now;
    shares_->AdvanceTo(now);
    bool freed = false;
    bool arrived = false;
    GP_RETURN_IF_ERROR(Complete(now, &freed));
    GP_RETURN_IF_ERROR(Failures(now, &freed, &arrived));
    GP_RETURN_IF_ERROR(Arrive(now, &arrived));
    const bool released = Release(now);
    // A pass can start something only if resources were freed, jobs arrived or were
    // released, and only if the free GPUs cover the smallest pending GPU demand.
    if ((freed || arrived || released) && !pending_.empty() &&
        cluster_.TotalFree().gpu_milli >= *pending_gpu_.begin()) {
      GP_RETURN_IF_ERROR(Pass(now));
    }
    if (options_.preemption && (freed || arrived || released) && !pending_.empty()) {
      bool preempted = false;
      GP_RETURN_IF_ERROR(Preempt(now, &preempted));
      // The victims' leftovers may fit others.
      if (preempted) GP_RETURN_IF_ERROR(Pass(now));
    }
    Record(now);
  }
  // Nothing runs and nothing arrives any more: whatever still waits never started.
  for (const QueuedJob* job : pending_) run_.jobs[IndexOf(job)].fate = JobFate::kNeverStarted;
  if (failures_ != nullptr) {
    failures_->Finish(last);
    run_.gpu_failure_events = failures_->events_by_action();
    run_.out_of_service_gpu_s = failures_->out_of_service_gpu_s();
  }
  for (const auto& [group, g] : shares_->groups()) {
    run_.group_shares[group] = GroupShareTotals{g.received_gpu_s, g.entitled_gpu_s};
  }
  run_.share_jain_mean = shares_->MeanInstantJain();
  if (options_.progress) options_.progress(n_, n_);
  return Status::Ok();
}

}  // namespace

std::string_view JobFateName(JobFate fate) {
  switch (fate) {
    case JobFate::kFinished:
      return "finished";
    case JobFate::kTimedOut:
      return "timed_out";
    case JobFate::kNeverFits:
      return "never_fits";
    case JobFate::kNeverStarted:
      return "never_started";
    case JobFate::kGpuFailed:
      return "gpu_failed";
  }
  return "unknown";
}

Result<TimedRun> RunTimedExperiment(const ClusterState& idle_cluster,
                                    const std::vector<TraceJob>& trace,
                                    const TimedOptions& options) {
  TimedRun run;
  run.preemption = options.preemption;
  run.gpu_failures = options.gpu_failures.enabled();
  TimedLoop loop(trace, options, &run);
  GP_RETURN_IF_ERROR(loop.Init(idle_cluster));
  GP_RETURN_IF_ERROR(loop.Run());
  return run;
}

}  // namespace gpupool::sim
