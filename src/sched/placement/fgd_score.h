// Fragmentation Gradient Descent (FGD) and our refinement of it, as one score plugin.
//
// For each feasible node (and for a fractional task each distinct GPU choice) FGD
// computes Δ = F_n(before) − F_n(after) with the fragmentation measure of
// fragmentation.h and prefers the node where fragmentation grows least.
//
// Options select the published behaviour or ours:
//   - integer_sigmoid: score = ⌊100·sigmoid(Δ/1000)⌋ as the artifact (ties frequent);
//     otherwise the exact Δ (an integer in units of 1/total_weight milli).
//   - tie_break_best_fit: among equal primary scores prefer the node that is fuller
//     after placement (BestFit's measure), before the scan order decides.
//   - memory_aware, prefer_used_nodes, idle_node_penalty, strand_weight,
//     fractional_gpu_best_fit, fill_theta, free_opening: our variants, documented at
//     FgdOptions; strand_weight with fractional_gpu_best_fit is `fgd-strand-gpufit`,
//     with fill_theta too `fgd-strand-lookahead`, with free_opening too
//     `fgd-strand-lookahead-open`: the fewest GPUs left unallocated, the live default.
//
// MIG: a node with whole-only GPUs (MIG instances, cluster_state.h) is scored GPU by GPU
// with FragmentationMeasure::ScaledMigNode (an idle instance is a fixed piece only the
// shares whose memory need it holds can use; a share on it takes it whole), outside the
// caches' content memo (the per-version entries hold it). Nodes without instances are
// scored as before, bit for bit.
//
// Speed: when the score does not read the task's memory (no strand term, no memory
// shapes: `fgd` and most variants) the plugin is indexable (ScorePlugin::IndexKey,
// node_index.h), so FrameworkPolicy scores only the nodes changed since a shape was last
// placed; when it does (`default`), lazily (ScorePlugin::CachedScoreKey): a changed node
// is scored by the first task of the shape that passes the filters there, in scan order,
// as by the full scan, so the approximation below stays the same. And two caches. (1) Per
// (task shape (cpu, num_gpu, gpu_milli, and the owner of a
// fractional task when the cluster has single-owner GPUs), node index) the
// best (score, GPUs) keyed by node version: each placement changes one node, so a cycle
// looks at most nodes only through this. (2) On a version miss, a memo keyed by node
// *content* — shape, GPU model, free CPU, the sorted free GPU shares (those of GPUs another
// owner holds, which the task may not take, marked) and, when the score
// counts memory, free memory: all the score depends on — so the thousands of identical (e.g. idle)
// nodes of a large cluster share one computation; the GPU indices are then derived per node exactly
// as the full scan would pick them. Results are bit-identical to computing every node. The memo is
// cleared when it reaches 2^17 entries (~13 MB). Single-threaded (caches).
// Known approximation: the strand term and memory shapes read the task's memory, which
// the shape key does not hold (holding it would multiply the per-shape caches by the
// number of distinct memory sizes), so tasks that differ only in memory share a node's
// cached result, computed for whichever of them scored the node first at its version.
// The published figures of those policies include it.
#pragma once

#include <memory>
#include <vector>

#include "sched/fragmentation.h"
#include "sched/framework.h"
#include "sched/placement_policy.h"

namespace gpupool::sched {

struct FgdOptions {
  bool integer_sigmoid = true;
  bool tie_break_best_fit = false;
  // Weight each target shape by its GPU demand (count x num_gpu x gpu_milli; CPU-only
  // shapes count as 0.1 GPU) instead of its count, so that fragments which would block
  // the GPU-heavy tasks (a few 8-GPU tasks carry much of the demand) weigh more.
  bool demand_weighted = false;
  // Levels of the integer sigmoid score (the artifact: 100). Fewer levels make more ties,
  // which the scan order then breaks consistently, packing tasks onto preferred nodes.
  int32_t score_levels = 100;
  // Count memory in the fragmentation measure: the target shapes are told apart by
  // memory too, and a shape fits a node only with enough free memory (FGD ignores
  // memory, so GPUs stranded by a node's exhausted memory look usable to it).
  bool memory_aware = false;
  // Among equal primary scores prefer nodes with a GPU already in use (keep idle nodes
  // idle for the tasks that need whole nodes), before the scan order decides.
  bool prefer_used_nodes = false;
  // Score levels taken off a node whose GPUs are all idle when the task needs fewer GPUs
  // than the node has (a soft reservation of whole nodes for whole-node tasks).
  int32_t idle_node_penalty = 0;
  // Adds strand_weight x the change in the node's "stranded" GPU milli to Δ: free GPU
  // share that the node's free CPU (or memory) could not feed at the target workload's
  // average CPU (memory) per GPU. Steers CPU- and memory-heavy tasks to nodes with CPU
  // and memory to spare.
  double strand_weight = 0.0;
  // Fractional tasks only: the primary score is divided by fractional_score_merge (10:
  // FGD's 100 levels become 10, so near-equal candidates tie), and among ties the GPU
  // left fullest after placement wins (BestFit at the GPU level, across nodes), before
  // the scan order decides. Whole-GPU and CPU-only tasks are scored as without it.
  bool fractional_gpu_best_fit = false;
  int32_t fractional_score_merge = 1;
  // With fractional_gpu_best_fit: when > 0, ties go first to the GPU whose expected
  // unused share grows least, ExpectedPieceWaste(workload, fill_theta)[free after] −
  // [free before] (a lookahead over the target workload's fractional shapes), then by
  // BestFit as above.
  double fill_theta = 0;
  // With fill_theta: a fractional task that opens an idle GPU counts zero growth instead
  // of W(1000 − s) − W(1000), so the lookahead charges a task only for what it does to a
  // piece already open: a fill that makes a piece's expected waste grow loses to opening
  // an idle GPU, one that shrinks it wins (`fgd-strand-lookahead-open`).
  bool free_opening = false;
};

// For a GPU with r thousandths free (index r, 0..1000), the GPU milli expected to stay
// unused if it is filled by the target workload's fractional shapes: W(r) = (1 − P) r +
// P · Σ_{s ≤ r} w_s W(r − s) / Σ_{s ≤ r} w_s, where w_s is a fractional shape's weight
// and P = min(1, (Σ_{s ≤ r} w_s / total weight) / theta) the chance that a task that fits
// reaches the piece at all (theta: the share of tasks that fit above which a piece
// surely gets one). W(1000) = 0: an idle GPU is whole-GPU tasks' to take. The vector
// holds W in tenths of GPU milli, rounded, so scores stay exact integers.
std::vector<int64_t> ExpectedPieceWaste(const TargetWorkload& workload, double theta);

std::unique_ptr<ScorePlugin> MakeFgdScore(const PolicyConfig& config, const FgdOptions& options,
                                          std::string name);

// The target workload used when PolicyConfig::target_workload is null: whole tasks of
// 1, 2, 4 and 8 GPUs and shares of 1/4 and 1/2 GPU, equally weighted, no CPU demand.
std::shared_ptr<const TargetWorkload> GenericTargetWorkload();

}  // namespace gpupool::sched
