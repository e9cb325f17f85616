// The fixture shared by the store's tests (store_conformance_test.cc and the files beside
// it that include this): StoreTest, parameterised by backend (SQLite in memory or in a
// file, PostgreSQL on the test binary's server), each test on a new, empty store.
#pragma once

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
#include "store/lease.h"
#include "store/open_store.h"
#include "store/postgres_store.h"
#include "store/postgres_test_server.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::store::conformance_test {

using jobs::Job;

using jobs::JobState;

inline Job MakeJob(const std::string& user) {
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
inline Job FullJob() {
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

}  // namespace gpupool::store::conformance_test
