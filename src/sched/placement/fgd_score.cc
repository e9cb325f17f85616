#include "sched/placement/fgd_score.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/placement/score_plugins.h"

namespace gpupool::sched {
namespace {

// Secondary key range for tie-breaking; the primary score is shifted above it.
constexpr int64_t kSecondaryRange = int64_t{1} << 20;
// The same with the lookahead's two keys (growth of the expected waste, then BestFit).
constexpr int64_t kLookaheadRange = int64_t{1} << 25;

class FgdScore final : public ScorePlugin {
 public:
  FgdScore(std::shared_ptr<const TargetWorkload> workload, FgdOptions options, std::string name)
      : workload_(std::move(workload)), options_(options), name_(std::move(name)) {
    double cpu = 0, memory = 0, gpu = 0;
    for (const TargetShape& t : workload_->memory_shapes()) {
      if (t.num_gpu == 0) continue;
      cpu += static_cast<double>(t.weight) * static_cast<double>(t.cpu_milli);
      memory += static_cast<double>(t.weight) * static_cast<double>(t.memory_mib);
      gpu += static_cast<double>(t.weight) * t.num_gpu * t.gpu_milli;
    }
    cpu_per_gpu_milli_ = gpu > 0 ? cpu / gpu : 0;
    memory_per_gpu_milli_ = gpu > 0 ? memory / gpu : 0;
    key_has_memory_ = options_.strand_weight != 0;
    if (options_.fractional_gpu_best_fit && options_.fill_theta > 0) {
      piece_waste_ = ExpectedPieceWaste(*workload_, options_.fill_theta);
    }
    for (const TargetShape& t : workload_->shapes()) key_has_memory_ |= t.memory_mib > 0;
  }

  std::string_view name() const override { return name_; }

  void PreScore(const ClusterState& state, const Task& task, const std::vector<int32_t>&) override {
    Bind(state);
    // The owner matters only to a fractional task in a cluster with single-owner GPUs;
    // otherwise every owner shares the shape's entries.
    const int64_t owner = state.has_single_owner_gpus() && task.IsFractional() ? task.owner : 0;
    const ShapeKey key{task.cpu_milli, task.num_gpu, task.gpu_milli, owner,
                       task.IsFractional() ? task.gpu_memory_mib : 0};
    auto [it, inserted] = shape_ids_.try_emplace(key, static_cast<int32_t>(cache_.size()));
    if (inserted) cache_.emplace_back();
    current_shape_ = it->second;
    current_ = &cache_[static_cast<size_t>(it->second)];
    if (current_->size() != static_cast<size_t>(state.num_nodes())) {
      current_->assign(static_cast<size_t>(state.num_nodes()), Entry{});
    }
  }

  // Indexable when the score does not read the task's memory: then it depends on the
  // node's state and on ShapeKey's fields only (a task that fits leaves memory >= 0,
  // which is all FGD's measure asks of memory), PreScore ignores the feasible nodes and
  // nothing is normalized. With the strand term or memory shapes the score reads the
  // task's memory, which ShapeKey does not hold (see the header): CachedScoreKey.
  bool IndexKey(const ClusterState& state, const Task& task, TaskShape* key) const override {
    return !key_has_memory_ && ShapeKeyOf(state, task, key);
  }

  // The policies that read the task's memory are indexed lazily (framework.h): Score
  // keeps its result per (ShapeKey, node, version) in cache_, computed by the first task
  // that scores the node at that version (the approximation of the header), and forgets
  // it only when the node changes or Bind() starts over (another model table or node
  // count, which only a new cluster journal brings).
  bool CachedScoreKey(const ClusterState& state, const Task& task, TaskShape* key) const override {
    return key_has_memory_ && ShapeKeyOf(state, task, key);
  }

  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    Entry& e = (*current_)[static_cast<size_t>(node)];
    const NodeState& n = state.node(node);
    if (e.version != n.version && n.whole_only_gpus != 0) [[unlikely]] {
      const MigResult r = ScoreMigNode(state, node, task);
      e.score = r.score;
      e.gpus = r.gpus;
      e.version = n.version;
    } else if (e.version != n.version) {
      const uint64_t held = state.Blocked(node, task);  // 0 unless owners or MIG matter
      const MemoValue& m = Memo(n, static_cast<size_t>(node), task, held);
      e.score = m.score;
      e.gpus =
          task.IsFractional() ? WinningGpu(n, m.winners, held) : FirstIdleGpus(n, task.num_gpu);
      e.version = n.version;
    }
    return {node, e.score, e.gpus};
  }

 private:
  struct ShapeKey {
    int64_t cpu;
    int32_t num_gpu;
    int32_t gpu_milli;
    int64_t owner;           // see PreScore
    int64_t gpu_memory_mib;  // which MIG instance a share may take (ClusterState::Blocked)
    bool operator==(const ShapeKey&) const = default;
  };
  struct ShapeKeyHash {
    size_t operator()(const ShapeKey& k) const {
      return std::hash<int64_t>{}(k.cpu * 1000003 + int64_t{k.num_gpu} * 1009 + k.gpu_milli +
                                  k.owner * 7919 + k.gpu_memory_mib * 31);
    }
  };
  struct Entry {
    uint64_t version = 0;  // 0 never matches: ClusterState versions start at 1
    int64_t score = 0;
    GpuMask gpus = 0;
  };
  // The content memo's value: the node's best score for the shape and, for a fractional
  // task, which positions of the sorted free shares (the key's) give that score.
  struct MemoValue {
    int64_t score = 0;
    uint64_t winners = 0;
  };

  // (Re)binds the measure when the cluster's model table or size changed.
  void Bind(const ClusterState& state) {
    if (measure_ && bound_models_ == state.models() &&
        node_frag_.size() == static_cast<size_t>(state.num_nodes())) {
      return;
    }
    measure_ = std::make_unique<FragmentationMeasure>(*workload_, state.models());
    bound_models_ = state.models();
    node_frag_.assign(static_cast<size_t>(state.num_nodes()), 0);
    node_frag_version_.assign(static_cast<size_t>(state.num_nodes()), 0);
    cache_.clear();
    shape_ids_.clear();
    memo_.clear();
  }

  int64_t NodeFrag(const NodeState& n, size_t index) {
    if (node_frag_version_[index] != n.version) {
      node_frag_[index] =
          n.whole_only_gpus == 0 ? measure_->ScaledNode(n) : measure_->ScaledMigNode(n);
      node_frag_version_[index] = n.version;
    }
    return node_frag_[index];
  }

  // GPU milli of a node that its free CPU and memory could not feed (see strand_weight).
  double Stranded(int64_t gpu_free, int64_t cpu_free, int64_t memory_free) const {
    double usable = static_cast<double>(gpu_free);
    if (cpu_per_gpu_milli_ > 0) {
      usable = std::min(usable, static_cast<double>(cpu_free) / cpu_per_gpu_milli_);
    }
    if (memory_per_gpu_milli_ > 0) {
      usable = std::min(usable, static_cast<double>(memory_free) / memory_per_gpu_milli_);
    }
    return static_cast<double>(gpu_free) - std::max(usable, 0.0);
  }

  // Δ including the stranding term, scaled like the measure.
  int64_t Delta(int64_t before, int64_t after, const NodeState& n, const Task& task) const {
    return StrandDelta(before, after, n, task, n.gpu_free_total,
                       n.gpu_free_total - task.TotalGpuMilli());
  }
  // The same with the node's free GPU before and after placement given (in the measure's
  // units: thousandths of physical GPUs on a node with MIG instances).
  int64_t StrandDelta(int64_t before, int64_t after, const NodeState& n, const Task& task,
                      int64_t gpu_free_before, int64_t gpu_free_after) const {
    int64_t delta = before - after;
    if (options_.strand_weight != 0) {
      const double s0 = Stranded(gpu_free_before, n.cpu_free_milli, n.memory_free_mib);
      const double s1 = Stranded(gpu_free_after, n.cpu_free_milli - task.cpu_milli,
                                 n.memory_free_mib - task.memory_mib);
      delta -= static_cast<int64_t>(std::llround(options_.strand_weight * (s1 - s0) *
                                                 static_cast<double>(measure_->total_weight())));
    }
    return delta;
  }

  int64_t Primary(int64_t delta_scaled) const {
    if (!options_.integer_sigmoid) return delta_scaled;
    const double delta_milli = measure_->ToMilli(delta_scaled);
    return static_cast<int64_t>(1.0 / (1.0 + std::exp(-delta_milli / 1000.0)) *
                                static_cast<double>(options_.score_levels));
  }

  // `gpu_left`: for a fractional task, the chosen GPU's free share after placement;
  // `instance`: the chosen GPU is a MIG instance, held whole (ScoreMigNode).
  int64_t Combine(int64_t primary, const NodeState& n, const Task& task, int32_t gpu_left = 0,
                  bool instance = false) const {
    // "Idle" looks at GPUs only, which the content memo's key covers.
    const bool idle = n.gpu_free_total == n.gpu_capacity_milli();
    if (idle && task.num_gpu < n.num_gpus()) primary -= options_.idle_node_penalty;
    if (options_.prefer_used_nodes) primary = primary * 2 + (idle ? 0 : 1);
    if (options_.fractional_gpu_best_fit) {
      // Whole-GPU and CPU-only tasks: one secondary value, so the scan order alone breaks
      // their ties, as without the option. gpu_left depends on the node only through its
      // sorted free shares, which the content memo's key holds.
      if (!task.IsFractional()) return primary * kSecondaryRange;
      const int64_t merge = std::max<int32_t>(1, options_.fractional_score_merge);
      const int64_t merged = primary >= 0 ? primary / merge : -((-primary + merge - 1) / merge);
      if (piece_waste_.empty()) return merged * kSecondaryRange + (1000 - gpu_left);
      // The least growth of the expected unused share (tenths of GPU milli, |growth| <=
      // 10,000), then the least share left (BestFit), then the scan order.
      // With free_opening, an idle GPU's growth is zero (the free share before placement
      // is in the content memo's key as well).
      // An instance is taken whole: no piece is left open (growth 0, nothing left).
      const bool opens = gpu_left + task.gpu_milli == 1000;
      const int64_t growth = instance ? 0
                             : options_.free_opening && opens
                                 ? 0
                                 : piece_waste_[static_cast<size_t>(gpu_left)] -
                                       piece_waste_[static_cast<size_t>(gpu_left) +
                                                    static_cast<size_t>(task.gpu_milli)];
      return merged * kLookaheadRange + (10000 - growth) * 1024 + (1000 - gpu_left);
    }
    if (!options_.tie_break_best_fit) return primary;
    // BestFit's measure of how full the node is after placement, in 0..kSecondaryRange.
    const double left =
        0.5 * static_cast<double>(n.cpu_free_milli - task.cpu_milli) / kMaxSpecCpuMilli +
        0.5 * static_cast<double>(n.gpu_free_total - task.TotalGpuMilli()) / kMaxSpecGpuMilli;
    const double full = std::clamp(1.0 - left, 0.0, 1.0);
    return primary * kSecondaryRange +
           static_cast<int64_t>(full * static_cast<double>(kSecondaryRange - 1));
  }

  // The node's result for the current shape, looked up by content. The score depends on
  // the node only through its model, free CPU, the multiset of its GPUs' free shares and,
  // when the measure or the strand term counts memory, its free memory (F_n and Combine do not look
  // at GPU order), so the key is those with the shares sorted; thousands of identical nodes share
  // one entry. The GPU indices are derived per node from the result (WinningGpu, FirstIdleGpus),
  // exactly as a scan of every GPU in index order picks them.
  // `held`: the GPUs the task may not use (ClusterState::Blocked), which the task may not
  // take though the measure counts their shares as they are: they sort after the free
  // GPUs of equal share, and the key marks their shares, so a node's entry is shared
  // only with nodes whose held GPUs have the same shares.
  const MemoValue& Memo(const NodeState& n, size_t index, const Task& task, uint64_t held) {
    const int32_t g = n.num_gpus();
    if (held == 0) {
      for (int32_t i = 0; i < g; ++i) {  // insertion sort, descending: g is small
        const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
        int32_t j = i;
        for (; j > 0 && sorted_[static_cast<size_t>(j - 1)] < f; --j) {
          sorted_[static_cast<size_t>(j)] = sorted_[static_cast<size_t>(j - 1)];
        }
        sorted_[static_cast<size_t>(j)] = f;
      }
      sorted_held_ = 0;
    } else {
      // Sorted by 2 x share + (1 if the task may take the GPU), descending.
      for (int32_t i = 0; i < g; ++i) {
        const int32_t v =
            2 * n.gpu_free_milli[static_cast<size_t>(i)] + ((held >> i & 1) == 0 ? 1 : 0);
        int32_t j = i;
        for (; j > 0 && sorted_[static_cast<size_t>(j - 1)] < v; --j) {
          sorted_[static_cast<size_t>(j)] = sorted_[static_cast<size_t>(j - 1)];
        }
        sorted_[static_cast<size_t>(j)] = v;
      }
      sorted_held_ = 0;
      for (int32_t i = 0; i < g; ++i) {
        const int32_t v = sorted_[static_cast<size_t>(i)];
        if ((v & 1) == 0) sorted_held_ |= uint64_t{1} << i;
        sorted_[static_cast<size_t>(i)] = v / 2;
      }
    }
    // When the score counts memory, the free memory follows the shares in the key.
    const size_t shares = kKeyHeader + static_cast<size_t>(g) * sizeof(uint16_t);
    const bool with_memory = key_has_memory_;
    key_.resize(shares + (with_memory ? sizeof(int64_t) : 0));
    char* k = key_.data();
    std::memcpy(k, &current_shape_, sizeof(int32_t));
    std::memcpy(k + 4, &n.model_id, sizeof(int32_t));
    std::memcpy(k + 8, &n.cpu_free_milli, sizeof(int64_t));
    for (int32_t i = 0; i < g; ++i) {
      const auto f = static_cast<uint16_t>(sorted_[static_cast<size_t>(i)]);  // 0..1000
      std::memcpy(k + kKeyHeader + static_cast<size_t>(i) * sizeof(uint16_t), &f, sizeof(f));
    }
    for (uint64_t m = sorted_held_; m != 0; m &= m - 1) {  // bit 15 marks a held GPU's share
      char* at = k + kKeyHeader + static_cast<size_t>(__builtin_ctzll(m)) * sizeof(uint16_t);
      uint16_t f;
      std::memcpy(&f, at, sizeof(f));
      f = static_cast<uint16_t>(f | 0x8000);
      std::memcpy(at, &f, sizeof(f));
    }
    if (with_memory) std::memcpy(k + shares, &n.memory_free_mib, sizeof(int64_t));
    if (auto it = memo_.find(key_); it != memo_.end()) return it->second;
    if (memo_.size() >= kMaxMemoEntries) memo_.clear();  // bounds memory; L1 stays warm
    return memo_.emplace(key_, Compute(n, index, task)).first->second;
  }

  // For a fractional task: the first GPU (index order) not held by another owner whose
  // free share is one of the winning values (winners are never held positions), which is
  // the GPU the exhaustive scan in index order picks.
  GpuMask WinningGpu(const NodeState& n, uint64_t winners, uint64_t held) const {
    const int32_t g = n.num_gpus();
    for (int32_t i = 0; i < g; ++i) {
      const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
      for (int32_t j = 0; j < g; ++j) {
        if (sorted_[static_cast<size_t>(j)] == f && (winners >> j & 1) != 0) {
          if ((held >> i & 1) != 0) break;  // GPU i has the share but another owner
          return GpuMask{1} << i;
        }
      }
    }
    return 0;  // cannot happen after the filter; keep the entry harmless
  }

  // Nodes with whole-only GPUs (MIG instances) are scored apart from the content memo,
  // GPU by GPU in index order, with the measure that knows instances
  // (FragmentationMeasure::ScaledMigNode, in thousandths of physical GPUs): a share
  // placed on an instance takes the instance whole (its weight), so it removes a piece
  // only shares could use instead of cutting into a GPU that whole-GPU tasks could take;
  // and the strand term counts the node's GPU by weight. Nodes without instances never
  // come here, so their scores are as before.
  struct MigResult {
    int64_t score = 0;
    GpuMask gpus = 0;
  };
  MigResult ScoreMigNode(const ClusterState& state, int32_t node, const Task& task) {
    const NodeState& n = state.node(node);
    const int32_t g = n.num_gpus();
    const int64_t before = NodeFrag(n, static_cast<size_t>(node));
    std::array<int32_t, 64> after{};
    int64_t free_before = 0;  // thousandths of physical GPUs
    for (int32_t i = 0; i < g; ++i) {
      after[static_cast<size_t>(i)] = n.gpu_free_milli[static_cast<size_t>(i)];
      free_before += int64_t{after[static_cast<size_t>(i)]} * InstanceWeightMilli(n, i) / 1000;
    }
    const int64_t cpu_after = n.cpu_free_milli - task.cpu_milli;
    const int64_t memory_after = n.memory_free_mib - task.memory_mib;
    MigResult r;
    if (!task.IsFractional()) {  // whole GPUs (never an instance) or none
      r.gpus = task.num_gpu > 0 ? FirstIdleGpus(n, task.num_gpu) : 0;
      for (GpuMask m = r.gpus; m != 0; m &= m - 1)
        after[static_cast<size_t>(__builtin_ctzll(m))] = 0;
      const int64_t delta =
          StrandDelta(before, measure_->ScaledMigNode(n, after.data(), cpu_after, memory_after), n,
                      task, free_before, free_before - int64_t{task.num_gpu} * 1000);
      r.score = Combine(Primary(delta), n, task);
      return r;
    }
    // A share: every GPU it may take (not Blocked: plain GPUs with room, and the one idle
    // instance ClusterState lets it have); the first best in index order wins.
    const uint64_t held = state.Blocked(node, task);
    bool have = false;
    for (int32_t i = 0; i < g; ++i) {
      const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
      const bool instance = (n.whole_only_gpus >> i & 1) != 0;
      if ((held >> i & 1) != 0 || (instance ? f != 1000 : f < task.gpu_milli)) continue;
      const int32_t left = instance ? 0 : f - task.gpu_milli;
      const int64_t taken = (f - left) * InstanceWeightMilli(n, i) / 1000;
      after[static_cast<size_t>(i)] = left;
      const int64_t delta =
          StrandDelta(before, measure_->ScaledMigNode(n, after.data(), cpu_after, memory_after), n,
                      task, free_before, free_before - taken);
      after[static_cast<size_t>(i)] = f;
      const int64_t score = Combine(Primary(delta), n, task, left, instance);
      if (!have || score > r.score) {
        have = true;
        r.score = score;
        r.gpus = GpuMask{1} << i;
      }
    }
    return r;  // score 0, no GPU when nothing fits (cannot happen after the filter)
  }

  // Scores the node in the sorted order of Memo() (sorted_ holds its free shares).
  MemoValue Compute(const NodeState& n, size_t index, const Task& task) {
    const int64_t before = NodeFrag(n, index);
    const int32_t g = n.num_gpus();
    std::array<int32_t, 64> after = sorted_;
    const int64_t cpu_after = n.cpu_free_milli - task.cpu_milli;
    const int64_t memory_after = n.memory_free_mib - task.memory_mib;
    MemoValue m;
    if (task.IsFractional()) {
      // Every distinct free share >= gpu_milli is a candidate; equal shares give equal
      // results. The winners are all positions whose share reaches the best score.
      bool have = false;
      std::array<int64_t, 64> score_at{};
      for (int32_t i = 0; i < g; ++i) {
        const int32_t f = sorted_[static_cast<size_t>(i)];
        if (f < task.gpu_milli) break;  // descending: no later share fits either
        // Another owner's GPU is no candidate; it sorts after the free GPUs of its share,
        // so a candidate's equal-share predecessor is a candidate too.
        if ((sorted_held_ >> i & 1) != 0) continue;
        if (i > 0 && sorted_[static_cast<size_t>(i - 1)] == f) {
          score_at[static_cast<size_t>(i)] = score_at[static_cast<size_t>(i - 1)];
          continue;
        }
        after[static_cast<size_t>(i)] = f - task.gpu_milli;
        const int64_t delta = Delta(
            before, measure_->ScaledNode(n.model_id, cpu_after, after.data(), g, memory_after), n,
            task);
        after[static_cast<size_t>(i)] = f;
        const int64_t score = Combine(Primary(delta), n, task, f - task.gpu_milli);
        score_at[static_cast<size_t>(i)] = score;
        if (!have || score > m.score) {
          have = true;
          m.score = score;
        }
      }
      for (int32_t i = 0; have && i < g && sorted_[static_cast<size_t>(i)] >= task.gpu_milli; ++i) {
        if (score_at[static_cast<size_t>(i)] == m.score && (sorted_held_ >> i & 1) == 0) {
          m.winners |= uint64_t{1} << i;
        }
      }
      return m;  // score 0, no winners when nothing fits (cannot happen after the filter)
    }
    // Whole GPUs (or none): the task takes num_gpu idle GPUs, which lead the sorted shares.
    int32_t idle = 0;
    while (idle < g && sorted_[static_cast<size_t>(idle)] == 1000) ++idle;
    if (task.num_gpu > 0 && idle >= task.num_gpu) {
      for (int32_t i = 0; i < task.num_gpu; ++i) after[static_cast<size_t>(i)] = 0;
    }
    const int64_t delta =
        Delta(before, measure_->ScaledNode(n.model_id, cpu_after, after.data(), g, memory_after), n,
              task);
    m.score = Combine(Primary(delta), n, task);
    return m;
  }

  // ShapeKey's fields (PreScore's) as an index key (framework.h); always true.
  static bool ShapeKeyOf(const ClusterState& state, const Task& task, TaskShape* key) {
    key->cpu_milli = task.cpu_milli;
    key->num_gpu = task.num_gpu;
    key->gpu_milli = task.gpu_milli;
    key->owner = state.has_single_owner_gpus() && task.IsFractional() ? task.owner : 0;
    key->gpu_memory_mib = task.IsFractional() ? task.gpu_memory_mib : 0;
    return true;
  }

  // Memo entries: key of 16 + 2 x GPUs bytes (~32 for 8 GPUs) plus map overhead, about
  // 100 bytes each, so at most ~13 MB.
  static constexpr size_t kKeyHeader = 16;
  static constexpr size_t kMaxMemoEntries = size_t{1} << 17;

  std::shared_ptr<const TargetWorkload> workload_;
  FgdOptions options_;
  std::string name_;
  std::unique_ptr<FragmentationMeasure> measure_;
  std::vector<std::string> bound_models_;
  std::vector<int64_t> node_frag_;
  std::vector<uint64_t> node_frag_version_;
  std::unordered_map<ShapeKey, int32_t, ShapeKeyHash> shape_ids_;
  std::vector<std::vector<Entry>> cache_;
  std::vector<Entry>* current_ = nullptr;
  int32_t current_shape_ = -1;
  std::vector<int64_t> piece_waste_;  // ExpectedPieceWaste, when fill_theta > 0
  bool key_has_memory_ = false;       // the score depends on free memory
  double cpu_per_gpu_milli_ = 0;      // target workload's GPU tasks: CPU milli per GPU milli
  double memory_per_gpu_milli_ = 0;   // and memory MiB per GPU milli
  std::unordered_map<std::string, MemoValue> memo_;
  std::string key_;                   // scratch: the key being looked up
  std::array<int32_t, 64> sorted_{};  // scratch: the node's free shares, descending
  uint64_t sorted_held_ = 0;          // scratch: positions of sorted_ another owner holds
};

}  // namespace

std::vector<int64_t> ExpectedPieceWaste(const TargetWorkload& workload, double theta) {
  double total = 0;
  std::vector<std::pair<int32_t, double>> fractional;  // (gpu_milli, weight)
  for (const TargetShape& t : workload.shapes()) {
    total += static_cast<double>(t.weight);
    if (t.num_gpu == 1 && t.gpu_milli > 0 && t.gpu_milli < 1000) {
      fractional.emplace_back(t.gpu_milli, static_cast<double>(t.weight));
    }
  }
  std::vector<double> w(1001, 0.0);
  for (int32_t r = 1; r < 1000; ++r) {
    double fit = 0, next = 0;
    for (const auto& [milli, weight] : fractional) {
      if (milli > r) continue;
      fit += weight;
      next += weight * w[static_cast<size_t>(r - milli)];
    }
    const double p = fit > 0 && total > 0 && theta > 0 ? std::min(1.0, fit / total / theta) : 0;
    w[static_cast<size_t>(r)] = (1 - p) * r + (fit > 0 ? p * next / fit : 0);
  }
  std::vector<int64_t> tenths(w.size());
  for (size_t r = 0; r < w.size(); ++r) tenths[r] = std::llround(w[r] * 10);
  return tenths;
}

std::shared_ptr<const TargetWorkload> GenericTargetWorkload() {
  static const auto kGeneric = std::make_shared<const TargetWorkload>(std::vector<TargetShape>{
      {0, 1, 1000, {}, 1},
      {0, 2, 1000, {}, 1},
      {0, 4, 1000, {}, 1},
      {0, 8, 1000, {}, 1},
      {0, 1, 250, {}, 1},
      {0, 1, 500, {}, 1},
  });
  return kGeneric;
}

std::unique_ptr<ScorePlugin> MakeFgdScore(const PolicyConfig& config, const FgdOptions& options,
                                          std::string name) {
  auto workload = config.target_workload ? config.target_workload : GenericTargetWorkload();
  if (options.memory_aware) {
    workload = std::make_shared<const TargetWorkload>(workload->memory_shapes());
  }
  if (options.demand_weighted) {
    std::vector<TargetShape> shapes = workload->shapes();
    for (auto& s : shapes) {
      s.weight *= std::max<int64_t>(100, int64_t{s.num_gpu} * s.gpu_milli);
    }
    workload = std::make_shared<const TargetWorkload>(std::move(shapes));
  }
  return std::make_unique<FgdScore>(std::move(workload), options, std::move(name));
}

std::unique_ptr<ScorePlugin> MakeFgdScore(const PolicyConfig& config) {
  return MakeFgdScore(config, FgdOptions{}, "fgd");
}

}  // namespace gpupool::sched
