// The leadership lease (lease.h) on a real PostgreSQL (the test binary's server; skipped
// without postgresql-15): one leader, fenced writes of a replaced one, renewals and
// takeovers against writes in flight.
#include "store/store_conformance_test.h"

namespace gpupool::store::conformance_test {
namespace {

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

}  // namespace
}  // namespace gpupool::store::conformance_test
