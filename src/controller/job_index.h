// JobIndex: lookups over the controller's active jobs (issue 31), so that an agent's
// poll, a registration, a node's loss, a scheduling pass's dependency step, a user's
// job list and the time-limit and absent-client sweeps each touch the jobs they are
// about, not all of the (100,000) active ones.
//
// The controller keeps it exact by calling Update for every change of its active jobs,
// from the one place every change passes through (Controller::Touched: Install, Load,
// submissions). It holds no lock of its own: the controller's mutex guards it. Verify
// recomputes every index from the active jobs by brute force and names the first
// difference (tests, and Controller::VerifyIndexes).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::controller {

class JobIndex {
 public:
  // Job `id` is now `*job`; nullptr when it left the active jobs.
  void Update(int64_t id, const jobs::Job* job);

  // The jobs holding resources (ASSIGNED or RUNNING), by id.
  const std::set<int64_t>& Occupying() const { return occupying_; }
  // Those of them with a time limit (what the time-limit sweep reads), and those that
  // are `gpupool run` jobs (interactive "run": what the absent-client sweep reads).
  const std::set<int64_t>& OccupyingWithTimeLimit() const { return timed_; }
  const std::set<int64_t>& OccupyingRuns() const { return runs_; }
  // Those of them with a task placed on `node`.
  const std::set<int64_t>& OnNode(const std::string& node) const;
  // Every active job of `user`.
  const std::set<int64_t>& OfUser(const std::string& user) const;
  // The PENDING jobs with dependencies (--after-ok ...): what dependency resolution reads.
  const std::set<int64_t>& PendingWithDependencies() const { return pending_deps_; }
  // The PENDING jobs with fenced nodes (Job::fences: a lost node's lease to wait for, or
  // a node whose loss would add one): what the node sweep, a registration and the
  // earlier-attempt gate read.
  const std::set<int64_t>& PendingFenced() const { return pending_fenced_; }
  // The active elements of array `array_id` (its first element's id).
  const std::set<int64_t>& ArrayElements(int64_t array_id) const;

  // Internal, naming the index and the job, unless every index is what a walk of
  // `active` (the controller's active jobs by id) makes of it.
  Status Verify(const std::map<int64_t, jobs::Job>& active) const;

 private:
  // What each job was indexed under, so that its next Update takes it out of there.
  struct Entry {
    std::string user;
    int64_t array_id = 0;
    std::vector<std::string> nodes;  // when occupying: its placement's nodes, once each
    bool pending_deps = false;
    bool pending_fenced = false;
  };
  void Remove(int64_t id, const Entry& e);

  std::unordered_map<int64_t, Entry> entries_;
  std::set<int64_t> occupying_;
  std::set<int64_t> timed_;
  std::set<int64_t> runs_;
  std::set<int64_t> pending_deps_;
  std::set<int64_t> pending_fenced_;
  std::map<std::string, std::set<int64_t>, std::less<>> on_node_;
  std::map<std::string, std::set<int64_t>, std::less<>> of_user_;
  std::map<int64_t, std::set<int64_t>> arrays_;
};

}  // namespace gpupool::controller
