// QueuePolicy: decides in which order pending jobs are tried.
//
// A queue policy is a pure function of the queue, the running jobs, the cluster and the
// time: it returns an order and never starts anything. Which jobs of that order may
// start (strict order, EASY backfill, skipping blocked jobs) is the scheduling pass's
// job (scheduling_pass.h), so every ordering composes with every start rule.
//
// Policies are created by name from the QueuePolicyRegistry (queue_policy_registry.h).
// Instances are immutable after creation and safe to share between threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/queue/queued_job.h"

namespace gpupool::sched {

// What a queue policy sees. Every pointer and span is owned by the caller and must stay
// valid during the call.
struct QueueContext {
  int64_t now_s = 0;
  std::span<const QueuedJob* const> pending;  // in arrival order
  std::span<const RunningJob> running;
  const ClusterState* cluster = nullptr;
};

// What fair share divides between: users or projects (Philly: virtual clusters; Slurm:
// accounts). The live server's `--fair-by`, `gpupool sim timed --fair-by`.
enum class FairShareGroup { kUser, kProject };

// "user" or "project"; InvalidArgument naming `flag` and both values otherwise.
Result<FairShareGroup> ParseFairShareGroup(std::string_view name, std::string_view flag);
std::string_view FairShareGroupName(FairShareGroup group);

// Each group's service so far, for QueuePolicyConfig::fair_service: a seam the host
// implements (the simulator from its job records); the live pool sets none. Must stay
// valid, and answer consistently, while a policy holding it orders a queue.
class GroupServiceSource {
 public:
  virtual ~GroupServiceSource() = default;
  // The group's service ratio at now_s: run time attained (and not lost) over time in
  // the system, summed over its jobs so far; 1 for a group with none. Lower = less served.
  virtual double ServiceRatio(std::string_view group, int64_t now_s) const = 0;
};

struct QueuePolicyConfig {
  FairShareGroup fair_group = FairShareGroup::kUser;
  // Weight per group for fair share (a group with weight 2 is entitled to twice the
  // share); groups not listed weigh 1. Weights must be > 0.
  std::map<std::string, double, std::less<>> fair_weights;
  // fair: a job that has waited this long (now - submit_s) goes before every job by
  // share, the oldest first (aging, as a bound on waits); 0 = off.
  int64_t fair_starving_after_s = 0;
  // fair: the order of one group's own jobs: by submission (false) or shortest run time
  // first (true; the runtime estimate, else the time limit, as sjf; unknown last).
  bool fair_shortest_first = false;
  // Experiments of the simulator (sim timed; off by default, the live pool sets neither):
  // fair_service: groups go least served first by the source's service ratio (strictly:
  // the lowest group's jobs all come before the next group's; ties by dominant share)
  // instead of by dominant share. fair_sjf_bound K > 0: every job goes shortest first
  // (as sjf, whatever its group), except that a group whose weighted dominant share is
  // above K / (groups with jobs running or waiting) goes after every group within it;
  // the filling counts each job handed out as started. Both need fair_shortest_first's
  // order inside a group for K (implied) and use it for the service order when set.
  // fair_sjf_penalty B > 0 (with fair_sjf_bound only): the shortest-first key of a job is
  // its run time times 1 + B * max(0, x - 1), x = its group's weighted dominant share
  // (jobs handed out in the pass counted as started) over an equal share (1 / groups
  // with jobs running or waiting): a group over its share falls back gradually, its long
  // jobs first.
  std::shared_ptr<const GroupServiceSource> fair_service;
  double fair_sjf_bound = 0;
  double fair_sjf_penalty = 0;
  // priority and fair: whose jobs a priority reorders. false (the live pool, where users
  // choose their priorities with --priority, "among your own jobs"): only its user's own
  // (RankOwnJobsByPriority); true (the simulator, whose traces' priorities are the
  // site's, as PreemptionOptions::priority_within_user = false): every job.
  bool priority_across_users = false;
};

// An order handed out one index at a time, so that a pass that stops early (at its
// max_starts) does not order the jobs it never reaches. Borrows the QueueContext's spans
// and cluster: they must outlive it.
class QueueOrder {
 public:
  virtual ~QueueOrder() = default;
  // The next index of ctx.pending to try; nullopt once every index was returned.
  virtual std::optional<size_t> Next() = 0;
};

class QueuePolicy {
 public:
  virtual ~QueuePolicy() = default;
  virtual std::string_view name() const = 0;
  // Returns every index of ctx.pending exactly once, in the order to try them.
  virtual std::vector<size_t> Order(const QueueContext& ctx) const = 0;
  // The same order as Order(ctx), index by index. The default computes Order at once;
  // a policy whose order can be made as it is read (fair) overrides it.
  virtual std::unique_ptr<QueueOrder> Lazy(const QueueContext& ctx) const;
};

// Puts each user's jobs in `order` (indices of ctx.pending) highest priority first, in
// the positions that user's jobs hold there and in `order`'s order on ties: one user's
// priority never moves a job ahead of another user's job that `order` has earlier.
// With across_users, the whole order goes highest priority first (stably).
void RankOwnJobsByPriority(const QueueContext& ctx, std::span<size_t> order, bool across_users);

// The group a job belongs to under `group`.
const std::string& FairShareGroupOf(const QueuedJob& job, FairShareGroup group);

}  // namespace gpupool::sched
