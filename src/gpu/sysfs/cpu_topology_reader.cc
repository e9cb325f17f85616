#include "gpu/sysfs/cpu_topology_reader.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "common/strings.h"
#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu {
namespace {

using CpuSet = std::vector<int>;

class Reader {
 public:
  explicit Reader(const std::string& root) : sysfs_(root) {}

  // The CPU list in `rel`: nullopt when absent, an error when garbled.
  Result<std::optional<CpuSet>> List(const std::string& rel) const {
    std::optional<std::string> text = sysfs_.ReadText(rel);
    if (!text) return std::optional<CpuSet>();
    std::optional<CpuSet> cpus = ParseCpuList(*text);
    if (!cpus) {
      return Status::InvalidArgument(sysfs_.Path(rel) + ": " + QuoteForMessage(*text) +
                                     " is not a CPU list like 0-23,48-71");
    }
    return cpus;
  }

  // The first of `names` (below `dir`) that exists; an Unavailable error naming `what`
  // when none does.
  Result<CpuSet> Required(const std::string& dir, std::initializer_list<const char*> names,
                          const char* what) const {
    for (const char* name : names) {
      GP_ASSIGN_OR_RETURN(auto set, List(dir + "/" + name));
      if (set) return *set;
    }
    return Status::Unavailable("the kernel does not say which " + std::string(what) + " " +
                               sysfs_.Path(dir) + " belongs to (no " + *names.begin() + ")");
  }

  const SysfsReader& sysfs() const { return sysfs_; }

 private:
  SysfsReader sysfs_;
};

// Adds `set` cut down to `online` to `into`, unless nothing is left.
void AddOnline(const CpuSet& set, const CpuSet& online, std::set<CpuSet>* into) {
  CpuSet kept;
  std::set_intersection(set.begin(), set.end(), online.begin(), online.end(),
                        std::back_inserter(kept));
  if (!kept.empty()) into->insert(std::move(kept));
}

bool IsNumbered(std::string_view name, std::string_view prefix) {
  if (!StartsWith(name, prefix) || name.size() == prefix.size()) return false;
  return std::all_of(name.begin() + static_cast<long>(prefix.size()), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Result<CpuTopology> ReadCpuTopology(const std::string& sysfs_root) {
  const Reader r(sysfs_root);
  const std::string cpu_dir = "devices/system/cpu";
  GP_ASSIGN_OR_RETURN(auto online, r.List(cpu_dir + "/online"));
  if (!online || online->empty()) {
    return Status::Unavailable("cannot read the online CPUs from " +
                               r.sysfs().Path(cpu_dir + "/online"));
  }

  std::set<CpuSet> cores;
  std::set<CpuSet> packages;
  std::set<CpuSet> groups;
  for (int cpu : *online) {
    const std::string dir = cpu_dir + "/cpu" + std::to_string(cpu);
    const std::string topo = dir + "/topology";
    GP_ASSIGN_OR_RETURN(auto core,
                        r.Required(topo, {"core_cpus_list", "thread_siblings_list"}, "core"));
    GP_ASSIGN_OR_RETURN(auto package,
                        r.Required(topo, {"package_cpus_list", "core_siblings_list"}, "package"));
    // Every CPU is in its own core and package, whatever a broken file claims.
    if (!std::binary_search(core.begin(), core.end(), cpu) ||
        !std::binary_search(package.begin(), package.end(), cpu)) {
      return Status::InvalidArgument(r.sysfs().Path(topo) + ": CPU " + std::to_string(cpu) +
                                     " is not in its own core or package list");
    }
    AddOnline(core, *online, &cores);
    AddOnline(package, *online, &packages);
    for (const char* name : {"die_cpus_list", "cluster_cpus_list"}) {
      GP_ASSIGN_OR_RETURN(auto set, r.List(topo + "/" + name));
      if (set) AddOnline(*set, *online, &groups);
    }
    // L1 and L2 caches do not order cores in Slurm's hwloc tree; L3 caches do.
    for (const std::string& index : r.sysfs().ListDir(dir + "/cache")) {
      if (!IsNumbered(index, "index")) continue;
      std::string cache = dir;
      cache += "/cache/";
      cache += index;
      if (r.sysfs().ReadText(cache + "/level") != "3") continue;
      GP_ASSIGN_OR_RETURN(auto set, r.List(cache + "/shared_cpu_list"));
      if (set) AddOnline(*set, *online, &groups);
    }
  }
  const std::string node_dir = "devices/system/node";
  for (const std::string& node : r.sysfs().ListDir(node_dir)) {
    if (!IsNumbered(node, "node")) continue;
    std::string cpulist = node_dir;
    cpulist += '/';
    cpulist += node;
    cpulist += "/cpulist";
    GP_ASSIGN_OR_RETURN(auto set, r.List(cpulist));
    if (set) AddOnline(*set, *online, &groups);
  }

  CpuTopology t;
  t.cores.assign(cores.begin(), cores.end());
  t.packages.assign(packages.begin(), packages.end());
  t.groups.assign(groups.begin(), groups.end());
  return t;
}

}  // namespace gpupool::gpu
