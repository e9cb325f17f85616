// GroupShares: how close each group came to its fair share of the GPUs over a
// time-driven run, in the sense of Jain's original index (Jain, Chiu and Hawe 1984:
// x_i = what i got / what a fair allocation gives i).
//
// At every moment a group's demand is the GPUs of its jobs in the system (waiting, not
// held, or running) and its allocation the GPUs of those running. Its entitlement is its
// max-min fair share of the capacity by demand (water-filling, equal weights: a group
// asking for less than an equal split gets what it asks, the rest is split equally among
// the others), so the entitlements add up to min(capacity, total demand). Two figures:
//   - per group, its attainment over the run: GPU-seconds received / GPU-seconds entitled,
//     and Jain's index over the groups' attainments (whole-run);
//   - Jain's index over the groups with demand at each moment (x = allocation /
//     entitlement), averaged over the time some group had demand (the stricter: a group
//     starved for a week and served twice its share the next scores badly).
// Unlike the service ratio (group_service.h), a group whose own jobs exceed its share
// (its queue backs up behind itself) is not counted as unfairly treated as long as it
// gets its share. Fed by the experiment; pure bookkeeping, no clock, O(groups with
// demand) per instant that passes; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "sched/queue/queue_policy.h"

namespace gpupool::sim {

// Max-min fair shares of `capacity` for `demands` (water-filling, equal weights), in the
// same order. Non-negative inputs.
std::vector<double> MaxMinShares(const std::vector<double>& demands, double capacity);

// As a sched::GroupServiceSource (the least-served-first experiments, `--fair-order
// attainment`, `--preempt-by attainment`), a group's "service" is its attainment so far:
// GPU-seconds received / entitled up to the last AdvanceTo; 1 before it was entitled to
// anything. Lower = further below its fair share.
class GroupShares final : public sched::GroupServiceSource {
 public:
  explicit GroupShares(int64_t capacity_gpu_milli) : capacity_(capacity_gpu_milli) {}

  // Integrates the state held since the last call over [last, now_s). Call it before the
  // changes of instant now_s.
  void AdvanceTo(int64_t now_s);
  // A group's demand or allocation changes by the given GPU milli (+ or -).
  void Change(const std::string& group, int64_t allocation_milli, int64_t demand_milli);

  struct Group {
    double received_gpu_s = 0;
    double entitled_gpu_s = 0;
  };
  const std::map<std::string, Group, std::less<>>& groups() const { return groups_; }
  // Jain's index at each moment, averaged over the time with demand; 1 with none.
  double MeanInstantJain() const;
  double busy_s() const { return busy_s_; }
  double ServiceRatio(std::string_view group, int64_t now_s) const override;

 private:
  struct Now {
    int64_t allocation = 0;
    int64_t demand = 0;
  };
  int64_t capacity_;
  int64_t last_s_ = 0;
  bool started_ = false;
  std::map<std::string, Now, std::less<>> now_;  // groups with demand
  std::map<std::string, Group, std::less<>> groups_;
  double jain_area_ = 0;
  double busy_s_ = 0;
};

}  // namespace gpupool::sim
