// The API's job routes: hold and release, held submissions, arrays cancelled whole or by
// element and ARRAY_INDEX ids (and exec sessions named so), bad dependencies, a cancel's
// body, limits, and the submission byte bounds (413, 429).
#include "controller/api_test.h"

namespace gpupool::controller::api_test {
namespace {

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
  // `changed` says whether it did anything: a release of a job not held, or a hold of a
  // held one, is a no-op the client says plainly (it printed "Released").
  auto changed = [&](const std::string& what) {
    net::HttpResponse a = AsUid(user_uid_, "POST", "/v1/jobs/" + id + "/" + what);
    EXPECT_EQ(a.status, 200) << a.body;
    return ParseJson(a.body, "answer").value().value("changed", true);
  };
  r = AsUid(0, "POST", "/v1/jobs/" + id + "/release");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(ParseJson(r.body, "answer").value()["changed"], true);
  EXPECT_FALSE(changed("release"));
  EXPECT_TRUE(changed("hold"));
  EXPECT_FALSE(changed("hold"));
  EXPECT_TRUE(changed("release"));
  EXPECT_FALSE(changed("release"));
  // Submissions cannot set the hold fields themselves.
  EXPECT_EQ(AsUid(user_uid_, "POST", "/v1/jobs", {},
                  R"({"command": ["true"], "held_by": "x", "workdir": "/"})")
                .status,
            400);
}

// POST /v1/jobs/ID/checkpoint-done takes the task that says it ({"task": N}, the client run
// inside that task): the owner's (or an admin's) only, as ever; a task the job does not
// have is 400 naming the field; a body of another shape is 400; a job not being
// preempted is 409 with or without a task.
TEST_F(ApiAccessTest, CheckpointDoneTakesTheTaskThatSaysIt) {
  net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "request": {"gpus": 0, "tasks": 2}, "workdir": "/"})");
  ASSERT_EQ(sub.status, 201) << sub.body;
  const std::string path =
      "/v1/jobs/" +
      std::to_string(ParseJson(sub.body, "answer").value()["job"]["id"].get<int64_t>()) +
      "/checkpoint-done";
  EXPECT_EQ(AsUid(user_uid_ + 1, "POST", path, {}, R"({"task": 5})").status, 403);
  net::HttpResponse r = AsUid(user_uid_, "POST", path, {}, R"({"task": 5})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r).rfind("task: job ", 0), 0u) << r.body;
  EXPECT_NE(Error(r).find(" has tasks 0..1, not 5"), std::string::npos) << r.body;
  r = AsUid(user_uid_, "POST", path, {}, R"({"task": "one"})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("task"), std::string::npos) << r.body;
  r = AsUid(user_uid_, "POST", path, {}, R"({"rank": 1})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("rank"), std::string::npos) << r.body;
  EXPECT_EQ(AsUid(user_uid_, "POST", path, {}, "[1]").status, 400);
  for (const char* body : {"", R"({"task": 1})"}) {
    r = AsUid(user_uid_, "POST", path, {}, body);
    EXPECT_EQ(r.status, 409) << body;
    EXPECT_NE(Error(r).find("not being preempted"), std::string::npos) << r.body;
  }
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

// What `gpupool usage` counts of a job's preempted attempts is the server's to write: a
// user naming them (to lower the usage their jobs count, or raise another's) is refused.
TEST_F(ApiAccessTest, ASubmissionCannotSetItsPreemptedAttempts) {
  const net::HttpResponse sub =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "preempted_attempts": [)"
            R"({"start_time_us": 1, "end_time_us": 2, "gpu_hours": -1000}]})");
  EXPECT_EQ(sub.status, 400) << sub.body;
  EXPECT_NE(sub.body.find("preempted_attempts: this field is set by the server; leave it out"),
            std::string::npos)
      << sub.body;
  // Nor the attempts a requeue kept (its old name above is refused too).
  const net::HttpResponse earlier =
      AsUid(user_uid_, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "earlier_attempts": [{"ended_by": "lost", )"
            R"("start_time_us": 1, "end_time_us": 2, "gpu_hours": 0}]})");
  EXPECT_EQ(earlier.status, 400) << earlier.body;
  EXPECT_NE(earlier.body.find("earlier_attempts: this field is set by the server; leave it out"),
            std::string::npos)
      << earlier.body;
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
  EXPECT_EQ(Error(r), "job " + array + "_1 is PENDING; exec runs only in a running job");
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

// Exec sessions name their job as its user does (job_name), as the telemetry does:
// ARRAY_INDEX for an array's element. They carried only job_id, the element's id in the
// store, which `gpupool queue` never shows.
TEST_F(ApiAccessTest, ExecSessionsNameAnArrayElementByItsArrayAndIndex) {
  const std::string vm = Token("vm", "node");
  ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  net::HttpResponse r = AsUid(0, "POST", "/v1/jobs", {},
                              R"({"command": ["sleep", "60"], "request": {"gpus": 1}, )"
                              R"("workdir": "/", "array": "0-1"})");
  ASSERT_EQ(r.status, 201) << r.body;
  const int64_t head = ParseJson(r.body, "answer").value()["job"]["id"].get<int64_t>();
  const std::string array = std::to_string(head);
  const Caller root{"root", 0, 0, true};
  const int64_t second = controller_->ArrayElementId(head, 1, root).value_or(0);
  ASSERT_NE(second, head);
  ASSERT_TRUE(controller_->ScheduleOnce().ok());
  ASSERT_EQ(WithToken(vm, "GET", "/v1/agent/work", {{"node", "vm"}}).status, 200);
  for (const int64_t id : {head, second}) {
    const std::string started = R"({"node": "vm", "events": [{"job_id": )" + std::to_string(id) +
                                R"(, "attempt": 1, "kind": "started"}]})";
    ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/events", {}, started).status, 200);
  }
  for (const auto& [element, id] : {std::pair{array + "_1", second}, {array + "_0", head}}) {
    r = AsUid(0, "POST", "/v1/jobs/" + element + "/exec", {}, R"({"task": 0, "argv": ["true"]})");
    ASSERT_EQ(r.status, 201) << r.body;
    const Json exec = ParseJson(r.body, "answer").value();
    EXPECT_EQ(exec["job_id"], id) << r.body;  // kept for older clients
    EXPECT_EQ(exec.value("job_name", ""), element) << r.body;
    r = AsUid(0, "GET", "/v1/exec/" + std::to_string(exec["id"].get<int64_t>()));
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(ParseJson(r.body, "answer").value().value("job_name", ""), element) << r.body;
  }
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

// A job's dependencies carry the name their user knows each by (job_name): ARRAY_INDEX for
// an array's element, the array's id for its first, the id of a plain job.
TEST_F(ApiAccessTest, DependenciesNameAnArrayElementByItsArrayAndIndex) {
  auto submit = [&](const std::string& body) {
    net::HttpResponse r = AsUid(user_uid_, "POST", "/v1/jobs", {}, body);
    EXPECT_EQ(r.status, 201) << r.body;
    return ParseJson(r.body, "answer").value()["job"]["id"].get<int64_t>();
  };
  const std::string array = std::to_string(
      submit(R"({"command": ["true"], "workdir": "/", "array": "1-7:3", "request": {"gpus": 0}})"));
  const std::string plain =
      std::to_string(submit(R"({"command": ["true"], "workdir": "/", "request": {"gpus": 0}})"));
  const int64_t fourth =
      ParseJson(AsUid(user_uid_, "GET", "/v1/jobs/" + array + "_4").body, "answer")
          .value()["job"]["id"]
          .get<int64_t>();
  ASSERT_NE(std::to_string(fourth), array + "_4");
  const std::string id = std::to_string(
      submit(R"({"command": ["true"], "workdir": "/", "dependencies": [{"job_id": )" +
             std::to_string(fourth) + R"(, "kind": "after-ok"}, {"job_id": )" + array +
             R"(, "kind": "after-any"}, {"job_id": )" + plain + R"(, "kind": "after-ok"}]})"));
  net::HttpResponse r = AsUid(user_uid_, "GET", "/v1/jobs/" + id);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json deps = ParseJson(r.body, "answer").value()["job"]["dependencies"];
  ASSERT_EQ(deps.size(), 3u) << r.body;
  EXPECT_EQ(deps[0]["job_id"], fourth);  // kept for older clients
  EXPECT_EQ(deps[0].value("job_name", ""), array + "_4") << r.body;
  EXPECT_EQ(deps[1].value("job_name", ""), array) << r.body;
  EXPECT_EQ(deps[2].value("job_name", ""), plain) << r.body;
  r = AsUid(user_uid_, "GET", "/v1/jobs");
  ASSERT_EQ(r.status, 200) << r.body;
  int listed = 0;
  const Json list = ParseJson(r.body, "answer").value()["jobs"];
  for (const Json& j : list) {
    if (std::to_string(j["id"].get<int64_t>()) != id) continue;
    ++listed;
    EXPECT_EQ(j["dependencies"][0].value("job_name", ""), array + "_4") << j.dump();
  }
  EXPECT_EQ(listed, 1) << r.body;
  // Another user's element is refused named so too.
  r = AsUid(user_uid_ + 1, "POST", "/v1/jobs", {},
            R"({"command": ["true"], "workdir": "/", "dependencies": [{"job_id": )" +
                std::to_string(fourth) + R"(, "kind": "after-ok"}]})");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(Error(r), "--after-ok " + array + "_4: job " + array + "_4 is another user's; a job " +
                          "may depend on its owner's jobs only");
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
// --nodelist naming no node of the pool is refused naming it and the pool's nodes; an
// --exclude name no node has is accepted with a warning; a name that cannot be a node's
// is 400 naming the field.
TEST_F(ApiAccessTest, NodeListsAreCheckedAgainstThePoolsNodes) {
  const std::string vm = Token("vm", "node");
  ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  auto submit = [&](const std::string& request) {
    return AsUid(user_uid_, "POST", "/v1/jobs", {},
                 R"({"command": ["true"], "workdir": "/", "request": )" + request + "}");
  };
  net::HttpResponse r = submit(R"({"nodelist": ["nodeX"]})");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_NE(Error(r).find("--nodelist nodeX: no such node in this pool; its nodes are vm"),
            std::string::npos)
      << r.body;
  r = submit(R"({"exclude": ["vm"]})");
  EXPECT_NE(Error(r).find("--exclude leaves no node"), std::string::npos) << r.body;
  r = submit(R"({"nodelist": ["vm", "nodeX"], "exclude": ["nodeY"]})");
  ASSERT_EQ(r.status, 201) << r.body;
  const Json answer = ParseJson(r.body, "answer").value();
  EXPECT_EQ(answer["job"]["request"]["nodelist"], Json::parse(R"(["vm", "nodeX"])"));
  EXPECT_EQ(answer["warnings"],
            Json::parse(R"(["--nodelist nodeX: no such node in this pool (`gpupool nodes`); )"
                        R"(the job runs on the others listed", "--exclude nodeY: no such node )"
                        R"(in this pool (`gpupool nodes`); it excludes nothing"])"));
  r = submit(R"({"nodelist": ["vm"]})");
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_FALSE(ParseJson(r.body, "answer").value().contains("warnings"));
  r = submit(R"({"exclude": ["gpu[1-2]"]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(Error(r).find("exclude: 'gpu[1-2]' is not a node name"), std::string::npos) << r.body;
}

// A list past 4096 names is 400 naming the field, the count and what to do instead; the
// names no node has of a long list are warned of by the first few and how many more (the
// warning named every one: 230 KB for 30000 names).
TEST_F(ApiAccessTest, NodeListsPast4096NamesAre400AndLongWarningsAreCut) {
  const std::string vm = Token("vm", "node");
  ASSERT_EQ(WithToken(vm, "POST", "/v1/agent/register", {}, RegisterBody("vm", 2)).status, 200);
  auto names = [](const std::string& prefix, int n) {
    Json a = Json::array({"vm"});
    for (int i = 0; i < n; ++i) a.push_back(prefix + std::to_string(i));
    return a;
  };
  auto submit = [&](const Json& request) {
    return AsUid(
        user_uid_, "POST", "/v1/jobs", {},
        Json{{"command", Json::array({"true"})}, {"workdir", "/"}, {"request", request}}.dump());
  };
  net::HttpResponse r = submit({{"nodelist", names("a", 4096)}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r).rfind("request.nodelist: at most 4096 node names (got 4097); ", 0), 0u)
      << Error(r);
  Json exclude = names("b", 4097);
  exclude.erase(exclude.begin());  // not vm: 4097 names
  r = submit({{"exclude", exclude}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Error(r).rfind("request.exclude: at most 4096 node names (got 4097); ", 0), 0u)
      << Error(r);
  exclude = names("b", 10);
  exclude.erase(exclude.begin());
  r = submit({{"nodelist", names("a", 20)}, {"exclude", exclude}});
  ASSERT_EQ(r.status, 201) << r.body;
  EXPECT_EQ(ParseJson(r.body, "answer").value()["warnings"],
            Json::parse(R"(["--nodelist a0, a1, a2, a3, a4, a5, a6, a7 and 12 more: no such )"
                        R"(node in this pool (`gpupool nodes`); the job runs on the others )"
                        R"(listed", "--exclude b0, b1, b2, b3, b4, b5, b6, b7 and 2 more: no )"
                        R"(such node in this pool (`gpupool nodes`); they exclude nothing"])"));
}

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
  Restart(o);
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

}  // namespace
}  // namespace gpupool::controller::api_test
