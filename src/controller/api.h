// The REST API of docs/api.md: routes HTTP requests to the Controller after
// authenticating the caller. Thread-safe (the controller and store are).
#pragma once

#include <atomic>
#include <memory>

#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/environments.h"
#include "controller/request_limiter.h"
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
        environments_(store, inspector == nullptr ? own_inspector_.get() : inspector, clock) {}

  net::HttpResponse Handle(const net::HttpRequest& request);

  // Whether handling `request` may take long (a long poll with wait_ms, or a podman image
  // inspection for a submission or an environment): the HTTP server gives such requests
  // a thread of their own instead of a pool thread.
  static bool MayBlock(const net::HttpRequest& request);

  // Waiting requests (MayBlock) in flight at once: per caller (a Unix-socket uid or a
  // token) and in all; over either bound the answer is 429 at once.
  static constexpr size_t kMaxWaitingPerCaller = 16;
  static constexpr size_t kMaxWaiting = 1024;

  // Ends waits in progress (log follows) and directory inspections so that the HTTP
  // server can stop at once.
  void Stop() {
    stopping_ = true;
    environments_.Stop();
  }

 private:
  net::HttpResponse Route(const net::HttpRequest& r, const Identity& who);
  net::HttpResponse Submit(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse CancelJobOrArray(const net::HttpRequest& r, int64_t id, const Caller& caller);
  net::HttpResponse ListJobs(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse Logs(const net::HttpRequest& r, int64_t id, const Caller& caller);
  // `everyone`: all users' jobs (admins, metrics tokens), else the caller's own.
  net::HttpResponse Usage(const net::HttpRequest& r, const Caller& caller, bool everyone);
  net::HttpResponse CreateToken(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse Health(bool ready);
  net::HttpResponse StartExec(const net::HttpRequest& r, int64_t id, const Caller& caller);
  net::HttpResponse ServeExec(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse ServeEnvironments(const net::HttpRequest& r, const Caller& caller);
  // The agent endpoints act only for the node `who` may act for (ActAsNode), and change
  // nothing when the request names another.
  net::HttpResponse ServeAgentRegister(const net::HttpRequest& r, const Identity& who);
  net::HttpResponse ServeAgentWork(const net::HttpRequest& r, const Identity& who);
  net::HttpResponse ServeAgentEvents(const net::HttpRequest& r, const Identity& who);
  net::HttpResponse ServeAgentLogs(const net::HttpRequest& r, const Identity& who);

  Controller* controller_;
  store::Store* store_;
  const Clock* clock_;
  AuthOptions auth_;
  std::atomic<bool> stopping_{false};
  RequestLimiter waiting_{kMaxWaitingPerCaller, kMaxWaiting};
  std::unique_ptr<EnvInspector> own_inspector_;
  Environments environments_;
};

}  // namespace gpupool::controller
