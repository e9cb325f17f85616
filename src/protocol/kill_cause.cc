#include "protocol/kill_cause.h"

#include <array>
#include <utility>

namespace gpupool::protocol {
namespace {

constexpr std::array<std::pair<KillCause, std::string_view>, 8> kNames = {{
    {KillCause::kNone, "none"},
    {KillCause::kOomKernel, "oom_kernel"},
    {KillCause::kOomNode, "oom_node"},
    {KillCause::kGpuMemWatch, "gpu_mem_watch"},
    {KillCause::kTimeLimit, "time_limit"},
    {KillCause::kStopRequest, "stop_request"},
    {KillCause::kNodeLease, "node_lease"},
    {KillCause::kUnknown, "unknown"},
}};

}  // namespace

std::string_view KillCauseName(KillCause cause) {
  for (const auto& [c, name] : kNames) {
    if (c == cause) return name;
  }
  return "unknown";
}

std::optional<KillCause> ParseKillCause(std::string_view name) {
  for (const auto& [c, n] : kNames) {
    if (n == name) return c;
  }
  return std::nullopt;
}

}  // namespace gpupool::protocol
