// POST /v1/jobs/ID/signal (gpupool cancel --signal): who may, which jobs take it (running
// ones; an array's running elements), the order the tasks' agent gets once, and what the
// answer says when the agent does not take it or confirm it (job_signal.h).
#include <future>

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
  // A signal the controller waits on: its answer comes once the agent took the orders and
  // polled again, or the wait ran out (the clock moves only when the test says).
  std::future<net::HttpResponse> SignalAsync(uint32_t uid, const std::string& ref,
                                             const std::string& body) {
    return std::async(std::launch::async, [=, this] { return Signal(uid, ref, body); });
  }
  // A poll that waits for work (the signal's orders): the agent takes them.
  Json WorkWhenQueued() {
    net::HttpResponse work =
        WithToken(vm_, "GET", "/v1/agent/work", {{"node", "vm"}, {"wait_ms", "60000"}});
    EXPECT_EQ(work.status, 200) << work.body;
    return ParseJson(work.body, "answer").value();
  }
  // A signal its agent takes (`*taken`: that answer) and confirms by polling again.
  net::HttpResponse SignalTaken(uint32_t uid, const std::string& ref, const std::string& body,
                                Json* taken) {
    std::future<net::HttpResponse> answer = SignalAsync(uid, ref, body);
    *taken = WorkWhenQueued();
    Work();
    return answer.get();
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

  Json work;
  r = SignalTaken(user_uid_, ref, R"({"signal": 10, "batch": true})", &work);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value(),
            Json::parse(R"({"signal": 10, "batch": true, "array": false, "jobs": 1, "tasks": 1,
                            "missed": [], "unconfirmed": []})"));
  EXPECT_EQ(work["signal"], Json::parse(R"([{"job_id": )" + ref +
                                        R"(, "attempt": 1, "task_index": 0, "signal": 10,
                                            "main_only": true}])"));
  EXPECT_TRUE(Work()["signal"].is_null());  // at most once: never resent
  // An admin may too; the job's state is untouched.
  ASSERT_EQ(SignalTaken(0, ref, R"({"signal": 12})", &work).status, 200);
  EXPECT_EQ(work["signal"][0]["signal"], 12);
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
  net::HttpResponse none = Signal(user_uid_, ref, R"({"signal": 10})");
  EXPECT_EQ(none.status, 409);
  EXPECT_EQ(Error(none), "array " + ref +
                             " has no running element to signal (3 pending): only running jobs "
                             "can be signalled");
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Json work = Work();
  ASSERT_EQ(work["launch"].size(), 2u) << work.dump();  // two GPUs: elements 0 and 1
  for (const Json& launch : work["launch"]) Started(launch["job"]["id"].get<int64_t>());
  EXPECT_EQ(Signal(user_uid_ + 1, ref, R"({"signal": 10})").status, 403);
  net::HttpResponse r = SignalTaken(user_uid_, ref, R"({"signal": 10})", &work);
  ASSERT_EQ(r.status, 200) << r.body;
  Json answer = ParseJson(r.body, "answer").value();
  EXPECT_EQ(answer["array"], true);
  EXPECT_EQ(answer["jobs"], 2);
  EXPECT_EQ(answer["tasks"], 2);
  EXPECT_EQ(work["signal"].size(), 2u);
  // One element, as queue prints it; the pending one is refused.
  r = SignalTaken(user_uid_, ref + "_1", R"({"signal": 12})", &work);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["array"], false);
  ASSERT_EQ(work["signal"].size(), 1u);
  EXPECT_EQ(work["signal"][0]["job_id"], array + 1);
  r = Signal(user_uid_, ref + "_2", R"({"signal": 12})");
  EXPECT_EQ(r.status, 409);
  EXPECT_NE(Error(r).find("job " + ref + "_2 is pending"), std::string::npos) << Error(r);
  // Held, it says so; the array's answer counts it apart from the pending ones.
  ASSERT_EQ(AsUid(user_uid_, "POST", "/v1/jobs/" + std::to_string(array + 2) + "/hold").status,
            200);
  r = Signal(user_uid_, ref + "_2", R"({"signal": 12})");
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r), "job " + ref +
                          "_2 is held (by nobody) and has no process to signal: only a running "
                          "job can be signalled (gpupool release it; it can be signalled once it "
                          "runs)");
  for (int64_t element : {array, array + 1}) {
    const std::string exited = R"({"node": "vm", "events": [{"job_id": )" +
                               std::to_string(element) +
                               R"(, "attempt": 1, "kind": "exited", "exit_code": 0}]})";
    ASSERT_EQ(WithToken(vm_, "POST", "/v1/agent/events", {}, exited).status, 200);
  }
  none = Signal(user_uid_, ref, R"({"signal": 10})");
  EXPECT_EQ(none.status, 409);
  EXPECT_EQ(Error(none), "array " + ref +
                             " has no running element to signal (1 held): only running jobs can "
                             "be signalled");
}

// An agent that takes no order within kSignalConfirmUs (stopped, killed, cut off, its node
// not yet declared lost): the answer says it is not answering, and the order is withdrawn,
// so that the agent never gets it when it answers again.
TEST_F(ApiSignalTest, AnAgentThatTakesNoOrderIsNotAnsweringAndNeverGetsItLater) {
  const int64_t id =
      Submit(R"({"command": ["sleep", "60"], "request": {"gpus": 1}, "workdir": "/"})");
  const std::string ref = std::to_string(id);
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Work();
  Started(id);
  const int waiting = clock_.Waiters();
  std::future<net::HttpResponse> answer = SignalAsync(user_uid_, ref, R"({"signal": 10})");
  ASSERT_TRUE(clock_.WaitForWaiters(waiting + 1));  // the controller waits for the agent
  clock_.AdvanceMicros(kSignalConfirmUs);
  net::HttpResponse r = answer.get();
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r), "signal 10 not sent: job " + ref +
                          " task 0: node vm is not answering (its agent has not polled for 5 s): "
                          "withdrawn, its agent never gets it");
  EXPECT_TRUE(Work()["signal"].is_null());
  EXPECT_EQ(controller_->Get(id, Caller{"root", 0, 0, true})->state, jobs::JobState::kRunning);
}

// The agent takes the order with a poll the controller held 2 s (held_ms, for its age
// check) and does not poll again: not confirmed, and the answer says what becomes of it.
TEST_F(ApiSignalTest, AnOrderTakenAndNotConfirmedIsSaidSo) {
  const int64_t id =
      Submit(R"({"command": ["sleep", "60"], "request": {"gpus": 1}, "workdir": "/"})");
  const std::string ref = std::to_string(id);
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  Work();
  Started(id);
  const int waiting = clock_.Waiters();
  std::future<Json> poll = std::async(std::launch::async, [this] { return WorkWhenQueued(); });
  ASSERT_TRUE(clock_.WaitForWaiters(waiting + 1));  // the poll waits at the controller
  clock_.AdvanceMicros(2'000'000);
  std::future<net::HttpResponse> answer = SignalAsync(user_uid_, ref, R"({"signal": 10})");
  const Json taken = poll.get();
  ASSERT_EQ(taken["signal"].size(), 1u) << taken.dump();
  EXPECT_EQ(taken["signal"][0]["held_ms"], 2000);
  clock_.AdvanceMicros(kSignalConfirmUs);  // no poll after it
  net::HttpResponse r = answer.get();
  EXPECT_EQ(r.status, 409);
  EXPECT_EQ(Error(r), "signal 10 not confirmed: job " + ref +
                          " task 0: node vm stopped answering as its agent was handed it (no poll "
                          "since): its agent carries it out only if it reads it within 3 s, else "
                          "drops it");
  EXPECT_TRUE(Work()["signal"].is_null());  // never resent
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
