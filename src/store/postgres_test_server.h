// A throwaway PostgreSQL server for tests: initdb in a temporary directory, postgres on a
// Unix socket there (no TCP), fsync off and small buffers for speed. When the test runs
// as root (initdb refuses root) the server runs as the "postgres" account the Debian
// package creates, else as "nobody". Not thread-safe: tests call it from their set-up.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace gpupool::store {

class PostgresTestServer {
 public:
  // Unavailable, naming the package to install, when postgresql-15 is absent; Internal
  // when it is there but does not start (the message holds its log).
  static Result<std::unique_ptr<PostgresTestServer>> Start();
  ~PostgresTestServer();  // stops the server and removes its directory
  PostgresTestServer(const PostgresTestServer&) = delete;
  PostgresTestServer& operator=(const PostgresTestServer&) = delete;

  // A new empty database, as a libpq connection string.
  Result<std::string> CreateDatabase();
  // The connection string of database `db` (superuser "gpupool", no password).
  std::string ConnInfo(const std::string& db) const;

 private:
  PostgresTestServer() = default;
  std::string dir_;  // the data directory and the socket live here
  pid_t pid_ = -1;
  int databases_ = 0;
};

// The test binary's server, started at the first call and stopped by a gtest Environment
// when the tests end; a failed start is remembered, so it is tried once per binary.
Result<PostgresTestServer*> SharedPostgresTestServer();

}  // namespace gpupool::store
