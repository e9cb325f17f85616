// Clusters for time-driven runs: a synthetic spec such as "100x8:V100" (a node CSV, the
// openb node list sn,cpu_milli,memory_mib,gpu,model, is read by ReadOpenbNodes,
// sim/openb_reader.h).
//
// Spec grammar: GROUP[,GROUP...], GROUP = COUNTxGPUS[:MODEL[:CPU_MILLI[:MEMORY_MIB]]]
// [:mig=LAYOUT]; a MIG layout (sim/mig_layout.h) cuts every GPU of the group's nodes into
// its instances (the CPU and memory defaults count the GPUs, not the instances).
// Defaults: model "GPU", 8,000 CPU milli and 64 GiB of memory per GPU (at least one
// core and 64 GiB per node), so GPU-only traces are limited by GPUs. Nodes are named
// "node-0000", "node-0001", ... in spec order.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"

namespace gpupool::sim {

Result<std::vector<sched::NodeSpec>> ParseClusterSpec(std::string_view spec);
Result<sched::ClusterState> BuildCluster(const std::vector<sched::NodeSpec>& nodes);

}  // namespace gpupool::sim
