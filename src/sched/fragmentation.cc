#include "sched/fragmentation.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>

namespace gpupool::sched {

TargetWorkload::TargetWorkload(std::vector<TargetShape> shapes) : shapes_(std::move(shapes)) {
  for (const auto& s : shapes_) total_weight_ += s.weight;
  memory_shapes_ = shapes_;
}

namespace {

// The most popular distinct shapes of `tasks` (see FromTasks); memory is part of the
// shape only when `with_memory`.
std::vector<TargetShape> PopularShapes(const std::vector<Task>& tasks, double coverage,
                                       bool with_memory) {
  using Key = std::tuple<int32_t, int32_t, int64_t, std::vector<std::string>, int64_t>;
  std::map<Key, int64_t> counts;
  for (const Task& t : tasks) {
    ++counts[Key{t.num_gpu, t.gpu_milli, t.cpu_milli, t.gpu_models,
                 with_memory ? t.memory_mib : 0}];
  }
  std::vector<TargetShape> all;
  all.reserve(counts.size());
  for (const auto& [k, c] : counts) {
    all.push_back(
        {std::get<2>(k), std::get<0>(k), std::get<1>(k), std::get<3>(k), c, std::get<4>(k)});
  }
  // Stable: equal counts keep the map's (num_gpu, gpu_milli, cpu, models) order.
  std::stable_sort(all.begin(), all.end(),
                   [](const TargetShape& a, const TargetShape& b) { return a.weight > b.weight; });
  const double needed = coverage * static_cast<double>(tasks.size());
  std::vector<TargetShape> kept;
  int64_t covered = 0;
  for (auto& s : all) {
    if (static_cast<double>(covered) >= needed) break;
    covered += s.weight;
    kept.push_back(std::move(s));
  }
  return kept;
}

}  // namespace

TargetWorkload TargetWorkload::FromTasks(const std::vector<Task>& tasks, double coverage) {
  TargetWorkload w(PopularShapes(tasks, coverage, false));
  w.memory_shapes_ = PopularShapes(tasks, coverage, true);
  return w;
}

FragmentationMeasure::FragmentationMeasure(const TargetWorkload& workload,
                                           const std::vector<std::string>& models)
    : total_weight_(workload.total_weight()) {
  for (const auto& s : workload.shapes()) {
    Shape sh{s.cpu_milli, s.num_gpu, s.gpu_milli, s.weight, s.memory_mib, {}};
    sh.model_allowed.resize(models.size(), 1);
    if (!s.gpu_models.empty()) {
      for (size_t m = 0; m < models.size(); ++m) {
        sh.model_allowed[m] =
            std::find(s.gpu_models.begin(), s.gpu_models.end(), models[m]) != s.gpu_models.end();
      }
    }
    shapes_.push_back(std::move(sh));
  }
}

int64_t FragmentationMeasure::ScaledNode(int32_t model_id, int64_t cpu_free_milli,
                                         const int32_t* gpu_free, int32_t num_gpus,
                                         int64_t memory_free_mib) const {
  int64_t free_total = 0;
  for (int32_t i = 0; i < num_gpus; ++i) free_total += gpu_free[i];
  if (free_total == 0) return 0;
  int64_t sum = 0;
  for (const Shape& s : shapes_) {
    int64_t frag = free_total;
    const bool model_ok = model_id >= 0 && static_cast<size_t>(model_id) < s.model_allowed.size() &&
                          s.model_allowed[static_cast<size_t>(model_id)];
    if (s.gpu_milli > 0 && model_ok && cpu_free_milli >= s.cpu_milli &&
        memory_free_mib >= s.memory_mib) {
      int32_t fitting = 0;
      int64_t small = 0;
      for (int32_t i = 0; i < num_gpus; ++i) {
        if (gpu_free[i] >= s.gpu_milli) {
          ++fitting;
        } else {
          small += gpu_free[i];
        }
      }
      if (fitting >= s.num_gpu) frag = small;
    }
    sum += s.weight * frag;
  }
  return sum;
}

int64_t FragmentationMeasure::ScaledMigNode(const NodeState& n, const int32_t* gpu_free,
                                            int64_t cpu_free_milli, int64_t memory_free_mib) const {
  const int32_t num_gpus = n.num_gpus();
  if (n.whole_only_gpus == 0) {
    return ScaledNode(n.model_id, cpu_free_milli, gpu_free, num_gpus, memory_free_mib);
  }
  std::array<int64_t, 64> weighted{};  // each GPU's free part in physical thousandths
  int64_t free_total = 0;
  for (int32_t i = 0; i < num_gpus; ++i) {
    weighted[static_cast<size_t>(i)] = gpu_free[i] * InstanceWeightMilli(n, i) / 1000;
    free_total += weighted[static_cast<size_t>(i)];
  }
  if (free_total == 0) return 0;
  int64_t sum = 0;
  for (const Shape& s : shapes_) {
    int64_t frag = free_total;
    const bool model_ok = n.model_id >= 0 &&
                          static_cast<size_t>(n.model_id) < s.model_allowed.size() &&
                          s.model_allowed[static_cast<size_t>(n.model_id)];
    if (s.gpu_milli > 0 && model_ok && cpu_free_milli >= s.cpu_milli &&
        memory_free_mib >= s.memory_mib) {
      const bool share = s.gpu_milli < 1000;
      const int64_t need = (int64_t{s.gpu_milli} * n.gpu_memory_mib + 999) / 1000;
      int32_t fitting = 0;
      int64_t small = 0;
      for (int32_t i = 0; i < num_gpus; ++i) {
        const bool usable = (n.whole_only_gpus >> i & 1) != 0
                                ? share && gpu_free[i] == 1000 &&
                                      (n.device_memory_mib.empty()
                                           ? n.gpu_memory_mib
                                           : n.device_memory_mib[static_cast<size_t>(i)]) >= need
                                : gpu_free[i] >= s.gpu_milli;
        if (usable) {
          ++fitting;
        } else {
          small += weighted[static_cast<size_t>(i)];
        }
      }
      if (fitting >= s.num_gpu) frag = small;
    }
    sum += s.weight * frag;
  }
  return sum;
}

int64_t FragmentationMeasure::ScaledCluster(const ClusterState& state) const {
  int64_t sum = 0;
  for (const NodeState& n : state.nodes()) sum += ScaledNode(n);
  return sum;
}

double FragmentationMeasure::ClusterRatio(const ClusterState& state) const {
  const int64_t free_gpu = state.TotalFree().gpu_milli;
  return free_gpu == 0 ? 0.0 : ClusterMilli(state) / static_cast<double>(free_gpu);
}

}  // namespace gpupool::sched
