// Conformance tests for Store implementations; each implementation is a test parameter
// (StoreTest, store_conformance_test.h). Here jobs: every field kept, compare-and-set
// updates, batches and arrays all or nothing, submit keys, listings and their filters.
#include "store/store_conformance_test.h"

namespace gpupool::store::conformance_test {
namespace {

// The store splits a job into its submission (stored once per content) and its state:
// every field comes back as it went in, through every read, also after updates that
// change either part.
TEST_P(StoreTest, EveryFieldOfAJobComesBack) {
  Job j = FullJob();
  j.id = store_->InsertJob(j).value();
  j.version = 1;
  EXPECT_EQ(store_->GetJob(j.id).value(), j);
  Job plain = MakeJob("bob");  // defaults everywhere
  plain.id = store_->InsertJob(plain).value();
  plain.version = 1;
  EXPECT_EQ(store_->GetJob(plain.id).value(), plain);
  JobFilter running;
  running.states = {JobState::kRunning};
  EXPECT_EQ(store_->ListJobs(running).value(), std::vector<Job>{j});

  Job next = j;
  next.state = JobState::kSucceeded;
  next.end_time_us = 9;
  next.exit_code = 0;
  next.priority = 5;  // part of the submission: stored as another one
  next.env["EXTRA"] = "1";
  ASSERT_TRUE(store_->UpdateJob(next, JobState::kRunning, 1).ok());
  next.version = 2;
  EXPECT_EQ(store_->GetJob(j.id).value(), next);
  EXPECT_EQ(store_->ListJobs({}).value(), (std::vector<Job>{next, plain}));
}

// Why each task was killed (jobs::TaskStatus::kill_cause, kill_detail) is kept with the
// task's status, through the insert and a compare-and-set update, on every backend.
TEST_P(StoreTest, ATasksKillCauseComesBack) {
  Job j = FullJob();
  j.tasks[0].ended = true;
  j.tasks[0].signal = 9;
  j.tasks[0].kill_cause = "oom_kernel";
  j.tasks[0].kill_detail =
      "killed by the kernel's OOM killer: the memory limit of 1 bytes was reached";
  j.id = store_->InsertJob(j).value();
  j.version = 1;
  Job back = store_->GetJob(j.id).value();
  EXPECT_EQ(back.tasks[0].kill_cause, "oom_kernel");
  EXPECT_EQ(back.tasks[0].kill_detail, j.tasks[0].kill_detail);
  EXPECT_EQ(back.tasks[1].kill_cause, "");  // not ended: no cause
  EXPECT_EQ(back, j);

  Job next = j;
  next.state = JobState::kFailed;
  next.tasks[1].ended = true;
  next.tasks[1].signal = 9;
  next.tasks[1].kill_cause = "gpu_mem_watch";
  next.tasks[1].kill_detail = "its processes used 9728 MiB of GPU 0's memory";
  ASSERT_TRUE(store_->UpdateJob(next, JobState::kRunning, 1).ok());
  next.version = 2;
  back = store_->GetJob(j.id).value();
  EXPECT_EQ(back.tasks[1].kill_cause, "gpu_mem_watch");
  EXPECT_EQ(back.tasks[1].kill_detail, "its processes used 9728 MiB of GPU 0's memory");
  EXPECT_EQ(back, next);
}

// Issue 25 item 7: each array element stored its whole submission (about 4 KB with a
// 40-variable environment, 8 KB in the red team's flood). Elements share one copy now,
// and a job's own row holds its state only.
TEST_P(StoreTest, ArrayElementsShareOneStoredSubmission) {
  Job e = MakeJob("alice");
  e.command = {"python3", "sweep.py", "--config", "configs/sweep.yaml"};
  for (int i = 0; i < 40; ++i) {
    e.env["VARIABLE_" + std::to_string(i)] =
        "/home/alice/miniconda3/envs/train/lib/" + std::to_string(i);
  }
  e.array = "0-99";
  e.array_id = 1;
  e.submit_time_us = int64_t{1700} * 1'000'000'000'000;
  std::vector<Job> made;
  for (int i = 0; i < 100; ++i) {
    e.array_index = i;
    e.id = store_->InsertJob(e).value();
    e.version = 1;
    made.push_back(e);
  }
  const std::vector<Job> listed = store_->ListJobs({}).value();
  EXPECT_EQ(listed, made);
  EXPECT_EQ(store_->GetJob(made[42].id).value(), made[42]);
  // And one copy in memory of what is read (a restarted controller loads its queue so):
  // 100 elements of a 0.9 MB environment held 90 MB of it when each had its own.
  ASSERT_EQ(listed.size(), 100u);
  EXPECT_TRUE(listed[99].env.SharesWith(listed[0].env));
  EXPECT_TRUE(listed[99].command.SharesWith(listed[0].command));
  const std::optional<std::string> specs = Raw("SELECT COUNT(*) FROM job_specs");
  if (!specs) return;  // an in-memory store: the round trip above is what can be checked
  EXPECT_EQ(*specs, "1");
  // What each element's row holds: its index, the array's id and its submit time.
  const std::string body_bytes = Raw("SELECT MAX(LENGTH(body)) FROM jobs").value();
  EXPECT_LE(std::stoi(body_bytes), 100) << Raw("SELECT body FROM jobs LIMIT 1").value();
}

TEST_P(StoreTest, InsertGetAndList) {
  auto a = store_->InsertJob(MakeJob("alice"));
  auto b = store_->InsertJob(MakeJob("bob"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LT(*a, *b);
  auto got = store_->GetJob(*a);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->id, *a);
  EXPECT_EQ(got->user, "alice");
  EXPECT_EQ(store_->GetJob(999).status().code(), StatusCode::kNotFound);

  JobFilter only_bob;
  only_bob.user = "bob";
  auto bobs = store_->ListJobs(only_bob);
  ASSERT_TRUE(bobs.ok());
  ASSERT_EQ(bobs->size(), 1u);
  EXPECT_EQ((*bobs)[0].user, "bob");

  JobFilter limited;
  limited.limit = 1;
  auto newest = store_->ListJobs(limited);
  ASSERT_TRUE(newest.ok());
  ASSERT_EQ(newest->size(), 1u);
  EXPECT_EQ((*newest)[0].id, *b);
}

// A sorted listing (JobFilter::sort) comes in the order JobSortLess gives in memory, for
// every field both ways, with fields left at their defaults (not stored) among them, and
// `limit` takes the first of that order.
TEST_P(StoreTest, SortedListingsFollowTheInMemoryOrder) {
  const int64_t now = int64_t{5000} * 1'000'000;
  struct Spec {
    const char* user;
    const char* name;
    const char* project;
    int priority, gpus, tasks;
    int64_t submit, start, end, limit_s;
    JobState state;
    const char* node;
  };
  const Spec specs[] = {
      {"bob", "train", "", 5, 2, 1, 100, 0, 0, 600, JobState::kPending, ""},
      {"alice", "", "vision", 0, 1, 4, 300, 900, 0, 0, JobState::kRunning, "n2"},
      {"carol", "eval", "nlp", 9, 0, 1, 200, 250, 700, 60, JobState::kSucceeded, "n1"},
      {"alice", "train", "", -3, 1, 1, 50, 0, 80, 0, JobState::kCancelled, ""},
      {"bob", "zeta", "vision", 5, 8, 2, 400, int64_t{4000} * 1'000'000, 0, 3600,
       JobState::kRunning, "n1"},
  };
  for (const Spec& sp : specs) {
    Job j = MakeJob(sp.user);
    j.name = sp.name;
    j.project = sp.project;
    j.priority = sp.priority;
    j.request.gpus = sp.gpus;
    j.request.tasks = sp.tasks;
    j.submit_time_us = sp.submit;
    j.start_time_us = sp.start;
    j.end_time_us = sp.end;
    j.time_limit_s = sp.limit_s;
    j.state = sp.state;
    if (*sp.node != 0) {
      for (int t = 0; t < sp.tasks; ++t) j.placement.push_back({sp.node, {0}, {"GPU-1"}, 1000});
    }
    ASSERT_TRUE(store_->InsertJob(j).ok());
  }
  std::vector<Job> all = store_->ListJobs({}).value();
  ASSERT_EQ(all.size(), std::size(specs));
  for (const std::string& field : Split(jobs::JobSortFieldList(), ',')) {
    for (const char* sign : {"", "-"}) {
      const std::string text = std::string(sign) + std::string(Trim(field));
      JobFilter f;
      f.sort = jobs::ParseJobSort(text, false, "sort").value();
      f.now_us = now;
      std::vector<Job> want = all;
      std::stable_sort(want.begin(), want.end(), [&](const Job& a, const Job& b) {
        return jobs::JobSortLess(a, b, f.sort, now);
      });
      auto ids = [](const std::vector<Job>& js) {
        std::vector<int64_t> out;
        for (const Job& j : js) out.push_back(j.id);
        return out;
      };
      Result<std::vector<Job>> got = store_->ListJobs(f);
      ASSERT_TRUE(got.ok()) << text << ": " << got.status().ToString();
      EXPECT_EQ(ids(*got), ids(want)) << "sort=" << text;
      f.limit = 2;
      got = store_->ListJobs(f);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      want.resize(2);
      EXPECT_EQ(ids(*got), ids(want)) << "sort=" << text << " limit=2";
    }
  }
  // Two keys, and a filter with them.
  JobFilter f;
  f.sort = jobs::ParseJobSort("user,-priority", false, "sort").value();
  f.states = {JobState::kPending, JobState::kRunning};
  const std::vector<Job> listed = store_->ListJobs(f).value();
  std::vector<int64_t> got;
  for (const Job& j : listed) got.push_back(j.priority);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 5, 5}));
}

TEST_P(StoreTest, UpdateIsCompareAndSet) {
  Job j = MakeJob("alice");
  j.id = store_->InsertJob(j).value();
  EXPECT_EQ(store_->GetJob(j.id)->version, 1);
  j.state = JobState::kAssigned;
  j.placement = {{"n1", {0}, {"GPU-1"}, 1000}};
  ASSERT_TRUE(store_->UpdateJob(j, JobState::kPending, 1).ok());
  EXPECT_EQ(store_->GetJob(j.id)->version, 2);
  // A second writer that still believes the job is pending loses.
  Job stale = j;
  stale.state = JobState::kCancelled;
  Status s = store_->UpdateJob(stale, JobState::kPending, 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(IsConflict(s));
  EXPECT_EQ(s.message(), "job " + std::to_string(j.id) +
                             " changed since it was read: it is ASSIGNED at version 2, not "
                             "PENDING at version 1");
  EXPECT_EQ(store_->GetJob(j.id)->state, JobState::kAssigned);
  EXPECT_EQ(store_->GetJob(j.id)->version, 2);

  JobFilter on_n1;
  on_n1.node = "n1";
  EXPECT_EQ(store_->ListJobs(on_n1)->size(), 1u);
  JobFilter active;
  active.active_only = true;
  EXPECT_EQ(store_->ListJobs(active)->size(), 1u);
  EXPECT_EQ(store_->ListJobs(active)->at(0).version, 2);

  Job ghost = MakeJob("x");
  ghost.id = 4242;
  Status missing = store_->UpdateJob(ghost, JobState::kPending, 1);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_FALSE(IsConflict(missing));
}

// The version decides, not only the state: a writer that read the job before another
// writer changed it and left it in the same state (a hold, a cancel request) loses.
TEST_P(StoreTest, AStaleVersionIsRefusedEvenWhenTheStateMatches) {
  Job j = MakeJob("alice");
  j.id = store_->InsertJob(j).value();
  Job held = j;
  held.held_by = "alice";
  ASSERT_TRUE(store_->UpdateJob(held, JobState::kPending, 1).ok());  // still PENDING
  Job assigned = j;  // read at version 1, before the hold
  assigned.state = JobState::kAssigned;
  assigned.placement = {{"n1", {0}, {"GPU-1"}, 1000}};
  std::vector<JobConflict> conflicts;
  Status s = store_->UpdateJobs({{assigned, JobState::kPending, 1}}, &conflicts);
  EXPECT_TRUE(IsConflict(s)) << s.ToString();
  EXPECT_EQ(s.message(), "job " + std::to_string(j.id) +
                             " changed since it was read: it is PENDING at version 2, not "
                             "PENDING at version 1");
  EXPECT_EQ(conflicts,
            (std::vector<JobConflict>{{j.id, JobState::kPending, 2, JobState::kPending, 1}}));
  const Job stored = store_->GetJob(j.id).value();
  EXPECT_EQ(stored.held_by, "alice");
  EXPECT_EQ(stored.state, JobState::kPending);
  JobFilter on_n1;
  on_n1.node = "n1";
  EXPECT_TRUE(store_->ListJobs(on_n1)->empty());  // nor its nodes
  // Read again, the write goes through.
  assigned.held_by = "alice";
  EXPECT_TRUE(store_->UpdateJob(assigned, JobState::kPending, stored.version).ok());
  EXPECT_EQ(store_->GetJob(j.id)->version, 3);
  // A version the store never reached is refused too.
  EXPECT_TRUE(IsConflict(store_->UpdateJob(assigned, JobState::kAssigned, 9)));
}

// Two writers that read one version: exactly one of them writes, whichever store
// connection each one gets.
TEST_P(StoreTest, TwoWritersFromOneVersionOneWins) {
  Job j = MakeJob("alice");
  j.id = store_->InsertJob(j).value();
  constexpr int kWriters = 8;
  std::atomic<int> won{0};
  std::atomic<int> lost{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      Job next = j;
      next.reason = "writer " + std::to_string(w);
      Status s = store_->UpdateJob(next, JobState::kPending, 1);
      if (s.ok()) {
        ++won;
      } else if (IsConflict(s)) {
        ++lost;
      } else {
        ++failed;
        ADD_FAILURE() << s.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(lost.load(), kWriters - 1);
  EXPECT_EQ(failed.load(), 0);
  const Job stored = store_->GetJob(j.id).value();
  EXPECT_EQ(stored.version, 2);
  EXPECT_EQ(stored.reason.rfind("writer ", 0), 0u) << stored.reason;
}

TEST_P(StoreTest, BatchUpdateIsAllOrNothing) {
  Job a = MakeJob("a");
  a.id = store_->InsertJob(a).value();
  Job b = MakeJob("b");
  b.id = store_->InsertJob(b).value();
  Job c = MakeJob("c");
  c.id = store_->InsertJob(c).value();
  a.state = JobState::kAssigned;
  b.state = JobState::kAssigned;
  c.state = JobState::kAssigned;
  c.placement = {{"n1", {0}, {"GPU-1"}, 1000}};
  // b's expected state is wrong and c's version is, so a's update must not be applied
  // either; the answer names b, and lists b and c.
  std::vector<JobConflict> conflicts;
  Status s = store_->UpdateJobs(
      {{c, JobState::kPending, 1}, {b, JobState::kRunning, 1}, {a, JobState::kPending, 1}},
      &conflicts);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(IsConflict(s));
  EXPECT_EQ(s.message(), "job " + std::to_string(b.id) +
                             " changed since it was read: it is PENDING at version 1, not "
                             "RUNNING at version 1");
  EXPECT_EQ(conflicts,
            (std::vector<JobConflict>{{b.id, JobState::kPending, 1, JobState::kRunning, 1}}));
  s = store_->UpdateJobs(
      {{a, JobState::kPending, 1}, {b, JobState::kRunning, 1}, {c, JobState::kPending, 4}},
      &conflicts);
  EXPECT_TRUE(IsConflict(s));
  EXPECT_NE(s.message().find("job " + std::to_string(b.id) + " changed"), std::string::npos);
  EXPECT_NE(s.message().find("(and 1 more job of this write changed too)"), std::string::npos)
      << s.message();
  EXPECT_EQ(conflicts,
            (std::vector<JobConflict>{{b.id, JobState::kPending, 1, JobState::kRunning, 1},
                                      {c.id, JobState::kPending, 1, JobState::kPending, 4}}));
  for (const Job& j : {a, b, c}) {
    const Job stored = store_->GetJob(j.id).value();
    EXPECT_EQ(stored.state, JobState::kPending) << j.id;
    EXPECT_EQ(stored.version, 1) << j.id;
  }
  JobFilter on_n1;
  on_n1.node = "n1";
  EXPECT_TRUE(store_->ListJobs(on_n1)->empty());
  // A missing job is NotFound, not a conflict.
  Job ghost = MakeJob("x");
  ghost.id = 4242;
  s = store_->UpdateJobs({{a, JobState::kPending, 1}, {ghost, JobState::kPending, 1}}, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_FALSE(IsConflict(s));
  // The others retried alone go through; one job twice in a batch expects its own write.
  EXPECT_TRUE(
      store_->UpdateJobs({{a, JobState::kPending, 1}, {c, JobState::kPending, 1}}, &conflicts)
          .ok());
  EXPECT_TRUE(conflicts.empty());
  Job b_done = b;
  b_done.state = JobState::kCancelled;
  EXPECT_TRUE(
      store_->UpdateJobs({{b, JobState::kPending, 1}, {b_done, JobState::kAssigned, 2}}, nullptr)
          .ok());
  EXPECT_EQ(store_->GetJob(a.id)->version, 2);
  EXPECT_EQ(store_->GetJob(b.id)->version, 3);
  EXPECT_EQ(store_->GetJob(b.id)->state, JobState::kCancelled);
  EXPECT_EQ(store_->GetJob(c.id)->placement.size(), 1u);
}

// A preemption's hold is stored with its victim's update, in its transaction (a lost
// compare-and-set stores none), one row per victim; listed by preemptor, then victim, and
// deleted by preemptor.
TEST_P(StoreTest, PreemptHoldsAreStoredWithTheirPreemption) {
  std::vector<Job> v;
  for (int i = 0; i < 3; ++i) {
    Job j = MakeJob("victim");
    j.state = JobState::kRunning;
    j.placement = {{"n1", {i}, {"GPU-" + std::to_string(i)}, 1000}};
    j.id = store_->InsertJob(j).value();
    j.preempted_by = 900;
    v.push_back(j);
  }
  const std::vector<jobs::TaskPlacement> planned = {{"n1", {0, 1}, {"GPU-0", "GPU-1"}, 1000},
                                                    {"n2", {}, {}, 0}};
  const PreemptHoldRecord h0{v[0].id, 900, planned, 5'000'000};
  const PreemptHoldRecord h1{v[1].id, 900, planned, 7'000'000};
  const PreemptHoldRecord h2{v[2].id, 800, {{"n1", {2}, {"GPU-2"}, 500}}, 6'000'000};
  EXPECT_TRUE(store_->ListPreemptHolds()->empty());
  // v[1]'s compare-and-set loses: neither preemption nor its hold is stored.
  Status s = store_->UpdateJobs(
      {{v[0], JobState::kRunning, 1, h0}, {v[1], JobState::kRunning, 2, h1}}, nullptr);
  EXPECT_TRUE(IsConflict(s)) << s.ToString();
  EXPECT_TRUE(store_->ListPreemptHolds()->empty());
  ASSERT_TRUE(store_
                  ->UpdateJobs({{v[2], JobState::kRunning, 1, h2},
                                {v[1], JobState::kRunning, 1, h1},
                                {v[0], JobState::kRunning, 1, h0}},
                               nullptr)
                  .ok());
  EXPECT_EQ(store_->ListPreemptHolds().value(), (std::vector<PreemptHoldRecord>{h2, h0, h1}));
  // A victim's row is replaced by its next one; an update without a hold leaves it.
  PreemptHoldRecord later = h0;
  later.grace_end_us = 9'000'000;
  ASSERT_TRUE(store_->UpdateJobs({{v[0], JobState::kRunning, 2, later}}, nullptr).ok());
  ASSERT_TRUE(store_->UpdateJob(v[0], JobState::kRunning, 3).ok());
  EXPECT_EQ(store_->ListPreemptHolds().value(), (std::vector<PreemptHoldRecord>{h2, later, h1}));
  ASSERT_TRUE(store_->DeletePreemptHold(900).ok());
  EXPECT_EQ(store_->ListPreemptHolds().value(), (std::vector<PreemptHoldRecord>{h2}));
  EXPECT_TRUE(store_->DeletePreemptHold(900).ok());  // none left: nothing to do
  ASSERT_TRUE(store_->DeletePreemptHold(800).ok());
  EXPECT_TRUE(store_->ListPreemptHolds()->empty());
}

// The elements of an array are stored in one transaction: every element carries the
// first one's id as the array's, the first alone holds the array's submit_key, and
// each comes back as stored.
TEST_P(StoreTest, InsertJobsStoresAnArrayWithItsId) {
  const int64_t before = store_->InsertJob(MakeJob("bob")).value();
  Job e = MakeJob("alice");
  e.uid = 1000;
  e.array = "0-4%2";
  e.array_max_running = 2;
  e.submit_key = "array-key";
  e.array_id = 999;  // not read
  std::vector<Job> elements;
  for (int i = 0; i < 5; ++i) {
    e.array_index = i * 2;
    elements.push_back(e);
  }
  auto stored = store_->InsertJobs(elements, InsertAs::kArray);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_EQ(stored->size(), 5u);
  const int64_t array_id = (*stored)[0].id;
  EXPECT_GT(array_id, before);
  for (size_t k = 0; k < stored->size(); ++k) {
    const Job& got = (*stored)[k];
    EXPECT_EQ(got.array_id, array_id) << k;
    EXPECT_EQ(got.array_index, static_cast<int>(k) * 2);
    EXPECT_EQ(got.version, 1);
    EXPECT_EQ(got.submit_key, k == 0 ? "array-key" : "");
    if (k > 0) {
      EXPECT_GT(got.id, (*stored)[k - 1].id);
    }
    EXPECT_EQ(store_->GetJob(got.id).value(), got);
  }
  EXPECT_EQ(store_->FindSubmitKey(1000, "array-key").value(), std::optional<int64_t>(array_id));
  JobFilter f;
  f.array_id = array_id;
  EXPECT_EQ(store_->ListJobs(f).value(), *stored);
  // Separate jobs keep their own array ids and keys; none at all is no write.
  Job x = MakeJob("carol");
  x.submit_key = "x";
  Job y = MakeJob("carol");
  y.array_id = 5;
  y.array_index = 1;
  auto two = store_->InsertJobs({x, y}, InsertAs::kJobs);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ((*two)[0].submit_key, "x");
  EXPECT_EQ((*two)[1].array_id, 5);
  EXPECT_EQ(store_->GetJob((*two)[1].id).value(), (*two)[1]);
  EXPECT_TRUE(store_->InsertJobs({}, InsertAs::kArray).value().empty());
  EXPECT_EQ(store_->ListJobs({})->size(), 8u);
}

// A failure part-way through InsertJobs (here a submit_key used twice, by the third job)
// leaves nothing stored: no job, no key, no node, no id reused later.
TEST_P(StoreTest, InsertJobsIsAllOrNothing) {
  Job a = MakeJob("alice");
  a.uid = 1000;
  a.submit_key = "k1";
  Job placed = MakeJob("alice");
  placed.state = JobState::kAssigned;
  placed.placement = {{"n1", {0}, {"GPU-1"}, 1000}};
  Job again = a;  // the same key again
  auto failed = store_->InsertJobs({a, placed, again}, InsertAs::kJobs);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(failed.status().message().find("submit_key 'k1'"), std::string::npos)
      << failed.status().message();
  EXPECT_TRUE(store_->ListJobs({})->empty());
  EXPECT_FALSE(store_->FindSubmitKey(1000, "k1")->has_value());
  JobFilter on_n1;
  on_n1.node = "n1";
  EXPECT_TRUE(store_->ListJobs(on_n1)->empty());
  // A key used before: an array that reuses it stores nothing either.
  const int64_t first = store_->InsertJob(a).value();
  Job e = MakeJob("alice");
  e.uid = 1000;
  e.array = "0-2";
  e.submit_key = "k1";
  auto array = store_->InsertJobs({e, e, e}, InsertAs::kArray);
  EXPECT_EQ(array.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->ListJobs({})->size(), 1u);
  // The database failing part-way (a trigger refusing the third job, as a full disk
  // would): nothing stored either.
  if (!ExecRaw(GetParam() == "postgresql"
                   ? "CREATE FUNCTION refuse_third() RETURNS trigger AS $$ BEGIN IF (SELECT "
                     "COUNT(*) FROM jobs) >= 3 THEN RAISE EXCEPTION 'injected failure'; END IF; "
                     "RETURN NEW; END $$ LANGUAGE plpgsql; CREATE TRIGGER refuse_third BEFORE "
                     "INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION refuse_third()"
                   : "CREATE TRIGGER refuse_third BEFORE INSERT ON jobs WHEN (SELECT COUNT(*) "
                     "FROM jobs) >= 3 BEGIN SELECT RAISE(ABORT, 'injected failure'); END")) {
    return;  // an in-memory store: nothing else can reach it
  }
  e.submit_key = "k2";
  array = store_->InsertJobs({e, e, e, e}, InsertAs::kArray);
  ASSERT_FALSE(array.ok());
  EXPECT_NE(array.status().message().find("injected failure"), std::string::npos)
      << array.status().ToString();
  EXPECT_EQ(store_->ListJobs({})->size(), 1u);
  EXPECT_FALSE(store_->FindSubmitKey(1000, "k2")->has_value());
  EXPECT_EQ(Raw("SELECT COUNT(*) FROM job_nodes").value(), "0");
  const int64_t next = store_->InsertJob(MakeJob("bob")).value();
  EXPECT_GT(next, first);
  EXPECT_EQ(store_->GetJob(first)->submit_key, "k1");
}

TEST_P(StoreTest, ASubmitKeyMakesOneJobPerUser) {
  Job j = MakeJob("alice");
  j.uid = 1000;
  j.submit_key = "7f3c2a9e-retry";
  Result<int64_t> first = store_->InsertJob(j);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(store_->GetJob(*first)->submit_key, "7f3c2a9e-retry");
  EXPECT_EQ(*store_->FindSubmitKey(1000, "7f3c2a9e-retry"), std::optional<int64_t>(*first));
  EXPECT_FALSE(store_->FindSubmitKey(1001, "7f3c2a9e-retry")->has_value());
  EXPECT_FALSE(store_->FindSubmitKey(1000, "other")->has_value());
  // The same user and key again: refused, and nothing of it stored.
  const size_t before = store_->ListJobs({})->size();
  Result<int64_t> again = store_->InsertJob(j);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("submit_key"), std::string::npos);
  EXPECT_EQ(store_->ListJobs({})->size(), before);
  // Another user may use the same key; jobs without a key are not affected.
  Job bob = j;
  bob.uid = 1001;
  EXPECT_TRUE(store_->InsertJob(bob).ok());
  Job plain = MakeJob("alice");
  EXPECT_TRUE(store_->InsertJob(plain).ok());
  EXPECT_TRUE(store_->InsertJob(plain).ok());
}

TEST_P(StoreTest, ConcurrentWritersNeverLoseJobs) {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        if (!store_->InsertJob(MakeJob("u" + std::to_string(t))).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->ListJobs({})->size(), size_t{kThreads * kPerThread});
}

// Every filter at once, so each backend binds each value to the right placeholder.
TEST_P(StoreTest, ListFiltersCombine) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) {
    Job j = MakeJob(i % 2 == 0 ? "alice" : "bob");
    j.id = store_->InsertJob(j).value();
    j.state = JobState::kAssigned;
    j.placement = {{i < 3 ? "n1" : "n2", {0}, {"GPU-1"}, 1000}};
    ASSERT_TRUE(store_->UpdateJob(j, JobState::kPending, 1).ok());
    if (i >= 4) {  // two ended jobs: one long ago, one recently
      Job done = j;
      done.state = JobState::kSucceeded;
      done.end_time_us = i == 4 ? 100 : 5000;
      ASSERT_TRUE(store_->UpdateJob(done, JobState::kAssigned, 2).ok());
    }
    ids.push_back(j.id);
  }
  JobFilter f;
  f.user = "alice";  // jobs 0, 2, 4
  f.node = "n2";     // jobs 3, 4, 5
  f.states = {JobState::kSucceeded, JobState::kRunning};
  f.ended_after_us = 1000;  // job 4 ended at 100
  EXPECT_TRUE(store_->ListJobs(f)->empty());
  f.ended_after_us = 50;
  auto got = store_->ListJobs(f);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].id, ids[4]);

  JobFilter recent;
  recent.ended_after_us = 1000;  // unended jobs stay, job 4 goes
  recent.limit = 3;              // newest first
  auto newest = store_->ListJobs(recent);
  ASSERT_TRUE(newest.ok()) << newest.status().ToString();
  ASSERT_EQ(newest->size(), 3u);
  EXPECT_EQ((*newest)[0].id, ids[5]);
  EXPECT_EQ((*newest)[1].id, ids[3]);
  EXPECT_EQ((*newest)[2].id, ids[2]);
  JobFilter states;
  states.states = {JobState::kAssigned};
  states.user = "bob";  // jobs 1, 3
  EXPECT_EQ(store_->ListJobs(states)->size(), 2u);
}

// JobFilter::held_after_us (a usage window's jobs: GET /v1/usage): a job declared lost
// before it whose node reported its real end after it held its GPUs in the window
// (docs/health.md, "An end reported late"), and so did a job cancelled while it waited
// whose lost attempt's reported end came after; ended_after_us goes by the job's end
// alone. Written by an update and by an insert; a database of the schema before the
// column is filled from the job bodies when opened.
TEST_P(StoreTest, HeldAfterCountsTheEndsReportedLate) {
  auto ids = [&](const JobFilter& f) {
    const std::vector<Job> listed = store_->ListJobs(f).value();
    std::vector<int64_t> out;
    for (const Job& j : listed) out.push_back(j.id);
    return out;
  };
  Job late = MakeJob("alice");  // lost at 1000; its real end, 5000, reported after
  late.id = store_->InsertJob(late).value();
  late.state = JobState::kLost;
  late.start_time_us = 500;
  late.end_time_us = 1000;
  ASSERT_TRUE(store_->UpdateJob(late, JobState::kPending, 1).ok());
  late.late_end_time_us = 5000;
  late.late_reason = "exited with code 0, reported after the loss (the job stays LOST)";
  ASSERT_TRUE(store_->UpdateJob(late, JobState::kLost, 2).ok());
  Job plain = MakeJob("bob");  // lost at 1000, nothing reported
  plain.state = JobState::kLost;
  plain.start_time_us = 500;
  plain.end_time_us = 1000;
  plain.id = store_->InsertJob(plain).value();
  Job cancelled = MakeJob("carol");  // cancelled at 1000; attempt 1's end, 6000, came after
  cancelled.state = JobState::kCancelled;
  cancelled.end_time_us = 1000;
  cancelled.earlier_attempts = {{.attempt = 1,
                                 .ended_by = jobs::AttemptEnd::kLost,
                                 .start_time_us = 100,
                                 .end_time_us = 6000,
                                 .gpu_hours = 1,
                                 .lost_time_us = 900,
                                 .late_reason = "exited with code 1, reported after its node "
                                                "was lost"}};
  cancelled.id = store_->InsertJob(cancelled).value();
  Job ended = MakeJob("dave");
  ended.state = JobState::kSucceeded;
  ended.end_time_us = 4000;
  ended.id = store_->InsertJob(ended).value();
  const int64_t pending = store_->InsertJob(MakeJob("erin")).value();
  auto check = [&] {
    JobFilter held;
    held.held_after_us = 3000;
    EXPECT_EQ(ids(held), (std::vector<int64_t>{late.id, cancelled.id, ended.id, pending}));
    held.held_after_us = 5000;
    EXPECT_EQ(ids(held), (std::vector<int64_t>{late.id, cancelled.id, pending}));
    held.held_after_us = 6001;
    EXPECT_EQ(ids(held), (std::vector<int64_t>{pending}));
    held.held_after_us = 3000;
    held.user = "alice";  // with the other filters, each value in its place
    held.states = {JobState::kLost};
    EXPECT_EQ(ids(held), (std::vector<int64_t>{late.id}));
    JobFilter by_end;
    by_end.ended_after_us = 3000;
    EXPECT_EQ(ids(by_end), (std::vector<int64_t>{ended.id, pending}));
  };
  check();
  // The schema before: no column; opened again, it is filled from the bodies.
  const bool pg = GetParam() == "postgresql";
  const std::optional<std::string> version =
      Raw(pg ? "SELECT version FROM schema_version" : "PRAGMA user_version");
  if (!version) return;  // in memory: nothing else opens it
  store_.reset();
  ASSERT_TRUE(ExecRaw("ALTER TABLE jobs DROP COLUMN late_end_us; " +
                      std::string(pg ? "UPDATE schema_version SET version="
                                     : "PRAGMA "
                                       "user_version=") +
                      std::to_string(std::stoi(*version) - 1)));
  auto reopened = OpenStore(path_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_ = std::move(reopened).value();
  EXPECT_EQ(Raw(pg ? "SELECT version FROM schema_version" : "PRAGMA user_version"), version);
  check();
}

// JobFilter::array_id lists one array's elements, whatever their state, also where other
// jobs were stored between them (`gpupool show 12_3` of an ended element).
TEST_P(StoreTest, AnArraysElementsAreListedByItsId) {
  auto element = [&](int64_t array_id, int index) {
    Job j = MakeJob("alice");
    j.array = "0-2";
    j.array_index = index;
    j.array_id = array_id;
    j.id = store_->InsertJob(j).value();
    if (array_id == 0) {  // the first element: the array's id is its own
      j.array_id = j.id;
      EXPECT_TRUE(store_->UpdateJob(j, JobState::kPending, 1).ok());
      j.version = 2;
    } else {
      j.version = 1;
    }
    return j;
  };
  const Job head = element(0, 0);
  const int64_t other = store_->InsertJob(MakeJob("alice")).value();  // between elements
  const Job e1 = element(head.id, 1);
  const Job other_head = element(0, 0);  // another array
  Job e2 = element(head.id, 2);
  e2.state = JobState::kCancelled;
  e2.end_time_us = 100;
  ASSERT_TRUE(store_->UpdateJob(e2, JobState::kPending, e2.version).ok());

  JobFilter f;
  f.array_id = head.id;
  auto got = store_->ListJobs(f);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<std::pair<int64_t, int>> elements;
  for (const Job& j : *got) elements.emplace_back(j.id, j.array_index);
  EXPECT_EQ(elements, (std::vector<std::pair<int64_t, int>>{{head.id, 0}, {e1.id, 1}, {e2.id, 2}}));
  f.states = {JobState::kCancelled};
  ASSERT_EQ(store_->ListJobs(f)->size(), 1u);
  f = {};
  f.array_id = other_head.id;
  EXPECT_EQ(store_->ListJobs(f)->size(), 1u);
  f.array_id = other;  // not an array
  EXPECT_TRUE(store_->ListJobs(f)->empty());
}

// A gang's tasks run on several nodes: the job is listed under each of them, once.
TEST_P(StoreTest, GangJobsAreListedUnderEveryNode) {
  auto on = [&](const std::string& node) {
    JobFilter f;
    f.node = node;
    std::vector<int64_t> ids;
    auto listed = store_->ListJobs(f);
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    if (!listed.ok()) return ids;
    const std::vector<Job>& jobs = *listed;
    for (const Job& j : jobs) ids.push_back(j.id);
    return ids;
  };
  Job gang = MakeJob("alice");
  gang.request.tasks = 4;
  gang.id = store_->InsertJob(gang).value();
  EXPECT_TRUE(on("n1").empty());  // pending: on no node yet
  gang.state = JobState::kAssigned;
  gang.placement = {{"n1", {0}, {"GPU-a"}, 1000},
                    {"n2", {0}, {"GPU-b"}, 1000},
                    {"n2", {1}, {"GPU-c"}, 1000},
                    {"n3", {0}, {"GPU-d"}, 1000}};
  ASSERT_TRUE(store_->UpdateJob(gang, JobState::kPending, 1).ok());
  EXPECT_EQ(on("n1"), std::vector<int64_t>{gang.id});
  EXPECT_EQ(on("n2"), std::vector<int64_t>{gang.id});  // two tasks there, listed once
  EXPECT_EQ(on("n3"), std::vector<int64_t>{gang.id});
  EXPECT_TRUE(on("n9").empty());
  JobFilter active_on_n3;
  active_on_n3.node = "n3";
  active_on_n3.active_only = true;
  active_on_n3.user = "alice";
  EXPECT_EQ(store_->ListJobs(active_on_n3)->size(), 1u);

  // A lost compare-and-set changes no node either.
  Job stale = gang;
  stale.placement = {{"n7", {0}, {"GPU-x"}, 1000}};
  EXPECT_FALSE(store_->UpdateJob(stale, JobState::kPending, 1).ok());
  EXPECT_TRUE(on("n7").empty());

  // Placed again elsewhere: only the new nodes list it.
  gang.state = JobState::kRunning;
  gang.placement = {{"n4", {0}, {"GPU-e"}, 1000}, {"n5", {0}, {"GPU-f"}, 1000}};
  ASSERT_TRUE(store_->UpdateJob(gang, JobState::kAssigned, 2).ok());
  EXPECT_TRUE(on("n2").empty());
  EXPECT_EQ(on("n5"), std::vector<int64_t>{gang.id});

  // A job inserted already placed is listed under its nodes too.
  Job placed = MakeJob("bob");
  placed.state = JobState::kAssigned;
  placed.placement = {{"n5", {1}, {"GPU-g"}, 1000}, {"n6", {0}, {"GPU-h"}, 1000}};
  placed.id = store_->InsertJob(placed).value();
  EXPECT_EQ(on("n6"), std::vector<int64_t>{placed.id});
  EXPECT_EQ(on("n5"), (std::vector<int64_t>{gang.id, placed.id}));
}

INSTANTIATE_TEST_SUITE_P(Sqlite, StoreTest, ::testing::Values("sqlite-memory", "sqlite-file"),
                         [](const auto& param_info) {
                           return param_info.param == "sqlite-file" ? "File" : "Memory";
                         });

INSTANTIATE_TEST_SUITE_P(Postgresql, StoreTest, ::testing::Values("postgresql"),
                         [](const auto&) { return "Server"; });

}  // namespace
}  // namespace gpupool::store::conformance_test
