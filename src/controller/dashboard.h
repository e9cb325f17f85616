// The web dashboard (docs/monitoring.md, "Dashboard"): its assets, embedded in the binary
// at build time from src/controller/dashboard/, and its sign-in sessions.
//
// A browser signs in by posting a user token to POST /ui/login; the answer sets a cookie
// holding a random session id (never the token), which this object maps to the token in
// memory until it expires or the user signs out. Sessions die with the process: the user
// signs in again. A request that carries only the cookie may read what the dashboard
// shows (SessionMayCall) and, with the session's CSRF token in X-Gpupool-CSRF and an
// Origin of this server, cancel a job; the API then authenticates it as the token would
// be, so a revoked or expired token ends its sessions at once. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "controller/auth.h"
#include "net/http.h"
#include "store/store.h"

namespace gpupool::controller {

// One embedded file of the dashboard.
struct DashboardAsset {
  std::string_view content_type;
  std::string_view bytes;
};

// The asset served at `path` ("/" is the page; "/ui/app.js", "/ui/app.css"); nullopt
// for any other path.
std::optional<DashboardAsset> FindDashboardAsset(std::string_view path);

// The headers every dashboard answer carries: a strict Content-Security-Policy (scripts
// and styles from this server only, no inline script, no framing), nosniff, DENY framing,
// no referrer.
void AddDashboardSecurityHeaders(net::HttpResponse* response);

class Dashboard {
 public:
  static constexpr std::string_view kCookieName = "gpupool_session";
  static constexpr std::string_view kCsrfHeader = "x-gpupool-csrf";
  static constexpr int64_t kSessionLifetimeUs = int64_t{12} * 3600 * 1'000'000;
  static constexpr size_t kMaxSessions = 10'000;
  static constexpr size_t kMaxLoginBody = 4096;

  // Both pointers must outlive the Dashboard.
  Dashboard(store::Store* store, const Clock* clock, AuthOptions auth)
      : store_(store), clock_(clock), auth_(std::move(auth)) {}

  // GET / and /ui/ASSET: the embedded file, with its type, an ETag (304 for a matching
  // If-None-Match) and Cache-Control: no-cache. 404 for an unknown asset.
  net::HttpResponse ServeAsset(const net::HttpRequest& request) const;

  // POST /ui/login with {"token": "gpt_..."} (application/json) or token=gpt_...
  // (application/x-www-form-urlencoded, answered with 303 to /). 200 with the session
  // (SessionJson) and its cookie; 400 for a malformed body, 413 for one over
  // kMaxLoginBody, 415 for another content type, 401 for a bad, revoked or expired token,
  // 403 for a node or metrics token or a cross-site Origin; 500 when the store fails.
  net::HttpResponse Login(const net::HttpRequest& request);

  // POST /ui/logout: ends the cookie's session (if any) and clears the cookie. 403 for a
  // cross-site Origin.
  net::HttpResponse Logout(const net::HttpRequest& request);

  // GET /ui/session: the cookie's session (signed_in true, user, kind, admin, csrf,
  // expires_us); {"signed_in": false} without a live one.
  net::HttpResponse Session(const net::HttpRequest& request);

  // Whether the API should authenticate `request` by its session cookie: it carries the
  // cookie, and neither a bearer token nor a Unix-socket peer (they win).
  static bool UsesSession(const net::HttpRequest& request);

  // What the API does with a request that UsesSession: ok with the token to authenticate
  // it as; 401 (no live session) or 403 (an endpoint the cookie may not call, or a
  // state-changing one without the CSRF header or from another origin) otherwise.
  struct SessionCheck {
    int status = 200;
    std::string error;
    std::string token;
  };
  SessionCheck CheckSession(const net::HttpRequest& request);

  // Which requests a session cookie alone may make: the routes whose row in the route
  // table (api/route_table.h) says so, the reads of the dashboard's pages (jobs, a job,
  // its logs, nodes, usage, telemetry, whoami) and, with the CSRF header,
  // POST /v1/jobs/{id}/cancel.
  static bool SessionMayCall(std::string_view method, std::string_view path);

  size_t SessionCount();

 private:
  struct SessionRecord {
    std::string token;
    std::string csrf;
    std::string user;
    std::string kind;
    bool admin = false;
    int64_t expires_us = 0;
    int64_t created_us = 0;
  };
  // The live session of the request's cookie; nullopt when there is none.
  std::optional<SessionRecord> FindSession(const net::HttpRequest& request);
  void DropExpiredLocked(int64_t now_us);

  store::Store* store_;
  const Clock* clock_;
  AuthOptions auth_;
  std::mutex mu_;
  std::map<std::string, SessionRecord> sessions_;  // by the SHA-256 of the session id
};

// The cookie's value of `name` in a Cookie header ("a=1; b=2"); "" when absent.
std::string CookieValue(std::string_view header, std::string_view name);

// Whether the request's Origin (or, without one, its Referer) names the server it was
// sent to (its Host header). A request with neither is same-origin only when
// `require_origin` is false.
bool SameOrigin(const net::HttpRequest& request, bool require_origin);

}  // namespace gpupool::controller
