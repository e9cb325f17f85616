// Task: one schedulable request (a Kubernetes pod, one task of a gang job).
//
// A task asks for CPU, memory and `num_gpu` GPUs of which it uses `gpu_milli`
// thousandths each. Invariants (checked by ValidateTask, which readers and the API call
// before a task reaches a policy):
//   - cpu_milli, memory_mib >= 0; num_gpu >= 0; 0 <= gpu_milli <= 1000;
//   - num_gpu == 0 exactly when gpu_milli == 0 (a CPU-only task);
//   - gpu_milli < 1000 only when num_gpu == 1 (a fractional task uses one GPU).
// `gpu_models` empty means any model. `job_id` groups the tasks of a gang; empty for a
// single task. `owner` says whose a fractional task's share is (the controller: the
// job's uid + 1); on a single-owner GPU (NodeSpec::single_owner_gpus) a fractional task
// with an owner joins only a GPU that is idle or whose current owner it shares. Value
// type, thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/resources.h"

namespace gpupool::sched {

struct Task {
  std::string name;
  std::string job_id;  // gang id; empty when the task stands alone
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;                // per GPU, 1..1000 when num_gpu > 0
  std::vector<std::string> gpu_models;  // allowed GPU models; empty = any
  int32_t min_capability = 0;           // e.g. 80 for compute capability 8.0; 0 = any
  // Nodes whose software stack can run the task's environment, sorted; empty = any.
  // Like gpu_models it constrains GPU tasks only (CPU-only tasks need no GPU driver).
  std::vector<std::string> allowed_nodes;
  // The job's own node choice (--nodelist, --exclude; sorted): unlike allowed_nodes these
  // bind every task, CPU-only ones too. `nodelist` empty = any node; a node in `exclude`
  // is never used.
  std::vector<std::string> nodelist;
  std::vector<std::string> exclude;
  // Whose share this is; 0 = no one. Matters only for fractional tasks on single-owner
  // GPUs (cluster_state.h); >= 0.
  int64_t owner = 0;
  // The job asked for --enforce memory: a fractional task may use only nodes whose GPUs
  // enforce memory limits (EnforceMemoryFilter narrows allowed_nodes; this says why).
  bool enforce_memory = false;
  // GPU memory a share needs on a MIG instance (cluster_state.h), in MiB: the job's
  // --gpu-mem; 0 = gpu_milli thousandths of the node's GPU memory. >= 0.
  int64_t gpu_memory_mib = 0;

  int64_t TotalGpuMilli() const { return int64_t{num_gpu} * gpu_milli; }
  bool IsFractional() const { return num_gpu == 1 && gpu_milli < 1000; }
  bool NeedsGpu() const { return num_gpu > 0; }
  bool PicksNodes() const { return !nodelist.empty() || !exclude.empty(); }
  // Whether --nodelist and --exclude let this task use the node named `node`.
  bool NodeChosen(const std::string& node) const;
  Resources Total() const { return {cpu_milli, memory_mib, TotalGpuMilli()}; }
};

// Checks the invariants above; the message names the task and the bad field.
Status ValidateTask(const Task& task);

// The part of a task that placement depends on. Tasks with equal shapes are placed the
// same way in the same cluster state, which policies use to cache decisions.
struct TaskShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;
  std::vector<std::string> gpu_models;
  int32_t min_capability = 0;
  std::vector<std::string> allowed_nodes;
  std::vector<std::string> nodelist;
  std::vector<std::string> exclude;
  int64_t owner = 0;  // the task's owner when it is fractional, else 0 (it matters only then)
  int64_t gpu_memory_mib = 0;  // when fractional, else 0 (it matters only then)
  friend bool operator==(const TaskShape&, const TaskShape&) = default;
};

TaskShape ShapeOf(const Task& task);
size_t HashShape(const TaskShape& shape);

}  // namespace gpupool::sched
