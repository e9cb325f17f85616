// The dashboard's sign-in, session cookie and CSRF rules through Api::Handle, against a
// real controller and an in-memory store; its pieces (cookies, origins) on their own.
#include "controller/dashboard.h"

#include <gtest/gtest.h>
#include <pwd.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/strings.h"
#include "controller/api.h"
#include "controller/tokens.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

net::HttpRequest BrowserReq(const std::string& method, const std::string& path,
                            std::string body = "") {
  net::HttpRequest r;
  r.method = method;
  r.path = path;
  r.body = std::move(body);
  r.remote = "127.0.0.1:40000";
  r.headers["host"] = "pool.example:8421";
  return r;
}

TEST(DashboardPiecesTest, CookieValueFindsTheNamedCookie) {
  EXPECT_EQ(CookieValue("a=1; gpupool_session=abc; b=2", "gpupool_session"), "abc");
  EXPECT_EQ(CookieValue("gpupool_session=abc", "gpupool_session"), "abc");
  EXPECT_EQ(CookieValue("xgpupool_session=abc", "gpupool_session"), "");
  EXPECT_EQ(CookieValue("", "gpupool_session"), "");
  EXPECT_EQ(CookieValue("gpupool_session", "gpupool_session"), "");
}

TEST(DashboardPiecesTest, SameOriginComparesOriginOrRefererWithHost) {
  net::HttpRequest r = BrowserReq("POST", "/ui/login");
  EXPECT_TRUE(SameOrigin(r, false));
  EXPECT_FALSE(SameOrigin(r, true));
  r.headers["origin"] = "http://pool.example:8421";
  EXPECT_TRUE(SameOrigin(r, true));
  r.headers["origin"] = "https://evil.example";
  EXPECT_FALSE(SameOrigin(r, false));
  r.headers["origin"] = "null";  // a sandboxed frame or a file:// page
  EXPECT_FALSE(SameOrigin(r, false));
  r.headers.erase("origin");
  r.headers["referer"] = "http://pool.example:8421/#/queue";
  EXPECT_TRUE(SameOrigin(r, true));
  r.headers["referer"] = "http://pool.example:8421.evil.example/";
  EXPECT_FALSE(SameOrigin(r, true));
}

TEST(DashboardPiecesTest, TheCookieReadsWhatThePagesShowAndCancelsNothingElse) {
  for (const char* path : {"/v1/jobs", "/v1/jobs/12", "/v1/jobs/12/logs", "/v1/nodes", "/v1/usage",
                           "/v1/telemetry", "/v1/whoami"}) {
    EXPECT_TRUE(Dashboard::SessionMayCall("GET", path)) << path;
  }
  EXPECT_TRUE(Dashboard::SessionMayCall("POST", "/v1/jobs/12/cancel"));
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"POST", "/v1/jobs"},
                                                        {"GET", "/v1/tokens"},
                                                        {"POST", "/v1/tokens"},
                                                        {"GET", "/metrics"},
                                                        {"POST", "/v1/jobs/12/exec"},
                                                        {"POST", "/v1/jobs/x/cancel"},
                                                        {"POST", "/v1/jobs//cancel"},
                                                        {"PUT", "/v1/limits"},
                                                        {"POST", "/v1/nodes/n/drain"},
                                                        {"GET", "/v1/agent/work"},
                                                        {"GET", "/v1/jobs/12/attach"},
                                                        {"DELETE", "/v1/jobs/12"}}) {
    EXPECT_FALSE(Dashboard::SessionMayCall(method, path)) << method << " " << path;
  }
}

TEST(DashboardPiecesTest, AssetsAreEmbeddedAndFoundByPath) {
  for (const char* path : {"/", "/ui/app.js", "/ui/app.css"}) {
    std::optional<DashboardAsset> a = FindDashboardAsset(path);
    ASSERT_TRUE(a) << path;
    EXPECT_FALSE(a->bytes.empty()) << path;
  }
  EXPECT_FALSE(FindDashboardAsset("/ui/../etc/passwd"));
  EXPECT_FALSE(FindDashboardAsset("/ui/nope.js"));
  EXPECT_NE(FindDashboardAsset("/")->bytes.find("/ui/app.js"), std::string_view::npos);
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions options;
    options.node_timeout_us = 3'600'000'000;
    controller_ = Controller::Create(store_.get(), &clock_, options).value();
    api_ = std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{});
    for (const char* name : {"nobody", "daemon"}) {
      ASSERT_NE(getpwnam(name), nullptr) << "the test needs the account " << name;
    }
  }

  std::string Token(const std::string& user, const std::string& kind = "user") {
    auto tok = NewToken().value();
    EXPECT_TRUE(store_->PutToken({tok.second, user, kind, clock_.NowMicros(), 0}).ok());
    return tok.first;
  }
  net::HttpResponse Login(const std::string& body, const std::string& type = "application/json") {
    net::HttpRequest r = BrowserReq("POST", "/ui/login", body);
    r.headers["content-type"] = type;
    r.headers["origin"] = "http://pool.example:8421";
    return api_->Handle(r);
  }
  // The session id the answer's Set-Cookie sets.
  static std::string CookieOf(const net::HttpResponse& r) {
    auto it = r.headers.find("Set-Cookie");
    if (it == r.headers.end()) return "";
    const std::string& c = it->second;
    const std::string prefix = "gpupool_session=";
    if (c.rfind(prefix, 0) != 0) return "";
    return c.substr(prefix.size(), c.find(';') - prefix.size());
  }
  std::string SignIn(const std::string& token) {
    net::HttpResponse r = Login(R"({"token": ")" + token + R"("})");
    EXPECT_EQ(r.status, 200) << r.body;
    Result<Json> j = ParseJson(r.body, "login answer");
    if (j.ok() && j->contains("csrf")) csrf_ = (*j)["csrf"].get<std::string>();
    return CookieOf(r);
  }
  net::HttpResponse WithCookie(const std::string& cookie, const std::string& method,
                               const std::string& path, std::string body = "") {
    net::HttpRequest r = BrowserReq(method, path, std::move(body));
    r.headers["cookie"] = "theme=dark; gpupool_session=" + cookie;
    return api_->Handle(r);
  }
  int64_t SubmitAs(const std::string& token) {
    net::HttpRequest r = BrowserReq("POST", "/v1/jobs", R"({"command": ["sleep", "100"]})");
    r.headers["authorization"] = "Bearer " + token;
    net::HttpResponse a = api_->Handle(r);
    EXPECT_EQ(a.status, 201) << a.body;
    return ParseJson(a.body, "submit").value()["job"]["id"].get<int64_t>();
  }

  ManualClock clock_{1'800'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Api> api_;
  std::string csrf_;
};

TEST_F(DashboardTest, ThePageAndAssetsAnswerAnyoneWithStrictHeaders) {
  for (const auto& [path, type] : std::vector<std::pair<std::string, std::string>>{
           {"/", "text/html; charset=utf-8"},
           {"/ui/app.js", "text/javascript; charset=utf-8"},
           {"/ui/app.css", "text/css; charset=utf-8"}}) {
    net::HttpResponse r = api_->Handle(BrowserReq("GET", path));
    EXPECT_EQ(r.status, 200) << path << ": " << r.body.substr(0, 200);
    EXPECT_EQ(r.content_type, type) << path;
    const std::string csp = r.headers["Content-Security-Policy"];
    EXPECT_NE(csp.find("default-src 'self'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
    EXPECT_EQ(csp.find("unsafe-inline"), std::string::npos) << csp;
    EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
    EXPECT_EQ(r.headers["X-Content-Type-Options"], "nosniff");
    EXPECT_EQ(r.headers["X-Frame-Options"], "DENY");
    EXPECT_EQ(r.headers["Cache-Control"], "no-cache");
    // Revalidation: the same ETag answers 304 without a body.
    net::HttpRequest again = BrowserReq("GET", path);
    again.headers["if-none-match"] = r.headers["ETag"];
    net::HttpResponse r304 = api_->Handle(again);
    EXPECT_EQ(r304.status, 304);
    EXPECT_TRUE(r304.body.empty());
  }
  EXPECT_EQ(api_->Handle(BrowserReq("GET", "/ui/nope.js")).status, 404);
  // No inline script in the page: the CSP would block it.
  const std::string page = api_->Handle(BrowserReq("GET", "/")).body;
  EXPECT_EQ(page.find("<script>"), std::string::npos);
  EXPECT_EQ(page.find("onclick="), std::string::npos);
  EXPECT_EQ(page.find("style="), std::string::npos);
}

TEST_F(DashboardTest, SignInSetsAStrictHttpOnlyCookieThatReadsTheApi) {
  const std::string token = Token("nobody");
  net::HttpResponse r = Login(R"({"token": ")" + token + R"("})");
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string set = r.headers["Set-Cookie"];
  EXPECT_NE(set.find("HttpOnly"), std::string::npos) << set;
  EXPECT_NE(set.find("SameSite=Strict"), std::string::npos) << set;
  EXPECT_NE(set.find("Path=/"), std::string::npos) << set;
  EXPECT_EQ(set.find("Secure"), std::string::npos) << "plain HTTP: " << set;
  // The cookie holds a session id, never the token.
  const std::string cookie = CookieOf(r);
  EXPECT_EQ(cookie.size(), 64u);
  EXPECT_EQ(set.find(token), std::string::npos);
  EXPECT_EQ(r.body.find(token), std::string::npos);

  net::HttpResponse who = WithCookie(cookie, "GET", "/v1/whoami");
  ASSERT_EQ(who.status, 200) << who.body;
  EXPECT_EQ(ParseJson(who.body, "whoami").value()["user"], "nobody");
  EXPECT_EQ(WithCookie(cookie, "GET", "/v1/jobs").status, 200);
  EXPECT_EQ(WithCookie(cookie, "GET", "/v1/nodes").status, 200);
  EXPECT_EQ(WithCookie(cookie, "GET", "/v1/usage").status, 200);
  net::HttpResponse s = WithCookie(cookie, "GET", "/ui/session");
  EXPECT_EQ(ParseJson(s.body, "session").value()["signed_in"], true) << s.body;

  // Behind a TLS proxy the cookie is Secure.
  net::HttpRequest tls = BrowserReq("POST", "/ui/login", R"({"token": ")" + token + R"("})");
  tls.headers["content-type"] = "application/json";
  tls.headers["x-forwarded-proto"] = "https";
  net::HttpResponse secure = api_->Handle(tls);
  EXPECT_NE(secure.headers["Set-Cookie"].find("; Secure"), std::string::npos);
}

TEST_F(DashboardTest, NoCookieOrABadOneIsUnauthenticated) {
  EXPECT_EQ(api_->Handle(BrowserReq("GET", "/v1/jobs")).status, 401);
  EXPECT_EQ(WithCookie("0123456789abcdef", "GET", "/v1/jobs").status, 401);
  EXPECT_EQ(WithCookie(std::string(5000, 'a'), "GET", "/v1/jobs").status, 401);
  net::HttpResponse s = api_->Handle(BrowserReq("GET", "/ui/session"));
  EXPECT_EQ(s.status, 200);
  EXPECT_EQ(ParseJson(s.body, "session").value()["signed_in"], false) << s.body;
}

TEST_F(DashboardTest, RevokingTheTokenEndsItsSessionsAtOnce) {
  const std::string token = Token("nobody");
  const std::string cookie = SignIn(token);
  ASSERT_EQ(WithCookie(cookie, "GET", "/v1/jobs").status, 200);
  ASSERT_TRUE(store_->DeleteToken(HashToken(token)).ok());
  net::HttpResponse r = WithCookie(cookie, "GET", "/v1/jobs");
  EXPECT_EQ(r.status, 401) << r.body;
}

TEST_F(DashboardTest, SessionsExpire) {
  const std::string cookie = SignIn(Token("nobody"));
  clock_.AdvanceMicros(Dashboard::kSessionLifetimeUs + 1);
  EXPECT_EQ(WithCookie(cookie, "GET", "/v1/jobs").status, 401);
}

TEST_F(DashboardTest, SignOutEndsTheSession) {
  const std::string cookie = SignIn(Token("nobody"));
  net::HttpRequest out = BrowserReq("POST", "/ui/logout");
  out.headers["cookie"] = "gpupool_session=" + cookie;
  net::HttpResponse r = api_->Handle(out);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers["Set-Cookie"].find("Max-Age=0"), std::string::npos);
  EXPECT_EQ(WithCookie(cookie, "GET", "/v1/jobs").status, 401);
}

TEST_F(DashboardTest, NodeMetricsAndBadTokensCannotSignIn) {
  net::HttpResponse node = Login(R"({"token": ")" + Token("gpu-a07", "node") + R"("})");
  EXPECT_EQ(node.status, 403) << node.body;
  EXPECT_NE(node.body.find("node token cannot sign in"), std::string::npos) << node.body;
  EXPECT_EQ(node.headers.count("Set-Cookie"), 0u);
  net::HttpResponse metrics = Login(R"({"token": ")" + Token("nobody", "metrics") + R"("})");
  EXPECT_EQ(metrics.status, 403) << metrics.body;
  EXPECT_EQ(metrics.headers.count("Set-Cookie"), 0u);
  EXPECT_EQ(Login(R"({"token": "gpt_0000"})").status, 401);
  const std::string revoked = Token("nobody");
  ASSERT_TRUE(store_->DeleteToken(HashToken(revoked)).ok());
  EXPECT_EQ(Login(R"({"token": ")" + revoked + R"("})").status, 401);
}

TEST_F(DashboardTest, HostileSignInBodiesGetClearClientErrors) {
  EXPECT_EQ(Login(std::string(1 << 20, 'x')).status, 413);
  EXPECT_EQ(Login("{\"token\": ").status, 400);
  EXPECT_EQ(Login("[1, 2]").status, 400);
  EXPECT_EQ(Login(R"({"token": 5})").status, 400);
  EXPECT_EQ(Login(R"({"token": "x", "admin": true})").status, 400);
  EXPECT_EQ(Login(R"({"token": ""})").status, 400);
  EXPECT_EQ(Login(R"({"token": ")" + std::string(300, 'a') + R"("})").status, 400);
  EXPECT_EQ(Login(R"({"token": "a\nb"})").status, 400);
  EXPECT_EQ(Login("token=%zz", "application/x-www-form-urlencoded").status, 400);
  EXPECT_EQ(Login("user=x", "application/x-www-form-urlencoded").status, 400);
  EXPECT_EQ(Login("token=gpt_1", "text/plain").status, 415);
  // A form post works, and answers with a redirect to the page.
  net::HttpResponse form = Login("token=" + Token("nobody"), "application/x-www-form-urlencoded");
  EXPECT_EQ(form.status, 303) << form.body;
  EXPECT_EQ(form.headers["Location"], "/");
  EXPECT_FALSE(CookieOf(form).empty());
  // From another site: refused, whatever the token.
  net::HttpRequest cross =
      BrowserReq("POST", "/ui/login", R"({"token": ")" + Token("nobody") + R"("})");
  cross.headers["content-type"] = "application/json";
  cross.headers["origin"] = "https://evil.example";
  EXPECT_EQ(api_->Handle(cross).status, 403);
}

TEST_F(DashboardTest, AUsersCookieCannotReadAnotherUsersJob) {
  const std::string alice = Token("nobody");
  const std::string bob = Token("daemon");
  const int64_t bobs = SubmitAs(bob);
  const std::string cookie = SignIn(alice);
  net::HttpResponse r = WithCookie(cookie, "GET", "/v1/jobs/" + std::to_string(bobs));
  EXPECT_EQ(r.status, 403) << r.body;
  r = WithCookie(cookie, "GET", "/v1/jobs/" + std::to_string(bobs) + "/logs");
  EXPECT_EQ(r.status, 403) << r.body;
  r = WithCookie(cookie, "GET", "/v1/jobs");
  EXPECT_EQ(r.body.find("\"daemon\""), std::string::npos) << r.body;
  // An admin's cookie reads it.
  const std::string admin = SignIn(Token("root"));
  EXPECT_EQ(WithCookie(admin, "GET", "/v1/jobs/" + std::to_string(bobs)).status, 200);
}

TEST_F(DashboardTest, StateChangesNeedTheCsrfHeaderAndThisOrigin) {
  const std::string token = Token("nobody");
  const int64_t id = SubmitAs(token);
  const std::string cookie = SignIn(token);
  const std::string cancel = "/v1/jobs/" + std::to_string(id) + "/cancel";
  auto post = [&](const std::string& path, const std::string& csrf, const std::string& origin) {
    net::HttpRequest r = BrowserReq("POST", path);
    r.headers["cookie"] = "gpupool_session=" + cookie;
    if (!csrf.empty()) r.headers["x-gpupool-csrf"] = csrf;
    if (!origin.empty()) r.headers["origin"] = origin;
    return api_->Handle(r);
  };
  const std::string self = "http://pool.example:8421";
  EXPECT_EQ(post(cancel, "", self).status, 403);
  EXPECT_EQ(post(cancel, "wrong", self).status, 403);
  EXPECT_EQ(post(cancel, csrf_, "https://evil.example").status, 403);
  EXPECT_EQ(post(cancel, csrf_, "").status, 403);  // no Origin, no Referer
  // Other state changes: never with the cookie.
  EXPECT_EQ(post("/v1/jobs", csrf_, self).status, 403);
  EXPECT_EQ(post("/v1/tokens", csrf_, self).status, 403);
  EXPECT_EQ(WithCookie(cookie, "GET", "/v1/tokens").status, 403);
  EXPECT_EQ(controller_->Get(id, CallerForUid(0, 0, {})).value().state, jobs::JobState::kPending);
  // The dashboard's own cancel: header and origin right.
  net::HttpResponse ok = post(cancel, csrf_, self);
  EXPECT_EQ(ok.status, 200) << ok.body;
}

TEST_F(DashboardTest, JobListsPageWithLimitAndOffset) {
  const std::string token = Token("nobody");
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(SubmitAs(token));
  auto list = [&](const std::string& query) {
    net::HttpRequest r = BrowserReq("GET", "/v1/jobs");
    r.headers["authorization"] = "Bearer " + token;
    for (const std::string& kv : Split(query, '&')) {
      r.query[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    }
    net::HttpResponse a = api_->Handle(r);
    EXPECT_EQ(a.status, 200) << a.body;
    std::vector<int64_t> out;
    const Json answer = ParseJson(a.body, "list").value();
    for (const Json& j : answer["jobs"]) out.push_back(j["id"].get<int64_t>());
    return out;
  };
  EXPECT_EQ(list("limit=2"), (std::vector<int64_t>{ids[4], ids[3]}));
  EXPECT_EQ(list("limit=2&offset=2"), (std::vector<int64_t>{ids[2], ids[1]}));
  EXPECT_EQ(list("limit=2&offset=4"), (std::vector<int64_t>{ids[0]}));
  EXPECT_EQ(list("limit=2&offset=9"), (std::vector<int64_t>{}));
  EXPECT_EQ(list("limit=2&offset=1&state=PENDING"), (std::vector<int64_t>{ids[3], ids[2]}));
  EXPECT_EQ(list("offset=3"), (std::vector<int64_t>{ids[0], ids[1]}));
}

}  // namespace
}  // namespace gpupool::controller
