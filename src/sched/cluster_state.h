// ClusterState: the scheduler's view of every node, as a plain value type.
//
// Per node: CPU and memory capacity and free amount, the node's GPU model (all GPUs of
// one node share a model, memory size and compute capability, as in every trace and
// cluster we know), and per GPU the free share in thousandths (1000 = idle). Allocate
// and Release apply a Placement and keep every derived field (totals, versions,
// per-node counts of placed GPU task kinds) consistent.
//
// Single-owner GPUs (NodeSpec::single_owner_gpus; the controller marks NVIDIA MPS GPUs,
// whose MPS server serves one Unix user at a time) hold the fractional tasks of one owner
// (Task::owner) at a time: a fractional task with owner U may use such a GPU only when
// the GPU is idle (1000 free) or its current owner is U. Allocate makes U the owner when
// such a task lands on an idle one; Release clears the owner when the GPU is idle again.
// Tasks without an owner (0) and whole-GPU tasks are not restricted (a whole-GPU task
// needs an idle GPU anyway). Without single-owner GPUs nothing of this costs anything.
//
// Whole-only GPUs (NodeSpec::whole_only_gpus; the controller makes each MIG instance of a
// MIG-enabled GPU one) are fixed pieces of a GPU with their own memory size
// (NodeSpec::device_memory_mib). Only a fractional task may use one, only when it is
// idle and its memory is at least the task's GPU memory need (GpuMemoryNeedMib: the
// task's gpu_memory_mib, else gpu_milli thousandths of the node's gpu_memory_mib, which
// is the parent GPU's), and then it holds the device whole: Allocate takes all 1000
// thousandths, Release gives them back. Of the idle ones that fit, a task may take only
// the smallest (lowest index on ties), so every policy, choosing between that one and
// the node's other GPUs as it likes, keeps the large instances for large needs.
// Whole-GPU tasks never use them (Blocked). An instance counts as one device (1000) in
// the totals (TotalCapacity, TotalFree); what a task on one is charged, and the GPU
// capacity charges are measured against, count it by its weight (ChargedGpuMilli,
// TotalGpuWeightMilli). Without whole-only GPUs nothing of this costs more than one test.
//
// Invariants (checked by Allocate/Release, which refuse rather than break them):
//   0 <= cpu_free_milli <= cpu_capacity_milli, 0 <= memory_free_mib <= capacity,
//   0 <= gpu_free_milli[i] <= 1000, gpu_free_total == sum(gpu_free_milli), and the
//   single-owner rule above.
// `version` of a node changes on every change of that node and is unique in the
// process, so policies may cache per-node results keyed by (node index, version).
// Thread-compatible: concurrent reads are safe, writes need external synchronisation. Copying is
// cheap enough for simulations.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "sched/change_journal.h"
#include "sched/resources.h"
#include "sched/task.h"

namespace gpupool::sched {

// Static description of a node, used to add it to a ClusterState.
struct NodeSpec {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpus = 0;
  std::string gpu_model;       // empty when num_gpus == 0
  int64_t gpu_memory_mib = 0;  // per GPU; 0 = unknown
  int32_t gpu_capability = 0;  // e.g. 80 for compute capability 8.0; 0 = unknown
  // The node's discovery could not read a GPU's memory size (the controller: its
  // memory_total_bytes 0, docs/node-schema.md): a share sized by memory
  // (Task::gpu_memory_mib) is never placed here, as it could not be checked. The
  // simulator's nodes, whose memory it does not model, leave it false.
  bool gpu_memory_unknown = false;
  // Bit i set: GPU i serves the fractional tasks of one owner at a time (see above).
  uint64_t single_owner_gpus = 0;
  // Bit i set: GPU i is whole-only, a MIG instance (see above).
  uint64_t whole_only_gpus = 0;
  // Per GPU, its memory in MiB; empty = every GPU has gpu_memory_mib. Needed for
  // whole-only GPUs (an instance's memory); others' entries are informational.
  std::vector<int64_t> device_memory_mib;
};

struct NodeState {
  std::string name;
  int64_t cpu_capacity_milli = 0;
  int64_t memory_capacity_mib = 0;
  int64_t cpu_free_milli = 0;
  int64_t memory_free_mib = 0;
  std::string gpu_model;
  int32_t model_id = -1;  // index into ClusterState::models(); -1 without GPUs
  int32_t gpu_capability = 0;
  int64_t gpu_memory_mib = 0;
  bool gpu_memory_unknown = false;      // as NodeSpec's
  std::vector<int32_t> gpu_free_milli;  // per GPU, 0..1000
  int64_t gpu_free_total = 0;           // sum of gpu_free_milli
  uint64_t version = 0;                 // new, process-unique value on every change
  // Placed GPU tasks by kind: key 0 = fractional, key k > 0 = k whole GPUs; value = count.
  // Used by GpuClustering ("which request sizes run here").
  std::vector<std::pair<int32_t, int32_t>> gpu_task_kinds;
  // As NodeSpec's; the GPUs' owners are the ClusterState's (OwnerOf), which keeps this
  // struct as small as it was for the placement loops.
  uint64_t single_owner_gpus = 0;
  // As NodeSpec's (device_memory_mib is empty or has one entry per GPU).
  uint64_t whole_only_gpus = 0;
  std::vector<int64_t> device_memory_mib;

  int32_t num_gpus() const { return static_cast<int32_t>(gpu_free_milli.size()); }
  int64_t gpu_capacity_milli() const { return int64_t{num_gpus()} * 1000; }
  int32_t FullyFreeGpus() const;
  Resources Free() const { return {cpu_free_milli, memory_free_mib, gpu_free_total}; }
  Resources Capacity() const {
    return {cpu_capacity_milli, memory_capacity_mib, gpu_capacity_milli()};
  }
};

// Where a task goes: a node index and the GPU indices on that node it uses (num_gpu of
// them, distinct; empty for CPU-only tasks).
struct Placement {
  int32_t node = -1;
  std::vector<int32_t> gpus;
  friend bool operator==(const Placement&, const Placement&) = default;
};

// Kind key of a task for NodeState::gpu_task_kinds (see there); -1 for CPU-only tasks.
int32_t GpuTaskKind(const Task& task);

// GPU g of node n in thousandths of a physical GPU: 1000, or for a whole-only GPU (a MIG
// instance) its memory's part of the parent GPU's (1000 when the parent's is unknown).
// The one measure of an instance's size: the FGD scores, the simulator's capacity and
// the charge below all weigh an instance by it.
int64_t InstanceWeightMilli(const NodeState& n, int32_t g);

// The charge rule: the thousandths of a GPU a task asking `ask_milli` per GPU is charged
// for holding GPU g of node n (fair share, preemption's fair shares, usage, GPU-hours,
// /metrics): its ask, or on a whole-only GPU (a MIG instance, which it holds whole
// whatever it asked) the instance's weight (InstanceWeightMilli) when that is more. So a
// 1 MiB ask granted a 1g.10gb instance of an A100 80GB is charged 0.118 GPU, not 0.001;
// a GPU outside MIG mode charges the ask, as before.
int32_t ChargedGpuMilli(const NodeState& n, int32_t g, int32_t ask_milli);

class ClusterState {
 public:
  ClusterState() = default;

  // Adds an idle node. Fails on an empty or duplicate name, negative amounts or a GPU
  // node without a model.
  Status AddNode(const NodeSpec& spec);

  int32_t num_nodes() const { return static_cast<int32_t>(nodes_.size()); }
  const NodeState& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  const std::vector<NodeState>& nodes() const { return nodes_; }
  int32_t FindNode(std::string_view name) const;  // -1 when absent

  // GPU model names in first-seen order; NodeState::model_id indexes this.
  const std::vector<std::string>& models() const { return models_; }
  int32_t ModelId(std::string_view model) const;  // -1 when no node has it

  // The order in which nodes are considered; among equally scored nodes the first in
  // this order wins. Defaults to index order. `order` must be a permutation.
  Status SetScanOrder(std::vector<int32_t> order);
  const std::vector<int32_t>& scan_order() const { return scan_order_; }

  // Static fit: could `task` run on node `i` if the node were idle? (model,
  // capability, capacities, GPU count). Used to find tasks that can never be placed.
  bool CouldEverHost(int32_t i, const Task& task) const;
  // How many GPUs of node i `task` could ever use: all, less the whole-only ones that
  // are not for it (a whole-GPU task: none of them; a share: those too small).
  int32_t UsableGpus(int32_t i, const Task& task) const;
  // Fit now: CPU, memory, model, capability, the task's --nodelist / --exclude (every
  // task) and num_gpu GPUs with free >= gpu_milli.
  // It respects the single-owner rule (HeldByOthers).
  bool Fits(int32_t i, const Task& task) const;
  // The static part of Fits: the node's GPU model, capability and name suit the task,
  // and a share sized by memory knows the node's GPU memory (for CPU-only tasks: only
  // that --nodelist / --exclude let it use the node).
  bool Allows(int32_t i, const Task& task) const;
  // Why `task` does not fit node `i` now, in a few words that read after a count ("no
  // GPUs", "other GPU model", "insufficient GPUs", "single-owner GPUs held by another
  // owner", "insufficient CPU"); GPU reasons come first. Empty when it fits.
  std::string WhyNotFit(int32_t i, const Task& task) const;

  // Applies / undoes a placement. Both validate the placement against the task and the
  // node's free amounts (and Allocate against the single-owner rule and, on a whole-only
  // GPU, that it is idle and a share's memory need fits) and change nothing when it is
  // invalid. Allocate lets any task take an idle whole-only GPU whole (holds of drained or
  // out-of-service GPUs do); keeping whole-GPU tasks off them is Fits' and Blocked's job.
  Status Allocate(const Task& task, const Placement& placement);
  Status Release(const Task& task, const Placement& placement);

  // Whether any node has a single-owner GPU (policies key their caches by owner only then).
  bool has_single_owner_gpus() const { return single_owner_nodes_ > 0; }
  // The current owner of GPU g of node i; 0 when none or when the GPU is not single-owner.
  int64_t OwnerOf(int32_t i, int32_t g) const;
  // The GPUs of node i (bit g = GPU g) that `task` may not use because another owner
  // holds them: for a fractional task with an owner, the node's single-owner GPUs in use
  // by someone else. 0 otherwise; the task is looked at first, so a task without an
  // owner (all the simulator's) costs one test.
  uint64_t HeldByOthers(int32_t i, const Task& task) const {
    if (task.owner == 0 || !task.IsFractional() || node(i).single_owner_gpus == 0) return 0;
    return HeldByOthersThan(i, task.owner);
  }

  // The nodes changed by Allocate and Release, in order (change_journal.h), for
  // incremental indexes; AddNode and SetScanOrder start a new history, and so does a copy.
  const ChangeJournal& journal() const { return journal_; }

  // The GPUs of node i that `task` may not use: HeldByOthers, and on a node with
  // whole-only GPUs, for a whole-GPU task all of them, for a fractional task all but the
  // smallest idle one whose memory fits (see above). Policies skip these GPUs.
  uint64_t Blocked(int32_t i, const Task& task) const {
    if (node(i).whole_only_gpus == 0) [[likely]]
      return HeldByOthers(i, task);
    return HeldByOthers(i, task) | WholeOnlyBlocked(i, task);
  }
  // A fractional task's GPU memory need on node i, in MiB (see above).
  int64_t GpuMemoryNeedMib(int32_t i, const Task& task) const;

  // The GPU thousandths a task placed at `p` is charged (ChargedGpuMilli summed over
  // p.gpus; 0 for a CPU-only task; its ask when `p` is not one of its placements here).
  int64_t ChargedGpuMilli(const Task& task, const Placement& p) const;
  // The GPU capacity charges are measured against (fair share divides by it): every GPU's
  // weight, InstanceWeightMilli (a GPU cut into instances weighs what they do together,
  // not one GPU each). Equal to TotalCapacity().gpu_milli without whole-only GPUs.
  int64_t TotalGpuWeightMilli() const { return gpu_weight_milli_; }

  Resources TotalCapacity() const { return capacity_; }
  Resources TotalFree() const { return free_; }
  int64_t TotalGpuMilliUsed() const { return capacity_.gpu_milli - free_.gpu_milli; }

 private:
  // kNodeList: not in allowed_nodes (a GPU task's environment); kNotChosen: left out by
  // the task's own --nodelist / --exclude (every task).
  enum class Refusal { kNone, kModel, kCapability, kNodeList, kGpuMemoryUnknown, kNotChosen };
  Status CheckPlacementShape(const Task& task, const Placement& p) const;
  bool FitsRestricted(int32_t i, const Task& task) const;
  uint64_t HeldByOthersThan(int32_t i, int64_t owner) const;
  uint64_t WholeOnlyBlocked(int32_t i, const Task& task) const;
  // What a task takes of GPU g of node n: all of a whole-only GPU, else its gpu_milli.
  static int32_t Taken(const NodeState& n, const Task& task, int32_t g) {
    return (n.whole_only_gpus >> g & 1) != 0 ? 1000 : task.gpu_milli;
  }
  Status CheckWholeOnly(const NodeState& n, int32_t i, const Task& task, const Placement& p) const;
  Refusal StaticRefusal(const NodeState& n, const Task& task) const;
  bool ModelAllowed(const NodeState& n, const Task& task) const;

  // Transparent hashing: FindNode looks names up by string_view without a copy.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<NodeState> nodes_;
  // Node name -> index: the controller finds every running task's node by name on each
  // pass (a linear search cost a quarter of a pass at 5,000 nodes, docs/benchmarks.md).
  std::unordered_map<std::string, int32_t, NameHash, std::equal_to<>> index_by_name_;
  std::vector<std::string> models_;
  std::vector<int32_t> scan_order_;
  Resources capacity_;
  Resources free_;
  int64_t gpu_weight_milli_ = 0;    // TotalGpuWeightMilli
  int32_t single_owner_nodes_ = 0;  // nodes with single_owner_gpus != 0
  // Per node, per GPU: the current owner (0 = none) of a single-owner GPU. Empty until a
  // node with single-owner GPUs is added; then one entry per node (empty without them).
  std::vector<std::vector<int64_t>> gpu_owner_;
  ChangeJournal journal_;
};

}  // namespace gpupool::sched
