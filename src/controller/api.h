// The REST API of docs/api.md: authenticates each request's caller and hands it to the
// route that answers it (api/route_table.h: who may call a route, whether it may block,
// and its handler under api/). Business that outlives a request runs in services of its
// own: GPU telemetry's store writes and idle policy (telemetry_service.h) and the pool's
// accounting for GET /metrics (pool_accounting.h). Thread-safe (the controller and store
// are).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/log_throttle.h"
#include "controller/api/handler.h"
#include "controller/api/route_table.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/dashboard.h"
#include "controller/environments.h"
#include "controller/pool_accounting.h"
#include "controller/request_limiter.h"
#include "controller/telemetry_service.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {

class Api {
 public:
  // All pointers must outlive the Api. Images are inspected by `inspector`, or, when it is
  // null, by podman on this host.
  Api(Controller* controller, store::Store* store, const Clock* clock, AuthOptions auth,
      EnvInspector* inspector = nullptr);
  ~Api() { Stop(); }

  // Answers `request`: 401 when the caller is not authenticated, 403 when its kind may not
  // use the endpoint (the route's access, endpoint_access.h), 429 when it waits too often
  // at once, 404 (or 400 for another method on a known path) when no route matches; else
  // the route's answer. Routes marked public (GET /healthz, /readyz, /v1/openapi.json,
  // the dashboard's pages and its sign-in) answer anyone. Without a token or a
  // Unix-socket peer, a dashboard session cookie authenticates the requests
  // Dashboard::SessionMayCall allows, as its token would (401 without a live session, 403
  // for others). Answers through `out`: at once, or, for a long poll whose route answers
  // later (an agent's poll for work), once the controller has work or the wait ends, with
  // no thread waiting meanwhile (net::HttpAsyncHandler).
  void Handle(const net::HttpRequest& request, std::shared_ptr<net::HttpResponder> out);
  // The same answer, this thread waiting for it (tests, tools).
  net::HttpResponse Handle(const net::HttpRequest& request);

  // One route of the API: an HTTP method and an OpenAPI path template
  // ("/v1/jobs/{id}/cancel").
  struct RouteInfo {
    std::string method;
    std::string pattern;
  };
  // Every route the API answers, in the router's order (api::Table). docs/openapi.json
  // describes each (openapi_test.cc checks both ways).
  static std::vector<RouteInfo> Routes();

  // Whether handling `request` may block a thread for long (its route's Blocking: a long
  // poll with wait_ms, a read relayed from a node, or an inspection of an image or a
  // directory): the HTTP server gives such requests a thread of their own instead of a
  // pool thread. An agent's poll for work waits without one (its route answers later).
  static bool MayBlock(const net::HttpRequest& request);
  // Whether `request` is an agent's (/v1/agent/*: polls, event reports, registrations,
  // telemetry), over either transport: the HTTP server serves those at a lower priority
  // than users' requests (net::HttpServerOptions::background).
  static bool IsAgentTraffic(const net::HttpRequest& request);

  // Waiting requests on threads of their own (MayBlock) in flight at once: per caller (a
  // Unix-socket uid or a token) and in all; over either bound the answer is 429 at once.
  static constexpr size_t kMaxWaitingPerCaller = 16;
  static constexpr size_t kMaxWaitingPerAgent = 256;  // /v1/agent/*: one per session
  static constexpr size_t kMaxWaiting = 1024;
  // Agents' polls for work waiting at once, which hold no thread: per caller and node
  // (an agent polls once at a time; a restarted one's last poll may linger), and in all
  // (connections bound them before that).
  static constexpr size_t kMaxPollsPerNode = 16;
  static constexpr size_t kMaxPolls = 100'000;

  // Starts the services' threads (telemetry, accounting). Call once the telemetry is
  // configured; an Api never started answers all the same, and tests drive its services
  // directly.
  void Start();
  // Ends waits in progress (log follows) and directory inspections so that the HTTP
  // server can stop at once, and stops the services' threads (the telemetry gathered is
  // written first). Idempotent.
  void Stop();

  // What GET /v1/controllers answers (the daemon's leadership); without it, that this is
  // a lone controller. Set before the first request.
  void SetControllersView(std::function<Result<OrderedJson>()> view) {
    controllers_view_ = std::move(view);
  }

  // GPU telemetry (issue 17): TelemetryService::Configure. Call before Start and the first
  // request.
  Status ConfigureTelemetry(TelemetryOptions options) {
    return telemetry_.Configure(std::move(options));
  }
  TelemetryHub& telemetry() { return telemetry_.hub(); }
  TelemetryService& telemetry_service() { return telemetry_; }
  PoolAccounting& accounting() { return accounting_; }

 private:
  // Handle() once the dashboard's session cookie, if any, became its token.
  // Each returns the answer, or nullopt when `out` answers later.
  std::optional<net::HttpResponse> HandleAuthenticated(
      const net::HttpRequest& request, api::RouteMatch match,
      const std::shared_ptr<net::HttpResponder>& out);
  // The route's answer (NoRoute's without one), with the request's metrics; a waiting
  // request of a route that answers later is handed `out`, with `slot`.
  std::optional<net::HttpResponse> Dispatch(const net::HttpRequest& r, const Identity& who,
                                            api::RouteMatch match,
                                            const std::shared_ptr<net::HttpResponder>& out,
                                            std::optional<RequestLimiter::Slot> slot);
  // Logs a 5xx answer (error level, throttled per endpoint by server_errors_).
  void LogServerError(const net::HttpRequest& request, const api::Route* route,
                      const net::HttpResponse& answer);

  Controller* controller_;
  store::Store* store_;
  const Clock* clock_;
  AuthOptions auth_;
  LogThrottle server_errors_{10'000'000};
  std::atomic<bool> stopping_{false};
  RequestLimiter waiting_{kMaxWaitingPerCaller, kMaxWaiting};
  RequestLimiter agent_waiting_{kMaxWaitingPerAgent, kMaxWaiting};
  RequestLimiter polls_{kMaxPollsPerNode, kMaxPolls};
  std::unique_ptr<EnvInspector> own_inspector_;
  Environments environments_;
  std::function<Result<OrderedJson>()> controllers_view_;
  Dashboard dashboard_;
  TelemetryService telemetry_;
  PoolAccounting accounting_;  // after telemetry_, which it reads
  api::ApiContext ctx_;        // last: pointers to the members above
};

}  // namespace gpupool::controller
