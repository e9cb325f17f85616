// The API's routes and access (issue 12): which requests get a thread, /metrics, who may
// use the agents' endpoints, node tokens bound to their node, exec sessions, the queue's
// listing, health checks, agents' long polls, and the nodes' views.
#include "controller/api_test.h"

namespace gpupool::controller::api_test {
namespace {

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
  // A signal waits (up to 5 s) for the agents to confirm it: on a pool thread, it held up
  // the very poll answers that carry it (controller/job_signal.h).
  EXPECT_TRUE(Api::MayBlock(Req("POST", "/v1/jobs/12/signal", {}, R"({"signal": 10})")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/agent/logs", {{"id", "1"}}, "bytes")));
  EXPECT_FALSE(Api::MayBlock(Req("POST", "/v1/agent/events", {}, "{}")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/nodes")));
  EXPECT_FALSE(Api::MayBlock(Req("GET", "/v1/environments")));
}

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
  body.replace(body.find("\"1.4\""), 5, "\"9.0\"");
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

// A second agent under a live node's name (another agent_id) hears 409 marked as such
// (protocol::EncodeAgentIdRefusal), which tells it to stop; the first one stays the node's.
TEST_F(ApiAccessTest, ASecondAgentUnderALiveNodesNameIsRefusedForGood) {
  const std::string vm = Token("vm", "node");
  auto with_id = [](const std::string& id) {
    std::string body = RegisterBody("vm", 1);
    return body.insert(1, R"("agent_id": ")" + id + R"(", )");
  };
  ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, with_id("a")).status, 200);
  const net::HttpResponse r = WithToken(vm, "POST", "/v1/agent/register", {}, with_id("b"));
  EXPECT_EQ(r.status, 409) << r.body;
  const Json j = ParseJson(r.body, "answer").value();
  EXPECT_TRUE(protocol::IsAgentIdRefusal(j)) << r.body;
  EXPECT_NE(Error(r).find("node vm is run by another agent"), std::string::npos) << r.body;
  EXPECT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, with_id("a")).status, 200);
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

// `name=` with no name listed every job (as no filter): `gpupool cancel -n ""` then cancelled
// them all. It is 400; names select as before.
TEST_F(ApiAccessTest, AnEmptyNameFilterIsRefusedNotEveryName) {
  for (const char* name : {"a", "b"}) {
    net::HttpResponse sub = AsUid(0, "POST", "/v1/jobs", {},
                                  std::string(R"({"command": ["true"], "workdir": "/", )") +
                                      R"("hold": true, "name": ")" + name + R"("})");
    ASSERT_EQ(sub.status, 201) << sub.body;
  }
  for (const char* empty : {"", ","}) {
    net::HttpResponse bad = AsUid(0, "GET", "/v1/jobs", {{"active", "1"}, {"name", empty}});
    EXPECT_EQ(bad.status, 400) << bad.body;
    EXPECT_EQ(Error(bad), "name: no job name given; leave name out to list every name");
  }
  net::HttpResponse a = AsUid(0, "GET", "/v1/jobs", {{"active", "1"}, {"name", "a,"}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(ParseJson(a.body, "answer").value()["jobs"].size(), 1u);
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

// A node that stopped answering shows until when its lease lets it run --requeue and
// preemptible jobs (its last poll + the server's --node-lease); an answering one does not.
TEST_F(ApiAccessTest, ALostNodeShowsTheEndOfItsLease) {
  ControllerOptions options;
  options.node_timeout_us = 10'000'000;
  options.node_lease_us = 60'000'000;
  Restart(options);
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  const int64_t seen = clock_.NowMicros();
  Json listed = ParseJson(AsUid(user_uid_, "GET", "/v1/nodes").body, "answer").value();
  EXPECT_EQ(listed["nodes"][0]["state"], "up");
  EXPECT_FALSE(listed["nodes"][0].contains("lease_until_us"));
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(controller_->SweepNodes().ok());
  listed = ParseJson(AsUid(user_uid_, "GET", "/v1/nodes").body, "answer").value();
  EXPECT_EQ(listed["nodes"][0]["state"], "down");
  EXPECT_EQ(listed["nodes"][0]["lease_until_us"], seen + 60'000'000);
  // Without a lease, none is shown.
  options.node_lease_us = 0;
  Restart(options);
  clock_.AdvanceMicros(16'000'000);  // past the grace a restart gives
  ASSERT_TRUE(controller_->SweepNodes().ok());
  listed = ParseJson(AsUid(user_uid_, "GET", "/v1/nodes").body, "answer").value();
  EXPECT_EQ(listed["nodes"][0]["state"], "down");
  EXPECT_FALSE(listed["nodes"][0].contains("lease_until_us"));
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
  const std::string body = R"({"protocol": "1.4", "node": "mi", "cpu_milli": 8000, )"
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

// A MIG instance names the job holding it as its user does: an array's element carries
// array_id and array_index (ARRAY_INDEX, as in holders), a plain job its id only; another
// user's job is only `other_user`.
// Node "mig": one A100 80GB (GPU-1000) in MIG mode, cut into three 1g.10gb instances
// MIG-0..2, registered as its agent does.
std::string MigNodeRegistration() {
  gpu::NodeInfo n;
  gpu::GpuInfo g;
  g.vendor = gpu::Vendor::kNvidia;
  g.index = 0;
  g.name = "NVIDIA A100-SXM4-80GB";
  g.uuid = "GPU-1000";
  g.memory_total_bytes = uint64_t{80} << 30;
  g.mig_enabled = true;
  g.enforcement = "mig";
  for (int i = 0; i < 3; ++i) {
    g.mig_devices.push_back(
        {"MIG-" + std::to_string(i), "1g.10gb", 9 + i, 0, uint64_t{10} << 30, {}});
  }
  n.gpus.push_back(g);
  return R"({"protocol": "1.4", "node": "mig", "cpu_milli": 8000, )"
         R"("memory_mib": 65536, "info": )" +
         DumpJson(gpu::NodeToJson(n)) + "}";
}

TEST_F(ApiAccessTest, MigInstancesNameAnArrayElementByItsArrayAndIndex) {
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, MigNodeRegistration()).status, 200);
  const std::string share = R"("request": {"gpus": 1, "gpu_memory_bytes": 8589934592})";
  net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "array": "0-1", )" + share + "}");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const std::string array =
      std::to_string(ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>());
  sub = AsUid(0, "POST", "/v1/jobs", {}, R"({"command": ["true"], "workdir": "/", )" + share + "}");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t plain = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  // Each instance's holder as `uid` sees it: ARRAY_INDEX, the plain job's id, or "other".
  auto held = [&](uint32_t uid) {
    std::set<std::string> out;
    Json listed = ParseJson(AsUid(uid, "GET", "/v1/nodes").body, "answer").value();
    for (const Json& m : listed["nodes"][0]["gpus"][0]["mig_devices"]) {
      if (m.value("other_user", false)) {
        EXPECT_FALSE(m.contains("job") || m.contains("array_id")) << m.dump();
        out.insert("other");
      } else if (m.contains("array_id")) {
        out.insert(std::to_string(m["array_id"].get<int64_t>()) + "_" +
                   std::to_string(m["array_index"].get<int>()));
        EXPECT_TRUE(m.contains("job")) << m.dump();  // the store id, as before
      } else {
        out.insert(std::to_string(m.value("job", int64_t{0})));
      }
    }
    return out;
  };
  EXPECT_EQ(held(0), (std::set<std::string>{array + "_0", array + "_1", std::to_string(plain)}));
  EXPECT_EQ(held(user_uid_), (std::set<std::string>{array + "_0", array + "_1", "other"}));
}

// A GPU in MIG mode taken out of service (here cordoned by the node's health program,
// which lets the job on it go on) takes no new work on any of its instances, so GET
// /v1/nodes lists its idle ones as out of service, not free, and says why on the GPU as
// for a GPU outside MIG mode; an instance a job holds still names the job. Before the
// cordon nothing of this shows.
TEST_F(ApiAccessTest, ACordonedMigGpuListsItsIdleInstancesAsOutOfService) {
  ASSERT_EQ(AsUid(0, "POST", "/v1/agent/register", {}, MigNodeRegistration()).status, 200);
  const net::HttpResponse sub = AsUid(0, "POST", "/v1/jobs", {},
                                      R"({"command": ["true"], "workdir": "/", )"
                                      R"("request": {"gpus": 1, "gpu_memory_bytes": 8589934592}})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const int64_t job = ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  auto gpu = [&] {
    return ParseJson(AsUid(0, "GET", "/v1/nodes").body, "answer").value()["nodes"][0]["gpus"][0];
  };
  Json g = gpu();
  EXPECT_FALSE(g.contains("out_of_service")) << g.dump();
  for (const Json& m : g["mig_devices"]) EXPECT_FALSE(m.contains("out_of_service")) << m.dump();

  protocol::HealthReport bad;
  bad.gpus = {{0, "ECC test failed"}};
  ASSERT_TRUE(controller_->ObserveHealthReport("mig", bad).ok());
  g = gpu();
  ASSERT_EQ(g.value("health", Json::object()).value("state", ""), "cordoned") << g.dump();
  EXPECT_EQ(g.value("out_of_service", "").rfind("cordoned: ", 0), 0u) << g.dump();
  int held = 0;
  int out = 0;
  for (const Json& m : g["mig_devices"]) {
    if (m.value("job", int64_t{0}) == job) {
      ++held;
      EXPECT_FALSE(m.contains("out_of_service")) << m.dump();
    } else {
      out += m.value("out_of_service", false) ? 1 : 0;
    }
  }
  EXPECT_EQ(held, 1);
  EXPECT_EQ(out, 2);
}

}  // namespace
}  // namespace gpupool::controller::api_test
