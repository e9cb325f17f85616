// Limits: per-user and per-project bounds on GPUs in use, running jobs and queued jobs
// (Slurm's QOS MaxTRESPerUser / MaxJobsPerUser / MaxSubmitJobsPerUser), set by admins
// through PUT /v1/limits and stored as one JSON setting (`gpupool sim timed
// --limits-file` reads the same JSON). A job counts against its user's limit and against
// its project's (a job without a project: its user's name). Queued jobs are refused at
// submit (by the controller); running jobs and GPUs hold jobs PENDING with a reason (the
// QuotaLimit gate, gates.h). Value types; the JSON codec never throws and names the bad
// field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "common/json.h"
#include "common/status.h"

namespace gpupool::sched {

struct Limit {
  int64_t max_gpus = -1;     // GPUs in use at once (shares count whole); -1 = no limit
  int64_t max_running = -1;  // jobs placed or running at once
  int64_t max_queued = -1;   // jobs PENDING at once (an array counts each element)
  // Preemption defaults (docs/preemption.md), the admin's QoS: whether the user's (the
  // project's) batch jobs are preemptible whatever they ask, and their --min-runtime and
  // --grace when they give none (-1: the server's). Not bounds: the gate ignores them.
  std::optional<bool> preemptible;
  int64_t min_runtime_s = -1;
  int64_t preempt_grace_s = -1;
  // Associations (Slurm's), not bounds either: a project's entry lists the users who may
  // charge it (enforced under the server's enforce-projects, project_access.h), and a
  // user's entry may name the project their jobs without --project charge (Slurm's
  // DefaultAccount; it must list them). Neither is inherited.
  std::set<std::string> members;  // projects only
  std::string default_project;    // users only; empty: their own name
  // Fair-share weight (Slurm's Fairshare=N, sshare's RawShares), not a bound either: the
  // user's (the project's) group is entitled to this many parts of the pool where fair
  // share is by user (by project, the server's --fair-by). 0: unset, weighs 1. Users' and
  // projects' entries only, not inherited from the default.
  double fair_share = 0;
  bool empty() const {
    return max_gpus < 0 && max_running < 0 && max_queued < 0 && !preemptible && min_runtime_s < 0 &&
           preempt_grace_s < 0 && members.empty() && default_project.empty() && fair_share <= 0;
  }
  friend bool operator==(const Limit&, const Limit&) = default;
};

struct Limits {
  Limit user_default;  // every user, for each field a user's own row leaves unset (-1)
  std::map<std::string, Limit> users;
  std::map<std::string, Limit> projects;
  // The user's limits: their own row's fields, each one it leaves unset (-1) the
  // default's (as a Slurm association inherits its parent's limits field by field), so a
  // row that sets max_gpus only keeps the default's max_queued.
  Limit ForUser(const std::string& user) const;
  const Limit* ForProject(const std::string& project) const;  // nullptr: none
  friend bool operator==(const Limits&, const Limits&) = default;
};

OrderedJson LimitsToJson(const Limits& l);
// `{"default": LIMIT, "users": {NAME: LIMIT}, "projects": {NAME: LIMIT}}`, each LIMIT
// `{"max_gpus", "max_running", "max_queued"}` (absent or -1: no limit; in a user's
// row: the default's), the preemption defaults `"preemptible"` (true or false),
// `"min_runtime_s"` and `"preempt_grace_s"` (absent or -1: none), a project's
// `"members"` (login names) and a user's `"default_project"` (a project whose members
// include the user), and a user's or project's `"fair_share"` (a weight above 0 and at most
// kMaxFairShare; absent: 1). A `"revision"` (a whole number, what GET /v1/limits answers with
// them) is read past. InvalidArgument naming the field otherwise.
Result<Limits> LimitsFromJson(const Json& j);

inline constexpr double kMaxFairShare = 1'000'000;

// The fair-share weights the limits give the pool's fair-share groups: the users' entries'
// (by user) or the projects' (by project), for those that set one; every other group
// weighs 1 (sched::QueuePolicyConfig::fair_weights, PreemptionOptions::weights).
std::map<std::string, double, std::less<>> FairShareWeights(const Limits& l, bool by_project);

// The reason a pending job waits, naming who is at which limit; empty when none is hit.
// `used_*` are what the user (project) has running, plus `adding` for the job.
std::string LimitReason(const std::string& who, const Limit& l, int64_t used_gpus,
                        int64_t used_running, int64_t job_gpus);

}  // namespace gpupool::sched
