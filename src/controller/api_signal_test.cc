// POST /v1/jobs/ID/signal (gpupool cancel --signal): who may, which jobs take it (running
// ones; an array's running elements), and the order the tasks' agent gets once.
#include "controller/api_test.h"

namespace gpupool::controller::api_test {
namespace {

class ApiSignalTest : public ApiAccessTest {
 protected:
  void SetUp() override {
    ApiAccessTest::SetUp();
    vm_ = Token("vm", "node");
    ASSERT_EQ(WithToken(vm_, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  }
  int64_t Submit(const std::string& body) {
    net::HttpResponse sub = AsUid(user_uid_, "POST", "/v1/jobs", {}, body);
    EXPECT_EQ(sub.status, 201) << sub.body;
    return ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>();
  }
  Json Work() {
    net::HttpResponse work = WithToken(vm_, "GET", "/v1/agent/work", {{"node", "vm"}});
    EXPECT_EQ(work.status, 200) << work.body;
    return ParseJson(work.body, "answer").value();
  }
  void Started(int64_t id) {
    const std::string started = R"({"node": "vm", "events": [{"job_id": )" + std::to_string(id) +
                                R"(, "attempt": 1, "kind": "started"}]})";
    EXPECT_EQ(WithToken(vm_, "POST", "/v1/agent/events", {}, started).status, 200);
  }
  net::HttpResponse Signal(uint32_t uid, const std::string& ref, const std::string& body) {
    return AsUid(uid, "POST", "/v1/jobs/" + ref + "/signal", {}, body);
  }
  std::string vm_;
};

TEST_F(ApiSignalTest, TheOwnerSignalsARunningJobWhichGoesOnAndTheAgentGetsItOnce) {
  const int64_t id =
      Submit(R"({"command": ["sleep", "60"], "request": {"gpus": 1}, "workdir": "/"})");
  const std::string ref = std::to_string(id);
  // Pending: nothing to signal yet.
  net::HttpResponse r = Signal(user_uid_, ref, R"({"signal": 10})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r), "job " + ref +
                          " is pending and has no process to signal: only a running job can be "
                          "signalled (cancel it without --signal to take it out of the queue)");
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Work();
  EXPECT_EQ(Signal(user_uid_, ref, R"({"signal": 10})").status, 409);  // starting
  Started(id);
  // Another user may not; bad bodies name the field.
  EXPECT_EQ(Signal(user_uid_ + 1, ref, R"({"signal": 10})").status, 403);
  r = Signal(user_uid_, ref, R"({"signal": 65})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("signal"), std::string::npos) << r.body;
  EXPECT_EQ(Signal(user_uid_, ref, "{}").status, 400);
  EXPECT_EQ(Signal(user_uid_, ref, R"({"signal": 10, "batch": "yes"})").status, 400);
  EXPECT_TRUE(Work()["signal"].is_null());  // none of these was sent

  r = Signal(user_uid_, ref, R"({"signal": 10, "batch": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value(),
            Json::parse(R"({"signal": 10, "batch": true, "array": false, "jobs": 1, "tasks": 1,
                            "missed": []})"));
  Json work = Work();
  EXPECT_EQ(work["signal"], Json::parse(R"([{"job_id": )" + ref +
                                        R"(, "attempt": 1, "task_index": 0, "signal": 10,
                                            "main_only": true}])"));
  EXPECT_TRUE(Work()["signal"].is_null());  // at most once: never resent
  // An admin may too; the job's state is untouched.
  ASSERT_EQ(Signal(0, ref, R"({"signal": 12})").status, 200);
  EXPECT_EQ(Work()["signal"][0]["signal"], 12);
  Result<jobs::Job> job = controller_->Get(id, Caller{"root", 0, 0, true});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, jobs::JobState::kRunning);
  EXPECT_FALSE(job->cancel_requested);
  // Ended: refused, saying so.
  const std::string exited = R"({"node": "vm", "events": [{"job_id": )" + ref +
                             R"(, "attempt": 1, "kind": "exited", "exit_code": 0}]})";
  ASSERT_EQ(WithToken(vm_, "POST", "/v1/agent/events", {}, exited).status, 200);
  r = Signal(user_uid_, ref, R"({"signal": 10})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r), "job " + ref + " has ended (SUCCEEDED): only a running job can be signalled");
}

TEST_F(ApiSignalTest, AnArraysIdSignalsItsRunningElementsAndArrayIndexOne) {
  const int64_t array = Submit(
      R"({"command": ["sleep", "60"], "request": {"gpus": 1}, "workdir": "/", "array": "0-2"})");
  const std::string ref = std::to_string(array);
  EXPECT_EQ(Signal(user_uid_, ref, R"({"signal": 10})").status, 409);  // none runs
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Json work = Work();
  ASSERT_EQ(work["launch"].size(), 2u) << work.dump();  // two GPUs: elements 0 and 1
  for (const Json& launch : work["launch"]) Started(launch["job"]["id"].get<int64_t>());
  EXPECT_EQ(Signal(user_uid_ + 1, ref, R"({"signal": 10})").status, 403);
  net::HttpResponse r = Signal(user_uid_, ref, R"({"signal": 10})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json answer = ParseJson(r.body, "answer").value();
  EXPECT_EQ(answer["array"], true);
  EXPECT_EQ(answer["jobs"], 2);
  EXPECT_EQ(answer["tasks"], 2);
  EXPECT_EQ(Work()["signal"].size(), 2u);
  // One element, as queue prints it; the pending one is refused.
  r = Signal(user_uid_, ref + "_1", R"({"signal": 12})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["array"], false);
  work = Work();
  ASSERT_EQ(work["signal"].size(), 1u);
  EXPECT_EQ(work["signal"][0]["job_id"], array + 1);
  r = Signal(user_uid_, ref + "_2", R"({"signal": 12})");
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(Error(r).find("job " + ref + "_2 is pending"), std::string::npos) << Error(r);
}

// The node of a running task is lost: the signal is not sent, and the answer says why.
TEST_F(ApiSignalTest, ATaskOnANodeThatIsDownIsMissedAndSaidSo) {
  const int64_t id = Submit(R"({"command": ["sleep", "60"], "request": {"gpus": 1}, "workdir": "/",
                                "requeue": false})");
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Work();
  Started(id);
  // An agent too old for signal orders registers as vm: it is told nothing.
  const std::string old = R"({"protocol": "1.3", "node": "vm", "cpu_milli": 8000,
                              "memory_mib": 65536, "running": [{"job_id": )" +
                          std::to_string(id) + R"(, "task_index": 0, "attempt": 1}], "info": )" +
                          NodeInfoJson(2) + "}";
  ASSERT_EQ(WithToken(vm_, "POST", "/v1/agent/register", {}, old).status, 200);
  net::HttpResponse r = Signal(user_uid_, std::to_string(id), R"({"signal": 10})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r), "signal 10 not sent: job " + std::to_string(id) +
                          " task 0: node vm's agent (agent protocol 1.3) cannot signal jobs: "
                          "upgrade it");
}

}  // namespace
}  // namespace gpupool::controller::api_test
