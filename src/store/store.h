// Store: the controller's durable state (jobs, nodes, API tokens).
//
// Every job write is a compare-and-set: UpdateJobs carries the state and the version
// (jobs::Job::version) the writer read, and the store refuses the write when the stored
// job has either changed since (another writer got there first), so a transition is
// never applied twice nor over one the writer did not see. Implementations are
// thread-safe. The conformance tests in store_conformance_test.cc run against every
// implementation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "jobs/job.h"
#include "jobs/job_sort.h"

namespace gpupool::store {

struct JobFilter {
  std::optional<std::string> user;     // only this user's jobs
  std::vector<jobs::JobState> states;  // empty = any state
  bool active_only = false;            // PENDING, ASSIGNED, RUNNING
  std::optional<std::string> node;     // placed on this node, by any task of a gang
  int64_t ended_after_us = 0;          // terminal jobs whose end_time_us is before this: out
  // Terminal jobs whose GPUs were all let go before this are left out: those ending
  // before it, unless the end of a lost task or attempt, reported late, is at or after it
  // (Job::late_end_time_us, an EarlierAttempt's end_time_us: docs/health.md, "An end
  // reported late"). A usage window's jobs (GET /v1/usage).
  int64_t held_after_us = 0;
  size_t limit = 0;  // 0 = no limit; newest first when limited
  // In this order (jobs/job_sort.h; ties by id), the first `limit` of it when limited;
  // empty: by id as above. `now_us`: the time wait and runtime run to.
  std::vector<jobs::JobSortKey> sort;
  int64_t now_us = 0;
  // Only the elements of this array (jobs whose array_id is this; 0 = any job). Read from
  // the job bodies of the ids from array_id on: its cost grows with the jobs submitted
  // since the array, not with the whole table.
  int64_t array_id = 0;
};

struct NodeRecord {
  std::string name;
  std::string info_json;  // the node's GPUs as `gpupool gpus --json` prints them
  std::string agent_url;  // how the controller reaches the agent, if it does
  int64_t cpu_milli = 0;  // the node's schedulable CPU and memory
  int64_t memory_mib = 0;
  int64_t registered_us = 0;
  int64_t last_heartbeat_us = 0;
  bool draining = false;     // `gpupool node drain`: nothing new starts there
  std::string address;       // where the node's peers reach it (agent --address)
  std::string protocol;      // the agent protocol version it registered with, "1.1"
  std::string drain_reason;  // why, and who drained it
  // The health of its GPUs that are not healthy, by UUID, as JSON (docs/health.md;
  // the controller's encoding); empty: all healthy.
  std::string gpu_health_json;
  // The id of the agent that registered it last (Registration::agent_id; "" for an agent
  // that sent none): a second agent under its name is refused after a controller's
  // restart as before it.
  std::string agent_id;
  friend bool operator==(const NodeRecord&, const NodeRecord&) = default;
};

struct TokenRecord {
  std::string token_hash;  // SHA-256 of the token, hex; the token itself is never stored
  std::string user;        // kind "node": the node the token belongs to
  std::string kind;        // "user", "node" or "metrics"
  int64_t created_us = 0;
  int64_t expires_us = 0;    // refused from this time on; 0 = never
  int64_t last_used_us = 0;  // coarse (written at most about once a minute); 0 = never used
  friend bool operator==(const TokenRecord&, const TokenRecord&) = default;
};

// A named environment (`gpupool env add NAME:VERSION`): immutable once stored.
struct EnvironmentRecord {
  std::string name;
  std::string version;
  std::string kind;        // "image" or "dir"
  std::string location;    // the image reference or the directory
  std::string needs_json;  // jobs::EnvNeeds as JSON (jobs/job_json.h)
  std::string owner;       // who registered it
  int64_t created_us = 0;
  std::string image_id;    // kind "image": the full image id it runs; "" for records made
                           // before ids were recorded (they run `location`)
  std::string dir_digest;  // kind "dir": the tree's digest at registration ("sha256:..."),
                           // envcheck/tree_digest.h; "" for records made before digests
  friend bool operator==(const EnvironmentRecord&, const EnvironmentRecord&) = default;
};

// One point of a telemetry series (controller/telemetry.h): one minute of one GPU (scope
// "gpu", key "NODE/INDEX") or of one job (scope "job", key its id). Sums, so that a point
// can be merged with more samples and minutes merged into longer steps.
struct TelemetryRecord {
  std::string scope;
  std::string key;
  int64_t t_ms = 0;     // the minute's start
  double util_sum = 0;  // sum of the utilisation samples (percent)
  int64_t samples = 0;  // how many
  double peak_pct = 0;  // the highest one
  int64_t mem_max_mib = 0;
  double used_gpu_s = 0;  // share x utilisation x time, in GPU-seconds (jobs)
  int gpus = 0;           // GPUs that contributed
  friend bool operator==(const TelemetryRecord&, const TelemetryRecord&) = default;
};

// Which telemetry points ListTelemetry returns, and how it merges them.
struct TelemetryQuery {
  int64_t since_ms = 0;          // points with t_ms >= since_ms ...
  int64_t until_ms = INT64_MAX;  // ... and t_ms < until_ms
  std::string scope;             // "gpu" or "job"; "" both
  std::string key;               // this key only; "" any
  std::string key_prefix;        // keys starting with this ("NODE/": a node's GPUs); "" any
  // 0: the points as stored. > 0 (a multiple of 60,000): each key's points merged per step,
  // t_ms being the step's start (t_ms - t_ms % step_ms): util_sum, samples and used_gpu_s
  // summed, peak_pct, mem_max_mib and gpus the highest. kTelemetryWholeRange: one record
  // per key, at t_ms 0.
  int64_t step_ms = 0;
  // With step_ms > 0: the keys merged too (one record per scope and step, key ""), with
  // mem_max_mib and gpus summed over the keys (what they held together).
  bool merge_keys = false;
};
inline constexpr int64_t kTelemetryWholeRange = INT64_MAX;

// One victim's part of a hold (docs/preemption.md, "The victims' GPUs are held for the
// job that preempted them"): the preemption of `victim` for `preemptor`, with the
// placement planned for the preemptor (the victims' GPUs), held for it until the
// preemptor starts or waits no more, or the hold expires (the controller's rule, from
// grace_end_us). A preemptor's hold is the rows naming it; written with the victim's
// preemption (JobUpdate::hold), in its transaction.
struct PreemptHoldRecord {
  int64_t victim = 0;
  int64_t preemptor = 0;
  std::vector<jobs::TaskPlacement> placement;  // planned for the preemptor
  int64_t grace_end_us = 0;                    // the victim's grace runs out then
  friend bool operator==(const PreemptHoldRecord&, const PreemptHoldRecord&) = default;
};

// A job whose compare-and-set lost: what the store holds and what the writer expected.
struct JobConflict {
  int64_t id = 0;
  jobs::JobState state = jobs::JobState::kPending;  // stored
  int64_t version = 0;                              // stored
  jobs::JobState expected = jobs::JobState::kPending;
  int64_t expected_version = 0;
  friend bool operator==(const JobConflict&, const JobConflict&) = default;
};

// Whether `s` is the answer of a compare-and-set that lost (UpdateJobs, PutSettingIf):
// another writer changed the job (the setting) since it was read, and the caller may read
// it again and retry. Other FailedPrecondition answers (a fenced store: another
// controller leads) are not.
bool IsConflict(const Status& s);

// A setting as stored: its value (nullopt when never set) and its revision, 0 when never
// set, 1 after its first write, and one more at every write after.
struct SettingRecord {
  std::optional<std::string> value;
  int64_t revision = 0;
  friend bool operator==(const SettingRecord&, const SettingRecord&) = default;
};

// How InsertJobs stores its jobs.
enum class InsertAs {
  kJobs,   // each as it is
  kArray,  // the elements of one array: see InsertJobs
};

class Store {
 public:
  virtual ~Store() = default;

  // Inserts new jobs in one transaction, all or none, and returns them as stored: each
  // with its id (ids increase, in the order of `jobs`, and are never reused; other jobs
  // may be stored between them) and version 1; `jobs`' ids and versions are not read.
  // A job with a submit_key records it for its uid in the same transaction.
  // As kArray, `jobs` are the elements of one array, in index order: the first one's id
  // is the array's, and every element is stored with it as array_id (set in the same
  // transaction); the first element holds the array's submit_key, and the others are
  // stored without one. Their array_id and the others' submit_key are not read.
  // Errors, with nothing stored: AlreadyExists when a uid used a submit_key before (or
  // twice in `jobs`); FailedPrecondition when the store is fenced (SetFence); Unavailable
  // or Internal when the database fails.
  virtual Result<std::vector<jobs::Job>> InsertJobs(std::vector<jobs::Job> jobs, InsertAs as) = 0;
  // One job, as InsertJobs: its id. It is stored at version 1.
  Result<int64_t> InsertJob(const jobs::Job& job) {
    GP_ASSIGN_OR_RETURN(std::vector<jobs::Job> stored, InsertJobs({job}, InsertAs::kJobs));
    return stored.at(0).id;
  }
  // The job a uid's submit_key created, if any.
  virtual Result<std::optional<int64_t>> FindSubmitKey(uint32_t uid, std::string_view key) = 0;
  // The job with its stored version. NotFound for an unknown id.
  virtual Result<jobs::Job> GetJob(int64_t id) = 0;
  // Jobs in id order (newest first when filter.limit is set), with their versions.
  virtual Result<std::vector<jobs::Job>> ListJobs(const JobFilter& filter) = 0;

  // A compare-and-set of one job: `job` (matched by its id) replaces the stored job if
  // that is still in state `expected` at version `expected_version` (what the writer
  // read), and is stored at version expected_version + 1. job.version is not read, and
  // the store does not change the caller's copy: after a successful write the caller
  // sets its copy's version to expected_version + 1.
  struct JobUpdate {
    jobs::Job job;
    jobs::JobState expected;
    int64_t expected_version = 0;
    // With a preemption: its hold, stored (replacing the victim's row, if any) in the
    // same transaction as the update, so a hold is stored if and only if the update is.
    std::optional<PreemptHoldRecord> hold;
  };
  // Several compare-and-sets in one transaction: all or none. A job may appear more than
  // once (each later update expects what the one before it writes).
  // Errors, with nothing written:
  // - FailedPrecondition, IsConflict() true, when a stored job's state or version is not
  //   the expected one: another writer changed it since it was read. The message names
  //   the first such job of `updates`, its state and version found and expected; with
  //   `conflicts` (may be null), every such job is listed there (a job that appears more
  //   than once is compared at its first update), so the caller can retry the others.
  // - NotFound when a job of `updates` does not exist (before any conflict).
  // - FailedPrecondition, IsConflict() false, when the store is fenced (SetFence).
  // - Unavailable or Internal when the database fails.
  virtual Status UpdateJobs(const std::vector<JobUpdate>& updates,
                            std::vector<JobConflict>* conflicts) = 0;
  // One such compare-and-set, with the same errors.
  Status UpdateJob(const jobs::Job& job, jobs::JobState expected, int64_t expected_version) {
    return UpdateJobs({{job, expected, expected_version}}, nullptr);
  }

  // The preemption holds (PreemptHoldRecord) stored, by preemptor, then victim.
  // Unavailable or Internal when the database fails.
  virtual Result<std::vector<PreemptHoldRecord>> ListPreemptHolds() = 0;
  // Deletes every row of `preemptor`'s hold (none: Ok). FailedPrecondition when the
  // store is fenced; Unavailable or Internal when the database fails.
  virtual Status DeletePreemptHold(int64_t preemptor) = 0;

  virtual Status PutNode(const NodeRecord& node) = 0;
  virtual Result<std::vector<NodeRecord>> ListNodes() = 0;

  virtual Status PutToken(const TokenRecord& token) = 0;
  virtual Result<std::optional<TokenRecord>> FindToken(std::string_view token_hash) = 0;
  // Oldest first.
  virtual Result<std::vector<TokenRecord>> ListTokens() = 0;
  // NotFound when absent.
  virtual Status DeleteToken(std::string_view token_hash) = 0;
  // Records a use of the token (last_used_us); NotFound when absent.
  virtual Status TouchToken(std::string_view token_hash, int64_t used_us) = 0;

  // AlreadyExists when NAME:VERSION is taken (environments never change once added).
  virtual Status PutEnvironment(const EnvironmentRecord& env) = 0;
  virtual Result<std::optional<EnvironmentRecord>> FindEnvironment(std::string_view name,
                                                                   std::string_view version) = 0;
  // By name, then version.
  virtual Result<std::vector<EnvironmentRecord>> ListEnvironments() = 0;
  // NotFound when absent.
  virtual Status DeleteEnvironment(std::string_view name, std::string_view version) = 0;

  // Pool-wide settings an admin changes at run time (the usage limits: "limits"), as
  // text, usually JSON. nullopt when never set. Each setting has a revision
  // (SettingRecord): every write, PutSetting's too, stores the revision + 1.
  // PutSetting: FailedPrecondition when fenced; Unavailable or Internal when the
  // database fails.
  virtual Status PutSetting(std::string_view key, std::string_view value) = 0;
  virtual Result<std::optional<std::string>> GetSetting(std::string_view key) = 0;
  // The setting with its revision (0 and no value when never set).
  virtual Result<SettingRecord> GetSettingRecord(std::string_view key) = 0;
  // A compare-and-set, in one transaction: stores `value` if the setting is still at
  // `expected_revision` (0: never set), and returns the new revision (expected + 1).
  // Errors, with nothing written: FailedPrecondition, IsConflict() true, when the stored
  // revision is another (another writer changed it since it was read; the message names
  // both); FailedPrecondition, IsConflict() false, when fenced; InvalidArgument for a
  // negative expected_revision; Unavailable or Internal when the database fails.
  virtual Result<int64_t> PutSettingIf(std::string_view key, std::string_view value,
                                       int64_t expected_revision) = 0;

  // Telemetry series points. PutTelemetry inserts or replaces (by scope, key, t_ms), all
  // or nothing. ListTelemetry: the points `q` asks for, by scope, key and t_ms.
  // DeleteTelemetryBefore drops points with t_ms < before_ms and says how many. A store
  // without the table answers Unimplemented (the controller then keeps series in memory).
  virtual Status PutTelemetry(const std::vector<TelemetryRecord>& points) {
    (void)points;
    return Status(StatusCode::kUnimplemented, "this store keeps no telemetry");
  }
  virtual Result<std::vector<TelemetryRecord>> ListTelemetry(const TelemetryQuery& q) {
    (void)q;
    return Status(StatusCode::kUnimplemented, "this store keeps no telemetry");
  }
  virtual Result<int64_t> DeleteTelemetryBefore(int64_t before_ms) {
    (void)before_ms;
    return Status(StatusCode::kUnimplemented, "this store keeps no telemetry");
  }

  // Fenced writes, for several controllers on one database (lease.h): from now on every
  // write first checks, in its own transaction, that the leadership lease is still at
  // `epoch`. When another controller has taken the lease since, the write changes
  // nothing and fails (FailedPrecondition), and `on_fenced` runs (the daemon exits). A
  // store that one controller owns alone (SQLite) has nothing to check and ignores it.
  // NOLINTNEXTLINE(performance-unnecessary-value-param): a sink; overrides keep it (move)
  virtual void SetFence(int64_t epoch, std::function<void(const Status&)> on_fenced) {
    (void)epoch;
    (void)on_fenced;
  }
};

}  // namespace gpupool::store
