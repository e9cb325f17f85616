#include "sched/framework.h"

#include <fmt/format.h>

#include <bit>

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

namespace {
// Candidates the index offers that a filter then refuses (other GPU model, node not
// allowed, not enough memory) before the cycle falls back to a scan of the index's values.
constexpr size_t kMaxRefusedCandidates = 32;
}  // namespace

std::string FrameworkPolicy::NoFitReason(const ClusterState& state, const Task& task) {
  return state.num_nodes() == 0
             ? "the cluster has no nodes"
             : fmt::format("no node fits (cpu {}m, memory {}Mi, {} GPU(s) x {} thousandths)",
                           task.cpu_milli, task.memory_mib, task.num_gpu, task.gpu_milli);
}

bool FrameworkPolicy::PassesFilters(const ClusterState& state, const Task& task,
                                    int32_t node) const {
  for (const auto& f : filters_) {
    if (!f->Filter(state, task, node, nullptr)) return false;
  }
  return true;
}

PlacementDecision FrameworkPolicy::Place(const ClusterState& state, const Task& task) {
  TaskShape key;
  if (use_index_ && score_->IndexKey(state, task, &key)) {
    return PlaceIndexed(state, task, key, /*lazy=*/false);
  }
  if (use_index_ && score_->CachedScoreKey(state, task, &key)) {
    return PlaceIndexed(state, task, key, /*lazy=*/true);
  }
  return PlaceByScan(state, task);
}

void FrameworkPolicy::SyncPositions(const ClusterState& state) {
  const ChangeJournal& journal = state.journal();
  if (positions_journal_ == journal.id()) return;
  const int32_t n = state.num_nodes();
  position_of_.assign(static_cast<size_t>(n), 0);
  for (int32_t p = 0; p < n; ++p) {
    position_of_[static_cast<size_t>(state.scan_order()[static_cast<size_t>(p)])] = p;
  }
  positions_journal_ = journal.id();
}

void FrameworkPolicy::SyncGpuFree(const ClusterState& state) {
  const ChangeJournal& journal = state.journal();
  const auto n = static_cast<size_t>(state.num_nodes());
  auto set = [&](int32_t node) {
    const auto p = static_cast<size_t>(position_of_[static_cast<size_t>(node)]);
    const uint64_t bit = uint64_t{1} << (p % 64);
    if (state.node(node).gpu_free_total > 0) {
      gpu_free_bits_[p / 64] |= bit;
    } else {
      gpu_free_bits_[p / 64] &= ~bit;
    }
  };
  SyncPositions(state);
  if (gpu_free_journal_ != journal.id() || gpu_free_synced_ < journal.first() ||
      gpu_free_bits_.size() != (n + 63) / 64) {
    gpu_free_bits_.assign((n + 63) / 64, 0);
    for (size_t node = 0; node < n; ++node) set(static_cast<int32_t>(node));
  } else {
    for (uint64_t s = gpu_free_synced_; s < journal.end(); ++s) set(journal.at(s));
  }
  gpu_free_journal_ = journal.id();
  gpu_free_synced_ = journal.end();
}

PlacementDecision FrameworkPolicy::PlaceByScan(const ClusterState& state, const Task& task) {
  PlacementDecision d;
  feasible_.clear();
  if (task.num_gpu > 0 && task.gpu_milli > 0) {
    // Only nodes with a GPU share free can take it (gpu_free_bits_), in scan order.
    SyncGpuFree(state);
    const std::vector<int32_t>& order = state.scan_order();
    for (size_t w = 0; w < gpu_free_bits_.size(); ++w) {
      for (uint64_t bits = gpu_free_bits_[w]; bits != 0; bits &= bits - 1) {
        const int32_t node = order[w * 64 + static_cast<size_t>(std::countr_zero(bits))];
        if (PassesFilters(state, task, node)) feasible_.push_back(node);
      }
    }
  } else {
    for (int32_t node : state.scan_order()) {
      if (PassesFilters(state, task, node)) feasible_.push_back(node);
    }
  }
  if (feasible_.empty()) {
    d.reason = NoFitReason(state, task);
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

// The node's value in the index: the score of the key's shape (the task without its
// model, capability and node constraints, which the filters check on the candidates, and
// without its memory unless the key holds it) when the node can host that shape, else
// kAbsent. Every node that passes the filters can host the shape, and there the shape
// scores as the task does (ScorePlugin::IndexKey's contract). Scoring the shape rather
// than the task matters on the other nodes: a task scored where its memory does not fit
// could leave a value that a later task of the same key, which fits, would read.
int64_t FrameworkPolicy::IndexValue(const ClusterState& state, int32_t node) {
  if (!state.Fits(node, shape_task_)) return ScoreIndex::kAbsent;
  return score_->Score(state, shape_task_, node).score;
}

// Brings `index` up to date with the cluster's journal. An eager index scores every
// changed node (IndexValue); a lazy one (CachedScoreKey) marks the changed nodes that can
// host the key's shape pending, to be scored by the first task that passes the filters
// there (ScorePending), and the others absent: no task of the key fits them.
void FrameworkPolicy::SyncIndex(const ClusterState& state, const TaskShape& key, bool lazy,
                                ScoreIndex& index) {
  const ChangeJournal& journal = state.journal();
  const int32_t n = state.num_nodes();
  SyncPositions(state);
  shape_task_.cpu_milli = key.cpu_milli;
  shape_task_.memory_mib = key.memory_mib;
  shape_task_.num_gpu = key.num_gpu;
  shape_task_.gpu_milli = key.gpu_milli;
  shape_task_.owner = key.owner;
  shape_task_.gpu_memory_mib = key.gpu_memory_mib;
  auto value = [&](int32_t node, bool* pending) {
    *pending = lazy && state.Fits(node, shape_task_);
    return lazy ? ScoreIndex::kAbsent : IndexValue(state, node);
  };
  const bool rebuild = index.journal_id() != journal.id() || index.synced() < journal.first() ||
                       index.size() != n ||
                       journal.end() - index.synced() > static_cast<uint64_t>(n) / 2 + 64;
  bool pending = false;
  if (rebuild) {
    index.Reset(n);
    for (int32_t node = 0; node < n; ++node) {
      const int32_t pos = position_of_[static_cast<size_t>(node)];
      index.SetLeaf(node, pos, state.node(node).version, value(node, &pending));
      if (pending) index.SetPending(pos, true);
    }
    index.Build();
  } else {
    for (uint64_t s = index.synced(); s < journal.end(); ++s) {
      const int32_t node = journal.at(s);
      const uint64_t version = state.node(node).version;
      if (index.version(node) == version) continue;  // changed again later; done already
      const int32_t pos = position_of_[static_cast<size_t>(node)];
      index.Set(node, pos, version, value(node, &pending));
      if (lazy) index.SetPending(pos, pending);
    }
  }
  index.MarkSynced(journal.id(), journal.end());
}

// A lazy index's pending nodes that pass the filters, scored with `task` in scan order:
// where the full scan's Score calls compute (a node changed since the key's last cycle),
// these compute, in the same order, with the same task.
void FrameworkPolicy::ScorePending(const ClusterState& state, const Task& task, ScoreIndex& index) {
  const std::vector<int32_t>& order = state.scan_order();
  const std::vector<uint64_t>& pending = index.pending();
  for (size_t w = 0; w < pending.size(); ++w) {
    for (uint64_t bits = pending[w]; bits != 0; bits &= bits - 1) {
      const auto pos = static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits)));
      const int32_t node = order[static_cast<size_t>(pos)];
      if (!PassesFilters(state, task, node)) continue;  // pending until a task fits it
      index.Set(node, pos, state.node(node).version, score_->Score(state, task, node).score);
      index.SetPending(pos, false);
    }
  }
}

// The first scan position among the best values whose node passes the filters, by a scan
// of the index's values (no scoring); -1 when none.
int32_t FrameworkPolicy::ScanBest(const ClusterState& state, const Task& task,
                                  const ScoreIndex& index) const {
  int32_t best = -1;
  for (int32_t p = 0; p < index.size(); ++p) {
    const int64_t v = index.value(p);
    if (v == ScoreIndex::kAbsent || (best >= 0 && v <= index.value(best))) continue;
    if (PassesFilters(state, task, state.scan_order()[static_cast<size_t>(p)])) best = p;
  }
  return best;
}

// The scan position the full scan would pick, -1 when no node passes the filters:
// candidates in the order the full scan ranks them, until one passes the filters.
int32_t FrameworkPolicy::PickBest(const ClusterState& state, const Task& task, ScoreIndex& index) {
  int32_t pos = -1;
  bool scan = false;
  excluded_.clear();
  for (int32_t p = index.Best(); p >= 0; p = index.Best()) {
    if (PassesFilters(state, task, state.scan_order()[static_cast<size_t>(p)])) {
      pos = p;
      break;
    }
    if (excluded_.size() == kMaxRefusedCandidates) {
      scan = true;
      break;
    }
    excluded_.emplace_back(p, index.Exclude(p));
  }
  for (auto it = excluded_.rbegin(); it != excluded_.rend(); ++it)
    index.Restore(it->first, it->second);
  return scan ? ScanBest(state, task, index) : pos;
}

PlacementDecision FrameworkPolicy::PlaceIndexed(const ClusterState& state, const Task& task,
                                                const TaskShape& key, bool lazy) {
  PlacementDecision d;
  feasible_.clear();
  score_->PreScore(state, task, feasible_);
  // Another cluster history (the controller builds a new cluster each pass): every index
  // is of the old one and would only be rebuilt; dropping them keeps stale ones from
  // holding memory up to the budget.
  if (state.journal().id() != positions_journal_) indexes_.Clear();
  ScoreIndex& index = indexes_.Get(key);
  SyncIndex(state, key, lazy, index);
  if (lazy) ScorePending(state, task, index);
  const int32_t pos = PickBest(state, task, index);
  if (pos < 0) {
    d.reason = NoFitReason(state, task);
    return d;
  }
  const int32_t node = state.scan_order()[static_cast<size_t>(pos)];
  const NodeScore chosen = score_->Score(state, task, node);
  d.placed = true;
  d.score = chosen.score;
  d.placement.node = node;
  d.placement.gpus = GpuMaskToList(chosen.gpus);
  return d;
}

}  // namespace gpupool::sched
