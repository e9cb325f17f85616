// A node's CPU topology, and Slurm's numbering of its cores.
//
// The kernel numbers hardware threads ("logical CPUs", the ids of a GPU's local CPU
// list); Slurm numbers cores. gres.conf `Cores=` takes Slurm's abstract core indices,
// which "do not necessarily match the logical CPU ids" (Slurm's gres.conf manual):
// core 0 is the first core of the first socket, core 1 the second, and so on, in the
// order hwloc lists them (its logical index, "Core L#" in `lstopo -l`). slurmd builds
// that order in src/slurmd/common/xcpuinfo.c (xcpuinfo_hwloc_topo_get: Package, then the
// cores below it, then their PUs) and maps a kernel CPU list to it with
// xcpuinfo_mac_to_abs, which the NVML and ROCm SMI autodetection use for Cores=.
//
// hwloc's order is a depth-first walk of the machine's tree, each object's children
// sorted by their lowest CPU. Slurm keeps packages, dies, NUMA nodes (as groups), L3
// caches, clusters and cores in that tree and filters out L1/L2 caches, so those are
// the CPU sets that order cores here; checked against Debian's slurmd 22.05 on fake
// sysfs trees (src/gpu/export/gres_slurmd_test.cc).
//
// Plain value types and pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::gpu {

// The highest CPU id accepted in a CPU list; Linux's NR_CPUS tops out at 8192.
inline constexpr int kMaxCpuId = 8191;

// Parses a kernel CPU list ("0-3,8,10-11", as sysfs *_list files and local_cpulist
// write it) into sorted, distinct ids. nullopt when it is not one, or names a CPU above
// kMaxCpuId. The empty list is valid.
std::optional<std::vector<int>> ParseCpuList(std::string_view text);

// The kernel CPU list of sorted, distinct ids: {0,1,2,3,8} -> "0-3,8".
std::string FormatCpuList(const std::vector<int>& cpus);

// The online CPUs of a node as sets of kernel CPU ids, each sorted. Which set is which
// level does not matter for the order except packages (Slurm's sockets) and cores; the
// sets of one node nest or are disjoint, as hardware does.
struct CpuTopology {
  std::vector<std::vector<int>> packages;  // physical packages (sockets)
  std::vector<std::vector<int>> cores;     // a core's hardware threads
  std::vector<std::vector<int>> groups;    // dies, NUMA nodes, L3 caches, clusters
  friend bool operator==(const CpuTopology&, const CpuTopology&) = default;
};

// Slurm's numbering of one topology's cores.
class SlurmCoreNumbering {
 public:
  // InvalidArgument when `topology` cannot be numbered: no cores, a CPU in two cores or
  // two packages, a core outside every package or split across packages.
  static Result<SlurmCoreNumbering> Of(const CpuTopology& topology);

  // Slurm's core ids of the cores holding any CPU of `kernel_cpu_list`, as a list
  // ("0-27"). CPUs the topology lacks (offline ones) are skipped; "" when none is left.
  // InvalidArgument when the list does not parse.
  Result<std::string> CoresOf(std::string_view kernel_cpu_list) const;

  // The Slurm core id of kernel CPU `cpu`, or -1 when the topology lacks it.
  int CoreOf(int cpu) const;

  // The node's shape as `slurmd -C` prints it for slurm.conf:
  // "CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2".
  std::string SlurmConfLayout() const;

 private:
  std::vector<int> core_of_cpu_;  // indexed by kernel CPU id; -1 for unknown
  int cpus_ = 0;
  int sockets_ = 0;
  int cores_ = 0;
};

}  // namespace gpupool::gpu
