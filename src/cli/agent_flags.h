// The agent's flags that `gpupool agent` and `gpupool up` share (container jobs, GPU
// shares, the health program, the disk watch), and how they become the agent's options.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "agent/runtime/node_agent.h"
#include "common/status.h"

namespace gpupool::cli {

// How the agent runs container jobs: `agent` and `up` share these flags.
struct ContainerFlags {
  bool allow_unisolated_devices = false;
  bool shared_dev_shm = false;
  std::string cdi_kind = "gpupool.local/gpu";
  std::string dev_root = "/dev";
  std::string podman = "podman";
  std::vector<std::string> podman_args;
  // GPU shares (docs/sharing.md).
  std::string gpu_enforcement = "auto";
  std::string mps_control;
  std::string dmem_capacity = "/sys/fs/cgroup/dmem.capacity";
  std::string gpu_mem_slack = "1G";  // the GPU memory watch's slack, or "off"
  // The node's health program (docs/health.md).
  std::string health_check;
  int health_check_interval = 300;
  int health_check_timeout = 60;
  // The disk watch (docs/health.md).
  std::string disk_min_free = "auto";
  int disk_check_interval = 10;
  // What the node offers jobs instead of the host's CPUs and memory (fake nodes).
  std::string fake_cpus;
  std::string fake_mem;
};

void AddContainerFlags(CLI::App* cmd, ContainerFlags* f);
// Fills `o` from `f`; an error names the flag and the fix.
Status ApplyContainerFlags(const ContainerFlags& f, agent::NodeAgentOptions* o);
// --disk-min-free: a size (2G), a percentage (5%), auto or off (0 is off too).
Result<agent::DiskMinFree> ParseDiskMinFree(const std::string& text);

}  // namespace gpupool::cli
