// The job model: what a user asks for, where it runs, and the states it goes through.
//
// PENDING -> ASSIGNED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED | TIMEOUT | LOST.
// A pending job may also go straight to CANCELLED; an assigned one to any end (its tasks
// failed to start, were stopped or lost before all of them ran); an assigned or running
// one back to PENDING when its node was lost and it asked to be requeued; a requeued
// pending one to SUCCEEDED when its lost attempt turns out, late, to have succeeded
// (docs/health.md, "An end reported late"). Ended states are final (a transition to the
// same state records a lost attempt's late end). IsValidTransition is this table;
// controller/job_lifecycle.h makes every transition and checks it. Every transition is persisted by
// the controller before it is acted on. Plain value types; not thread-safe to mutate concurrently.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/shared_value.h"
#include "common/status.h"

namespace gpupool::jobs {

enum class JobState {
  kPending,
  kAssigned,
  kRunning,
  kSucceeded,
  kFailed,
  kCancelled,
  kTimeout,
  kLost,
};

std::string_view JobStateName(JobState s);  // "PENDING", ...
std::optional<JobState> ParseJobState(std::string_view name);
bool IsTerminal(JobState s);
// Whether the state machine allows from -> to.
bool IsValidTransition(JobState from, JobState to);

// What one task of a job needs. Invariants (checked by ValidateRequest): gpus >= 0;
// 1 <= gpu_milli <= 1000 when gpus > 0, and gpu_milli < 1000 only when gpus == 1;
// gpu_memory_bytes > 0 only when gpus == 1 (a share sized by memory); tasks >= 1.
struct ResourceRequest {
  int gpus = 0;
  int gpu_milli = 1000;           // share of each GPU in thousandths
  uint64_t gpu_memory_bytes = 0;  // alternative to gpu_milli: a share sized by memory
  int64_t cpu_milli = 1000;
  uint64_t memory_bytes = 0;            // 0 = no explicit request
  std::vector<std::string> gpu_models;  // allowed models; empty = any
  std::string vendor;                   // "nvidia", "amd" or empty = any
  std::string min_capability;           // "8.0"; empty = any
  int tasks = 1;                        // gang size: all tasks placed or none
  // Slurm's -w/--nodelist: every task runs on one of these nodes (names, expanded);
  // empty = any. Unlike Slurm's, it does not ask that every listed node be used.
  std::vector<std::string> nodelist;
  // Slurm's -x/--exclude: no task runs on these nodes (names, expanded).
  std::vector<std::string> exclude;
  friend bool operator==(const ResourceRequest&, const ResourceRequest&) = default;
};

// Where a job runs: one entry per task.
struct TaskPlacement {
  std::string node;
  std::vector<int> gpu_indices;  // vendor indices on that node
  std::vector<std::string> gpu_uuids;
  int gpu_milli = 1000;  // 0 for a CPU-only task
  // Per GPU, what the task is charged when that is more than gpu_milli: a MIG instance held
  // whole is charged its part of the GPU (sched::ChargedGpuMilli, docs/sharing.md); 0 =
  // gpu_milli (every other placement, and placements stored before the field).
  int charged_milli = 0;
  friend bool operator==(const TaskPlacement&, const TaskPlacement&) = default;
};

// What happened to one task of a job: Job::tasks has one entry per placement entry, and
// the controller writes each change to the store, so a restarted controller knows which
// tasks of a gang have started and ended.
struct TaskStatus {
  std::string host;           // the address its peers reach it at (the node's advertised one)
  int64_t start_time_us = 0;  // 0 = not started
  int64_t end_time_us = 0;
  bool ended = false;  // it ran and ended, or it could not be started
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool cancelled = false;  // stopped by gpupool (cancel, another task's failure, --mpi end)
  bool timed_out = false;
  std::string reason;  // why it failed to start or was stopped, in words
  // Why it was killed, by name (protocol/kill_cause.h: "oom_kernel", "gpu_mem_watch", ...;
  // "unknown" for a name the controller did not know), and the node's words for that
  // without the signal. Empty: its agent is older than the field (or it has not ended).
  std::string kill_cause;
  std::string kill_detail;
  std::string stdout_path;  // on its node, set when it starts
  std::string stderr_path;
  // Its end (end_time_us, exit_code, signal, reason) was reported by its node after the
  // controller had declared it lost (docs/health.md, "An end reported late").
  bool reported_late = false;
  // Being preempted, it said it has checkpointed (`gpupool checkpoint-done` run inside it):
  // its own grace ended, the other tasks' goes on (docs/preemption.md).
  bool checkpoint_done = false;
  bool failed() const {
    return ended && !cancelled && (timed_out || signal || !exit_code || *exit_code != 0);
  }
  friend bool operator==(const TaskStatus&, const TaskStatus&) = default;
};

// A host path bind-mounted into a container job.
struct Mount {
  std::string source;  // absolute host path
  std::string target;  // absolute path inside the container
  bool read_only = false;
  friend bool operator==(const Mount&, const Mount&) = default;
};

// `submit --after-ok/--after-any/--after-not-ok ID`: the job starts only once job ID has
// ended as the kind asks; a dependency that can no longer be met ends the job.
struct Dependency {
  enum class Kind { kAfterOk, kAfterAny, kAfterNotOk };
  int64_t job_id = 0;
  Kind kind = Kind::kAfterOk;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};
inline constexpr size_t kMaxDependencies = 64;

// `submit --array 0-99%10`: the indices, and how many elements may run at once (0 = no
// limit). Forms: "0-99", "1,3,8-11", "0-30:10" (a step), each with an optional "%N".
struct ArraySpec {
  std::vector<int> indices;  // ascending, distinct
  int max_running = 0;
};
inline constexpr int kMaxArrayIndex = 1'000'000;
// Elements per array: the most a server may allow (every index), and what it allows
// unless its config says otherwise (`max-array-size`; Slurm's MaxArraySize is 1001 too).
inline constexpr int kMaxArraySize = kMaxArrayIndex + 1;
inline constexpr int kDefaultMaxArraySize = 1001;
// Errors name the field ("array") and show a correct form. More than `max_elements`
// indices (an index given twice counts twice) is an error that ends with `limit_hint`
// (where the limit comes from and how to raise it), as is a %N above `max_elements`.
Result<ArraySpec> ParseArraySpec(std::string_view text, int max_elements = kMaxArraySize,
                                 std::string_view limit_hint = "");
// "after-ok", "after-any", "after-not-ok" (the CLI flags without their dashes).
std::string_view DependencyKindName(Dependency::Kind k);
std::optional<Dependency::Kind> ParseDependencyKind(std::string_view name);

// What a job's software environment needs from a node's GPU stack, found by inspecting
// its image or directory at submit time (src/envcheck). Empty `source` = not inspected.
struct EnvNeeds {
  std::string source;                    // what was inspected: "image REF (ID)", "directory D"
  std::string cuda;                      // CUDA release it needs, "12.4"; "" = none
  std::string min_driver;                // that release's minimum driver
  std::string min_driver_minor_compat;   // the family minimum under minor version compatibility
  std::vector<std::string> sass;         // sm_XY[a|f] it carries
  std::vector<std::string> ptx;          // compute_XY it carries
  std::vector<std::string> gfx_targets;  // AMD targets it carries
  bool empty() const { return source.empty(); }
  friend bool operator==(const EnvNeeds&, const EnvNeeds&) = default;
};

// Why an earlier attempt of a job ended and the job went back to the queue: preempted
// (issue 28), lost (its node stopped answering, a task of it was lost, or its node's agent
// restarted without it; --requeue) or its GPU failed (gpu/health_policy.h; --requeue).
enum class AttemptEnd { kPreempted, kLost, kGpuFailed };
// "preempted", "lost", "gpu_failed".
std::string_view AttemptEndName(AttemptEnd e);
std::optional<AttemptEnd> ParseAttemptEnd(std::string_view name);

// How a task of a lost attempt ended, as its node reported it late (EarlierAttempt::
// late_ends): not reported (yet), exited 0 without being told to stop, or otherwise (a
// failure, a signal, or stopped: a cancel, the stray stop, its node's lease).
enum class LateTaskEnd { kUnreported, kSucceeded, kFailedOrStopped };
// "unreported", "succeeded", "failed_or_stopped".
std::string_view LateTaskEndName(LateTaskEnd e);
std::optional<LateTaskEnd> ParseLateTaskEnd(std::string_view name);

// An earlier attempt of a requeued job (Job::earlier_attempts): from its first task's
// start to its last task's end (a lost task's: when it was declared lost), the GPU-hours
// its tasks ran, how it ended and why (in words, at most kMaxAttemptReason bytes). A
// record may stand for several attempts merged (AddEarlierAttempt): `attempt` is the
// first's number, `merged` how many, `ended_by` and `reason` the last's.
struct EarlierAttempt {
  int attempt = 0;  // Job::attempt while it ran; 0 in records of the preempted_attempts era
  int merged = 1;
  AttemptEnd ended_by = AttemptEnd::kPreempted;
  int64_t start_time_us = 0;
  int64_t end_time_us = 0;
  double gpu_hours = 0;
  std::string reason;
  // The GPUs its tasks held together (0: kept before this was), for a late end's charge.
  double gpus = 0;
  // The node of each of its tasks, by task index (empty in records kept before): only a
  // task's own node may report its late end (docs/security.md, a node speaks only for
  // itself).
  std::vector<std::string> nodes;
  // A lost attempt whose node reported its real end later (docs/health.md, "An end
  // reported late"): when it was declared lost (its end until then; end_time_us and
  // gpu_hours now run to the real end), and how it really ended, in words. 0 and empty
  // for an attempt no late report came for.
  int64_t lost_time_us = 0;
  std::string late_reason;
  // Each task's reported end, by task index (empty until a report came; shorter than
  // `nodes` in none): a gang job waiting for its next attempt ends SUCCEEDED once every
  // task of the lost attempt reported kSucceeded, and a task reported twice is known.
  std::vector<LateTaskEnd> late_ends;
  // Each task's end as its node reported it late, by task index (0: not reported), beside
  // late_ends: each task's GPUs (gpus / nodes.size()) are charged up to its own end, not
  // the attempt's latest (controller/usage.h). Empty in records whose late reports an
  // older server took: their GPUs are charged together up to end_time_us.
  std::vector<int64_t> late_end_times_us;
  friend bool operator==(const EarlierAttempt&, const EarlierAttempt&) = default;
};
// The most tasks one job may have (--tasks): task indices run from 0 to kMaxTasks - 1.
inline constexpr int kMaxTasks = 4096;
inline constexpr size_t kMaxEarlierAttempts = 16;
inline constexpr size_t kMaxAttemptReason = 256;
inline constexpr size_t kMaxAttemptNodes = 4096;  // EarlierAttempt::nodes: one per task

// A node a requeued job's lost attempt may still run a task on (Job::fences).
struct NodeFence {
  std::string node;
  // When the node's lease runs out (controller clock, microseconds): the node was lost.
  // 0: the node was up when the attempt was lost (a gang's other node, told to stop its
  // task); the job does not wait for it, but its loss before the job is placed again
  // sets this (its task may run on, cut off).
  int64_t until_us = 0;
  friend bool operator==(const NodeFence&, const NodeFence&) = default;
};
inline constexpr size_t kMaxFences = 4096;  // Job::fences: at most one per task's node

struct Job {
  int64_t id = 0;
  // The store's count of this job's writes, for compare-and-set (store/store.h): 0 for a
  // job never stored, 1 once inserted, one more with each update. The store keeps it in
  // a column of its own; it is not part of the JSON form (job_json.h), so neither a
  // client nor a stored body sets it.
  int64_t version = 0;
  std::string user;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::string project;
  std::string name;
  // A submission's bulk, shared by copies of the job (common/shared_value.h): the
  // elements of an array, made by copying one job, hold one copy between them.
  SharedValue<std::vector<std::string>> command;  // argv
  SharedValue<std::map<std::string, std::string>> env;
  std::string workdir;
  std::string image;          // container image; empty = plain process
  std::vector<Mount> mounts;  // bind mounts of a container job
  std::string environment;    // named environment "NAME:VERSION"; empty = none
  std::string env_dir;        // a directory environment's root (process jobs)
  EnvNeeds needs;             // what its image / environment needs from the GPU stack
  // A submitted script's content (`gpupool submit script.sh`), copied at submit: each
  // task writes it into its run directory and runs that copy in place of command[0], so
  // editing the file later does not change the job. Empty: command[0] runs as it is.
  SharedValue<std::string> script;
  // Batch jobs: where stdout and stderr go (-o/--output, -e/--error), patterns of
  // output_pattern.h relative to the workdir. Empty output: the run directory's
  // stdout.log and stderr.log on the node; empty error: stderr into the output file.
  std::string output;
  std::string error;
  ResourceRequest request;
  int priority = 0;
  int64_t time_limit_s = 0;  // 0 = none
  // Slurm's --signal=[B:]SIG[@TIME]: warn_signal (1-64; 0 = none) is sent warn_time_s
  // before the time limit (less than the limit), to the job's whole process group, or with
  // warn_main_only to its main process only (the batch script's shell, B:). A batch job
  // with a time limit only.
  int32_t warn_signal = 0;
  int64_t warn_time_s = 0;
  bool warn_main_only = false;
  bool requeue = false;  // requeue when LOST
  // --enforce memory: a share runs only on a GPU that holds it to its memory (enforcement
  // mps, mig or dmem; docs/sharing.md). Whole GPUs are never shared, so it holds there.
  bool enforce_memory = false;
  // MPI launch (--mpi): the command runs in task 0 only; the other tasks hold their
  // allocations for `gpupool exec` (mpirun's remote daemons) until task 0 ends.
  bool mpi = false;
  std::vector<Dependency> dependencies;  // all must be met before it starts
  // Interactive jobs. "run" (gpupool run): the command runs with the client's terminal,
  // as an exec session in task 0 started when the client attaches; every task holds
  // its allocation for it, and the job ends with the command. "alloc" (gpupool alloc):
  // no command; the tasks hold the allocation for gpupool exec until it is cancelled or
  // its time limit. Empty: a batch job.
  std::string interactive;
  // alloc: its client says it is alive (POST /v1/jobs/ID/alive) from its submission on,
  // while the job waits as while it holds (gpupool alloc sets it). Once the client falls
  // silent for the server's client timeout the request is withdrawn (pending) or the
  // allocation released (running): a client killed while its job waited no longer holds
  // the allocation for good once the job starts. Without it only a client that has said
  // it is alive once is watched (older clients).
  bool client_keepalive = false;
  // A client-made idempotency key (submit_key): a submission retried with the same key
  // by the same user (after a timeout or a controller failover) is created once.
  std::string submit_key;
  bool pty = false;  // run: the command gets a pseudo-terminal (--pty)
  // run: the command's end (its session's), once it ended; the job's outcome.
  bool command_ended = false;
  std::optional<int> command_exit_code;
  std::optional<int> command_signal;
  // Container jobs: the size of /dev/shm (--shm-size; 0 = podman's 64 MiB), and whether a
  // small init runs as PID 1 to pass signals on and reap (--init, the default; --no-init).
  uint64_t shm_bytes = 0;
  bool init = true;
  // A submission's `--array` spec; the server turns it into one job per index.
  std::string array;
  // An element of an array: the array's id (its first element's job id), its index
  // (GPUPOOL_ARRAY_TASK_ID) and the array's limit on elements running at once.
  int64_t array_id = 0;
  int array_index = 0;
  int array_max_running = 0;
  JobState state = JobState::kPending;
  int64_t submit_time_us = 0;
  // When the controller placed the current attempt (its clock; 0: not placed yet, or
  // stored before it was kept). No task of the attempt can have started before it.
  int64_t placed_time_us = 0;
  // How many times a node could not start it, by a fault of the node's own (its disk);
  // each put it back in the queue (controller lifecycle, TaskLost::not_started).
  int launch_failures = 0;
  int64_t start_time_us = 0;  // 0 = not started
  int64_t end_time_us = 0;    // 0 = not ended
  std::optional<int> exit_code;
  std::optional<int> signal;
  // A LOST job's real end, reported by its node after the loss (docs/health.md, "An end
  // reported late"): the latest reported end of its tasks (each task's GPUs were held up
  // to its own end, TaskStatus::end_time_us with reported_late, and are charged so), every
  // reported task's end in words, and how task 0 (or the first failed task) ended as an
  // exit code or signal. The job stays LOST: what depended on its outcome acted on that.
  // 0 / empty: no late report.
  int64_t late_end_time_us = 0;
  std::optional<int> late_exit_code;
  std::optional<int> late_signal;
  std::string late_reason;
  std::vector<TaskPlacement> placement;
  std::vector<TaskStatus> tasks;  // one per placement entry while placed (see TaskStatus)
  // The rendezvous port on task 0's node (MASTER_PORT), picked by that node's agent when
  // task 0 starts; 0 until then. The other tasks are launched once it is known.
  int master_port = 0;
  std::string pending_reason;     // why a pending job waits, in words
  std::string reason;             // why it ended as it did (LOST, FAILED to launch, ...)
  int attempt = 0;                // launches so far (requeues add one)
  bool cancel_requested = false;  // cancel asked for; the agent is stopping it
  // The controller stopped it past its time limit (lifecycle::TimeLimit): it ends TIMEOUT.
  bool time_limit_hit = false;
  // `gpupool hold`: a held job stays PENDING and is not started until released. Who held
  // it; a hold an admin put on someone else's job only an admin releases.
  std::string held_by;
  bool held_by_admin = false;
  std::string stdout_path;  // task 0's, on its node, set when it starts
  std::string stderr_path;
  // Preemption (issue 28, docs/preemption.md). Set at submit time: whether the scheduler
  // may stop the job for a waiting job of higher priority or of a group below its fair
  // share, once it has run min_runtime_s, giving it preempt_grace_s between SIGTERM and
  // SIGKILL (0: the server's defaults).
  bool preemptible = false;
  int64_t min_runtime_s = 0;
  int64_t preempt_grace_s = 0;
  // Set by the controller. While the current attempt is being preempted: by which job,
  // when (epoch seconds) its grace ends, and whether its user said it has checkpointed
  // (`gpupool checkpoint-done`: the grace ends at once). The attempt's tasks hold their
  // resources until they have ended; then the job is PENDING again, keeping its submit
  // time (its place in the queue).
  int64_t preempted_by = 0;
  // The preempting job as its user names it (ARRAY_INDEX for an array's element, else its
  // id): what `queue`, `show` and the reasons say. Empty in jobs preempted before it was
  // kept: readers fall back to preempted_by.
  std::string preempted_by_name;
  int64_t preempt_deadline_s = 0;
  bool checkpoint_done = false;
  // Preemptions so far, and the GPU-hours their stopped attempts had run.
  int preemptions = 0;
  double preempted_gpu_hours = 0;
  // Every attempt that ended and sent the job back to the queue (preempted, lost, its GPU
  // failed), oldest first: when it ran and its GPU-hours, for accounting and the GPU-hours
  // of a time window (controller/usage.h), since the current attempt's start and end say
  // nothing of them. JSON `earlier_attempts`; read from `preempted_attempts` too (jobs
  // stored before other ends were kept: every record there is a preempted one).
  std::vector<EarlierAttempt> earlier_attempts;
  // Set by the controller on a job requeued when its node was lost while a task of it
  // ran there (docs/health.md, "A node cut off from the controller"): each node of that
  // attempt that may still run a task of it, in the order they were lost. The job starts
  // again only once every lost one (NodeFence::until_us set) is gone: its lease ran out
  // (its supervisors have stopped the attempt by then, FencedOnLoss) or it registered
  // again and listed what it still runs, or reported the attempt's end there. Cleared
  // when it is placed. JSON `fences`; a job stored with only `fence_node` and
  // `fence_until_us` (one node) reads as one fence (job_json.cc).
  std::vector<NodeFence> fences;
  friend bool operator==(const Job&, const Job&) = default;
};

// Whether the loss of its node sends `job` back to the queue, so that another attempt of
// it may start elsewhere while its node, cut off, still runs this one: a --requeue job
// and a preemptible one (requeued when lost during its preemption). The tasks of such a
// job are stopped by their node when its lease runs out (protocol::RegistrationReply).
inline bool FencedOnLoss(const Job& job) { return job.requeue || job.preemptible; }

// Whether `job` holds resources on its nodes (ASSIGNED or RUNNING).
inline bool Occupies(const Job& job) {
  return job.state == JobState::kAssigned || job.state == JobState::kRunning;
}

// Whether a task of `job` is placed on `node`.
inline bool OnNode(const Job& job, const std::string& node) {
  return std::any_of(job.placement.begin(), job.placement.end(),
                     [&](const TaskPlacement& p) { return p.node == node; });
}

// The latest lease end among the lost nodes `job` waits for (Job::fences), 0 when it
// waits for none: it is not placed before, unless those nodes are heard from first.
inline int64_t FenceUntilUs(const Job& job) {
  int64_t until = 0;
  for (const NodeFence& f : job.fences) until = std::max(until, f.until_us);
  return until;
}

// The entry of `job.fences` for `node`, or nullptr.
inline const NodeFence* FenceOn(const Job& job, const std::string& node) {
  for (const NodeFence& f : job.fences) {
    if (f.node == node) return &f;
  }
  return nullptr;
}

// Appends an ended attempt to `job` (its reason cut to kMaxAttemptReason bytes); past
// kMaxEarlierAttempts the two oldest become one (their span, their GPU-hours and counts
// summed, the later's end and reason), so a job requeued again and again stays small and
// its total stays exact.
void AddEarlierAttempt(Job& job, EarlierAttempt a);

// What an element of an array (array_id != 0) finds in its environment, as Slurm's
// SLURM_ARRAY_*: GPUPOOL_ARRAY_JOB_ID (the array's id), GPUPOOL_ARRAY_TASK_ID (its
// index), GPUPOOL_ARRAY_TASK_COUNT, _MIN and _MAX (of the array's indices). Made at
// launch, not stored with each element, so that the elements share one stored spec.
// Empty for other jobs.
std::map<std::string, std::string> ArrayEnvironment(const Job& job);

// What a job's submission weighs, in bytes: the strings its user gives (each argument of
// its command, each NAME=value of its environment, its working directory, name,
// project, image, mounts, environment, GPU constraints, array spec and submit key), each
// with one byte more for its terminating NUL, as the kernel counts argv and envp against
// ARG_MAX. About what the controller holds of it in memory and the store on disk (the
// JSON adds quotes and escapes); what the server's max-submission-bytes and
// max-queued-bytes-* bound.
int64_t SubmissionBytes(const Job& job);

// The name of a job submitted without one, as Slurm names it: the base name of its
// script or command ("train.sh" for ./jobs/train.sh, "python3" for python3 x.py),
// control characters as '?', at most 128 bytes; "alloc" for an allocation without one.
std::string DefaultJobName(const Job& job);

// Per GPU, the thousandths a task placed as `p` is charged: charged_milli when set, else
// its share as asked.
inline int ChargedMilli(const TaskPlacement& p) {
  return p.charged_milli > 0 ? p.charged_milli : p.gpu_milli;
}

// How many GPUs a task placed as `p` is charged for, counting a share as its fraction and
// a MIG instance as its part of the GPU (ChargedMilli): what its GPU-hours are counted
// from (in usage, /metrics and an attempt's history alike).
inline double PlacedGpus(const TaskPlacement& p) {
  return static_cast<double>(p.gpu_uuids.size()) * ChargedMilli(p) / 1000.0;
}

// The project a job is accounted to for fair share and limits: its own, else its user's
// name.
inline const std::string& AccountingProject(const Job& job) {
  return job.project.empty() ? job.user : job.project;
}

}  // namespace gpupool::jobs
