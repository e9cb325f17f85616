#include "controller/api.h"

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
#include "controller/tokens.h"
#include "gpu/node_json.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

net::HttpRequest Req(const std::string& method, const std::string& path,
                     std::map<std::string, std::string> query = {}, std::string body = "") {
  net::HttpRequest r;
  r.method = method;
  r.path = path;
  r.query = std::move(query);
  r.body = std::move(body);
  return r;
}

// Which requests get a thread of their own (net::HttpServerOptions::may_block): those
// that wait (long polls, log reads, image inspections), and no others, so the pool
// threads stay few and quick.
TEST(ApiTest, MayBlockPicksTheRequestsThatWait) {
  // An agent's poll for work waits too, but holds no thread: the controller answers it
  // later (Api::Handle with a responder; AnAgentsPollWaitsWithoutAThread below).
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/agent/work", {{"node", "n"}, {"wait_ms", "10000"}})));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/agent/work", {{"node", "n"}, {"wait_ms", "0"}})));
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/jobs/12/logs")));  // relayed from the node
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/jobs/12/logs", {{"wait_ms", "500"}})));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/environments", {}, "{}")));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/environments/check")));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"image": "ubuntu", "command": []})")));
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"environment": "t:1"})")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"command": ["true"]})")));
  // The submission's own keys decide, not the word in its values (issue 27: it was sniffed).
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"command": ["echo", "image"]})")));
  EXPECT_FALSE(
      Api::MayBlock(Req("POST", "/v1/jobs", {}, R"({"command": ["x"], "env": {"image": "y"}})")));
  // Each route says whether it waits: wait_ms on one that never waits is no long poll,
  // and neither is a request no route answers.
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/jobs", {{"wait_ms", "5000"}})));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/nope", {{"wait_ms", "5000"}})));
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/exec/3", {{"wait_ms", "5000"}})));
  EXPECT_TRUE(Api::MayBlock(Req("GET", "/v1/exec/3/output")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/jobs")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/jobs/12")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/jobs/12/cancel")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/agent/logs", {{"id", "1"}}, "bytes")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/agent/events", {}, "{}")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/nodes")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/environments")));
}

// Requests through Api::Handle against a real controller and an in-memory store: who may
// call what, node tokens bound to their node, token expiry and revocation (issue 12).
class ApiAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions options;
    options.node_timeout_us = 3'600'000'000;
    controller_ = Controller::Create(store_.get(), &clock_, options).value();
    api_ = std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{});
    // A real unprivileged account for user tokens and socket callers.
    const passwd* pw = getpwnam("nobody");
    ASSERT_NE(pw, nullptr) << "the test needs the account 'nobody'";
    user_ = pw->pw_name;
    user_uid_ = pw->pw_uid;
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
    return R"({"protocol": "1.2", "node": ")" + node +
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

// The value of the sample `series` (name and labels as written) in a /metrics answer; -1
// when absent.
double MetricValue(const std::string& text, const std::string& series) {
  for (const std::string& line : Split(text, '\n')) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

// GET /metrics keeps ended jobs' totals between scrapes and reads only the jobs that ended
// since: each ended job counts once, however many scrapes see it, and running jobs count
// up to now.
TEST_F(ApiAccessTest, MetricsCountEachEndedJobOnceAcrossScrapes) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string hours =
      R"m(gpupool_allocated_gpu_seconds_total{user="root",project="(none)"})m";
  auto scrape = [&] {
    net::HttpResponse r = AsUid(0, "GET", "/metrics", {});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  };
  std::string m = scrape();
  EXPECT_EQ(MetricValue(m, R"(gpupool_jobs{state="RUNNING"})"), 1);
  EXPECT_EQ(MetricValue(m, R"(gpupool_jobs{state="SUCCEEDED"})"), 0);
  clock_.AdvanceMicros(100'000'000);
  EXPECT_EQ(MetricValue(scrape(), hours), 100);  // running: up to now
  const std::string exited = R"({"node": "vm", "events": [{"job_id": )" + std::to_string(id) +
                             R"(, "attempt": 1, "kind": "exited", "exit_code": 0}]})";
  ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/events", {}, exited).status, 200);
  clock_.AdvanceMicros(50'000'000);  // an ended job's hours stop at its end
  for (int k = 0; k < 3; ++k) {
    m = scrape();
    EXPECT_EQ(MetricValue(m, R"(gpupool_jobs{state="RUNNING"})"), 0);
    EXPECT_EQ(MetricValue(m, R"(gpupool_jobs{state="SUCCEEDED"})"), 1) << "scrape " << k;
    EXPECT_EQ(MetricValue(m, hours), 100) << "scrape " << k;
  }
  // A job cancelled while pending, hours later: counted once too.
  clock_.AdvanceMicros(3 * 3600'000'000LL);
  net::HttpResponse sub = AsUid(0, "POST", "/v1/jobs", {},
                                R"({"command": ["true"], "request": {"gpus": 1}, "workdir": "/"})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t pending = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  ASSERT_EQ(AsUid(0, "POST", "/v1/jobs/" + std::to_string(pending) + "/cancel", {}).status, 200);
  for (int k = 0; k < 2; ++k) {
    m = scrape();
    EXPECT_EQ(MetricValue(m, R"(gpupool_jobs{state="CANCELLED"})"), 1) << "scrape " << k;
    EXPECT_EQ(MetricValue(m, R"(gpupool_jobs{state="SUCCEEDED"})"), 1) << "scrape " << k;
    EXPECT_EQ(MetricValue(m, hours), 100) << "scrape " << k;
  }
}

// Issue 27: an agent whose protocol is too far from the controller's hears 409 with the
// controller's version (protocol::EncodeRegistrationRefusal), which tells it to stop
// rather than retry; the node is not registered.
TEST_F(ApiAccessTest, AnAgentOfAnIncompatibleProtocolIsRefusedWithTheControllersVersion) {
  const std::string vm = Token("vm", "node");
  std::string body = RegisterBody("vm", 1);
  body.replace(body.find("\"1.2\""), 5, "\"9.0\"");
  const net::HttpResponse r = WithToken(vm, "POST", "/v1/agent/register", {}, body);
  EXPECT_EQ(r.status, 409) << r.body;
  const Json j = ParseJson(r.body, "answer").value();
  EXPECT_EQ(protocol::DecodeRegistrationRefusal(j), protocol::kVersion) << r.body;
  EXPECT_EQ(j["error"], "the agent on node vm speaks agent protocol 9.0 and this side " +
                            protocol::VersionString(protocol::kVersion) +
                            "; they are too far apart (the same major and minors at most one "
                            "apart work together): upgrade gpupool on this side");
  EXPECT_TRUE(controller_->Nodes().empty());
}

TEST_F(ApiAccessTest, NodeTokenCannotSubmitOrUseAnyUserEndpoint) {
  const std::string vm = Token("vm", "node");
  net::HttpResponse r =
      WithToken(vm, "POST", "/v1/jobs", {}, R"({"command": ["id"], "workdir": "/"})");
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("may only call the agent endpoints"), std::string::npos) << r.body;
  EXPECT_TRUE(store_->ListJobs({})->empty());  // nothing was created, let alone as uid 0
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/jobs"},
                                                        {"GET", "/v1/jobs/1"},
                                                        {"POST", "/v1/jobs/1/cancel"},
                                                        {"GET", "/v1/whoami"},
                                                        {"GET", "/v1/nodes"},
                                                        {"GET", "/v1/usage"},
                                                        {"GET", "/v1/tokens"},
                                                        {"POST", "/v1/tokens"},
                                                        {"POST", "/v1/environments"}}) {
    EXPECT_EQ(WithToken(vm, method, path, {}, "{}").status, 403) << method << " " << path;
  }
  EXPECT_EQ(store_->ListTokens()->size(), 1u);
}

TEST_F(ApiAccessTest, PeopleCannotUseAgentEndpointsButLocalRootCan) {
  const std::string root_user_token = Token("root", "user");  // an admin, but over a token
  const std::string body = RegisterBody("vm", 1);
  net::HttpResponse r = AsUid(user_uid_, "POST", "/v1/agent/register", {}, body);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("node token"), std::string::npos) << r.body;
  EXPECT_EQ(WithToken(root_user_token, "POST", "/v1/agent/register", {}, body).status, 403);
  EXPECT_TRUE(controller_->Nodes().empty());
  // Root on the socket is an admin that may also act as any local agent.
  EXPECT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, body).status, 200);
  EXPECT_EQ(AsUid(0, "GET", "/v1/agent/work", {{"node", "vm"}}).status, 200);
  EXPECT_EQ(AsUid(0, "GET", "/v1/tokens").status, 200);
}

// Issue 25: another user asking for an exec session that exists and for one that does
// not gets the same answer, byte for byte, from every exec endpoint; a 403 for the one
// and a 404 for the other told whether someone's session id existed.
TEST_F(ApiAccessTest, AnotherUsersExecSessionAndNoneGetByteIdenticalAnswers) {
  const std::string vm = Token("vm", "node");
  const int64_t job = RunningJobOnVm(vm);
  net::HttpResponse started = AsUid(0, "POST", "/v1/jobs/" + std::to_string(job) + "/exec", {},
                                    R"({"task": 0, "argv": ["bash"], "tty": true})");
  ASSERT_EQ(started.status, 201) << started.body;
  const int64_t id = ParseJson(started.body, "answer").value()["id"].get<int64_t>();
  int64_t missing = id + 1;
  while (AsUid(0, "GET", "/v1/exec/" + std::to_string(missing)).status != 404) ++missing;
  struct Probe {
    std::string method, suffix, body;
    std::map<std::string, std::string> query;
  };
  const std::vector<Probe> probes = {
      {"GET", "", "", {}},
      {"GET", "", "", {{"wait_ms", "0"}, {"output", "1"}}},
      {"GET", "/output", "", {{"stream", "stdout"}}},
      {"GET", "/stream", "", {{"wait_ms", "0"}}},
      {"POST", "/input", R"({"seq": 1, "data": "aWQK"})", {}},
      {"DELETE", "", "", {}},
  };
  for (const Probe& p : probes) {
    net::HttpResponse theirs =
        AsUid(user_uid_, p.method, "/v1/exec/" + std::to_string(id) + p.suffix, p.query, p.body);
    net::HttpResponse none = AsUid(
        user_uid_, p.method, "/v1/exec/" + std::to_string(missing) + p.suffix, p.query, p.body);
    const std::string what = p.method + " /v1/exec/ID" + p.suffix;
    EXPECT_EQ(theirs.status, 404) << what << ": " << theirs.body;
    EXPECT_EQ(theirs.status, none.status) << what;
    EXPECT_EQ(theirs.body, none.body) << what;
    EXPECT_EQ(theirs.content_type, none.content_type) << what;
    EXPECT_EQ(theirs.headers, none.headers) << what;
  }
  // The owner's session is untouched: no input queued, not stopped.
  net::HttpResponse mine = AsUid(0, "GET", "/v1/exec/" + std::to_string(id));
  ASSERT_EQ(mine.status, 200) << mine.body;
  EXPECT_FALSE(ParseJson(mine.body, "answer").value()["ended"].get<bool>());
  net::HttpResponse input = AsUid(0, "POST", "/v1/exec/" + std::to_string(id) + "/input", {},
                                  R"({"seq": 1, "data": "aWQK"})");
  EXPECT_EQ(input.status, 200) << input.body;  // seq 1 is still the next one
}

TEST_F(ApiAccessTest, NodeTokenActsOnlyForItsOwnNode) {
  const std::string vm = Token("vm", "node");
  const std::string vm2 = Token("vm2", "node");
  const int64_t id = RunningJobOnVm(vm);
  ASSERT_EQ(WithToken(vm2, "POST", "/v1/agent/register", {}, RegisterBody("vm2", 1)).status, 200);
  const std::vector<NodeView> before = controller_->Nodes();
  const jobs::Job job_before = store_->GetJob(id).value();

  const std::string exited = R"({"node": "vm", "events": [{"job_id": )" + std::to_string(id) +
                             R"(, "attempt": 1, "kind": "exited", "exit_code": 0}]})";
  net::HttpResponse r = WithToken(vm2, "POST", "/v1/agent/events", {}, exited);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("this token belongs to node vm2; it cannot act for node vm"),
            std::string::npos)
      << r.body;
  r = WithToken(vm2, "POST", "/v1/agent/register", {}, RegisterBody("vm", 0));
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("cannot act for node vm"), std::string::npos) << r.body;
  EXPECT_EQ(WithToken(vm2, "GET", "/v1/agent/work", {{"node", "vm"}}).status, 403);
  EXPECT_EQ(
      WithToken(vm2, "POST", "/v1/agent/logs", {{"node", "vm"}, {"id", "1"}, {"size", "3"}}, "abc")
          .status,
      403);
  // Events naming no node are vm2's own, and the controller ignores them for a job on vm.
  const std::string unnamed = R"({"events": [{"job_id": )" + std::to_string(id) +
                              R"(, "attempt": 1, "kind": "lost", "reason": "x"}]})";
  (void)WithToken(vm2, "POST", "/v1/agent/events", {}, unnamed);

  // Nothing changed: the job runs on, vm keeps its GPUs and its grant.
  EXPECT_EQ(store_->GetJob(id).value(), job_before);
  EXPECT_EQ(store_->GetJob(id)->state, jobs::JobState::kRunning);
  const std::vector<NodeView> after = controller_->Nodes();
  const NodeView* vm_before = FindNode(before, "vm");
  const NodeView* vm_after = FindNode(after, "vm");
  ASSERT_NE(vm_before, nullptr);
  ASSERT_NE(vm_after, nullptr);
  EXPECT_EQ(vm_after->info.gpus.size(), 2u);
  EXPECT_EQ(vm_after->allocated_milli, vm_before->allocated_milli);
  EXPECT_EQ(vm_after->running_jobs, 1);
  EXPECT_EQ(vm_after->state, vm_before->state);

  // A node token may leave its node out: it means its own.
  EXPECT_EQ(WithToken(vm2, "GET", "/v1/agent/work", {}).status, 200);
  EXPECT_EQ(WithToken(vm, "POST", "/v1/agent/events", {}, exited).status, 200);
  EXPECT_EQ(store_->GetJob(id)->state, jobs::JobState::kSucceeded);
}

// Issue 15 A.5, "queue --all from a non-admin silently shows only their own jobs".
TEST_F(ApiAccessTest, QueueAllFromAUserSaysItListsTheirOwnJobsOnly) {
  net::HttpResponse mine = AsUid(user_uid_, "GET", "/v1/jobs", {{"all", "1"}});
  EXPECT_EQ(mine.status, 200) << mine.body;
  EXPECT_NE(mine.body.find(R"("all_refused":true)"), std::string::npos) << mine.body;
  net::HttpResponse admin = AsUid(0, "GET", "/v1/jobs", {{"all", "1"}});
  EXPECT_EQ(admin.status, 200) << admin.body;
  EXPECT_EQ(admin.body.find("all_refused"), std::string::npos) << admin.body;
}

// sort=FIELD orders the whole list, active (from memory) or not (from the store), and
// limit/offset page through that order; bad fields and orders are 400 naming them.
TEST_F(ApiAccessTest, QueueSortsTheWholeListThenPages) {
  std::vector<int64_t> ids;
  for (int prio : {3, 1, 4, 1, 5}) {
    net::HttpResponse sub = AsUid(0, "POST", "/v1/jobs", {},
                                  R"({"command": ["true"], "workdir": "/", "hold": true, )"
                                  R"("priority": )" +
                                      std::to_string(prio) + "}");
    ASSERT_EQ(sub.status, 201) << sub.body;
    ids.push_back(ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>());
  }
  ASSERT_EQ(AsUid(0, "POST", "/v1/jobs/" + std::to_string(ids[2]) + "/cancel").status, 200);
  auto list = [&](std::map<std::string, std::string> q) {
    q["all"] = "1";
    net::HttpResponse r = AsUid(0, "GET", "/v1/jobs", q);
    EXPECT_EQ(r.status, 200) << r.body;
    const Json answer = ParseJson(r.body, "answer").value();
    std::vector<int64_t> out;
    for (const Json& j : answer["jobs"]) out.push_back(j["id"].get<int64_t>());
    return out;
  };
  // Active: 5, 3, 1, 1 by priority, ties by id in the first field's direction.
  EXPECT_EQ(list({{"active", "1"}, {"sort", "priority"}, {"order", "desc"}}),
            (std::vector<int64_t>{ids[4], ids[0], ids[3], ids[1]}));
  EXPECT_EQ(list({{"active", "1"}, {"sort", "-priority"}, {"limit", "2"}, {"offset", "1"}}),
            (std::vector<int64_t>{ids[0], ids[3]}));
  // Every state (the store's SQL): the cancelled one too.
  EXPECT_EQ(list({{"sort", "-priority"}, {"limit", "2"}}), (std::vector<int64_t>{ids[4], ids[2]}));
  EXPECT_EQ(list({{"sort", "state,priority"}, {"limit", "3"}, {"offset", "2"}}),
            (std::vector<int64_t>{ids[0], ids[4], ids[2]}));
  // order alone: by id, oldest first even when limited.
  EXPECT_EQ(list({{"order", "asc"}, {"limit", "2"}}), (std::vector<int64_t>{ids[0], ids[1]}));
  EXPECT_EQ(list({{"limit", "2"}}), (std::vector<int64_t>{ids[4], ids[3]}));  // as before
  net::HttpResponse bad = AsUid(0, "GET", "/v1/jobs", {{"sort", "colour"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Error(bad),
            "sort: unknown field 'colour'; use id, user, name, project, state, priority, gpus, "
            "nodes, submitted, start, ended, wait, runtime, time_limit (-FIELD for descending), "
            "e.g. state,-priority");
  bad = AsUid(0, "GET", "/v1/jobs", {{"sort", "id"}, {"order", "up"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Error(bad), "order: unknown order 'up'; use asc or desc");
  bad = AsUid(0, "GET", "/v1/jobs", {{"sort", ""}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(Error(bad).find("sort: give a field, one of id, user"), std::string::npos);
}

TEST_F(ApiAccessTest, HealthChecksNeedNoTokenAndReadySaysWhatIsMissing) {
  EXPECT_EQ(api_->Handle(Req("GET", "/healthz", {})).status, 200);
  net::HttpResponse r = api_->Handle(Req("GET", "/readyz", {}));
  EXPECT_EQ(r.status, 503);  // the scheduler loop has not been started
  EXPECT_NE(r.body.find("scheduler loop is not running"), std::string::npos) << r.body;
  EXPECT_EQ(api_->Handle(Req("POST", "/readyz", {})).status, 401);  // only GET is open
  // Ready once the scheduler loop has gone round: it then waits on the (manual) clock.
  const int waiting = clock_.Waiters();
  controller_->Start();
  ASSERT_TRUE(clock_.WaitForWaiters(waiting + 1));
  r = api_->Handle(Req("GET", "/readyz", {}));
  EXPECT_EQ(r.status, 200) << r.body;
  controller_->Stop();
  EXPECT_EQ(api_->Handle(Req("GET", "/readyz", {})).status, 503);
}

// A responder that records the answer, and can be abandoned as the HTTP server does when
// the client hangs up.
class RecordingResponder final : public net::HttpResponder {
 public:
  bool Complete(net::HttpResponse response) override { return Finish(std::move(response), false); }
  void OnAbandoned(std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    on_abandoned_ = std::move(fn);
  }
  void Abandon() { Finish({503, "application/json", "{}", {}}, true); }
  std::optional<net::HttpResponse> answer() {
    std::lock_guard lock(mu_);
    return answer_;
  }

 private:
  bool Finish(net::HttpResponse r, bool abandon) {
    std::function<void()> fn;
    {
      std::lock_guard lock(mu_);
      if (answer_) return false;
      answer_ = std::move(r);
      if (abandon) fn = std::move(on_abandoned_);
    }
    if (fn) fn();
    return true;
  }
  std::mutex mu_;
  std::optional<net::HttpResponse> answer_;
  std::function<void()> on_abandoned_;
};

// Issue 31: an agent's poll for work is answered later, holding no thread: Handle
// returns at once, the poll waits in the controller, its client leaving forgets it (and
// frees its slot), and a stopping controller answers the rest with no work.
TEST_F(ApiAccessTest, AnAgentsPollWaitsWithoutAThread) {
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, RegisterBody("vm", 1)).status, 200);
  net::HttpRequest poll = Req("GET", "/v1/agent/work", {{"node", "vm"}, {"wait_ms", "30000"}});
  poll.peer = net::PeerCredentials{1, 0, 0};
  std::vector<std::shared_ptr<RecordingResponder>> polls;
  for (size_t i = 0; i < Api::kMaxPollsPerNode; ++i) {
    polls.push_back(std::make_shared<RecordingResponder>());
    api_->Handle(poll, polls.back());
    EXPECT_FALSE(polls.back()->answer().has_value()) << i;
  }
  EXPECT_EQ(controller_->WaitingPolls(), Api::kMaxPollsPerNode);
  // One more for the same node is refused at once.
  auto over = std::make_shared<RecordingResponder>();
  api_->Handle(poll, over);
  ASSERT_TRUE(over->answer().has_value());
  EXPECT_EQ(over->answer()->status, 429) << over->answer()->body;
  // A client that leaves frees its waiter and its slot.
  polls[0]->Abandon();
  EXPECT_EQ(controller_->WaitingPolls(), Api::kMaxPollsPerNode - 1);
  auto again = std::make_shared<RecordingResponder>();
  api_->Handle(poll, again);
  EXPECT_FALSE(again->answer().has_value());
  polls[0] = again;
  controller_->Stop();
  for (const auto& p : polls) {
    ASSERT_TRUE(p->answer().has_value());
    EXPECT_EQ(p->answer()->status, 200);
    EXPECT_NE(p->answer()->body.find(R"("launch":[])"), std::string::npos) << p->answer()->body;
  }
}

TEST_F(ApiAccessTest, HoldAndReleaseByTheOwnerOrAnAdmin) {
  net::HttpResponse sub = AsUid(user_uid_, "POST", "/v1/jobs", {},
                                R"({"command": ["true"], "request": {"gpus": 0}, "workdir": "/"})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const std::string id =
      std::to_string(ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>());
  EXPECT_EQ(AsUid(user_uid_ + 1, "POST", "/v1/jobs/" + id + "/hold").status, 403);
  net::HttpResponse r = AsUid(0, "POST", "/v1/jobs/" + id + "/hold");
  ASSERT_EQ(r.status, 200) << r.body;
  Json job = ParseJson(r.body, "answer").value()["job"];
  EXPECT_EQ(job["held_by"], "root");
  EXPECT_EQ(job["held_by_admin"], true);
  r = AsUid(user_uid_, "POST", "/v1/jobs/" + id + "/release");
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("ask an admin to release it"), std::string::npos) << r.body;
  EXPECT_EQ(AsUid(0, "POST", "/v1/jobs/" + id + "/release").status, 200);
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs/" + id + "/hold").status, 200);
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs/" + id + "/release").status, 200);
  // Submissions cannot set the hold fields themselves.
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs", {},
                  R"({"command": ["true"], "held_by": "x", "workdir": "/"})")
                .status,
            400);
}

// `"hold": true` (gpupool submit --hold) stores the job held by its submitter in the same
// insert: no scheduling pass, however idle the pool, starts it before it is released.
TEST_F(ApiAccessTest, AJobSubmittedHeldIsStoredHeldAndStartsOnlyOnceReleased) {
  const std::string vm = Token("vm", "node");
  ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "request": {"gpus": 1}, "workdir": "/", "hold": true})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t id = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  EXPECT_EQ(ParseJson(sub.body, "answer").value()["job"]["held_by"], user_);
  // Held as stored, not held afterwards.
  Result<jobs::Job> stored = store_->GetJob(id);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->held_by, user_);
  EXPECT_FALSE(stored->held_by_admin);
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  const Caller owner{user_, user_uid_, user_uid_, false};
  Result<jobs::Job> job = controller_->Get(id, owner);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, jobs::JobState::kPending);
  EXPECT_NE(job->pending_reason.find("held by " + user_), std::string::npos) << job->pending_reason;
  // The submitter's own hold: the submitter releases it, and then it starts.
  ASSERT_EQ(AsUid(user_uid_, "POST", "/v1/jobs/" + std::to_string(id) + "/release").status, 200);
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  EXPECT_EQ(controller_->Get(id, owner)->state, jobs::JobState::kAssigned);

  // Every element of an array submitted held is held.
  sub = AsUid(user_uid_, "POST", "/v1/jobs", {},
              R"({"command": ["true"], "workdir": "/", "array": "0-2", "hold": true})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t array = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  for (int64_t e = array; e < array + 3; ++e) EXPECT_EQ(store_->GetJob(e)->held_by, user_) << e;
  // "hold": false is no hold; anything but a boolean is refused, naming the field.
  sub = AsUid(user_uid_, "POST", "/v1/jobs", {},
              R"({"command": ["true"], "workdir": "/", "hold": false})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  EXPECT_FALSE(ParseJson(sub.body, "answer").value()["job"].contains("held_by")) << sub.body;
  net::HttpResponse bad = AsUid(user_uid_, "POST", "/v1/jobs", {},
                                R"({"command": ["true"], "workdir": "/", "hold": "yes"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(Error(bad), "hold: expected true or false");
}

TEST_F(ApiAccessTest, ArraysAreCancelledWholeOrByElement) {
  net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "array": "0-4", "request": {"gpus": 0}})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const Json head = ParseJson(sub.body, "answer").value()["job"];
  const int64_t id = head["id"].get<int64_t>();
  const std::string array = std::to_string(id);
  EXPECT_EQ(head["array_id"], id);
  const std::string cancel = "/v1/jobs/" + array + "/cancel";
  EXPECT_EQ(AsUid(user_uid_ + 1, "POST", cancel, {{"element", "3"}}).status, 403);
  net::HttpResponse r = AsUid(user_uid_, "POST", cancel, {{"element", "3"}});  // older clients
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["job"]["array_index"], 3);
  EXPECT_EQ(controller_->ArrayElements(id).size(), 4u);
  r = AsUid(user_uid_, "POST", cancel, {{"element", "3"}});
  EXPECT_EQ(r.status, 409);
  EXPECT_TRUE(Error(r).ends_with("has already ended (CANCELLED)")) << Error(r);
  EXPECT_EQ(AsUid(user_uid_, "POST", cancel, {{"element", "x"}}).status, 400);
  // Issue 25.6: element 0 (whose id is the array's) named as queue prints it, 12_0,
  // is that element alone; then the array's id still cancels the rest, although its
  // first element has ended.
  r = AsUid(user_uid_, "POST", "/v1/jobs/" + array + "_0/cancel");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_FALSE(ParseJson(r.body, "answer").value().contains("array_cancelled"));
  EXPECT_EQ(ParseJson(r.body, "answer").value()["job"]["state"], "CANCELLED");
  EXPECT_EQ(controller_->ArrayElements(id).size(), 3u);
  r = AsUid(user_uid_, "POST", cancel);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json answer = ParseJson(r.body, "answer").value();
  EXPECT_EQ(answer["array_cancelled"], 3);
  EXPECT_EQ(answer["array"],
            Json::parse(R"({"id": )" + array +
                        R"(, "elements": 5, "queued": 3, "running": 0, "stopping": 0})"));
  EXPECT_TRUE(controller_->ArrayElements(id).empty());
  r = AsUid(user_uid_, "POST", cancel);
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r),
            "array " + array + " has already ended: none of its 5 elements is queued or running");
  // Submissions cannot claim to be an element of someone's array.
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs", {},
                  R"({"command": ["true"], "workdir": "/", "array_id": 1})")
                .status,
            400);
}

// Issue 25.6: every job route takes an array's element as `gpupool queue` prints it,
// ARRAY_INDEX, whatever the element's state; one the array lacks is 404 naming it.
TEST_F(ApiAccessTest, JobRoutesTakeArrayIndexIds) {
  net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "array": "1-7:3", "request": {"gpus": 0}})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t id = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  const std::string array = std::to_string(id);
  const std::string plain = std::to_string(
      ParseJson(AsUid(user_uid_, "POST", "/v1/jobs", {},
                      R"({"command": ["true"], "workdir": "/", "request": {"gpus": 0}})")
                    .body,
                "answer")
          .value()["job"]["id"]
          .get<int64_t>());
  auto index_of = [](const net::HttpResponse& r) {
    return ParseJson(r.body, "answer").value()["job"].value("array_index", -1);
  };
  net::HttpResponse r = AsUid(user_uid_, "GET", "/v1/jobs/" + array + "_4");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(index_of(r), 4);
  r = AsUid(user_uid_, "POST", "/v1/jobs/" + array + "_7/hold");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(index_of(r), 7);
  r = AsUid(user_uid_, "POST", "/v1/jobs/" + array + "_7/release");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs/" + array + "_4/cancel").status, 200);
  // Ended: still found (from the store).
  r = AsUid(user_uid_, "GET", "/v1/jobs/" + array + "_4");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(index_of(r), 4);
  EXPECT_EQ(ParseJson(r.body, "answer").value()["job"]["state"], "CANCELLED");
  r = AsUid(user_uid_, "GET", "/v1/jobs/" + array + "_4/logs");
  EXPECT_EQ(r.status, 200) << r.body;
  r = AsUid(user_uid_, "POST", "/v1/jobs/" + array + "_1/exec", {},
            R"({"task": 0, "argv": ["true"]})");
  EXPECT_EQ(r.status, 409) << r.body;  // the element has not started: the route took the id
  EXPECT_EQ(Error(r), "job " + array + " is PENDING; exec runs only in a running job");
  // What the array lacks, what is no array, what does not exist, whose it is.
  r = AsUid(user_uid_, "GET", "/v1/jobs/" + array + "_2");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Error(r), "array " + array + " has no element 2 (it was submitted with --array 1-7:3)");
  r = AsUid(user_uid_, "POST", "/v1/jobs/" + plain + "_0/cancel");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Error(r),
            "job " + plain + " is not an array, so it has no element 0; name it " + plain);
  r = AsUid(user_uid_, "GET", "/v1/jobs/" + std::to_string(id + 1) + "_4/logs");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Error(r), "job " + std::to_string(id + 1) + " is not an array but element 4 of array " +
                          array + ", so it has no element 4; name it " + std::to_string(id + 1) +
                          " or " + array + "_4");
  r = AsUid(user_uid_, "POST", "/v1/jobs/999999_1/hold");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Error(r), "there is no array 999999 (no job has id 999999), so no element 999999_1");
  EXPECT_EQ(AsUid(user_uid_ + 1, "GET", "/v1/jobs/" + array + "_1").status, 403);
  EXPECT_EQ(AsUid(user_uid_ + 1, "GET", "/v1/jobs/" + array + "_4").status, 403);  // ended
  for (const std::string& bad :
       std::vector<std::string>{array + "_x", array + "_", array + "_-1", "_1", array + "_1_2"}) {
    EXPECT_EQ(AsUid(user_uid_, "GET", "/v1/jobs/" + bad).status, 404) << bad;
  }
  // Exec sessions have no elements.
  EXPECT_EQ(AsUid(user_uid_, "GET", "/v1/exec/1_1").status, 404);
}

TEST_F(ApiAccessTest, BadDependenciesAreRefusedNamingTheField) {
  auto submit = [&](const std::string& deps) {
    return AsUid(user_uid_, "POST", "/v1/jobs", {},
                 R"({"command": ["true"], "workdir": "/", "dependencies": )" + deps + "}");
  };
  net::HttpResponse r = submit(R"([{"job_id": 1, "kind": "before"}])");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r),
            "job.dependencies[0].kind: 'before'; use after-ok, after-any or after-not-ok");
  r = submit(R"([{"job_id": 0, "kind": "after-ok"}])");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("dependencies[0].job_id"), std::string::npos) << r.body;
  r = submit(R"([{"job_id": 99, "kind": "after-ok"}])");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(Error(r), "--after-ok 99: there is no job 99");
  EXPECT_EQ(submit(R"({"job_id": 1})").status, 400);
  // Issue 15 B.8: /dev/shm is sized for containers only.
  r = AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "shm_bytes": 1048576})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("shm_bytes: --shm-size sizes a container's /dev/shm"), std::string::npos)
      << r.body;
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

// Issue 30: `gpupool alloc` tells how its command ended in the cancel's body; any other
// body, or one for a job that is no allocation, is refused naming the field.
TEST_F(ApiAccessTest, ACancelsBodyEndsAnAllocationAndNothingElse) {
  auto submit = [&](const std::string& body) {
    net::HttpResponse r = AsUid(user_uid_, "POST", "/v1/jobs", {}, body);
    EXPECT_EQ(r.status, 201) << r.body;
    return std::to_string(ParseJson(r.body, "answer").value()["job"]["id"].get<int64_t>());
  };
  const std::string batch = submit(R"({"command": ["true"], "workdir": "/"})");
  const std::string alloc = submit(R"({"command": [], "workdir": "/", "interactive": "alloc"})");
  auto cancel = [&](const std::string& id, const std::string& body) {
    return AsUid(user_uid_, "POST", "/v1/jobs/" + id + "/cancel", {}, body);
  };
  net::HttpResponse r = cancel(batch, R"({"exit_code": 0})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r), "job " + batch + " is no allocation (gpupool alloc): cancel it instead");
  EXPECT_EQ(Error(cancel(alloc, R"({"exit_code": 300})")).find("exit_code"), 0u);
  EXPECT_EQ(Error(cancel(alloc, R"({"exit_code": 0, "signal": 9})")),
            "exit_code, signal: give one, how the command ended");
  EXPECT_EQ(cancel(alloc, R"({"exitcode": 0})").status, 400);
  EXPECT_EQ(cancel(alloc, "[1]").status, 400);
  EXPECT_EQ(ParseJson(AsUid(user_uid_, "GET", "/v1/jobs/" + batch).body, "answer")
                .value()["job"]["state"],
            "PENDING");
  // An allocation still pending (its client gave up): cancelled, as without a body.
  r = cancel(alloc, R"({"exit_code": 0})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["job"]["state"], "CANCELLED");
  EXPECT_EQ(ParseJson(r.body, "answer").value()["job"]["name"], "alloc");
  EXPECT_EQ(cancel(batch, "").status, 200);  // no body: a cancel, as ever
}

TEST_F(ApiAccessTest, LimitsAreReadByAnyoneAndSetByAdmins) {
  const std::string body =
      R"({"default": {"max_queued": 1}, "users": {"nobody": {"max_gpus": 4}}})";
  net::HttpResponse r = AsUid(user_uid_, "PUT", "/v1/limits", {}, body);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("only admins set limits"), std::string::npos) << r.body;
  EXPECT_EQ(AsUid(0, "PUT", "/v1/limits", {}, R"({"users": {"nobody": {"max_gpus": "4"}}})").status,
            400);
  EXPECT_EQ(AsUid(0, "PUT", "/v1/limits", {}, "{").status, 400);
  // A user row must name an account: a typo would limit nobody.
  r = AsUid(0, "PUT", "/v1/limits", {}, R"({"users": {"nosuchuser-gp": {"max_gpus": 4}}})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r),
            "limits.users.nosuchuser-gp: there is no user 'nosuchuser-gp' on the controller "
            "host; limits apply to the login names jobs run as: give an existing one (`getent "
            "passwd NAME`), or create the account first");
  r = AsUid(0, "PUT", "/v1/limits", {}, body);
  ASSERT_EQ(r.status, 200) << r.body;
  r = AsUid(user_uid_, "GET", "/v1/limits");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["users"]["nobody"]["max_gpus"], 4);
  const std::string job = R"({"command": ["true"], "workdir": "/"})";
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs", {}, job).status, 201);
  r = AsUid(user_uid_, "POST", "/v1/jobs", {}, job);
  EXPECT_EQ(r.status, 429);  // max_queued 1
  EXPECT_NE(Error(r).find("max_queued 1"), std::string::npos) << r.body;
}

// Issue 25 item 7: a submission over max-submission-bytes is 413 and one past a bound on
// queued bytes 429 (it may pass once jobs have started), each naming its key. The body
// of a submission of max-submission-bytes is read whole (MaxRequestBodyBytes, 2 MiB by
// default), so the refusal is the one that names the key, not a parse error.
TEST_F(ApiAccessTest, SubmissionsPastTheByteBoundsAre413And429NamingTheirKeys) {
  // Variables of 60,000 bytes: one may have 64 KiB.
  auto job = [](int vars) {
    std::string env;
    for (int i = 0; i < vars; ++i) {
      env += std::string(i > 0 ? ", " : "") + "\"V" + std::to_string(i) + "\": \"" +
             std::string(60'000, 'x') + "\"";
    }
    return R"({"command": ["true"], "workdir": "/", "env": {)" + env + "}}";
  };
  EXPECT_EQ(MaxRequestBodyBytes(ControllerOptions{}), size_t{2} << 20);
  net::HttpResponse r = AsUid(user_uid_, "POST", "/v1/jobs", {}, job(24));  // 1.4 MB
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(Error(r).find("the job's submission is 1440117 bytes"), std::string::npos) << r.body;
  EXPECT_NE(Error(r).find("over the server's max-submission-bytes of 1048576"), std::string::npos);
  EXPECT_TRUE(store_->ListJobs({})->empty());

  ControllerOptions o;
  o.node_timeout_us = 3'600'000'000;
  o.max_submission_bytes = 100'000;
  o.max_queued_bytes_per_user = 200'000;
  api_.reset();
  controller_ = Controller::Create(store_.get(), &clock_, o).value();
  api_ = std::make_unique<Api>(controller_.get(), store_.get(), &clock_, AuthOptions{});
  r = AsUid(user_uid_, "POST", "/v1/jobs", {}, job(2));
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(Error(r).find("max-submission-bytes of 100000"), std::string::npos) << r.body;
  for (int i = 0; i < 3; ++i) {
    // 60,016 each: 60,011 sent, and the name "true" the server gives it
    ASSERT_EQ(AsUid(user_uid_, "POST", "/v1/jobs", {}, job(1)).status, 201);
  }
  r = AsUid(user_uid_, "POST", "/v1/jobs", {}, job(1));
  EXPECT_EQ(r.status, 429);
  EXPECT_NE(Error(r).find("has 180048 bytes of submissions queued"), std::string::npos) << r.body;
  EXPECT_NE(Error(r).find("[server] max-queued-bytes-per-user"), std::string::npos);
}

TEST_F(ApiAccessTest, OnlyAdminsDrainAndResumeNodes) {
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  const std::string body = R"({"reason": "disk swap"})";
  net::HttpResponse r = AsUid(user_uid_, "POST", "/v1/nodes/vm/drain", {}, body);
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("only admins drain and resume nodes"), std::string::npos) << r.body;
  EXPECT_EQ(WithToken(Token(user_, "metrics"), "POST", "/v1/nodes/vm/drain", {}, body).status, 403);
  EXPECT_EQ(WithToken(Token("vm", "node"), "POST", "/v1/nodes/vm/drain", {}, body).status, 403);
  r = AsUid(0, "POST", "/v1/nodes/vm/drain", {}, "{}");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("reason"), std::string::npos) << r.body;
  EXPECT_EQ(AsUid(0, "POST", "/v1/nodes/vm/drain", {}, "[1,").status, 400);
  EXPECT_EQ(AsUid(0, "POST", "/v1/nodes/nosuch/drain", {}, body).status, 404);
  EXPECT_EQ(AsUid(0, "POST", "/v1/nodes/vm/reboot", {}, body).status, 404);
  r = AsUid(0, "POST", "/v1/nodes/vm/drain", {}, body);
  ASSERT_EQ(r.status, 200) << r.body;
  Json node = ParseJson(r.body, "answer").value()["node"];
  EXPECT_EQ(node["state"], "drained");
  EXPECT_EQ(node["drain_reason"], "disk swap (root)");
  Json listed = ParseJson(AsUid(user_uid_, "GET", "/v1/nodes").body, "answer").value();
  EXPECT_EQ(listed["nodes"][0]["state"], "drained");
  r = AsUid(0, "POST", "/v1/nodes/vm/resume");
  ASSERT_EQ(r.status, 200) << r.body;
  node = ParseJson(r.body, "answer").value()["node"];
  EXPECT_EQ(node["state"], "up");
  EXPECT_FALSE(node.contains("drain_reason"));
}

// Issue 28: a GPU's enforcement mode as its agent registered it, where it stated one.
TEST_F(ApiAccessTest, NodesShowTheEnforcementTheAgentStated) {
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2, "mps")).status, 200);
  Json listed = ParseJson(AsUid(user_uid_, "GET", "/v1/nodes").body, "answer").value();
  const Json& gpus = listed["nodes"][0]["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["enforcement"], "mps");
  EXPECT_FALSE(gpus[1].contains("enforcement"));  // not stated
}

// Issue 28: an AMD GPU's partitioning and CU count, as its agent discovered them.
TEST_F(ApiAccessTest, NodesShowAnAmdGpusPartitioning) {
  gpu::NodeInfo n;
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kAmd;
  g.index = 0;
  g.name = "AMD Instinct MI300X";
  g.uuid = "0x00000000000003e9";
  g.memory_total_bytes = uint64_t{48} << 30;
  g.compute_partition = "CPX";
  g.memory_partition = "NPS4";
  g.compute_units = 38;
  n.gpus.push_back(g);
  g.index = 1;
  g.uuid = "0x00000000000003ea";
  g.compute_partition.clear();
  g.memory_partition.clear();
  g.compute_units = 0;
  n.gpus.push_back(g);
  const std::string body = R"({"protocol": "1.2", "node": "mi", "cpu_milli": 8000, )"
                           R"("memory_mib": 65536, "info": )" +
                           DumpJson(gpu::NodeToJson(n)) + "}";
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, body).status, 200);
  Json listed = ParseJson(AsUid(user_uid_, "GET", "/v1/nodes").body, "answer").value();
  const Json& gpus = listed["nodes"][0]["gpus"];
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0]["compute_partition"], "CPX");
  EXPECT_EQ(gpus[0]["memory_partition"], "NPS4");
  EXPECT_EQ(gpus[0]["compute_units"], 38);
  EXPECT_FALSE(gpus[1].contains("compute_partition"));  // unknown: left out
  EXPECT_FALSE(gpus[1].contains("compute_units"));
}

// Issue 30: each GPU names the jobs holding it, to those who may read them: an admin sees
// every holder's job and user, a user their own and only the share of another user's.
TEST_F(ApiAccessTest, NodesNameWhoHoldsEachGpuToThoseWhoMayReadTheJob) {
  const int64_t root_job = RunningJobOnVm(Token("vm", "node"));
  net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "request": {"gpus": 1, "gpu_milli": 500}, "workdir": "/"})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t user_job = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  // Who holds what, as a caller sees it: "JOB:USER:MILLI" per holder, "other:MILLI" for
  // what it may not read; GPUs in index order.
  auto holders = [&](uint32_t uid) {
    std::vector<std::string> out;
    Json listed = ParseJson(AsUid(uid, "GET", "/v1/nodes").body, "answer").value();
    for (const Json& g : listed["nodes"][0]["gpus"]) {
      std::string cell;
      for (const Json& h : g.value("holders", Json::array())) {
        if (!cell.empty()) cell += " ";
        cell += h.value("other_user", false) ? "other:" + std::to_string(h["gpu_milli"].get<int>())
                                             : std::to_string(h["job_id"].get<int64_t>()) + ":" +
                                                   h["user"].get<std::string>() + ":" +
                                                   std::to_string(h["gpu_milli"].get<int>());
        EXPECT_EQ(h.value("other_user", false), !h.contains("job_id")) << h.dump();
        EXPECT_EQ(h.value("other_user", false), !h.contains("user")) << h.dump();
      }
      out.push_back(cell);
    }
    return out;
  };
  const std::string mine = std::to_string(user_job) + ":" + user_ + ":500";
  const std::string roots = std::to_string(root_job) + ":root:1000";
  const std::vector<std::string> by_admin = holders(0);
  ASSERT_EQ(by_admin.size(), 2u);
  EXPECT_EQ(std::set<std::string>(by_admin.begin(), by_admin.end()),
            (std::set<std::string>{roots, mine}));
  const std::vector<std::string> by_user = holders(user_uid_);
  EXPECT_EQ(std::set<std::string>(by_user.begin(), by_user.end()),
            (std::set<std::string>{"other:1000", mine}));
  // A metrics token reads aggregates: no job and no user, even those of the name it has.
  net::HttpResponse m = WithToken(Token(user_, "metrics"), "GET", "/v1/nodes", {});
  ASSERT_EQ(m.status, 200) << m.body;
  EXPECT_EQ(m.body.find("job_id"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("other_user"), std::string::npos) << m.body;
}

TEST_F(ApiAccessTest, MetricsTokenReadsAggregatesOnly) {
  const std::string m = Token(user_, "metrics");
  EXPECT_EQ(WithToken(m, "GET", "/v1/nodes", {}).status, 200);
  EXPECT_EQ(WithToken(m, "GET", "/v1/usage", {}).status, 200);
  net::HttpResponse r = WithToken(m, "GET", "/v1/jobs", {});
  EXPECT_EQ(r.status, 403);
  EXPECT_NE(Error(r).find("metrics token may only read aggregates"), std::string::npos);
  EXPECT_EQ(WithToken(m, "POST", "/v1/jobs", {}, R"({"command": ["id"]})").status, 403);
  EXPECT_EQ(WithToken(m, "GET", "/v1/whoami", {}).status, 403);
  EXPECT_EQ(WithToken(m, "GET", "/v1/agent/work", {{"node", "vm"}}).status, 403);
  EXPECT_EQ(WithToken(m, "GET", "/v1/tokens", {}).status, 403);
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

// Issue 30: a metrics token is a service account. One for a name no account on this host
// has (a Prometheus) is made, reads /metrics and the aggregates, and can do nothing else.
TEST_F(ApiAccessTest, AMetricsTokenIsAServiceAccountWithoutAPosixUser) {
  const std::string name = "gpupool-prometheus-no-such-user";
  ASSERT_FALSE(HasPosixAccount(name));
  net::HttpResponse made =
      AsUid(0, "POST", "/v1/tokens", {}, R"({"user": ")" + name + R"(", "kind": "metrics"})");
  ASSERT_EQ(made.status, 201) << made.body;
  const std::string m = ParseJson(made.body, "answer").value()["token"].get<std::string>();
  // A user token still needs the account.
  net::HttpResponse refused =
      AsUid(0, "POST", "/v1/tokens", {}, R"({"user": ")" + name + R"(", "kind": "user"})");
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(Error(refused).find("no account"), std::string::npos) << refused.body;
  net::HttpResponse r = WithToken(m, "GET", "/metrics", {});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("gpupool_"), std::string::npos);
  EXPECT_EQ(WithToken(m, "GET", "/v1/nodes", {}).status, 200);
  EXPECT_EQ(WithToken(m, "GET", "/v1/usage", {}).status, 200);
  EXPECT_EQ(WithToken(m, "GET", "/v1/telemetry", {}).status, 200);
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/jobs"},
                                                        {"POST", "/v1/jobs"},
                                                        {"GET", "/v1/whoami"},
                                                        {"GET", "/v1/tokens"},
                                                        {"POST", "/v1/tokens"},
                                                        {"GET", "/v1/agent/work"},
                                                        {"POST", "/v1/nodes/vm/drain"},
                                                        {"GET", "/v1/limits"}}) {
    r = WithToken(m, method, path, {}, R"({"command": ["id"]})");
    EXPECT_EQ(r.status, 403) << method << " " << path << ": " << r.body;
  }
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

TEST_F(ApiAccessTest, UnknownExpiredAndRevokedTokensAre401) {
  net::HttpResponse r = WithToken("gpt_wrong", "GET", "/v1/jobs", {});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers["WWW-Authenticate"], "Bearer");
  EXPECT_NE(Error(r).find("unknown or revoked token"), std::string::npos);

  const std::string soon = Token(user_, "user", clock_.NowMicros() + 1'000'000);
  EXPECT_EQ(WithToken(soon, "GET", "/v1/whoami", {}).status, 200);
  clock_.AdvanceMicros(1'000'000);
  r = WithToken(soon, "GET", "/v1/whoami", {});
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(Error(r).find("has expired"), std::string::npos) << r.body;

  const std::string t = Token(user_, "user");
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  auto tokens = store_->ListTokens().value();
  ASSERT_EQ(tokens.size(), 2u);
  const std::string id = TokenId(tokens[1]);
  EXPECT_EQ(AsUid(user_uid_, "DELETE", "/v1/tokens/" + id).status, 403);  // admins only
  EXPECT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  r = AsUid(0, "DELETE", "/v1/tokens/" + id);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 401);
  EXPECT_EQ(AsUid(0, "DELETE", "/v1/tokens/" + id).status, 404);
  EXPECT_EQ(AsUid(0, "DELETE", "/v1/tokens/xyz").status, 400);
  EXPECT_EQ(store_->ListTokens()->size(), 1u);  // the expired one is listed until revoked
}

TEST_F(ApiAccessTest, LastUseIsWrittenAtMostOnceAMinute) {
  const std::string t = Token(user_, "user");
  const int64_t t0 = clock_.NowMicros();
  auto last_used = [&] { return store_->ListTokens().value().at(0).last_used_us; };
  EXPECT_EQ(last_used(), 0);
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  EXPECT_EQ(last_used(), t0);
  clock_.AdvanceMicros(30'000'000);
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  EXPECT_EQ(last_used(), t0);  // no write for a use within the minute
  clock_.AdvanceMicros(31'000'000);
  ASSERT_EQ(WithToken(t, "GET", "/v1/whoami", {}).status, 200);
  EXPECT_EQ(last_used(), t0 + 61'000'000);
}

TEST_F(ApiAccessTest, TokenCreationChecksNamesKindsAndExpiry) {
  auto create = [&](const std::string& body) { return AsUid(0, "POST", "/v1/tokens", {}, body); };
  net::HttpResponse r = create(R"({"user": "no-such-user-gpupool", "kind": "user"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("no account 'no-such-user-gpupool'"), std::string::npos) << r.body;
  r = create(R"({"user": "bad:name", "kind": "metrics"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("not a metrics token's name"), std::string::npos) << r.body;
  r = create(R"({"user": "bad:name", "kind": "user"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("not a valid user name"), std::string::npos) << r.body;
  r = create(R"({"user": "-vm", "kind": "node"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("not a node name"), std::string::npos) << r.body;
  EXPECT_EQ(create(R"({"user": "vm", "kind": "root"})").status, 400);
  EXPECT_EQ(create(R"({"user": "vm", "kind": "node", "expires_in_s": -1})").status, 400);
  EXPECT_TRUE(store_->ListTokens()->empty());

  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/tokens", {}, R"({"user": "root"})").status, 403);
  r = create(R"({"user": "gpu-07.rack_2", "kind": "node", "expires_in_s": 3600})");
  ASSERT_EQ(r.status, 201) << r.body;
  Json j = ParseJson(r.body, "answer").value();
  EXPECT_EQ(j["expires_us"].get<int64_t>(), clock_.NowMicros() + 3'600'000'000);
  EXPECT_EQ(j["id"].get<std::string>().size(), 12u);
  r = create(R"({"user": ")" + user_ + R"(", "kind": "metrics"})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["expires_us"].get<int64_t>(), 0);
  r = AsUid(0, "GET", "/v1/tokens");
  ASSERT_EQ(r.status, 200);
  j = ParseJson(r.body, "answer").value();
  ASSERT_EQ(j["tokens"].size(), 2u);
  EXPECT_EQ(j["tokens"][0]["kind"], "node");
  EXPECT_EQ(j["tokens"][0]["user"], "gpu-07.rack_2");
  EXPECT_TRUE(j["tokens"][0].contains("last_used_us"));
  EXPECT_EQ(j["tokens"][1]["kind"], "metrics");
}

}  // namespace
}  // namespace gpupool::controller

namespace gpupool::controller {
namespace {

// Issue 17: telemetry through the API: node tokens report only for their node, the
// latest sample shows on the node, the job gets gpu_util, series and usage follow, the
// idle policy cancels, points reach the store.
// Issue 25: the log of an ended job came back short. A relayed read the node did not
// answer (a busy agent under load: 5 s; here it says it could not) fell back to this
// machine's disk, and when that had no copy the answer was no bytes with
// X-Gpupool-Eof: 1, so `gpupool logs` printed what it had so far and exited 0.
class ApiLogRelayTest : public ApiAccessTest {
 protected:
  // An ended job of root's whose log is on node vm only (a path this machine lacks).
  int64_t EndedJobOnVm() {
    const int64_t id = RunningJobOnVm(vm_);
    const std::string exited =
        R"({"node": "vm", "events": [{"job_id": )" + std::to_string(id) +
        R"(, "attempt": 1, "kind": "exited", "exit_code": 0, "stdout_path": ")" + kPath +
        R"(", "stderr_path": "/nonexistent-gpupool/e.log"}]})";
    EXPECT_EQ(WithToken(vm_, "POST", "/v1/agent/events", {}, exited).status, 200);
    EXPECT_EQ(controller_->Get(id, Caller{"root", 0, 0, true})->state, jobs::JobState::kSucceeded);
    return id;
  }
  // Plays vm's agent for one log read: takes it from a poll and answers with `query`
  // (size=N, or error=...) and `body`. Records the request's offset.
  std::thread AnswerOneRead(std::map<std::string, std::string> query, std::string body,
                            int64_t* offset) {
    return std::thread([this, query, body, offset]() mutable {
      for (int i = 0; i < 100; ++i) {
        net::HttpResponse work =
            WithToken(vm_, "GET", "/v1/agent/work", {{"node", "vm"}, {"wait_ms", "100"}});
        Result<Json> j = ParseJson(work.body, "work");
        if (!j.ok() || !j->contains("logs") || (*j)["logs"].empty()) continue;
        const Json& read = (*j)["logs"][0];
        EXPECT_EQ(read["path"].get<std::string>(), kPath);
        *offset = read["offset"].get<int64_t>();
        query["node"] = "vm";
        query["id"] = std::to_string(read["id"].get<int64_t>());
        EXPECT_EQ(WithToken(vm_, "POST", "/v1/agent/logs", query, body).status, 200);
        return;
      }
      ADD_FAILURE() << "no log read came for node vm";
    });
  }
  net::HttpResponse ReadLog(int64_t job, int64_t offset) {
    return AsUid(0, "GET", "/v1/jobs/" + std::to_string(job) + "/logs",
                 {{"offset", std::to_string(offset)}});
  }

  void SetUp() override {
    ApiAccessTest::SetUp();
    vm_ = Token("vm", "node");
  }

  static constexpr char kPath[] = "/nonexistent-gpupool/vm/jobs/1/stdout.log";
  std::string vm_;
};

TEST_F(ApiLogRelayTest, AReadTheNodeCouldNotServeIsAnErrorNotTheEnd) {
  const int64_t job = EndedJobOnVm();
  int64_t asked = -1;
  std::thread agent = AnswerOneRead({{"error", "io"}}, "cannot read: Input/output error", &asked);
  net::HttpResponse r = ReadLog(job, 0);
  agent.join();
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(Error(r).find("cannot read: Input/output error"), std::string::npos) << r.body;
  EXPECT_NE(Error(r).find("try again"), std::string::npos) << r.body;
  EXPECT_EQ(r.headers.count("X-Gpupool-Eof"), 0u);
}

TEST_F(ApiLogRelayTest, ALogIsNotCutShortWhenALaterChunkCannotBeRead) {
  const int64_t job = EndedJobOnVm();
  // 600,000 bytes on the node: the first 512 KiB come, the rest cannot be read now.
  const std::string first(512 << 10, 'a');
  int64_t asked = -1;
  std::thread agent = AnswerOneRead({{"size", "600000"}}, first, &asked);
  net::HttpResponse r = ReadLog(job, 0);
  agent.join();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body.size(), first.size());
  EXPECT_EQ(r.headers["X-Gpupool-Next-Offset"], std::to_string(first.size()));
  EXPECT_EQ(r.headers["X-Gpupool-Eof"], "0");
  agent = AnswerOneRead({{"error", "io"}}, "busy", &asked);
  r = ReadLog(job, static_cast<int64_t>(first.size()));
  agent.join();
  EXPECT_EQ(asked, static_cast<int64_t>(first.size()));
  EXPECT_EQ(r.status, 503) << r.status << " " << r.body.size() << " bytes, Eof "
                           << r.headers["X-Gpupool-Eof"];
  // Answered, the rest comes and only then the end.
  agent = AnswerOneRead({{"size", "600000"}}, std::string(600000 - first.size(), 'b'), &asked);
  r = ReadLog(job, static_cast<int64_t>(first.size()));
  agent.join();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, std::string(600000 - first.size(), 'b'));
  EXPECT_EQ(r.headers["X-Gpupool-Eof"], "1");
}

class ApiTelemetryTest : public ApiAccessTest {
 protected:
  // One sample of GPU 0 of vm (holding `job` at full share) and GPU 1 (free).
  std::string Batch(int64_t job, double util, int64_t at_ms) {
    return R"({"node": "vm", "samples": [{"index": 0, "at_ms": )" + std::to_string(at_ms) +
           R"(, "util_pct": )" + std::to_string(util) +
           R"(, "mem_used_mib": 2048, "mem_total_mib": 81920, "power_w": 300, "temp_c": 50,
           "jobs": [{"job_id": )" +
           std::to_string(job) + R"(}]}, {"index": 1, "at_ms": )" + std::to_string(at_ms) +
           R"(, "util_pct": 0}]})";
  }
  // Samples every 5 s for `seconds`, advancing the clock; after each, what the telemetry
  // service's thread would do (no thread runs unless the test starts the Api).
  void Report(const std::string& token, int64_t job, double util, int seconds,
              bool run_service = true) {
    for (int s = 0; s < seconds; s += 5) {
      clock_.AdvanceMicros(5'000'000);
      net::HttpResponse r = WithToken(token, "POST", "/v1/agent/telemetry", {},
                                      Batch(job, util, clock_.NowMicros() / 1000));
      ASSERT_EQ(r.status, 200) << r.body;
      if (run_service) api_->telemetry_service().RunOnce();
    }
  }
  Json Body(const net::HttpResponse& r) { return ParseJson(r.body, "answer").value(); }
  // The idle policy: idle after 10 minutes, cancelled 5 minutes later.
  static TelemetryOptions CancelAfterFifteenIdleMinutes() {
    TelemetryOptions o;
    o.idle_action = "cancel";
    o.idle_after_s = 600;
    o.idle_cancel_after_s = 300;
    return o;
  }
};

TEST_F(ApiTelemetryTest, NodesJobsSeriesAndUsageShowTheSamples) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  // Before any sample: no telemetry, no gpu_util.
  Json job = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)));
  EXPECT_FALSE(job["job"].contains("gpu_util"));
  Report(vm, id, 60, 120);
  Report(vm, id, 100, 60);

  Json nodes = Body(AsUid(user_uid_, "GET", "/v1/nodes"));
  const Json& gpu0 = nodes["nodes"][0]["gpus"][0];
  ASSERT_TRUE(gpu0.contains("telemetry")) << nodes.dump();
  EXPECT_EQ(gpu0["telemetry"]["util_pct"], 100);
  EXPECT_EQ(gpu0["telemetry"]["mem_total_mib"], 81920);
  EXPECT_FALSE(nodes["nodes"][0]["gpus"][1]["telemetry"].contains("power_w"));

  job = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)));
  const Json& u = job["job"]["gpu_util"];
  EXPECT_NEAR(u["mean_pct"].get<double>(), (24 * 60 + 12 * 100) / 36.0, 0.01);
  EXPECT_EQ(u["peak_pct"], 100);
  EXPECT_EQ(u["peak_mem_mib"], 2048);
  EXPECT_EQ(u["idle"], false);
  EXPECT_FALSE(u.contains("idle_since_ms"));
  Json list = Body(AsUid(0, "GET", "/v1/jobs"));
  EXPECT_TRUE(list["jobs"][0].contains("gpu_util"));

  // Series: the pool's two GPUs, the node's GPU 0, the job.
  Json pool = Body(AsUid(user_uid_, "GET", "/v1/telemetry"));
  ASSERT_FALSE(pool["points"].empty()) << pool.dump();
  EXPECT_EQ(pool["points"][0]["gpus"], 2);
  Json one = Body(WithToken(Token(user_, "metrics"), "GET", "/v1/telemetry",
                            {{"node", "vm"}, {"gpu", "0"}, {"step_s", "600"}}));
  ASSERT_EQ(one["points"].size(), 1u) << one.dump();
  EXPECT_EQ(one["points"][0]["gpus"], 1);
  Json series = Body(AsUid(0, "GET", "/v1/telemetry", {{"job", std::to_string(id)}}));
  EXPECT_FALSE(series["points"].empty());

  // Usage: 3 minutes allocated, used 60% for 2 and 100% for 1 (the first interval of the
  // job's GPU has no predecessor and counts nothing).
  // (The window is [since, until): a second on, so that the last sample, in the minute
  // that starts now, is inside.)
  clock_.AdvanceMicros(1'000'000);
  Json usage = Body(AsUid(0, "GET", "/v1/usage"));
  const Json& row = usage["rows"][0];
  EXPECT_GT(row["used_gpu_hours"].get<double>(), 0);
  EXPECT_LE(row["used_gpu_hours"].get<double>(), row["gpu_hours"].get<double>());
  EXPECT_NEAR(row["used_gpu_hours"].get<double>(), (115 * 0.6 + 60 * 1.0) / 3600, 1e-6);
  EXPECT_NEAR(row["efficiency"].get<double>(),
              row["used_gpu_hours"].get<double>() / row["gpu_hours"].get<double>(), 1e-9);

  // The points reach the store.
  api_->telemetry_service().Flush();
  Result<std::vector<store::TelemetryRecord>> stored = store_->ListTelemetry({});
  ASSERT_TRUE(stored.ok());
  EXPECT_FALSE(stored->empty());
}

TEST_F(ApiTelemetryTest, WhoMayReportAndReadAndBadInput) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string vm2 = Token("vm2", "node");
  EXPECT_EQ(WithToken(vm2, "POST", "/v1/agent/register", {}, RegisterBody("vm2", 1)).status, 200);
  // vm2's token cannot report for vm; people cannot report at all.
  net::HttpResponse r = WithToken(vm2, "POST", "/v1/agent/telemetry", {}, Batch(id, 50, 1));
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/agent/telemetry", {}, Batch(id, 50, 1)).status, 403);
  EXPECT_TRUE(api_->telemetry().LatestOfNode("vm").empty());
  // Bad batches name the field.
  r = WithToken(vm, "POST", "/v1/agent/telemetry", {},
                R"({"node": "vm", "samples": [{"index": 0, "at_ms": 1, "util_pct": 250}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("samples[0].util_pct"), std::string::npos) << r.body;
  EXPECT_EQ(WithToken(vm, "POST", "/v1/agent/telemetry", {}, "not json").status, 400);
  // An unregistered node.
  const std::string ghost = Token("ghost", "node");
  EXPECT_EQ(WithToken(ghost, "POST", "/v1/agent/telemetry", {}, R"({"samples": []})").status, 404);

  Report(vm, id, 50, 10);
  // A job's series: its owner (root here) yes, another user no, metrics tokens no.
  EXPECT_EQ(AsUid(user_uid_, "GET", "/v1/telemetry", {{"job", std::to_string(id)}}).status, 403);
  EXPECT_EQ(
      WithToken(Token(user_, "metrics"), "GET", "/v1/telemetry", {{"job", std::to_string(id)}})
          .status,
      403);
  // Bad queries.
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "x"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "1"}, {"node", "vm"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"gpu", "0"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"node", "nope"}}).status, 404);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"step_s", "10"}}).status, 400);
  // From the start of time: from the start of the retention (7 days: 10080 minutes).
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"since_ms", "0"}}).status, 200);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"job", "999"}}).status, 404);
}

// A node reports its own GPUs only, and the jobs holding them now at their given share:
// a free GPU claimed for a job, GPU index 7 of a 2-GPU node and an
// unknown job id are all left out, so a node token cannot charge, idle or bloat anything.
TEST_F(ApiTelemetryTest, ANodeReportsOnlyItsOwnGpusAndTheJobsHoldingThem) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);  // on GPU 0
  const std::string job = std::to_string(id);
  for (int s = 0; s < 60; s += 5) {
    clock_.AdvanceMicros(5'000'000);
    const std::string at = std::to_string(clock_.NowMicros() / 1000);
    net::HttpResponse r =
        WithToken(vm, "POST", "/v1/agent/telemetry", {},
                  R"({"node": "vm", "samples": [)"
                  R"({"index": 0, "at_ms": )" +
                      at + R"(, "util_pct": 0, "jobs": [{"job_id": )" + job +
                      R"(}, {"job_id": 999}]},)"
                      R"({"index": 1, "at_ms": )" +
                      at + R"(, "util_pct": 100, "jobs": [{"job_id": )" + job +
                      R"(, "gpu_milli": 1000}]},)"
                      R"({"index": 7, "at_ms": )" +
                      at + R"(, "util_pct": 100, "jobs": [{"job_id": )" + job + R"(}]}]})");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(Body(r)["accepted"], 2);  // GPU 7 is not vm's
  }
  const std::optional<JobGpuUtil> u = api_->telemetry().Job(id);
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->peak_pct, 0);  // only GPU 0's samples count for the job
  EXPECT_EQ(u->used_gpu_hours, 0);
  EXPECT_FALSE(api_->telemetry().Job(999).has_value());
  EXPECT_EQ(api_->telemetry().LatestOfNode("vm").count(7), 0u);
}

TEST_F(ApiTelemetryTest, SeriesReachingPastTheMemoryWindowComeFromTheStore) {
  TelemetryOptions o;
  o.memory_window_s = 600;
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const int64_t start_ms = clock_.NowMicros() / 1000;
  Report(vm, id, 60, 20 * 60);
  Report(vm, id, 90, 10 * 60);
  api_->telemetry_service().Flush();
  // Memory holds the last ten minutes (and one) of the 30.
  EXPECT_LE(api_->telemetry().Size().job_points, 11u);
  EXPECT_LE(api_->telemetry().Size().gpu_points, 2u * 11);

  auto Series = [&](std::map<std::string, std::string> q) {
    q["since_ms"] = std::to_string(start_ms);
    net::HttpResponse r = AsUid(0, "GET", "/v1/telemetry", q);
    EXPECT_EQ(r.status, 200) << r.body;
    return Body(r)["points"];
  };
  const Json job = Series({{"job", std::to_string(id)}});
  ASSERT_GE(job.size(), 30u) << job.dump();
  EXPECT_EQ(job[0]["util_pct"], 60);  // from the store
  EXPECT_EQ(job[job.size() - 1]["util_pct"], 90);
  const Json job10 = Series({{"job", std::to_string(id)}, {"step_s", "600"}});
  ASSERT_GE(job10.size(), 3u) << job10.dump();
  ASSERT_LE(job10.size(), 4u) << job10.dump();
  EXPECT_EQ(job10[0]["util_pct"], 60);  // merged by the store
  EXPECT_EQ(job10[job10.size() - 1]["util_pct"], 90);
  const Json gpu0 = Series({{"node", "vm"}, {"gpu", "0"}});
  EXPECT_EQ(gpu0.size(), job.size());
  const Json node = Series({{"node", "vm"}});
  ASSERT_EQ(node.size(), job.size());
  EXPECT_EQ(node[0]["gpus"], 2);
  EXPECT_EQ(node[0]["util_pct"], 30);  // GPU 0 at 60%, GPU 1 at 0%
  const Json pool = Series({});
  EXPECT_EQ(pool.size(), job.size());
  const Json before = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)))["job"]["gpu_util"];
  EXPECT_NEAR(before["mean_pct"].get<double>(), 70, 0.5);
  const double used_before = Body(AsUid(0, "GET", "/v1/usage"))["rows"][0]["used_gpu_hours"];
  EXPECT_NEAR(used_before, (20 * 60 * 0.6 + 10 * 60 * 0.9) / 3600, 0.01);

  // A restarted controller reads its figures back from the store.
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const Json after = Body(AsUid(0, "GET", "/v1/jobs/" + std::to_string(id)))["job"]["gpu_util"];
  EXPECT_NEAR(after["mean_pct"].get<double>(), before["mean_pct"].get<double>(), 1e-9);
  EXPECT_EQ(after["peak_pct"], before["peak_pct"]);
  EXPECT_NEAR(after["used_gpu_hours"].get<double>(), before["used_gpu_hours"].get<double>(), 1e-9);
  EXPECT_EQ(Series({{"job", std::to_string(id)}}), job);
  EXPECT_EQ(Series({}), pool);
  EXPECT_NEAR(Body(AsUid(0, "GET", "/v1/usage"))["rows"][0]["used_gpu_hours"].get<double>(),
              used_before, 1e-9);
}

// DCGM_FI_DEV_XID_ERRORS is the last Xid a GPU reported, as dcgm-exporter has it, and the
// uncorrected ECC count is DCGM_FI_DEV_ECC_DBE_VOL_TOTAL; GET /v1/nodes shows both and
// the Xid count. A GPU whose source has no Xid figures has no series.
TEST_F(ApiTelemetryTest, MetricsShowTheLastXidAndTheEccCountApart) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);  // on GPU 0
  auto report = [&](const std::string& gpu0_figures) {
    clock_.AdvanceMicros(5'000'000);
    const std::string at = std::to_string(clock_.NowMicros() / 1000);
    net::HttpResponse r =
        WithToken(vm, "POST", "/v1/agent/telemetry", {},
                  R"({"node": "vm", "samples": [{"index": 0, "at_ms": )" + at + ", " +
                      gpu0_figures + R"(, "jobs": [{"job_id": )" + std::to_string(id) +
                      R"(}]}, {"index": 1, "at_ms": )" + at + R"(, "util_pct": 0}]})");
    ASSERT_EQ(r.status, 200) << r.body;
  };
  // The value of the series of `name` for vm's GPU `gpu` (-1: none).
  auto series = [](const std::string& text, const std::string& name, int gpu) {
    const std::string start = name + "{gpu=\"" + std::to_string(gpu) + "\",";
    for (const std::string& line : Split(text, '\n')) {
      if (line.rfind(start, 0) == 0 && line.find("Hostname=\"vm\"") != std::string::npos) {
        return std::stod(line.substr(line.rfind(' ') + 1));
      }
    }
    return -1.0;
  };
  report(R"("util_pct": 90, "xid_errors": 0, "xid_count": 0, "ecc_uncorrected": 2)");
  std::string m = AsUid(0, "GET", "/metrics").body;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_XID_ERRORS", 0), 0) << m;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0), 2) << m;
  report(R"("util_pct": 90, "xid_errors": 79, "xid_count": 1, "ecc_uncorrected": 2)");
  m = AsUid(0, "GET", "/metrics").body;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_XID_ERRORS", 0), 79) << m;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0), 2) << m;
  EXPECT_EQ(series(m, "DCGM_FI_DEV_XID_ERRORS", 1), -1) << m;  // GPU 1 sent none
  EXPECT_NE(m.find("# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered"),
            std::string::npos);
  EXPECT_NE(m.find("# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"), std::string::npos);
  EXPECT_NE(m.find("# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"), std::string::npos);
  // The job's labels, as on the other DCGM series.
  EXPECT_NE(m.find("DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\""), std::string::npos) << m;
  EXPECT_NE(m.find(",hpc_job=\"" + std::to_string(id) + "\",user=\"root\"} 79\n"),
            std::string::npos)
      << m;

  Json nodes = Body(AsUid(user_uid_, "GET", "/v1/nodes"));
  const Json& t = nodes["nodes"][0]["gpus"][0]["telemetry"];
  EXPECT_EQ(t["xid_errors"], 79) << nodes.dump();
  EXPECT_EQ(t["xid_count"], 1);
  EXPECT_EQ(t["ecc_uncorrected"], 2);
  EXPECT_FALSE(nodes["nodes"][0]["gpus"][1]["telemetry"].contains("xid_count"));
}

TEST_F(ApiTelemetryTest, TheIdlePolicyWarnsThenCancelsIdleJobs) {
  const TelemetryOptions o = CancelAfterFifteenIdleMinutes();
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  EXPECT_FALSE(api_->ConfigureTelemetry(TelemetryOptions{.idle_action = "kill"}).ok());
  // A longer retention: a query for all of it in minutes asks too much.
  ASSERT_TRUE(api_->ConfigureTelemetry(TelemetryOptions{.retention_s = 30 * 86400}).ok());
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"since_ms", "0"}}).status, 400);
  EXPECT_EQ(AsUid(0, "GET", "/v1/telemetry", {{"since_ms", "0"}, {"step_s", "300"}}).status, 200);
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string path = "/v1/jobs/" + std::to_string(id);
  Report(vm, id, 2, 9 * 60);  // idle 9 minutes: not yet
  EXPECT_EQ(Body(AsUid(0, "GET", path))["job"]["gpu_util"]["idle"], false);
  Report(vm, id, 2, 2 * 60);  // 11 minutes: idle, warned, not cancelled
  Json job = Body(AsUid(0, "GET", path));
  EXPECT_EQ(job["job"]["gpu_util"]["idle"], true);
  EXPECT_EQ(job["job"]["state"], "RUNNING");
  EXPECT_GT(job["job"]["gpu_util"]["idle_since_ms"].get<int64_t>(), 0);
  Report(vm, id, 2, 5 * 60);  // 16 minutes: past idle_after + idle_cancel_after
  job = Body(AsUid(0, "GET", path));
  EXPECT_TRUE(job["job"]["cancel_requested"].get<bool>()) << job.dump();
  EXPECT_NE(job["job"]["reason"].get<std::string>().find("the idle policy"), std::string::npos)
      << job.dump();
}

TEST_F(ApiTelemetryTest, TheWarnPolicyWarnsAndLeavesTheJobRunning) {
  TelemetryOptions o;
  o.idle_action = "warn";
  o.idle_after_s = 300;
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string path = "/v1/jobs/" + std::to_string(id);
  Report(vm, id, 1, 4 * 60);
  EXPECT_FALSE(Body(AsUid(0, "GET", path))["job"]["gpu_util"].contains("warning"));
  Report(vm, id, 1, 3 * 60);
  Json job = Body(AsUid(0, "GET", path));
  EXPECT_EQ(job["job"]["gpu_util"]["idle"], true);
  EXPECT_NE(job["job"]["gpu_util"]["warning"].get<std::string>().find("below 5%"),
            std::string::npos);
  Report(vm, id, 1, 30 * 60);
  job = Body(AsUid(0, "GET", path));
  EXPECT_EQ(job["job"]["state"], "RUNNING");
  EXPECT_FALSE(job["job"]["cancel_requested"].get<bool>());
  // Busy again: no longer idle.
  Report(vm, id, 60, 10);
  EXPECT_EQ(Body(AsUid(0, "GET", path))["job"]["gpu_util"]["idle"], false);
}

// Issue 27: the idle policy and the store writes run on the telemetry service's own
// thread, not on the agent's request: a report only hands samples over and wakes the
// thread, and the writes also come every TelemetryService::kFlushPeriodUs of the clock.
// Under the ManualClock nothing here sleeps.
TEST_F(ApiTelemetryTest, TheServiceThreadAppliesThePolicyAndWritesOnItsClock) {
  const TelemetryOptions o = CancelAfterFifteenIdleMinutes();
  ASSERT_TRUE(api_->ConfigureTelemetry(o).ok());
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  const std::string path = "/v1/jobs/" + std::to_string(id);
  Report(vm, id, 2, 16 * 60, /*run_service=*/false);
  // The requests alone cancelled nothing and wrote nothing.
  EXPECT_FALSE(Body(AsUid(0, "GET", path))["job"]["cancel_requested"].get<bool>());
  EXPECT_TRUE(store_->ListTelemetry({})->empty());

  api_->Start();
  const PeriodicThread& worker = api_->telemetry_service().worker();
  ASSERT_TRUE(worker.WaitForRuns(1));  // the reports' wake-up
  EXPECT_TRUE(Body(AsUid(0, "GET", path))["job"]["cancel_requested"].get<bool>());
  EXPECT_FALSE(store_->ListTelemetry({})->empty());

  // A report within the period is kept in memory; the period's end writes it.
  int64_t minute = 0;  // of the report below
  auto stored_now = [&] {
    Result<std::vector<store::TelemetryRecord>> stored = store_->ListTelemetry({});
    if (!stored.ok()) return false;
    for (const store::TelemetryRecord& t : *stored) {
      if (t.scope == "gpu" && t.t_ms == minute) return true;
    }
    return false;
  };
  clock_.AdvanceMicros(TelemetryService::kFlushPeriodUs);  // a run on the clock
  ASSERT_TRUE(worker.WaitForRuns(2));
  clock_.AdvanceMicros(60'000'000);  // a minute with no points yet
  ASSERT_TRUE(worker.WaitForRuns(3));
  minute = clock_.NowMicros() / 1000 / 60'000 * 60'000;
  ASSERT_EQ(
      WithToken(vm, "POST", "/v1/agent/telemetry", {}, Batch(id, 50, clock_.NowMicros() / 1000))
          .status,
      200);
  ASSERT_TRUE(worker.WaitForRuns(4));  // its wake-up: the policy, but no write yet
  EXPECT_FALSE(stored_now());
  clock_.AdvanceMicros(TelemetryService::kFlushPeriodUs);
  ASSERT_TRUE(worker.WaitForRuns(5));
  EXPECT_TRUE(stored_now());
  api_->Stop();
}

// The accounting for GET /metrics folds the telemetry's used GPU-seconds in on its own
// thread every PoolAccounting::kFoldPeriodUs, so the hub hands them over even when nobody
// scrapes, and a scrape still counts them.
TEST_F(ApiTelemetryTest, TheAccountingTakesTheUsedSecondsOnItsClock) {
  const std::string vm = Token("vm", "node");
  const int64_t id = RunningJobOnVm(vm);
  Report(vm, id, 100, 60);
  api_->Start();
  const PeriodicThread& worker = api_->accounting().worker();
  ASSERT_TRUE(clock_.WaitForWaiters(2));  // both services wait on the clock
  clock_.AdvanceMicros(PoolAccounting::kFoldPeriodUs);
  ASSERT_TRUE(worker.WaitForRuns(1));
  EXPECT_TRUE(api_->telemetry().TakeUsedGpuSeconds().empty());  // handed over
  const std::string m = AsUid(0, "GET", "/metrics").body;
  const std::string line = "gpupool_used_gpu_seconds_total{user=\"root\",project=\"(none)\"} ";
  const size_t at = m.find(line);
  ASSERT_NE(at, std::string::npos) << m;
  EXPECT_NEAR(std::stod(m.substr(at + line.size())), 55, 1e-6);  // 55 s at 100%
  api_->Stop();
}

}  // namespace
}  // namespace gpupool::controller
