// Opening stores: the backend picked by spec (passwords never shown), reopening,
// refusing a newer schema, migrating older ones (SQLite and PostgreSQL), reconnecting.
#include "store/store_conformance_test.h"

namespace gpupool::store::conformance_test {
namespace {

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

// Terminates the store's backends on the database of `conninfo` (its connections name
// themselves "gpupool": fallback_application_name) that `also` (SQL) admits, and waits
// until each has exited; how many there were. pg_terminate_backend only signals a
// backend, which then leaves pg_stat_activity when it gets the CPU to exit: under load a
// second look could still count the backends ended by the first (the flake this test
// had). With a timeout it waits for the exit itself (PostgreSQL 14+), failing the test
// at the timeout.
std::string TerminateStoreBackends(const std::string& conninfo, const std::string& also) {
  return RunSql(conninfo,
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 60000)) || '/' || "
                "count(*) FROM pg_stat_activity WHERE application_name = 'gpupool' AND datname "
                "= current_database()" +
                    also);
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
    ASSERT_TRUE((*s)->PutSetting("limits", "{}").ok());
  }
  RunSql(spec,
         "ALTER TABLE jobs DROP COLUMN late_end_us; "
         "ALTER TABLE nodes DROP COLUMN agent_id; ALTER TABLE settings DROP COLUMN revision; "
         "DROP TABLE preempt_holds; ALTER TABLE nodes "
         "DROP COLUMN gpu_health; ALTER TABLE jobs DROP COLUMN version; UPDATE schema_version "
         "SET version=6");
  auto s = OpenStore(spec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(RunSql(spec, "SELECT version FROM schema_version"), "12");
  ended.version = 1;
  pending.version = 1;
  EXPECT_EQ((*s)->ListJobs({}).value(), (std::vector<Job>{ended, pending}));
  Job next = pending;
  next.state = JobState::kCancelled;
  EXPECT_TRUE(IsConflict((*s)->UpdateJob(next, JobState::kPending, 2)));
  ASSERT_TRUE((*s)->UpdateJob(next, JobState::kPending, 1).ok());
  EXPECT_EQ((*s)->GetJob(pending.id)->version, 2);
  // A setting stored before revisions were is at revision 1 (written once at least).
  EXPECT_EQ((*s)->GetSettingRecord("limits").value(), (SettingRecord{"{}", 1}));
  EXPECT_EQ((*s)->PutSettingIf("limits", "{\"users\": {}}", 1).value(), 2);
}

// A dropped connection (server restart, terminated backend) is re-established.
TEST(PostgresStoreTest, ReconnectsAfterTheConnectionDrops) {
  std::string spec;
  GP_FRESH_POSTGRES_DATABASE(spec);
  auto s = OpenStore(spec);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int64_t id = (*s)->InsertJob(MakeJob("alice")).value();
  const std::string all = std::to_string(kPostgresStoreConnections);
  EXPECT_EQ(TerminateStoreBackends(spec, ""), all + "/" + all);  // every one, and all gone
  auto again = (*s)->GetJob(id);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->user, "alice");
  // A pipelined write (a compare-and-set, fenced) on a dropped connection: sent again
  // over a new one, applied once.
  auto lease = OpenPostgresLeaseStore(spec);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const int64_t epoch = (*lease)->TryAcquire("a", "unix:/a", 60000)->epoch;
  (*s)->SetFence(epoch, [](const Status& why) { ADD_FAILURE() << why.ToString(); });
  // The others are reopened when next used; this one was, by GetJob.
  EXPECT_EQ(TerminateStoreBackends(spec, " AND query NOT LIKE '%leader_lease%'"), "1/1");
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

// Runs `sql` on the SQLite database at `path` (outside any store), failing the test on an
// error.
void ExecSqlite(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << (err != nullptr ? err : "") << " in: " << sql;
  sqlite3_free(err);
  sqlite3_close(db);
}

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
  ExecSqlite(path, "PRAGMA user_version=99");
  auto newer = OpenSqliteStore(path);
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(newer.status().message().find("newer than this gpupool understands"),
            std::string::npos);
  auto bad = OpenSqliteStore("/nonexistent-dir/state.db");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnavailable);
}

// Makes the SQLite store at `path` what schema 12 left: no job versions, no GPU health,
// no settings' revisions, no agent ids, no late ends.
// Then sets user_version to `version`.
void RevertToSchema12(const std::string& path, int version) {
  ExecSqlite(path,
             "ALTER TABLE jobs DROP COLUMN late_end_us; "
             "ALTER TABLE nodes DROP COLUMN agent_id; ALTER TABLE settings DROP COLUMN revision; "
             "DROP TABLE preempt_holds; ALTER TABLE nodes "
             "DROP COLUMN gpu_health; ALTER TABLE jobs DROP COLUMN version; PRAGMA user_version=" +
                 std::to_string(version));
}

// Makes the SQLite store at `path` what schema 11 left: each job whole in its body, no
// job_specs, no versions. Then sets user_version to `version`.
void RevertToSchema11(const std::string& path, int version) {
  RevertToSchema12(path, version);
  ExecSqlite(path,
             "UPDATE jobs SET body=json_set(json_patch(body, COALESCE((SELECT body FROM job_specs "
             "WHERE job_specs.id=jobs.spec_id), '{}')), '$.id', id); "
             "ALTER TABLE jobs DROP COLUMN spec_id; DROP TABLE job_specs; PRAGMA user_version=" +
                 std::to_string(version));
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
    ASSERT_TRUE((*s)->PutSetting("limits", "{}").ok());
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
  // A setting stored before revisions were is at revision 1 (written once at least).
  EXPECT_EQ((*s)->GetSettingRecord("limits").value(), (SettingRecord{"{}", 1}));
  EXPECT_EQ((*s)->PutSettingIf("limits", "{\"users\": {}}", 1).value(), 2);
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
  ExecSqlite(path, "DROP TABLE job_nodes; DROP TABLE submit_keys; DROP TABLE telemetry");
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
    ASSERT_TRUE((*s)->PutTelemetry({{"gpu", "n1/0", 60000, 100, 2, 70, 1000, 0, 1},
                                    {"gpu", "n1/1", 60000, 10, 1, 10, 200, 0, 1},
                                    {"gpu", "n1/0", 120000, 40, 2, 30, 3000, 0, 1},
                                    {"job", "42", 60000, 80, 2, 50, 2048, 7.5, 2},
                                    {"job", "42", 120000, 20, 1, 20, 1024, 2.5, 1}})
                    .ok());
  }
  ExecSqlite(path, "DELETE FROM telemetry WHERE scope IN ('job_total', 'pool')");
  RevertToSchema11(path, 10);
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto totals = (*s)->ListTelemetry({.scope = "job_total"});
  ASSERT_TRUE(totals.ok()) << totals.status().ToString();
  EXPECT_EQ(*totals,
            (std::vector<TelemetryRecord>{{"job_total", "42", 60000, 100, 3, 50, 2048, 10, 2}}));
  auto pool = (*s)->ListTelemetry({.scope = "pool"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(*pool, (std::vector<TelemetryRecord>{{"pool", "", 60000, 110, 3, 70, 1200, 0, 2},
                                                 {"pool", "", 120000, 40, 2, 30, 3000, 0, 1}}));
}

// A store written before tokens could expire: its tokens never expire and were never used.
TEST(SqliteStoreTest, MigratesTokensOfTheFirstSchema) {
  const DbDir dir("migrate");
  const std::string path = dir.db();
  {
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
    ExecSqlite(path, v1);
  }
  auto s = OpenSqliteStore(path);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->FindToken("old-hash")->value(), (TokenRecord{"old-hash", "alice", "user", 77}));
  ASSERT_TRUE((*s)->TouchToken("old-hash", 99).ok());
  EXPECT_EQ((*s)->FindToken("old-hash")->value().last_used_us, 99);
}

}  // namespace
}  // namespace gpupool::store::conformance_test
