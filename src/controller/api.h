// The REST API of docs/api.md: routes HTTP requests to the Controller after
// authenticating the caller. Thread-safe (the controller and store are).
#pragma once

#include <memory>

#include "controller/auth.h"
#include "controller/controller.h"
#include "controller/environments.h"
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

 private:
  net::HttpResponse Route(const net::HttpRequest& r, const Identity& who);
  net::HttpResponse Submit(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse ListJobs(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse Logs(const net::HttpRequest& r, int64_t id, const Caller& caller);
  net::HttpResponse Usage(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse CreateToken(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse ServeEnvironments(const net::HttpRequest& r, const Caller& caller);
  net::HttpResponse ServeAgentRegister(const net::HttpRequest& r);
  net::HttpResponse ServeAgentWork(const net::HttpRequest& r);
  net::HttpResponse ServeAgentEvents(const net::HttpRequest& r);
  net::HttpResponse ServeAgentLogs(const net::HttpRequest& r);

  Controller* controller_;
  store::Store* store_;
  const Clock* clock_;
  AuthOptions auth_;
  std::unique_ptr<EnvInspector> own_inspector_;
  Environments environments_;
};

}  // namespace gpupool::controller
