// The route table (api/route_table.h, Api::Routes) and docs/openapi.json describe the same
// routes with the same security and waits; every route lets in exactly the callers
// docs/security.md names and reaches its handler; the API serves the document; and requests
// no route takes get the answers they always got. openapi_schema_test.py checks the
// document itself, its examples, and real answers against it.
#include <gtest/gtest.h>
#include <pwd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "common/json.h"
#include "controller/api.h"
#include "controller/endpoint_access.h"
#include "controller/openapi_document.h"
#include "controller/tokens.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

const char* const kDocument = GPUPOOL_SOURCE_DIR "/docs/openapi.json";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// "METHOD /path/{param}" of every operation under the document's paths.
std::set<std::string> DocumentedRoutes(const Json& doc) {
  std::set<std::string> out;
  for (const auto& [path, item] : doc["paths"].items()) {
    for (const auto& [key, op] : item.items()) {
      static const std::set<std::string> kMethods = {"get",     "put",  "post",  "delete",
                                                     "options", "head", "patch", "trace"};
      if (!kMethods.contains(key)) continue;  // parameters, summary, ...
      std::string method = key;
      for (char& ch : method) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      out.insert(method + " " + path);
    }
  }
  return out;
}

TEST(OpenApiTest, EveryRouteIsDescribedAndEveryDescribedRouteIsAnswered) {
  Result<Json> doc = ParseJson(ReadFile(kDocument), kDocument);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  ASSERT_TRUE(doc->contains("paths")) << kDocument << " has no paths";
  const std::set<std::string> documented = DocumentedRoutes(*doc);
  std::set<std::string> routed;
  for (const Api::RouteInfo& r : Api::Routes()) {
    const std::string route = r.method + " " + r.pattern;
    EXPECT_TRUE(routed.insert(route).second)
        << route << " is twice in the route table (src/controller/api/route_table.cc)";
  }
  for (const std::string& route : routed) {
    EXPECT_TRUE(documented.contains(route))
        << "the API answers " << route << " (src/controller/api/route_table.cc), but "
        << "docs/openapi.json does not describe it: add it under \"paths\"";
  }
  for (const std::string& route : documented) {
    EXPECT_TRUE(routed.contains(route))
        << "docs/openapi.json describes " << route << ", which the API does not answer: add "
        << "it to the route table in src/controller/api/route_table.cc, or take it out of the "
        << "document";
  }
}

// The names of an operation's parameters, its path's included ($ref resolved).
std::set<std::string> ParameterNames(const Json& doc, const Json& item, const Json& op) {
  std::set<std::string> out;
  for (const Json* list : {&item, &op}) {
    if (!list->contains("parameters")) continue;
    for (const Json& p : (*list)["parameters"]) {
      if (p.contains("$ref")) {
        const std::string ref = p["$ref"];
        out.insert(doc["components"]["parameters"][ref.substr(ref.rfind('/') + 1)]["name"]);
      } else {
        out.insert(p["name"].get<std::string>());
      }
    }
  }
  return out;
}

// Each row's security and waits as the document says them: a public route has
// `security: []`, one a dashboard session may call lists the sessionCookie scheme, any
// other neither (the document's default, a bearer token); a route that waits on wait_ms
// documents it, and one that documents wait_ms may block.
TEST(OpenApiTest, TheDocumentSaysWhoMayCallEachRouteAndWhichWait) {
  Result<Json> doc = ParseJson(ReadFile(kDocument), kDocument);
  ASSERT_TRUE(doc.ok()) << doc.status().message();
  for (const api::Route& route : api::Table()) {
    const std::string path = api::DocumentedPattern(route.pattern);
    std::string method(route.method);
    for (char& ch : method) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const std::string row = std::string(route.method) + " " + path;
    const Json& item = (*doc)["paths"][path];
    ASSERT_TRUE(item.contains(method)) << row;
    const Json& op = item[method];
    const bool public_in_doc = op.contains("security") && op["security"].empty();
    EXPECT_EQ(public_in_doc, route.access.anyone)
        << row << ": security: [] in docs/openapi.json exactly where the route is public";
    bool session_in_doc = false;
    if (op.contains("security")) {
      for (const Json& scheme : op["security"]) session_in_doc |= scheme.contains("sessionCookie");
    }
    EXPECT_EQ(session_in_doc, route.access.session)
        << row << ": the sessionCookie scheme in docs/openapi.json exactly where a dashboard "
        << "session may call the route";
    const bool waits_in_doc = ParameterNames(*doc, item, op).contains("wait_ms");
    if (route.blocking == api::Blocking::kWhenWaiting) {
      EXPECT_TRUE(waits_in_doc) << row << " waits on wait_ms: document it";
    }
    if (waits_in_doc) {
      EXPECT_TRUE(route.blocking == api::Blocking::kWhenWaiting ||
                  route.blocking == api::Blocking::kAlways)
          << row << " documents wait_ms but never blocks: its thread would wait in the pool";
    }
  }
}

// A path `pattern` (as Api::Routes writes it) matches, with a test value per parameter.
std::string ExamplePath(const std::string& pattern) {
  std::string path = pattern;
  for (const auto& [param, value] :
       std::vector<std::pair<std::string, std::string>>{{"{id}", "1"},
                                                        {"{name}", "vm"},
                                                        {"{token_id}", "0123456789ab"},
                                                        {"{ref}", "team/torch:1"},
                                                        {"{asset}", "app.js"}}) {
    for (size_t at; (at = path.find(param)) != std::string::npos;) {
      path.replace(at, param.size(), value);
    }
  }
  return path;
}

class OpenApiServedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    controller_ = Controller::Create(store_.get(), &clock_, ControllerOptions{}).value();
    api_ = std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{});
  }
  static net::HttpRequest Req(const std::string& method, const std::string& path) {
    net::HttpRequest r;
    r.method = method;
    r.path = path;
    return r;
  }
  net::HttpResponse AsRoot(const std::string& method, const std::string& path) {
    return AsUid(0, method, path);
  }
  net::HttpResponse AsUid(uint32_t uid, const std::string& method, const std::string& path) {
    net::HttpRequest r = Req(method, path);
    r.peer = net::PeerCredentials{1, uid, uid};
    return api_->Handle(r);
  }
  net::HttpResponse WithToken(const std::string& token, const std::string& method,
                              const std::string& path) {
    net::HttpRequest r = Req(method, path);
    r.headers["authorization"] = "Bearer " + token;
    return api_->Handle(r);
  }
  std::string Token(const std::string& user, const std::string& kind) {
    auto tok = NewToken().value();
    EXPECT_TRUE(store_->PutToken({tok.second, user, kind, clock_.NowMicros()}).ok());
    return tok.first;
  }
  static std::string Error(const net::HttpResponse& r) {
    Result<Json> j = ParseJson(r.body, "answer");
    return j.ok() && j->is_object() && j->contains("error") ? (*j)["error"].get<std::string>()
                                                            : r.body;
  }

  ManualClock clock_{1'800'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Api> api_;
};

TEST_F(OpenApiServedTest, ServesTheDocumentsBytesToAnyone) {
  const std::string file = ReadFile(kDocument);
  ASSERT_FALSE(file.empty()) << kDocument;
  EXPECT_EQ(OpenApiDocument(), file) << "the embedded document differs from " << kDocument
                                     << ": rebuild (CMake embeds it at build time)";
  // Over TCP without a token, as a load balancer or a client generator asks.
  net::HttpResponse r = api_->Handle(Req("GET", "/v1/openapi.json"));
  EXPECT_EQ(r.status, 200) << r.body.substr(0, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, file);
  // With a token of any kind, even one that could call nothing else.
  net::HttpRequest with_token = Req("GET", "/v1/openapi.json");
  with_token.headers["authorization"] = "Bearer gpt_unknown";
  EXPECT_EQ(api_->Handle(with_token).status, 200);
  // Only GET is public.
  EXPECT_EQ(api_->Handle(Req("POST", "/v1/openapi.json")).status, 401);
  EXPECT_TRUE(IsPublic("GET", "/v1/openapi.json"));
  EXPECT_TRUE(IsPublic("GET", "/healthz"));
  EXPECT_FALSE(IsPublic("POST", "/v1/openapi.json"));
  EXPECT_FALSE(IsPublic("GET", "/v1/openapi.json/x"));
  EXPECT_FALSE(IsPublic("GET", "/v1/jobs"));
}

// Every route of the table reaches its handler: what answers is not the router's "no such
// endpoint" (a handler's own 404, "no job 1", is fine).
TEST_F(OpenApiServedTest, EveryRouteReachesItsHandler) {
  for (const Api::RouteInfo& route : Api::Routes()) {
    const std::string path = ExamplePath(route.pattern);
    ASSERT_EQ(path.find('{'), std::string::npos) << "no test value for a parameter of " << path;
    const net::HttpResponse r = AsRoot(route.method, path);
    const std::string error = Error(r);
    for (const char* router : {"no endpoint ", "no agent endpoint ", "no exec session ",
                               "method " /* MethodNotAllowed */}) {
      EXPECT_NE(error.rfind(router, 0), 0u)
          << route.method << " " << path << " did not reach its handler: " << r.status << " "
          << error;
    }
  }
}

// Who may call a route, as docs/security.md ("Caller kinds") states it, written apart
// from the route table so that the table cannot drift from it: health, readiness, the
// schema and the dashboard's pages and sign-in answer anyone; node tokens call only the
// agent endpoints, and root on the Unix socket may too; metrics tokens read only the
// aggregates; admins everything else; users all but tokens, /metrics, draining and
// resuming nodes, and setting limits.
enum class Kind { kUser, kAdmin, kLocalRoot, kNode, kMetrics };
bool IsPublicRoute(const std::string& method, const std::string& pattern) {
  return (method == "GET" &&
          (pattern == "/healthz" || pattern == "/readyz" || pattern == "/v1/openapi.json" ||
           pattern == "/" || pattern.starts_with("/ui/"))) ||
         (method == "POST" && (pattern == "/ui/login" || pattern == "/ui/logout"));
}
bool ExpectedToAllow(Kind kind, const std::string& method, const std::string& pattern) {
  const bool agent = pattern.starts_with("/v1/agent/");
  const bool admin_only = pattern.starts_with("/v1/tokens") || pattern.starts_with("/v1/nodes/") ||
                          (method == "PUT" && pattern == "/v1/limits") || pattern == "/metrics";
  switch (kind) {
    case Kind::kNode:
      return agent;
    case Kind::kMetrics:
      return method == "GET" && (pattern == "/metrics" || pattern == "/v1/nodes" ||
                                 pattern == "/v1/usage" || pattern == "/v1/telemetry");
    case Kind::kLocalRoot:
      return true;
    case Kind::kAdmin:
      return !agent;
    case Kind::kUser:
      return !agent && !admin_only;
  }
  return false;
}
// What a dashboard session cookie may call: the reads of its pages, and cancel.
bool ExpectedForSession(const std::string& method, const std::string& pattern) {
  static const std::set<std::string> kReads = {"/v1/jobs",  "/v1/jobs/{id}", "/v1/jobs/{id}/logs",
                                               "/v1/nodes", "/v1/usage",     "/v1/telemetry",
                                               "/v1/whoami"};
  return (method == "GET" && kReads.contains(pattern)) ||
         (method == "POST" && pattern == "/v1/jobs/{id}/cancel");
}

// Issue 27: the route table is the one place that says who may call a route. Each row
// says what the expectations above say, and Api::Handle enforces it: every kind of caller
// on every route gets the access layer's 403 exactly where it should, and public routes
// answer without credentials.
TEST_F(OpenApiServedTest, EveryRouteOfTheTableAllowsExactlyTheCallersItShould) {
  const passwd* pw = getpwnam("nobody");
  ASSERT_NE(pw, nullptr) << "the test needs the account 'nobody'";
  const std::map<Kind, std::string> tokens = {{Kind::kAdmin, Token("root", "user")},
                                              {Kind::kNode, Token("vm", "node")},
                                              {Kind::kMetrics, Token(pw->pw_name, "metrics")}};
  const std::map<Kind, std::string> names = {{Kind::kUser, "user"},
                                             {Kind::kAdmin, "admin"},
                                             {Kind::kLocalRoot, "root on the socket"},
                                             {Kind::kNode, "node token"},
                                             {Kind::kMetrics, "metrics token"}};
  for (const api::Route& route : api::Table()) {
    const std::string method(route.method);
    const std::string pattern = api::DocumentedPattern(route.pattern);
    const std::string row = method + " " + pattern;
    EXPECT_EQ(route.access.anyone, IsPublicRoute(method, pattern)) << row;
    EXPECT_EQ(route.access.session, ExpectedForSession(method, pattern)) << row;
    const std::string path = ExamplePath(pattern);
    if (route.access.anyone) {  // no credentials at all, over TCP
      const net::HttpResponse r = api_->Handle(Req(method, path));
      EXPECT_NE(r.status, 401) << row << ": " << r.body;
      EXPECT_NE(r.status, 403) << row << ": " << r.body;
      continue;
    }
    for (const auto& [kind, name] : names) {
      const bool allowed = ExpectedToAllow(kind, method, pattern);
      net::HttpResponse r;
      if (kind == Kind::kUser) {
        r = AsUid(pw->pw_uid, method, path);
      } else if (kind == Kind::kLocalRoot) {
        r = AsUid(0, method, path);
      } else {
        r = WithToken(tokens.at(kind), method, path);
      }
      // A refusal of the access layer: 403 before the handler (which may refuse too,
      // with its own words: no handler does for these requests).
      EXPECT_EQ(r.status == 403, !allowed) << row << " by a " << name << ": " << r.body;
      EXPECT_NE(r.status, 401) << row << " by a " << name << ": " << r.body;
    }
  }
}

// The answers to requests no route takes are those of the if-chain the table replaced.
TEST_F(OpenApiServedTest, RequestsNoRouteTakesGetTheAnswersTheyAlwaysGot) {
  struct Case {
    const char* method;
    const char* path;
    int status;
    const char* error;
  };
  for (const Case& c : std::vector<Case>{
           {"GET", "/v1/agent/register", 404, "no agent endpoint GET /v1/agent/register"},
           {"POST", "/v1/agent/nope", 404, "no agent endpoint POST /v1/agent/nope"},
           {"GET", "/v1/exec/abc", 404, "no exec session abc"},
           {"GET", "/v1/exec/0/output", 404, "no exec session 0/output"},
           {"POST", "/v1/exec/5/output", 404, "no endpoint POST /v1/exec/5/output"},
           {"GET", "/v1/exec/5/nope", 404, "no endpoint GET /v1/exec/5/nope"},
           {"GET", "/v1/nodes/vm/drain", 404,
            "no endpoint GET /v1/nodes/vm/drain: POST /v1/nodes/NAME/drain or /resume"},
           {"POST", "/v1/nodes/vm/reboot", 404,
            "no endpoint POST /v1/nodes/vm/reboot: POST /v1/nodes/NAME/drain or /resume"},
           {"PUT", "/v1/jobs", 400, "method PUT is not allowed on /v1/jobs: see docs/api.md"},
           {"DELETE", "/v1/limits", 400,
            "method DELETE is not allowed on /v1/limits: see docs/api.md"},
           {"PUT", "/v1/tokens", 400, "method PUT is not allowed on /v1/tokens: see docs/api.md"},
           {"GET", "/v1/tokens/0123456789ab", 400,
            "method GET is not allowed on /v1/tokens/0123456789ab: see docs/api.md"},
           {"PUT", "/v1/environments", 400,
            "method PUT is not allowed on /v1/environments: see docs/api.md"},
           // "check" is no environment's name: the literal route is the more specific.
           {"GET", "/v1/environments/check", 400,
            "method GET is not allowed on /v1/environments/check: see docs/api.md"},
           {"GET", "/v1/jobs/abc", 404, "no endpoint GET /v1/jobs/abc: see docs/api.md"},
           {"GET", "/v1/jobs/0", 404, "no endpoint GET /v1/jobs/0: see docs/api.md"},
           {"POST", "/v1/jobs/1/nope", 404, "no endpoint POST /v1/jobs/1/nope: see docs/api.md"},
           {"GET", "/v1/jobs/1/cancel/x", 404,
            "no endpoint GET /v1/jobs/1/cancel/x: see docs/api.md"},
           {"GET", "/v1/nope", 404, "no endpoint GET /v1/nope: see docs/api.md"},
           {"GET", "/v1/jobs/", 404, "no endpoint GET /v1/jobs/: see docs/api.md"},
       }) {
    const net::HttpResponse r = AsRoot(c.method, c.path);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.path << ": " << r.body;
    EXPECT_EQ(Error(r), c.error) << c.method << " " << c.path;
  }
}

// Environment names may have a '/' (a protected PREFIX/NAME): {ref...} takes the rest of
// the path, and the environments code answers, not the router.
TEST_F(OpenApiServedTest, EnvironmentReferencesMayHaveASlash) {
  for (const char* method : {"GET", "DELETE"}) {
    const net::HttpResponse r = AsRoot(method, "/v1/environments/team/torch:1");
    EXPECT_EQ(r.status, 404) << r.body;
    EXPECT_NE(Error(r).find("team/torch:1"), std::string::npos) << Error(r);
    EXPECT_NE(Error(r).rfind("no endpoint", 0), 0u) << Error(r);
  }
}

}  // namespace
}  // namespace gpupool::controller
