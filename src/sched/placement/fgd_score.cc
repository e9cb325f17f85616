#include "sched/placement/fgd_score.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_map>

#include "sched/placement/score_plugins.h"

namespace gpupool::sched {
namespace {

// Secondary key range for tie-breaking; the primary score is shifted above it.
constexpr int64_t kSecondaryRange = int64_t{1} << 20;

class FgdScore final : public ScorePlugin {
 public:
  FgdScore(std::shared_ptr<const TargetWorkload> workload, FgdOptions options, std::string name)
      : workload_(std::move(workload)), options_(options), name_(std::move(name)) {}

  std::string_view name() const override { return name_; }

  void PreScore(const ClusterState& state, const Task& task, const std::vector<int32_t>&) override {
    Bind(state);
    const ShapeKey key{task.cpu_milli, task.num_gpu, task.gpu_milli};
    auto [it, inserted] = shape_ids_.try_emplace(key, static_cast<int32_t>(cache_.size()));
    if (inserted) cache_.emplace_back();
    current_ = &cache_[static_cast<size_t>(it->second)];
    if (current_->size() != static_cast<size_t>(state.num_nodes())) {
      current_->assign(static_cast<size_t>(state.num_nodes()), Entry{});
    }
  }

  NodeScore Score(const ClusterState& state, const Task& task, int32_t node) override {
    Entry& e = (*current_)[static_cast<size_t>(node)];
    const NodeState& n = state.node(node);
    if (e.version != n.version) {
      Compute(n, static_cast<size_t>(node), task, &e);
      e.version = n.version;
    }
    return {node, e.score, e.gpus};
  }

 private:
  struct ShapeKey {
    int64_t cpu;
    int32_t num_gpu;
    int32_t gpu_milli;
    bool operator==(const ShapeKey&) const = default;
  };
  struct ShapeKeyHash {
    size_t operator()(const ShapeKey& k) const {
      return std::hash<int64_t>{}(k.cpu * 1000003 + k.num_gpu * 1009 + k.gpu_milli);
    }
  };
  struct Entry {
    uint64_t version = 0;  // 0 never matches: ClusterState versions start at 1
    int64_t score = 0;
    GpuMask gpus = 0;
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
  }

  int64_t NodeFrag(const NodeState& n, size_t index) {
    if (node_frag_version_[index] != n.version) {
      node_frag_[index] = measure_->ScaledNode(n);
      node_frag_version_[index] = n.version;
    }
    return node_frag_[index];
  }

  int64_t Primary(int64_t delta_scaled) const {
    if (!options_.integer_sigmoid) return delta_scaled;
    const double delta_milli = measure_->ToMilli(delta_scaled);
    return static_cast<int64_t>(1.0 / (1.0 + std::exp(-delta_milli / 1000.0)) *
                                static_cast<double>(options_.score_levels));
  }

  int64_t Combine(int64_t primary, const NodeState& n, const Task& task) const {
    if (!options_.tie_break_best_fit) return primary;
    // BestFit's measure of how full the node is after placement, in 0..kSecondaryRange.
    const double left =
        0.5 * static_cast<double>(n.cpu_free_milli - task.cpu_milli) / kMaxSpecCpuMilli +
        0.5 * static_cast<double>(n.gpu_free_total - task.TotalGpuMilli()) / kMaxSpecGpuMilli;
    const double full = std::clamp(1.0 - left, 0.0, 1.0);
    return primary * kSecondaryRange +
           static_cast<int64_t>(full * static_cast<double>(kSecondaryRange - 1));
  }

  void Compute(const NodeState& n, size_t index, const Task& task, Entry* e) {
    const int64_t before = NodeFrag(n, index);
    const int32_t g = n.num_gpus();
    std::array<int32_t, 64> after{};
    std::copy(n.gpu_free_milli.begin(), n.gpu_free_milli.end(), after.begin());
    const int64_t cpu_after = n.cpu_free_milli - task.cpu_milli;
    if (task.IsFractional()) {
      // Every GPU with enough free share is a candidate; GPUs with equal free shares give
      // equal results, so only the first of each value is evaluated (first index wins ties).
      bool have = false;
      std::array<int32_t, 64> tried{};
      int32_t num_tried = 0;
      for (int32_t i = 0; i < g; ++i) {
        const int32_t f = n.gpu_free_milli[static_cast<size_t>(i)];
        if (f < task.gpu_milli) continue;
        if (std::find(tried.begin(), tried.begin() + num_tried, f) != tried.begin() + num_tried) {
          continue;
        }
        tried[static_cast<size_t>(num_tried++)] = f;
        after[static_cast<size_t>(i)] = f - task.gpu_milli;
        const int64_t delta = before - measure_->ScaledNode(n.model_id, cpu_after, after.data(), g);
        after[static_cast<size_t>(i)] = f;
        const int64_t score = Combine(Primary(delta), n, task);
        if (!have || score > e->score) {
          have = true;
          e->score = score;
          e->gpus = GpuMask{1} << i;
        }
      }
      if (!have) {  // cannot happen after the filter; keep the entry harmless
        e->score = 0;
        e->gpus = 0;
      }
      return;
    }
    const GpuMask gpus = FirstIdleGpus(n, task.num_gpu);
    for (int32_t i = 0; i < g; ++i) {
      if (gpus & (GpuMask{1} << i)) after[static_cast<size_t>(i)] = 0;
    }
    const int64_t delta = before - measure_->ScaledNode(n.model_id, cpu_after, after.data(), g);
    e->score = Combine(Primary(delta), n, task);
    e->gpus = gpus;
  }

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
};

}  // namespace

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
