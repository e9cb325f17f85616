// The PostgreSQL store's migrations (schema.h).
#include "store/schema.h"
#include "store/telemetry_query.h"

namespace gpupool::store::internal {
namespace {

const char* const kPgMigrations[] = {
    R"sql(
CREATE TABLE jobs (
  id BIGSERIAL PRIMARY KEY,
  username TEXT NOT NULL,
  state TEXT NOT NULL,
  node TEXT NOT NULL DEFAULT '',
  end_time_us BIGINT NOT NULL DEFAULT 0,
  body TEXT NOT NULL
);
CREATE INDEX jobs_state ON jobs(state);
CREATE INDEX jobs_user ON jobs(username);
CREATE TABLE job_nodes (
  job_id BIGINT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  node TEXT NOT NULL,
  PRIMARY KEY (job_id, node)
);
CREATE INDEX job_nodes_node ON job_nodes(node);
CREATE TABLE nodes (
  name TEXT COLLATE "C" PRIMARY KEY,
  info_json TEXT NOT NULL,
  agent_url TEXT NOT NULL,
  cpu_milli BIGINT NOT NULL,
  memory_mib BIGINT NOT NULL,
  registered_us BIGINT NOT NULL,
  last_heartbeat_us BIGINT NOT NULL,
  draining BOOLEAN NOT NULL,
  address TEXT NOT NULL DEFAULT '',
  protocol TEXT NOT NULL DEFAULT '',
  drain_reason TEXT NOT NULL DEFAULT ''
);
CREATE TABLE tokens (
  token_hash TEXT PRIMARY KEY,
  username TEXT NOT NULL,
  kind TEXT NOT NULL,
  created_us BIGINT NOT NULL,
  expires_us BIGINT NOT NULL DEFAULT 0,
  last_used_us BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE environments (
  name TEXT COLLATE "C" NOT NULL,
  version TEXT COLLATE "C" NOT NULL,
  kind TEXT NOT NULL,
  location TEXT NOT NULL,
  needs_json TEXT NOT NULL,
  owner TEXT NOT NULL,
  created_us BIGINT NOT NULL,
  image_id TEXT NOT NULL DEFAULT '',
  dir_digest TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (name, version)
);
CREATE TABLE settings (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
)sql",
    // Submissions' idempotency keys (a retried submit is created once), per uid.
    R"sql(
CREATE TABLE submit_keys (
  uid BIGINT NOT NULL,
  key TEXT COLLATE "C" NOT NULL,
  job_id BIGINT NOT NULL,
  PRIMARY KEY (uid, key)
);
)sql",
    // Leadership among controllers sharing this database (lease.h): one row, the lease,
    // whose epoch every fenced write checks; and the controllers alive, for `status`.
    R"sql(
CREATE TABLE leader_lease (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  holder TEXT NOT NULL DEFAULT '',
  address TEXT NOT NULL DEFAULT '',
  epoch BIGINT NOT NULL DEFAULT 0,
  acquired_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
  expires_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch'
);
INSERT INTO leader_lease(id) VALUES (1);
CREATE TABLE controllers (
  id TEXT COLLATE "C" PRIMARY KEY,
  address TEXT NOT NULL,
  started_at TIMESTAMPTZ NOT NULL,
  last_seen TIMESTAMPTZ NOT NULL
);
)sql",
    // GPU telemetry: 1-minute points of GPUs and jobs (controller/telemetry.h), kept for
    // the retention the controller is given.
    R"sql(
CREATE TABLE telemetry (
  scope TEXT COLLATE "C" NOT NULL,
  key TEXT COLLATE "C" NOT NULL,
  t_ms BIGINT NOT NULL,
  util_sum DOUBLE PRECISION NOT NULL,
  samples BIGINT NOT NULL,
  peak_pct DOUBLE PRECISION NOT NULL,
  mem_max_mib BIGINT NOT NULL,
  used_gpu_s DOUBLE PRECISION NOT NULL,
  gpus INTEGER NOT NULL,
  PRIMARY KEY (scope, key, t_ms)
);
CREATE INDEX telemetry_time ON telemetry(t_ms);
)sql",
    // Telemetry's per-job totals ("job_total", at the job's first minute) and the pool's
    // minutes ("pool"), which the controller keeps for the whole retention while GPU and
    // job minutes stay in its memory for a window only: made from the points stored so far.
    kTelemetryTotalsFromPoints,
    // Submissions stored once per distinct content (job_record.h): an array's elements
    // share one. Rows written before keep their whole job in body (spec_id NULL) until
    // their next update.
    R"sql(
CREATE TABLE job_specs (
  id BIGSERIAL PRIMARY KEY,
  hash TEXT COLLATE "C" NOT NULL UNIQUE,
  body TEXT NOT NULL
);
ALTER TABLE jobs ADD COLUMN spec_id BIGINT REFERENCES job_specs(id);
)sql",
    // Each job's version (jobs::Job::version): every update is a compare-and-set on its
    // state and version, and stores the version + 1. The jobs stored before are at 1.
    R"sql(
ALTER TABLE jobs ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
)sql",
    // GPU health (docs/health.md): the node's GPUs that are not healthy.
    R"sql(
ALTER TABLE nodes ADD COLUMN gpu_health TEXT NOT NULL DEFAULT '';
)sql",
    // The victims' GPUs held for their preemptor (PreemptHoldRecord), one row per victim.
    R"sql(
CREATE TABLE preempt_holds (
  victim BIGINT PRIMARY KEY,
  preemptor BIGINT NOT NULL,
  placement TEXT NOT NULL,
  grace_end_us BIGINT NOT NULL
);
CREATE INDEX preempt_holds_preemptor ON preempt_holds(preemptor);
)sql",
    // Each setting's revision (SettingRecord): every write adds 1, and PutSettingIf is a
    // compare-and-set on it. Settings stored before were written once at least: 1.
    R"sql(
ALTER TABLE settings ADD COLUMN revision BIGINT NOT NULL DEFAULT 1;
)sql",
    // The id of the agent that registered each node last (NodeRecord::agent_id).
    "ALTER TABLE nodes ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';",
    // When a job's GPUs were let go after its end (LateEndUs, job_record.h: a lost task's
    // or attempt's end reported late), which usage windows select on. Filled from the
    // bodies of the ended jobs that hold a late end ("late_end_time_us", or an earlier
    // attempt's "lost_time_us"/"late_reason").
    R"sql(
ALTER TABLE jobs ADD COLUMN late_end_us BIGINT NOT NULL DEFAULT 0;
UPDATE jobs SET late_end_us=GREATEST(COALESCE((body::jsonb->>'late_end_time_us')::BIGINT, 0),
  COALESCE((SELECT MAX((a.v->>'end_time_us')::BIGINT)
            FROM jsonb_array_elements(body::jsonb->'earlier_attempts') AS a(v)), 0))
  WHERE end_time_us>0 AND body LIKE '%"late%';
UPDATE jobs SET late_end_us=0 WHERE late_end_us>0 AND late_end_us<=end_time_us;
)sql",
};

}  // namespace

std::span<const char* const> PostgresMigrations() { return kPgMigrations; }

}  // namespace gpupool::store::internal
