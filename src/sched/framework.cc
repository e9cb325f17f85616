#include "sched/framework.h"

#include <fmt/format.h>

namespace gpupool::sched {

std::vector<int32_t> GpuMaskToList(GpuMask mask) {
  std::vector<int32_t> out;
  for (int32_t i = 0; mask != 0; ++i, mask >>= 1) {
    if (mask & 1) out.push_back(i);
  }
  return out;
}

bool FitFilter::Filter(const ClusterState& state, const Task& task, int32_t node,
                       std::string* reason) const {
  // Fast path first; the reason is only built for the rare caller that wants it.
  if (state.Fits(node, task)) return true;
  if (reason != nullptr) *reason = state.WhyNotFit(node, task);
  return false;
}

FrameworkPolicy::FrameworkPolicy(std::string name,
                                 std::vector<std::unique_ptr<FilterPlugin>> filters,
                                 std::unique_ptr<ScorePlugin> score)
    : name_(std::move(name)), filters_(std::move(filters)), score_(std::move(score)) {}

PlacementDecision FrameworkPolicy::Place(const ClusterState& state, const Task& task) {
  PlacementDecision d;
  feasible_.clear();
  for (int32_t node : state.scan_order()) {
    bool ok = true;
    for (const auto& f : filters_) {
      if (!f->Filter(state, task, node, nullptr)) {
        ok = false;
        break;
      }
    }
    if (ok) feasible_.push_back(node);
  }
  if (feasible_.empty()) {
    d.reason = state.num_nodes() == 0
                   ? "the cluster has no nodes"
                   : fmt::format("no node fits (cpu {}m, memory {}Mi, {} GPU(s) x {} thousandths)",
                                 task.cpu_milli, task.memory_mib, task.num_gpu, task.gpu_milli);
    return d;
  }
  score_->PreScore(state, task, feasible_);
  scores_.clear();
  for (int32_t node : feasible_) scores_.push_back(score_->Score(state, task, node));
  score_->NormalizeScores(scores_);
  size_t best = 0;
  for (size_t i = 1; i < scores_.size(); ++i) {
    if (scores_[i].score > scores_[best].score) best = i;  // strict: first in scan order wins
  }
  d.placed = true;
  d.score = scores_[best].score;
  d.placement.node = scores_[best].node;
  d.placement.gpus = GpuMaskToList(scores_[best].gpus);
  return d;
}

}  // namespace gpupool::sched
