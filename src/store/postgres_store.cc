// PostgreSQL implementation of Store, over libpq. A PostgresStore is one connection
// guarded by a mutex; OpenPostgresStore opens kPostgresStoreConnections of them behind a StorePool
// (store_pool.h), so that a slow statement (a database across a network, a slow disk)
// holds one connection rather than every caller. Every value goes to the server as a parameter
// (PQexecParams); SQL text is built only from constants and placeholder numbers. A dropped
// connection is re-established at the next call. Job bodies are JSON beside the indexed columns,
// and job_nodes holds every node a job's tasks were placed on (a gang has several).
#include "store/postgres_store.h"

#include <libpq-fe.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "common/json.h"
#include "common/strings.h"
#include "jobs/job_json.h"
#include "store/job_cas.h"
#include "store/job_nodes.h"
#include "store/job_record.h"
#include "store/job_sort_sql.h"
#include "store/lease.h"
#include "store/pg_session.h"
#include "store/preempt_hold_row.h"
#include "store/schema.h"
#include "store/store_pool.h"
#include "store/telemetry_query.h"

namespace gpupool::store {
namespace {

using internal::JobNodes;
using internal::PrimaryNode;
using jobs::Job;
using jobs::JobState;

// Held while migrating, so two controllers starting at once migrate one after the other.
constexpr const char* kMigrationLockKey = "7450863113";

using internal::Connect;
using internal::Params;
using internal::PgResult;
using internal::PgSession;

class PostgresStore final : public Store, private PgSession {
 public:
  PostgresStore(PGconn* conn, std::string target) : PgSession(conn, std::move(target)) {}

  Status Init() {
    std::lock_guard lock(mu_);
    const auto known = static_cast<int64_t>(internal::PostgresMigrations().size());
    for (;;) {
      GP_RETURN_IF_ERROR(Begin());
      Status s = Run("SELECT pg_advisory_xact_lock($1)", {kMigrationLockKey}, "lock for migration")
                     .status();
      if (s.ok()) {
        s = Run("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)", {},
                "create schema_version")
                .status();
      }
      int64_t version = 0;
      if (s.ok()) {
        Result<PgResult> r = Run("SELECT version FROM schema_version", {}, "read schema_version");
        if (!r.ok()) {
          s = r.status();
        } else if (r->Rows() > 0) {
          version = r->Int(0, 0);
        } else {
          s = Run("INSERT INTO schema_version(version) VALUES(0)", {}, "init schema_version")
                  .status();
        }
      }
      if (s.ok() && version > known) {
        s = Status::FailedPrecondition("the store's schema version " + std::to_string(version) +
                                       " is newer than this gpupool understands (" +
                                       std::to_string(known) +
                                       "): run a newer gpupool or restore a backup");
      }
      if (!s.ok()) return Rollback(s);
      if (version == known) return Commit();
      // Migrations hold several statements and no values: the simple protocol runs them.
      PgResult m(PQexec(conn_, internal::PostgresMigrations()[static_cast<size_t>(version)]));
      if (!m.ok()) {
        return Rollback(
            Error(m, "").WithContext("schema migration " + std::to_string(version + 1)));
      }
      s = Run("UPDATE schema_version SET version=$1", {std::to_string(version + 1)},
              "record schema version")
              .status();
      if (!s.ok()) return Rollback(s);
      GP_RETURN_IF_ERROR(Commit());
    }
  }

  // Two round trips: the ids (sequences are outside transactions: an id is never reused,
  // even when the insert fails), then the fence check, the jobs, their nodes and their
  // submission keys as one pipelined transaction. The array's id is known before it.
  Result<std::vector<Job>> InsertJobs(std::vector<Job> jobs, InsertAs as) override {
    if (jobs.empty()) return jobs;
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult seq, Run("SELECT nextval('jobs_id_seq') FROM "
                                          "generate_series(1, $1::INT)",
                                          {std::to_string(jobs.size())}, "allocate job ids"));
    if (static_cast<size_t>(seq.Rows()) != jobs.size()) {
      return Status::Internal("postgresql: asked for " + std::to_string(jobs.size()) +
                              " job ids, got " + std::to_string(seq.Rows()));
    }
    std::vector<int64_t> ids;
    ids.reserve(jobs.size());
    for (int i = 0; i < seq.Rows(); ++i) ids.push_back(seq.Int(i, 0));
    std::sort(ids.begin(), ids.end());
    std::vector<Stmt> stmts;
    const size_t fence_at = AddFenceCheck(&stmts);
    std::set<std::string> specs;          // added in this transaction already
    std::map<size_t, const Job*> key_at;  // statement index -> the job whose key it stores
    for (size_t k = 0; k < jobs.size(); ++k) {
      Job& job = jobs[k];
      job.id = ids[k];
      job.version = 1;
      if (as == InsertAs::kArray) {
        job.array_id = ids[0];
        if (k > 0) job.submit_key.clear();  // the first element holds the array's
      }
      const std::string id = std::to_string(job.id);
      const internal::JobRecord rec = internal::EncodeJobRecord(job);
      if (specs.insert(rec.spec_hash).second) AddSpec(rec, &stmts);
      stmts.push_back(
          {"INSERT INTO jobs(id, username, state, node, end_time_us, body, spec_id, late_end_us, "
           "version) VALUES($1,$2,$3,$4,$5,$6,(SELECT id FROM job_specs WHERE hash=$7),$8,1)",
           {id, job.user, std::string(jobs::JobStateName(job.state)), PrimaryNode(job),
            std::to_string(job.end_time_us), rec.body, rec.spec_hash,
            std::to_string(internal::LateEndUs(job))}});
      AddJobNodes(job, /*replace=*/false, &stmts);
      if (!job.submit_key.empty()) {
        key_at[stmts.size()] = &job;
        stmts.push_back({"INSERT INTO submit_keys(uid, key, job_id) VALUES($1,$2,$3)",
                         {std::to_string(job.uid), job.submit_key, id}});
      }
    }
    GP_ASSIGN_OR_RETURN(Batch b, Pipeline(stmts, "insert jobs"));
    if (b.failed == Batch::kAllRan) return jobs;
    const PgResult& r = b.results[b.failed];
    if (b.failed == fence_at) return Fenced(r);
    if (auto key = key_at.find(b.failed);
        key != key_at.end() && r.SqlState() == "23505") {  // unique_violation
      return Status::AlreadyExists("submit_key '" + key->second->submit_key +
                                   "' was used before by uid " + std::to_string(key->second->uid));
    }
    return Error(r, "insert jobs");
  }

  Result<std::optional<int64_t>> FindSubmitKey(uint32_t uid, std::string_view key) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r,
                        Run("SELECT job_id FROM submit_keys WHERE uid=$1 AND key=$2",
                            {std::to_string(uid), std::string(key)}, "read submit key"));
    if (r.Rows() == 0) return std::optional<int64_t>();
    return std::optional<int64_t>(r.Int(0, 0));
  }

  Result<Job> GetJob(int64_t id) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r,
                        Run("SELECT jobs.body, job_specs.body, jobs.version FROM jobs LEFT JOIN "
                            "job_specs ON job_specs.id=jobs.spec_id WHERE jobs.id=$1",
                            {std::to_string(id)}, "read job " + std::to_string(id)));
    if (r.Rows() == 0) return Status::NotFound("no job " + std::to_string(id));
    return internal::DecodeJobRecord(id, r.Int(0, 2), r.Text(0, 0), r.Text(0, 1));
  }

  Result<std::vector<Job>> ListJobs(const JobFilter& filter) override {
    Params params;
    auto param = [&params](std::string v) {
      params.push_back(std::move(v));
      return "$" + std::to_string(params.size());
    };
    // In id order (a controller's load), a spec's text comes only on the first of a run
    // of rows that refer to it (an array's elements): NULL on the others, whose text is
    // the row before's. 300,000 queued elements read 52 MB less.
    const bool by_id = filter.sort.empty() && filter.limit <= 0;
    std::string sql = std::string("SELECT jobs.id, jobs.body, jobs.spec_id, ") +
                      (by_id ? "CASE WHEN jobs.spec_id IS DISTINCT FROM lag(jobs.spec_id) OVER "
                               "(ORDER BY jobs.id) THEN job_specs.body END"
                             : "job_specs.body") +
                      ", jobs.version FROM jobs LEFT JOIN job_specs ON "
                      "job_specs.id=jobs.spec_id WHERE TRUE";
    if (filter.user) sql += " AND username=" + param(*filter.user);
    if (filter.node) {
      sql +=
          " AND jobs.id IN (SELECT job_id FROM job_nodes WHERE node=" + param(*filter.node) + ")";
    }
    if (filter.active_only) sql += " AND state IN ('PENDING','ASSIGNED','RUNNING')";
    if (!filter.states.empty()) {
      sql += " AND state IN (";
      for (size_t i = 0; i < filter.states.size(); ++i) {
        sql += (i ? "," : "") + param(std::string(jobs::JobStateName(filter.states[i])));
      }
      sql += ")";
    }
    if (filter.ended_after_us > 0) {
      sql += " AND (end_time_us=0 OR end_time_us>=" + param(std::to_string(filter.ended_after_us)) +
             ")";
    }
    if (filter.held_after_us > 0) {
      const std::string after = param(std::to_string(filter.held_after_us));
      sql += " AND (end_time_us=0 OR end_time_us>=" + after + " OR late_end_us>=" + after + ")";
    }
    if (filter.array_id > 0) {
      // An array's elements come after its first (whose id is the array's).
      sql += " AND jobs.id>=" + param(std::to_string(filter.array_id)) +
             " AND (jobs.body::json->>'array_id')=" + param(std::to_string(filter.array_id));
    }
    if (!filter.sort.empty()) {
      const std::string now = internal::JobSortUsesNow(filter.sort)
                                  ? param(std::to_string(filter.now_us))
                                  : std::string("0");
      sql += internal::JobOrderBySql(filter.sort, internal::SqlDialect::kPostgres, now);
      if (filter.limit > 0) sql += " LIMIT " + param(std::to_string(filter.limit));
    } else if (filter.limit > 0) {
      sql += " ORDER BY jobs.id DESC LIMIT " + param(std::to_string(filter.limit));
    } else {
      sql += " ORDER BY jobs.id";
    }
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r, Run(sql, params, "list jobs"));
    std::vector<internal::JobRow> rows(static_cast<size_t>(r.Rows()));
    for (int i = 0; i < r.Rows(); ++i) {
      internal::JobRow& row = rows[static_cast<size_t>(i)];
      row.id = r.Int(i, 0);
      row.version = r.Int(i, 4);
      row.body = r.View(i, 1);
      if (!r.IsNull(i, 2)) {  // NULL: a row written whole, before job_specs
        row.spec_id = r.Int(i, 2);
        row.spec = r.View(i, 3);
        if (by_id && i > 0 && r.IsNull(i, 3) &&
            rows[static_cast<size_t>(i) - 1].spec_id == row.spec_id) {
          row.spec = rows[static_cast<size_t>(i) - 1].spec;
        }
      }
    }
    return internal::DecodeJobRows(rows);  // views into `r`, which lives until it returns
  }

  // One round trip: every compare-and-set and the jobs' nodes, pipelined as one
  // transaction. A compare-and-set that matches no row fails on purpose (a division by
  // zero), which rolls the whole back; a read afterwards says why.
  Status UpdateJobs(const std::vector<JobUpdate>& updates,
                    std::vector<JobConflict>* conflicts) override {
    if (conflicts != nullptr) conflicts->clear();
    if (updates.empty()) return Status::Ok();
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    std::vector<Stmt> stmts;
    const size_t fence_at = AddFenceCheck(&stmts);
    std::map<size_t, size_t> sets;  // statement index -> index in `updates`
    for (size_t k = 0; k < updates.size(); ++k) {
      const JobUpdate& u = updates[k];
      const internal::JobRecord rec = internal::EncodeJobRecord(u.job);
      AddSpec(rec, &stmts);
      sets[stmts.size()] = k;
      stmts.push_back(
          {"WITH set AS (UPDATE jobs SET state=$1, node=$2, end_time_us=$3, "
           "body=$4, spec_id=(SELECT id FROM job_specs WHERE hash=$7), late_end_us=$9, "
           "version=version+1 WHERE id=$5 AND state=$6 AND version=$8 RETURNING 1) "
           "SELECT 1 / COUNT(*)::INT FROM set",
           {std::string(jobs::JobStateName(u.job.state)), PrimaryNode(u.job),
            std::to_string(u.job.end_time_us), rec.body, std::to_string(u.job.id),
            std::string(jobs::JobStateName(u.expected)), rec.spec_hash,
            std::to_string(u.expected_version), std::to_string(internal::LateEndUs(u.job))}});
      AddJobNodes(u.job, /*replace=*/true, &stmts);
      if (u.hold) {
        stmts.push_back(
            {"INSERT INTO preempt_holds(victim, preemptor, placement, grace_end_us) "
             "VALUES($1,$2,$3,$4) ON CONFLICT(victim) DO UPDATE SET preemptor=EXCLUDED.preemptor, "
             "placement=EXCLUDED.placement, grace_end_us=EXCLUDED.grace_end_us",
             {std::to_string(u.hold->victim), std::to_string(u.hold->preemptor),
              internal::EncodeHoldPlacement(u.hold->placement),
              std::to_string(u.hold->grace_end_us)}});
      }
    }
    GP_ASSIGN_OR_RETURN(Batch b, Pipeline(stmts, "update job"));
    if (b.failed == Batch::kAllRan) return Status::Ok();
    const PgResult& r = b.results[b.failed];
    if (b.failed == fence_at) return Fenced(r);
    auto set = sets.find(b.failed);
    if (set == sets.end() || r.SqlState() != "22012") {  // division_by_zero: nothing matched
      return Error(r, "update job");
    }
    // What the batch's jobs are at now, to say which changed (or are missing).
    std::string ids = "{";
    for (const JobUpdate& u : updates) {
      ids += (ids.size() > 1 ? "," : "") + std::to_string(u.job.id);
    }
    ids += "}";
    GP_ASSIGN_OR_RETURN(PgResult q, Run("SELECT id, state, version FROM jobs WHERE id = "
                                        "ANY($1::BIGINT[])",
                                        {ids}, "read job states"));
    std::map<int64_t, internal::StoredVersion> found;
    for (int i = 0; i < q.Rows(); ++i) {
      const std::optional<JobState> state = jobs::ParseJobState(q.Text(i, 1));
      if (!state) {
        return Status::Internal("stored job " + q.Text(i, 0) + " has an unknown state '" +
                                q.Text(i, 1) + "'");
      }
      found[q.Int(i, 0)] = {*state, q.Int(i, 2)};
    }
    return internal::CasFailure(updates, set->second, found, conflicts);
  }

  Result<std::vector<PreemptHoldRecord>> ListPreemptHolds() override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r, Run("SELECT victim, preemptor, placement, grace_end_us FROM "
                                        "preempt_holds ORDER BY preemptor, victim",
                                        {}, "list preemption holds"));
    std::vector<PreemptHoldRecord> out;
    for (int i = 0; i < r.Rows(); ++i) {
      PreemptHoldRecord& h = out.emplace_back();
      h.victim = r.Int(i, 0);
      h.preemptor = r.Int(i, 1);
      GP_ASSIGN_OR_RETURN(h.placement, internal::DecodeHoldPlacement(r.Text(i, 2), h.preemptor));
      h.grace_end_us = r.Int(i, 3);
    }
    return out;
  }

  Status DeletePreemptHold(int64_t preemptor) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&] {
      return Run("DELETE FROM preempt_holds WHERE preemptor=$1", {std::to_string(preemptor)},
                 "delete the hold of job " + std::to_string(preemptor))
          .status();
    });
  }

  Status PutNode(const NodeRecord& n) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&] {
      return Run("INSERT INTO nodes(name, info_json, agent_url, cpu_milli, memory_mib, "
                 "registered_us, last_heartbeat_us, draining, address, protocol, drain_reason, "
                 "gpu_health, agent_id) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13) "
                 "ON CONFLICT(name) DO UPDATE SET info_json=EXCLUDED.info_json, "
                 "agent_url=EXCLUDED.agent_url, cpu_milli=EXCLUDED.cpu_milli, "
                 "memory_mib=EXCLUDED.memory_mib, registered_us=EXCLUDED.registered_us, "
                 "last_heartbeat_us=EXCLUDED.last_heartbeat_us, draining=EXCLUDED.draining, "
                 "address=EXCLUDED.address, protocol=EXCLUDED.protocol, "
                 "drain_reason=EXCLUDED.drain_reason, gpu_health=EXCLUDED.gpu_health, "
                 "agent_id=EXCLUDED.agent_id",
                 {n.name, n.info_json, n.agent_url, std::to_string(n.cpu_milli),
                  std::to_string(n.memory_mib), std::to_string(n.registered_us),
                  std::to_string(n.last_heartbeat_us), n.draining ? "true" : "false", n.address,
                  n.protocol, n.drain_reason, n.gpu_health_json, n.agent_id},
                 "store node " + n.name)
          .status();
    });
  }

  Result<std::vector<NodeRecord>> ListNodes() override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(
        PgResult r, Run("SELECT name, info_json, agent_url, cpu_milli, memory_mib, registered_us, "
                        "last_heartbeat_us, draining, address, protocol, drain_reason, "
                        "gpu_health, agent_id FROM nodes ORDER BY name",
                        {}, "list nodes"));
    std::vector<NodeRecord> out;
    out.reserve(static_cast<size_t>(r.Rows()));
    for (int i = 0; i < r.Rows(); ++i) {
      out.push_back({r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Int(i, 3), r.Int(i, 4),
                     r.Int(i, 5), r.Int(i, 6), r.Bool(i, 7), r.Text(i, 8), r.Text(i, 9),
                     r.Text(i, 10), r.Text(i, 11), r.Text(i, 12)});
    }
    return out;
  }

  Status PutToken(const TokenRecord& t) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&] {
      return Run("INSERT INTO tokens(token_hash, username, kind, created_us, expires_us, "
                 "last_used_us) VALUES($1,$2,$3,$4,$5,$6)",
                 {t.token_hash, t.user, t.kind, std::to_string(t.created_us),
                  std::to_string(t.expires_us), std::to_string(t.last_used_us)},
                 "store token")
          .status();
    });
  }

  Result<std::optional<TokenRecord>> FindToken(std::string_view hash) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r,
                        Run("SELECT token_hash, username, kind, created_us, expires_us, "
                            "last_used_us FROM tokens WHERE token_hash=$1",
                            {std::string(hash)}, "find token"));
    if (r.Rows() == 0) return std::optional<TokenRecord>();
    return std::optional<TokenRecord>(Token(r, 0));
  }

  Result<std::vector<TokenRecord>> ListTokens() override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r, Run("SELECT token_hash, username, kind, created_us, "
                                        "expires_us, last_used_us FROM tokens ORDER BY "
                                        "created_us, token_hash",
                                        {}, "list tokens"));
    std::vector<TokenRecord> out;
    out.reserve(static_cast<size_t>(r.Rows()));
    for (int i = 0; i < r.Rows(); ++i) out.push_back(Token(r, i));
    return out;
  }

  Status DeleteToken(std::string_view hash) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&]() -> Status {
      GP_ASSIGN_OR_RETURN(PgResult r, Run("DELETE FROM tokens WHERE token_hash=$1",
                                          {std::string(hash)}, "delete token"));
      if (r.Affected() == 0) return Status::NotFound("no such token");
      return Status::Ok();
    });
  }

  Status TouchToken(std::string_view hash, int64_t used_us) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&]() -> Status {
      GP_ASSIGN_OR_RETURN(PgResult r, Run("UPDATE tokens SET last_used_us=$1 WHERE token_hash=$2",
                                          {std::to_string(used_us), std::string(hash)},
                                          "record the use of a token"));
      if (r.Affected() == 0) return Status::NotFound("no such token");
      return Status::Ok();
    });
  }

  Status PutEnvironment(const EnvironmentRecord& e) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    const Params params = {e.name,
                           e.version,
                           e.kind,
                           e.location,
                           e.needs_json,
                           e.owner,
                           std::to_string(e.created_us),
                           e.image_id,
                           e.dir_digest};
    return FencedWrite([&]() -> Status {
      PgResult r = Exec(
          "INSERT INTO environments(name, version, kind, location, needs_json, owner, "
          "created_us, image_id, dir_digest) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9)",
          params);
      if (r.SqlState() == "23505") {  // unique_violation
        return Status::AlreadyExists("environment " + e.name + ":" + e.version +
                                     " already exists; environments are immutable, add a new "
                                     "version instead");
      }
      if (!r.ok()) return Error(r, "store environment");
      return Status::Ok();
    });
  }

  Result<std::optional<EnvironmentRecord>> FindEnvironment(std::string_view name,
                                                           std::string_view version) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r,
                        Run("SELECT name, version, kind, location, needs_json, owner, "
                            "created_us, image_id, dir_digest FROM environments "
                            "WHERE name=$1 AND version=$2",
                            {std::string(name), std::string(version)}, "find environment"));
    if (r.Rows() == 0) return std::optional<EnvironmentRecord>();
    return std::optional<EnvironmentRecord>(Environment(r, 0));
  }

  Result<std::vector<EnvironmentRecord>> ListEnvironments() override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r, Run("SELECT name, version, kind, location, needs_json, owner, "
                                        "created_us, image_id, dir_digest FROM environments "
                                        "ORDER BY name, version",
                                        {}, "list environments"));
    std::vector<EnvironmentRecord> out;
    out.reserve(static_cast<size_t>(r.Rows()));
    for (int i = 0; i < r.Rows(); ++i) out.push_back(Environment(r, i));
    return out;
  }

  Status DeleteEnvironment(std::string_view name, std::string_view version) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&]() -> Status {
      GP_ASSIGN_OR_RETURN(PgResult r,
                          Run("DELETE FROM environments WHERE name=$1 AND version=$2",
                              {std::string(name), std::string(version)}, "delete environment"));
      if (r.Affected() == 0) {
        return Status::NotFound("no environment " + std::string(name) + ":" + std::string(version));
      }
      return Status::Ok();
    });
  }

  Status PutSetting(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return FencedWrite([&] {
      return Run("INSERT INTO settings(key, value) VALUES($1,$2) ON CONFLICT(key) DO UPDATE "
                 "SET value=EXCLUDED.value, revision=settings.revision+1",
                 {std::string(key), std::string(value)}, "store setting " + std::string(key))
          .status();
    });
  }

  // One statement: the insert of a setting never set, or the update of one still at its
  // expected revision. A writer that got there first makes it match no row (READ
  // COMMITTED rechecks the WHERE on the row it waited for), then the read says what won.
  Result<int64_t> PutSettingIf(std::string_view key, std::string_view value,
                               int64_t expected) override {
    if (expected < 0) return Status::InvalidArgument("a setting's revision is 0 or more");
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    const std::string what = "store setting " + std::string(key);
    GP_RETURN_IF_ERROR(FencedWrite([&]() -> Status {
      GP_ASSIGN_OR_RETURN(
          PgResult r,
          expected == 0
              ? Run("INSERT INTO settings(key, value) VALUES($1,$2) ON CONFLICT(key) DO "
                    "NOTHING",
                    {std::string(key), std::string(value)}, what)
              : Run("UPDATE settings SET value=$2, revision=revision+1 WHERE key=$1 "
                    "AND revision=$3",
                    {std::string(key), std::string(value), std::to_string(expected)}, what));
      if (r.Affected() == 1) return Status::Ok();
      GP_ASSIGN_OR_RETURN(PgResult now, Run("SELECT revision FROM settings WHERE key=$1",
                                            {std::string(key)}, what));
      return internal::SettingConflictError(key, now.Rows() > 0 ? now.Int(0, 0) : 0, expected);
    }));
    return expected + 1;
  }

  Status PutTelemetry(const std::vector<TelemetryRecord>& points) override {
    if (points.empty()) return Status::Ok();
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    std::vector<Stmt> stmts;
    const size_t fence_at = AddFenceCheck(&stmts);
    for (const TelemetryRecord& p : points) {
      stmts.push_back(
          {"INSERT INTO telemetry(scope, key, t_ms, util_sum, samples, peak_pct, mem_max_mib, "
           "used_gpu_s, gpus) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT(scope, key, t_ms) "
           "DO UPDATE SET util_sum=EXCLUDED.util_sum, samples=EXCLUDED.samples, "
           "peak_pct=EXCLUDED.peak_pct, mem_max_mib=EXCLUDED.mem_max_mib, "
           "used_gpu_s=EXCLUDED.used_gpu_s, gpus=EXCLUDED.gpus",
           {p.scope, p.key, std::to_string(p.t_ms), Real(p.util_sum), std::to_string(p.samples),
            Real(p.peak_pct), std::to_string(p.mem_max_mib), Real(p.used_gpu_s),
            std::to_string(p.gpus)}});
    }
    GP_ASSIGN_OR_RETURN(Batch b, Pipeline(stmts, "store telemetry"));
    if (b.failed == Batch::kAllRan) return Status::Ok();
    if (b.failed == fence_at) return Fenced(b.results[b.failed]);
    return Error(b.results[b.failed], "store telemetry");
  }

  Result<std::vector<TelemetryRecord>> ListTelemetry(const TelemetryQuery& q) override {
    GP_ASSIGN_OR_RETURN(TelemetrySelect select, BuildTelemetrySelect(q));
    Params params;
    for (const auto& v : select.params) {
      params.push_back(std::holds_alternative<int64_t>(v) ? std::to_string(std::get<int64_t>(v))
                                                          : std::get<std::string>(v));
    }
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r, Run(select.sql, params, "list telemetry"));
    std::vector<TelemetryRecord> out;
    out.reserve(static_cast<size_t>(r.Rows()));
    for (int i = 0; i < r.Rows(); ++i) {
      out.push_back({r.Text(i, 0), r.Text(i, 1), r.Int(i, 2),
                     std::strtod(r.Text(i, 3).c_str(), nullptr), r.Int(i, 4),
                     std::strtod(r.Text(i, 5).c_str(), nullptr), r.Int(i, 6),
                     std::strtod(r.Text(i, 7).c_str(), nullptr), static_cast<int>(r.Int(i, 8))});
    }
    return out;
  }

  Result<int64_t> DeleteTelemetryBefore(int64_t before_ms) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    int64_t deleted = 0;
    GP_RETURN_IF_ERROR(FencedWrite([&]() -> Status {
      GP_ASSIGN_OR_RETURN(PgResult r, Run("DELETE FROM telemetry WHERE t_ms < $1",
                                          {std::to_string(before_ms)}, "delete old telemetry"));
      deleted = r.Affected();
      return Status::Ok();
    }));
    return deleted;
  }

  Result<std::optional<std::string>> GetSetting(std::string_view key) override {
    GP_ASSIGN_OR_RETURN(SettingRecord r, GetSettingRecord(key));
    return std::move(r.value);
  }

  Result<SettingRecord> GetSettingRecord(std::string_view key) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(PgResult r, Run("SELECT value, revision FROM settings WHERE key=$1",
                                        {std::string(key)}, "read setting " + std::string(key)));
    if (r.Rows() == 0) return SettingRecord{};
    return SettingRecord{r.Text(0, 0), r.Int(0, 1)};
  }

  void SetFence(int64_t epoch, std::function<void(const Status&)> on_fenced) override {
    std::lock_guard lock(mu_);
    on_fenced_ = std::move(on_fenced);
    fence_epoch_ = epoch;
  }

 private:
  // With a fence, the first statement of a pipelined write: it fails (a division by zero)
  // unless the lease is still at this controller's epoch, and holds the lease row's KEY
  // SHARE lock to the end of the transaction. That lock conflicts only with FOR UPDATE,
  // which a takeover takes (postgres_lease_store.cc), so a takeover waits for the writes
  // in flight; the leader's renewal (an UPDATE of the lease's end alone, FOR NO KEY
  // UPDATE) does not conflict with it, so the leader's own writes never hold its renewal
  // up. (FOR SHARE did: a stream of overlapping writes kept the renewal waiting until its
  // lock_timeout, and the leader lost its lease to its own write load.) Its index, or
  // SIZE_MAX without a fence.
  size_t AddFenceCheck(std::vector<Stmt>* stmts) const {
    const int64_t fence = fence_epoch_;
    if (fence == 0) return SIZE_MAX;
    stmts->push_back({"SELECT 1 / (epoch = $1)::INT FROM leader_lease WHERE id=1 FOR KEY SHARE",
                      {std::to_string(fence)}});
    return stmts->size() - 1;
  }

  // The answer to a failed fence check: another controller leads.
  Status Fenced(const PgResult& r) {
    if (r.SqlState() != "22012") return Error(r, "check the lease");
    Status lost = Status::FailedPrecondition(
        "this controller led at epoch " + std::to_string(fence_epoch_.load()) +
        " but another controller leads now, so this one writes nothing");
    if (on_fenced_) on_fenced_(lost);
    return lost;
  }

  // The job's nodes, one row per node of its tasks (replacing what was there).
  static void AddJobNodes(const Job& job, bool replace, std::vector<Stmt>* stmts) {
    const std::string id = std::to_string(job.id);
    if (replace) stmts->push_back({"DELETE FROM job_nodes WHERE job_id=$1", {id}});
    for (const std::string& node : JobNodes(job)) {
      stmts->push_back({"INSERT INTO job_nodes(job_id, node) VALUES($1,$2)", {id, node}});
    }
  }

  // A one-statement write: as it is without a fence, else in a transaction that first
  // runs the pipelined writes' fence check (AddFenceCheck), so both fail alike (Fenced).
  Status FencedWrite(const std::function<Status()>& write) {
    std::vector<Stmt> check;
    if (AddFenceCheck(&check) == SIZE_MAX) return write();
    GP_RETURN_IF_ERROR(Begin());
    if (PgResult r = Exec(check[0].sql, check[0].params); !r.ok()) return Rollback(Fenced(r));
    Status s = write();
    if (!s.ok()) return Rollback(s);
    return Commit();
  }

  // A double as text that reads back as the same double.
  static std::string Real(double v) { return StrFormat("%.17g", v); }

  static TokenRecord Token(const PgResult& r, int i) {
    return {r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Int(i, 3), r.Int(i, 4), r.Int(i, 5)};
  }
  static EnvironmentRecord Environment(const PgResult& r, int i) {
    return {r.Text(i, 0), r.Text(i, 1), r.Text(i, 2), r.Text(i, 3), r.Text(i, 4),
            r.Text(i, 5), r.Int(i, 6),  r.Text(i, 7), r.Text(i, 8)};
  }

  // The job_specs row for `rec`'s spec, unless one exists. Two transactions adding one
  // spec at once: the second waits on the unique index for the first, then adds nothing,
  // and its next statement (a new snapshot, READ COMMITTED) finds the first's row.
  static void AddSpec(const internal::JobRecord& rec, std::vector<Stmt>* stmts) {
    stmts->push_back(
        {"INSERT INTO job_specs(hash, body) VALUES($1,$2) ON CONFLICT (hash) DO "
         "NOTHING",
         {rec.spec_hash, rec.spec}});
  }

  std::mutex mu_;
  std::atomic<int64_t> fence_epoch_{0};  // 0: writes are not fenced
  std::function<void(const Status&)> on_fenced_;
};

}  // namespace

std::string RedactConninfo(const std::string& conninfo) {
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
  if (err != nullptr) PQfreemem(err);  // its text may quote the password
  if (opts == nullptr) return "(a PostgreSQL connection string libpq cannot parse)";
  std::string out;
  for (const PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || *o->val == '\0' || std::string_view(o->keyword) == "password") {
      continue;
    }
    std::string v = o->val;
    if (v.find_first_of(" '\\") != std::string::npos) {
      v.insert(0, 1, '\'');
      v += '\'';
    }
    if (!out.empty()) out += ' ';
    out += std::string(o->keyword) + "=" + v;
  }
  PQconninfoFree(opts);
  return "'" + out + "'";
}

namespace {

// A transaction idle this long is ended by the server: a controller paused in the middle
// of a write (SIGSTOP, a stalled VM) would otherwise hold its key share lock on the lease row
// and keep a standby from taking over.
constexpr const char* kStoreSessionOptions = "-c idle_in_transaction_session_timeout=3000";

}  // namespace

Result<std::unique_ptr<Store>> OpenPostgresStore(const std::string& conninfo) {
  const std::string target = RedactConninfo(conninfo);
  std::vector<std::unique_ptr<Store>> connections;
  for (int i = 0; i < kPostgresStoreConnections; ++i) {
    GP_ASSIGN_OR_RETURN(PGconn * conn, Connect(conninfo, target, kStoreSessionOptions));
    auto store = std::make_unique<PostgresStore>(conn, target);
    // The first brings the schema up to date; the others find it so.
    if (i == 0) GP_RETURN_IF_ERROR(store->Init().WithContext("store " + target));
    connections.push_back(std::move(store));
  }
  return MakeStorePool(std::move(connections));
}

}  // namespace gpupool::store
