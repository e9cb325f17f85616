#include "controller/endpoint_access.h"

#include <cstdint>

namespace gpupool::controller {
namespace {

uint8_t KindBits(const Identity& who) {
  uint8_t bits = 0;
  switch (who.kind) {
    case CallerKind::kUser:
      bits = api::kUserBit;
      break;
    case CallerKind::kAdmin:
      bits = api::kAdminBit;
      break;
    case CallerKind::kNode:
      bits = api::kNodeBit;
      break;
    case CallerKind::kMetrics:
      bits = api::kMetricsBit;
      break;
  }
  if (who.any_local_agent) bits |= api::kLocalRootBit;
  return bits;
}

}  // namespace

bool IsPublic(std::string_view method, std::string_view path) {
  return api::AccessOf(method, path).anyone;
}

Status CheckAccess(const Identity& who, const api::Access& access, std::string_view call) {
  if (access.anyone || (access.callers & KindBits(who)) != 0) return Status::Ok();
  switch (who.kind) {
    case CallerKind::kNode:
      return Status::PermissionDenied("a node token (node " + who.node +
                                      ") may only call the agent endpoints /v1/agent/*, "
                                      "not " +
                                      std::string(call) + ": use a user token, or the Unix socket");
    case CallerKind::kMetrics:
      return Status::PermissionDenied(
          "a metrics token may only read aggregates (GET /v1/nodes, GET /v1/usage), not " +
          std::string(call) + ": use a user token, or the Unix socket");
    case CallerKind::kUser:
    case CallerKind::kAdmin:
      break;
  }
  return Status::PermissionDenied(std::string(access.refusal));
}

Status MayCall(const Identity& who, std::string_view method, std::string_view path) {
  return CheckAccess(who, api::AccessOf(method, path),
                     std::string(method) + " " + std::string(path));
}

Status ActAsNode(const Identity& who, std::string* node) {
  if (who.kind == CallerKind::kNode) {
    if (node->empty()) {
      *node = who.node;
    } else if (*node != who.node) {
      return Status::PermissionDenied("this token belongs to node " + who.node +
                                      "; it cannot act for node " + *node +
                                      ": give each node its own token (`gpupool token create "
                                      "--kind node --user " +
                                      *node + "`)");
    }
    return Status::Ok();
  }
  if (who.any_local_agent) return Status::Ok();
  return Status::PermissionDenied(
      "agent calls need a node token (`gpupool token create --kind node --user NODE`) or root "
      "on the Unix socket");
}

}  // namespace gpupool::controller
