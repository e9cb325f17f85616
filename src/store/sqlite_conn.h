// The SQLite store's connections (sqlite_store.cc): prepared statements kept per
// connection, and the read-only connections that let reads run beside the one writer.
// Internal to src/store.
#pragma once

#include <sqlite3.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace gpupool::store::internal {

// Prepared statements kept between calls, keyed by the address of their SQL (string
// literals only). A statement is taken out while in use, so a nested use of the same SQL
// prepares its own. One per connection, used by whoever holds that connection.
class StmtCache {
 public:
  StmtCache() = default;
  StmtCache(const StmtCache&) = delete;
  StmtCache& operator=(const StmtCache&) = delete;
  ~StmtCache() { Clear(); }
  // Finalizes every kept statement (before the connection closes).
  void Clear() {
    for (auto& [sql, stmt] : kept_) sqlite3_finalize(stmt);
    kept_.clear();
  }
  sqlite3_stmt* Take(const char* sql) {
    auto it = kept_.find(sql);
    if (it == kept_.end()) return nullptr;
    sqlite3_stmt* stmt = it->second;
    kept_.erase(it);
    return stmt;
  }
  void Give(const char* sql, sqlite3_stmt* stmt) {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (!kept_.emplace(sql, stmt).second) sqlite3_finalize(stmt);
  }

 private:
  std::unordered_map<const char*, sqlite3_stmt*> kept_;
};

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  // `sql` must be a string literal: the cache keys on its address (the hot statements of
  // the commit path, which were prepared again on every call).
  Stmt(StmtCache& cache, sqlite3* db, const char* sql) : cache_(&cache), sql_(sql) {
    stmt_ = cache.Take(sql);
    rc_ = stmt_ != nullptr ? SQLITE_OK : sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Stmt() {
    if (cache_ != nullptr && rc_ == SQLITE_OK && stmt_ != nullptr) {
      cache_->Give(sql_, stmt_);
    } else {
      sqlite3_finalize(stmt_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void BindDouble(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  int Step() { return sqlite3_step(stmt_); }
  std::string Text(int col) {
    const auto* p = sqlite3_column_text(stmt_, col);
    return p == nullptr ? std::string()
                        : std::string(reinterpret_cast<const char*>(p),
                                      static_cast<size_t>(sqlite3_column_bytes(stmt_, col)));
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) { return sqlite3_column_double(stmt_, col); }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

 private:
  StmtCache* cache_ = nullptr;
  const char* sql_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

// "sqlite: WHAT: the connection's last error".
Status SqliteError(sqlite3* db, const std::string& what);
// `message` as a Status for SQLite result code `code`; a full disk (SQLITE_FULL) says
// whose disk and what to do.
Status SqliteStatus(int code, const std::string& message);

// Read-only connections to one database file in WAL mode. A WAL reader never waits for
// the writer (nor the writer for it): each statement run outside a transaction reads the
// last commit made before its first step, whatever transaction is open on the writer.
// Each connection is used by one caller at a time (Lease); a caller waits only while
// every one is busy. Thread-safe. Close every lease before the pool.
class SqliteReadPool {
 public:
  // A connection taken from the pool, with its statement cache; given back when destroyed.
  class Lease {
   public:
    Lease(SqliteReadPool* pool, size_t i) : pool_(pool), i_(i) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->GiveBack(i_); }
    sqlite3* db() { return pool_->conns_[i_]->db; }
    StmtCache& stmts() { return pool_->conns_[i_]->stmts; }

   private:
    SqliteReadPool* pool_;
    size_t i_;
  };

  // `n` (>= 1) read-only connections to the database file `path`, which a writer holds
  // open in WAL mode; each waits up to `busy_timeout_ms` for a lock (SQLite's own
  // recovery of the WAL index, a checkpoint's restart). Unavailable when one cannot open.
  static Result<std::unique_ptr<SqliteReadPool>> Open(const std::string& path, size_t n,
                                                      int busy_timeout_ms);
  SqliteReadPool(const SqliteReadPool&) = delete;
  SqliteReadPool& operator=(const SqliteReadPool&) = delete;
  ~SqliteReadPool();

  // A free connection, waiting while none is.
  Lease Take();
  size_t size() const { return conns_.size(); }

 private:
  struct Conn {
    sqlite3* db = nullptr;
    StmtCache stmts;
  };
  SqliteReadPool() = default;
  void GiveBack(size_t i);

  std::vector<std::unique_ptr<Conn>> conns_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> free_;  // under mu_; the most recently used last
};

}  // namespace gpupool::store::internal
