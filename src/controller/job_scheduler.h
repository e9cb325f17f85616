// JobScheduler: the controller's adapter to the scheduling core. It turns the
// controller's jobs and nodes into one pass's input (sched_input.h), runs the scheduling
// profile the simulator runs too (sched/admission/profile.h: gates, admission filters,
// the pass, the explain step), and hands back job placements and pending reasons.
//
// Pure with respect to its inputs: no I/O, no clock (the time is passed in). Holds the
// profile, whose policies cache, and the jobs' conversions from pass to pass (keyed by
// the job's id and version: a caller's job whose content changes must get a new
// version; a job given at the same address with the same version is taken as it was,
// not compared again: ConversionCache::by_version), so one instance serves one thread
// (the scheduler loop).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "controller/limits.h"
#include "controller/preemption_holds.h"
#include "controller/preemption_plan.h"
#include "controller/sched_input.h"
#include "jobs/job.h"
#include "sched/admission/profile.h"

namespace gpupool::controller {

// The pending reason of a held job: who held it and how to release it.
std::string HeldReason(const jobs::Job& job);

// Ends the pending reason of a share that waits only because the MPS GPUs that could take
// it run another user's shares (kMpsOneUserNote), or, under --mps-one-size, another user's
// or another size's (kMpsOneSizeNote).
inline constexpr const char* kMpsOneUserNote =
    "the MPS GPUs that fit are held by another user's shares; MPS serves one user per GPU "
    "(gpupool server --mps-multi-user allows several)";
inline constexpr const char* kMpsOneSizeNote =
    "the MPS GPUs that fit are held by another user's shares or by shares of another size; "
    "MPS serves one user per GPU, and this pool holds each share to its own size by "
    "keeping one size per GPU (gpupool server --mps-one-size)";

struct ScheduleResult {
  std::map<int64_t, std::vector<jobs::TaskPlacement>> starts;  // job id -> placements
  // Why the jobs left pending wait: those whose reason is new or changed since this
  // scheduler's last Plan (all of them on its first); JobScheduler::pending_reasons()
  // holds every one. `reasons_dropped`: jobs that had one after the last Plan and have none
  // now (started, ended, or no longer given).
  std::map<int64_t, std::string> pending_reasons;
  std::vector<int64_t> reasons_dropped;
  // Of all the pending reasons, how many are of class "resources" (PendingReasonClass).
  int64_t no_room = 0;
  // Planned starts of pending jobs (µs since the epoch), from the time limits of the jobs
  // in their way: under the easy start rule, the job holding the reservation; with
  // Plan's plan_starts = N, the first N pending jobs in queue order that can be planned
  // (sched/queue/start_plan.h).
  std::map<int64_t, int64_t> start_estimates_us;
  // With plan_starts: why a job in the plan has no planned start (short, for `queue
  // --start`'s N/A). Jobs out of the plan have neither.
  std::map<int64_t, std::string> start_notes;
  std::vector<PlannedPreemption> preemptions;  // running jobs to stop (preemption_plan.h)
  // The pass started its maximum (Create's max_starts) before trying every pending job:
  // the caller runs the next pass at once. No preemption is planned in a capped pass
  // (jobs it did not reach may still fit on free GPUs).
  bool capped = false;
};

class JobScheduler {
 public:
  // `mps_sharing`: which shares an MPS GPU takes at once (sched_input.h).
  // `max_starts`: at most this many jobs start in one pass (0: no bound; PassOptions).
  // `fair_by` (the server's --fair-by; docs/deploy.md, "Fair share"): what fair share
  // divides between, users or projects (a job's jobs::AccountingProject: its project, else
  // its user's name), for the fair queue (QueuePolicyConfig::fair_group) and fair-share
  // preemption alike (set_preemption's PreemptionSettings::by_project follows it).
  static Result<std::unique_ptr<JobScheduler>> Create(
      const std::string& placement_policy, const std::string& queue_policy,
      const std::string& start_rule, MpsSharing mps_sharing = MpsSharing::kOneUser,
      size_t max_starts = 0, sched::FairShareGroup fair_by = sched::FairShareGroup::kUser);

  // Who may charge which project (sched/admission/project_access.h); kNone by default.
  // Warns (the log) where fair share is by project and a user may name another team's
  // project, so picking their own fair-share group (docs/deploy.md, "Fair share").
  void set_project_enforcement(ProjectEnforcement e);
  // Preemption (preemption_plan.h): on unless set_preemption(nullopt). Its by_project is
  // Create's fair_by and its weights the limits' (Plan), whatever `settings` says.
  void set_preemption(std::optional<PreemptionSettings> settings) {
    preemption_ = std::move(settings);
    if (preemption_) {
      preemption_->by_project = by_project_;
      preemption_->weights = weights_;
    }
  }

  // `active` holds every non-terminal job; ASSIGNED/RUNNING ones occupy their GPUs.
  // `feed` says which pending jobs wait for their dependencies or for an earlier attempt
  // to stop; jobs that would take a user or project past `limits` wait with the reason.
  // `plan_starts` > 0: also plan the starts of that many pending jobs (start_estimates_us,
  // start_notes); it costs a placement search per job, so the controller asks only every
  // few seconds. The fair-share weights of `limits` (their users' fair_share under fair_by
  // user, their projects' under project) weigh the fair queue and fair-share preemption;
  // when they differ from the last pass's, the profile is made again with them. `holds`:
  // the GPUs held for preemptors (preemption_holds.h): no other job is placed on them, and
  // each preemptor is tried first on them.
  Result<ScheduleResult> Plan(const std::vector<const jobs::Job*>& active,
                              const std::vector<SchedNode>& nodes, int64_t now_s,
                              const AdmissionFeed& feed = {}, const Limits& limits = {},
                              size_t plan_starts = 0, const PreemptorHolds& holds = {});

  // Every pending reason the last Plan gave, by job id (ScheduleResult::pending_reasons
  // has those that changed).
  struct KeptReason {
    std::string why;
    uint64_t pass = 0;       // the last Plan that gave it
    bool resources = false;  // of class "resources"
    // Given as the shared reason of the jobs a capped pass did not reach: `why` is the
    // scheduler's last shared reason (KeepReasons).
    bool shared = false;
  };
  const std::unordered_map<int64_t, KeptReason>& pending_reasons() const { return reasons_; }

  // The jobs' conversions kept between passes (sched_input.h): how many the last pass made.
  const ConversionCache& conversion_cache() const { return cache_; }
  // The cluster kept between passes (sched_input.h): what the last pass allocated and released.
  const KeptCluster& kept_cluster() const { return kept_; }

  // Why `job` could never run on `nodes` even if they were idle; empty when it could.
  static std::string NeverFits(const jobs::Job& job, const std::vector<SchedNode>& nodes);
  // The same on a SchedInput of the nodes (no jobs added), which can be kept and asked
  // again for many jobs while the nodes stay as they were.
  static std::string NeverFits(const jobs::Job& job, const SchedInput& in);

 private:
  JobScheduler() = default;
  // Makes the profile again where `weights` differ from weights_ (QueuePolicyConfig is
  // fixed at creation): a change of the limits, seldom.
  Status UseWeights(std::map<std::string, double, std::less<>> weights);

  sched::ProfileSpec spec_;                             // what profile_ was made from
  std::map<std::string, double, std::less<>> weights_;  // fair-share weights in use
  std::unique_ptr<sched::SchedulingProfile> profile_;
  MpsSharing mps_sharing_ = MpsSharing::kOneUser;
  ProjectEnforcement project_enforcement_ = ProjectEnforcement::kNone;
  bool by_project_ = false;  // Create's fair_by is kProject
  std::optional<PreemptionSettings> preemption_ = PreemptionSettings{};
  std::unique_ptr<sched::PlacementPolicy> preempt_policy_;  // ChooseVictims' trial placements
  // Keeps this pass's reasons (by index into in.pending; none for started jobs), and
  // `shared_why` as the reason of the jobs at `shared` (indices, none in `reasons`), and
  // puts those that changed into `result`.
  void KeepReasons(const SchedInput& in, std::vector<std::optional<std::string>>& reasons,
                   const std::vector<size_t>& shared, const std::string& shared_why,
                   ScheduleResult* result);

  ConversionCache cache_;
  KeptCluster kept_;
  std::unordered_map<int64_t, KeptReason> reasons_;
  std::string shared_why_;  // the last shared reason KeepReasons kept (KeptReason::shared)
  uint64_t pass_ = 0;
  int64_t no_room_ = 0;  // reasons_ of class "resources"
};

}  // namespace gpupool::controller
