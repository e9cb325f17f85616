// SQLite implementation of Store. Writes go to one connection guarded by a mutex: SQLite
// serialises writers anyway, and the controller's write rate (thousands per second) is far
// below what one connection in WAL mode sustains. Reads of a file go to read-only
// connections of their own (sqlite_conn.h), so that they never wait for a write. Job bodies are
// stored as JSON beside the indexed columns the queries filter on, so adding a job field needs no
// migration; a job's submission (its spec) is stored once per distinct content (job_record.h).
#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "common/json.h"
#include "jobs/job_json.h"
#include "store/job_cas.h"
#include "store/job_nodes.h"
#include "store/job_record.h"
#include "store/job_sort_sql.h"
#include "store/preempt_hold_row.h"
#include "store/schema.h"
#include "store/sqlite_conn.h"
#include "store/store.h"
#include "store/telemetry_query.h"

namespace gpupool::store {
namespace {

using internal::DecodeJobRecord;
using internal::EncodeJobRecord;
using internal::JobNodes;
using internal::JobRecord;
using internal::PrimaryNode;
using internal::SqliteError;
using internal::SqliteReadPool;
using internal::Stmt;
using internal::StmtCache;
using jobs::Job;
using jobs::JobState;

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, std::function<void()> before_commit)
      : db_(db), before_commit_(std::move(before_commit)) {}
  ~SqliteStore() override {
    readers_.reset();  // before the writer: the last to close checkpoints the WAL
    stmts_.Clear();    // a connection with statements left does not close
    sqlite3_close(db_);
  }

  Status Init() {
    {
      // An in-memory database answers "memory": it has no WAL, and no other connection
      // can reach it.
      Stmt s(db_, "PRAGMA journal_mode=WAL");
      if (s.Step() != SQLITE_ROW) return Error("set the journal mode");
      wal_ = s.Text(0) == "wal";
    }
    GP_RETURN_IF_ERROR(Exec("PRAGMA synchronous=NORMAL"));
    GP_RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
    int64_t version = 0;
    {
      Stmt s(db_, "PRAGMA user_version");
      if (s.Step() == SQLITE_ROW) version = s.Int(0);
    }
    const auto known = static_cast<int64_t>(internal::SqliteMigrations().size());
    if (version > known) {
      return Status::FailedPrecondition("the store's schema version " + std::to_string(version) +
                                        " is newer than this gpupool understands (" +
                                        std::to_string(known) +
                                        "): run a newer gpupool or restore a backup");
    }
    for (int64_t v = version; v < known; ++v) {
      GP_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
      Status s = Exec(internal::SqliteMigrations()[static_cast<size_t>(v)]);
      if (s.ok()) s = Exec("PRAGMA user_version=" + std::to_string(v + 1));
      if (!s.ok()) {
        (void)Exec("ROLLBACK");
        return s.WithContext("schema migration " + std::to_string(v + 1));
      }
      GP_RETURN_IF_ERROR(Exec("COMMIT"));
    }
    return Status::Ok();
  }

  // After Init: `n` read-only connections for the reads, when the database is a file in
  // WAL mode (else every call stays on the writer, one at a time).
  Status OpenReaders(size_t n) {
    const char* file = sqlite3_db_filename(db_, "main");
    if (n == 0 || !wal_ || file == nullptr || file[0] == '\0') return Status::Ok();
    GP_ASSIGN_OR_RETURN(readers_, SqliteReadPool::Open(file, n, kBusyTimeoutMs));
    return Status::Ok();
  }

  Result<std::vector<Job>> InsertJobs(std::vector<Job> jobs, InsertAs as) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    int64_t array_id = 0;
    if (as == InsertAs::kArray && !jobs.empty()) {
      // The array's id is its first element's, which every element's body holds: the id
      // AUTOINCREMENT would give next, taken explicitly (this transaction is the only
      // writer).
      Stmt next(db_,
                "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name='jobs'), 0), "
                "COALESCE((SELECT MAX(id) FROM jobs), 0)) + 1");
      if (next.Step() != SQLITE_ROW) return Rollback(Error("allocate the array's id"));
      array_id = next.Int(0);
    }
    for (size_t k = 0; k < jobs.size(); ++k) {
      Job& job = jobs[k];
      job.version = 1;
      job.id = 0;
      if (as == InsertAs::kArray) {
        if (k == 0) job.id = array_id;
        job.array_id = array_id;
        if (k > 0) job.submit_key.clear();  // the first element holds the array's
      }
      Result<int64_t> id = InsertRow(job);
      if (!id.ok()) return Rollback(id.status());
      job.id = *id;
    }
    if (Status c = Commit(); !c.ok()) return Rollback(c);
    return jobs;
  }

  Result<std::optional<int64_t>> FindSubmitKey(uint32_t uid, std::string_view key) override {
    return Read([&](sqlite3* db, StmtCache&) -> Result<std::optional<int64_t>> {
      Stmt s(db, "SELECT job_id FROM submit_keys WHERE uid=? AND key=?");
      s.Bind(1, static_cast<int64_t>(uid));
      s.Bind(2, std::string(key));
      const int rc = s.Step();
      if (rc == SQLITE_DONE) return std::optional<int64_t>();
      if (rc != SQLITE_ROW) return SqliteError(db, "read submit key");
      return std::optional<int64_t>(s.Int(0));
    });
  }

  Result<Job> GetJob(int64_t id) override {
    return Read([&](sqlite3* db, StmtCache& stmts) -> Result<Job> {
      Stmt s(stmts, db,
             "SELECT jobs.body, job_specs.body, jobs.version FROM jobs LEFT JOIN job_specs ON "
             "job_specs.id=jobs.spec_id WHERE jobs.id=?");
      s.Bind(1, id);
      const int rc = s.Step();
      if (rc == SQLITE_DONE) return Status::NotFound("no job " + std::to_string(id));
      if (rc != SQLITE_ROW) return SqliteError(db, "read job " + std::to_string(id));
      return DecodeJobRecord(id, s.Int(2), s.Text(0), s.Text(1));
    });
  }

  Result<std::vector<Job>> ListJobs(const JobFilter& filter) override {
    std::string sql =
        "SELECT jobs.id, jobs.body, jobs.spec_id, job_specs.body, jobs.version FROM jobs LEFT "
        "JOIN job_specs ON job_specs.id=jobs.spec_id WHERE 1=1";
    if (filter.user) sql += " AND user=?1";
    if (filter.node) sql += " AND jobs.id IN (SELECT job_id FROM job_nodes WHERE node=?2)";
    if (filter.active_only) sql += " AND state IN ('PENDING','ASSIGNED','RUNNING')";
    if (!filter.states.empty()) {
      sql += " AND state IN (";
      for (size_t i = 0; i < filter.states.size(); ++i) {
        sql += (i ? ",'" : "'") + std::string(jobs::JobStateName(filter.states[i])) + "'";
      }
      sql += ")";
    }
    if (filter.ended_after_us > 0) sql += " AND (end_time_us=0 OR end_time_us>=?3)";
    if (filter.held_after_us > 0) {
      sql += " AND (end_time_us=0 OR end_time_us>=?6 OR late_end_us>=?6)";
    }
    // An array's elements come after its first (whose id is the array's).
    if (filter.array_id > 0) {
      sql += " AND jobs.id>=?4 AND json_extract(jobs.body,'$.array_id')=?4";
    }
    if (!filter.sort.empty()) {
      sql += internal::JobOrderBySql(filter.sort, internal::SqlDialect::kSqlite, "?5");
      if (filter.limit > 0) sql += " LIMIT " + std::to_string(filter.limit);
    } else if (filter.limit > 0) {
      sql += " ORDER BY jobs.id DESC LIMIT " + std::to_string(filter.limit);
    } else {
      sql += " ORDER BY jobs.id";
    }
    // The rows are read on a connection and decoded after letting it go: a listing of
    // every job that ended in the last hour (the metrics' fold) is 100,000s of rows, and
    // while reads shared the writer's lock, decoding them under it held every write
    // (submissions, agents' events) for seconds.
    struct Row {
      int64_t id = 0;
      int64_t version = 0;
      std::string body;
      std::optional<int64_t> spec_id;  // none: a row written whole, before job_specs
    };
    std::vector<Row> rows;
    std::unordered_map<int64_t, std::string> spec_texts;  // read once per spec
    GP_RETURN_IF_ERROR(Read([&](sqlite3* db, StmtCache&) -> Status {
      Stmt s(db, sql.c_str());
      if (!s.ok()) return SqliteError(db, "prepare job listing");
      if (filter.user) s.Bind(1, *filter.user);
      if (filter.node) s.Bind(2, *filter.node);
      if (filter.ended_after_us > 0) s.Bind(3, filter.ended_after_us);
      if (filter.held_after_us > 0) s.Bind(6, filter.held_after_us);
      if (filter.array_id > 0) s.Bind(4, filter.array_id);
      if (internal::JobSortUsesNow(filter.sort)) s.Bind(5, filter.now_us);
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        Row& r = rows.emplace_back();
        r.id = s.Int(0);
        r.version = s.Int(4);
        r.body = s.Text(1);
        if (sqlite3_column_type(s.get(), 2) != SQLITE_NULL) {
          r.spec_id = s.Int(2);
          if (!spec_texts.contains(*r.spec_id)) spec_texts.emplace(*r.spec_id, s.Text(3));
        }
      }
      if (rc != SQLITE_DONE) return SqliteError(db, "list jobs");
      return Status::Ok();
    }));
    std::vector<internal::JobRow> views(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      views[i].id = rows[i].id;
      views[i].version = rows[i].version;
      views[i].body = rows[i].body;
      views[i].spec_id = rows[i].spec_id;
      if (rows[i].spec_id) views[i].spec = spec_texts.at(*rows[i].spec_id);
    }
    return internal::DecodeJobRows(views);
  }

  Status UpdateJobs(const std::vector<JobUpdate>& updates,
                    std::vector<JobConflict>* conflicts) override {
    if (conflicts != nullptr) conflicts->clear();
    // Encoded before the lock: a scheduling pass writes 1,000 jobs at a time, and every
    // other store call (a submission's insert, an agent's events) waits for the lock.
    std::vector<JobRecord> records;
    records.reserve(updates.size());
    std::vector<std::string> holds(updates.size());
    for (size_t k = 0; k < updates.size(); ++k) {
      records.push_back(EncodeJobRecord(updates[k].job));
      if (updates[k].hold) holds[k] = internal::EncodeHoldPlacement(updates[k].hold->placement);
    }
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    for (size_t k = 0; k < updates.size(); ++k) {
      const JobUpdate& u = updates[k];
      const JobRecord& rec = records[k];
      Result<int64_t> spec_id = PutSpec(rec);
      if (!spec_id.ok()) return Rollback(spec_id.status());
      Stmt s(stmts_, db_,
             "UPDATE jobs SET state=?1, node=?2, end_time_us=?3, body=?4, spec_id=?7, "
             "late_end_us=?9, version=version+1 WHERE id=?5 AND state=?6 AND version=?8");
      s.Bind(1, std::string(jobs::JobStateName(u.job.state)));
      s.Bind(2, PrimaryNode(u.job));
      s.Bind(3, u.job.end_time_us);
      s.Bind(4, rec.body);
      s.Bind(5, u.job.id);
      s.Bind(6, std::string(jobs::JobStateName(u.expected)));
      s.Bind(7, *spec_id);
      s.Bind(8, u.expected_version);
      s.Bind(9, internal::LateEndUs(u.job));
      if (s.Step() != SQLITE_DONE) return Rollback(Error("update job"));
      if (sqlite3_changes(db_) == 1) {
        Status nodes = WriteJobNodes(u.job, /*replace=*/true);
        if (nodes.ok() && u.hold) nodes = WriteHold(*u.hold, holds[k]);
        if (!nodes.ok()) return Rollback(nodes);
        continue;
      }
      // Nothing matched: what the batch's jobs are at, as none of it was written (the
      // mutex keeps other writers out until then).
      (void)Rollback(Status::Ok());
      std::map<int64_t, internal::StoredVersion> found;
      Stmt q(db_, "SELECT state, version FROM jobs WHERE id=?");
      for (const JobUpdate& other : updates) {
        q.Reset();
        q.Bind(1, other.job.id);
        const int rc = q.Step();
        if (rc == SQLITE_DONE) continue;
        if (rc != SQLITE_ROW) return Error("read job " + std::to_string(other.job.id));
        const std::optional<JobState> state = jobs::ParseJobState(q.Text(0));
        if (!state)
          return Status::Internal("stored job " + std::to_string(other.job.id) +
                                  " has an unknown state '" + q.Text(0) + "'");
        found[other.job.id] = {*state, q.Int(1)};
      }
      return internal::CasFailure(updates, k, found, conflicts);
    }
    if (Status c = Commit(); !c.ok()) return Rollback(c);
    return Status::Ok();
  }

  Result<std::vector<PreemptHoldRecord>> ListPreemptHolds() override {
    std::vector<std::pair<PreemptHoldRecord, std::string>> rows;
    {
      std::lock_guard lock(mu_);
      Stmt s(db_,
             "SELECT victim, preemptor, placement, grace_end_us FROM preempt_holds ORDER BY "
             "preemptor, victim");
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        rows.push_back({{s.Int(0), s.Int(1), {}, s.Int(3)}, s.Text(2)});
      }
      if (rc != SQLITE_DONE) return Error("list preemption holds");
    }
    std::vector<PreemptHoldRecord> out;
    for (auto& [hold, placement] : rows) {
      GP_ASSIGN_OR_RETURN(hold.placement, internal::DecodeHoldPlacement(placement, hold.preemptor));
      out.push_back(std::move(hold));
    }
    return out;
  }

  Status DeletePreemptHold(int64_t preemptor) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "DELETE FROM preempt_holds WHERE preemptor=?");
    s.Bind(1, preemptor);
    if (s.Step() != SQLITE_DONE)
      return Error("delete the hold of job " + std::to_string(preemptor));
    return Status::Ok();
  }

  Status PutNode(const NodeRecord& n) override {
    std::lock_guard lock(mu_);
    Stmt s(db_,
           "INSERT INTO nodes(name, info_json, agent_url, cpu_milli, memory_mib, registered_us, "
           "last_heartbeat_us, draining, address, protocol, drain_reason, gpu_health, agent_id) "
           "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
           "info_json=excluded.info_json, agent_url=excluded.agent_url, "
           "cpu_milli=excluded.cpu_milli, memory_mib=excluded.memory_mib, "
           "registered_us=excluded.registered_us, last_heartbeat_us=excluded.last_heartbeat_us, "
           "draining=excluded.draining, address=excluded.address, protocol=excluded.protocol, "
           "drain_reason=excluded.drain_reason, gpu_health=excluded.gpu_health, "
           "agent_id=excluded.agent_id");
    s.Bind(1, n.name);
    s.Bind(2, n.info_json);
    s.Bind(3, n.agent_url);
    s.Bind(4, n.cpu_milli);
    s.Bind(5, n.memory_mib);
    s.Bind(6, n.registered_us);
    s.Bind(7, n.last_heartbeat_us);
    s.Bind(8, n.draining ? 1 : 0);
    s.Bind(9, n.address);
    s.Bind(10, n.protocol);
    s.Bind(11, n.drain_reason);
    s.Bind(12, n.gpu_health_json);
    s.Bind(13, n.agent_id);
    if (s.Step() != SQLITE_DONE) return Error("store node " + n.name);
    return Status::Ok();
  }

  Result<std::vector<NodeRecord>> ListNodes() override {
    return Read([&](sqlite3* db, StmtCache&) -> Result<std::vector<NodeRecord>> {
      Stmt s(db,
             "SELECT name, info_json, agent_url, cpu_milli, memory_mib, registered_us, "
             "last_heartbeat_us, draining, address, protocol, drain_reason, gpu_health, "
             "agent_id FROM nodes ORDER BY name");
      std::vector<NodeRecord> out;
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Int(4), s.Int(5), s.Int(6),
                       s.Int(7) != 0, s.Text(8), s.Text(9), s.Text(10), s.Text(11), s.Text(12)});
      }
      if (rc != SQLITE_DONE) return SqliteError(db, "list nodes");
      return out;
    });
  }

  Status PutToken(const TokenRecord& t) override {
    std::lock_guard lock(mu_);
    Stmt s(db_,
           "INSERT INTO tokens(token_hash, user, kind, created_us, expires_us, last_used_us) "
           "VALUES(?,?,?,?,?,?)");
    s.Bind(1, t.token_hash);
    s.Bind(2, t.user);
    s.Bind(3, t.kind);
    s.Bind(4, t.created_us);
    s.Bind(5, t.expires_us);
    s.Bind(6, t.last_used_us);
    if (s.Step() != SQLITE_DONE) return Error("store token");
    return Status::Ok();
  }

  Result<std::optional<TokenRecord>> FindToken(std::string_view hash) override {
    return Read([&](sqlite3* db, StmtCache& stmts) -> Result<std::optional<TokenRecord>> {
      Stmt s(stmts, db,
             "SELECT token_hash, user, kind, created_us, expires_us, last_used_us FROM tokens "
             "WHERE token_hash=?");
      s.Bind(1, std::string(hash));
      const int rc = s.Step();
      if (rc == SQLITE_DONE) return std::optional<TokenRecord>();
      if (rc != SQLITE_ROW) return SqliteError(db, "find token");
      return std::optional<TokenRecord>(
          TokenRecord{s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Int(4), s.Int(5)});
    });
  }

  Result<std::vector<TokenRecord>> ListTokens() override {
    return Read([&](sqlite3* db, StmtCache&) -> Result<std::vector<TokenRecord>> {
      Stmt s(db,
             "SELECT token_hash, user, kind, created_us, expires_us, last_used_us FROM tokens "
             "ORDER BY created_us");
      std::vector<TokenRecord> out;
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Int(3), s.Int(4), s.Int(5)});
      }
      if (rc != SQLITE_DONE) return SqliteError(db, "list tokens");
      return out;
    });
  }

  Status DeleteToken(std::string_view hash) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "DELETE FROM tokens WHERE token_hash=?");
    s.Bind(1, std::string(hash));
    if (s.Step() != SQLITE_DONE) return Error("delete token");
    if (sqlite3_changes(db_) == 0) return Status::NotFound("no such token");
    return Status::Ok();
  }

  Status TouchToken(std::string_view hash, int64_t used_us) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "UPDATE tokens SET last_used_us=? WHERE token_hash=?");
    s.Bind(1, used_us);
    s.Bind(2, std::string(hash));
    if (s.Step() != SQLITE_DONE) return Error("record the use of a token");
    if (sqlite3_changes(db_) == 0) return Status::NotFound("no such token");
    return Status::Ok();
  }

  Status PutEnvironment(const EnvironmentRecord& e) override {
    std::lock_guard lock(mu_);
    Stmt s(db_,
           "INSERT INTO environments(name, version, kind, location, needs_json, owner, "
           "created_us, image_id, dir_digest) VALUES(?,?,?,?,?,?,?,?,?)");
    s.Bind(1, e.name);
    s.Bind(2, e.version);
    s.Bind(3, e.kind);
    s.Bind(4, e.location);
    s.Bind(5, e.needs_json);
    s.Bind(6, e.owner);
    s.Bind(7, e.created_us);
    s.Bind(8, e.image_id);
    s.Bind(9, e.dir_digest);
    const int rc = s.Step();
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      return Status::AlreadyExists("environment " + e.name + ":" + e.version +
                                   " already exists; environments are immutable, add a new "
                                   "version instead");
    }
    if (rc != SQLITE_DONE) return Error("store environment");
    return Status::Ok();
  }

  Result<std::optional<EnvironmentRecord>> FindEnvironment(std::string_view name,
                                                           std::string_view version) override {
    return Read([&](sqlite3* db, StmtCache&) -> Result<std::optional<EnvironmentRecord>> {
      Stmt s(db,
             "SELECT name, version, kind, location, needs_json, owner, created_us, image_id, "
             "dir_digest FROM environments WHERE name=? AND version=?");
      s.Bind(1, std::string(name));
      s.Bind(2, std::string(version));
      const int rc = s.Step();
      if (rc == SQLITE_DONE) return std::optional<EnvironmentRecord>();
      if (rc != SQLITE_ROW) return SqliteError(db, "find environment");
      return std::optional<EnvironmentRecord>(EnvironmentRecord{s.Text(0), s.Text(1), s.Text(2),
                                                                s.Text(3), s.Text(4), s.Text(5),
                                                                s.Int(6), s.Text(7), s.Text(8)});
    });
  }

  Result<std::vector<EnvironmentRecord>> ListEnvironments() override {
    return Read([&](sqlite3* db, StmtCache&) -> Result<std::vector<EnvironmentRecord>> {
      Stmt s(db,
             "SELECT name, version, kind, location, needs_json, owner, created_us, image_id, "
             "dir_digest FROM environments ORDER BY name, version");
      std::vector<EnvironmentRecord> out;
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        out.push_back({s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Text(4), s.Text(5), s.Int(6),
                       s.Text(7), s.Text(8)});
      }
      if (rc != SQLITE_DONE) return SqliteError(db, "list environments");
      return out;
    });
  }

  Status DeleteEnvironment(std::string_view name, std::string_view version) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "DELETE FROM environments WHERE name=? AND version=?");
    s.Bind(1, std::string(name));
    s.Bind(2, std::string(version));
    if (s.Step() != SQLITE_DONE) return Error("delete environment");
    if (sqlite3_changes(db_) == 0) {
      return Status::NotFound("no environment " + std::string(name) + ":" + std::string(version));
    }
    return Status::Ok();
  }

  Status PutSetting(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    Stmt s(db_,
           "INSERT INTO settings(key, value) VALUES(?,?) ON CONFLICT(key) DO UPDATE SET "
           "value=excluded.value, revision=settings.revision+1");
    s.Bind(1, std::string(key));
    s.Bind(2, std::string(value));
    if (s.Step() != SQLITE_DONE) return Error("store setting " + std::string(key));
    return Status::Ok();
  }

  // One statement, so one transaction: the insert of a setting never set, or the update
  // of one still at its expected revision.
  Result<int64_t> PutSettingIf(std::string_view key, std::string_view value,
                               int64_t expected) override {
    if (expected < 0) return Status::InvalidArgument("a setting's revision is 0 or more");
    std::lock_guard lock(mu_);
    Stmt s(db_, expected == 0 ? "INSERT INTO settings(key, value) VALUES(?1,?2) ON CONFLICT(key) "
                                "DO NOTHING"
                              : "UPDATE settings SET value=?2, revision=revision+1 WHERE key=?1 "
                                "AND revision=?3");
    s.Bind(1, std::string(key));
    s.Bind(2, std::string(value));
    if (expected > 0) s.Bind(3, expected);
    if (s.Step() != SQLITE_DONE) return Error("store setting " + std::string(key));
    if (sqlite3_changes(db_) == 1) return expected + 1;
    Stmt r(db_, "SELECT revision FROM settings WHERE key=?");  // under mu_: what lost to
    r.Bind(1, std::string(key));
    const int rc = r.Step();
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error("read setting " + std::string(key));
    return internal::SettingConflictError(key, rc == SQLITE_ROW ? r.Int(0) : 0, expected);
  }

  Status PutTelemetry(const std::vector<TelemetryRecord>& points) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Stmt s(db_,
           "INSERT OR REPLACE INTO telemetry(scope, key, t_ms, util_sum, samples, peak_pct, "
           "mem_max_mib, used_gpu_s, gpus) VALUES(?,?,?,?,?,?,?,?,?)");
    if (!s.ok()) return Rollback(Error("prepare telemetry insert"));
    for (const TelemetryRecord& p : points) {
      s.Reset();
      s.Bind(1, p.scope);
      s.Bind(2, p.key);
      s.Bind(3, p.t_ms);
      s.BindDouble(4, p.util_sum);
      s.Bind(5, p.samples);
      s.BindDouble(6, p.peak_pct);
      s.Bind(7, p.mem_max_mib);
      s.BindDouble(8, p.used_gpu_s);
      s.Bind(9, static_cast<int64_t>(p.gpus));
      if (s.Step() != SQLITE_DONE) return Rollback(Error("store telemetry"));
    }
    s.Reset();  // no statement left running at COMMIT
    if (Status c = Commit(); !c.ok()) return Rollback(c);
    return Status::Ok();
  }

  Result<std::vector<TelemetryRecord>> ListTelemetry(const TelemetryQuery& q) override {
    GP_ASSIGN_OR_RETURN(TelemetrySelect select, BuildTelemetrySelect(q));
    return Read([&](sqlite3* db, StmtCache&) -> Result<std::vector<TelemetryRecord>> {
      Stmt s(db, select.sql.c_str());
      if (!s.ok()) return SqliteError(db, "prepare telemetry query");
      for (size_t i = 0; i < select.params.size(); ++i) {
        const int n = static_cast<int>(i + 1);
        if (const auto* v = std::get_if<int64_t>(&select.params[i])) {
          s.Bind(n, *v);
        } else {
          s.Bind(n, std::get<std::string>(select.params[i]));
        }
      }
      std::vector<TelemetryRecord> out;
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        out.push_back({s.Text(0), s.Text(1), s.Int(2), s.Double(3), s.Int(4), s.Double(5), s.Int(6),
                       s.Double(7), static_cast<int>(s.Int(8))});
      }
      if (rc != SQLITE_DONE) return SqliteError(db, "list telemetry");
      return out;
    });
  }

  Result<int64_t> DeleteTelemetryBefore(int64_t before_ms) override {
    std::lock_guard lock(mu_);
    Stmt s(db_, "DELETE FROM telemetry WHERE t_ms < ?");
    s.Bind(1, before_ms);
    if (s.Step() != SQLITE_DONE) return Error("delete old telemetry");
    return static_cast<int64_t>(sqlite3_changes(db_));
  }

  Result<std::optional<std::string>> GetSetting(std::string_view key) override {
    GP_ASSIGN_OR_RETURN(SettingRecord r, GetSettingRecord(key));
    return std::move(r.value);
  }

  Result<SettingRecord> GetSettingRecord(std::string_view key) override {
    return Read([&](sqlite3* db, StmtCache&) -> Result<SettingRecord> {
      Stmt s(db, "SELECT value, revision FROM settings WHERE key=?");
      s.Bind(1, std::string(key));
      const int rc = s.Step();
      if (rc == SQLITE_ROW) return SettingRecord{s.Text(0), s.Int(1)};
      if (rc != SQLITE_DONE) return SqliteError(db, "read setting " + std::string(key));
      return SettingRecord{};
    });
  }

 private:
  // Inside a transaction: job_nodes gets one row per node of the job's tasks.
  Status WriteJobNodes(const Job& job, bool replace) {
    if (replace) {
      Stmt d(stmts_, db_, "DELETE FROM job_nodes WHERE job_id=?");
      d.Bind(1, job.id);
      if (d.Step() != SQLITE_DONE) return Error("clear the job's nodes");
    }
    for (const std::string& node : JobNodes(job)) {
      Stmt i(stmts_, db_, "INSERT INTO job_nodes(job_id, node) VALUES(?,?)");
      i.Bind(1, job.id);
      i.Bind(2, node);
      if (i.Step() != SQLITE_DONE) return Error("record the job's nodes");
    }
    return Status::Ok();
  }

  // Inside a transaction: a victim's row of a hold, `placement` encoded.
  Status WriteHold(const PreemptHoldRecord& h, const std::string& placement) {
    Stmt s(stmts_, db_,
           "INSERT OR REPLACE INTO preempt_holds(victim, preemptor, placement, grace_end_us) "
           "VALUES(?,?,?,?)");
    s.Bind(1, h.victim);
    s.Bind(2, h.preemptor);
    s.Bind(3, placement);
    s.Bind(4, h.grace_end_us);
    if (s.Step() != SQLITE_DONE)
      return Error("store the hold of job " + std::to_string(h.preemptor));
    return Status::Ok();
  }

  Status Exec(const std::string& sql) {
    char* err = nullptr;
    if (const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err); rc != SQLITE_OK) {
      std::string msg = err != nullptr ? err : "unknown error";
      sqlite3_free(err);
      return internal::SqliteStatus(rc, "sqlite: " + msg);
    }
    return Status::Ok();
  }
  Status Error(const std::string& what) { return SqliteError(db_, what); }
  // Inside a write transaction: COMMIT, after the test hook.
  Status Commit() {
    if (before_commit_) before_commit_();
    return Exec("COMMIT");
  }
  // `read(db, stmts)` on a read connection (a reader's snapshot: the last commit before
  // its statement's first step), or on the writer under mu_ when there is none. A reader
  // runs beside every write; one statement outside a transaction is one snapshot.
  template <typename F>
  auto Read(F&& read) -> decltype(read(std::declval<sqlite3*>(), std::declval<StmtCache&>())) {
    if (readers_ == nullptr) {
      std::lock_guard lock(mu_);
      return read(db_, stmts_);
    }
    SqliteReadPool::Lease reader = readers_->Take();
    return read(reader.db(), reader.stmts());
  }
  Status Rollback(Status s) {
    (void)Exec("ROLLBACK");
    return s;
  }
  // Inside a transaction: `job` as a new row (its spec, its nodes and its submit_key
  // too), at version 1, with id job.id (0: the next one). Its id.
  Result<int64_t> InsertRow(const Job& job) {
    const JobRecord rec = EncodeJobRecord(job);  // the id is the row's, not in the body
    GP_ASSIGN_OR_RETURN(int64_t spec_id, PutSpec(rec));
    Stmt s(stmts_, db_,
           "INSERT INTO jobs(id, user, state, node, end_time_us, body, spec_id, late_end_us, "
           "version) VALUES(NULLIF(?,0),?,?,?,?,?,?,?,1)");
    if (!s.ok()) return Error("prepare insert");
    s.Bind(1, job.id);
    s.Bind(2, job.user);
    s.Bind(3, std::string(jobs::JobStateName(job.state)));
    s.Bind(4, PrimaryNode(job));
    s.Bind(5, job.end_time_us);
    s.Bind(6, rec.body);
    s.Bind(7, spec_id);
    s.Bind(8, internal::LateEndUs(job));
    if (s.Step() != SQLITE_DONE) return Error("insert job");
    const int64_t id = sqlite3_last_insert_rowid(db_);
    Job stored = job;
    stored.id = id;
    GP_RETURN_IF_ERROR(WriteJobNodes(stored, /*replace=*/false));
    if (!job.submit_key.empty()) {
      Stmt k(db_, "INSERT INTO submit_keys(uid, key, job_id) VALUES(?,?,?)");
      k.Bind(1, static_cast<int64_t>(job.uid));
      k.Bind(2, job.submit_key);
      k.Bind(3, id);
      const int rc = k.Step();
      if ((rc & 0xff) == SQLITE_CONSTRAINT) {
        return Status::AlreadyExists("submit_key '" + job.submit_key + "' was used before by uid " +
                                     std::to_string(job.uid));
      }
      if (rc != SQLITE_DONE) return Error("store submit key");
    }
    return id;
  }

  // The id of the job_specs row holding `rec`'s spec, added when none does yet. Inside
  // the caller's transaction.
  Result<int64_t> PutSpec(const JobRecord& rec) {
    Stmt find(stmts_, db_, "SELECT id FROM job_specs WHERE hash=?");
    find.Bind(1, rec.spec_hash);
    int rc = find.Step();
    if (rc == SQLITE_ROW) return find.Int(0);
    if (rc != SQLITE_DONE) return Error("find job spec");
    Stmt add(stmts_, db_, "INSERT INTO job_specs(hash, body) VALUES(?,?)");
    add.Bind(1, rec.spec_hash);
    add.Bind(2, rec.spec);
    if (add.Step() != SQLITE_DONE) return Error("store job spec");
    return sqlite3_last_insert_rowid(db_);
  }

  static constexpr int kBusyTimeoutMs = 5000;
  std::mutex mu_;  // the writer's: every write, and the reads when there are no readers
  sqlite3* db_;
  StmtCache stmts_;  // under mu_
  bool wal_ = false;
  std::function<void()> before_commit_;
  std::unique_ptr<SqliteReadPool> readers_;  // null: an in-memory database, or none asked
};

}  // namespace

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& path,
                                               SqliteStoreOptions options) {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Status::Unavailable("cannot open the store '" + path + "': " + msg +
                               ": check that the state directory exists and is writable");
  }
  auto store = std::make_unique<SqliteStore>(db, std::move(options.before_commit));
  GP_RETURN_IF_ERROR(store->Init().WithContext("store '" + path + "'"));
  GP_RETURN_IF_ERROR(store->OpenReaders(options.read_connections));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace gpupool::store
