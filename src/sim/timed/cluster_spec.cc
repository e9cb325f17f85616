#include "sim/timed/cluster_spec.h"

#include <fmt/format.h>

#include "common/strings.h"
#include "sim/mig_layout.h"

namespace gpupool::sim {
namespace {

constexpr int64_t kCpuMilliPerGpu = 8000;
constexpr int64_t kMemoryMibPerGpu = 65536;
constexpr int64_t kMaxNodes = 1'000'000;

Status SpecError(std::string_view group, std::string_view what) {
  return Status::InvalidArgument(fmt::format(
      "cluster spec '{}': {}; expected COUNTxGPUS[:MODEL[:CPU_MILLI[:MEMORY_MIB]]][:mig=LAYOUT], "
      "e.g. 100x8:V100 or 20x8:A100:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb",
      SanitizeUtf8(group.substr(0, 60)), what));
}

}  // namespace

Result<std::vector<sched::NodeSpec>> ParseClusterSpec(std::string_view spec) {
  std::vector<sched::NodeSpec> nodes;
  if (Trim(spec).empty()) return SpecError(spec, "empty");
  for (const std::string& raw : Split(spec, ',')) {
    std::string_view group = Trim(raw);
    std::vector<std::string> parts = Split(group, ':');
    std::optional<MigLayout> mig;
    if (parts.size() > 1 && StartsWith(Trim(parts.back()), "mig=")) {
      Result<MigLayout> layout = ParseMigLayout(Trim(parts.back()).substr(4));
      if (!layout.ok()) return SpecError(group, layout.status().message());
      mig = *std::move(layout);
      parts.pop_back();
    }
    const size_t x = parts[0].find('x');
    if (x == std::string::npos) return SpecError(group, "no 'x' between node count and GPUs");
    std::optional<int64_t> count = ParseInt64(Trim(std::string_view(parts[0]).substr(0, x)));
    std::optional<int64_t> gpus = ParseInt64(Trim(std::string_view(parts[0]).substr(x + 1)));
    if (!count || *count < 1 || *count > kMaxNodes) return SpecError(group, "bad node count");
    if (!gpus || *gpus < 0 || *gpus > 1024) return SpecError(group, "bad GPUs per node");
    if (parts.size() > 4) return SpecError(group, "too many ':' fields");
    std::string model = parts.size() > 1 ? std::string(Trim(parts[1])) : "GPU";
    if (model.empty()) model = "GPU";
    int64_t cpu = std::max<int64_t>(1000, kCpuMilliPerGpu * *gpus);
    int64_t mem = std::max<int64_t>(kMemoryMibPerGpu, kMemoryMibPerGpu * *gpus);
    if (parts.size() > 2) {
      std::optional<int64_t> v = ParseInt64(Trim(parts[2]));
      if (!v || *v < 0) return SpecError(group, "bad CPU milli");
      cpu = *v;
    }
    if (parts.size() > 3) {
      std::optional<int64_t> v = ParseInt64(Trim(parts[3]));
      if (!v || *v < 0) return SpecError(group, "bad memory MiB");
      mem = *v;
    }
    if (static_cast<int64_t>(nodes.size()) + *count > kMaxNodes) {
      return SpecError(group, "more than 1,000,000 nodes in total");
    }
    for (int64_t i = 0; i < *count; ++i) {
      sched::NodeSpec n;
      n.name = fmt::format("node-{:04}", nodes.size());
      n.cpu_milli = cpu;
      n.memory_mib = mem;
      n.num_gpus = static_cast<int32_t>(*gpus);
      n.gpu_model = *gpus > 0 ? model : "";
      if (mig) {
        if (*gpus == 0) return SpecError(group, "a MIG layout for nodes without GPUs");
        if (Status s = ApplyMigLayout(*mig, n); !s.ok()) return SpecError(group, s.message());
      }
      nodes.push_back(std::move(n));
    }
  }
  return nodes;
}

Result<sched::ClusterState> BuildCluster(const std::vector<sched::NodeSpec>& nodes) {
  if (nodes.empty())
    return Status::InvalidArgument("the cluster has no nodes; describe at least one");
  sched::ClusterState cluster;
  for (const sched::NodeSpec& n : nodes) {
    GP_RETURN_IF_ERROR(cluster.AddNode(n).WithContext(fmt::format("node '{}'", n.name)));
  }
  return cluster;
}

}  // namespace gpupool::sim
