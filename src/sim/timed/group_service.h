// GroupService: each group's service ratio so far, kept up to date by the time-driven
// experiment as jobs arrive, start, lose work and end, for the fair order's
// least-served-first experiment (sched::QueuePolicyConfig::fair_service) and its
// preemption rule (TimedOptions::service_preemption).
//
// A group's service ratio at time t, over its jobs queued by t (those that never fit are
// not counted):
//   sum of run time attained and kept / sum of time in the system,
// where a job's time in the system is min(end, t) - submit and its run time kept is that
// minus every wait (in the queue, over all attempts) and minus the work preemptions and
// GPU failures threw away. Computable online: it needs no job's run time. At the end of
// a run it equals the service ratio that Jain's index is taken over (timed_metrics.h);
// 1 for a group without time in the system. O(1) per event; not thread-safe (the
// experiment is single-threaded).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "sched/queue/queue_policy.h"

namespace gpupool::sim {

class GroupService final : public sched::GroupServiceSource {
 public:
  // A job of `group` submitted at submit_s joins the queue at now_s.
  void Join(const std::string& group, int64_t submit_s, int64_t now_s);
  // One that waited since queued_at_s starts at now_s.
  void Start(const std::string& group, int64_t queued_at_s, int64_t now_s);
  // A running one stops, losing lost_s of run time, and (requeue) joins the queue again.
  void Stop(const std::string& group, int64_t lost_s, bool requeue, int64_t now_s);
  // A running one ends at now_s, having waited waited_s and lost lost_s over its life.
  void End(const std::string& group, int64_t submit_s, int64_t waited_s, int64_t lost_s,
           int64_t now_s);

  double ServiceRatio(std::string_view group, int64_t now_s) const override;

 private:
  struct Acc {
    int64_t ended_run = 0;      // jobs ended: run time kept
    int64_t ended_system = 0;   // jobs ended: time in the system
    int64_t in = 0;             // jobs in the system (waiting or running)
    int64_t in_submit = 0;      // their submission times, summed
    int64_t in_waited = 0;      // their finished waits, summed
    int64_t in_lost = 0;        // their lost work, summed
    int64_t waiting = 0;        // jobs waiting now
    int64_t waiting_since = 0;  // when they joined the queue, summed
  };
  std::map<std::string, Acc, std::less<>> groups_;
};

}  // namespace gpupool::sim
