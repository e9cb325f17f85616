#include "controller/endpoint_access.h"

#include <cstdint>
#include <utility>

namespace gpupool::controller {
namespace {

// Bits of the kinds a rule allows.
constexpr uint8_t kUserBit = 1;
constexpr uint8_t kAdminBit = 2;
constexpr uint8_t kNodeBit = 4;
constexpr uint8_t kMetricsBit = 8;
constexpr uint8_t kLocalRootBit = 16;  // root on the Unix socket, as a local agent

struct EndpointRule {
  std::string_view method;  // empty: any method
  std::string_view path;    // exact, or a prefix when it ends with '/'
  uint8_t kinds;
  std::string_view refusal;  // for users and admins whom the rule leaves out
};

// The first rule matching a request decides. Aggregates for metrics tokens; the agent
// protocol for node tokens only; tokens for admins; everything else for people.
constexpr EndpointRule kRules[] = {
    {"", "/v1/agent/", kNodeBit | kLocalRootBit,
     "the agent endpoints /v1/agent/* are for agents: use a node token (`gpupool token "
     "create --kind node --user NODE`), or root on the Unix socket"},
    {"GET", "/v1/nodes", kUserBit | kAdminBit | kMetricsBit, ""},
    {"", "/v1/nodes/", kAdminBit, "only admins drain and resume nodes"},
    {"PUT", "/v1/limits", kAdminBit, "only admins set limits"},
    {"GET", "/v1/usage", kUserBit | kAdminBit | kMetricsBit, ""},
    // Series of nodes and the pool for anyone; of a job for its owner (Api::Telemetry).
    {"GET", "/v1/telemetry", kUserBit | kAdminBit | kMetricsBit, ""},
    {"GET", "/metrics", kAdminBit | kMetricsBit,
     "/metrics is for metrics tokens and admins: ask an admin for a metrics token"},
    {"", "/v1/tokens", kAdminBit, "only admins manage tokens"},
    {"", "/v1/tokens/", kAdminBit, "only admins manage tokens"},
    {"", "/", kUserBit | kAdminBit, ""},  // jobs, logs, environments, whoami
};

// Answered to anyone, with or without a token (IsPublic).
constexpr std::pair<std::string_view, std::string_view> kPublic[] = {
    {"GET", "/healthz"},
    {"GET", "/readyz"},
    {"GET", "/v1/openapi.json"},
    // The dashboard's page, assets and sign-in (dashboard.h): what they show comes from the
    // API, which a session cookie authenticates as its token.
    {"GET", "/"},
    {"GET", "/ui/"},  // a prefix: /ui/app.js, /ui/session
    {"POST", "/ui/login"},
    {"POST", "/ui/logout"},
};

bool Matches(const EndpointRule& rule, std::string_view method, std::string_view path) {
  if (!rule.method.empty() && rule.method != method) return false;
  if (rule.path.back() == '/') return path.substr(0, rule.path.size()) == rule.path;
  return path == rule.path;
}

uint8_t KindBits(const Identity& who) {
  uint8_t bits = 0;
  switch (who.kind) {
    case CallerKind::kUser:
      bits = kUserBit;
      break;
    case CallerKind::kAdmin:
      bits = kAdminBit;
      break;
    case CallerKind::kNode:
      bits = kNodeBit;
      break;
    case CallerKind::kMetrics:
      bits = kMetricsBit;
      break;
  }
  if (who.any_local_agent) bits |= kLocalRootBit;
  return bits;
}

}  // namespace

bool IsPublic(std::string_view method, std::string_view path) {
  for (const auto& [m, p] : kPublic) {
    if (m != method) continue;
    if (p == path) return true;
    if (p.size() > 1 && p.back() == '/' && path.starts_with(p)) return true;
  }
  return false;
}

Status MayCall(const Identity& who, std::string_view method, std::string_view path) {
  for (const EndpointRule& rule : kRules) {
    if (!Matches(rule, method, path)) continue;
    if ((rule.kinds & KindBits(who)) != 0) return Status::Ok();
    const std::string call = std::string(method) + " " + std::string(path);
    switch (who.kind) {
      case CallerKind::kNode:
        return Status::PermissionDenied("a node token (node " + who.node +
                                        ") may only call the agent endpoints /v1/agent/*, "
                                        "not " +
                                        call + ": use a user token, or the Unix socket");
      case CallerKind::kMetrics:
        return Status::PermissionDenied(
            "a metrics token may only read aggregates (GET /v1/nodes, GET /v1/usage), not " + call +
            ": use a user token, or the Unix socket");
      case CallerKind::kUser:
      case CallerKind::kAdmin:
        break;
    }
    return Status::PermissionDenied(std::string(rule.refusal));
  }
  return Status::PermissionDenied("no rule allows " + std::string(method) + " " +
                                  std::string(path));
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
