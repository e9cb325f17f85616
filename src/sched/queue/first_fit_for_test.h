// A test double behind the real PlacementPolicy interface: the first node in scan order
// that fits, and on it the fitting GPUs with the least free share (whole-GPU tasks get
// idle GPUs in index order) that it may use (ClusterState::Blocked: no other owner's, the MIG
// instance the rule allows). Simple enough that a test can predict every
// placement.
#pragma once

#include <algorithm>
#include <numeric>

#include "sched/placement_policy.h"

namespace gpupool::sched::testing {

class FirstFitForTest final : public PlacementPolicy {
 public:
  std::string_view name() const override { return "first-fit-for-test"; }
  PlacementDecision Place(const ClusterState& state, const Task& task) override {
    ++calls;
    PlacementDecision d;
    for (int32_t n : state.scan_order()) {
      if (!state.Fits(n, task)) continue;
      const NodeState& node = state.node(n);
      std::vector<int32_t> gpus(node.gpu_free_milli.size());
      std::iota(gpus.begin(), gpus.end(), 0);
      std::stable_sort(gpus.begin(), gpus.end(), [&](int32_t a, int32_t b) {
        return node.gpu_free_milli[a] < node.gpu_free_milli[b];
      });
      const uint64_t held = state.Blocked(n, task);
      for (int32_t g : gpus) {
        if (static_cast<int32_t>(d.placement.gpus.size()) == task.num_gpu) break;
        if (node.gpu_free_milli[g] >= task.gpu_milli && (held >> g & 1) == 0) {
          d.placement.gpus.push_back(g);
        }
      }
      std::sort(d.placement.gpus.begin(), d.placement.gpus.end());
      d.placement.node = n;
      d.placed = true;
      return d;
    }
    d.reason = "no node fits";
    return d;
  }
  int calls = 0;
};

}  // namespace gpupool::sched::testing
