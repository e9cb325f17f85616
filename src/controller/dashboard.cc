#include "controller/dashboard.h"

#include <algorithm>
#include <vector>

#include "common/json.h"
#include "common/strings.h"
#include "controller/api/route_table.h"

namespace gpupool::controller {

// The embedded files (cmake/embed_file.cmake, src/controller/CMakeLists.txt).
std::string_view DashboardIndexHtml();
std::string_view DashboardAppJs();
std::string_view DashboardAppCss();

namespace {

using net::HttpRequest;
using net::HttpResponse;

HttpResponse JsonAnswer(int status, const OrderedJson& body) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  r.headers["Cache-Control"] = "no-store";
  AddDashboardSecurityHeaders(&r);
  return r;
}

HttpResponse ErrorAnswer(int status, const std::string& message) {
  return JsonAnswer(status, {{"error", message}});
}

// A strong ETag of an asset's bytes (FNV-1a, 64 bits): cheap, and enough to tell builds apart.
std::string ETagOf(std::string_view bytes) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  static const char* const kHex = "0123456789abcdef";
  std::string out = "\"";
  for (int shift = 60; shift >= 0; shift -= 4) out += kHex[(h >> shift) & 15];
  return out + "\"";
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// application/x-www-form-urlencoded decoding of one value; nullopt for a bad escape.
std::optional<std::string> FormDecode(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '+') {
      out += ' ';
    } else if (in[i] == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      const int hi = HexValue(in[i + 1]);
      const int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += in[i];
    }
  }
  return out;
}

// "Set-Cookie" for the session id (an empty id clears the cookie). Secure when the
// request came over TLS through a proxy that says so (the controller itself speaks plain
// HTTP: docs/security.md asks for a TLS proxy in front of it).
std::string SessionCookie(const HttpRequest& request, const std::string& id, int64_t max_age_s) {
  std::string c = std::string(Dashboard::kCookieName) + "=" + id +
                  "; Path=/; HttpOnly; SameSite=Strict; Max-Age=" + std::to_string(max_age_s);
  if (ToLower(request.Header("x-forwarded-proto")) == "https") c += "; Secure";
  return c;
}

// Random hex digits from /dev/urandom (through NewToken, which reads 32 bytes).
Result<std::string> RandomHex() {
  GP_ASSIGN_OR_RETURN(auto token, NewToken());
  return token.first.substr(4);  // "gpt_" and 64 hex digits
}

}  // namespace

std::optional<DashboardAsset> FindDashboardAsset(std::string_view path) {
  if (path == "/" || path == "/ui/" || path == "/ui/index.html") {
    return DashboardAsset{"text/html; charset=utf-8", DashboardIndexHtml()};
  }
  if (path == "/ui/app.js")
    return DashboardAsset{"text/javascript; charset=utf-8", DashboardAppJs()};
  if (path == "/ui/app.css") return DashboardAsset{"text/css; charset=utf-8", DashboardAppCss()};
  return std::nullopt;
}

void AddDashboardSecurityHeaders(HttpResponse* r) {
  r->headers["Content-Security-Policy"] =
      "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
      "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
      "frame-ancestors 'none'";
  r->headers["X-Content-Type-Options"] = "nosniff";
  r->headers["X-Frame-Options"] = "DENY";
  r->headers["Referrer-Policy"] = "no-referrer";
}

std::string CookieValue(std::string_view header, std::string_view name) {
  for (const std::string& part : Split(header, ';')) {
    const std::string_view p = Trim(part);
    const size_t eq = p.find('=');
    if (eq == std::string_view::npos) continue;
    if (Trim(p.substr(0, eq)) == name) return std::string(Trim(p.substr(eq + 1)));
  }
  return "";
}

bool SameOrigin(const HttpRequest& request, bool require_origin) {
  std::string origin = request.Header("origin");
  if (origin.empty()) {
    // A Referer is a full URL: keep its scheme://host:port.
    const std::string referer = request.Header("referer");
    const size_t scheme = referer.find("://");
    if (scheme != std::string::npos) origin = referer.substr(0, referer.find('/', scheme + 3));
  }
  if (origin.empty()) return !require_origin;
  const std::string host = request.Header("host");
  if (host.empty()) return false;
  return origin == "http://" + host || origin == "https://" + host;
}

HttpResponse Dashboard::ServeAsset(const HttpRequest& request) const {
  std::optional<DashboardAsset> asset = FindDashboardAsset(request.path);
  if (!asset) return ErrorAnswer(404, "no dashboard asset " + request.path + ": see /");
  HttpResponse r;
  r.content_type = std::string(asset->content_type);
  const std::string etag = ETagOf(asset->bytes);
  r.headers["ETag"] = etag;
  // Revalidated on each load (304 when unchanged), so a new build is never served stale.
  r.headers["Cache-Control"] = "no-cache";
  AddDashboardSecurityHeaders(&r);
  if (request.Header("if-none-match") == etag) {
    r.status = 304;
    return r;
  }
  r.body = std::string(asset->bytes);
  return r;
}

HttpResponse Dashboard::Login(const HttpRequest& request) {
  if (request.body.size() > kMaxLoginBody) {
    return ErrorAnswer(413, "the sign-in body is larger than " + std::to_string(kMaxLoginBody) +
                                " bytes: send {\"token\": \"gpt_...\"}");
  }
  if (!SameOrigin(request, /*require_origin=*/false)) {
    return ErrorAnswer(403, "sign-in from another site is refused: open the dashboard itself");
  }
  const std::string type = ToLower(request.Header("content-type"));
  const bool form = type.starts_with("application/x-www-form-urlencoded");
  std::string token;
  if (type.starts_with("application/json")) {
    Result<Json> body = ParseJson(request.body, "sign-in body", kMaxLoginBody, 4);
    if (!body.ok()) return ErrorAnswer(400, body.status().message());
    if (!body->is_object()) return ErrorAnswer(400, "sign-in body: expected {\"token\": \"...\"}");
    JsonFields f(*body, "");
    f.Required("token", &token);
    if (Status s = f.Finish(); !s.ok()) return ErrorAnswer(400, s.message());
  } else if (form) {
    bool found = false;
    for (const std::string& pair : Split(request.body, '&')) {
      const size_t eq = pair.find('=');
      const std::string_view key = std::string_view(pair).substr(0, eq);
      if (key != "token") continue;
      if (eq == std::string::npos) break;
      std::optional<std::string> value = FormDecode(std::string_view(pair).substr(eq + 1));
      if (!value) return ErrorAnswer(400, "sign-in form: a bad %-escape in token");
      token = std::move(*value);
      found = true;
    }
    if (!found) return ErrorAnswer(400, "sign-in form: no token field");
  } else {
    return ErrorAnswer(415, "sign-in: send application/json {\"token\": \"gpt_...\"} or a form");
  }
  token = std::string(Trim(token));
  if (token.empty() || token.size() > 256 || token.find_first_of("\r\n\0", 0, 3) != token.npos) {
    return ErrorAnswer(400, "token: paste the token `gpupool token create --user NAME` printed");
  }
  HttpRequest as_token;
  as_token.method = "GET";
  as_token.path = "/v1/whoami";
  as_token.headers["authorization"] = "Bearer " + token;
  const int64_t now = clock_->NowMicros();
  Result<Identity> who = Authenticate(as_token, *store_, auth_, now);
  if (!who.ok()) {
    const int status = who.status().code() == StatusCode::kPermissionDenied ? 401 : 500;
    return ErrorAnswer(status, who.status().message());
  }
  if (who->kind == CallerKind::kNode || who->kind == CallerKind::kMetrics) {
    return ErrorAnswer(403, "a " + std::string(CallerKindName(who->kind)) +
                                " token cannot sign in to the dashboard: use a user token "
                                "(`gpupool token create --user NAME`)");
  }
  Result<std::string> id = RandomHex();
  Result<std::string> csrf = RandomHex();
  if (!id.ok() || !csrf.ok()) return ErrorAnswer(500, "cannot make a session id: /dev/urandom");
  SessionRecord rec{token,
                    *csrf,
                    who->caller.user,
                    std::string(CallerKindName(who->kind)),
                    who->caller.admin,
                    now + kSessionLifetimeUs,
                    now};
  {
    std::lock_guard lock(mu_);
    DropExpiredLocked(now);
    while (sessions_.size() >= kMaxSessions) {  // the oldest goes
      auto oldest = std::min_element(sessions_.begin(), sessions_.end(), [](auto& a, auto& b) {
        return a.second.created_us < b.second.created_us;
      });
      sessions_.erase(oldest);
    }
    sessions_[HashToken(*id)] = rec;
  }
  HttpResponse r;
  if (form) {
    r.status = 303;
    r.headers["Location"] = "/";
    r.headers["Cache-Control"] = "no-store";
    AddDashboardSecurityHeaders(&r);
  } else {
    r = JsonAnswer(200, {{"signed_in", true},
                         {"user", rec.user},
                         {"kind", rec.kind},
                         {"admin", rec.admin},
                         {"csrf", rec.csrf},
                         {"expires_us", rec.expires_us}});
  }
  r.headers["Set-Cookie"] = SessionCookie(request, *id, kSessionLifetimeUs / 1'000'000);
  return r;
}

HttpResponse Dashboard::Logout(const HttpRequest& request) {
  if (!SameOrigin(request, /*require_origin=*/false)) {
    return ErrorAnswer(403, "sign-out from another site is refused");
  }
  const std::string id = CookieValue(request.Header("cookie"), kCookieName);
  bool ended = false;
  if (!id.empty()) {
    std::lock_guard lock(mu_);
    ended = sessions_.erase(HashToken(id)) > 0;
  }
  HttpResponse r = JsonAnswer(200, {{"signed_out", ended}});
  r.headers["Set-Cookie"] = SessionCookie(request, "", 0);
  return r;
}

HttpResponse Dashboard::Session(const HttpRequest& request) {
  std::optional<SessionRecord> s = FindSession(request);
  // 200 either way: the page asks this before it knows, and a 401 would be a console error.
  if (!s) return JsonAnswer(200, {{"signed_in", false}});
  return JsonAnswer(200, {{"signed_in", true},
                          {"user", s->user},
                          {"kind", s->kind},
                          {"admin", s->admin},
                          {"csrf", s->csrf},
                          {"expires_us", s->expires_us}});
}

bool Dashboard::UsesSession(const HttpRequest& request) {
  if (request.peer || !request.Header("authorization").empty()) return false;
  return !CookieValue(request.Header("cookie"), kCookieName).empty();
}

bool Dashboard::SessionMayCall(std::string_view method, std::string_view path) {
  // The route table says which routes a session may call; HEAD as the GET it heads.
  return api::AccessOf(method == "HEAD" ? "GET" : method, path).session;
}

Dashboard::SessionCheck Dashboard::CheckSession(const HttpRequest& request) {
  std::optional<SessionRecord> s = FindSession(request);
  if (!s) {
    return {401,
            "your dashboard session has ended (signed out, expired or the server restarted): "
            "sign in again",
            ""};
  }
  if (!SessionMayCall(request.method, request.path)) {
    return {403,
            "the dashboard's session cookie may not call " + request.method + " " + request.path +
                ": use a bearer token (Authorization: Bearer gpt_...)",
            ""};
  }
  if (request.method != "GET" && request.method != "HEAD") {
    if (request.Header(kCsrfHeader) != s->csrf || s->csrf.empty()) {
      return {403,
              "a state-changing request with the session cookie needs the X-Gpupool-CSRF "
              "header of its session",
              ""};
    }
    if (!SameOrigin(request, /*require_origin=*/true)) {
      return {403,
              "a state-changing request with the session cookie must come from this server's "
              "own pages (Origin)",
              ""};
    }
  }
  return {200, "", s->token};
}

size_t Dashboard::SessionCount() {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

std::optional<Dashboard::SessionRecord> Dashboard::FindSession(const HttpRequest& request) {
  const std::string id = CookieValue(request.Header("cookie"), kCookieName);
  if (id.empty() || id.size() > 128) return std::nullopt;
  const int64_t now = clock_->NowMicros();
  std::lock_guard lock(mu_);
  auto it = sessions_.find(HashToken(id));
  if (it == sessions_.end()) return std::nullopt;
  if (it->second.expires_us <= now) {
    sessions_.erase(it);
    return std::nullopt;
  }
  return it->second;
}

void Dashboard::DropExpiredLocked(int64_t now_us) {
  std::erase_if(sessions_, [now_us](const auto& kv) { return kv.second.expires_us <= now_us; });
}

}  // namespace gpupool::controller
