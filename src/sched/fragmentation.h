// FGD's GPU fragmentation measure (Weng et al., ATC'23, "Beware of Fragmentation").
//
// A TargetWorkload is the task mix the cluster expects: the most popular distinct task
// shapes (cpu_milli, num_gpu, gpu_milli, allowed models) of a trace, kept until they
// cover `coverage` (95%) of the tasks, each with its count as weight.
//
// For a node n and shape m, with F = the node's total free GPU milli:
//   - m needs no GPU, or n's model is not allowed for m, or m does not fit n (too little
//     free CPU, or fewer than num_gpu GPUs with free share >= gpu_milli): frag_n(m) = F;
//   - otherwise frag_n(m) = sum of the free shares of GPUs whose free share < gpu_milli.
// Node fragmentation F_n = sum_m p_m * frag_n(m) with p_m = weight_m / total weight
// (memory is not considered, as in the paper's artifact). Cluster fragmentation is
// sum_n F_n; the fragmentation ratio is that over the total free GPU milli.
//
// We keep F_n scaled by the total weight as an exact integer (Scaled*), so sums over
// nodes and differences between states are exact and order-independent.
// Thread-compatible; a FragmentationMeasure is immutable after construction.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/task.h"

namespace gpupool::sched {

struct TargetShape {
  int64_t cpu_milli = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;
  std::vector<std::string> gpu_models;  // empty = any
  int64_t weight = 0;                   // number of tasks of this shape
  int64_t memory_mib = 0;               // 0 = memory not counted (FGD's shapes)
};

class TargetWorkload {
 public:
  TargetWorkload() = default;
  explicit TargetWorkload(std::vector<TargetShape> shapes);

  // Distinct shapes of `tasks` by decreasing count (ties: smaller num_gpu, gpu_milli,
  // cpu_milli, models first, for determinism), cut once `coverage` of all tasks is
  // covered.
  // memory_shapes() are cut the same way from shapes that also tell tasks apart by
  // memory and carry it (for our memory-aware measure; FGD's shapes() ignore memory).
  static TargetWorkload FromTasks(const std::vector<Task>& tasks, double coverage = 0.95);

  const std::vector<TargetShape>& shapes() const { return shapes_; }
  // Equal to shapes() unless built by FromTasks.
  const std::vector<TargetShape>& memory_shapes() const { return memory_shapes_; }
  int64_t total_weight() const { return total_weight_; }

 private:
  std::vector<TargetShape> shapes_;
  std::vector<TargetShape> memory_shapes_;
  int64_t total_weight_ = 0;
};

// The measure bound to a cluster's GPU model table.
class FragmentationMeasure {
 public:
  FragmentationMeasure(const TargetWorkload& workload, const std::vector<std::string>& models);

  // F_n * total_weight for a node in the given state. `gpu_free` has the node's GPUs.
  // Memory counts only for shapes with memory_mib > 0 (never for FGD's shapes).
  int64_t ScaledNode(int32_t model_id, int64_t cpu_free_milli, const int32_t* gpu_free,
                     int32_t num_gpus,
                     int64_t memory_free_mib = std::numeric_limits<int64_t>::max()) const;
  int64_t ScaledNode(const NodeState& n) const {
    return ScaledNode(n.model_id, n.cpu_free_milli, n.gpu_free_milli.data(), n.num_gpus(),
                      n.memory_free_mib);
  }
  // For a node with whole-only GPUs (MIG instances, cluster_state.h): F_n * total_weight
  // in thousandths of physical GPUs (an instance weighs InstanceWeightMilli). A free
  // instance is a fixed piece: it counts as usable only for a share (gpu_milli < 1000)
  // whose memory need (gpu_milli thousandths of the node's gpu_memory_mib, the parent
  // GPU's) fits the instance's memory, and only while idle; for every other shape
  // (whole-GPU shapes above all) its free part is fragmented. Equal to ScaledNode on a
  // node without whole-only GPUs. `gpu_free` has the node's GPUs.
  int64_t ScaledMigNode(const NodeState& n, const int32_t* gpu_free, int64_t cpu_free_milli,
                        int64_t memory_free_mib) const;
  int64_t ScaledMigNode(const NodeState& n) const {
    return ScaledMigNode(n, n.gpu_free_milli.data(), n.cpu_free_milli, n.memory_free_mib);
  }
  // F_n in GPU milli.
  double NodeMilli(const NodeState& n) const { return ToMilli(ScaledNode(n)); }
  double ToMilli(int64_t scaled) const {
    return total_weight_ == 0 ? 0.0
                              : static_cast<double>(scaled) / static_cast<double>(total_weight_);
  }
  int64_t total_weight() const { return total_weight_; }

  // Sum of F_n over all nodes, scaled; and the ratio to the total free GPU milli.
  int64_t ScaledCluster(const ClusterState& state) const;
  double ClusterMilli(const ClusterState& state) const { return ToMilli(ScaledCluster(state)); }
  double ClusterRatio(const ClusterState& state) const;

 private:
  struct Shape {
    int64_t cpu_milli;
    int32_t num_gpu;
    int32_t gpu_milli;
    int64_t weight;
    int64_t memory_mib;
    std::vector<char> model_allowed;  // by model id
  };
  std::vector<Shape> shapes_;
  int64_t total_weight_ = 0;
};

}  // namespace gpupool::sched
