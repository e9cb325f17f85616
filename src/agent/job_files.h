// The files in a run's directory (STATE/jobs/<job>/<task>.<attempt>/, run_id.h) through
// which a shim and any agent incarnation talk:
//
//   spec.json    what to run (written by the launcher, read by the shim), mode 0600
//   shim.json    the running shim: pid, its kernel start time, the job's pid, start time;
//                created once, then rewritten in place under flock (RewriteFileLocked)
//   status.json  the final status, written once by the shim just before it exits
//   stdout.log, stderr.log   the job's output, owned by the job's user, mode 0600
//   shim.log     the shim's own diagnostics; created only when it has something to say (a
//                job that starts and ends normally leaves none)
//
// Every JSON file is replaced atomically (temporary file, fsync, rename), or for shim.json
// rewritten under an exclusive flock that its readers share, so a reader sees the old
// file, the new one, or none. Each file created costs an inode allocation, which on ext4
// is most of a trivial job's cost (docs/benchmarks.md): keep the count down. Plain
// functions; thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/job_env.h"
#include "agent/launcher.h"
#include "common/status.h"

namespace gpupool::agent {

inline constexpr char kSpecFile[] = "spec.json";
inline constexpr char kShimFile[] = "shim.json";
inline constexpr char kStatusFile[] = "status.json";
inline constexpr char kStdoutFile[] = "stdout.log";
inline constexpr char kStderrFile[] = "stderr.log";
inline constexpr char kShimLogFile[] = "shim.log";
inline constexpr char kScriptFile[] = "script";  // a submitted script's copy
inline constexpr char kHostFile[] = "hostfile";  // a gang's hosts (GPUPOOL_HOSTFILE)

// What the launcher hands the shim.
struct ShimConfig {
  LaunchSpec spec;
  std::string cgroup_root;     // empty = no isolation
  ContainerOptions container;  // how to run spec.image, when it is set
  // The user as the launcher looked it up (LookUpJobUser); none (a spec written by hand):
  // the job runs as a user without a passwd entry (HOME=/, only spec.gid).
  std::optional<JobUser> user;
  friend bool operator==(const ShimConfig&, const ShimConfig&) = default;
};

// Who the shim is, so that a later agent can tell it from a process that reused its pid.
struct ShimRecord {
  RunId id;
  int pid = 0;
  uint64_t start_ticks = 0;  // field 22 of /proc/<pid>/stat
  std::string boot_id;       // the kernel boot the pids belong to
  int job_pid = 0;           // 0 until the command started
  uint64_t job_start_ticks = 0;
  int64_t start_time_us = 0;
  std::string isolation;
  std::vector<std::string> cgroup_dirs;  // to remove if the shim dies
  // The shim takes signal requests (stop_request.h, kSignalRequestOffset): false in the
  // record of a shim older than them, which the request's signal would kill.
  bool signal_requests = false;
};

// How an attempt ended.
struct FinalStatus {
  RunId id;
  bool started = false;  // false: the command never ran (see reason)
  int64_t start_time_us = 0;
  int64_t end_time_us = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  bool cancelled = false;
  std::string reason;
  std::string isolation;
  // Why it was killed (protocol/kill_cause.h) and the words for it without the signal;
  // nullopt in a status written by a shim older than the field.
  std::optional<protocol::KillCause> kill_cause;
  std::string kill_detail;
  // Not started, by a fault of the node's own (the run's files cannot be written, a full
  // disk): reported lost with not_started (the job is requeued), not failed.
  bool node_fault = false;
};

std::string ShimConfigToJson(const ShimConfig& config);
Result<ShimConfig> ShimConfigFromJson(const std::string& text, const std::string& source);

std::string ShimRecordToJson(const ShimRecord& record);
Result<ShimRecord> ShimRecordFromJson(const std::string& text, const std::string& source);

std::string FinalStatusToJson(const FinalStatus& status);
Result<FinalStatus> FinalStatusFromJson(const std::string& text, const std::string& source);

// The event an agent reports for a final status of the run `id` in `dir` (the launcher
// knows which run a directory holds; a status of the previous layout names its key).
JobEvent EventFromFinalStatus(const FinalStatus& status, const RunId& id, const std::string& dir);

// Writes `contents` to `path` via a temporary file and rename, with the given mode, so a
// reader never sees half a file. With `sync` the data is fsynced first and so survives
// a power loss; only status.json needs that (after a reboot every job is lost anyway,
// but one that finished before it should be reported as finished), and the fsync costs
// milliseconds on the path to a job's start.
Status WriteFileDurably(const std::string& path, const std::string& contents, mode_t mode,
                        bool sync = true);

// Replaces the contents of the existing file `path` in place (no new inode, no deleted
// one) while holding an exclusive flock on it; ReadShimRecord reads under a shared one, so
// it never sees a half-written record. Not durable (no fsync): for shim.json only, whose
// second write would otherwise allocate and free an inode per job. NotFound when `path`
// does not exist; never follows a symbolic link. With `lock` false, no flock is taken and
// the open does not wait for a lease: for a file a job may open or own (its preemption
// deadline), whose lock or lease on it must never hold the writer up (a job that locked
// its deadline file kept its shim from ever stopping it).
Status RewriteFileLocked(const std::string& path, const std::string& contents, bool lock = true);

// Reads and parses one of the JSON files; NotFound when it does not exist.
Result<ShimConfig> ReadShimConfig(const std::string& job_dir);
Result<ShimRecord> ReadShimRecord(const std::string& job_dir);
Result<FinalStatus> ReadFinalStatus(const std::string& job_dir);

// A piece of a job's log, read for the controller (which relays it to `gpupool logs`).
struct LogSlice {
  std::string data;
  int64_t size = 0;  // the file's size when read
};

// Reads up to `max_bytes` from `offset` of `path`, which must be the stdout or stderr
// file directly inside a run's directory under STATE_DIR/jobs, reached without symbolic
// links: STATE_DIR/jobs/<job>/<RunDirName>/ (run_id.h), or STATE_DIR/jobs/<key>/ of the
// previous layout (ended jobs' records name such paths). The relay must not become a
// way to read other files of the node. kNotFound when the file is not there,
// kPermissionDenied for any other path, kUnavailable when it cannot be read.
Result<LogSlice> ReadJobLogSlice(const std::string& state_dir, const std::string& path,
                                 int64_t offset, int64_t max_bytes);

// Bytes of a batch job's output file (-o/-e; LaunchSpec::stdout_file), for a path the
// caller knows is one (the agent serves only the paths of runs it launched or adopted):
// an absolute path, a regular file reached without a link in its last component, and
// still `owner`'s when given.
Result<LogSlice> ReadOutputFileSlice(const std::string& path, std::optional<uint32_t> owner,
                                     int64_t offset, int64_t max_bytes);

}  // namespace gpupool::agent
