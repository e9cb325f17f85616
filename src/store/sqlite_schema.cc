// The SQLite store's migrations (schema.h).
#include "store/schema.h"
#include "store/telemetry_query.h"

namespace gpupool::store::internal {
namespace {

const char* const kMigrations[] = {
    R"sql(
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user TEXT NOT NULL,
  state TEXT NOT NULL,
  node TEXT NOT NULL DEFAULT '',
  end_time_us INTEGER NOT NULL DEFAULT 0,
  body TEXT NOT NULL
);
CREATE INDEX jobs_state ON jobs(state);
CREATE INDEX jobs_user ON jobs(user);
CREATE INDEX jobs_node ON jobs(node);
CREATE TABLE nodes (
  name TEXT PRIMARY KEY,
  info_json TEXT NOT NULL,
  agent_url TEXT NOT NULL,
  cpu_milli INTEGER NOT NULL,
  memory_mib INTEGER NOT NULL,
  registered_us INTEGER NOT NULL,
  last_heartbeat_us INTEGER NOT NULL,
  draining INTEGER NOT NULL
);
CREATE TABLE tokens (
  token_hash TEXT PRIMARY KEY,
  user TEXT NOT NULL,
  kind TEXT NOT NULL,
  created_us INTEGER NOT NULL
);
)sql",
    R"sql(
CREATE TABLE environments (
  name TEXT NOT NULL,
  version TEXT NOT NULL,
  kind TEXT NOT NULL,
  location TEXT NOT NULL,
  needs_json TEXT NOT NULL,
  owner TEXT NOT NULL,
  created_us INTEGER NOT NULL,
  PRIMARY KEY (name, version)
);
)sql",
    // What a named environment is pinned to: an image's id, a directory's digest.
    R"sql(
ALTER TABLE environments ADD COLUMN image_id TEXT NOT NULL DEFAULT '';
ALTER TABLE environments ADD COLUMN dir_digest TEXT NOT NULL DEFAULT '';
)sql",
    // Tokens may expire, and record (coarsely) when they were last used.
    R"sql(
ALTER TABLE tokens ADD COLUMN expires_us INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tokens ADD COLUMN last_used_us INTEGER NOT NULL DEFAULT 0;
)sql",
    // Where a node's peers reach it, and the agent protocol it speaks.
    R"sql(
ALTER TABLE nodes ADD COLUMN address TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN protocol TEXT NOT NULL DEFAULT '';
)sql",
    // Why an admin drained a node.
    R"sql(
ALTER TABLE nodes ADD COLUMN drain_reason TEXT NOT NULL DEFAULT '';
)sql",
    // Pool-wide settings (the usage limits).
    R"sql(
CREATE TABLE settings (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
)sql",
    // Every node of a job's tasks (a gang has several; the node column holds the first),
    // filled from the placements in the stored job bodies.
    R"sql(
CREATE TABLE job_nodes (
  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  node TEXT NOT NULL,
  PRIMARY KEY (job_id, node)
) WITHOUT ROWID;
CREATE INDEX job_nodes_node ON job_nodes(node);
INSERT OR IGNORE INTO job_nodes(job_id, node)
  SELECT jobs.id, json_extract(p.value, '$.node') FROM jobs, json_each(jobs.body, '$.placement') AS p
  WHERE json_extract(p.value, '$.node') IS NOT NULL;
)sql",
    // Submissions' idempotency keys (a retried submit is created once), per uid.
    R"sql(
CREATE TABLE submit_keys (
  uid INTEGER NOT NULL,
  key TEXT NOT NULL,
  job_id INTEGER NOT NULL,
  PRIMARY KEY (uid, key)
) WITHOUT ROWID;
)sql",
    // GPU telemetry: 1-minute points of GPUs and jobs (controller/telemetry.h), kept for
    // the retention the controller is given.
    R"sql(
CREATE TABLE telemetry (
  scope TEXT NOT NULL,
  key TEXT NOT NULL,
  t_ms INTEGER NOT NULL,
  util_sum REAL NOT NULL,
  samples INTEGER NOT NULL,
  peak_pct REAL NOT NULL,
  mem_max_mib INTEGER NOT NULL,
  used_gpu_s REAL NOT NULL,
  gpus INTEGER NOT NULL,
  PRIMARY KEY (scope, key, t_ms)
) WITHOUT ROWID;
CREATE INDEX telemetry_time ON telemetry(t_ms);
)sql",
    // Telemetry's per-job totals ("job_total", at the job's first minute) and the pool's
    // minutes ("pool"), which the controller keeps for the whole retention while GPU and
    // job minutes stay in its memory for a window only: made from the points stored so far.
    kTelemetryTotalsFromPoints,
    // Submissions stored once per distinct content (job_record.h): an array's elements
    // share one. Rows written before keep their whole job in body (spec_id NULL) until
    // their next update. Every write of spec_id comes after its job_specs row in the
    // same transaction, and specs are never deleted (nor jobs), so no foreign key is
    // declared (one would keep the column from ever being dropped).
    R"sql(
CREATE TABLE job_specs (
  id INTEGER PRIMARY KEY,
  hash TEXT NOT NULL UNIQUE,
  body TEXT NOT NULL
);
ALTER TABLE jobs ADD COLUMN spec_id INTEGER;
)sql",
    // Each job's version (jobs::Job::version): every update is a compare-and-set on its
    // state and version, and stores the version + 1. The jobs stored before are at 1.
    R"sql(
ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
)sql",
    // GPU health (docs/health.md): the node's GPUs that are not healthy.
    R"sql(
ALTER TABLE nodes ADD COLUMN gpu_health TEXT NOT NULL DEFAULT '';
)sql",
    // The victims' GPUs held for their preemptor (PreemptHoldRecord), one row per victim.
    R"sql(
CREATE TABLE preempt_holds (
  victim INTEGER PRIMARY KEY,
  preemptor INTEGER NOT NULL,
  placement TEXT NOT NULL,
  grace_end_us INTEGER NOT NULL
);
CREATE INDEX preempt_holds_preemptor ON preempt_holds(preemptor);
)sql",
    // Each setting's revision (SettingRecord): every write adds 1, and PutSettingIf is a
    // compare-and-set on it. Settings stored before were written once at least: 1.
    R"sql(
ALTER TABLE settings ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;
)sql",
    // The id of the agent that registered each node last (NodeRecord::agent_id).
    R"sql(
ALTER TABLE nodes ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
)sql",
    // When a job's GPUs were let go after its end (LateEndUs, job_record.h: a lost task's
    // or attempt's end reported late), which usage windows select on. Filled from the
    // bodies of the ended jobs that hold a late end ("late_end_time_us", or an earlier
    // attempt's "lost_time_us"/"late_reason").
    R"sql(
ALTER TABLE jobs ADD COLUMN late_end_us INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET late_end_us=MAX(COALESCE(json_extract(body, '$.late_end_time_us'), 0),
  COALESCE((SELECT MAX(json_extract(a.value, '$.end_time_us'))
            FROM json_each(jobs.body, '$.earlier_attempts') AS a), 0))
  WHERE end_time_us>0 AND body LIKE '%"late%';
UPDATE jobs SET late_end_us=0 WHERE late_end_us>0 AND late_end_us<=end_time_us;
)sql",
};

}  // namespace

std::span<const char* const> SqliteMigrations() { return kMigrations; }

}  // namespace gpupool::store::internal
