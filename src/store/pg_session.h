// The PostgreSQL stores' connection (postgres_store.cc, postgres_lease_store.cc): one libpq
// connection and the statements run over it (PgSession), a result (PgResult), and
// opening a connection (Connect). Internal to src/store. Not thread-safe: a session's
// owner serialises its calls.
#pragma once

#include <libpq-fe.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpupool::store::internal {

// libpq's messages end in a newline and may span lines: one line for ours.
std::string OneLine(const char* msg);

class PgResult {
 public:
  explicit PgResult(PGresult* r) : r_(r) {}
  ~PgResult() { PQclear(r_); }
  PgResult(PgResult&& o) noexcept : r_(o.r_) { o.r_ = nullptr; }
  PgResult& operator=(PgResult&& o) noexcept {
    std::swap(r_, o.r_);
    return *this;
  }
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;

  int Rows() const { return PQntuples(r_); }
  std::string Text(int row, int col) const {
    return std::string(PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col)));
  }
  // The same without a copy: good while this result lives.
  std::string_view View(int row, int col) const {
    return {PQgetvalue(r_, row, col), static_cast<size_t>(PQgetlength(r_, row, col))};
  }
  int64_t Int(int row, int col) const {
    int64_t v = 0;
    const char* p = PQgetvalue(r_, row, col);
    std::from_chars(p, p + PQgetlength(r_, row, col), v);
    return v;
  }
  bool Bool(int row, int col) const { return PQgetvalue(r_, row, col)[0] == 't'; }
  bool IsNull(int row, int col) const { return PQgetisnull(r_, row, col) != 0; }
  // Rows an INSERT, UPDATE or DELETE touched.
  int64_t Affected() const {
    const char* p = PQcmdTuples(r_);
    int64_t v = 0;
    std::from_chars(p, p + std::strlen(p), v);
    return v;
  }
  std::string SqlState() const {
    const char* s = PQresultErrorField(r_, PG_DIAG_SQLSTATE);
    return s == nullptr ? "" : s;
  }
  bool ok() const {
    const ExecStatusType t = PQresultStatus(r_);
    return t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK;
  }
  PGresult* get() const { return r_; }

 private:
  PGresult* r_;
};

using Params = std::vector<std::string>;

// One libpq connection and the statements run over it. Not thread-safe: its owner
// serialises calls.
class PgSession {
 public:
  PgSession(PGconn* conn, std::string target) : conn_(conn), target_(std::move(target)) {
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
  }
  ~PgSession() { PQfinish(conn_); }
  PgSession(const PgSession&) = delete;
  PgSession& operator=(const PgSession&) = delete;

 protected:
  // The connection, re-established if the server or the network dropped it.
  Status Connected() {
    if (PQstatus(conn_) == CONNECTION_OK) return Status::Ok();
    PQreset(conn_);
    if (PQstatus(conn_) == CONNECTION_OK) return Status::Ok();
    return Status::Unavailable("the PostgreSQL store " + target_ +
                               " is unreachable: " + OneLine(PQerrorMessage(conn_)) +
                               ": check that the server runs and accepts this connection");
  }

  // Outside a transaction a statement that finds the connection dropped (a restarted
  // server, a terminated backend) is sent once more over a new one.
  PgResult Exec(const std::string& sql, const Params& params) {
    std::vector<const char*> values;
    values.reserve(params.size());
    for (const std::string& p : params) values.push_back(p.c_str());
    auto send = [&] {
      return PgResult(PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()), nullptr,
                                   values.data(), nullptr, nullptr, /*resultFormat=*/0));
    };
    PgResult r = send();
    if (!r.ok() && !in_transaction_ && PQstatus(conn_) == CONNECTION_BAD) {
      PQreset(conn_);
      if (PQstatus(conn_) == CONNECTION_OK) r = send();
    }
    return r;
  }

  Result<PgResult> Run(const std::string& sql, const Params& params, const std::string& what) {
    PgResult r = Exec(sql, params);
    if (!r.ok()) return Error(r, what);
    return r;
  }

  Status Error(const PgResult& r, const std::string& what) {
    std::string msg = "postgresql: ";
    if (!what.empty()) msg += what + ": ";
    msg += OneLine(r.get() != nullptr ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn_));
    const std::string state = r.SqlState();
    // Class 08 (connection exception), 57P0x (shutdown), or a connection gone bad.
    if (PQstatus(conn_) != CONNECTION_OK || state.rfind("08", 0) == 0 ||
        state.rfind("57P", 0) == 0) {
      return Status::Unavailable(msg + " (store " + target_ + ")");
    }
    return Status::Internal(msg);
  }

  // One statement of a pipelined transaction.
  struct Stmt {
    std::string sql;
    Params params;
  };
  // What a pipelined transaction did: every statement's result, in order; `failed` is the
  // first that failed (its result holds the error; the transaction was rolled back), or
  // kAllRan when it committed.
  struct Batch {
    static constexpr size_t kAllRan = SIZE_MAX;
    std::vector<PgResult> results;
    size_t failed = kAllRan;
  };

  // Runs `stmts` as one transaction in one round trip: libpq's pipeline mode sends them
  // all and one Sync; the statements before a Sync are an implicit transaction, committed
  // at the Sync, and an error in any rolls back all and skips the rest. A connection found
  // dropped before any answer came back (an idle connection to a restarted server) is made
  // again and the transaction sent once more: the server ran nothing of it. Unavailable
  // when the connection breaks later (the outcome is unknown, as for a lost COMMIT).
  Result<Batch> Pipeline(const std::vector<Stmt>& stmts, const std::string& what) {
    bool answered = false;
    Result<Batch> b = PipelineOnce(stmts, what, &answered);
    if (b.ok() || answered || PQstatus(conn_) != CONNECTION_BAD) return b;
    PQreset(conn_);
    if (PQstatus(conn_) != CONNECTION_OK) return b;
    return PipelineOnce(stmts, what, &answered);
  }

  Status Begin() {
    GP_RETURN_IF_ERROR(Run("BEGIN", {}, "begin a transaction").status());
    in_transaction_ = true;
    return Status::Ok();
  }
  Status Commit() {
    Status s = Run("COMMIT", {}, "commit").status();
    in_transaction_ = false;
    if (!s.ok()) PgResult ended(PQexec(conn_, "ROLLBACK"));
    return s;
  }
  Status Rollback(Status s) {
    PgResult ended(PQexec(conn_, "ROLLBACK"));
    in_transaction_ = false;
    return s;
  }

  PGconn* conn_;
  bool in_transaction_ = false;
  const std::string target_;  // the connection string without its password

 private:
  Status Broken(const std::string& what) {
    return Status::Unavailable("postgresql: " + what + ": " + OneLine(PQerrorMessage(conn_)) +
                               " (store " + target_ + ")");
  }

  // Reads what is left of a pipeline and leaves pipeline mode (a no-op on a dead one).
  void EndPipeline() {
    for (int nulls = 0; nulls < 2 && PQstatus(conn_) == CONNECTION_OK;) {
      PGresult* r = PQgetResult(conn_);
      if (r == nullptr) {
        ++nulls;
        continue;
      }
      nulls = 0;
      const bool sync = PQresultStatus(r) == PGRES_PIPELINE_SYNC;
      PQclear(r);
      if (sync) break;
    }
    PQexitPipelineMode(conn_);
  }

  Result<Batch> PipelineOnce(const std::vector<Stmt>& stmts, const std::string& what,
                             bool* answered) {
    *answered = false;
    if (PQenterPipelineMode(conn_) != 1) return Broken(what + " (pipeline mode)");
    for (const Stmt& st : stmts) {
      std::vector<const char*> values;
      values.reserve(st.params.size());
      for (const std::string& v : st.params) values.push_back(v.c_str());
      if (PQsendQueryParams(conn_, st.sql.c_str(), static_cast<int>(values.size()), nullptr,
                            values.data(), nullptr, nullptr, /*resultFormat=*/0) != 1) {
        EndPipeline();
        return Broken(what);
      }
    }
    if (PQpipelineSync(conn_) != 1) {
      EndPipeline();
      return Broken(what);
    }
    // Each statement gives one result, then a null; the Sync gives PGRES_PIPELINE_SYNC.
    Batch b;
    bool synced = false;
    for (int nulls = 0; nulls < 2 && !synced;) {
      PGresult* raw = PQgetResult(conn_);
      if (raw == nullptr) {
        ++nulls;  // the end of one statement's results; two in a row: nothing more comes
        continue;
      }
      nulls = 0;
      if (PQresultStatus(raw) == PGRES_PIPELINE_SYNC) {
        synced = true;
        PQclear(raw);
        break;
      }
      PgResult r(raw);
      const ExecStatusType t = PQresultStatus(raw);
      // The server ran something of it: a statement's answer, or an error of its own. A
      // backend that was terminated, or a connection lost, before the first answer (class
      // 08, 57P) ran nothing that could commit: a commit would have been answered first.
      const std::string state = r.SqlState();
      if (t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK ||
          (t == PGRES_FATAL_ERROR && !state.empty() && state.rfind("08", 0) != 0 &&
           state.rfind("57P", 0) != 0)) {
        *answered = true;
      }
      if (b.failed == Batch::kAllRan && !r.ok() && t != PGRES_PIPELINE_ABORTED) {
        b.failed = b.results.size();
      }
      b.results.push_back(std::move(r));
    }
    PQexitPipelineMode(conn_);
    if (!synced || b.results.size() != stmts.size()) {
      if (b.failed != Batch::kAllRan && PQstatus(conn_) == CONNECTION_OK) {
        return Error(b.results[b.failed], what);
      }
      return Broken(what);
    }
    return b;
  }
};

// Opens a connection to `conninfo` for the store or the lease. `session_options` go to
// the server as its `options` (-c settings), before the string's own, which may override.
// `target` names the server in errors (RedactConninfo's form: never a password).
Result<PGconn*> Connect(const std::string& conninfo, const std::string& target,
                        const char* session_options);

}  // namespace gpupool::store::internal
