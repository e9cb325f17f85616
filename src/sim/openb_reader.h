// Readers for the Alibaba openb trace (cluster-trace-gpu-v2023) CSV files.
//
// Node list: `sn,cpu_milli,memory_mib,gpu,model` and optionally `mig` (a MIG layout cutting
// every GPU of the node into instances, sim/mig_layout.h; empty = no MIG). Pod list:
// `name,cpu_milli,memory_mib, num_gpu,gpu_milli` and optionally `gpu_spec` (allowed models,
// '|'-separated; empty = any) and further columns, which are ignored. Columns are found by name, in
// any order. Bad input stops with the file, line and field named: a missing column, a non-numeric
// or negative value, gpu_milli above 1000, a fractional share with num_gpu > 1.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/task.h"
#include "sim/csv_table.h"

namespace gpupool::sim {

Result<std::vector<sched::NodeSpec>> ReadOpenbNodes(const std::string& path);
Result<std::vector<sched::NodeSpec>> ParseOpenbNodes(const CsvTable& table);

Result<std::vector<sched::Task>> ReadOpenbPods(const std::string& path);
Result<std::vector<sched::Task>> ParseOpenbPods(const CsvTable& table);

// The workload name used in result files: the file name without directory and ".csv"
// ("openb_pod_list_default").
std::string WorkloadName(const std::string& pods_path);

}  // namespace gpupool::sim
