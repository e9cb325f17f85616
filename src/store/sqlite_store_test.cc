// The SQLite store's read connections (sqlite_conn.h): reads beside an open write.
#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>
#include <vector>

#include "store/sqlite_conn.h"

namespace gpupool::store {
namespace {

using jobs::Job;
using jobs::JobState;

class SqliteReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = std::filesystem::temp_directory_path() /
           ("gpupool-sqlite-reads-" + std::to_string(getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path() const { return (dir_ / "state.db").string(); }

  static Job PendingJob() {
    Job j;
    j.user = "alice";
    j.command = {"true"};
    j.request.gpus = 1;
    return j;
  }

  std::filesystem::path dir_;
};

// A write that finds the disk full says whose disk it is and what to do, beside
// SQLite's own words: the caller of `gpupool submit` sees it, and it is not theirs to fix.
TEST(SqliteErrors, AFullDiskSaysWhoseDiskAndWhatToDo) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x BLOB); PRAGMA max_page_count = 8;", nullptr, nullptr,
                         nullptr),
            SQLITE_OK);
  int rc = SQLITE_OK;
  for (int i = 0; i < 100 && rc == SQLITE_OK; ++i) {
    rc = sqlite3_exec(db, "INSERT INTO t VALUES(zeroblob(4096))", nullptr, nullptr, nullptr);
  }
  ASSERT_EQ(rc, SQLITE_FULL);
  const Status full = internal::SqliteError(db, "store job 7");
  EXPECT_NE(full.message().find("sqlite: store job 7: database or disk is full"), std::string::npos)
      << full.message();
  EXPECT_NE(full.message().find("free space there, by default under the server's --state-dir"),
            std::string::npos)
      << full.message();
  sqlite3_close(db);
  const Status other = internal::SqliteStatus(SQLITE_CONSTRAINT, "sqlite: x: constraint");
  EXPECT_EQ(other.message(), "sqlite: x: constraint");
}

// The old store ran every call on one connection behind one mutex, so these reads waited
// until the write committed (here: until the hook gave up waiting for them, and then saw
// the write). Now they run on read connections, beside the open write transaction, and
// see the last commit before it.
TEST_F(SqliteReadsTest, ReadsCompleteWhileAWriteTransactionIsOpen) {
  std::promise<void> in_transaction;
  std::promise<void> reads_done;
  std::future<void> reads_done_f = reads_done.get_future();
  std::atomic<bool> armed = false;
  std::atomic<bool> reads_came_in_time = false;
  SqliteStoreOptions options;
  options.before_commit = [&] {
    if (!armed.exchange(false)) return;
    in_transaction.set_value();
    // A bound, so that a store whose reads wait for the writer fails instead of hanging.
    reads_came_in_time =
        reads_done_f.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  };
  auto store = OpenSqliteStore(Path(), options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Store& s = **store;
  const int64_t id = s.InsertJob(PendingJob()).value();
  ASSERT_TRUE(s.PutSetting("limits", "old").ok());

  Job running = s.GetJob(id).value();
  running.state = JobState::kRunning;
  armed = true;
  std::thread writer([&] {
    Status st = s.UpdateJob(running, JobState::kPending, 1);
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  in_transaction.get_future().wait();
  // The write transaction is open (its UPDATE done, its COMMIT not): every read here
  // answers with the state committed before it.
  Result<Job> during = s.GetJob(id);
  Result<std::vector<Job>> listed = s.ListJobs({.active_only = true});
  Result<std::optional<std::string>> setting = s.GetSetting("limits");
  reads_done.set_value();
  writer.join();

  EXPECT_TRUE(reads_came_in_time) << "the reads waited for the write to commit";
  ASSERT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ(during->state, JobState::kPending);
  EXPECT_EQ(during->version, 1);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->at(0).state, JobState::kPending);
  ASSERT_TRUE(setting.ok() && setting->has_value());
  EXPECT_EQ(**setting, "old");
  // Once committed, the write is what every later read sees.
  Result<Job> after = s.GetJob(id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state, JobState::kRunning);
  EXPECT_EQ(after->version, 2);
}

// The reads of several threads at once (so several read connections, and callers waiting
// for a free one) each see the write that returned before they began: no read connection
// keeps an older snapshot open between calls. It guards the read connections (the old
// single connection passed it trivially): it fails when a reader's read transaction is
// left open (tried: a BEGIN and a SELECT on each reader as it opens).
TEST_F(SqliteReadsTest, EveryReaderSeesTheWriteThatReturnedBeforeIt) {
  SqliteStoreOptions options;
  options.read_connections = 3;
  auto store = OpenSqliteStore(Path(), options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  Store& s = **store;
  Job job = s.GetJob(s.InsertJob(PendingJob()).value()).value();
  constexpr int kReaders = 5;  // more than the connections
  for (int round = 0; round < 30; ++round) {
    job.name = "round-" + std::to_string(round);
    ASSERT_TRUE(s.UpdateJob(job, JobState::kPending, job.version).ok());
    ++job.version;
    std::vector<std::thread> readers;
    std::atomic<int> stale = 0;
    for (int r = 0; r < kReaders; ++r) {
      readers.emplace_back([&] {
        Result<Job> got = s.GetJob(job.id);
        Result<std::vector<Job>> listed = s.ListJobs({});
        if (!got.ok() || got->version != job.version || !listed.ok() || listed->size() != 1 ||
            listed->at(0).version != job.version) {
          ++stale;
        }
      });
    }
    for (auto& t : readers) t.join();
    ASSERT_EQ(stale.load(), 0) << "round " << round;
  }
}

}  // namespace
}  // namespace gpupool::store
