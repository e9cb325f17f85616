#include "controller/agent_identity.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

namespace gpupool::controller::internal {

Status CheckAgentIdentity(const std::string& node, const CurrentAgent& current,
                          const std::string& id, int64_t now_us, int64_t node_timeout_us) {
  if (id.empty() || current.id.empty() || id == current.id) return Status::Ok();
  const int64_t ago_us = std::max<int64_t>(0, now_us - current.last_seen_us);
  if (!current.up || ago_us >= node_timeout_us) {
    spdlog::warn("node {}: taken over by another agent (its agent at {} stopped polling)", node,
                 current.address);
    return Status::Ok();
  }
  char ago[32];
  std::snprintf(ago, sizeof ago, "%.1f s", static_cast<double>(ago_us) / 1e6);
  const std::string when =
      current.heard ? "last poll " + std::string(ago) + " ago"
                    : "registered before the controller restarted, " + std::string(ago) + " ago";
  return Status::AlreadyExists(
      "node " + node + " is run by another agent (at " + current.address + ", " + when +
      "; another machine or state directory): give this agent another --node-name, or "
      "stop the other agent first (a node whose agent stopped polling for the node timeout, " +
      std::to_string(node_timeout_us / 1'000'000) + " s, may be taken over)");
}

std::string RemoteIp(const std::string& remote) {
  if (remote.empty() || remote == "unix") return "";
  if (remote.front() == '[') {
    const auto close = remote.find(']');
    return close == std::string::npos ? "" : remote.substr(1, close - 1);
  }
  const auto colon = remote.rfind(':');
  return colon == std::string::npos ? remote : remote.substr(0, colon);
}

}  // namespace gpupool::controller::internal
