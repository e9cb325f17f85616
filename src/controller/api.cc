#include "controller/api.h"

#include <spdlog/spdlog.h>

#include <condition_variable>
#include <mutex>
#include <optional>

#include "common/json.h"
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

// Api::Handle's answer for a caller that waits for it on its own thread.
class WaitingResponder final : public net::HttpResponder {
 public:
  bool Complete(net::HttpResponse response) override {
    std::lock_guard lock(mu_);
    if (answer_) return false;
    answer_ = std::move(response);
    cv_.notify_all();
    return true;
  }
  void OnAbandoned(std::function<void()>) override {}  // it is never abandoned
  net::HttpResponse Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return answer_.has_value(); });
    return std::move(*answer_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<net::HttpResponse> answer_;
};

// A responder that holds the request's slot of a RequestLimiter until it is answered
// or abandoned.
class SlotResponder final : public net::HttpResponder {
 public:
  SlotResponder(std::shared_ptr<net::HttpResponder> inner, std::optional<RequestLimiter::Slot> slot)
      : inner_(std::move(inner)), slot_(std::make_shared<Held>(std::move(slot))) {}
  bool Complete(net::HttpResponse response) override {
    const bool answered = inner_->Complete(std::move(response));
    slot_->Release();
    return answered;
  }
  void OnAbandoned(std::function<void()> fn) override {
    inner_->OnAbandoned([slot = slot_, fn = std::move(fn)] {
      slot->Release();
      fn();
    });
  }

 private:
  struct Held {
    explicit Held(std::optional<RequestLimiter::Slot> s) : slot(std::move(s)) {}
    void Release() {
      std::lock_guard lock(mu);
      slot.reset();
    }
    std::mutex mu;
    std::optional<RequestLimiter::Slot> slot;
  };
  std::shared_ptr<net::HttpResponder> inner_;
  std::shared_ptr<Held> slot_;
};

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

bool Api::IsAgentTraffic(const net::HttpRequest& request) {
  return StartsWith(request.path, "/v1/agent/");
}

net::HttpResponse Api::Handle(const net::HttpRequest& request) {
  auto waiting = std::make_shared<WaitingResponder>();
  Handle(request, waiting);
  return waiting->Wait();
}

void Api::LogServerError(const net::HttpRequest& request, const api::Route* route,
                         const net::HttpResponse& answer) {
  // The request's route, not its path: one line per endpoint, whatever the ids.
  const std::string where =
      request.method + " " +
      (route != nullptr ? api::DocumentedPattern(route->pattern) : std::string("(no route)"));
  int64_t held = 0;
  if (!server_errors_.Allow(where, clock_->MonotonicMicros(), &held)) return;
  std::string why = answer.body.substr(0, 1000);
  if (Result<Json> body = ParseJson(answer.body, "the answer", 1 << 20, 8);
      body.ok() && body->is_object() && body->contains("error") && (*body)["error"].is_string()) {
    why = (*body)["error"].get<std::string>();
  }
  spdlog::error(
      "API {}: {} {}{}", where, answer.status, why,
      held > 0 ? fmt::format(" ({} more such answers since the last line)", held) : std::string());
}

void Api::Handle(const net::HttpRequest& request, std::shared_ptr<net::HttpResponder> out) {
  std::optional<net::HttpResponse> now;
  api::RouteMatch match = api::Find(request.method, request.path);
  const api::Route* route = match.route;
  if (match.route != nullptr && match.route->access.anyone) {
    // Public routes answer anyone (load balancers, systemd, client generators, browsers
    // not signed in yet): they carry no job or user data.
    now = Dispatch(request, Anonymous(), std::move(match), out, std::nullopt);
  } else if (Dashboard::UsesSession(request)) {
    // A browser signed in to the dashboard: its session cookie stands for its token,
    // which authenticates it below as the token itself would (a revoked token fails at
    // once).
    Dashboard::SessionCheck session = dashboard_.CheckSession(request);
    if (session.status != 200) {
      now = api::JsonResponse(session.status, {{"error", session.error}});
      AddDashboardSecurityHeaders(&*now);
    } else {
      net::HttpRequest with_token = request;
      with_token.headers["authorization"] = "Bearer " + session.token;
      now = HandleAuthenticated(with_token, std::move(match), out);
    }
  } else {
    now = HandleAuthenticated(request, std::move(match), out);
  }
  if (!now) return;
  // The server's own faults (a store it cannot write, say) are its operator's news, not
  // only the caller's: the log has them, at most one line per endpoint per 10 s.
  if (now->status >= 500) LogServerError(request, route, *now);
  out->Complete(std::move(*now));
}

std::optional<net::HttpResponse> Api::HandleAuthenticated(
    const net::HttpRequest& request, api::RouteMatch match,
    const std::shared_ptr<net::HttpResponder>& out) {
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
  if (match.route != nullptr && api::Waits(*match.route, request)) {
    // Keyed by what authenticated the caller: its uid on the socket, else its token.
    const std::string auth = request.Header("authorization");
    const std::string key = request.peer && auth.empty()
                                ? "uid:" + std::to_string(request.peer->uid)
                                : "token:" + HashToken(auth);
    std::string why;
    if (match.route->later != nullptr) {
      // A poll for work holds no thread: bounded per node it polls for (root on the
      // socket polls for every node of `gpupool up`, or of a node simulator).
      slot = polls_.TryAcquire(key + " node:" + request.Query("node"), &why);
    } else {
      // An agent waits once per interactive session on its node: its own, larger quota,
      // apart from its users'.
      const bool agent = match.route->access.callers == api::kAgentBits;
      slot = (agent ? agent_waiting_ : waiting_).TryAcquire(key, &why);
    }
    if (!slot) return api::ErrorOrTooMany(Status::ResourceExhausted(why));
  }
  return Dispatch(request, *who, std::move(match), out, std::move(slot));
}

std::optional<net::HttpResponse> Api::Dispatch(const net::HttpRequest& r, const Identity& who,
                                               api::RouteMatch match,
                                               const std::shared_ptr<net::HttpResponder>& out,
                                               std::optional<RequestLimiter::Slot> slot) {
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
  if (route->later != nullptr && api::Waits(*route, r)) {
    // Answered later, holding its slot until then; no thread waits meanwhile.
    route->later(ctx_, call, std::make_shared<SlotResponder>(out, std::move(slot)));
    return std::nullopt;
  }
  net::HttpResponse answer = route->handler(ctx_, call);
  if (!api::Waits(*route, r)) {  // long polls would say how long clients chose to wait
    controller_->metrics().ObserveRequest(
        r.method, api::DocumentedPattern(route->pattern),
        static_cast<double>(clock_->MonotonicMicros() - start_us) / 1e6);
  }
  return answer;
}

}  // namespace gpupool::controller
