#include "sched/placement/score_plugins.h"

namespace gpupool::sched {

// A GPU another owner holds is in use, so never idle: FirstIdleGpus needs no owner test.
// Whole-only GPUs (MIG instances) are never a whole-GPU task's.
GpuMask FirstIdleGpus(const NodeState& node, int32_t n) {
  GpuMask mask = 0;
  int32_t got = 0;
  for (int32_t i = 0; i < node.num_gpus() && got < n; ++i) {
    if (node.gpu_free_milli[static_cast<size_t>(i)] == 1000 &&
        (node.whole_only_gpus >> i & 1) == 0) {
      mask |= GpuMask{1} << i;
      ++got;
    }
  }
  return got == n ? mask : 0;
}

namespace {

// BestFitGpus' fractional case; `held`: GPUs it may not take.
template <bool kOwned>
GpuMask TightestGpu(const NodeState& node, int32_t milli, uint64_t held) {
  int32_t best = -1;
  for (int32_t i = 0; i < node.num_gpus(); ++i) {
    const int32_t f = node.gpu_free_milli[static_cast<size_t>(i)];
    if (f >= milli && (!kOwned || (held >> i & 1) == 0) &&
        (best < 0 || f < node.gpu_free_milli[static_cast<size_t>(best)])) {
      best = i;
    }
  }
  return best < 0 ? 0 : GpuMask{1} << best;
}

}  // namespace

GpuMask BestFitGpus(const ClusterState& state, int32_t index, const Task& task) {
  const NodeState& node = state.node(index);
  if (task.num_gpu == 0) return 0;
  if (!task.IsFractional()) return FirstIdleGpus(node, task.num_gpu);
  // A task with an owner (never the simulator's) on a node with single-owner GPUs, or a
  // node with MIG instances.
  if ((task.owner != 0 && node.single_owner_gpus != 0) || node.whole_only_gpus != 0) [[unlikely]] {
    const uint64_t held = state.Blocked(index, task);
    // An instance the share may take (the smallest idle one that fits) before any GPU
    // outside MIG mode: it is a piece already cut, which leaves those GPUs whole.
    const GpuMask instance = TightestGpu<true>(node, task.gpu_milli, held | ~node.whole_only_gpus);
    return instance != 0 ? instance : TightestGpu<true>(node, task.gpu_milli, held);
  }
  return TightestGpu<false>(node, task.gpu_milli, 0);
}

bool IsInstance(const NodeState& node, GpuMask gpus) {
  return gpus != 0 && (gpus & (gpus - 1)) == 0 && (node.whole_only_gpus & gpus) != 0;
}

GpuRoom GpuRoomOf(const NodeState& node, const Task& task, GpuMask gpus) {
  if (node.whole_only_gpus == 0) [[likely]] {
    return {node.gpu_free_total, task.TotalGpuMilli()};
  }
  GpuRoom room;
  for (int32_t i = 0; i < node.num_gpus(); ++i) {
    if ((node.whole_only_gpus >> i & 1) == 0) {
      room.free += node.gpu_free_milli[static_cast<size_t>(i)];
    }
  }
  room.take = IsInstance(node, gpus) ? 0 : task.TotalGpuMilli();
  return room;
}

void MinMaxNormalize(std::vector<NodeScore>& scores) {
  if (scores.empty()) return;
  int64_t lo = scores[0].score, hi = scores[0].score;
  for (const auto& s : scores) {
    lo = std::min(lo, s.score);
    hi = std::max(hi, s.score);
  }
  for (auto& s : scores) {
    s.score = hi == lo
                  ? kMinNodeScore
                  : (s.score - lo) * (kMaxNodeScore - kMinNodeScore) / (hi - lo) + kMinNodeScore;
  }
}

}  // namespace gpupool::sched
