#include "controller/api.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <thread>

#include "common/json.h"
#include "common/strings.h"
#include "controller/endpoint_access.h"
#include "controller/openapi_document.h"
#include "controller/tokens.h"
#include "controller/usage.h"
#include "envcheck/needs.h"
#include "gpu/node_json.h"
#include "jobs/job_json.h"
#include "jobs/job_validation.h"
#include "protocol/endpoints.h"

namespace gpupool::controller {
namespace {

// A GPU's latest telemetry as GET /v1/nodes shows it (fields absent when unknown).
OrderedJson GpuTelemetryToJson(const protocol::GpuTelemetry& t) {
  OrderedJson j = {{"at_ms", t.at_ms}};
  if (t.util_pct) j["util_pct"] = *t.util_pct;
  if (t.mem_used_mib) j["mem_used_mib"] = *t.mem_used_mib;
  if (t.mem_total_mib) j["mem_total_mib"] = *t.mem_total_mib;
  if (t.power_w) j["power_w"] = *t.power_w;
  if (t.temp_c) j["temp_c"] = *t.temp_c;
  if (t.xid_errors) j["xid_errors"] = *t.xid_errors;
  if (t.xid_count) j["xid_count"] = *t.xid_count;
  if (t.ecc_uncorrected) j["ecc_uncorrected"] = *t.ecc_uncorrected;
  return j;
}

// `latest`: the node's GPUs' latest telemetry by index (none for a node that is down).
OrderedJson NodeViewToJson(const NodeView& v,
                           const std::map<int, protocol::GpuTelemetry>& latest = {}) {
  OrderedJson gpus = OrderedJson::array();
  for (size_t g = 0; g < v.info.gpus.size(); ++g) {
    const gpu::GpuInfo& gi = v.info.gpus[g];
    gpus.push_back({{"index", gi.index},
                    {"vendor", gpu::VendorName(gi.vendor)},
                    {"name", gi.name},
                    {"uuid", gi.uuid},
                    {"memory_total_bytes", gi.memory_total_bytes},
                    {"allocated_milli", v.allocated_milli[g]}});
    if (auto t = latest.find(gi.index); t != latest.end() && v.state != "down") {
      gpus.back()["telemetry"] = GpuTelemetryToJson(t->second);
    }
  }
  OrderedJson out = {{"name", v.name},
                     {"state", v.state},
                     {"address", v.address},
                     {"protocol", v.protocol},
                     {"last_heartbeat_us", v.last_seen_us},
                     {"cpu_milli", v.cpu_milli},
                     {"cpu_allocated_milli", v.cpu_allocated_milli},
                     {"memory_mib", v.memory_mib},
                     {"memory_allocated_mib", v.memory_allocated_mib},
                     {"gpus", std::move(gpus)},
                     {"running_jobs", v.running_jobs}};
  if (!v.drain_reason.empty()) out["drain_reason"] = v.drain_reason;
  return out;
}

// 5 -> "5", 2.5 -> "2.5".
std::string FormatNumber(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

using net::HttpRequest;
using net::HttpResponse;

constexpr size_t kMaxLogChunk = 1 << 20;
// A relayed chunk comes back as a request body, which the server caps at 1 MiB.
constexpr int64_t kMaxRelayedLogChunk = 512 << 10;
constexpr std::chrono::milliseconds kLogRelayTimeout{5000};

struct LogRead {
  std::string data;
  int64_t size = 0;    // the file's size when read
  std::string source;  // "node NAME" or "local"
  bool read = false;   // the file was there and read: `size` is its size
};

// Bytes from `offset` of a log file on this machine's disk. The path came from an agent:
// only a regular file (no symbolic link) that belongs to the job's user is read, so a
// compromised node cannot make the controller read its host's files (/etc/shadow) as root.
LogRead ReadLocalLog(const std::string& path, int64_t offset, uint32_t owner_uid) {
  LogRead out;
  out.source = "local";
  if (path.empty() || path.front() != '/') return out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return out;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (owner_uid != 0 && st.st_uid != owner_uid)) {
    ::close(fd);
    return out;
  }
  out.size = st.st_size;
  out.read = true;
  if (out.size > offset) {
    out.data.resize(static_cast<size_t>(std::min<int64_t>(out.size - offset, kMaxLogChunk)));
    const ssize_t n = ::pread(fd, out.data.data(), out.data.size(), offset);
    out.data.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  return out;
}

// The node that ran the task (`node`) has its log files: while that node's agent polls,
// it sends the bytes (log_relay.h). A node that is gone, or that does not answer, leaves
// this machine's disk, which is where they are in a single-machine pool. When neither has
// the file the answer is an error, never "no more bytes": the log of an ended job would
// look complete when it was not (issue 25).
Result<LogRead> ReadJobLog(Controller* controller, const jobs::Job& job, const std::string& path,
                           int64_t offset, const std::string& node) {
  if (path.empty()) return ReadLocalLog(path, offset, job.uid);  // no log (not started)
  std::string why = node.empty() ? std::string() : "node " + node + " is down";
  if (!node.empty() && controller->NodeUp(node)) {
    Result<LogChunk> chunk =
        controller->log_relay().Fetch(node, path, offset, kMaxRelayedLogChunk, kLogRelayTimeout);
    if (chunk.ok()) return LogRead{std::move(chunk->data), chunk->size, "node " + node, true};
    spdlog::debug("log of job {} from node {}: {}", job.id, node, chunk.status().message());
    why = chunk.status().message();
  }
  LogRead local = ReadLocalLog(path, offset, job.uid);
  if (local.read || node.empty()) return local;
  return Status::Unavailable("cannot read the log '" + path + "' from byte " +
                             std::to_string(offset) + ": " + why +
                             ", and this machine has no copy; try again");
}

HttpResponse JsonResponse(int status, const OrderedJson& body) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  return r;
}

HttpResponse ErrorResponse(const Status& s) {
  int code = 500;
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
      code = 400;
      break;
    case StatusCode::kNotFound:
      code = 404;
      break;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      code = 409;
      break;
    case StatusCode::kPermissionDenied:
      code = 403;
      break;
    case StatusCode::kResourceExhausted:
      code = 413;
      break;
    case StatusCode::kUnimplemented:
      code = 501;
      break;
    case StatusCode::kUnavailable:
      code = 503;
      break;
    default:
      code = 500;
  }
  OrderedJson j;
  j["error"] = s.message();
  return JsonResponse(code, j);
}

HttpResponse MethodNotAllowed(const HttpRequest& r) {
  return ErrorResponse(Status::InvalidArgument("method " + r.method + " is not allowed on " +
                                               r.path + ": see docs/api.md"));
}

// The parameters a path gave a route's pattern.
struct PathParams {
  int64_t id = 0;    // {id}
  int element = -1;  // {id} of a job route given as ARRAY_INDEX: INDEX, and id is ARRAY
  std::vector<std::pair<std::string_view, std::string>> named;  // the others
};

// Whether `path` matches `pattern` (segments as Api::Table() says); fills `params`, and
// `rank` with each segment's kind (0 literal, 1 parameter, 2 the rest of the path): of
// two patterns that match a path, the lower rank is the more specific.
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
    const bool param = seg.size() > 2 && seg.front() == '{' && seg.back() == '}';
    if (param && seg.size() > 5 && seg.ends_with("...}")) {  // the rest, slashes and all
      if (qi >= path.size() || pend != pattern.size()) return false;
      out.named.emplace_back(seg.substr(1, seg.size() - 5), std::string(path.substr(qi)));
      rank->push_back(2);
      *params = std::move(out);
      return true;
    }
    const size_t qend = std::min(path.find('/', qi), path.size());
    const std::string_view value = path.substr(qi, qend - qi);
    if (!param) {
      if (seg != value) return false;
      rank->push_back(0);
    } else if (value.empty()) {
      return false;
    } else if (const std::string_view name = seg.substr(1, seg.size() - 2); name == "id") {
      // A job's {id} may name an element of an array as `gpupool queue` prints it,
      // ARRAY_INDEX (12_3).
      const size_t us = pattern.starts_with("/v1/jobs/") ? value.find('_') : value.npos;
      const std::optional<int64_t> id = ParseInt64(value.substr(0, us));
      if (!id || *id <= 0) return false;
      out.id = *id;
      if (us != value.npos) {
        const std::optional<int64_t> index = ParseInt64(value.substr(us + 1));
        if (!index || *index < 0 || *index > jobs::kMaxArrayIndex) return false;
        out.element = static_cast<int>(*index);
      }
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

// The answer when no route matches `r`. `path_known`: a route has the path, with another
// method (400). The agent, exec and node paths keep the 404s they have always given.
HttpResponse NoRoute(const HttpRequest& r, bool path_known) {
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
  if (path_known) return MethodNotAllowed(r);
  return ErrorResponse(Status::NotFound("no endpoint " + r.method + " " + p + ": see docs/api.md"));
}

// Who calls a public endpoint (IsPublic): no one in particular, with no rights.
const Identity& Anonymous() {
  static const Identity anonymous{CallerKind::kUser,
                                  Caller{"", kNodeCallerUid, kNodeCallerUid, false}, "", false};
  return anonymous;
}

Result<int64_t> QueryInt(const HttpRequest& r, const std::string& name, int64_t fallback,
                         int64_t min, int64_t max) {
  const std::string v = r.Query(name);
  if (v.empty()) return fallback;
  auto parsed = ParseInt64(v);
  if (!parsed || *parsed < min || *parsed > max) {
    return Status::InvalidArgument("query parameter " + name + "='" + v +
                                   "' must be an integer in " + std::to_string(min) + ".." +
                                   std::to_string(max));
  }
  return *parsed;
}

const char* const kServerSetFields[] = {"id",
                                        "user",
                                        "uid",
                                        "gid",
                                        "state",
                                        "submit_time_us",
                                        "start_time_us",
                                        "end_time_us",
                                        "exit_code",
                                        "signal",
                                        "placement",
                                        "tasks",
                                        "master_port",
                                        "pending_reason",
                                        "reason",
                                        "attempt",
                                        "cancel_requested",
                                        "held_by",
                                        "array_id",
                                        "array_index",
                                        "array_max_running",
                                        "held_by_admin",
                                        "command_ended",
                                        "command_exit_code",
                                        "command_signal",
                                        "stdout_path",
                                        "stderr_path",
                                        "needs",
                                        "env_dir"};

OrderedJson EnvironmentToJson(const store::EnvironmentRecord& e) {
  OrderedJson j;
  j["name"] = e.name + ":" + e.version;
  j["kind"] = e.kind;
  j["location"] = e.location;
  OrderedJson needs = OrderedJson::parse(e.needs_json, nullptr, /*allow_exceptions=*/false);
  j["needs"] = needs.is_discarded() ? OrderedJson::object() : std::move(needs);
  j["owner"] = e.owner;
  j["created_us"] = e.created_us;
  if (!e.image_id.empty()) j["image_id"] = e.image_id;
  if (!e.dir_digest.empty()) j["dir_digest"] = e.dir_digest;
  return j;
}

}  // namespace

bool Api::MayBlock(const HttpRequest& r) {
  if (const std::string w = r.Query("wait_ms"); !w.empty() && w != "0") return true;
  // A log read may wait for the node that has the file (log_relay.h).
  if (r.method == "GET" && r.path.size() > 5 && r.path.compare(r.path.size() - 5, 5, "/logs") == 0)
    return true;
  // So may an exec session's output.
  if (r.method == "GET" && r.path.rfind("/v1/exec/", 0) == 0 && r.path.size() > 7 &&
      r.path.compare(r.path.size() - 7, 7, "/output") == 0) {
    return true;
  }
  if (r.method != "POST") return false;
  if (r.path.rfind("/v1/environments", 0) == 0) return true;
  // A submission naming an image may inspect it; a plain one is a store write.
  // So may one naming an environment: a directory environment's tree is checked again.
  return r.path == "/v1/jobs" && (r.body.find("\"image\"") != std::string::npos ||
                                  r.body.find("\"environment\"") != std::string::npos);
}

HttpResponse Api::Handle(const HttpRequest& request) {
  // Health checks and the schema answer anyone (load balancers, systemd, client
  // generators): they carry no job or user data.
  if (IsPublic(request.method, request.path)) return Route(request, Anonymous());
  // A browser signed in to the dashboard: its session cookie stands for its token, which
  // authenticates it below as the token itself would (a revoked token fails at once).
  std::optional<HttpRequest> with_token;
  if (Dashboard::UsesSession(request)) {
    Dashboard::SessionCheck session = dashboard_.CheckSession(request);
    if (session.status != 200) {
      HttpResponse r = JsonResponse(session.status, {{"error", session.error}});
      AddDashboardSecurityHeaders(&r);
      return r;
    }
    with_token = request;
    with_token->headers["authorization"] = "Bearer " + session.token;
  }
  return HandleAuthenticated(with_token ? *with_token : request);
}

HttpResponse Api::HandleAuthenticated(const HttpRequest& request) {
  Result<Identity> who = Authenticate(request, *store_, auth_, clock_->NowMicros());
  if (!who.ok()) {
    HttpResponse r = ErrorResponse(who.status());
    // Not authenticated (no, unknown, revoked or expired token): 401, as docs/api.md says.
    if (who.status().code() == StatusCode::kPermissionDenied) {
      r.status = 401;
      r.headers["WWW-Authenticate"] = "Bearer";
    }
    return r;
  }
  // The caller's kind decides which endpoints it may use (endpoint_access.cc), before
  // anything else looks at the request.
  if (Status s = MayCall(*who, request.method, request.path); !s.ok()) return ErrorResponse(s);
  std::optional<RequestLimiter::Slot> slot;
  if (MayBlock(request)) {
    // Keyed by what authenticated the caller: its uid on the socket, else its token.
    const std::string auth = request.Header("authorization");
    const std::string key = request.peer && auth.empty()
                                ? "uid:" + std::to_string(request.peer->uid)
                                : "token:" + HashToken(auth);
    std::string why;
    // An agent waits once for work and once per interactive session on its node: its
    // own, larger quota, apart from its users'.
    RequestLimiter& limiter = StartsWith(request.path, "/v1/agent/") ? agent_waiting_ : waiting_;
    slot = limiter.TryAcquire(key, &why);
    if (!slot) {
      HttpResponse r = ErrorResponse(Status::ResourceExhausted(why));
      r.status = 429;
      return r;
    }
  }
  return Route(request, *who);
}

struct Api::Call {
  const HttpRequest& r;
  const Identity& who;
  const Caller& caller;
  int64_t id = 0;  // {id}: a job's or an exec session's
  // {id} given as ARRAY_INDEX (12_3): INDEX; id is then that element's job id.
  int element = -1;
  std::vector<std::pair<std::string_view, std::string>> params;  // the other parameters

  const std::string& Param(std::string_view name) const {
    static const std::string kNone;
    for (const auto& [n, v] : params) {
      if (n == name) return v;
    }
    return kNone;
  }
};

// Patterns are OpenAPI path templates: "{id}" matches a positive integer (a job's or an
// exec session's id), another "{name}" one non-empty segment, and a last "{name...}" the
// rest of the path, slashes included (environment names may have one). Where two patterns
// match a path the more specific one wins: a literal segment before a parameter. Who may
// call a route is endpoint_access.cc's business; docs/openapi.json describes every line.
std::span<const Api::RouteEntry> Api::Table() {
  static constexpr RouteEntry kRoutes[] = {
      {"GET", "/healthz", &Api::Healthz},
      {"GET", "/readyz", &Api::Readyz},
      {"GET", "/metrics", &Api::Metrics},
      {"GET", "/v1/openapi.json", &Api::OpenApi},
      {"GET", "/", &Api::DashboardAsset},
      {"GET", "/ui/{asset}", &Api::DashboardAsset},
      {"GET", "/ui/session", &Api::DashboardSession},
      {"POST", "/ui/login", &Api::DashboardLogin},
      {"POST", "/ui/logout", &Api::DashboardLogout},
      {"POST", "/v1/jobs", &Api::Submit},
      {"GET", "/v1/jobs", &Api::ListJobs},
      {"GET", "/v1/jobs/{id}", &Api::GetJob},
      {"POST", "/v1/jobs/{id}/cancel", &Api::CancelJobOrArray},
      {"POST", "/v1/jobs/{id}/hold", &Api::HoldJob},
      {"POST", "/v1/jobs/{id}/release", &Api::ReleaseJob},
      {"GET", "/v1/jobs/{id}/logs", &Api::Logs},
      {"POST", "/v1/jobs/{id}/exec", &Api::StartExec},
      {"POST", "/v1/jobs/{id}/attach", &Api::AttachJob},
      {"GET", "/v1/exec/{id}", &Api::GetExec},
      {"GET", "/v1/exec/{id}/output", &Api::ExecOutput},
      {"GET", "/v1/exec/{id}/stream", &Api::ExecStream},
      {"POST", "/v1/exec/{id}/input", &Api::ExecInput},
      {"DELETE", "/v1/exec/{id}", &Api::CancelExec},
      {"GET", "/v1/environments", &Api::ListEnvironments},
      {"POST", "/v1/environments", &Api::AddEnvironment},
      {"POST", "/v1/environments/check", &Api::CheckEnvironment},
      {"GET", "/v1/environments/{ref...}", &Api::GetEnvironment},
      {"DELETE", "/v1/environments/{ref...}", &Api::RemoveEnvironment},
      {"GET", "/v1/nodes", &Api::ListNodes},
      {"POST", "/v1/nodes/{name}/drain", &Api::DrainNode},
      {"POST", "/v1/nodes/{name}/resume", &Api::ResumeNode},
      {"GET", "/v1/limits", &Api::GetLimits},
      {"PUT", "/v1/limits", &Api::PutLimits},
      {"GET", "/v1/usage", &Api::Usage},
      {"GET", "/v1/telemetry", &Api::Telemetry},
      {"GET", "/v1/whoami", &Api::Whoami},
      {"GET", "/v1/controllers", &Api::Controllers},
      {"POST", "/v1/tokens", &Api::CreateToken},
      {"GET", "/v1/tokens", &Api::ListTokens},
      {"DELETE", "/v1/tokens/{token_id}", &Api::RevokeToken},
      // The agent protocol's endpoints (protocol/endpoints.h).
      {"POST", protocol::kRegisterPath, &Api::ServeAgentRegister},
      {"GET", protocol::kWorkPath, &Api::ServeAgentWork},
      {"POST", protocol::kEventsPath, &Api::ServeAgentEvents},
      {"POST", protocol::kLogsPath, &Api::ServeAgentLogs},
      {"POST", protocol::kTelemetryPath, &Api::ServeAgentTelemetry},
      {"GET", protocol::kExecInputPattern, &Api::AgentExecInput},
      {"POST", protocol::kExecOutputPattern, &Api::AgentExecOutput},
  };
  return kRoutes;
}

std::vector<Api::RouteInfo> Api::Routes() {
  std::vector<RouteInfo> out;
  for (const RouteEntry& e : Table()) {
    std::string pattern(e.pattern);
    for (size_t at; (at = pattern.find("...}")) != std::string::npos;) pattern.erase(at, 3);
    out.push_back({std::string(e.method), std::move(pattern)});
  }
  return out;
}

HttpResponse Api::Route(const HttpRequest& r, const Identity& who) {
  // The most specific pattern that matches the path decides; then the method.
  const RouteEntry* route = nullptr;
  PathParams params;
  bool path_known = false;
  std::vector<int> best;
  std::vector<int> rank;
  for (const RouteEntry& e : Table()) {
    PathParams p;
    if (!MatchPath(e.pattern, r.path, &p, &rank)) continue;
    if (path_known && rank > best) continue;
    if (!path_known || rank < best) {
      route = nullptr;
      best = rank;
      path_known = true;
    }
    if (e.method == r.method) {
      route = &e;
      params = std::move(p);
    }
  }
  if (route == nullptr) return NoRoute(r, path_known);
  const int64_t start_us = clock_->MonotonicMicros();
  Call call{r, who, who.caller, params.id, -1, std::move(params.named)};
  if (params.element >= 0) {  // ARRAY_INDEX: the element's own job id
    Result<int64_t> id = controller_->ArrayElementId(params.id, params.element, who.caller);
    if (!id.ok()) return ErrorResponse(id.status());
    call.id = *id;
    call.element = params.element;
  }
  HttpResponse answer = (this->*route->handler)(call);
  if (!MayBlock(r)) {  // long polls would say how long clients chose to wait
    std::string pattern(route->pattern);
    for (size_t at; (at = pattern.find("...}")) != std::string::npos;) pattern.erase(at, 3);
    controller_->metrics().ObserveRequest(
        r.method, pattern, static_cast<double>(clock_->MonotonicMicros() - start_us) / 1e6);
  }
  return answer;
}

HttpResponse Api::Healthz(const Call&) { return JsonResponse(200, {{"ok", true}}); }

HttpResponse Api::DashboardAsset(const Call& c) { return dashboard_.ServeAsset(c.r); }
HttpResponse Api::DashboardLogin(const Call& c) { return dashboard_.Login(c.r); }
HttpResponse Api::DashboardLogout(const Call& c) { return dashboard_.Logout(c.r); }
HttpResponse Api::DashboardSession(const Call& c) { return dashboard_.Session(c.r); }

// GET /metrics: the pool in Prometheus's text format (metrics.h), for metrics tokens and
// admins. Ended jobs and GPU-hours come from the store, the rest from the controller.
HttpResponse Api::Metrics(const Call&) {
  std::vector<NodeView> nodes;
  PoolSnapshot pool = controller_->MetricsSnapshot(&nodes);  // active jobs by state
  const int64_t now = clock_->NowMicros();
  std::lock_guard ended_lock(ended_.mu);
  // Jobs that ended since the last scrape: added to the totals once each.
  store::JobFilter recent;
  for (jobs::JobState st :
       {jobs::JobState::kSucceeded, jobs::JobState::kFailed, jobs::JobState::kCancelled,
        jobs::JobState::kTimeout, jobs::JobState::kLost}) {
    recent.states.push_back(st);
  }
  recent.ended_after_us = std::max<int64_t>(1, ended_.read_until_us - kEndedOverlapUs);
  Result<std::vector<jobs::Job>> ended = store_->ListJobs(recent);
  if (!ended.ok()) return ErrorResponse(ended.status());
  std::map<int64_t, std::pair<std::string, std::string>> ended_keys;  // of this read
  for (const jobs::Job& j : *ended) {
    ended_keys[j.id] = {j.user, j.project.empty() ? "(none)" : j.project};
    if (!jobs::IsTerminal(j.state) || !ended_.recent.emplace(j.id, j.end_time_us).second) continue;
    ++ended_.by_state[std::string(jobs::JobStateName(j.state))];
    const std::pair<std::string, std::string> key = {j.user,
                                                     j.project.empty() ? "(none)" : j.project};
    if (const double hours = JobGpuHours(j, 0, INT64_MAX, now); hours > 0) {
      ended_.gpu_hours[key] += hours;
    }
  }
  ended_.read_until_us = now;
  std::erase_if(ended_.recent, [&](const auto& e) {
    return e.second > 0 && e.second < now - 2 * kEndedOverlapUs;  // 0: no end time, read each time
  });
  for (const auto& [state, n] : ended_.by_state) pool.jobs_by_state[state] += n;
  for (const auto& [key, hours] : ended_.gpu_hours) pool.gpu_hours[key] += hours;
  // Jobs holding resources now: their GPU-hours so far, and who they are.
  store::JobFilter holding;
  holding.states = {jobs::JobState::kAssigned, jobs::JobState::kRunning};
  Result<std::vector<jobs::Job>> active = controller_->List(holding, Caller{"root", 0, 0, true});
  if (!active.ok()) return ErrorResponse(active.status());
  std::map<int64_t, const jobs::Job*> by_id;
  for (const jobs::Job& j : *active) {
    by_id[j.id] = &j;
    const std::pair<std::string, std::string> key = {j.user,
                                                     j.project.empty() ? "(none)" : j.project};
    if (const double hours = JobGpuHours(j, 0, INT64_MAX, now); hours > 0) {
      pool.gpu_hours[key] += hours;
    }
  }
  // Utilisation-weighted GPU-seconds gathered since the last scrape, added to the counter
  // of their (user, project).
  // A job the store cannot be asked about now keeps its seconds for the next scrape; one
  // it no longer holds loses them.
  std::map<int64_t, double> later;
  for (const auto& [id, seconds] : telemetry_->TakeUsedGpuSeconds()) {
    std::pair<std::string, std::string> key;
    if (auto a = by_id.find(id); a != by_id.end()) {
      key = {a->second->user, a->second->project.empty() ? "(none)" : a->second->project};
    } else if (auto k = ended_keys.find(id); k != ended_keys.end()) {
      key = k->second;
    } else if (Result<jobs::Job> j = store_->GetJob(id); j.ok()) {
      key = {j->user, j->project.empty() ? "(none)" : j->project};
    } else {
      if (j.status().code() != StatusCode::kNotFound) later[id] = seconds;
      continue;
    }
    ended_.used_gpu_s[key] += seconds;
  }
  if (!later.empty()) telemetry_->GiveBackUsedGpuSeconds(later);
  for (const auto& [key, seconds] : ended_.used_gpu_s) pool.used_gpu_hours[key] += seconds / 3600;
  // The latest telemetry of the GPUs of nodes that are up, with dcgm-exporter's labels.
  for (const NodeView& v : nodes) {
    if (v.state == "down") continue;
    const std::map<int, protocol::GpuTelemetry> latest = telemetry_->LatestOfNode(v.name);
    for (const gpu::GpuInfo& gi : v.info.gpus) {
      auto t = latest.find(gi.index);
      if (t == latest.end()) continue;
      GpuGauges g;
      g.gpu = gi.index;
      g.uuid = gi.uuid;
      g.device =
          std::string(gi.vendor == gpu::Vendor::kAmd ? "card" : "nvidia") +
          std::to_string(gi.minor_number >= 0 && gi.vendor == gpu::Vendor::kNvidia ? gi.minor_number
                                                                                   : gi.index);
      g.model_name = gi.name;
      g.hostname = v.name;
      std::set<std::string> users;
      for (const protocol::TelemetryJob& tj : t->second.jobs) {
        g.hpc_job += (g.hpc_job.empty() ? "" : ",") + std::to_string(tj.job_id);
        if (auto j = by_id.find(tj.job_id); j != by_id.end()) users.insert(j->second->user);
      }
      for (const std::string& u : users) g.user += (g.user.empty() ? "" : ",") + u;
      const protocol::GpuTelemetry& s = t->second;
      g.util_pct = s.util_pct;
      if (s.mem_used_mib) g.fb_used_mib = static_cast<double>(*s.mem_used_mib);
      if (s.mem_used_mib && s.mem_total_mib) {
        g.fb_free_mib =
            static_cast<double>(std::max<int64_t>(0, *s.mem_total_mib - *s.mem_used_mib));
      }
      g.power_w = s.power_w;
      g.temp_c = s.temp_c;
      if (s.xid_errors) g.xid_errors = static_cast<double>(*s.xid_errors);
      if (s.ecc_uncorrected) g.ecc_dbe_vol_total = static_cast<double>(*s.ecc_uncorrected);
      pool.gpus.push_back(std::move(g));
    }
  }
  HttpResponse r;
  r.status = 200;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = controller_->metrics().Render(pool);
  return r;
}

// GET /readyz: the server can do its job: the store answers and the scheduler loop goes
// round. 503 naming what is not ready otherwise.
HttpResponse Api::Readyz(const Call&) {
  std::vector<std::string> problems;
  if (Result<std::vector<store::NodeRecord>> nodes = store_->ListNodes(); !nodes.ok()) {
    problems.push_back("the store does not answer: " + nodes.status().message());
  }
  if (!controller_->SchedulerLooping()) problems.push_back("the scheduler loop is not running");
  if (stopping_) problems.push_back("the server is shutting down");
  if (problems.empty()) return JsonResponse(200, {{"ok", true}});
  return JsonResponse(503, {{"ok", false}, {"problems", problems}});
}

// GET /v1/controllers: which controller leads and which stand by (SetControllersView);
// a controller on a store of its own has neither lease nor standbys.
HttpResponse Api::Controllers(const Call&) {
  if (!controllers_view_) {
    return JsonResponse(200, {{"leader", nullptr},
                              {"controllers", OrderedJson::array()},
                              {"note",
                               "one controller on a store of its own (SQLite): there is no "
                               "lease and no standby"}});
  }
  Result<OrderedJson> view = controllers_view_();
  if (!view.ok()) return ErrorResponse(view.status());
  return JsonResponse(200, *view);
}

// docs/openapi.json as it was when the server was built.
HttpResponse Api::OpenApi(const Call&) {
  HttpResponse resp;
  resp.content_type = "application/json";
  resp.body = std::string(OpenApiDocument());
  return resp;
}

HttpResponse Api::GetJob(const Call& c) {
  Result<jobs::Job> j = controller_->Get(c.id, c.caller);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", JobJson(*j)}});
}

HttpResponse Api::HoldJob(const Call& c) {
  Result<jobs::Job> j = controller_->Hold(c.id, c.caller, /*hold=*/true);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", jobs::JobToJson(*j)}});
}

HttpResponse Api::ReleaseJob(const Call& c) {
  Result<jobs::Job> j = controller_->Hold(c.id, c.caller, /*hold=*/false);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", jobs::JobToJson(*j)}});
}

HttpResponse Api::ListNodes(const Call&) {
  OrderedJson nodes = OrderedJson::array();
  for (const NodeView& v : controller_->Nodes()) {
    nodes.push_back(NodeViewToJson(v, telemetry_->LatestOfNode(v.name)));
  }
  return JsonResponse(200, {{"nodes", std::move(nodes)}});
}

// Admins only (endpoint_access.cc), as is ResumeNode.
HttpResponse Api::DrainNode(const Call& c) {
  Result<Json> body = ParseJson(c.r.body.empty() ? "{}" : c.r.body, "request body", 16 << 10, 4);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string reason;
  f.Required("reason", &reason);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  Result<NodeView> v = controller_->DrainNode(c.Param("name"), reason, c.caller);
  if (!v.ok()) return ErrorResponse(v.status());
  return JsonResponse(200, {{"node", NodeViewToJson(*v)}});
}

HttpResponse Api::ResumeNode(const Call& c) {
  Result<NodeView> v = controller_->ResumeNode(c.Param("name"), c.caller);
  if (!v.ok()) return ErrorResponse(v.status());
  return JsonResponse(200, {{"node", NodeViewToJson(*v)}});
}

HttpResponse Api::GetLimits(const Call&) {
  return JsonResponse(200, LimitsToJson(controller_->GetLimits()));
}

HttpResponse Api::PutLimits(const Call& c) {
  Result<Json> body = ParseJson(c.r.body, "request body", 1 << 20, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<Limits> l = LimitsFromJson(*body);
  if (!l.ok()) return ErrorResponse(l.status());
  Result<Limits> set = controller_->SetLimits(std::move(*l), c.caller);
  if (!set.ok()) return ErrorResponse(set.status());
  return JsonResponse(200, LimitsToJson(*set));
}

HttpResponse Api::Whoami(const Call& c) {
  return JsonResponse(200, {{"user", c.caller.user},
                            {"uid", c.caller.uid},
                            {"admin", c.caller.admin},
                            {"kind", CallerKindName(c.who.kind)}});
}

// Admins only (endpoint_access.cc), as are CreateToken and RevokeToken.
HttpResponse Api::ListTokens(const Call&) {
  Result<std::vector<store::TokenRecord>> tokens = store_->ListTokens();
  if (!tokens.ok()) return ErrorResponse(tokens.status());
  OrderedJson list = OrderedJson::array();
  for (const auto& t : *tokens) {
    list.push_back({{"id", TokenId(t)},
                    {"user", t.user},
                    {"kind", t.kind},
                    {"created_us", t.created_us},
                    {"expires_us", t.expires_us},
                    {"last_used_us", t.last_used_us}});
  }
  return JsonResponse(200, {{"tokens", std::move(list)}});
}

HttpResponse Api::RevokeToken(const Call& c) {
  Result<store::TokenRecord> t = FindTokenById(*store_, c.Param("token_id"));
  if (!t.ok()) return ErrorResponse(t.status());
  if (Status s = store_->DeleteToken(t->token_hash); !s.ok()) return ErrorResponse(s);
  return JsonResponse(200,
                      {{"revoked", {{"id", TokenId(*t)}, {"user", t->user}, {"kind", t->kind}}}});
}

// POST /v1/jobs/ID/cancel: one job. The id of an array (its first element's) cancels
// every element still queued or running; ARRAY_INDEX (or ?element=INDEX, from older
// clients) one element.
HttpResponse Api::CancelJobOrArray(const Call& c) {
  const HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  int64_t id = c.id;
  bool element = c.element >= 0;
  if (!element && !r.Query("element").empty()) {
    Result<int64_t> index = QueryInt(r, "element", 0, 0, jobs::kMaxArrayIndex);
    if (!index.ok()) return ErrorResponse(index.status());
    Result<int64_t> e = controller_->ArrayElementId(id, static_cast<int>(*index), caller);
    if (!e.ok()) return ErrorResponse(e.status());
    id = *e;
    element = true;
  }
  if (!element) {
    Result<jobs::Job> j = controller_->Get(id, caller);
    if (!j.ok()) return ErrorResponse(j.status());
    if (j->array_id == id) {
      Result<ArrayCancelled> a = controller_->CancelArray(id, caller);
      if (!a.ok()) return ErrorResponse(a.status());
      return JsonResponse(200, {{"job", jobs::JobToJson(a->head)},
                                {"array_cancelled", a->queued + a->running},
                                {"array",
                                 {{"id", id},
                                  {"elements", a->elements},
                                  {"queued", a->queued},
                                  {"running", a->running}}}});
    }
  }
  Result<jobs::Job> j = controller_->Cancel(id, caller);
  if (!j.ok()) return ErrorResponse(j.status());
  return JsonResponse(200, {{"job", jobs::JobToJson(*j)}});
}

HttpResponse Api::Submit(const Call& c) {
  const HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  Result<Json> body =
      ParseJson(r.body, "request body", MaxRequestBodyBytes(controller_->options()), 32);
  if (!body.ok()) return ErrorResponse(body.status());
  if (!body->is_object()) {
    return ErrorResponse(Status::InvalidArgument("request body: expected a JSON object"));
  }
  for (const char* f : kServerSetFields) {
    if (body->contains(f)) {
      return ErrorResponse(Status::InvalidArgument(
          std::string(f) + ": this field is set by the server; leave it out"));
    }
  }
  Result<jobs::Job> job = jobs::JobFromJson(*body, "job");
  if (!job.ok()) return ErrorResponse(job.status());
  // Before anything runs a tool on the job's values (podman inspects its image).
  if (Status s = jobs::ValidateSubmission(*job); !s.ok()) return ErrorResponse(s);
  // Over max-submission-bytes: 413 (ResourceExhausted), before its image is inspected,
  // and again once a named environment has added its image or directory.
  if (Status s = controller_->CheckSubmissionSize(*job); !s.ok()) return ErrorResponse(s);
  // An unknown environment is 404 (the client exits 3, "not found"), not a usage error.
  if (Status s = environments_.Resolve(&*job); !s.ok()) return ErrorResponse(s);
  if (Status s = controller_->CheckSubmissionSize(*job); !s.ok()) return ErrorResponse(s);
  bool duplicate = false;
  Result<jobs::Job> submitted = controller_->Submit(std::move(*job), caller, &duplicate);
  if (!submitted.ok() && submitted.status().code() == StatusCode::kResourceExhausted) {
    HttpResponse over = ErrorResponse(submitted.status());
    over.status = 429;  // a bound on the queue: try again once jobs have started
    return over;
  }
  if (!submitted.ok()) return ErrorResponse(submitted.status());
  // A retried submission (its submit_key was used): 200 with the job it made.
  if (duplicate)
    return JsonResponse(200, {{"job", jobs::JobToJson(*submitted)}, {"duplicate", true}});
  return JsonResponse(201, {{"job", jobs::JobToJson(*submitted)}});
}

HttpResponse Api::ListEnvironments(const Call&) {
  Result<std::vector<store::EnvironmentRecord>> list = environments_.List();
  if (!list.ok()) return ErrorResponse(list.status());
  OrderedJson out = OrderedJson::array();
  for (const auto& e : *list) out.push_back(EnvironmentToJson(e));
  return JsonResponse(200, {{"environments", std::move(out)}});
}

// POST /v1/environments {"name", "image" | "dir"}: registers one.
HttpResponse Api::AddEnvironment(const Call& c) {
  Result<Json> body = ParseJson(c.r.body, "request body", 64 << 10, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string name;
  std::string image;
  std::string dir;
  f.Required("name", &name);
  f.Optional("image", &image);
  f.Optional("dir", &dir);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  if (image.empty() == dir.empty()) {
    return ErrorResponse(Status::InvalidArgument("give exactly one of image or dir"));
  }
  const std::string kind = !image.empty() ? "image" : "dir";
  Result<store::EnvironmentRecord> e =
      environments_.Add(name, kind, !image.empty() ? image : dir, c.caller);
  if (!e.ok()) return ErrorResponse(e.status());
  return JsonResponse(201, {{"environment", EnvironmentToJson(*e)}});
}

// POST /v1/environments/check {"image" | "dir" | "environment", "node"?}: whether the
// pool's nodes (or one) can run it.
HttpResponse Api::CheckEnvironment(const Call& c) {
  Result<Json> body = ParseJson(c.r.body, "request body", 64 << 10, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  JsonFields f(*body, "");
  std::string image;
  std::string dir;
  std::string environment;
  std::string node;
  f.Optional("image", &image);
  f.Optional("dir", &dir);
  f.Optional("environment", &environment);
  f.Optional("node", &node);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  const int given = !image.empty() + !dir.empty() + !environment.empty();
  if (given != 1) {
    return ErrorResponse(Status::InvalidArgument("give exactly one of image, dir or environment"));
  }
  const std::string kind = !image.empty() ? "image" : !dir.empty() ? "dir" : "environment";
  const std::string location = !image.empty() ? image : !dir.empty() ? dir : environment;
  Result<jobs::EnvNeeds> needs = environments_.NeedsOf(kind, location, c.caller);
  if (!needs.ok()) return ErrorResponse(needs.status());
  OrderedJson nodes = OrderedJson::array();
  bool any = false;
  bool known = node.empty();
  for (const NodeView& v : controller_->Nodes()) {
    if (!node.empty() && v.name != node) continue;
    known = true;
    Status s = envcheck::CheckNeeds(*needs, envcheck::OfferFromNode(v.info, v.name));
    any = any || s.ok();
    nodes.push_back({{"name", v.name}, {"ok", s.ok()}, {"reason", s.message()}});
  }
  if (!known) return ErrorResponse(Status::NotFound("no node '" + node + "' in this pool"));
  return JsonResponse(
      200, {{"needs", jobs::NeedsToJson(*needs)}, {"runnable", any}, {"nodes", std::move(nodes)}});
}

HttpResponse Api::GetEnvironment(const Call& c) {
  Result<store::EnvironmentRecord> e = environments_.Get(c.Param("ref"));
  if (!e.ok()) return ErrorResponse(e.status());
  return JsonResponse(200, {{"environment", EnvironmentToJson(*e)}});
}

HttpResponse Api::RemoveEnvironment(const Call& c) {
  const std::string& ref = c.Param("ref");
  Status s = environments_.Remove(ref, c.caller.user, c.caller.admin, [this](const std::string& r) {
    return controller_->JobsUsingEnvironment(r);
  });
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, {{"removed", ref}});
}

HttpResponse Api::ListJobs(const Call& c) {
  const HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  store::JobFilter f;
  const bool all = r.Query("all") == "1";
  if (!r.Query("user").empty()) {
    f.user = r.Query("user");
  } else if (!all || !caller.admin) {
    f.user = caller.user;
  }
  if (f.user && *f.user != caller.user && !caller.admin) {
    return ErrorResponse(Status::PermissionDenied("only admins may list other users' jobs"));
  }
  f.active_only = r.Query("active") == "1";
  if (const std::string states = r.Query("state"); !states.empty()) {
    for (const std::string& s : Split(states, ',')) {
      std::string upper = s;
      for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      auto st = jobs::ParseJobState(upper);
      if (!st) {
        return ErrorResponse(Status::InvalidArgument(
            "state: unknown state '" + s +
            "'; use PENDING, ASSIGNED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT or LOST"));
      }
      f.states.push_back(*st);
    }
  }
  Result<int64_t> limit = QueryInt(r, "limit", 0, 0, 100000);
  if (!limit.ok()) return ErrorResponse(limit.status());
  // offset=N skips the newest N of those that match (a page of the dashboard's queue).
  Result<int64_t> offset = QueryInt(r, "offset", 0, 0, 1'000'000);
  if (!offset.ok()) return ErrorResponse(offset.status());
  f.limit = *limit > 0 ? static_cast<size_t>(*limit + *offset) : 0;
  Result<std::vector<jobs::Job>> jobs = controller_->List(f, caller);
  if (!jobs.ok()) return ErrorResponse(jobs.status());
  if (*offset > 0) {
    if (*limit == 0) {  // unlimited lists come oldest first: the newest N go
      jobs->resize(jobs->size() > static_cast<size_t>(*offset)
                       ? jobs->size() - static_cast<size_t>(*offset)
                       : 0);
    } else {
      jobs->erase(jobs->begin(),
                  jobs->begin() + std::min(jobs->size(), static_cast<size_t>(*offset)));
    }
  }
  OrderedJson list = OrderedJson::array();
  for (const jobs::Job& j : *jobs) list.push_back(JobJson(j));
  OrderedJson answer;
  answer["jobs"] = std::move(list);
  // all=1 from a user who is no admin lists their own jobs; the answer says so, so the
  // client can tell them instead of passing their jobs off as everyone's.
  if (all && !caller.admin) answer["all_refused"] = true;
  return JsonResponse(200, answer);
}

HttpResponse Api::Logs(const Call& c) {
  const HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  const int64_t id = c.id;
  const std::string stream = r.Query("stream", "stdout");
  if (stream != "stdout" && stream != "stderr") {
    return ErrorResponse(Status::InvalidArgument("stream: use stdout or stderr"));
  }
  Result<int64_t> offset = QueryInt(r, "offset", 0, 0, INT64_MAX);
  Result<int64_t> wait_ms = QueryInt(r, "wait_ms", 0, 0, 60'000);
  Result<int64_t> task = QueryInt(r, "task", 0, 0, 4095);
  if (!offset.ok()) return ErrorResponse(offset.status());
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  if (!task.ok()) return ErrorResponse(task.status());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait_ms);
  while (true) {
    Result<jobs::Job> job = controller_->Get(id, caller);
    if (!job.ok()) return ErrorResponse(job.status());
    const auto t = static_cast<size_t>(*task);
    if (t > 0 && t >= static_cast<size_t>(job->request.tasks)) {
      return ErrorResponse(Status::InvalidArgument("task: job " + std::to_string(id) +
                                                   " has tasks 0.." +
                                                   std::to_string(job->request.tasks - 1)));
    }
    std::string path = stream == "stdout" ? job->stdout_path : job->stderr_path;
    std::string node;
    if (t < job->tasks.size()) {
      path = stream == "stdout" ? job->tasks[t].stdout_path : job->tasks[t].stderr_path;
    } else if (t > 0) {
      path.clear();  // not placed, or placed before per-task records
    }
    if (t < job->placement.size()) node = job->placement[t].node;
    const bool ended = jobs::IsTerminal(job->state);
    Result<LogRead> got = ReadJobLog(controller_, *job, path, *offset, node);
    if (!got.ok() && (ended || *wait_ms == 0 || stopping_)) {
      // Bytes that could not be read now (a busy node, a node that is down): the caller
      // hears why, never that the log ends here.
      return ErrorResponse(got.status());
    }
    // A follower of a running job waits on, as for bytes not written yet.
    LogRead read = got.ok() ? std::move(*got) : LogRead{"", *offset, "unavailable", false};
    const int64_t next = *offset + static_cast<int64_t>(read.data.size());
    const bool eof = ended && next >= read.size;
    if (!read.data.empty() || eof || std::chrono::steady_clock::now() >= deadline) {
      HttpResponse resp;
      resp.content_type = "text/plain; charset=utf-8";
      resp.body = std::move(read.data);
      resp.headers["X-Gpupool-Next-Offset"] = std::to_string(next);
      resp.headers["X-Gpupool-Eof"] = eof ? "1" : "0";
      resp.headers["X-Gpupool-Log-Source"] = read.source;
      return resp;
    }
    if (stopping_) {
      return ErrorResponse(Status::Unavailable("the server is shutting down: follow again"));
    }
    // A relayed read costs the node a round trip: poll it less often than the disk.
    std::this_thread::sleep_for(std::chrono::milliseconds(read.source == "local" ? 50 : 250));
  }
}

HttpResponse Api::Usage(const Call& c) {
  const HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  // Metrics tokens read the pool's aggregates; users only their own.
  const bool everyone = caller.admin || c.who.kind == CallerKind::kMetrics;
  const int64_t now = clock_->NowMicros();
  Result<int64_t> until = QueryInt(r, "until_us", now, 0, INT64_MAX);
  if (!until.ok()) return ErrorResponse(until.status());
  Result<int64_t> since =
      QueryInt(r, "since_us", *until - int64_t{30} * 24 * 3600 * 1'000'000, 0, INT64_MAX);
  if (!since.ok()) return ErrorResponse(since.status());
  if (*since >= *until) {
    return ErrorResponse(Status::InvalidArgument("since_us must be before until_us"));
  }
  const std::string by = r.Query("by", "user");
  if (by != "user" && by != "project") {
    return ErrorResponse(Status::InvalidArgument("by: use user or project"));
  }
  store::JobFilter f;
  f.ended_after_us = *since;
  if (!everyone) f.user = caller.user;
  Result<std::vector<jobs::Job>> jobs = store_->ListJobs(f);
  if (!jobs.ok()) return ErrorResponse(jobs.status());
  // Job points before the memory window come from the store, summed per job.
  const int64_t split_ms = telemetry_->MemoryFromMs();
  std::vector<store::TelemetryRecord> older;
  if (*since / 1000 < split_ms) {
    Result<std::vector<store::TelemetryRecord>> stored =
        store_->ListTelemetry({.since_ms = *since / 1000,
                               .until_ms = std::min(*until / 1000, split_ms),
                               .scope = "job",
                               .step_ms = store::kTelemetryWholeRange});
    if (stored.ok()) {
      older = std::move(*stored);
    } else if (stored.status().code() != StatusCode::kUnimplemented) {
      return ErrorResponse(stored.status());
    }
  }
  const std::map<int64_t, double> used =
      telemetry_->UsedGpuHours(*since / 1000, *until / 1000, split_ms, older);
  OrderedJson rows = OrderedJson::array();
  for (const UsageRow& u : ComputeUsage(*jobs, *since, *until, now, by, used)) {
    rows.push_back({{"key", u.key},
                    {"gpu_hours", u.gpu_hours},
                    {"used_gpu_hours", u.used_gpu_hours},
                    {"efficiency", u.efficiency()},
                    {"jobs", u.jobs}});
  }
  return JsonResponse(
      200, {{"since_us", *since}, {"until_us", *until}, {"by", by}, {"rows", std::move(rows)}});
}

HttpResponse Api::CreateToken(const Call& c) {
  const HttpRequest& r = c.r;
  Result<Json> body = ParseJson(r.body, "request body", 1 << 16, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  std::string user;
  std::string kind = "user";
  int64_t expires_in_s = 0;
  JsonFields f(*body, "");
  f.Required("user", &user);
  f.Optional("kind", &kind);
  // Ten years at most; 0 (the default) never expires.
  f.Optional("expires_in_s", &expires_in_s, 0, int64_t{10} * 366 * 24 * 3600);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  if (kind != "user" && kind != "node" && kind != "metrics") {
    return ErrorResponse(Status::InvalidArgument("kind: use user, node or metrics"));
  }
  if (Status s = ValidateTokenSubject(kind, user); !s.ok()) return ErrorResponse(s);
  Result<std::pair<std::string, std::string>> tok = NewToken();
  if (!tok.ok()) return ErrorResponse(tok.status());
  store::TokenRecord rec{tok->second, user, kind, clock_->NowMicros()};
  if (expires_in_s > 0) rec.expires_us = rec.created_us + expires_in_s * 1'000'000;
  Status s = store_->PutToken(rec);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(201, {{"token", tok->first},
                            {"id", TokenId(rec)},
                            {"user", user},
                            {"kind", kind},
                            {"expires_us", rec.expires_us}});
}

HttpResponse Api::ServeAgentRegister(const Call& c) {
  const HttpRequest& r = c.r;
  const Identity& who = c.who;
  Result<Json> body = ParseJson(r.body, "request body", 8 << 20, 64);
  if (!body.ok()) return ErrorResponse(body.status());
  // Who may act for the node named is checked before anything else is read.
  std::string named;
  if (body->is_object()) {
    if (auto n = body->find("node"); n != body->end() && n->is_string()) named = *n;
  }
  if (Status s = ActAsNode(who, &named); !s.ok()) return ErrorResponse(s);
  Result<protocol::Registration> reg = protocol::DecodeRegistration(*body);
  if (!reg.ok()) return ErrorResponse(reg.status());
  reg->node = named;
  if (reg->node.empty()) return ErrorResponse(Status::InvalidArgument("node: the node's name"));
  Result<protocol::RegistrationReply> reply =
      controller_->RegisterNode(std::move(*reg), r.peer ? std::string() : r.remote);
  if (!reply.ok()) return ErrorResponse(reply.status());
  return JsonResponse(200, protocol::EncodeRegistrationReply(*reply));
}

HttpResponse Api::ServeAgentWork(const Call& c) {
  const HttpRequest& r = c.r;
  const Identity& who = c.who;
  std::string node = r.Query("node");
  if (Status s = ActAsNode(who, &node); !s.ok()) return ErrorResponse(s);
  Result<int64_t> wait_ms = QueryInt(r, "wait_ms", 0, 0, 60'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<AgentWork> work = controller_->WaitForWork(node, *wait_ms);
  if (!work.ok()) return ErrorResponse(work.status());
  return JsonResponse(200, protocol::EncodeWork(*work, controller_->NodeVersion(node)));
}

// An agent's answer to a log read: the bytes as the body, the file's size in `size`; or
// `error` (not_found, refused, io) with the agent's words as the body.
HttpResponse Api::ServeAgentLogs(const Call& c) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) return ErrorResponse(s);
  if (node.empty())
    return ErrorResponse(Status::InvalidArgument("node: the answering node's name"));
  Result<protocol::LogAnswer> answer =
      protocol::DecodeLogAnswer([&](const std::string& name) { return c.r.Query(name); }, c.r.body);
  if (!answer.ok()) return ErrorResponse(answer.status());
  if (answer->status.ok()) {
    controller_->log_relay().Answer(node, answer->id,
                                    LogChunk{std::move(answer->data), answer->size});
  } else {
    controller_->log_relay().Answer(node, answer->id, answer->status);
  }
  return JsonResponse(200, {{"ok", true}});
}

// POST /v1/agent/telemetry (protocol 1.3): the samples are kept by the hub; the store
// write and the idle policy run here, on the agent's request thread, never under the
// controller's lock.
HttpResponse Api::ServeAgentTelemetry(const Call& c) {
  Result<Json> body = ParseJson(c.r.body, "request body", 8 << 20, 16);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::TelemetryBatch> batch = protocol::DecodeTelemetryBatch(*body);
  if (!batch.ok()) return ErrorResponse(batch.status());
  if (Status s = ActAsNode(c.who, &batch->node); !s.ok()) return ErrorResponse(s);
  if (batch->node.empty()) return ErrorResponse(Status::InvalidArgument("node: the node's name"));
  if (!controller_->NodeUp(batch->node)) {
    return ErrorResponse(
        Status::NotFound("node " + batch->node + " is not registered; the agent registers first"));
  }
  // Only the node's own GPUs, and only jobs that hold that GPU now, at the share they were
  // given: a node token cannot charge or idle another node's jobs, inflate a share, or
  // grow the controller's maps with made-up GPU indices and job ids.
  const std::map<int, std::vector<protocol::TelemetryJob>> holders =
      controller_->GpuHolders(batch->node);
  std::erase_if(batch->samples,
                [&](const protocol::GpuTelemetry& g) { return holders.count(g.index) == 0; });
  for (protocol::GpuTelemetry& g : batch->samples) {
    const std::vector<protocol::TelemetryJob>& now = holders.at(g.index);
    auto holds = [&](int64_t job) {
      return std::find_if(now.begin(), now.end(),
                          [&](const protocol::TelemetryJob& t) { return t.job_id == job; });
    };
    std::vector<protocol::TelemetryJob> jobs;
    for (const protocol::TelemetryJob& t : g.jobs) {
      if (auto h = holds(t.job_id); h != now.end()) jobs.push_back(*h);
    }
    g.jobs = std::move(jobs);
    for (protocol::TelemetryProcess& p : g.processes) {
      if (holds(p.job_id) == now.end()) p.job_id = 0;
    }
  }
  const size_t kept = telemetry_->Ingest(batch->node, *batch);
  if (clock_->MonotonicMicros() - telemetry_flushed_us_ >= kTelemetryFlushUs) FlushTelemetry();
  ApplyIdlePolicy();
  return JsonResponse(200, {{"ok", true}, {"accepted", kept}});
}

Status Api::ConfigureTelemetry(TelemetryOptions options) {
  GP_RETURN_IF_ERROR(ValidateTelemetryOptions(options));
  const int64_t now_ms = clock_->NowMicros() / 1000;
  const int64_t retention_from = now_ms - options.retention_s * 1000;
  // From the store: each job's total and the pool's minutes over the retention, and the
  // GPUs' and jobs' minutes of the memory window.
  Result<std::vector<store::TelemetryRecord>> stored =
      store_->ListTelemetry({.since_ms = retention_from, .scope = "job_total"});
  if (!stored.ok() && stored.status().code() == StatusCode::kUnimplemented) {
    options.memory_window_s = options.retention_s;  // memory keeps everything
    telemetry_ = std::make_unique<TelemetryHub>(clock_, options);
    return Status::Ok();
  }
  if (!stored.ok()) return stored.status().WithContext("load the stored GPU telemetry");
  auto hub = std::make_unique<TelemetryHub>(clock_, options);
  std::vector<store::TelemetryRecord> records = std::move(*stored);
  const int64_t window_from = hub->MemoryFromMs();
  for (const store::TelemetryQuery& q :
       {store::TelemetryQuery{.since_ms = retention_from, .scope = "pool"},
        store::TelemetryQuery{.since_ms = window_from, .scope = "gpu"},
        store::TelemetryQuery{.since_ms = window_from, .scope = "job"}}) {
    Result<std::vector<store::TelemetryRecord>> more = store_->ListTelemetry(q);
    if (!more.ok()) return more.status().WithContext("load the stored GPU telemetry");
    records.insert(records.end(), std::make_move_iterator(more->begin()),
                   std::make_move_iterator(more->end()));
  }
  hub->Load(records);
  telemetry_ = std::move(hub);
  return Status::Ok();
}

void Api::FlushTelemetry() {
  std::unique_lock lock(telemetry_flush_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another request is writing them
  telemetry_flushed_us_ = clock_->MonotonicMicros();
  int64_t expire_before_ms = 0;
  std::vector<store::TelemetryRecord> points = telemetry_->TakeDirty(&expire_before_ms);
  if (!points.empty()) {
    if (Status s = store_->PutTelemetry(points); !s.ok()) {
      if (s.code() == StatusCode::kUnimplemented) return;
      spdlog::warn("telemetry: cannot store {} points yet: {}", points.size(), s.message());
      telemetry_->Requeue(std::move(points));
      return;
    }
  }
  // The retention: old points leave the store about once an hour.
  const int64_t now = clock_->MonotonicMicros();
  if (telemetry_expired_us_ == 0 || now - telemetry_expired_us_ >= int64_t{3600} * 1'000'000) {
    telemetry_expired_us_ = now;
    Result<int64_t> gone = store_->DeleteTelemetryBefore(expire_before_ms);
    if (!gone.ok() && gone.status().code() != StatusCode::kUnimplemented) {
      spdlog::warn("telemetry: cannot drop old points: {}", gone.status().message());
    }
  }
}

std::vector<int64_t> Api::ApplyIdlePolicy() {
  const TelemetryOptions& o = telemetry_->options();
  std::vector<int64_t> cancelled;
  if (o.idle_action.empty()) return cancelled;
  const int64_t now_ms = clock_->NowMicros() / 1000;
  Caller policy;
  policy.admin = true;
  for (const auto& [id, since_ms] : telemetry_->IdleJobs()) {
    Result<jobs::Job> job = controller_->Get(id, policy);
    if (!job.ok() || job->state != jobs::JobState::kRunning || job->cancel_requested) continue;
    const std::string why = "its GPUs sat below " + FormatNumber(o.idle_below_pct) + "% for " +
                            std::to_string((now_ms - since_ms) / 60'000) + " minutes";
    {
      std::lock_guard lock(idle_mu_);
      if (idle_warned_.insert(id).second) {
        spdlog::warn("idle policy: job {} of {}: {}", id, job->user, why);
      }
    }
    if (o.idle_action != "cancel") continue;
    if (now_ms - since_ms < (o.idle_after_s + o.idle_cancel_after_s) * 1000) continue;
    policy.user = "the idle policy (" + why + ")";
    if (Result<jobs::Job> c = controller_->Cancel(id, policy); c.ok()) {
      spdlog::warn("idle policy: cancelled job {} of {}: {}", id, job->user, why);
      cancelled.push_back(id);
    } else {
      spdlog::warn("idle policy: cannot cancel job {}: {}", id, c.status().message());
    }
  }
  return cancelled;
}

OrderedJson Api::JobJson(const jobs::Job& job) {
  OrderedJson j = jobs::JobToJson(job);
  std::optional<JobGpuUtil> u = telemetry_->Job(job.id);
  if (!u) return j;
  const bool idle = u->idle && job.state == jobs::JobState::kRunning;
  OrderedJson g = {{"mean_pct", u->mean_pct},
                   {"peak_pct", u->peak_pct},
                   {"peak_mem_mib", u->peak_mem_mib},
                   {"used_gpu_hours", u->used_gpu_hours},
                   {"idle", idle}};
  if (idle) {
    g["idle_since_ms"] = u->idle_since_ms;
    if (telemetry_->options().idle_action == "warn") {
      g["warning"] = "the GPUs of this job sit idle (below " +
                     FormatNumber(telemetry_->options().idle_below_pct) +
                     "%); the pool's idle policy warns about such jobs";
    }
  }
  j["gpu_util"] = std::move(g);
  return j;
}

// GET /v1/telemetry?job=ID | node=NAME[&gpu=INDEX] | (the pool), since_ms, step_s.
// Jobs: their owner or an admin; nodes and the pool: any caller that may call it.
HttpResponse Api::Telemetry(const Call& c) {
  const HttpRequest& r = c.r;
  const int64_t now_ms = clock_->NowMicros() / 1000;
  const int64_t oldest = now_ms - telemetry_->options().retention_s * 1000;
  Result<int64_t> since = QueryInt(r, "since_ms", now_ms - 3'600'000, 0, INT64_MAX);
  if (!since.ok()) return ErrorResponse(since.status());
  Result<int64_t> step = QueryInt(r, "step_s", 60, 60, 7 * 86400);
  if (!step.ok()) return ErrorResponse(step.status());
  const int64_t from = std::max(*since, oldest);
  constexpr int64_t kMaxPoints = 10'080;
  if ((now_ms - from) / (*step * 1000) > kMaxPoints) {
    return ErrorResponse(Status::InvalidArgument("since_ms and step_s ask for more than " +
                                                 std::to_string(kMaxPoints) +
                                                 " points; raise step_s"));
  }
  const std::string job = r.Query("job");
  const std::string node = r.Query("node");
  const std::string gpu = r.Query("gpu");
  if (!job.empty() && (!node.empty() || !gpu.empty())) {
    return ErrorResponse(Status::InvalidArgument("job: use job=ID or node=NAME, not both"));
  }
  if (!gpu.empty() && node.empty()) {
    return ErrorResponse(Status::InvalidArgument("gpu: give the node too (node=NAME&gpu=INDEX)"));
  }
  std::vector<TelemetryPoint> points;
  OrderedJson answer;
  // Points before the memory window are the store's, merged per step there.
  const int64_t split_ms = telemetry_->MemoryFromMs();
  auto OlderTelemetry = [&](store::TelemetryQuery q,
                            int64_t step_s) -> Result<std::vector<store::TelemetryRecord>> {
    if (q.since_ms >= split_ms) return std::vector<store::TelemetryRecord>{};
    q.until_ms = split_ms;
    q.step_ms = TelemetryHub::StepMs(step_s);
    Result<std::vector<store::TelemetryRecord>> stored = store_->ListTelemetry(q);
    if (!stored.ok() && stored.status().code() == StatusCode::kUnimplemented) {
      return std::vector<store::TelemetryRecord>{};
    }
    return stored;
  };
  if (!job.empty()) {
    if (c.who.kind == CallerKind::kMetrics) {
      return ErrorResponse(Status::PermissionDenied(
          "metrics tokens read node and pool series; a job's series is for its owner"));
    }
    Result<int64_t> id = QueryInt(r, "job", 0, 1, INT64_MAX);
    if (!id.ok()) return ErrorResponse(id.status());
    Result<jobs::Job> j = controller_->Get(*id, c.caller);
    if (!j.ok()) return ErrorResponse(j.status());
    Result<std::vector<store::TelemetryRecord>> older =
        OlderTelemetry({.since_ms = from, .scope = "job", .key = std::to_string(*id)}, *step);
    if (!older.ok()) return ErrorResponse(older.status());
    points = telemetry_->JobSeries(*id, from, *step, split_ms, *older);
    answer["job"] = *id;
  } else if (!node.empty()) {
    Result<int64_t> index = QueryInt(r, "gpu", -1, 0, 1 << 20);
    if (!index.ok()) return ErrorResponse(index.status());
    bool known = false;
    for (const NodeView& v : controller_->Nodes()) known = known || v.name == node;
    if (!known) return ErrorResponse(Status::NotFound("no node " + node));
    store::TelemetryQuery q{.since_ms = from, .scope = "gpu"};
    if (*index >= 0) {
      q.key = node + "/" + std::to_string(*index);
    } else {
      q.key_prefix = node + "/";
    }
    Result<std::vector<store::TelemetryRecord>> older = OlderTelemetry(q, *step);
    if (!older.ok()) return ErrorResponse(older.status());
    points = telemetry_->NodeSeries(node, static_cast<int>(*index), from, *step, split_ms, *older);
    answer["node"] = node;
    if (*index >= 0) answer["gpu"] = *index;
  } else {
    points = telemetry_->PoolSeries(from, *step);
  }
  OrderedJson list = OrderedJson::array();
  for (const TelemetryPoint& p : points) {
    list.push_back({{"t_ms", p.t_ms},
                    {"util_pct", p.util_pct},
                    {"mem_used_mib", p.mem_used_mib},
                    {"gpus", p.gpus}});
  }
  answer["step_s"] = *step - *step % 60;
  answer["points"] = std::move(list);
  return JsonResponse(200, answer);
}

HttpResponse Api::ServeAgentEvents(const Call& c) {
  const HttpRequest& r = c.r;
  const Identity& who = c.who;
  Result<Json> body = ParseJson(r.body, "request body", 8 << 20, 16);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::EventBatch> batch = protocol::DecodeEventBatch(*body);
  if (!batch.ok()) return ErrorResponse(batch.status());
  if (Status s = ActAsNode(who, &batch->node); !s.ok()) return ErrorResponse(s);
  if (batch->node.empty()) return ErrorResponse(Status::InvalidArgument("node: the node's name"));
  Status s = controller_->ApplyEvents(batch->node, *batch);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, {{"ok", true}});
}

// POST /v1/jobs/ID/exec {"task": N | "host": H, "argv": [...]}: starts a command in a task
// of a running job (gpupool exec).
HttpResponse Api::StartExec(const Call& c) {
  const HttpRequest& r = c.r;
  const Caller& caller = c.caller;
  const int64_t id = c.id;
  Result<Json> body = ParseJson(r.body, "request body", 1 << 20, 8);
  if (!body.ok()) return ErrorResponse(body.status());
  int task = -1;
  std::string host;
  std::vector<std::string> argv;
  JsonFields f(*body, "");
  f.Optional("task", &task, 0, 4095);
  f.Optional("host", &host);
  f.Optional("argv", &argv);
  ExecOptions io;
  f.Optional("tty", &io.tty);
  f.Optional("stdin", &io.stdin_open);
  f.Optional("rows", &io.rows, 0, 10000);
  f.Optional("cols", &io.cols, 0, 10000);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  if (io.tty) io.stdin_open = true;  // a terminal is typed into
  if (argv.empty() || argv.size() > 4096) {
    return ErrorResponse(Status::InvalidArgument("argv: 1..4096 arguments, e.g. [\"hostname\"]"));
  }
  for (const std::string& a : argv) {
    if (a.find('\0') != std::string::npos || a.size() > 65536) {
      return ErrorResponse(
          Status::InvalidArgument("argv: an argument has a NUL byte or is too long"));
    }
  }
  if ((task < 0) == host.empty()) {
    return ErrorResponse(Status::InvalidArgument("give task (an index) or host (a task's host)"));
  }
  if (task < 0) {
    Result<jobs::Job> job = controller_->Get(id, caller);
    if (!job.ok()) return ErrorResponse(job.status());
    for (size_t t = 0; t < job->tasks.size() && task < 0; ++t) {
      if (job->tasks[t].host == host || job->placement[t].node == host) task = static_cast<int>(t);
    }
    if (task < 0) {
      std::string hosts;
      for (const jobs::TaskStatus& t : job->tasks) hosts += (hosts.empty() ? "" : ", ") + t.host;
      return ErrorResponse(
          Status::InvalidArgument("host: '" + host + "' runs no task of job " + std::to_string(id) +
                                  " (its hosts: " + (hosts.empty() ? "none yet" : hosts) + ")"));
    }
  }
  Result<int64_t> x = controller_->StartExec(id, task, std::move(argv), caller, io);
  if (!x.ok()) return ErrorResponse(x.status());
  return JsonResponse(201, {{"id", *x}, {"job_id", id}, {"task", task}});
}

// GET /v1/exec/EID?wait_ms&started&ended: the session (long poll until it differs).
HttpResponse Api::GetExec(const Call& c) {
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 60'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<int64_t> stdout_offset = QueryInt(c.r, "stdout_offset", 0, 0, INT64_MAX);
  if (!stdout_offset.ok()) return ErrorResponse(stdout_offset.status());
  Result<int64_t> stderr_offset = QueryInt(c.r, "stderr_offset", 0, 0, INT64_MAX);
  if (!stderr_offset.ok()) return ErrorResponse(stderr_offset.status());
  Result<ExecSession> x = controller_->WaitExec(c.id, c.caller, c.r.Query("started") == "1",
                                                c.r.Query("ended") == "1", *wait_ms);
  if (!x.ok()) return ErrorResponse(x.status());
  OrderedJson j;
  j["id"] = x->id;
  j["job_id"] = x->job_id;
  j["task"] = x->task_index;
  j["node"] = x->node;
  j["started"] = x->started;
  j["ended"] = x->ended;
  if (x->exit_code) j["exit_code"] = *x->exit_code;
  if (x->signal) j["signal"] = *x->signal;
  if (!x->error.empty()) j["error"] = x->error;
  if (c.r.Query("output") == "1" && x->ended && x->output_complete) {
    // The rest of its output, which came with its end: the client needs no output reads.
    const int64_t from[2] = {*stdout_offset, *stderr_offset};
    const char* key[2] = {"stdout", "stderr"};
    j["output_complete"] = true;
    for (int i = 0; i < 2; ++i) {
      const std::string& all = x->complete_output[i];
      const size_t at = static_cast<size_t>(std::min<int64_t>(from[i], std::ssize(all)));
      j[key[i]] = Base64Encode(std::string_view(all).substr(at));
    }
  }
  return JsonResponse(200, j);
}

// GET /v1/exec/EID/output?stream&offset: the session's output, relayed from its node.
HttpResponse Api::ExecOutput(const Call& c) {
  const std::string stream = c.r.Query("stream", "stdout");
  if (stream != "stdout" && stream != "stderr") {
    return ErrorResponse(Status::InvalidArgument("stream: use stdout or stderr"));
  }
  Result<int64_t> offset = QueryInt(c.r, "offset", 0, 0, INT64_MAX);
  if (!offset.ok()) return ErrorResponse(offset.status());
  Result<ExecSession> x = controller_->WaitExec(c.id, c.caller, false, false, 0);
  if (!x.ok()) return ErrorResponse(x.status());
  const std::string& path = stream == "stdout" ? x->stdout_path : x->stderr_path;
  HttpResponse resp;
  resp.content_type = "application/octet-stream";
  int64_t size = 0;
  if (x->output_complete) {
    // The whole output came with the session's end: no relay from the node.
    const std::string& all = x->complete_output[stream == "stdout" ? 0 : 1];
    size = static_cast<int64_t>(all.size());
    if (*offset < size) {
      resp.body =
          all.substr(static_cast<size_t>(*offset), static_cast<size_t>(kMaxRelayedLogChunk));
    }
  } else if (!path.empty() && controller_->NodeUp(x->node)) {
    Result<LogChunk> chunk = controller_->log_relay().Fetch(x->node, path, *offset,
                                                            kMaxRelayedLogChunk, kLogRelayTimeout);
    if (!chunk.ok() && chunk.status().code() != StatusCode::kNotFound) {
      return ErrorResponse(chunk.status());
    }
    if (chunk.ok()) {
      resp.body = std::move(chunk->data);
      size = chunk->size;
    }
  }
  const int64_t next = *offset + static_cast<int64_t>(resp.body.size());
  resp.headers["X-Gpupool-Next-Offset"] = std::to_string(next);
  resp.headers["X-Gpupool-Eof"] = x->ended && next >= size ? "1" : "0";
  return resp;
}

// DELETE /v1/exec/EID: stops the session's command.
HttpResponse Api::CancelExec(const Call& c) {
  Status s = controller_->CancelExec(c.id, c.caller);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, {{"ok", true}});
}

// POST /v1/jobs/ID/attach?wait_ms {"rows", "cols"}: gpupool run and alloc wait here for
// their job to be placed (controller.h, AttachRun).
HttpResponse Api::AttachJob(const Call& c) {
  Result<Json> body = ParseJson(c.r.body.empty() ? "{}" : c.r.body, "request body", 16 << 10, 4);
  if (!body.ok()) return ErrorResponse(body.status());
  int rows = 0;
  int cols = 0;
  JsonFields f(*body, "");
  f.Optional("rows", &rows, 0, 10000);
  f.Optional("cols", &cols, 0, 10000);
  if (Status s = f.Finish(); !s.ok()) return ErrorResponse(s);
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  jobs::Job job;
  Result<int64_t> session = controller_->AttachRun(c.id, c.caller, rows, cols, *wait_ms, &job);
  if (!session.ok()) return ErrorResponse(session.status());
  if (job.id == 0) {
    Result<jobs::Job> j = controller_->Get(c.id, c.caller);
    if (!j.ok()) return ErrorResponse(j.status());
    job = std::move(*j);
  }
  return JsonResponse(200, {{"session", *session}, {"job", jobs::JobToJson(job)}});
}

// GET /v1/exec/EID/stream?stdout_offset&stderr_offset&started&wait_ms: an interactive
// session's output from those offsets and its state (long poll until there is news).
HttpResponse Api::ExecStream(const Call& c) {
  Result<int64_t> out = QueryInt(c.r, "stdout_offset", 0, 0, INT64_MAX);
  if (!out.ok()) return ErrorResponse(out.status());
  Result<int64_t> err = QueryInt(c.r, "stderr_offset", 0, 0, INT64_MAX);
  if (!err.ok()) return ErrorResponse(err.status());
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<ExecStreamRead> x = controller_->ReadExecStream(c.id, c.caller, *out, *err,
                                                         c.r.Query("started") == "1", *wait_ms);
  if (!x.ok()) return ErrorResponse(x.status());
  OrderedJson j;
  j["id"] = c.id;
  j["stdout"] = Base64Encode(x->stdout_data);
  j["stderr"] = Base64Encode(x->stderr_data);
  j["stdout_next"] = x->stdout_next;
  j["stderr_next"] = x->stderr_next;
  j["eof"] = x->eof;
  j["started"] = x->started;
  j["ended"] = x->ended;
  if (x->exit_code) j["exit_code"] = *x->exit_code;
  if (x->signal) j["signal"] = *x->signal;
  if (!x->error.empty()) j["error"] = x->error;
  return JsonResponse(200, j);
}

// POST /v1/exec/EID/input: one input item (protocol::ExecInputItem) for the session.
HttpResponse Api::ExecInput(const Call& c) {
  Result<Json> body = ParseJson(c.r.body, "request body", 1 << 20, 4);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::ExecInputItem> item = protocol::DecodeExecInputItem(*body, "input");
  if (!item.ok()) return ErrorResponse(item.status());
  Status s = controller_->PushExecInput(c.id, c.caller, std::move(*item));
  if (!s.ok()) {
    HttpResponse r = ErrorResponse(s);
    if (s.code() == StatusCode::kResourceExhausted) r.status = 429;
    return r;
  }
  return JsonResponse(200, {{"ok", true}});
}

// GET /v1/agent/exec/EID/input?node&after&wait_ms: the client's input for the agent.
HttpResponse Api::AgentExecInput(const Call& c) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) return ErrorResponse(s);
  Result<int64_t> after = QueryInt(c.r, "after", 0, 0, INT64_MAX);
  if (!after.ok()) return ErrorResponse(after.status());
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<protocol::ExecInput> in = controller_->TakeExecInput(node, c.id, *after, *wait_ms);
  if (!in.ok()) return ErrorResponse(in.status());
  return JsonResponse(200, protocol::EncodeExecInput(*in));
}

// POST /v1/agent/exec/EID/output?node&wait_ms: what the session's command printed; the
// answer waits up to wait_ms while the client is behind.
HttpResponse Api::AgentExecOutput(const Call& c) {
  std::string node = c.r.Query("node");
  if (Status s = ActAsNode(c.who, &node); !s.ok()) return ErrorResponse(s);
  Result<Json> body = ParseJson(c.r.body, "request body", 2 << 20, 4);
  if (!body.ok()) return ErrorResponse(body.status());
  Result<protocol::ExecOutput> out = protocol::DecodeExecOutput(*body);
  if (!out.ok()) return ErrorResponse(out.status());
  Result<int64_t> wait_ms = QueryInt(c.r, "wait_ms", 0, 0, 30'000);
  if (!wait_ms.ok()) return ErrorResponse(wait_ms.status());
  Result<protocol::ExecOutputAck> ack = controller_->PutExecOutput(node, c.id, *out, *wait_ms);
  if (!ack.ok()) return ErrorResponse(ack.status());
  return JsonResponse(200, protocol::EncodeExecOutputAck(*ack));
}

}  // namespace gpupool::controller
