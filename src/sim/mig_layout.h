// MIG layouts for simulated GPUs: "3g.40gb+2g.20gb+1g.10gb+1g.10gb" cuts every GPU of a
// node into those instances, which the scheduling core then treats as whole-only GPUs
// (sched/cluster_state.h, "Whole-only GPUs"): a share is granted the smallest idle
// instance whose memory fits its need (gpu_memory_mib, else its share of the GPU's
// memory), and a whole-GPU task never lands on one.
//
// A profile is NVIDIA's `<compute slices>g.<memory GB>gb` (media-extension variants
// such as 1g.10gb+me are written without `+me`: they schedule alike). The memory sizes name the GPU
// they belong to (the family): 24 GB (A30), 40 GB (A100 40GB), 80 GB (A100 80GB, H100), 94 GB (H100
// NVL), 141 GB (H200), 180 GB (B200); a layout whose profiles all exist on several (1g.10gb: 40 and
// 80 GB) is taken for the largest. Every profile of one layout must be of one family, and the
// instances must fit one GPU at the placements the hardware allows (memory slices of
// 1, 2, 4 or 8 at their allowed starts, at most 7 compute slices). The GPU's memory is
// the family's (80 GB = 81,920 MiB), an instance's the GB in its name x 1,024 MiB.
//
// Accounting (docs/sim.md, "MIG layouts"): an instance weighs its memory's part of the
// GPU (weight = 1000 x instance MiB / GPU MiB); memory left out of every instance is
// no capacity.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/fragmentation.h"

namespace gpupool::sim {

struct MigInstance {
  std::string profile;  // "3g.40gb"
  int32_t compute_slices = 0;
  int32_t memory_slices = 0;
  int64_t memory_mib = 0;
};

struct MigLayout {
  std::string text;            // as given, normalised ("3g.40gb+1g.10gb")
  int64_t gpu_memory_mib = 0;  // the family's GPU
  std::vector<MigInstance> instances;
};

// Parses "PROFILE[+PROFILE...]"; errors name the bad profile and what is allowed.
Result<MigLayout> ParseMigLayout(std::string_view text);

// Cuts every GPU of `node` into the layout's instances: num_gpus becomes GPUs x
// instances (at most 64), each a whole-only GPU with its memory, and gpu_memory_mib the
// family's. A node whose GPUs are already cut is refused.
Status ApplyMigLayout(const MigLayout& layout, sched::NodeSpec& node);

// The node's GPU capacity and use in thousandths of physical GPUs (instances by weight,
// sched::InstanceWeightMilli). Their fragmentation: FragmentationMeasure::ScaledMigNode.
int64_t NodeGpuCapacityMilli(const sched::NodeState& node);
int64_t NodeGpuUsedMilli(const sched::NodeState& node);
int64_t SpecGpuCapacityMilli(const sched::NodeSpec& node);

}  // namespace gpupool::sim
