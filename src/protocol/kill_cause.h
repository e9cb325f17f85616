// Why a task was killed: a field of a task's end (`Event::kill_cause`, on the wire
// "kill_cause"), so that the controller builds the job's reason from it instead of
// parsing the node's words. The one definition of the names; the agent's shim decides
// the cause (agent/shim.cc), the controller keeps its name with the task
// (jobs::TaskStatus::kill_cause) and shows it (`gpupool show`, the job JSON).
// Plain functions; thread-safe.
#pragma once

#include <optional>
#include <string_view>

namespace gpupool::protocol {

enum class KillCause {
  kNone,         // "none": nothing of gpupool's or the kernel's ended it (it ended itself)
  kOomKernel,    // "oom_kernel": the kernel's OOM killer, at the job's own memory limit
  kOomNode,      // "oom_node": the kernel's OOM killer, the node out of memory (no limit)
  kGpuMemWatch,  // "gpu_mem_watch": the agent's GPU memory watch (a share past its limit)
  kTimeLimit,    // "time_limit": the job's time limit
  kStopRequest,  // "stop_request": a stop asked of the node (cancel, preemption, gang end)
  kNodeLease,    // "node_lease": the node's lease ran out (it lost the controller, docs/health.md)
  kUnknown,      // "unknown": a name this build does not know (a newer agent's)
};

// "none", "oom_kernel", ...; never empty.
std::string_view KillCauseName(KillCause cause);
// The cause a name stands for; nullopt for any other text (the caller decides: the wire
// codec maps it to kUnknown, see agent_protocol.cc).
std::optional<KillCause> ParseKillCause(std::string_view name);

}  // namespace gpupool::protocol
