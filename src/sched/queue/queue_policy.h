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

// What fair share divides between: users or projects (Philly: virtual clusters).
enum class FairShareGroup { kUser, kProject };

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

// The group a job belongs to under `group`.
const std::string& FairShareGroupOf(const QueuedJob& job, FairShareGroup group);

}  // namespace gpupool::sched
