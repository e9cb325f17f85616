// The fixture shared by the API's tests (api_test.cc and the api_*_test.cc beside it that
// include this): requests through Api::Handle against a real controller over an in-memory
// store (ApiAccessTest), as a token's holder or a socket caller.
#pragma once

#include <gtest/gtest.h>
#include <pwd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/json.h"
#include "common/strings.h"
#include "controller/api.h"
#include "controller/tokens.h"
#include "gpu/node_json.h"
#include "store/sqlite_store.h"

namespace gpupool::controller::api_test {

inline net::HttpRequest Req(const std::string& method, const std::string& path,
                            std::map<std::string, std::string> query = {}, std::string body = "") {
  net::HttpRequest r;
  r.method = method;
  r.path = path;
  r.query = std::move(query);
  r.body = std::move(body);
  return r;
}

// Requests through Api::Handle against a real controller and an in-memory store: who may
// call what, node tokens bound to their node, token expiry and revocation (issue 12).
class ApiAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions options;
    options.node_timeout_us = 3'600'000'000;
    Restart(options);
    // A real unprivileged account for user tokens and socket callers.
    const passwd* pw = getpwnam("nobody");
    ASSERT_NE(pw, nullptr) << "the test needs the account 'nobody'";
    user_ = pw->pw_name;
    user_uid_ = pw->pw_uid;
  }

  // A controller and API with `options` on the same store: a restart.
  void Restart(const ControllerOptions& options) {
    api_.reset();
    controller_.reset();
    controller_ = Controller::Create(store_.get(), &clock_, options).value();
    api_ = std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{});
  }

  std::string Token(const std::string& user, const std::string& kind, int64_t expires_us = 0) {
    auto tok = NewToken().value();
    store::TokenRecord rec{tok.second, user, kind, clock_.NowMicros(), expires_us};
    EXPECT_TRUE(store_->PutToken(rec).ok());
    return tok.first;
  }
  net::HttpResponse WithToken(const std::string& token, const std::string& method,
                              const std::string& path, std::map<std::string, std::string> query,
                              const std::string& body = "") {
    net::HttpRequest r = Req(method, path, std::move(query), body);
    r.headers["authorization"] = "Bearer " + token;
    return api_->Handle(r);
  }
  net::HttpResponse AsUid(uint32_t uid, const std::string& method, const std::string& path,
                          std::map<std::string, std::string> query = {},
                          const std::string& body = "") {
    net::HttpRequest r = Req(method, path, std::move(query), body);
    r.peer = net::PeerCredentials{1, uid, uid};
    return api_->Handle(r);
  }
  // `enforcement`: GPU 0's (gpu::GpuInfo), the others' left unstated.
  static std::string NodeInfoJson(int gpus, const std::string& enforcement = "") {
    gpu::NodeInfo n;
    for (int i = 0; i < gpus; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + std::to_string(1000 + i);
      g.memory_total_bytes = uint64_t{80} << 30;
      if (i == 0) g.enforcement = enforcement;
      n.gpus.push_back(g);
    }
    return DumpJson(gpu::NodeToJson(n));
  }
  static std::string RegisterBody(const std::string& node, int gpus,
                                  const std::string& enforcement = "") {
    return R"({"protocol": "1.4", "node": ")" + node +
           R"(", "cpu_milli": 8000, "memory_mib": 65536, "info": )" +
           NodeInfoJson(gpus, enforcement) + "}";
  }
  static std::string Error(const net::HttpResponse& r) {
    Result<Json> j = ParseJson(r.body, "answer");
    return j.ok() && j->contains("error") ? (*j)["error"].get<std::string>() : r.body;
  }
  const NodeView* FindNode(const std::vector<NodeView>& nodes, const std::string& name) {
    for (const NodeView& v : nodes) {
      if (v.name == name) return &v;
    }
    return nullptr;
  }
  // A job of root's placed on node "vm" and RUNNING there, reported by vm's own token.
  int64_t RunningJobOnVm(const std::string& vm_token) {
    EXPECT_EQ(WithToken(vm_token, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status,
              200);
    net::HttpResponse sub =
        AsUid(0, "POST", "/v1/jobs", {},
              R"({"command": ["sleep", "60"], "request": {"gpus": 1}, "workdir": "/"})");
    EXPECT_EQ(sub.status, 201) << sub.body;
    const int64_t id = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
    EXPECT_TRUE(controller_->ScheduleOnce().ok());
    net::HttpResponse work = WithToken(vm_token, "GET", "/v1/agent/work", {{"node", "vm"}});
    EXPECT_EQ(work.status, 200) << work.body;
    const std::string started = R"({"node": "vm", "events": [{"job_id": )" + std::to_string(id) +
                                R"(, "attempt": 1, "kind": "started"}]})";
    EXPECT_EQ(WithToken(vm_token, "POST", "/v1/agent/events", {}, started).status, 200);
    EXPECT_EQ(controller_->Get(id, Caller{"root", 0, 0, true})->state, jobs::JobState::kRunning);
    return id;
  }

  ManualClock clock_{1'800'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Api> api_;
  std::string user_;
  uint32_t user_uid_ = 0;
};

}  // namespace gpupool::controller::api_test
