// The REST API as one table: a row per route (method, path pattern, handler, who may call
// it, whether it may block). Everything about a route that is not its handler's answer
// derives from its row: the router (Find), who may call it (MayCall, endpoint_access.h),
// whether it answers anyone (IsPublic) and what a dashboard session may call
// (SessionMayCall), whether its request waits (Waits) and gets a thread of its own
// (MayBlock) or is answered later without one (its `later` handler), the list of
// routes (Routes) that docs/openapi.json must describe (openapi_test.cc), and the
// request metrics' route label. docs/security.md ("Caller kinds") is the access column
// in words; route_table_test.cc walks the table against it.
//
// Requests that no row answers are judged by the rows nearest to them (NearestRows), so
// that a caller learns no more about paths it may not use than that it may not use them.
// Pure functions over a constant table; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controller/api/handler.h"
#include "controller/auth.h"
#include "net/http.h"

namespace gpupool::controller::api {

// The kinds of caller (auth.h) a route allows, as bits.
enum CallerBit : uint8_t {
  kUserBit = 1,
  kAdminBit = 2,
  kNodeBit = 4,
  kMetricsBit = 8,
  kLocalRootBit = 16,  // root on the Unix socket, acting as a local agent
};
inline constexpr uint8_t kPeopleBits = kUserBit | kAdminBit;
inline constexpr uint8_t kAgentBits = kNodeBit | kLocalRootBit;

// Who may call a route.
struct Access {
  bool anyone = false;   // answered before and without authentication (no job or user data)
  uint8_t callers = 0;   // else: the kinds of caller that may
  bool session = false;  // a dashboard session cookie may call it too (dashboard.h)
  // Said to users and admins whom `callers` leaves out (node and metrics tokens hear what
  // their kind may call instead).
  std::string_view refusal;
};

// When handling a route's request may take long, so that the HTTP server gives it a
// thread of its own (net::HttpServerOptions::may_block) and the Api bounds how many wait.
enum class Blocking {
  kNever,
  kAlways,          // it reads from a node (a log relay) or inspects (podman, a directory)
  kWhenWaiting,     // with wait_ms > 0: a long poll
  kWhenInspecting,  // a submission naming an image or an environment, which is inspected
};

struct Route {
  std::string_view method;
  // An OpenAPI path template: "{id}" matches a positive integer (a job's or an exec
  // session's id; a job's may be ARRAY_INDEX, 12_3), another "{name}" one non-empty
  // segment, and a last "{name...}" the rest of the path, slashes included (environment
  // names may have one). Where two patterns match a path the more specific one wins: a
  // literal segment before a parameter.
  std::string_view pattern;
  Handler handler;
  Access access;
  Blocking blocking;
  // Answers the requests that wait (Waits) later, holding no thread (a long poll that the
  // controller's notifications complete); null: `handler` answers them on a thread of
  // their own.
  LaterHandler later = nullptr;
};

// Every route, in the router's order.
std::span<const Route> Table();

// The parameters a path gave a route's pattern.
struct PathParams {
  int64_t id = 0;    // {id}
  int element = -1;  // {id} of a job route given as ARRAY_INDEX: INDEX, and id is ARRAY
  std::vector<std::pair<std::string_view, std::string>> named;  // the others
};

// What the router makes of a method and path.
struct RouteMatch {
  const Route* route = nullptr;  // the row that answers; null when none does
  bool path_known = false;       // a row has the path (with another method, when no route)
  PathParams params;
};
RouteMatch Find(std::string_view method, std::string_view path);

// The answer when no row answers `r` (`path_known`: 400 for another method on a known
// path; else 404, the agent, exec and node paths with the wording they always had).
net::HttpResponse NoRoute(const net::HttpRequest& r, bool path_known);

// The pattern as docs/openapi.json writes it ("{ref...}" -> "{ref}"): the route's name in
// the document and in the request metrics.
std::string DocumentedPattern(std::string_view pattern);

// Whether `r`, matched to `route`, waits (see Blocking). Reads the submission's body only
// for a route that blocks kWhenInspecting, and only its top-level keys.
bool Waits(const Route& route, const net::HttpRequest& r);
// Whether `r` waits on a thread of its own: it waits, and its route has no `later`
// handler.
bool MayBlock(const Route& route, const net::HttpRequest& r);

// Who may call a request no row answers: the rows nearest to it (those with its path,
// and without one the rows sharing the most leading segments with it, two at least: its
// resource, /v1/nodes/x near /v1/nodes/{name}/drain) allow what any of them allows, to
// every kind but metrics tokens, which read their routes only; a public row counts as
// one for people. With no row near, people only (an unknown path is theirs to get 404).
Access UnroutedAccess(std::string_view path, bool path_known);

// The access rule that decides `method path`: its row's, or UnroutedAccess.
Access AccessOf(std::string_view method, std::string_view path);

}  // namespace gpupool::controller::api
