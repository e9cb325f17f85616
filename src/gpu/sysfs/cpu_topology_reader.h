// Reads a node's CPU topology (gpu/cpu_topology.h) from sysfs below an injectable root,
// so tests and `gpupool gpus` on a fake tree run the real code.
#pragma once

#include <string>

#include "common/status.h"
#include "gpu/cpu_topology.h"

namespace gpupool::gpu {

// The online CPUs (<sysfs_root>/devices/system/cpu/online) grouped by core
// (topology/core_cpus_list, else thread_siblings_list), package (package_cpus_list,
// else core_siblings_list), die, cluster, L3 cache (cache/index*/ of level 3) and NUMA
// node (devices/system/node/node*/cpulist), each set cut down to online CPUs.
// kUnavailable when sysfs does not describe the CPUs (no online list, an online CPU
// without core or package); kInvalidArgument when one of those files is garbled.
Result<CpuTopology> ReadCpuTopology(const std::string& sysfs_root);

}  // namespace gpupool::gpu
