// The controller's queue: each pending job's reason, holds, dependencies (--after-ok,
// --after-any, --after-not-ok) and job arrays (stored whole, their limit, their elements
// found by index, cancelled together).

#include <sqlite3.h>

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

// Issue 31: a pass applies only the pending reasons that changed, yet after each pass a
// job shows the pass's reason, also when a transition set or cleared its reason since the
// last pass while the scheduler's stayed the same.
TEST_F(ControllerTest, AfterAPassEachPendingJobShowsThePasssReason) {
  Register(1);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1), alice_).value();
  Job c = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a.id).state, JobState::kAssigned);
  const std::string waits = Get(b.id).pending_reason;
  ASSERT_EQ(waits.rfind("needs ", 0), 0u) << waits;
  EXPECT_EQ(Get(c.id).pending_reason, waits);
  // Held and released between two passes: the transitions set and cleared b's reason.
  ASSERT_TRUE(c_->Hold(b.id, alice_, true).ok());
  ASSERT_TRUE(c_->Hold(b.id, alice_, false).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).pending_reason, waits);
  EXPECT_EQ(Get(c.id).pending_reason, waits);
  // a ends: b starts (its reason goes), c still waits.
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(Get(a.id), protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).pending_reason, "");
  EXPECT_EQ(Get(c.id).pending_reason, waits);
  // Held: the pass's reason is the hold's.
  ASSERT_TRUE(c_->Hold(c.id, bob_, true).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(c.id).pending_reason.rfind("held by bob", 0), 0u) << Get(c.id).pending_reason;
  EXPECT_EQ(c_->MetricsSnapshot().pending_by_reason["held"], 1);
}

// A held array element is named as its user knows it (ARRAY_INDEX), by the hold and by
// the scheduler's pass alike.
TEST_F(ControllerTest, AHeldArrayElementsReasonNamesItArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_TRUE(c_->Hold(ids[1], root_, true).ok());
  const std::string reason = "held by root (admin): `gpupool release " + std::to_string(arr.id) +
                             "_4` by an admin lets it start";
  EXPECT_EQ(Get(ids[1]).pending_reason, reason);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(ids[1]).state, JobState::kPending);
  EXPECT_EQ(Get(ids[1]).pending_reason, reason);
  EXPECT_EQ(
      c_->Hold(ids[1], alice_, false).status().message(),
      "job " + std::to_string(arr.id) + "_4 was held by admin root; ask an admin to release it");
}

// An array element is named as its user knows it (ARRAY_INDEX), not by its store id, by
// the answers to a checkpoint-done, an exec or another user's request on it.
TEST_F(ControllerTest, AnswersOnAnArrayElementNameItArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  const std::string name = "job " + std::to_string(arr.id) + "_4";
  EXPECT_EQ(c_->CheckpointDone(ids[1], alice_).status().message(),
            name +
                " is PENDING and not being preempted; checkpoint-done ends the grace period "
                "of a preempted job");
  EXPECT_EQ(c_->StartExec(ids[1], 0, {"true"}, alice_).status().message(),
            name + " is PENDING; exec runs only in a running job");
  EXPECT_EQ(c_->Cancel(ids[1], bob_).status().message(),
            name + " belongs to alice; users may only see and act on their own jobs");
  ASSERT_TRUE(c_->Cancel(ids[1], alice_).ok());
  Result<int64_t> ended = c_->StartExec(ids[1], 0, {"true"}, alice_);
  EXPECT_EQ(ended.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ended.status().message().rfind(name + " has ended (CANCELLED)", 0), 0u)
      << ended.status().message();
}

// Issue 15 B.3: hold and release, for owners on their own jobs and admins on any.
TEST_F(ControllerTest, HeldJobsWaitUntilReleasedAndAdminHoldsNeedAnAdmin) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(c_->Hold(a.id, bob_, true).status().code(), StatusCode::kPermissionDenied);
  Result<Job> held = c_->Hold(a.id, alice_, true);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->held_by, "alice");
  const std::string reason =
      "held by alice: `gpupool release " + std::to_string(a.id) + "` lets it start";
  EXPECT_EQ(Get(a.id).pending_reason, reason);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kPending);  // two idle GPUs, but held
  EXPECT_EQ(Get(a.id).pending_reason, reason);
  EXPECT_TRUE(c_->Hold(a.id, alice_, true).ok());  // holding twice changes nothing
  Restart();                                       // the hold is stored
  HearEveryNode();
  EXPECT_EQ(Get(a.id).held_by, "alice");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  ASSERT_TRUE(c_->Hold(a.id, alice_, false).ok());
  EXPECT_EQ(Get(a.id).held_by, "");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  EXPECT_EQ(a.state, JobState::kAssigned);
  Result<Job> running = c_->Hold(a.id, alice_, true);  // only pending jobs
  EXPECT_EQ(running.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(running.status().message().find("only pending jobs are held"), std::string::npos);

  // An admin's hold on alice's job: alice cannot release it, an admin can.
  Job b = c_->Submit(MakeJob(2), alice_).value();
  ASSERT_TRUE(c_->Hold(b.id, root_, true).ok());
  EXPECT_TRUE(Get(b.id).held_by_admin);
  Result<Job> refused = c_->Hold(b.id, alice_, false);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("held by admin root"), std::string::npos);
  EXPECT_TRUE(c_->Hold(b.id, root_, false).ok());
  EXPECT_EQ(c_->Hold(424242, alice_, true).status().code(), StatusCode::kNotFound);
}

// As Slurm's: an admin's hold on a job its user held makes it an admin hold, so the user's
// release is refused and the job does not start until an admin releases it.
TEST_F(ControllerTest, AdminHoldOnAUserHeldJobBecomesAnAdminHold) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->Hold(a.id, alice_, true).ok());
  bool changed = false;
  Result<Job> held = c_->Hold(a.id, root_, true, &changed);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_TRUE(changed);  // the client says "Held", not "held already"
  EXPECT_EQ(held->held_by, "root");
  EXPECT_TRUE(held->held_by_admin);
  EXPECT_EQ(Get(a.id).pending_reason, "held by root (admin): `gpupool release " +
                                          std::to_string(a.id) + "` by an admin lets it start");
  Result<Job> refused = c_->Hold(a.id, alice_, false);
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  changed = true;
  ASSERT_TRUE(c_->Hold(a.id, root_, true, &changed).ok());  // an admin hold again: no-op
  EXPECT_FALSE(changed);
  ASSERT_TRUE(c_->Hold(a.id, alice_, true, &changed).ok());  // the user cannot downgrade it
  EXPECT_FALSE(changed);
  EXPECT_TRUE(Get(a.id).held_by_admin);
  ASSERT_TRUE(c_->Hold(a.id, root_, false).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);
}

// Issue 15 B.2: dependencies wait with a reason naming the job, start when met, and end
// the job (and the jobs after it) when they can never be met.
TEST_F(ControllerTest, DependenciesWaitStartOrEndTheJobWithAReason) {
  Register(2);
  using K = jobs::Dependency::Kind;
  auto after = [&](std::vector<jobs::Dependency> deps, int gpus = 1) {
    Job j = MakeJob(gpus);
    j.dependencies = std::move(deps);
    return c_->Submit(j, alice_).value();
  };
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job ok = after({{a.id, K::kAfterOk}}, 0);
  Job chain = after({{ok.id, K::kAfterOk}}, 0);
  Job not_ok = after({{a.id, K::kAfterNotOk}}, 0);
  Job any = after({{a.id, K::kAfterAny}, {not_ok.id, K::kAfterAny}}, 0);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // reasons are as the pass began: see them settled
  a = Get(a.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  EXPECT_EQ(Get(ok.id).pending_reason,
            "waits for job " + std::to_string(a.id) + " (ASSIGNED) to succeed (--after-ok)");
  EXPECT_EQ(Get(chain.id).pending_reason,
            "waits for job " + std::to_string(ok.id) + " (PENDING) to succeed (--after-ok)");
  EXPECT_EQ(Get(not_ok.id).pending_reason,
            "waits for job " + std::to_string(a.id) + " (ASSIGNED) to fail (--after-not-ok)");
  EXPECT_EQ(Get(any.id).state, JobState::kPending);

  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 3)}).ok());
  Restart();  // what was decided is in the store
  HearEveryNode();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job ended = Get(ok.id);
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(a.id) +
                              " ended FAILED, and --after-ok needs it to succeed");
  ended = Get(chain.id);  // in the same pass
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(ok.id) +
                              " ended CANCELLED, and --after-ok needs it to succeed");
  EXPECT_EQ(Get(not_ok.id).state, JobState::kAssigned);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(any.id).state, JobState::kPending);  // not_ok has not ended yet
  EXPECT_EQ(Get(any.id).pending_reason,
            "waits for job " + std::to_string(not_ok.id) + " (ASSIGNED) to end (--after-any)");
}

// A dependency on one element of an array (`--after-ok 582_2`, resolved by the client to
// the element's own id) is named in the reason as its user named it, not by that id; one
// on the array (its id, its first element's) still names the array.
TEST_F(ControllerTest, ADependencyOnAnArrayElementIsNamedArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_NE(ids[1], arr.id);
  Job on_element = MakeJob(0);
  on_element.dependencies = {{ids[1], jobs::Dependency::Kind::kAfterOk}};
  on_element = c_->Submit(on_element, alice_).value();
  Job on_array = MakeJob(0);
  on_array.dependencies = {{arr.id, jobs::Dependency::Kind::kAfterAny}};
  on_array = c_->Submit(on_array, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // reasons are as the pass began: see them settled
  ASSERT_EQ(Get(ids[1]).state, JobState::kAssigned);
  EXPECT_EQ(Get(on_element.id).pending_reason,
            "waits for job " + std::to_string(arr.id) + "_4 (ASSIGNED) to succeed (--after-ok)");
  EXPECT_EQ(Get(on_array.id).pending_reason,
            "waits for job " + std::to_string(arr.id) + " (ASSIGNED) to end (--after-any)");
}

// An ended element is named so too: once it has left the controller's memory, by what the
// store says of it (it was named by its store id).
TEST_F(ControllerTest, ADependencyOnAnEndedArrayElementIsNamedArrayIndex) {
  Register(2);
  Job j = MakeJob(1);
  j.array = "3-4";
  const Job arr = c_->Submit(j, alice_).value();
  const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  Job on_element = MakeJob(0);
  on_element.dependencies = {{ids[1], jobs::Dependency::Kind::kAfterOk}};
  on_element = c_->Submit(on_element, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job element = Get(ids[1]);
  ASSERT_EQ(element.state, JobState::kAssigned);
  ASSERT_TRUE(Apply({Ev(element, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(element, protocol::EventKind::kExited, 3)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job ended = Get(on_element.id);
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(arr.id) +
                              "_4 ended FAILED, and --after-ok needs it to succeed");
}

TEST_F(ControllerTest, DependenciesNameJobsThatExistAndAreTheCallers) {
  Register(2);
  Job bobs = c_->Submit(MakeJob(1), bob_).value();
  Job j = MakeJob(1);
  // A job can only depend on jobs submitted before it, so dependencies never form a
  // cycle: naming itself or a later job is naming a job that does not exist yet.
  j.dependencies = {{bobs.id + 1, jobs::Dependency::Kind::kAfterOk}};
  Result<Job> r = c_->Submit(j, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(), "--after-ok " + std::to_string(bobs.id + 1) +
                                      ": there is no job " + std::to_string(bobs.id + 1));
  j.dependencies = {{bobs.id, jobs::Dependency::Kind::kAfterAny}};
  r = c_->Submit(j, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(r.status().message().find("another user's"), std::string::npos);
  EXPECT_TRUE(c_->Submit(j, root_).ok());  // admins may
}

// Issue 15 B.1: an array is one job per index, with its index in the environment, and
// at most %N of them run at once.
TEST_F(ControllerTest, ArrayElementsRunAtMostTheLimitAtOnce) {
  Register(2);
  Job j = MakeJob(0);
  j.array = "0-9:3%2";  // 0, 3, 6, 9; two at a time
  Result<Job> first = c_->Submit(j, alice_);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->array_id, first->id);
  std::vector<int64_t> ids = c_->ArrayElements(first->id);
  ASSERT_EQ(ids.size(), 4u);
  std::vector<int> indices;
  for (int64_t id : ids) {
    Job e = Get(id);
    EXPECT_EQ(e.array_id, first->id);
    EXPECT_EQ(e.array_max_running, 2);
    indices.push_back(e.array_index);
  }
  EXPECT_EQ(indices, (std::vector<int>{0, 3, 6, 9}));
  EXPECT_EQ(c_->ArrayElements(first->id, 6).size(), 1u);

  ASSERT_TRUE(c_->ScheduleOnce().ok());
  // Each element finds its index and the array's in its environment, added at launch.
  Result<AgentWork> work = c_->WaitForWork("n1", 0);
  ASSERT_TRUE(work.ok());
  ASSERT_EQ(work->launch.size(), 2u);
  for (const LaunchOrder& o : work->launch) {
    const auto& env = o.job.env;
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_ID"), std::to_string(o.job.array_index));
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_JOB_ID"), std::to_string(first->id));
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_COUNT"), "4");
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_MIN"), "0");
    EXPECT_EQ(env.at("GPUPOOL_ARRAY_TASK_MAX"), "9");
  }
  auto states = [&] {
    std::vector<JobState> out;
    for (int64_t id : ids) out.push_back(Get(id).state);
    return out;
  };
  EXPECT_EQ(states(), (std::vector<JobState>{JobState::kAssigned, JobState::kAssigned,
                                             JobState::kPending, JobState::kPending}));
  EXPECT_EQ(
      Get(ids[2]).pending_reason,
      "array " + std::to_string(first->id) +
          " runs at most 2 elements at once (--array ...%2); its earlier elements come first");
  Job e0 = Get(ids[0]);
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(states(), (std::vector<JobState>{JobState::kSucceeded, JobState::kAssigned,
                                             JobState::kAssigned, JobState::kPending}));
}

// Runs `sql` on the SQLite database at `path`, beside the store's own connection.
void ExecSqlite(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
  sqlite3_free(err);
  sqlite3_close(db);
}

// Issue 27: an array's elements were stored one by one, so a store failure part-way
// left the elements before it (the first holding the array's submit_key), and the
// client's retry was answered with that partial array. The array is one transaction now.
TEST_F(ControllerTest, AnArrayIsStoredWholeOrNotAtAll) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpupool-array-txn-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.db").string();
  store_ = OpenSqliteStore(path);
  ControllerOptions o;
  o.max_queued_total = 5;
  Restart(o);
  Register(2);
  // The database refuses the fourth job (as a full disk would).
  ExecSqlite(path,
             "CREATE TRIGGER fail_fourth BEFORE INSERT ON jobs WHEN (SELECT COUNT(*) FROM "
             "jobs) >= 3 BEGIN SELECT RAISE(ABORT, 'injected failure'); END");
  Job five = MakeJob(1);
  five.array = "0-4";
  five.submit_key = "retry-7f3c";
  Result<Job> failed = c_->Submit(five, alice_);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("injected failure"), std::string::npos)
      << failed.status().ToString();
  EXPECT_TRUE(store_->ListJobs({}).value().empty());
  EXPECT_FALSE(store_->FindSubmitKey(alice_.uid, "retry-7f3c").value().has_value());
  EXPECT_TRUE(c_->List({}, root_).value().empty());

  // The client's retry makes the whole array, and the reservation of the failed one was
  // given back (the pool's bound is the array's size).
  ExecSqlite(path, "DROP TRIGGER fail_fourth");
  bool duplicate = false;
  Result<Job> again = c_->Submit(five, alice_, &duplicate);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(duplicate);
  const std::vector<int64_t> ids = c_->ArrayElements(again->id);
  ASSERT_EQ(ids.size(), 5u);
  for (size_t k = 0; k < ids.size(); ++k) {
    const Job stored = store_->GetJob(ids[k]).value();
    EXPECT_EQ(stored.array_id, again->id) << k;
    EXPECT_EQ(stored.array_index, static_cast<int>(k));
    EXPECT_EQ(stored.version, 1);
    EXPECT_EQ(Get(ids[k]).version, 1) << "memory and store agree";
    EXPECT_EQ(stored.submit_key, k == 0 ? "retry-7f3c" : "") << k;
  }
  EXPECT_EQ(store_->FindSubmitKey(alice_.uid, "retry-7f3c").value(),
            std::optional<int64_t>(again->id));
  EXPECT_EQ(c_->Submit(MakeJob(1), bob_).status().code(), StatusCode::kResourceExhausted);
  c_.reset();
  store_.reset();
  std::filesystem::remove_all(dir);
}

// Issue 25.6: an element is found by its ARRAY_INDEX in any state, also when other jobs
// were stored between the array's elements; cancelling the array after its first element
// ended cancels the others and says how many were queued and how many running.
TEST_F(GatedControllerTest, ArrayElementsAreFoundByIndexAndCancelledTogether) {
  GateStore* g = UseGateStore();
  g->InterleaveArrayElements();
  Job j = MakeJob(1);
  j.array = "0-5:1%3";  // three at once on the two GPUs: 0 and 1 run, the rest wait
  const Job arr = c_->Submit(j, alice_).value();
  std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids[1], arr.id + 2);  // a job of carol's came between
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job e0 = Get(ids[0]);
  ASSERT_EQ(e0.state, JobState::kAssigned);
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // element 2 takes element 0's GPU
  for (size_t k = 1; k < 3; ++k) {
    ASSERT_TRUE(Apply({Ev(Get(ids[k]), protocol::EventKind::kStarted)}).ok());
    ASSERT_EQ(Get(ids[k]).state, JobState::kRunning) << k;
  }

  for (int index = 0; index < 6; ++index) {
    Result<int64_t> id = c_->ArrayElementId(arr.id, index, alice_);
    ASSERT_TRUE(id.ok()) << index << ": " << id.status().ToString();
    EXPECT_EQ(*id, ids[static_cast<size_t>(index)]) << index;
  }
  EXPECT_EQ(c_->ArrayElementId(arr.id, 0, root_).value(), arr.id);  // admins too
  EXPECT_EQ(c_->ArrayElementId(arr.id, 0, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->ArrayElementId(arr.id, 3, bob_).status().code(), StatusCode::kPermissionDenied);
  Result<int64_t> none = c_->ArrayElementId(arr.id, 6, alice_);
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "array " + std::to_string(arr.id) +
                                         " has no element 6 (it was submitted with --array "
                                         "0-5:1%3)");
  EXPECT_EQ(c_->ArrayElementId(arr.id + 1, 0, root_).status().message(),
            "job " + std::to_string(arr.id + 1) +
                " is not an array, so it has no element 0; name it " + std::to_string(arr.id + 1));

  Result<ArrayCancelled> cancelled = c_->CancelArray(arr.id, alice_);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->head.id, arr.id);
  EXPECT_EQ(cancelled->head.state, JobState::kSucceeded);
  EXPECT_EQ(cancelled->elements, 6);
  EXPECT_EQ(cancelled->queued, 3);   // 3, 4, 5
  EXPECT_EQ(cancelled->running, 2);  // 1, 2: being stopped
  for (size_t k = 3; k < 6; ++k) EXPECT_EQ(Get(ids[k]).state, JobState::kCancelled) << k;
  // Again while 1 and 2 are being stopped: no error (scancel), and not counted again.
  Result<ArrayCancelled> stopping = c_->CancelArray(arr.id, alice_);
  ASSERT_TRUE(stopping.ok()) << stopping.status().ToString();
  EXPECT_EQ(stopping->queued, 0);
  EXPECT_EQ(stopping->running, 0);
  EXPECT_EQ(stopping->stopping, 2);
  for (size_t k = 1; k < 3; ++k) {
    const Job e = Get(ids[k]);
    EXPECT_TRUE(e.cancel_requested) << k;
    ASSERT_TRUE(Apply({Ev(e, protocol::EventKind::kExited, 0)}).ok());
  }
  EXPECT_TRUE(c_->ArrayElements(arr.id).empty());
  Result<ArrayCancelled> again = c_->CancelArray(arr.id, alice_);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(),
            "array " + std::to_string(arr.id) +
                " has already ended: none of its 6 elements is queued or running");
  EXPECT_EQ(c_->CancelArray(arr.id, bob_).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(ControllerTest, ADependencyOnAnArrayWaitsForEveryElement) {
  Register(2);
  Job arr = MakeJob(1);
  arr.array = "0-1";
  arr = c_->Submit(arr, alice_).value();
  Job after = MakeJob(0);
  after.dependencies = {{arr.id, jobs::Dependency::Kind::kAfterOk}};
  after = c_->Submit(after, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  std::vector<int64_t> ids = c_->ArrayElements(arr.id);
  ASSERT_EQ(ids.size(), 2u);
  Job e0 = Get(ids[0]);
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e0, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(after.id).state, JobState::kPending);  // element 1 still runs
  Job e1 = Get(ids[1]);
  ASSERT_TRUE(Apply({Ev(e1, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(e1, protocol::EventKind::kExited, 1)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job ended = Get(after.id);
  EXPECT_EQ(ended.state, JobState::kCancelled);
  EXPECT_EQ(ended.reason, "dependency can never be met: job " + std::to_string(arr.id) +
                              " ended FAILED, and --after-ok needs it to succeed");
}

// --after-ok ARRAY needs every element to succeed: one that ended otherwise ends the job at
// once (docs/cli.md, "Dependencies"), while other elements still run or are held, also
// when that element ended before the controller restarted. --after-any and --after-not-ok
// on the array wait for every element to end.
TEST_F(ControllerTest, AnAfterOkOnAnArrayEndsOnceOneElementDidNotSucceed) {
  for (const bool restart : {false, true}) {
    SCOPED_TRACE(restart ? "restarted" : "");
    Register(3);
    Job arr = MakeJob(1);
    arr.array = "0-2";
    arr = c_->Submit(arr, alice_).value();
    const std::vector<int64_t> ids = c_->ArrayElements(arr.id);
    ASSERT_EQ(ids.size(), 3u);
    ASSERT_TRUE(c_->Hold(ids[2], alice_, true).ok());  // would keep an after-ok for ever
    std::vector<Job> after;
    for (auto kind : {jobs::Dependency::Kind::kAfterOk, jobs::Dependency::Kind::kAfterAny,
                      jobs::Dependency::Kind::kAfterNotOk}) {
      Job j = MakeJob(0);
      j.dependencies = {{arr.id, kind}};
      after.push_back(c_->Submit(j, alice_).value());
    }
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    const Job e1 = Get(ids[1]);
    ASSERT_EQ(e1.state, JobState::kAssigned);
    ASSERT_TRUE(Apply({Ev(e1, protocol::EventKind::kStarted)}).ok());
    ASSERT_TRUE(Apply({Ev(e1, protocol::EventKind::kExited, 3)}).ok());
    if (restart) Restart();
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    const Job ended = Get(after[0].id);
    EXPECT_EQ(ended.state, JobState::kCancelled);
    const std::string a = std::to_string(arr.id);
    EXPECT_EQ(ended.reason, "dependency can never be met: job " + a +
                                "_1 ended FAILED, and --after-ok " + a +
                                " needs every element of array " + a + " to succeed");
    EXPECT_EQ(Get(after[1].id).state, JobState::kPending);
    EXPECT_EQ(Get(after[2].id).state, JobState::kPending);
    c_.reset();
    SetUp();  // a new pool for the next round
  }
}

TEST_F(ControllerTest, ArraySpecsOverTheLimitsOrMalformedAreRefused) {
  Register(2);
  for (const char* bad : {"0-1001", "5-1", "x", "0-9%0", "0-9%", "1,,2", "0-9:0", "-3", "0-2000000",
                          "0-9%1002", "0-600,0-600"}) {
    Job j = MakeJob(0);
    j.array = bad;
    Result<Job> r = c_->Submit(j, alice_);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("array '"), std::string::npos) << r.status().message();
  }
  EXPECT_TRUE(store_->ListJobs({})->empty());
  Job ok = MakeJob(0);
  ok.array = "0-1000";  // 1001 elements: the most an array may have (Slurm's default too)
  ASSERT_TRUE(c_->Submit(ok, alice_).ok());
  EXPECT_EQ(store_->ListJobs({})->size(), 1001u);
}

}  // namespace
}  // namespace gpupool::controller::controller_test
