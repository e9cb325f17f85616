// The router's table (Api::Routes) and docs/openapi.json describe the same routes, the API
// serves that document, and every route reaches its handler while requests no route takes
// get the answers they always got. openapi_schema_test.py checks the document itself, its
// examples, and real answers against it.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "common/clock.h"
#include "common/json.h"
#include "controller/api.h"
#include "controller/endpoint_access.h"
#include "controller/openapi_document.h"
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
    EXPECT_TRUE(routed.insert(route).second) << route << " is twice in Api::Table (api.cc)";
  }
  for (const std::string& route : routed) {
    EXPECT_TRUE(documented.contains(route))
        << "the API answers " << route << " (Api::Table in src/controller/api.cc), but "
        << "docs/openapi.json does not describe it: add it under \"paths\"";
  }
  for (const std::string& route : documented) {
    EXPECT_TRUE(routed.contains(route))
        << "docs/openapi.json describes " << route << ", which the API does not answer: add "
        << "it to Api::Table in src/controller/api.cc, or take it out of the document";
  }
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
    net::HttpRequest r = Req(method, path);
    r.peer = net::PeerCredentials{1, 0, 0};
    return api_->Handle(r);
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
    std::string path = route.pattern;
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
