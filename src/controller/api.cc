#include "controller/api.h"

#include <optional>

#include "common/strings.h"
#include "controller/endpoint_access.h"
#include "net/http_status.h"

namespace gpupool::controller {
namespace {

// Who calls a public route: no one in particular, with no rights.
const Identity& Anonymous() {
  static const Identity anonymous{CallerKind::kUser,
                                  Caller{"", kNodeCallerUid, kNodeCallerUid, false}, "", false};
  return anonymous;
}

}  // namespace

Api::Api(Controller* controller, store::Store* store, const Clock* clock, AuthOptions auth,
         EnvInspector* inspector)
    : controller_(controller),
      store_(store),
      clock_(clock),
      auth_(std::move(auth)),
      own_inspector_(inspector == nullptr ? NewPodmanInspector({}, clock) : nullptr),
      environments_(store, inspector == nullptr ? own_inspector_.get() : inspector, clock),
      dashboard_(store, clock, auth_),
      telemetry_(controller, store, clock),
      accounting_(controller, store, clock, &telemetry_),
      ctx_{controller,  store,        clock,      &environments_,    &dashboard_,
           &telemetry_, &accounting_, &stopping_, &controllers_view_} {}

void Api::Start() {
  telemetry_.Start();
  accounting_.Start();
}

void Api::Stop() {
  stopping_ = true;
  environments_.Stop();
  accounting_.Stop();
  telemetry_.Stop();
}

std::vector<Api::RouteInfo> Api::Routes() {
  std::vector<RouteInfo> out;
  for (const api::Route& route : api::Table()) {
    out.push_back({std::string(route.method), api::DocumentedPattern(route.pattern)});
  }
  return out;
}

bool Api::MayBlock(const net::HttpRequest& request) {
  const api::RouteMatch m = api::Find(request.method, request.path);
  return m.route != nullptr && api::MayBlock(*m.route, request);
}

net::HttpResponse Api::Handle(const net::HttpRequest& request) {
  api::RouteMatch match = api::Find(request.method, request.path);
  // Public routes answer anyone (load balancers, systemd, client generators, browsers
  // not signed in yet): they carry no job or user data.
  if (match.route != nullptr && match.route->access.anyone) {
    return Dispatch(request, Anonymous(), std::move(match));
  }
  // A browser signed in to the dashboard: its session cookie stands for its token, which
  // authenticates it below as the token itself would (a revoked token fails at once).
  if (Dashboard::UsesSession(request)) {
    Dashboard::SessionCheck session = dashboard_.CheckSession(request);
    if (session.status != 200) {
      net::HttpResponse r = api::JsonResponse(session.status, {{"error", session.error}});
      AddDashboardSecurityHeaders(&r);
      return r;
    }
    net::HttpRequest with_token = request;
    with_token.headers["authorization"] = "Bearer " + session.token;
    return HandleAuthenticated(with_token, std::move(match));
  }
  return HandleAuthenticated(request, std::move(match));
}

net::HttpResponse Api::HandleAuthenticated(const net::HttpRequest& request, api::RouteMatch match) {
  Result<Identity> who = Authenticate(request, *store_, auth_, clock_->NowMicros());
  if (!who.ok()) {
    net::HttpResponse r = api::ErrorResponse(who.status());
    // Not authenticated (no, unknown, revoked or expired token): 401, as docs/api.md says.
    if (who.status().code() == StatusCode::kPermissionDenied) {
      r.status = 401;
      r.headers["WWW-Authenticate"] = "Bearer";
    }
    return r;
  }
  // The caller's kind decides which endpoints it may use, before anything else looks at
  // the request.
  const api::Access access = match.route != nullptr
                                 ? match.route->access
                                 : api::UnroutedAccess(request.path, match.path_known);
  if (Status s = CheckAccess(*who, access, request.method + " " + request.path); !s.ok()) {
    return api::ErrorResponse(s);
  }
  std::optional<RequestLimiter::Slot> slot;
  if (match.route != nullptr && api::MayBlock(*match.route, request)) {
    // Keyed by what authenticated the caller: its uid on the socket, else its token.
    const std::string auth = request.Header("authorization");
    const std::string key = request.peer && auth.empty()
                                ? "uid:" + std::to_string(request.peer->uid)
                                : "token:" + HashToken(auth);
    std::string why;
    // An agent waits once for work and once per interactive session on its node: its
    // own, larger quota, apart from its users'.
    const bool agent = match.route->access.callers == api::kAgentBits;
    slot = (agent ? agent_waiting_ : waiting_).TryAcquire(key, &why);
    if (!slot) return api::ErrorOrTooMany(Status::ResourceExhausted(why));
  }
  return Dispatch(request, *who, std::move(match));
}

net::HttpResponse Api::Dispatch(const net::HttpRequest& r, const Identity& who,
                                api::RouteMatch match) {
  const api::Route* route = match.route;
  if (route == nullptr) return api::NoRoute(r, match.path_known);
  const int64_t start_us = clock_->MonotonicMicros();
  api::Call call{r, who, who.caller, match.params.id, -1, std::move(match.params.named)};
  if (match.params.element >= 0) {  // ARRAY_INDEX: the element's own job id
    Result<int64_t> id =
        controller_->ArrayElementId(match.params.id, match.params.element, who.caller);
    if (!id.ok()) return api::ErrorResponse(id.status());
    call.id = *id;
    call.element = match.params.element;
  }
  net::HttpResponse answer = route->handler(ctx_, call);
  if (!api::MayBlock(*route, r)) {  // long polls would say how long clients chose to wait
    controller_->metrics().ObserveRequest(
        r.method, api::DocumentedPattern(route->pattern),
        static_cast<double>(clock_->MonotonicMicros() - start_us) / 1e6);
  }
  return answer;
}

}  // namespace gpupool::controller
