// The REST API of docs/api.md: routes HTTP requests to the Controller after
// authenticating the caller. Thread-safe (the controller and store are).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/dashboard.h"
#include "controller/environments.h"
#include "controller/request_limiter.h"
#include "controller/telemetry.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {

class Api {
 public:
  // All pointers must outlive the Api. Images are inspected by `inspector`, or, when it is
  // null, by podman on this host.
  Api(Controller* controller, store::Store* store, const Clock* clock, AuthOptions auth,
      EnvInspector* inspector = nullptr)
      : controller_(controller),
        store_(store),
        clock_(clock),
        auth_(std::move(auth)),
        own_inspector_(inspector == nullptr ? NewPodmanInspector({}, clock) : nullptr),
        environments_(store, inspector == nullptr ? own_inspector_.get() : inspector, clock),
        dashboard_(store, clock, auth_),
        telemetry_(std::make_unique<TelemetryHub>(clock)) {}

  // Answers `request`: 401 when the caller is not authenticated, 403 when its kind may not
  // use the endpoint (endpoint_access.h), 429 when it waits too often at once, 404 (or 400
  // for another method on a known path) when no route matches; else the route's answer.
  // GET /healthz, /readyz and /v1/openapi.json answer anyone (IsPublic), as do the
  // dashboard's pages and its sign-in (dashboard.h). Without a token or a Unix-socket
  // peer, a dashboard session cookie authenticates the requests Dashboard::SessionMayCall
  // allows, as its token would (401 without a live session, 403 for others).
  net::HttpResponse Handle(const net::HttpRequest& request);

  // One route of the API: an HTTP method and an OpenAPI path template
  // ("/v1/jobs/{id}/cancel").
  struct RouteInfo {
    std::string method;
    std::string pattern;
  };
  // Every route the API answers, in the router's order. docs/openapi.json describes each
  // (openapi_test.cc checks both ways).
  static std::vector<RouteInfo> Routes();

  // Whether handling `request` may take long (a long poll with wait_ms, or a podman image
  // inspection for a submission or an environment): the HTTP server gives such requests
  // a thread of their own instead of a pool thread.
  static bool MayBlock(const net::HttpRequest& request);

  // Waiting requests (MayBlock) in flight at once: per caller (a Unix-socket uid or a
  // token) and in all; over either bound the answer is 429 at once.
  static constexpr size_t kMaxWaitingPerCaller = 16;
  static constexpr size_t kMaxWaitingPerAgent = 256;  // /v1/agent/*: work + one per session
  static constexpr size_t kMaxWaiting = 1024;

  // Ends waits in progress (log follows) and directory inspections so that the HTTP
  // server can stop at once.
  void Stop() {
    stopping_ = true;
    environments_.Stop();
  }

  // What GET /v1/controllers answers (the daemon's leadership); without it, that this is
  // a lone controller. Set before the first request.
  void SetControllersView(std::function<Result<OrderedJson>()> view) {
    controllers_view_ = std::move(view);
  }

  // GPU telemetry (issue 17; telemetry.h): replaces the default hub with one of these
  // options and loads from the store the job totals and pool series of the retention and
  // the GPU and job points of the memory window. InvalidArgument for bad options (naming
  // the flag); with a store without telemetry the hub keeps the whole retention in memory.
  // Call before the first request.
  Status ConfigureTelemetry(TelemetryOptions options);
  TelemetryHub& telemetry() { return *telemetry_; }
  // Writes the telemetry points gathered since the last call to the store and drops
  // those past the retention (the telemetry POSTs call it, at most every
  // kTelemetryFlushUs; tests call it directly). Never under the controller's lock.
  void FlushTelemetry();
  // The idle policy (--idle-action): warns about or cancels running jobs whose GPUs
  // sit idle. The telemetry POSTs call it; returns the jobs it cancelled.
  std::vector<int64_t> ApplyIdlePolicy();
  static constexpr int64_t kTelemetryFlushUs = 30'000'000;

 private:
  // A request matched to a route, with the route's path parameters.
  struct Call;
  using Handler = net::HttpResponse (Api::*)(const Call& c);
  struct RouteEntry {
    std::string_view method;
    std::string_view pattern;  // see Table() for the parameter forms
    Handler handler;
  };
  // The routing table: one line per route.
  static std::span<const RouteEntry> Table();

  // Handle() after the dashboard's session cookie, if any, became its token.
  net::HttpResponse HandleAuthenticated(const net::HttpRequest& request);
  net::HttpResponse Route(const net::HttpRequest& r, const Identity& who);

  // Handlers, one per route (the table in api.cc says which).
  net::HttpResponse Healthz(const Call& c);
  net::HttpResponse Readyz(const Call& c);
  net::HttpResponse OpenApi(const Call& c);
  // The dashboard (dashboard.h): its page and assets, sign-in, sign-out, the session.
  net::HttpResponse DashboardAsset(const Call& c);
  net::HttpResponse DashboardLogin(const Call& c);
  net::HttpResponse DashboardLogout(const Call& c);
  net::HttpResponse DashboardSession(const Call& c);
  net::HttpResponse Submit(const Call& c);
  net::HttpResponse ListJobs(const Call& c);
  net::HttpResponse GetJob(const Call& c);
  net::HttpResponse CancelJobOrArray(const Call& c);
  net::HttpResponse HoldJob(const Call& c);
  net::HttpResponse ReleaseJob(const Call& c);
  net::HttpResponse Logs(const Call& c);
  net::HttpResponse StartExec(const Call& c);
  net::HttpResponse GetExec(const Call& c);
  net::HttpResponse Metrics(const Call& c);
  // Interactive sessions (gpupool run, alloc, exec --pty / -i).
  net::HttpResponse AttachJob(const Call& c);
  net::HttpResponse ExecStream(const Call& c);
  net::HttpResponse ExecInput(const Call& c);
  net::HttpResponse AgentExecInput(const Call& c);
  net::HttpResponse AgentExecOutput(const Call& c);
  net::HttpResponse ExecOutput(const Call& c);
  net::HttpResponse CancelExec(const Call& c);
  net::HttpResponse ListNodes(const Call& c);
  net::HttpResponse DrainNode(const Call& c);
  net::HttpResponse ResumeNode(const Call& c);
  net::HttpResponse GetLimits(const Call& c);
  net::HttpResponse PutLimits(const Call& c);
  // Admins and metrics tokens: all users' jobs; others their own.
  net::HttpResponse Usage(const Call& c);
  net::HttpResponse Whoami(const Call& c);
  net::HttpResponse Controllers(const Call& c);
  net::HttpResponse CreateToken(const Call& c);
  net::HttpResponse ListTokens(const Call& c);
  net::HttpResponse RevokeToken(const Call& c);
  net::HttpResponse ListEnvironments(const Call& c);
  net::HttpResponse AddEnvironment(const Call& c);
  net::HttpResponse CheckEnvironment(const Call& c);
  net::HttpResponse GetEnvironment(const Call& c);
  net::HttpResponse RemoveEnvironment(const Call& c);
  // The agent endpoints act only for the node `who` may act for (ActAsNode), and change
  // nothing when the request names another.
  net::HttpResponse ServeAgentRegister(const Call& c);
  net::HttpResponse ServeAgentWork(const Call& c);
  net::HttpResponse ServeAgentEvents(const Call& c);
  net::HttpResponse ServeAgentLogs(const Call& c);
  net::HttpResponse ServeAgentTelemetry(const Call& c);
  // GET /v1/telemetry: a job's, a node's (or one GPU's) or the pool's series.
  net::HttpResponse Telemetry(const Call& c);
  // A job as the API shows it: jobs::JobToJson and, once sampled, its gpu_util.
  OrderedJson JobJson(const jobs::Job& job);

  Controller* controller_;
  store::Store* store_;
  const Clock* clock_;
  AuthOptions auth_;
  std::atomic<bool> stopping_{false};
  RequestLimiter waiting_{kMaxWaitingPerCaller, kMaxWaiting};
  RequestLimiter agent_waiting_{kMaxWaitingPerAgent, kMaxWaiting};
  std::unique_ptr<EnvInspector> own_inspector_;
  Environments environments_;
  std::function<Result<OrderedJson>()> controllers_view_;
  Dashboard dashboard_;
  std::unique_ptr<TelemetryHub> telemetry_;
  std::mutex telemetry_flush_mu_;  // one flush at a time
  std::atomic<int64_t> telemetry_flushed_us_{0};
  std::atomic<int64_t> telemetry_expired_us_{0};
  std::mutex idle_mu_;
  std::set<int64_t> idle_warned_;  // jobs the idle policy warned about (guarded by idle_mu_)
  // Ended jobs' part of GET /metrics, kept from scrape to scrape: an ended job never
  // changes, so a scrape reads from the store only the jobs that ended since the last one
  // (with kEndedOverlapUs of overlap, for ends stored late), not every job ever run.
  struct EndedJobTotals {
    std::mutex mu;                      // one scrape at a time updates them
    int64_t read_until_us = 0;          // jobs ending before this (less the overlap) are in
    std::map<int64_t, int64_t> recent;  // id -> end, of those within the overlap: counted once
    std::map<std::string, int64_t> by_state;
    std::map<std::pair<std::string, std::string>, double> gpu_hours;
    // Utilisation-weighted GPU-seconds by (user, project): the counter's value.
    std::map<std::pair<std::string, std::string>, double> used_gpu_s;
  };
  static constexpr int64_t kEndedOverlapUs = 3600LL * 1'000'000;
  EndedJobTotals ended_;
};

}  // namespace gpupool::controller
