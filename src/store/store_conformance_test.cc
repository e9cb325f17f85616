// Conformance tests for Store implementations; each implementation is a test parameter.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>

#include "common/strings.h"
#include "jobs/job_sort.h"
#include "sched/admission/limits.h"
#include "store/lease.h"
#include "store/open_store.h"
#include "store/postgres_store.h"
#include "store/postgres_test_server.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::store {
namespace {

using jobs::Job;
using jobs::JobState;

Job MakeJob(const std::string& user) {
  Job j;
  j.user = user;
  j.command = {"true"};
  j.request.gpus = 1;
  return j;
}

// A fresh database on the test binary's PostgreSQL server; skips the test when
// postgresql-15 is not installed, fails it when the server is there but does not start.
#define GP_FRESH_POSTGRES_DATABASE(spec)                                    \
  do {                                                                      \
    auto server = SharedPostgresTestServer();                               \
    if (!server.ok() && server.status().code() == StatusCode::kUnavailable) \
      GTEST_SKIP() << server.status().message();                            \
    ASSERT_TRUE(server.ok()) << server.status().ToString();                 \
    auto db = (*server)->CreateDatabase();                                  \
    ASSERT_TRUE(db.ok()) << db.status().ToString();                         \
    (spec) = *db;                                                           \
  } while (0)

// The parameter names the backend; every test opens its store through the factory
// (OpenStore) with a spec for a new, empty store of that backend.
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite-file") {
      // "InsertGetAndList/File": one directory, not a directory in a directory.
      std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
      std::replace(name.begin(), name.end(), '/', '-');
      dir_ = std::filesystem::temp_directory_path() /
             ("gpupool-store-" + std::to_string(getpid()) + "-" + name);
      std::filesystem::remove_all(dir_);
      std::filesystem::create_directories(dir_);
      path_ = "sqlite:" + (dir_ / "state.db").string();
    } else if (GetParam() == "postgresql") {
      GP_FRESH_POSTGRES_DATABASE(path_);
    } else {
      path_ = "sqlite::memory:";
    }
    auto s = OpenStore(path_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  void TearDown() override {
    store_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // The first value `sql` selects, read from the database itself (not through the Store);
  // nullopt for an in-memory SQLite store, which nothing else can open.
  std::optional<std::string> Raw(const std::string& sql) {
    std::string out;
    if (GetParam() == "postgresql") {
      PGconn* conn = PQconnectdb(path_.c_str());
      PGresult* r = PQexec(conn, sql.c_str());
      EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(conn);
      if (PQntuples(r) > 0) out = PQgetvalue(r, 0, 0);
      PQclear(r);
      PQfinish(conn);
      return out;
    }
    if (GetParam() != "sqlite-file") return std::nullopt;
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open((dir_ / "state.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }

  // Runs `sql` (no values) on the database itself; false for an in-memory SQLite store.
  bool ExecRaw(const std::string& sql) {
    if (GetParam() == "postgresql") {
      PGconn* conn = PQconnectdb(path_.c_str());
      PGresult* r = PQexec(conn, sql.c_str());
      EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(conn);
      PQclear(r);
      PQfinish(conn);
      return true;
    }
    if (GetParam() != "sqlite-file") return false;
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open((dir_ / "state.db").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
    sqlite3_free(err);
    sqlite3_close(db);
    return true;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

// A job with every field away from its default, as a long-lived gang job gets them.
Job FullJob() {
  Job j;
  j.user = "alice";
  j.uid = 1000;
  j.gid = 1001;
  j.project = "vision";
  j.name = "train";
  j.command = {"python3", "train.py", "--lr", "0.1"};
  j.env = {{"HOME", "/home/alice"}, {"PATH", "/usr/bin:/bin"}, {"EMPTY", ""}};
  j.workdir = "/home/alice/run";
  j.image = "docker.io/library/python:3.12";
  j.mounts = {{"/data", "/data", true}, {"/scratch", "/scratch", false}};
  j.environment = "torch:2.4";
  j.env_dir = "/opt/envs/torch";
  j.needs = {"image x (sha256:1)", "12.4", "550.54", "525.60", {"sm_80"}, {"compute_90"}, {}};
  j.request = {2, 1000, 0, 4000, uint64_t{8} << 30, {"A100"}, "nvidia", "8.0", 2};
  j.priority = -7;
  j.time_limit_s = 3600;
  j.requeue = true;
  j.mpi = true;
  j.dependencies = {{3, jobs::Dependency::Kind::kAfterAny}};
  j.submit_key = "key-1";
  j.shm_bytes = 1 << 30;
  j.init = false;
  j.array = "0-9%2";
  j.array_id = 41;
  j.array_index = 7;
  j.array_max_running = 2;
  j.state = JobState::kRunning;
  j.submit_time_us = 1;
  j.start_time_us = 2;
  j.exit_code = 3;
  j.placement = {{"n1", {0, 1}, {"GPU-a", "GPU-b"}, 1000},
                 {"n2", {0, 1}, {"GPU-c", "GPU-d"}, 1000}};
  jobs::TaskStatus t;
  t.host = "10.0.0.1";
  t.start_time_us = 2;
  t.stdout_path = "/var/lib/gpupool/jobs/1/out";
  j.tasks = {t, t};
  j.master_port = 29500;
  j.reason = "why";
  j.attempt = 2;
  j.cancel_requested = true;
  j.held_by = "root";
  j.held_by_admin = true;
  j.stdout_path = "/o";
  j.stderr_path = "/e";
  return j;
}

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
  e.submit_time_us = 1'700'000'000'000'000;
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
  const int64_t now = 5'000'000'000;
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
      {"bob", "zeta", "vision", 5, 8, 2, 400, 4'000'000'000, 0, 3600, JobState::kRunning, "n1"},
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

TEST_P(StoreTest, SettingsAreReplacedWhole) {
  EXPECT_FALSE(store_->GetSetting("limits")->has_value());
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {}})").ok());
  ASSERT_TRUE(store_->PutSetting("limits", R"({"users": {"a": {}}})").ok());
  EXPECT_EQ(store_->GetSetting("limits")->value(), R"({"users": {"a": {}}})");
  EXPECT_FALSE(store_->GetSetting("other")->has_value());
}

// Associations (a project's members, a user's default project) are kept with the limits
// and come back whole after the store is opened again (a controller restart); each name
// of several bytes (UTF-8) too.
TEST_P(StoreTest, ProjectMembershipIsKeptWithTheLimitsAcrossAReopen) {
  sched::Limits limits;
  limits.projects["vision"].members = {"alice", "bob", "z\xc3\xa9lie"};
  limits.projects["vision"].max_gpus = 16;
  limits.users["alice"].default_project = "vision";
  ASSERT_TRUE(store_->PutSetting("limits", DumpJson(sched::LimitsToJson(limits))).ok());
  if (GetParam() != "sqlite-memory") {
    store_.reset();
    auto s = OpenStore(path_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }
  Result<std::optional<std::string>> stored = store_->GetSetting("limits");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  Result<sched::Limits> back = sched::LimitsFromJson(Json::parse(**stored));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, limits);
  EXPECT_EQ(back->ForProject("vision")->members.size(), 3u);
}

TEST_P(StoreTest, TelemetryPointsAreReplacedListedInOrderAndExpire) {
  const TelemetryRecord gpu_a{"gpu", "n1/0", 120'000, 150.5, 3, 90.25, 4096, 0, 1};
  const TelemetryRecord gpu_b{"gpu", "n1/0", 60'000, 10, 2, 6, 100, 0, 1};
  const TelemetryRecord job{"job", "42", 60'000, 80, 2, 50, 2048, 7.5, 2};
  ASSERT_TRUE(store_->PutTelemetry({gpu_a, gpu_b, job}).ok());
  Result<std::vector<TelemetryRecord>> all = store_->ListTelemetry({});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(*all, (std::vector<TelemetryRecord>{gpu_b, gpu_a, job}));  // scope, key, time

  // A point written again (a late sample) replaces the old one.
  TelemetryRecord later = gpu_b;
  later.util_sum = 20.125;
  later.samples = 3;
  ASSERT_TRUE(store_->PutTelemetry({later}).ok());
  all = store_->ListTelemetry({});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, (std::vector<TelemetryRecord>{later, gpu_a, job}));
  EXPECT_EQ(store_->ListTelemetry({.since_ms = 100'000})->size(), 1u);
  EXPECT_TRUE(store_->PutTelemetry({}).ok());

  // Retention: points before the bound go.
  Result<int64_t> deleted = store_->DeleteTelemetryBefore(120'000);
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(*deleted, 2);
  EXPECT_EQ(*store_->ListTelemetry({}), (std::vector<TelemetryRecord>{gpu_a}));
  EXPECT_EQ(*store_->DeleteTelemetryBefore(0), 0);
}

TEST_P(StoreTest, TelemetryQueriesPickKeysAndMergeSteps) {
  // Two GPUs of n1, one of n10 (a prefix of n1's "n1/" must not match it), one job.
  const std::vector<TelemetryRecord> points = {
      {"gpu", "n1/0", 60'000, 100, 2, 70, 1000, 0, 1},
      {"gpu", "n1/0", 120'000, 40, 2, 30, 3000, 0, 1},
      {"gpu", "n1/0", 360'000, 50, 1, 50, 500, 0, 1},
      {"gpu", "n1/1", 60'000, 10, 1, 10, 200, 0, 1},
      {"gpu", "n10/0", 60'000, 99, 1, 99, 9999, 0, 1},
      {"job", "42", 60'000, 80, 2, 50, 2048, 7.5, 2},
      {"job", "42", 240'000, 20, 1, 20, 1024, 2.5, 1},
      {"job", "7", 60'000, 5, 1, 5, 1, 0.5, 1},
  };
  ASSERT_TRUE(store_->PutTelemetry(points).ok());

  // One key, a time range.
  Result<std::vector<TelemetryRecord>> r = store_->ListTelemetry(
      {.since_ms = 60'000, .until_ms = 360'000, .scope = "gpu", .key = "n1/0"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{points[0], points[1]}));

  // A node's GPUs by prefix, merged per 5 minutes: sums, highest peak, memory and GPUs.
  r = store_->ListTelemetry({.scope = "gpu", .key_prefix = "n1/", .step_ms = 300'000});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{{"gpu", "n1/0", 0, 140, 4, 70, 3000, 0, 1},
                                              {"gpu", "n1/0", 300'000, 50, 1, 50, 500, 0, 1},
                                              {"gpu", "n1/1", 0, 10, 1, 10, 200, 0, 1}}));

  // The keys merged: memory and GPUs add up over keys.
  r = store_->ListTelemetry(
      {.scope = "gpu", .key_prefix = "n1/", .step_ms = 60'000, .merge_keys = true});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{{"gpu", "", 60'000, 110, 3, 70, 1200, 0, 2},
                                              {"gpu", "", 120'000, 40, 2, 30, 3000, 0, 1},
                                              {"gpu", "", 360'000, 50, 1, 50, 500, 0, 1}}));

  // Every job's whole range: one record per job.
  r = store_->ListTelemetry({.scope = "job", .step_ms = kTelemetryWholeRange});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (std::vector<TelemetryRecord>{{"job", "42", 0, 100, 3, 50, 2048, 10, 2},
                                              {"job", "7", 0, 5, 1, 5, 1, 0.5, 1}}));

  // A step that is not whole minutes, or merged keys without a step, is refused.
  EXPECT_EQ(store_->ListTelemetry({.step_ms = 90'000}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListTelemetry({.merge_keys = true}).status().code(),
            StatusCode::kInvalidArgument);
  // A key with SQL in it is a value, not SQL.
  r = store_->ListTelemetry({.key = "42' OR '1'='1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
}

TEST_P(StoreTest, NodesAndTokens) {
  NodeRecord n{"gpu01", "{}", "unix:/x", 8000, 65536, 1, 2, false, "10.0.0.7", "1.1"};
  ASSERT_TRUE(store_->PutNode(n).ok());
  n.last_heartbeat_us = 5;
  n.draining = true;  // `gpupool node drain`, with its reason
  n.drain_reason = "disk swap (root)";
  n.gpu_health_json = R"({"GPU-1": {"state": "cordoned"}})";  // docs/health.md
  ASSERT_TRUE(store_->PutNode(n).ok());
  auto nodes = store_->ListNodes();
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0], n);

  TokenRecord t{"abc123", "alice", "user", 7};
  ASSERT_TRUE(store_->PutToken(t).ok());
  EXPECT_FALSE(store_->PutToken(t).ok());  // duplicate hash
  EXPECT_EQ(store_->FindToken("abc123")->value(), t);
  EXPECT_FALSE(store_->FindToken("nope")->has_value());
  EXPECT_EQ(store_->ListTokens()->size(), 1u);
  EXPECT_TRUE(store_->DeleteToken("abc123").ok());
  EXPECT_EQ(store_->DeleteToken("abc123").code(), StatusCode::kNotFound);
}

TEST_P(StoreTest, TokensKeepTheirExpiryAndLastUse) {
  TokenRecord never{"h-never", "alice", "user", 10};
  TokenRecord expiring{"h-expiring", "gpu7", "node", 11, /*expires_us=*/5000};
  ASSERT_TRUE(store_->PutToken(never).ok());
  ASSERT_TRUE(store_->PutToken(expiring).ok());
  EXPECT_EQ(store_->FindToken("h-expiring")->value(), expiring);
  EXPECT_EQ(store_->FindToken("h-never")->value().expires_us, 0);
  EXPECT_EQ(store_->FindToken("h-never")->value().last_used_us, 0);

  ASSERT_TRUE(store_->TouchToken("h-never", 4242).ok());
  EXPECT_EQ(store_->FindToken("h-never")->value().last_used_us, 4242);
  EXPECT_EQ(store_->FindToken("h-expiring")->value(), expiring);  // only the one touched
  EXPECT_EQ(store_->TouchToken("h-gone", 1).code(), StatusCode::kNotFound);

  auto list = store_->ListTokens();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  never.last_used_us = 4242;
  EXPECT_EQ((*list)[0], never);  // oldest first
  EXPECT_EQ((*list)[1], expiring);
}

TEST_P(StoreTest, EnvironmentsAreImmutableAndListedInOrder) {
  EnvironmentRecord a{"torch", "2.4", "image", "localhost/torch:2.4", R"({"source":"x"})",
                      "alice", 10};
  EnvironmentRecord b{"torch", "1.13", "dir", "/opt/envs/torch-1.13", "{}", "bob", 11};
  EnvironmentRecord c{"jax", "0.4", "image", "localhost/jax:0.4", "{}", "alice", 12};
  a.image_id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";  // pinned
  b.dir_digest = "sha256:00ff";
  for (const auto* e : {&a, &b, &c}) ASSERT_TRUE(store_->PutEnvironment(*e).ok());
  EnvironmentRecord again = a;
  again.location = "localhost/other:1";
  Status dup = store_->PutEnvironment(again);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(dup.message().find("torch:2.4 already exists"), std::string::npos);
  auto found = store_->FindEnvironment("torch", "2.4");
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ(**found, a);  // the first registration stands
  EXPECT_FALSE(store_->FindEnvironment("torch", "9")->has_value());
  auto list = store_->ListEnvironments();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0], c);
  EXPECT_EQ((*list)[1], b);  // "1.13" < "2.4" as text
  EXPECT_EQ((*list)[2], a);
  EXPECT_TRUE(store_->DeleteEnvironment("torch", "1.13").ok());
  EXPECT_EQ(store_->DeleteEnvironment("torch", "1.13").code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->ListEnvironments()->size(), 2u);
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

// The leadership lease (lease.h) on a real PostgreSQL: one holder at a time, a takeover
// only after the lease ended, and a replaced leader's fenced store writes nothing.
TEST(PostgresLeaseTest, OneLeaderAndAReplacedLeaderWritesNothing) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  auto store_a = OpenStore(spec);
  auto store_b = OpenStore(spec);
  ASSERT_TRUE(store_a.ok() && store_b.ok()) << store_a.status().ToString();
  auto lease_a = OpenPostgresLeaseStore(spec);
  auto lease_b = OpenPostgresLeaseStore(spec);
  ASSERT_TRUE(lease_a.ok() && lease_b.ok()) << lease_a.status().ToString();
  LeaseStore& la = **lease_a;
  LeaseStore& lb = **lease_b;

  Result<Lease> never = la.Read();
  ASSERT_TRUE(never.ok()) << never.status().ToString();
  EXPECT_EQ(never->epoch, 0);
  EXPECT_FALSE(never->Live());

  Result<Lease> a = la.TryAcquire("a", "http://a:8421", 60'000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->holder, "a");
  EXPECT_EQ(a->epoch, 1);
  EXPECT_GT(a->expires_in_ms, 50'000);
  // Held: b sees a, and cannot renew what it does not hold.
  Result<Lease> b = lb.TryAcquire("b", "http://b:8421", 60'000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->holder, "a");
  EXPECT_EQ(b->address, "http://a:8421");
  EXPECT_EQ(b->epoch, 1);
  EXPECT_EQ(lb.Renew("b", 1, 60'000, 2000).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(la.Renew("a", 1, 60'000, 2000).ok());

  int fenced = 0;
  (*store_a)->SetFence(1, [&fenced](const Status&) { ++fenced; });
  Job kept = MakeJob("alice");
  kept.id = (*store_a)->InsertJob(kept).value();
  ASSERT_TRUE((*store_a)->PutSetting("limits", "{}").ok());

  // a gives the lease up (as a clean stop does); b takes it at the next epoch.
  ASSERT_TRUE(la.Release("a", 1).ok());
  b = lb.TryAcquire("b", "http://b:8421", 60'000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->holder, "b");
  EXPECT_EQ(b->epoch, 2);
  Result<Lease> lost = la.Renew("a", 1, 60'000, 2000);
  EXPECT_EQ(lost.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(lost.status().message().find("lost"), std::string::npos) << lost.status().message();

  // Every kind of write of the replaced leader fails and changes nothing.
  Status insert = (*store_a)->InsertJob(MakeJob("mallory")).status();
  EXPECT_EQ(insert.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(insert.message().find("another controller leads"), std::string::npos)
      << insert.message();
  Job moved = kept;
  moved.state = JobState::kCancelled;
  EXPECT_FALSE((*store_a)->UpdateJob(moved, JobState::kPending, 1).ok());
  EXPECT_FALSE((*store_a)->PutSetting("limits", "{\"x\": 1}").ok());
  EXPECT_FALSE((*store_a)->PutNode(NodeRecord{.name = "n1", .info_json = "{}"}).ok());
  EXPECT_FALSE((*store_a)->DeleteEnvironment("e", "1").ok());
  EXPECT_EQ(fenced, 5);
  // Reads still work, and show nothing of those writes.
  auto jobs = (*store_b)->ListJobs({});
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state, JobState::kPending);
  EXPECT_EQ((*store_b)->GetSetting("limits").value().value_or(""), "{}");
  EXPECT_TRUE((*store_b)->ListNodes().value().empty());

  // The new leader, fenced at its own epoch, writes.
  (*store_b)->SetFence(2, [](const Status&) { ADD_FAILURE() << "b was fenced"; });
  EXPECT_TRUE((*store_b)->UpdateJob(moved, JobState::kPending, 1).ok());

  // A lease that runs out without a release is taken too, and only then.
  ASSERT_TRUE(lb.Renew("b", 2, 300, 2000).ok());
  EXPECT_EQ(la.TryAcquire("a", "http://a:8421", 60'000)->holder, "b");
  Result<Lease> now = la.Read();
  while (now.ok() && now->Live()) now = la.Read();  // the database's clock decides
  a = la.TryAcquire("a", "http://a:8421", 60'000);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->holder, "a");
  EXPECT_EQ(a->epoch, 3);

  // Controllers that said they are alive are listed.
  ASSERT_TRUE(la.Heartbeat("a", "http://a:8421").ok());
  ASSERT_TRUE(lb.Heartbeat("b", "http://b:8421").ok());
  ASSERT_TRUE(lb.Heartbeat("b", "http://b2:8421").ok());
  auto alive = la.ListControllers(60'000);
  ASSERT_TRUE(alive.ok()) << alive.status().ToString();
  ASSERT_EQ(alive->size(), 2u);
  EXPECT_EQ((*alive)[0].id, "a");
  EXPECT_EQ((*alive)[1].address, "http://b2:8421");
  EXPECT_GE((*alive)[1].seen_ms_ago, 0);
}

// Runs `sql` on database `spec` over a connection of its own; false (with a test
// failure) when it fails.
bool PgExec(const std::string& spec, const std::string& sql) {
  PGconn* conn = PQconnectdb(spec.c_str());
  PGresult* r = PQexec(conn, sql.c_str());
  const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
  EXPECT_TRUE(ok) << sql << ": " << PQerrorMessage(conn);
  PQclear(r);
  PQfinish(conn);
  return ok;
}

// Makes every insert into `jobs` of database `spec` sleep `seconds` inside its
// transaction: a fenced write then holds its lock on the lease row that long.
bool SlowJobInserts(const std::string& spec, double seconds) {
  return PgExec(spec,
                "CREATE FUNCTION slow_insert() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(" +
                    std::to_string(seconds) +
                    "); RETURN NEW; END $$ LANGUAGE plpgsql; CREATE TRIGGER slow_insert "
                    "BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION slow_insert()");
}

// Waits (10 s at most) until `n` backends of database `spec` run an insert into jobs (and
// so sleep in slow_insert).
bool WaitForSleepingWrites(const std::string& spec, int n) {
  PGconn* conn = PQconnectdb(spec.c_str());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool reached = false;
  while (!reached && std::chrono::steady_clock::now() < deadline) {
    PGresult* r = PQexec(conn,
                         "SELECT COUNT(*) FROM "
                         "pg_stat_activity WHERE datname = current_database() AND state = "
                         "'active' AND query LIKE 'INSERT INTO jobs(%'");
    reached = PQresultStatus(r) == PGRES_TUPLES_OK && std::atoi(PQgetvalue(r, 0, 0)) >= n;
    PQclear(r);
    if (!reached) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!reached) {
    PGresult* r = PQexec(conn,
                         "SELECT string_agg(COALESCE(wait_event, '-') || ' ' || state || ' ' || "
                         "LEFT(query, 80), ' | ') FROM pg_stat_activity WHERE datname = "
                         "current_database()");
    ADD_FAILURE() << "no " << n << " writes sleep in slow_insert; the database's sessions: "
                  << (PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0)
                                                           : PQerrorMessage(conn));
    PQclear(r);
  }
  PQfinish(conn);
  return reached;
}

// Issue 31's PostgreSQL scale run: the leader lost its lease because its renewal waited
// behind the leader's own fenced writes (each held the lease row FOR SHARE; the renewal's
// UPDATE conflicts with that, and a stream of writes kept it waiting past lock_timeout).
// Writes in flight for longer than the renewal's lock_timeout (2 s) must not hold it up.
TEST(PostgresLeaseTest, RenewalDoesNotWaitForTheLeadersOwnWrites) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  auto store = OpenStore(spec);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto lease = OpenPostgresLeaseStore(spec);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_EQ((*lease)->TryAcquire("a", "http://a:8421", 60'000)->epoch, 1);
  (*store)->SetFence(1, [](const Status& why) { ADD_FAILURE() << why.ToString(); });
  ASSERT_TRUE(SlowJobInserts(spec, 3));

  constexpr int kWriters = 3;
  std::vector<Status> wrote(kWriters);
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i) {
    // Each of another user: one submission would make them wait for each other (AddSpec).
    writers.emplace_back(
        [&, i] { wrote[i] = (*store)->InsertJob(MakeJob("user" + std::to_string(i))).status(); });
  }
  if (!WaitForSleepingWrites(spec, kWriters)) {
    for (std::thread& t : writers) t.join();
    for (const Status& s : wrote) ADD_FAILURE() << s.ToString();
    return;
  }
  const auto started = std::chrono::steady_clock::now();
  Result<Lease> renewed = (*lease)->Renew("a", 1, 60'000, 2000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(renewed.ok()) << renewed.status().ToString();
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  for (std::thread& t : writers) t.join();
  for (const Status& s : wrote) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ((*store)->ListJobs({})->size(), static_cast<size_t>(kWriters));

  // A lock that does conflict (a takeover's FOR UPDATE) holds a renewal up for its
  // wait_ms at most, not for the session's lock_timeout.
  PGconn* taker = PQconnectdb(spec.c_str());
  PGresult* locked = PQexec(taker, "BEGIN; SELECT 1 FROM leader_lease WHERE id=1 FOR UPDATE");
  ASSERT_EQ(PQresultStatus(locked), PGRES_TUPLES_OK) << PQerrorMessage(taker);
  PQclear(locked);
  const auto blocked_at = std::chrono::steady_clock::now();
  Result<Lease> blocked = (*lease)->Renew("a", 1, 60'000, 200);
  const auto blocked_for = std::chrono::steady_clock::now() - blocked_at;
  EXPECT_FALSE(blocked.ok());
  EXPECT_NE(blocked.status().code(), StatusCode::kFailedPrecondition)
      << blocked.status().ToString();
  EXPECT_NE(blocked.status().message().find("lock timeout"), std::string::npos)
      << blocked.status().ToString();
  EXPECT_GE(blocked_for, std::chrono::milliseconds(150));
  EXPECT_LT(blocked_for, std::chrono::milliseconds(1500));
  PQclear(PQexec(taker, "ROLLBACK"));
  PQfinish(taker);
  // The next renewal, with the lock free again, succeeds.
  EXPECT_TRUE((*lease)->Renew("a", 1, 60'000, 2000).ok());
}

// The other half of fencing with those locks: a takeover waits for the old leader's writes
// in flight, so none of them commits after the epoch moved on.
TEST(PostgresLeaseTest, ATakeoverWaitsForTheOldLeadersWritesInFlight) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  auto store_a = OpenStore(spec);
  auto store_b = OpenStore(spec);
  ASSERT_TRUE(store_a.ok() && store_b.ok()) << store_a.status().ToString();
  auto lease_a = OpenPostgresLeaseStore(spec);
  auto lease_b = OpenPostgresLeaseStore(spec);
  ASSERT_TRUE(lease_a.ok() && lease_b.ok()) << lease_a.status().ToString();
  ASSERT_EQ((*lease_a)->TryAcquire("a", "http://a:8421", 60'000)->epoch, 1);
  int fenced = 0;
  (*store_a)->SetFence(1, [&fenced](const Status&) { ++fenced; });
  // Shorter than the takeover's lock_timeout (2 s), so that it waits rather than fails.
  ASSERT_TRUE(SlowJobInserts(spec, 1));

  Status wrote;
  std::thread writer([&] { wrote = (*store_a)->InsertJob(MakeJob("alice")).status(); });
  if (!WaitForSleepingWrites(spec, 1)) {
    writer.join();
    ADD_FAILURE() << wrote.ToString();
    return;
  }
  ASSERT_TRUE((*lease_a)->Release("a", 1).ok());
  Result<Lease> b = (*lease_b)->TryAcquire("b", "http://b:8421", 60'000);
  // Read before the writer is joined: the takeover returned only after a's write ended.
  const size_t stored = (*store_b)->ListJobs({})->size();
  writer.join();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->holder, "b");
  EXPECT_EQ(b->epoch, 2);
  EXPECT_EQ(stored, 1u);
  EXPECT_TRUE(wrote.ok()) << wrote.ToString();
  EXPECT_EQ(fenced, 0);
  // Its next write finds the new epoch.
  EXPECT_FALSE((*store_a)->PutSetting("limits", "{}").ok());
  EXPECT_EQ(fenced, 1);
}

TEST(OpenStoreTest, PicksTheBackendBySpec) {
  EXPECT_TRUE(IsPostgresSpec("postgresql://gp@db1/gpupool"));
  EXPECT_TRUE(IsPostgresSpec("postgres://db1/gpupool"));
  EXPECT_TRUE(IsPostgresSpec("host=/run/postgresql dbname=gpupool"));
  EXPECT_TRUE(IsPostgresSpec("dbname = gpupool"));
  EXPECT_FALSE(IsPostgresSpec("sqlite:/var/lib/gpupool/gpupool.db"));
  EXPECT_FALSE(IsPostgresSpec("/var/lib/gpupool/gpupool.db"));
  EXPECT_FALSE(IsPostgresSpec("state=old.db"));  // a file name, not a libpq keyword
  auto mem = OpenStore("sqlite::memory:");
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_TRUE((*mem)->InsertJob(MakeJob("alice")).ok());
  EXPECT_EQ(OpenStore("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenStore("sqlite:").status().code(), StatusCode::kInvalidArgument);
  // An unknown scheme is a mistake, not a file to create.
  auto typo = OpenStore("postgresq://db1/gpupool");
  EXPECT_EQ(typo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("names no known store"), std::string::npos);
  EXPECT_EQ(OpenStore("nosuch:x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenStore("sqlite:/nonexistent-dir/state.db").status().code(),
            StatusCode::kUnavailable);
}

// Passwords never reach a message: not from a URI, not from key=value, not when libpq
// cannot parse the string.
TEST(OpenStoreTest, MessagesNeverShowThePassword) {
  const std::string uri = "postgresql://alice:s3cret@db1.example/gpupool";
  EXPECT_EQ(DescribeStoreSpec(uri), "postgresql 'user=alice dbname=gpupool host=db1.example'");
  EXPECT_EQ(DescribeStoreSpec("sqlite:/x/gpupool.db"), "sqlite /x/gpupool.db");
  const std::string kv = "host=/nonexistent-gpupool-dir port=5999 dbname=gp password=s3cret";
  auto s = OpenStore(kv);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.status().message().find("s3cret"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("host=/nonexistent-gpupool-dir"), std::string::npos)
      << s.status().message();
  auto bad = OpenStore("host=x password='s3cret");  // an unterminated quote
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().find("s3cret"), std::string::npos) << bad.status().message();
}

// Runs `sql` (no values) on the database of connection string `conninfo`; the first
// value of its answer, if any.
std::string RunSql(const std::string& conninfo, const std::string& sql) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  PGresult* r = PQexec(conn, sql.c_str());
  EXPECT_TRUE(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
      << PQerrorMessage(conn);
  std::string first = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  PQfinish(conn);
  return first;
}

TEST(PostgresStoreTest, SurvivesReopenAndRefusesNewerSchema) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  int64_t id = 0;
  {
    auto s = OpenStore(spec);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    id = (*s)->InsertJob(MakeJob("alice")).value();
  }
  {
    auto s = OpenStore(spec);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->GetJob(id)->user, "alice");
  }
  RunSql(spec, "UPDATE schema_version SET version=99");
  auto newer = OpenStore(spec);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer than this gpupool understands"), std::string::npos)
      << newer.status().message();
}

// Two controllers starting at once on a new database: the migration runs once.
TEST(PostgresStoreTest, ConcurrentOpensMigrateOnce) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  std::vector<Result<std::unique_ptr<Store>>> opened;
  for (int i = 0; i < 3; ++i) opened.emplace_back(Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) threads.emplace_back([&, i] { opened[i] = OpenStore(spec); });
  for (auto& t : threads) t.join();
  for (auto& s : opened) ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int64_t id = (*opened[0])->InsertJob(MakeJob("alice")).value();
  EXPECT_EQ((*opened[2])->GetJob(id)->user, "alice");
}

// Jobs written several times before version 7 (which added versions) are all at version
// 1 after it, and their next compare-and-set expects that.
TEST(PostgresStoreTest, MigratesJobsOfVersion6ToVersion1) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  Job ended = MakeJob("alice");
  Job pending = MakeJob("bob");
  {
    auto s = OpenStore(spec);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ended.id = (*s)->InsertJob(ended).value();
    pending.id = (*s)->InsertJob(pending).value();
    ended.state = JobState::kAssigned;
    ASSERT_TRUE((*s)->UpdateJob(ended, JobState::kPending, 1).ok());
    ended.state = JobState::kSucceeded;
    ASSERT_TRUE((*s)->UpdateJob(ended, JobState::kAssigned, 2).ok());
  }
  RunSql(spec,
         "DROP TABLE preempt_holds; ALTER TABLE nodes DROP COLUMN gpu_health; ALTER TABLE jobs "
         "DROP COLUMN version; UPDATE schema_version SET version=6");
  auto s = OpenStore(spec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(RunSql(spec, "SELECT version FROM schema_version"), "9");
  ended.version = 1;
  pending.version = 1;
  EXPECT_EQ((*s)->ListJobs({}).value(), (std::vector<Job>{ended, pending}));
  Job next = pending;
  next.state = JobState::kCancelled;
  EXPECT_TRUE(IsConflict((*s)->UpdateJob(next, JobState::kPending, 2)));
  ASSERT_TRUE((*s)->UpdateJob(next, JobState::kPending, 1).ok());
  EXPECT_EQ((*s)->GetJob(pending.id)->version, 2);
}

// A dropped connection (server restart, terminated backend) is re-established.
TEST(PostgresStoreTest, ReconnectsAfterTheConnectionDrops) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  auto s = OpenStore(spec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int64_t id = (*s)->InsertJob(MakeJob("alice")).value();
  // The store's connections name themselves "gpupool" (fallback_application_name).
  const std::string all = std::to_string(kPostgresStoreConnections);
  EXPECT_EQ(RunSql(spec,
                   "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                   "application_name = 'gpupool' AND datname = current_database()"),
            all);
  auto again = (*s)->GetJob(id);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->user, "alice");
  // A pipelined write (a compare-and-set, fenced) on a dropped connection: sent again
  // over a new one, applied once.
  auto lease = OpenPostgresLeaseStore(spec);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const int64_t epoch = (*lease)->TryAcquire("a", "unix:/a", 60'000)->epoch;
  (*s)->SetFence(epoch, [](const Status& why) { ADD_FAILURE() << why.ToString(); });
  EXPECT_EQ(RunSql(spec,
                   "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                   "application_name = 'gpupool' AND datname = current_database() AND query "
                   "NOT LIKE '%leader_lease%'"),
            "1");  // the others are reopened when next used; this one was, by GetJob
  Job next = *again;
  next.state = JobState::kCancelled;
  Status updated = (*s)->UpdateJob(next, JobState::kPending, again->version);
  ASSERT_TRUE(updated.ok()) << updated.ToString();
  EXPECT_EQ((*s)->GetJob(id)->state, JobState::kCancelled);
  // A second compare-and-set from the old state is refused, naming the state it found.
  Status twice = (*s)->UpdateJob(next, JobState::kPending, again->version);
  EXPECT_TRUE(IsConflict(twice));
  EXPECT_NE(twice.message().find("is CANCELLED at version 2, not PENDING at version 1"),
            std::string::npos)
      << twice.message();
}

// A fresh directory for one test's SQLite file (gpupool-TAG-PID in the temp folder),
// removed with all in it when the test ends (after its stores, declared later, close).
class DbDir {
 public:
  explicit DbDir(const std::string& tag)
      : dir_(std::filesystem::temp_directory_path() /
             ("gpupool-" + tag + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  DbDir(const DbDir&) = delete;
  DbDir& operator=(const DbDir&) = delete;
  ~DbDir() { std::filesystem::remove_all(dir_); }
  std::string db() const { return (dir_ / "state.db").string(); }

 private:
  std::filesystem::path dir_;
};

TEST(SqliteStoreTest, SurvivesReopenAndRefusesNewerSchema) {
  const DbDir dir("reopen");
  const std::string path = dir.db();
  int64_t id = 0;
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    id = (*s)->InsertJob(MakeJob("alice")).value();
  }
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)->GetJob(id)->user, "alice");
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto newer = OpenSqliteStore(path);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer than this gpupool understands"),
            std::string::npos);
  auto bad = OpenSqliteStore("/nonexistent-dir/state.db");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
}

// Makes the SQLite store at `path` what schema 12 left: no job versions, no GPU health.
// Then sets user_version to `version`.
void RevertToSchema12(const std::string& path, int version) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql =
      "DROP TABLE preempt_holds; ALTER TABLE nodes DROP COLUMN gpu_health; ALTER TABLE jobs "
      "DROP COLUMN version; PRAGMA user_version=" +
      std::to_string(version);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
  sqlite3_free(err);
  sqlite3_close(db);
}

// Makes the SQLite store at `path` what schema 11 left: each job whole in its body, no
// job_specs, no versions. Then sets user_version to `version`.
void RevertToSchema11(const std::string& path, int version) {
  RevertToSchema12(path, version);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string sql =
      "UPDATE jobs SET body=json_set(json_patch(body, COALESCE((SELECT body FROM job_specs "
      "WHERE job_specs.id=jobs.spec_id), '{}')), '$.id', id); "
      "ALTER TABLE jobs DROP COLUMN spec_id; DROP TABLE job_specs; PRAGMA user_version=" +
      std::to_string(version);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << err;
  sqlite3_free(err);
  sqlite3_close(db);
}

// Jobs written several times before schema 13 (which added versions) are all at version
// 1 after it, and their next compare-and-set expects that.
TEST(SqliteStoreTest, MigratesJobsOfSchema12ToVersion1) {
  const DbDir dir("jobs12");
  const std::string path = dir.db();
  Job ended = MakeJob("alice");
  Job pending = MakeJob("bob");
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    ended.id = (*s)->InsertJob(ended).value();
    pending.id = (*s)->InsertJob(pending).value();
    ended.state = JobState::kAssigned;
    ASSERT_TRUE((*s)->UpdateJob(ended, JobState::kPending, 1).ok());
    ended.state = JobState::kSucceeded;
    ASSERT_TRUE((*s)->UpdateJob(ended, JobState::kAssigned, 2).ok());
  }
  RevertToSchema12(path, 12);
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ended.version = 1;
  pending.version = 1;
  EXPECT_EQ((*s)->ListJobs({}).value(), (std::vector<Job>{ended, pending}));
  Job next = pending;
  next.state = JobState::kCancelled;
  EXPECT_TRUE(IsConflict((*s)->UpdateJob(next, JobState::kPending, 2)));
  ASSERT_TRUE((*s)->UpdateJob(next, JobState::kPending, 1).ok());
  EXPECT_EQ((*s)->GetJob(pending.id)->version, 2);
  EXPECT_EQ((*s)->InsertJob(MakeJob("carol")).value(), pending.id + 1);
}

// A store of schema 11 (every job whole in its row) reads as before, and a job's next
// update stores it split like a new one (issue 25 item 7).
TEST(SqliteStoreTest, MigratesWholeJobsOfSchema11) {
  const DbDir dir("jobs11");
  const std::string path = dir.db();
  Job full = FullJob();
  Job plain = MakeJob("bob");
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    full.id = (*s)->InsertJob(full).value();
    plain.id = (*s)->InsertJob(plain).value();
    full.version = 1;
    plain.version = 1;
  }
  RevertToSchema11(path, 11);
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->ListJobs({}).value(), (std::vector<Job>{full, plain}));
  EXPECT_EQ((*s)->GetJob(full.id).value(), full);
  Job next = full;
  next.state = JobState::kSucceeded;
  ASSERT_TRUE((*s)->UpdateJob(next, JobState::kRunning, 1).ok());
  next.version = 2;
  EXPECT_EQ((*s)->GetJob(full.id).value(), next);
  EXPECT_EQ((*s)->ListJobs({}).value(), (std::vector<Job>{next, plain}));
  Job again = plain;  // the same submission as bob's whole row: now stored once
  again.id = (*s)->InsertJob(again).value();
  again.version = 1;
  EXPECT_EQ((*s)->GetJob(again.id).value(), again);
  s->reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT COUNT(*), COUNT(spec_id) FROM jobs", -1, &st, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 3);
  EXPECT_EQ(sqlite3_column_int(st, 1), 2);  // bob's first row stays whole until updated
  sqlite3_finalize(st);
  sqlite3_close(db);
}

// A store written before job_nodes (schema 7) lists its gangs under every node.
TEST(SqliteStoreTest, MigratesGangNodesOfSchema7) {
  const DbDir dir("gang");
  const std::string path = dir.db();
  int64_t id = 0;
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    Job gang = MakeJob("alice");
    gang.state = JobState::kAssigned;
    gang.placement = {{"n1", {0}, {"GPU-a"}, 1000}, {"n2", {0}, {"GPU-b"}, 1000}};
    id = (*s)->InsertJob(gang).value();
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DROP TABLE job_nodes; DROP TABLE submit_keys; DROP TABLE telemetry",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  RevertToSchema11(path, 7);
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  JobFilter on_n2;
  on_n2.node = "n2";
  auto jobs = (*s)->ListJobs(on_n2);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id, id);
}

// A store of schema 10 held only GPU and job minutes: migration 11 makes each job's total
// (at its first minute) and the pool's minutes from them.
TEST(SqliteStoreTest, MigratesTelemetryOfSchema10) {
  const DbDir dir("tele10");
  const std::string path = dir.db();
  {
    auto s = OpenSqliteStore(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->PutTelemetry({{"gpu", "n1/0", 60'000, 100, 2, 70, 1000, 0, 1},
                                    {"gpu", "n1/1", 60'000, 10, 1, 10, 200, 0, 1},
                                    {"gpu", "n1/0", 120'000, 40, 2, 30, 3000, 0, 1},
                                    {"job", "42", 60'000, 80, 2, 50, 2048, 7.5, 2},
                                    {"job", "42", 120'000, 20, 1, 20, 1024, 2.5, 1}})
                    .ok());
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "DELETE FROM telemetry WHERE scope IN ('job_total', 'pool')",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  RevertToSchema11(path, 10);
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto totals = (*s)->ListTelemetry({.scope = "job_total"});
  ASSERT_TRUE(totals.ok()) << totals.status().ToString();
  EXPECT_EQ(*totals,
            (std::vector<TelemetryRecord>{{"job_total", "42", 60'000, 100, 3, 50, 2048, 10, 2}}));
  auto pool = (*s)->ListTelemetry({.scope = "pool"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(*pool, (std::vector<TelemetryRecord>{{"pool", "", 60'000, 110, 3, 70, 1200, 0, 2},
                                                 {"pool", "", 120'000, 40, 2, 30, 3000, 0, 1}}));
}

// A store written before tokens could expire: its tokens never expire and were never used.
TEST(SqliteStoreTest, MigratesTokensOfTheFirstSchema) {
  const DbDir dir("migrate");
  const std::string path = dir.db();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v1 =
        "CREATE TABLE tokens (token_hash TEXT PRIMARY KEY, user TEXT NOT NULL, kind TEXT NOT "
        "NULL, created_us INTEGER NOT NULL);"
        "INSERT INTO tokens VALUES('old-hash', 'alice', 'user', 77);"
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, user TEXT NOT NULL, state "
        "TEXT NOT NULL, node TEXT NOT NULL DEFAULT '', end_time_us INTEGER NOT NULL DEFAULT 0, "
        "body TEXT NOT NULL);"
        "CREATE TABLE nodes (name TEXT PRIMARY KEY, info_json TEXT NOT NULL, agent_url TEXT NOT "
        "NULL, cpu_milli INTEGER NOT NULL, memory_mib INTEGER NOT NULL, registered_us INTEGER "
        "NOT NULL, last_heartbeat_us INTEGER NOT NULL, draining INTEGER NOT NULL);"
        "PRAGMA user_version=1;";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->FindToken("old-hash")->value(), (TokenRecord{"old-hash", "alice", "user", 77}));
  ASSERT_TRUE((*s)->TouchToken("old-hash", 99).ok());
  EXPECT_EQ((*s)->FindToken("old-hash")->value().last_used_us, 99);
}

}  // namespace
}  // namespace gpupool::store
