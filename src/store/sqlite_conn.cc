#include "store/sqlite_conn.h"

namespace gpupool::store::internal {

Status SqliteError(sqlite3* db, const std::string& what) {
  return SqliteStatus(sqlite3_errcode(db), "sqlite: " + what + ": " + sqlite3_errmsg(db));
}

Status SqliteStatus(int code, const std::string& message) {
  if ((code & 0xff) == SQLITE_FULL) {
    // Said plainly: the admin's disk, not the caller's request.
    return Status::Internal(message +
                            " (the disk that holds the pool's database is full: free space "
                            "there, by default under the server's --state-dir, and try again)");
  }
  return Status::Internal(message);
}

Result<std::unique_ptr<SqliteReadPool>> SqliteReadPool::Open(const std::string& path, size_t n,
                                                             int busy_timeout_ms) {
  std::unique_ptr<SqliteReadPool> pool(new SqliteReadPool());
  for (size_t i = 0; i < n; ++i) {
    auto conn = std::make_unique<Conn>();
    // Read-only: a reader that tried to write would fail instead of taking the write lock
    // from the store's writer. FULLMUTEX as the writer's, though a lease is one caller's.
    const int rc = sqlite3_open_v2(path.c_str(), &conn->db,
                                   SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = conn->db != nullptr ? sqlite3_errmsg(conn->db) : "out of memory";
      sqlite3_close(conn->db);
      return Status::Unavailable("cannot open a read connection to the store '" + path +
                                 "': " + msg);
    }
    sqlite3_busy_timeout(conn->db, busy_timeout_ms);
    pool->conns_.push_back(std::move(conn));
  }
  for (size_t i = 0; i < n; ++i) pool->free_.push_back(n - 1 - i);
  return pool;
}

SqliteReadPool::~SqliteReadPool() {
  for (auto& c : conns_) {
    c->stmts.Clear();  // a connection with statements left does not close
    sqlite3_close(c->db);
  }
}

SqliteReadPool::Lease SqliteReadPool::Take() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  const size_t i = free_.back();
  free_.pop_back();
  return Lease(this, i);
}

void SqliteReadPool::GiveBack(size_t i) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(i);
  }
  cv_.notify_one();
}

}  // namespace gpupool::store::internal
