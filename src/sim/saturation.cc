#include "sim/saturation.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "sched/rng.h"
#include "sim/mig_layout.h"

namespace gpupool::sim {

using sched::ClusterState;
using sched::Task;

Result<SaturationInputs> SaturationInputs::Prepare(std::vector<sched::NodeSpec> nodes,
                                                   std::vector<Task> tasks) {
  SaturationInputs in;
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::stable_sort(tasks.begin(), tasks.end(),
                   [](const Task& a, const Task& b) { return a.name < b.name; });
  for (const auto& n : nodes) in.capacity_gpu_milli += SpecGpuCapacityMilli(n);
  for (const auto& t : tasks) in.trace_gpu_milli += t.TotalGpuMilli();
  if (in.capacity_gpu_milli == 0) {
    return Status::InvalidArgument("the node list has no GPUs; give a list of GPU nodes");
  }
  if (tasks.empty()) return Status::InvalidArgument("the pod list is empty; give some tasks");
  in.target =
      std::make_shared<const sched::TargetWorkload>(sched::TargetWorkload::FromTasks(tasks));
  in.nodes = std::move(nodes);
  in.tasks = std::move(tasks);
  return in;
}

SaturationWorkload BuildWorkload(const SaturationInputs& in, uint64_t seed, double tune) {
  sched::Rng rng(seed);
  SaturationWorkload w;
  w.order.reserve(in.tasks.size() * 2);
  for (const Task& t : in.tasks) w.order.push_back(&t);
  (void)rng.Next();  // the artifact draws one number before the shuffle
  rng.Shuffle(w.order);
  // Tune up: append uniformly drawn copies while the total stays within the target.
  // Like the artifact, the stop test adds the drawn task's per-GPU share.
  const auto target = static_cast<int64_t>(tune * static_cast<double>(in.capacity_gpu_milli));
  int64_t total = in.trace_gpu_milli;
  if (tune > 0 && !in.tasks.empty()) {
    while (true) {
      const Task* t = &in.tasks[static_cast<size_t>(rng.Uniform(in.tasks.size()))];
      if (total + t->gpu_milli > target) break;
      total += t->TotalGpuMilli();
      w.order.push_back(t);
    }
  }
  w.node_order.resize(in.nodes.size());
  for (size_t i = 0; i < in.nodes.size(); ++i) w.node_order[i] = static_cast<int32_t>(i);
  rng.Shuffle(w.node_order);
  return w;
}

Result<SaturationResult> RunSaturation(const SaturationInputs& in, const SaturationRun& run,
                                       const sched::PlacementPolicyRegistry& registry) {
  ClusterState state;
  for (const auto& n : in.nodes) GP_RETURN_IF_ERROR(state.AddNode(n));
  SaturationWorkload w = BuildWorkload(in, run.seed, run.tune);
  GP_RETURN_IF_ERROR(state.SetScanOrder(w.node_order));
  sched::PolicyConfig config;
  config.seed = run.seed;
  config.target_workload = in.target;
  GP_ASSIGN_OR_RETURN(auto policy, registry.Create(run.policy, config));

  // FGD's measure; on nodes with MIG instances in physical GPUs, an idle instance a piece
  // only the shares it holds may use (ScaledMigNode, equal to ScaledNode without them).
  // FGD's shapes carry no memory, so the node's free memory never counts.
  const sched::FragmentationMeasure measure(*in.target, state.models());
  auto node_fragmentation = [&](int32_t i) { return measure.ScaledMigNode(state.node(i)); };
  std::vector<int64_t> node_frag(static_cast<size_t>(state.num_nodes()));
  std::vector<int64_t> node_used(static_cast<size_t>(state.num_nodes()), 0);
  int64_t frag_sum = 0;
  int64_t used = 0;  // thousandths of physical GPUs
  for (int32_t i = 0; i < state.num_nodes(); ++i) {
    node_frag[static_cast<size_t>(i)] = node_fragmentation(i);
    frag_sum += node_frag[static_cast<size_t>(i)];
  }

  // Whether any node could ever host a shape; tasks come from few distinct shapes.
  std::map<std::tuple<int64_t, int64_t, int32_t, int32_t, std::vector<std::string>>, bool> hostable;
  auto ever_hostable = [&](const Task& t) {
    auto key = std::make_tuple(t.cpu_milli, t.memory_mib, t.num_gpu, t.gpu_milli, t.gpu_models);
    auto it = hostable.find(key);
    if (it != hostable.end()) return it->second;
    bool ok = false;
    for (int32_t i = 0; i < state.num_nodes() && !ok; ++i) ok = state.CouldEverHost(i, t);
    hostable.emplace(std::move(key), ok);
    return ok;
  };

  SaturationResult r;
  r.policy = run.policy;
  r.seed = run.seed;
  r.tasks = static_cast<int64_t>(w.order.size());
  CurveAccumulator curves(in.capacity_gpu_milli);
  int64_t arrived = 0;
  for (const Task* t : w.order) {
    arrived += t->TotalGpuMilli();
    sched::PlacementDecision d = policy->Place(state, *t);
    if (d.placed) {
      GP_RETURN_IF_ERROR(state.Allocate(*t, d.placement));
      const auto ni = static_cast<size_t>(d.placement.node);
      const int64_t f = node_fragmentation(d.placement.node);
      frag_sum += f - node_frag[ni];
      node_frag[ni] = f;
      const int64_t u = NodeGpuUsedMilli(state.node(d.placement.node));
      used += u - node_used[ni];
      node_used[ni] = u;
      ++r.placed;
      r.placed_gpu_milli += t->TotalGpuMilli();
    } else {
      ++r.failed;
      if (t->IsFractional()) {
        ++r.failed_shares;
      } else if (t->NeedsGpu()) {
        ++r.failed_whole;
      }
      if (!ever_hostable(*t)) ++r.never_placeable;
    }
    curves.Record(used, arrived, measure.ToMilli(frag_sum), in.capacity_gpu_milli - used);
    if (run.progress != nullptr) run.progress->fetch_add(1, std::memory_order_relaxed);
  }
  r.workload_gpu_milli = arrived;
  r.used_gpu_milli = used;
  r.capacity_gpu_milli = in.capacity_gpu_milli;
  r.curves = curves.Finish();
  return r;
}

std::string PublishedPolicyLabel(const std::string& policy) {
  static const std::map<std::string, std::string> kLabels = {{"random", "01-Random"},
                                                             {"dotprod", "02-DotProd"},
                                                             {"gpuclustering", "03-GpuClustering"},
                                                             {"gpupacking", "04-GpuPacking"},
                                                             {"bestfit", "05-BestFit"},
                                                             {"fgd", "06-FGD"}};
  auto it = kLabels.find(policy);
  return it != kLabels.end() ? it->second : "07-" + policy;
}

}  // namespace gpupool::sim
