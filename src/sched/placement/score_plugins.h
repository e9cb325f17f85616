// The score plugins behind the built-in placement policies, and GPU-choice helpers.
//
// Each policy of fgd-experiment.md is one score plugin (see framework.h) that also
// chooses the GPUs inside the node; BuiltinPlacementPolicies() (policy_registry.h)
// pairs each with the FitFilter. The constants follow the paper's artifact: scores are
// integers in 0..100, "max node" is 128 CPU cores and 8 GPUs.
#pragma once

#include <memory>

#include "sched/cluster_state.h"
#include "sched/framework.h"
#include "sched/placement_policy.h"

namespace gpupool::sched {

// Normalisation constants of the artifact (largest node of the openb cluster).
inline constexpr double kMaxSpecCpuMilli = 128000.0;
inline constexpr double kMaxSpecGpuMilli = 8000.0;

// The first `n` fully idle GPUs by index that are not whole-only (whole-GPU tasks); 0
// when there are too few.
GpuMask FirstIdleGpus(const NodeState& node, int32_t n);
// On node `node` of `state`: for a fractional task the fitting GPU with the least free
// share (first index on ties), never one it may not use (ClusterState::Blocked), and a
// MIG instance it may use before any GPU outside MIG mode; for a whole-GPU task
// FirstIdleGpus; CPU-only: 0.
GpuMask BestFitGpus(const ClusterState& state, int32_t node, const Task& task);

// The GPU room the simple scores (bestfit, dotprod, gpuclustering) weigh on a node, in
// thousandths of a GPU: `free`, the node's free GPU, and `take`, what placing the task on
// `gpus` uses of it. On a node without MIG instances (whole_only_gpus) these are
// gpu_free_total and the task's ask. On a node with instances only its GPUs outside MIG
// mode count as free: an instance is a piece already cut for shares, which only a share
// small enough can use and which a share fills by holding it whole, so a share placed on
// one takes nothing of that room (docs/sim.md, "MIG instances").
struct GpuRoom {
  int64_t free = 0;
  int64_t take = 0;
};
GpuRoom GpuRoomOf(const NodeState& node, const Task& task, GpuMask gpus);
// Whether `gpus` is one MIG instance (a share placed there holds it whole).
bool IsInstance(const NodeState& node, GpuMask gpus);

std::unique_ptr<ScorePlugin> MakeRandomScore(const PolicyConfig& config);
std::unique_ptr<ScorePlugin> MakeDotProductScore(const PolicyConfig& config);
std::unique_ptr<ScorePlugin> MakeGpuClusteringScore(const PolicyConfig& config);
std::unique_ptr<ScorePlugin> MakeGpuPackingScore(const PolicyConfig& config);
std::unique_ptr<ScorePlugin> MakeBestFitScore(const PolicyConfig& config);
std::unique_ptr<ScorePlugin> MakeFgdScore(const PolicyConfig& config);

// Min-max normalisation to 0..100 as the artifact's NormalizeScore (integer division).
void MinMaxNormalize(std::vector<NodeScore>& scores);

}  // namespace gpupool::sched
