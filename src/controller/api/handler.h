// What every handler of the REST API works with (src/controller/api/): the services it
// may use (ApiContext), the request matched to its route (Call), and the helpers that
// build answers. A handler is a free function of (context, call) named in the route
// table (route_table.h); it answers, and leaves who may call it, whether it may block
// and the request metrics to the table and the Api (api.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "controller/auth.h"
#include "controller/controller.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {
class Dashboard;
class Environments;
class PoolAccounting;
class TelemetryService;
}  // namespace gpupool::controller

namespace gpupool::controller::api {

// The services the handlers use. The Api owns or borrows each; all outlive every call and
// are thread-safe.
struct ApiContext {
  Controller* controller = nullptr;
  store::Store* store = nullptr;
  const Clock* clock = nullptr;
  Environments* environments = nullptr;
  Dashboard* dashboard = nullptr;
  TelemetryService* telemetry = nullptr;
  PoolAccounting* accounting = nullptr;
  const std::atomic<bool>* stopping = nullptr;  // Api::Stop was called: waits end
  // What GET /v1/controllers answers (Api::SetControllersView); empty: a lone controller.
  const std::function<Result<OrderedJson>()>* controllers_view = nullptr;
};

// A request matched to its route, with the route's path parameters.
struct Call {
  const net::HttpRequest& r;
  const Identity& who;
  const Caller& caller;
  int64_t id = 0;  // {id}: a job's or an exec session's
  // {id} given as ARRAY_INDEX (12_3): INDEX; id is then that element's job id.
  int element = -1;
  std::vector<std::pair<std::string_view, std::string>> params;  // the other parameters

  // The value of the path parameter `name` ("" when the route has none).
  const std::string& Param(std::string_view name) const;
};

using Handler = net::HttpResponse (*)(const ApiContext& ctx, const Call& c);
// A route's handler for a request that waits (a long poll), answering through `out`
// later, from whatever completes the wait, so that no thread waits meanwhile. It copies
// what it needs of `c` before it returns.
using LaterHandler = void (*)(const ApiContext& ctx, const Call& c,
                              std::shared_ptr<net::HttpResponder> out);

// The most of a file relayed from a node (a log, an exec session's output) one answer
// carries: it comes back as the agent's request body, which the server caps at 1 MiB.
inline constexpr int64_t kMaxRelayedChunk = 512 << 10;
// How long a relayed read waits for the node's answer.
inline constexpr std::chrono::milliseconds kRelayTimeout{5000};

// `body` as JSON with `status`.
net::HttpResponse JsonResponse(int status, const OrderedJson& body);
// {"error": message} with the HTTP status of the code (net/http_status.h).
net::HttpResponse ErrorResponse(const Status& s);
// ErrorResponse, but 429 for a ResourceExhausted error: a bound on work waiting or queued
// ("try again once some has ended") rather than on a request's size.
net::HttpResponse ErrorOrTooMany(const Status& s);

// The query parameter `name` as an integer in min..max; `fallback` when absent.
// InvalidArgument naming the parameter and the range otherwise.
Result<int64_t> QueryInt(const net::HttpRequest& r, const std::string& name, int64_t fallback,
                         int64_t min, int64_t max);

// The request's body as a JSON value of at most `max_bytes` and `max_depth` levels; an
// empty body reads as {} when `empty_is_object`. InvalidArgument (413's ResourceExhausted
// for size) naming the body otherwise.
Result<Json> BodyJson(const net::HttpRequest& r, size_t max_bytes, int max_depth,
                      bool empty_is_object = false);

}  // namespace gpupool::controller::api
