#include "controller/api/route_table.h"

#include <algorithm>
#include <optional>

#include "common/json.h"
#include "common/strings.h"
#include "controller/api/handlers.h"
#include "jobs/job.h"
#include "protocol/endpoints.h"

namespace gpupool::controller::api {
namespace {

// Who may call what (docs/security.md, "Caller kinds"): aggregates for metrics tokens;
// the agent protocol for node tokens only; nodes, limits and tokens for admins;
// everything else for people. The dashboard's session cookie reads what its pages show
// and cancels jobs.
constexpr Access kAnyone{.anyone = true};
constexpr Access kPeople{.callers = kPeopleBits};
constexpr Access kPeopleOrSession{.callers = kPeopleBits, .session = true};
constexpr Access kReadersOrSession{.callers = kPeopleBits | kMetricsBit, .session = true};
constexpr Access kScrapers{
    .callers = kAdminBit | kMetricsBit,
    .refusal = "/metrics is for metrics tokens and admins: ask an admin for a metrics token"};
constexpr Access kNodeAdmins{.callers = kAdminBit, .refusal = "only admins drain and resume nodes"};
constexpr Access kLimitAdmins{.callers = kAdminBit, .refusal = "only admins set limits"};
constexpr Access kTokenAdmins{.callers = kAdminBit, .refusal = "only admins manage tokens"};
constexpr Access kAgents{
    .callers = kAgentBits,
    .refusal =
        "the agent endpoints /v1/agent/* are for agents: use a node token (`gpupool token "
        "create --kind node --user NODE`), or root on the Unix socket"};

constexpr Blocking kNever = Blocking::kNever;
constexpr Blocking kAlways = Blocking::kAlways;
constexpr Blocking kWaiting = Blocking::kWhenWaiting;

// One line per route. docs/openapi.json describes every line (openapi_test.cc).
constexpr Route kRoutes[] = {
    {"GET", "/healthz", Healthz, kAnyone, kNever},
    {"GET", "/readyz", Readyz, kAnyone, kNever},
    {"GET", "/metrics", ScrapeMetrics, kScrapers, kNever},
    {"GET", "/v1/openapi.json", ServeOpenApi, kAnyone, kNever},
    {"GET", "/", ServeDashboardAsset, kAnyone, kNever},
    {"GET", "/ui/{asset}", ServeDashboardAsset, kAnyone, kNever},
    {"GET", "/ui/session", DashboardSession, kAnyone, kNever},
    {"POST", "/ui/login", DashboardLogin, kAnyone, kNever},
    {"POST", "/ui/logout", DashboardLogout, kAnyone, kNever},
    {"POST", "/v1/jobs", SubmitJob, kPeople, Blocking::kWhenInspecting},
    {"GET", "/v1/jobs", ListJobs, kPeopleOrSession, kNever},
    {"GET", "/v1/jobs/{id}", GetJob, kPeopleOrSession, kNever},
    {"POST", "/v1/jobs/{id}/cancel", CancelJobOrArray, kPeopleOrSession, kNever},
    {"POST", "/v1/jobs/{id}/signal", SignalJob, kPeople, kAlways},  // waits for the agents
    {"POST", "/v1/jobs/{id}/hold", HoldJob, kPeople, kNever},
    {"POST", "/v1/jobs/{id}/release", ReleaseJob, kPeople, kNever},
    {"POST", "/v1/jobs/{id}/checkpoint-done", CheckpointDone, kPeople, kNever},
    {"POST", "/v1/jobs/{id}/alive", AllocAlive, kPeople, kNever},
    {"GET", "/v1/jobs/{id}/logs", ReadJobLogs, kPeopleOrSession, kAlways},  // relayed
    {"POST", "/v1/jobs/{id}/exec", StartExec, kPeople, kNever},
    {"POST", "/v1/jobs/{id}/attach", AttachJob, kPeople, kWaiting},
    {"GET", "/v1/exec/{id}", GetExec, kPeople, kWaiting},
    {"GET", "/v1/exec/{id}/output", ReadExecOutput, kPeople, kAlways},  // relayed
    {"GET", "/v1/exec/{id}/stream", ReadExecStream, kPeople, kWaiting},
    {"POST", "/v1/exec/{id}/input", PushExecInput, kPeople, kNever},
    {"DELETE", "/v1/exec/{id}", CancelExec, kPeople, kNever},
    {"GET", "/v1/environments", ListEnvironments, kPeople, kNever},
    {"POST", "/v1/environments", AddEnvironment, kPeople, kAlways},  // inspects
    {"POST", "/v1/environments/check", CheckEnvironment, kPeople, kAlways},
    {"GET", "/v1/environments/{ref...}", GetEnvironment, kPeople, kNever},
    {"DELETE", "/v1/environments/{ref...}", RemoveEnvironment, kPeople, kNever},
    {"GET", "/v1/nodes", ListNodes, kReadersOrSession, kNever},
    {"POST", "/v1/nodes/{name}/drain", DrainNode, kNodeAdmins, kNever},
    {"POST", "/v1/nodes/{name}/resume", ResumeNode, kNodeAdmins, kNever},
    {"GET", "/v1/limits", GetLimits, kPeople, kNever},
    {"PUT", "/v1/limits", PutLimits, kLimitAdmins, kNever},
    {"GET", "/v1/usage", ReportUsage, kReadersOrSession, kNever},
    {"GET", "/v1/telemetry", TelemetrySeries, kReadersOrSession, kNever},
    {"GET", "/v1/whoami", Whoami, kPeopleOrSession, kNever},
    {"GET", "/v1/controllers", ListControllers, kPeople, kNever},
    {"POST", "/v1/tokens", CreateToken, kTokenAdmins, kNever},
    {"GET", "/v1/tokens", ListTokens, kTokenAdmins, kNever},
    {"DELETE", "/v1/tokens/{token_id}", RevokeToken, kTokenAdmins, kNever},
    // The agent protocol's endpoints (protocol/endpoints.h).
    {"POST", protocol::kRegisterPath, ServeAgentRegister, kAgents, kNever},
    {"GET", protocol::kWorkPath, ServeAgentWork, kAgents, kWaiting, AwaitAgentWork},
    {"POST", protocol::kEventsPath, ServeAgentEvents, kAgents, kNever},
    {"POST", protocol::kLogsPath, ServeAgentLogAnswer, kAgents, kNever},
    {"POST", protocol::kTelemetryPath, ServeAgentTelemetry, kAgents, kNever},
    {"GET", protocol::kExecInputPattern, ServeAgentExecInput, kAgents, kWaiting},
    {"POST", protocol::kExecOutputPattern, ServeAgentExecOutput, kAgents, kWaiting},
};

bool IsParameter(std::string_view seg) {
  return seg.size() > 2 && seg.front() == '{' && seg.back() == '}';
}
bool IsRestParameter(std::string_view seg) { return IsParameter(seg) && seg.ends_with("...}"); }

// Fills `out` with an {id} segment's value: a positive integer, or for a job route
// ARRAY_INDEX (12_3) as gpupool queue prints array elements. False for anything else.
bool ParseIdSegment(std::string_view pattern, std::string_view value, PathParams* out) {
  const size_t us = pattern.starts_with("/v1/jobs/") ? value.find('_') : value.npos;
  const std::optional<int64_t> id = ParseInt64(value.substr(0, us));
  if (!id || *id <= 0) return false;
  out->id = *id;
  if (us != value.npos) {
    const std::optional<int64_t> index = ParseInt64(value.substr(us + 1));
    if (!index || *index < 0 || *index > jobs::kMaxArrayIndex) return false;
    out->element = static_cast<int>(*index);
  }
  return true;
}

// Whether `path` matches `pattern`; fills `params`, and `rank` with each segment's kind (0
// literal, 1 parameter, 2 the rest of the path): of two patterns that match a path, the
// lower rank is the more specific.
bool MatchPath(std::string_view pattern, std::string_view path, PathParams* params,
               std::vector<int>* rank) {
  PathParams out;
  rank->clear();
  size_t pi = 0;  // in pattern
  size_t qi = 0;  // in path
  while (pi < pattern.size()) {
    if (qi >= path.size() || pattern[pi] != '/' || path[qi] != '/') return false;
    ++pi;
    ++qi;
    const size_t pend = std::min(pattern.find('/', pi), pattern.size());
    const std::string_view seg = pattern.substr(pi, pend - pi);
    if (IsRestParameter(seg)) {  // the rest, slashes and all
      if (qi >= path.size() || pend != pattern.size()) return false;
      out.named.emplace_back(seg.substr(1, seg.size() - 5), std::string(path.substr(qi)));
      rank->push_back(2);
      *params = std::move(out);
      return true;
    }
    const size_t qend = std::min(path.find('/', qi), path.size());
    const std::string_view value = path.substr(qi, qend - qi);
    if (!IsParameter(seg)) {
      if (seg != value) return false;
      rank->push_back(0);
    } else if (value.empty()) {
      return false;
    } else if (const std::string_view name = seg.substr(1, seg.size() - 2); name == "id") {
      if (!ParseIdSegment(pattern, value, &out)) return false;
      rank->push_back(1);
    } else {
      out.named.emplace_back(name, std::string(value));
      rank->push_back(1);
    }
    pi = pend;
    qi = qend;
  }
  if (qi != path.size()) return false;
  *params = std::move(out);
  return true;
}

// How many leading segments of `path` the pattern's match, a parameter matching any one
// (an empty one too) and a last "{name...}" all the rest.
size_t SharedSegments(std::string_view pattern, std::string_view path) {
  size_t n = 0;
  while (pattern.starts_with('/') && path.starts_with('/')) {
    pattern.remove_prefix(1);
    path.remove_prefix(1);
    const size_t pend = std::min(pattern.find('/'), pattern.size());
    const size_t qend = std::min(path.find('/'), path.size());
    const std::string_view seg = pattern.substr(0, pend);
    if (IsRestParameter(seg)) return n + 1 + std::count(path.begin(), path.end(), '/');
    if (!IsParameter(seg) && seg != path.substr(0, qend)) break;
    ++n;
    pattern.remove_prefix(pend);
    path.remove_prefix(qend);
  }
  return n;
}

}  // namespace

std::span<const Route> Table() { return kRoutes; }

RouteMatch Find(std::string_view method, std::string_view path) {
  // The most specific pattern that matches the path decides; then the method.
  RouteMatch m;
  std::vector<int> best;
  std::vector<int> rank;
  for (const Route& route : kRoutes) {
    PathParams p;
    if (!MatchPath(route.pattern, path, &p, &rank)) continue;
    if (m.path_known && rank > best) continue;
    if (!m.path_known || rank < best) {
      m.route = nullptr;
      best = rank;
      m.path_known = true;
    }
    if (route.method == method) {
      m.route = &route;
      m.params = std::move(p);
    }
  }
  return m;
}

net::HttpResponse NoRoute(const net::HttpRequest& r, bool path_known) {
  const std::string& p = r.path;
  if (StartsWith(p, "/v1/agent/")) {
    return ErrorResponse(Status::NotFound("no agent endpoint " + r.method + " " + p));
  }
  if (StartsWith(p, "/v1/exec/")) {
    const std::string tail = p.substr(std::string("/v1/exec/").size());
    const std::optional<int64_t> id = ParseInt64(tail.substr(0, tail.find('/')));
    if (!id || *id <= 0) return ErrorResponse(Status::NotFound("no exec session " + tail));
    return ErrorResponse(Status::NotFound("no endpoint " + r.method + " " + p));
  }
  if (StartsWith(p, "/v1/nodes/")) {
    return ErrorResponse(Status::NotFound("no endpoint " + r.method + " " + p +
                                          ": POST /v1/nodes/NAME/drain or /resume"));
  }
  if (path_known) {
    return ErrorResponse(Status::InvalidArgument("method " + r.method + " is not allowed on " + p +
                                                 ": see docs/api.md"));
  }
  return ErrorResponse(Status::NotFound("no endpoint " + r.method + " " + p + ": see docs/api.md"));
}

std::string DocumentedPattern(std::string_view pattern) {
  std::string out(pattern);
  for (size_t at; (at = out.find("...}")) != std::string::npos;) out.erase(at, 3);
  return out;
}

bool MayBlock(const Route& route, const net::HttpRequest& r) {
  return route.later == nullptr && Waits(route, r);
}

bool Waits(const Route& route, const net::HttpRequest& r) {
  switch (route.blocking) {
    case Blocking::kNever:
      return false;
    case Blocking::kAlways:
      return true;
    case Blocking::kWhenWaiting: {
      const std::string w = r.Query("wait_ms");
      return !w.empty() && w != "0";
    }
    case Blocking::kWhenInspecting:
      // A job naming an image may inspect it; one naming an environment too: a directory
      // environment's tree is checked again. A plain one is a store write.
      return JsonHasTopLevelKey(r.body, {"image", "environment"});
  }
  return false;
}

Access UnroutedAccess(std::string_view path, bool path_known) {
  std::vector<const Route*> near;
  if (path_known) {
    PathParams params;
    std::vector<int> rank;
    for (const Route& route : kRoutes) {
      if (MatchPath(route.pattern, path, &params, &rank)) near.push_back(&route);
    }
  } else {
    size_t best = 2;  // a resource: two segments at least (/v1/nodes), not just /v1
    for (const Route& route : kRoutes) {
      const size_t shared = SharedSegments(route.pattern, path);
      if (shared < best) continue;
      if (shared > best) near.clear();
      best = shared;
      near.push_back(&route);
    }
  }
  if (near.empty()) return kPeople;
  Access out;
  for (const Route* route : near) {
    out.callers = static_cast<uint8_t>(
        out.callers | (route->access.anyone ? kPeopleBits : route->access.callers));
    if (out.refusal.empty()) out.refusal = route->access.refusal;
  }
  out.callers = static_cast<uint8_t>(out.callers & ~kMetricsBit);
  return out;
}

Access AccessOf(std::string_view method, std::string_view path) {
  const RouteMatch m = Find(method, path);
  return m.route != nullptr ? m.route->access : UnroutedAccess(path, m.path_known);
}

}  // namespace gpupool::controller::api
