// SQLite implementation of Store (sqlite_store.cc). Daemons open their store by spec
// through OpenStore (open_store.h); tests open in-memory stores here directly.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "store/store.h"

namespace gpupool::store {

// Read-only connections a store of a file opens beside its writer (OpenStore's).
inline constexpr size_t kSqliteReadConnections = 4;

struct SqliteStoreOptions {
  // Connections for the reads (GetJob, ListJobs, the Find and List calls, GetSetting,
  // ListTelemetry), each running beside the writer in WAL mode: a read waits for no
  // write and sees the last commit made before it began. 0, or an in-memory database:
  // every call on the one connection, one after the other.
  size_t read_connections = kSqliteReadConnections;
  // Tests: runs on the writing thread inside each write transaction of InsertJobs,
  // UpdateJobs and PutTelemetry, just before its COMMIT (the writer's lock held).
  std::function<void()> before_commit;
};

// Opens (creating if needed) an SQLite store at `path` in WAL mode and brings its schema
// up to date. ":memory:" gives a private in-memory store for tests. Unavailable when the
// file (or a read connection to it) cannot be opened.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               SqliteStoreOptions options = {});

}  // namespace gpupool::store
