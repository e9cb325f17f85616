#include "gpu/cpu_topology.h"

#include <algorithm>
#include <map>

#include "common/strings.h"

namespace gpupool::gpu {
namespace {

constexpr size_t kMaxListedCpus = size_t{4} * (kMaxCpuId + 1);

bool IsSortedCpuSet(const std::vector<int>& set) {
  if (set.empty()) return false;
  for (size_t i = 0; i < set.size(); ++i) {
    if (set[i] < 0 || set[i] > kMaxCpuId) return false;
    if (i > 0 && set[i] <= set[i - 1]) return false;
  }
  return true;
}

bool Contains(const std::vector<int>& set, int cpu) {
  return std::binary_search(set.begin(), set.end(), cpu);
}

// Which set of `sets` holds each CPU; InvalidArgument when a CPU is in two of them.
Result<std::map<int, size_t>> Owners(const std::vector<std::vector<int>>& sets,
                                     std::string_view what) {
  std::map<int, size_t> owner;
  for (size_t i = 0; i < sets.size(); ++i) {
    if (!IsSortedCpuSet(sets[i])) {
      return Status::InvalidArgument(std::string(what) + " '" + FormatCpuList(sets[i]) +
                                     "' is not a sorted, non-empty set of CPU ids");
    }
    for (int cpu : sets[i]) {
      if (!owner.emplace(cpu, i).second) {
        return Status::InvalidArgument("CPU " + std::to_string(cpu) + " is in two " +
                                       std::string(what) + "s");
      }
    }
  }
  return owner;
}

}  // namespace

std::optional<std::vector<int>> ParseCpuList(std::string_view text) {
  text = Trim(text);
  std::vector<int> cpus;
  if (text.empty()) return cpus;
  for (const std::string& range : Split(text, ',')) {
    const size_t dash = range.find('-');
    const auto first = ParseUint64(std::string_view(range).substr(0, dash));
    std::optional<uint64_t> last = first;
    if (dash != std::string::npos) last = ParseUint64(std::string_view(range).substr(dash + 1));
    if (!first || !last || *last < *first || *last > static_cast<uint64_t>(kMaxCpuId)) {
      return std::nullopt;
    }
    for (uint64_t c = *first; c <= *last; ++c) cpus.push_back(static_cast<int>(c));
    // Bounded by kMaxCpuId per range; a list repeating a huge range is cut short here.
    if (cpus.size() > kMaxListedCpus) return std::nullopt;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

Result<SlurmCoreNumbering> SlurmCoreNumbering::Of(const CpuTopology& topology) {
  if (topology.cores.empty()) return Status::InvalidArgument("the CPU topology has no cores");
  GP_ASSIGN_OR_RETURN(auto core_owner, Owners(topology.cores, "core"));
  GP_ASSIGN_OR_RETURN(auto package_owner, Owners(topology.packages, "package"));
  for (const std::vector<int>& g : topology.groups) {
    if (!IsSortedCpuSet(g)) {
      return Status::InvalidArgument("CPU group '" + FormatCpuList(g) +
                                     "' is not a sorted, non-empty set of CPU ids");
    }
  }

  // Each core's place in hwloc's tree: the CPU sets holding it, largest first, named by
  // their lowest CPU. Comparing two such lists decides at the first sets that differ,
  // which are the two children of the smallest set holding both cores: exactly the order
  // of a depth-first walk whose children are sorted by lowest CPU.
  struct Keyed {
    std::vector<int> key;
    size_t core;
  };
  std::vector<Keyed> keyed;
  std::vector<bool> package_used(topology.packages.size(), false);
  for (size_t i = 0; i < topology.cores.size(); ++i) {
    const std::vector<int>& core = topology.cores[i];
    auto package = package_owner.find(core.front());
    if (package == package_owner.end()) {
      return Status::InvalidArgument("core '" + FormatCpuList(core) + "' is in no package");
    }
    const std::vector<int>& pkg = topology.packages[package->second];
    package_used[package->second] = true;
    std::vector<const std::vector<int>*> sets = {&pkg, &core};
    for (int cpu : core) {
      if (!Contains(pkg, cpu)) {
        return Status::InvalidArgument("core '" + FormatCpuList(core) + "' spans two packages");
      }
    }
    for (const std::vector<int>& g : topology.groups) {
      if (Contains(g, core.front())) sets.push_back(&g);
    }
    std::stable_sort(sets.begin(), sets.end(),
                     [](const auto* a, const auto* b) { return a->size() > b->size(); });
    Keyed k{{}, i};
    for (size_t s = 0; s < sets.size(); ++s) {
      if (s > 0 && *sets[s] == *sets[s - 1]) continue;  // one object, seen at two levels
      k.key.push_back(sets[s]->front());
    }
    keyed.push_back(std::move(k));
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const Keyed& a, const Keyed& b) { return a.key < b.key; });

  SlurmCoreNumbering n;
  n.core_of_cpu_.assign(static_cast<size_t>(core_owner.rbegin()->first) + 1, -1);
  for (size_t id = 0; id < keyed.size(); ++id) {
    for (int cpu : topology.cores[keyed[id].core]) {
      n.core_of_cpu_[static_cast<size_t>(cpu)] = static_cast<int>(id);
    }
  }
  n.cpus_ = static_cast<int>(core_owner.size());
  n.cores_ = static_cast<int>(topology.cores.size());
  n.sockets_ = static_cast<int>(std::count(package_used.begin(), package_used.end(), true));
  return n;
}

int SlurmCoreNumbering::CoreOf(int cpu) const {
  if (cpu < 0 || static_cast<size_t>(cpu) >= core_of_cpu_.size()) return -1;
  return core_of_cpu_[static_cast<size_t>(cpu)];
}

Result<std::string> SlurmCoreNumbering::CoresOf(std::string_view kernel_cpu_list) const {
  const std::optional<std::vector<int>> cpus = ParseCpuList(kernel_cpu_list);
  if (!cpus) {
    return Status::InvalidArgument("'" + std::string(kernel_cpu_list.substr(0, 64)) +
                                   "' is not a kernel CPU list like 0-23,48-71");
  }
  std::vector<int> cores;
  for (int cpu : *cpus) {
    if (const int core = CoreOf(cpu); core >= 0) cores.push_back(core);
  }
  std::sort(cores.begin(), cores.end());
  cores.erase(std::unique(cores.begin(), cores.end()), cores.end());
  return FormatCpuList(cores);
}

std::string SlurmCoreNumbering::SlurmConfLayout() const {
  // As slurmd -C derives them (xcpuinfo_hwloc_topo_get): whole-node counts divided down.
  const int sockets = std::max(sockets_, 1);
  const int cores = std::max(cores_, 1);
  return "CPUs=" + std::to_string(cpus_) + " Boards=1 SocketsPerBoard=" + std::to_string(sockets) +
         " CoresPerSocket=" + std::to_string(cores / sockets) +
         " ThreadsPerCore=" + std::to_string(cpus_ / cores);
}

}  // namespace gpupool::gpu
