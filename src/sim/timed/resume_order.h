// Where a job requeued by preemption re-enters the queue's order (`gpupool sim timed
// --preempt-resume`, an experiment; docs/sim.md, "Preemption"). By default a victim goes
// back to its place by the queue policy's own keys (its submission time, its whole
// shortest-first key). With kFirst it goes ahead of every waiting job that was never
// preempted, the earliest preempted first: ResumeFront lists those jobs, and the queue
// policies of ResumeFirstPolicies() hand them out before the built-in policy's order of
// the rest (which is unchanged; they still go through placement and the start rule, so
// one may hold the EASY reservation). kFirstUnderShare does the same only for a victim
// whose group holds at most an equal share of the GPUs (capacity / groups with jobs
// running or waiting); the others keep their place. kRemaining leaves the order alone and
// shortens the victim's shortest-first key instead (the simulator does it:
// RemainingSjfKey).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/status.h"
#include "sched/queue/queue_policy_registry.h"

namespace gpupool::sim {

enum class PreemptResume { kQueue, kFirst, kFirstUnderShare, kRemaining };

// "queue", "first", "first-under-share" or "remaining"; InvalidArgument naming the values.
Result<PreemptResume> ParsePreemptResume(std::string_view name);
std::string_view PreemptResumeName(PreemptResume resume);

// The waiting jobs requeued by preemption, by job id, each with the sequence number of its
// latest requeue (earlier = lower). The simulator adds a victim when it requeues it and
// removes it when it starts. Not thread-safe; a policy reading it must not run while it
// changes.
class ResumeFront {
 public:
  void Add(const std::string& job_id);
  void Remove(const std::string& job_id);
  bool empty() const { return seq_.empty(); }
  // The job's sequence number, or -1 when it is not in the front.
  int64_t SeqOf(const std::string& job_id) const;

 private:
  std::unordered_map<std::string, int64_t> seq_;
  int64_t next_ = 0;
};

// A registry with every built-in queue policy (same names) wrapped so that the jobs in
// `front` go first, in their sequence order; with `under_share_only` only those whose
// group (config.fair_group) holds at most an equal share of the GPUs. `front` must outlive
// the policies made.
std::unique_ptr<sched::QueuePolicyRegistry> ResumeFirstPolicies(
    const std::shared_ptr<const ResumeFront>& front, bool under_share_only);

// A victim's shortest-first key under kRemaining: `key_s` (its estimate, else its time
// limit, as sched::QueuedJob::SjfRuntime) less the work `kept_s` it keeps from its
// checkpoints, at least 1 s; 0 (no key) stays 0.
int64_t RemainingSjfKey(int64_t key_s, int64_t kept_s);

}  // namespace gpupool::sim
