// JobScheduler: turns the controller's jobs and nodes into the scheduling core's inputs
// (ClusterState, QueuedJob, RunningJob), runs one SchedulingPass, and turns the result
// back into job placements and pending reasons a user understands.
//
// Pure with respect to its inputs: no I/O, no clock (the time is passed in). Holds the
// policies, which cache, so one instance serves one thread (the scheduler loop).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/limits.h"
#include "gpu/gpu_info.h"
#include "jobs/job.h"
#include "sched/placement_policy.h"
#include "sched/queue/queue_policy.h"
#include "sched/queue/scheduling_pass.h"

namespace gpupool::controller {

struct SchedNode {
  std::string name;
  const gpu::NodeInfo* info = nullptr;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  bool draining = false;  // nothing new is placed there
};

// The pending reason of a held job: who held it and how to release it.
std::string HeldReason(const jobs::Job& job);

struct ScheduleResult {
  std::map<int64_t, std::vector<jobs::TaskPlacement>> starts;  // job id -> placements
  std::map<int64_t, std::string> pending_reasons;              // for jobs left pending
};

class JobScheduler {
 public:
  static Result<std::unique_ptr<JobScheduler>> Create(const std::string& placement_policy,
                                                      const std::string& queue_policy,
                                                      const std::string& start_rule);

  // `active` holds every non-terminal job; ASSIGNED/RUNNING ones occupy their GPUs.
  // Jobs in `blocked` (pending ones that wait for something else: their dependencies)
  // are not started and get the given pending reason.
  // Jobs that would take a user or project past `limits` wait with the reason.
  Result<ScheduleResult> Plan(const std::vector<const jobs::Job*>& active,
                              const std::vector<SchedNode>& nodes, int64_t now_s,
                              const std::map<int64_t, std::string>& blocked = {},
                              const Limits& limits = {});

  // Why `job` could never run on `nodes` even if they were idle; empty when it could.
  static std::string NeverFits(const jobs::Job& job, const std::vector<SchedNode>& nodes);

 private:
  JobScheduler() = default;
  std::string placement_policy_name_;
  std::unique_ptr<sched::QueuePolicy> queue_policy_;
  std::unique_ptr<sched::PlacementPolicy> placement_policy_;
  sched::PassOptions pass_options_;
};

// The short model name a GPU is scheduled by: "NVIDIA H100 80GB HBM3" -> "H100",
// "AMD Instinct MI250X" -> "MI250X".
std::string GpuModelKey(const std::string& gpu_name);

}  // namespace gpupool::controller
