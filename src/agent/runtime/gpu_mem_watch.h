// The agent's GPU memory watch (docs/sharing.md, "The GPU memory watch"): which GPU
// shares used more device memory than they may, from one telemetry round.
//
// A share's limit on its GPU is its memory (LaunchSpec::share_memory_bytes: its
// --gpu-mem, or its fraction of the GPU's memory); its use is what the GPU's telemetry
// lists for the processes whose cgroup is the job's (JobOfProcess). A share that uses more
// than its limit plus the node's slack (room for the CUDA context, which a framework's
// own cap leaves out) is over. Shares on MIG instances are not watched (the hardware
// holds them, and NVML does not list a MIG instance's processes' memory on the GPU);
// neither are whole GPUs, which nobody shares. One job's shares on one GPU (tasks of a
// gang) are counted together against the sum of their limits. A pure function: the
// agent loop stops the runs it names (AgentLoop::TelemetryRound).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/run_id.h"
#include "protocol/agent_protocol.h"

namespace gpupool::agent {

// One running share: its run, its GPU (runtime index) and what it may hold there.
struct WatchedShare {
  RunId run;
  int gpu_index = -1;
  uint64_t limit_bytes = 0;
  std::string enforcement;  // LaunchSpec::share_enforcement, for the message
};

// Shares over their memory: every run of one job on one GPU, and why, in words.
struct MemOverrun {
  std::vector<RunId> runs;
  int gpu_index = -1;
  std::string reason;
};

// The shares of `shares` whose processes, in `round` (one sample per GPU, processes with
// their jobs), use more than their limit plus `slack_bytes`. A GPU without a sample in
// the round, or whose processes' memory is not reported, finds nothing over.
std::vector<MemOverrun> FindMemOverruns(const std::vector<protocol::GpuTelemetry>& round,
                                        const std::vector<WatchedShare>& shares,
                                        uint64_t slack_bytes);

}  // namespace gpupool::agent
