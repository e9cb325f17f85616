// Launcher: starts jobs on this node, each under its own supervisor process (the
// "shim", `gpupool agent-shim`), and reports what happens to them.
//
// The shim is detached from the agent (own session), so killing the agent never kills a
// job. It runs the job as the submitting user with exactly its GPUs visible, enforces the
// time limit and cancel grace, applies cgroup isolation where the host allows it, and
// writes the job's final status to its directory (STATE/jobs/<job>/<task>.<attempt>/,
// run_id.h) before it exits. That directory is the contract between a shim and any agent
// incarnation: a restarted agent calls Adopt() to find its jobs again.
//
// Everything is keyed by RunId (run_id.h): one attempt of one task, or an exec session
// in it. Two attempts of one task never run here at once: Launch refuses a task's
// attempt while another attempt of that task is supervised.
//
// Event delivery is at-least-once: after a restart Adopt() reports a finished run's exit
// again until the agent calls Forget(id) (once the controller has recorded it), so
// consumers must treat events for one RunId idempotently.
//
// Thread safety: all methods may be called from any thread; calls are serialised
// internally. Destroying a Launcher leaves running shims and their jobs running.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/run_id.h"
#include "agent/stop_request.h"
#include "common/clock.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace gpupool::agent {

// One GPU given to a job: the agent protocol's grant, as the launch order carried it.
using GpuGrant = protocol::GpuGrant;

// A host path bind-mounted into a container job.
struct BindMount {
  std::string source;  // absolute host path; the job's user must be able to read it
  std::string target;  // absolute path inside the container
  bool read_only = false;
  friend bool operator==(const BindMount&, const BindMount&) = default;
};

// Everything the shim needs to start one attempt of one task (or an exec session in it).
struct LaunchSpec {
  // Which run this is: its directory, events and Cancel/Forget calls use it, and the job
  // sees it (GPUPOOL_JOB_ID, GPUPOOL_ATTEMPT, container names and labels).
  RunId id;
  int num_tasks = 1;
  // Variables gpupool sets for this task, over the user's: the rendezvous of a gang
  // (GPUPOOL_TASK_INDEX, MASTER_ADDR, PET_*, ...; agent/runtime/rendezvous.h).
  std::map<std::string, std::string> pool_env;
  // gpupool exec: run in these cgroups of the task (JobCgroup::Join) instead of making
  // new ones; cpu_milli, memory_bytes and denied_device_nodes are then the task's, applied
  // by its cgroups.
  std::vector<std::string> join_cgroups;
  // gpupool exec into a process job: the task's process (its pid and start ticks,
  // proc_util.h), whose mount namespace the session enters (job_mounts.h), so that it
  // sees the task's /dev/shm. 0 = none.
  int32_t join_job_pid = 0;
  uint64_t join_job_start_ticks = 0;
  // Written to JOB_DIR/hostfile (readable by the job, mounted into containers at the
  // same path) and named by GPUPOOL_HOSTFILE; empty = none.
  std::string hostfile;

  std::string user;
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<std::string> argv;           // argv[0] is looked up in the job's PATH
  std::map<std::string, std::string> env;  // the user's variables; see job_env.h
  std::string workdir;                     // empty = the user's home directory
  std::vector<GpuGrant> gpus;
  std::vector<std::string> denied_device_nodes;  // nodes of every GPU not granted
  // Process jobs: refuse to start when the denied nodes cannot all be denied (a missing
  // node, no devices controller, no eBPF): isolation fails closed. The agent clears it
  // only for fake nodes and when an admin opts out (--allow-unisolated-devices).
  bool require_device_isolation = false;
  // Process jobs: a /dev/shm of the job's own, a tmpfs in a mount namespace of its own
  // (job_mounts.h) when the shim runs as root. The launcher clears it when an admin opts
  // out (LauncherOptions::shared_dev_shm, --shared-dev-shm).
  bool private_dev_shm = true;
  int64_t cpu_milli = 0;      // 0 = no CPU limit
  uint64_t memory_bytes = 0;  // 0 = no memory limit
  int64_t time_limit_s = 0;   // 0 = none
  int64_t grace_s = 10;       // TERM -> KILL delay for cancel and time limit
  // Slurm's --signal (jobs::Job::warn_signal): `warn_signal` (0 = none) warn_time_s before
  // the time limit, to the process group, or with warn_main_only to the main process only.
  int32_t warn_signal = 0;
  int64_t warn_time_s = 0;
  bool warn_main_only = false;
  // The job may be preempted: it gets GPUPOOL_PREEMPT_DEADLINE_FILE (stop_request.h).
  bool preemptible = false;
  // Container jobs (container.h): the command runs in `image` under podman; empty = a
  // plain process. `cdi_devices` are fully qualified CDI names ("KIND=NAME") of the
  // granted GPUs; `mounts` are bind mounts (the workdir, when set, is mounted as well).
  std::string image;
  std::vector<BindMount> mounts;
  std::vector<std::string> cdi_devices;
  uint64_t shm_bytes = 0;  // /dev/shm size; 0 = podman's default
  bool init = true;        // podman --init: PID 1 passes signals on and reaps
  // An interactive session (gpupool run, exec --pty): the command's standard streams are
  // the descriptors given to Launch (JobStdio), not /dev/null and the log files. `tty`:
  // they are one pseudo-terminal, made the command's controlling terminal; a cancel
  // hangs it up (SIGHUP, then SIGTERM) before the grace period.
  bool stdio_relayed = false;
  bool tty = false;
  // Process jobs: a directory environment (conda env, virtualenv) put first on PATH.
  std::string env_dir;
  // A share of one GPU (gpus has one grant with gpu_milli < 1000, docs/sharing.md): how it
  // is held to its size and the memory it may take. share_enforcement "mps": the job is a
  // client of that GPU's MPS control daemon, whose pipe folder is mps_pipe_dir; "dmem":
  // the job's cgroup may allocate at most share_memory_bytes of dmem_region (dmem.h) or,
  // when nvml_library is set instead, of its GPU through NVML's per-cgroup limits
  // (nvml_memory.h, that libnvidia-ml), and the job does not start without that limit;
  // "none": scheduled, not enforced. Empty for jobs with whole GPUs or none.
  std::string share_enforcement;
  uint64_t share_memory_bytes = 0;
  std::string mps_pipe_dir;
  std::string dmem_region;
  std::string nvml_library;
  // A share of an AMD GPU whose CU count is known: the CUs of its one visible device it is
  // asked to use (cu_mask.h's CU list, "0-37"), set as HSA_CU_MASK="0:<list>". Advisory,
  // whatever share_enforcement says (docs/sharing.md, "AMD"). Empty: none.
  std::string cu_mask;
  // A submitted script's copy (jobs::Job::script): written to JOB_DIR/script (0700, the
  // user's) and run in place of argv[0]; a container job gets it mounted at that path.
  std::string script;
  // Batch jobs' output files (-o/-e), absolute, created as the user (output_file.h)
  // instead of JOB_DIR/stdout.log and stderr.log; stderr_file may equal stdout_file (one
  // file for both). Empty: the run directory's logs.
  std::string stdout_file;
  std::string stderr_file;
  // The node's lease file (node_lease.h, STATE/node_lease) for a task of a job that may
  // be started again elsewhere once this node is lost (jobs::FencedOnLoss): the shim
  // kills the job once the lease there runs out unrenewed (kill cause node_lease). Empty:
  // never fenced (no lease, another job, an exec session).
  std::string lease_file;
  // With lease_file: this long before the lease runs out unrenewed the shim tells the job
  // to stop (SIGTERM, or podman stop; a preemptible job's deadline file first), so that it
  // can checkpoint; the kill comes when the lease runs out. 0: no warning, only the kill.
  int64_t lease_grace_s = 0;
  // The pool's name of this node (the agent's --node-name), as the agent's own messages
  // name it, for the shim's (a lease's warning and fence); empty: the host's name.
  std::string node_name;
  friend bool operator==(const LaunchSpec&, const LaunchSpec&) = default;
};

// The standard streams of an interactive launch (LaunchSpec::stdio_relayed): the child's
// ends of pipes, or the same pseudo-terminal slave three times. The launcher passes
// them to the shim and closes nothing of the caller's.
struct JobStdio {
  int in = -1;
  int out = -1;
  int err = -1;
};

struct JobEvent {
  enum class Kind {
    kStarted,  // the command is running (after Launch, or re-adopted after a restart)
    kExited,   // it ran and ended: exit_code or signal set; timed_out / cancelled say why
    kFailed,   // it could not be started (the command never ran, or exec failed); see reason
    kLost,     // its supervisor vanished without recording a status; see reason
  };
  RunId id;
  std::string dir;  // the run's directory: its logs are dir/stdout.log and dir/stderr.log
  // A batch job's output files (LaunchSpec::stdout_file, stderr_file) when it has them:
  // its logs are there instead.
  std::string stdout_file;
  std::string stderr_file;
  Kind kind = Kind::kStarted;
  int64_t time_us = 0;        // when it happened (start time for kStarted, end time else)
  int64_t start_time_us = 0;  // 0 when the command never started
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  bool cancelled = false;  // ended after Cancel()
  bool adopted = false;    // reported by Adopt() rather than by the launching agent
  std::string reason;      // why it failed / was lost / was stopped, in words
  std::string isolation;   // what isolation was applied or why it was skipped
  // kExited/kFailed from the shim's status: why it was killed, and those words without
  // the signal (protocol::Event's fields); nullopt for an event made without them.
  std::optional<protocol::KillCause> kill_cause;
  std::string kill_detail;
  // kLost: the node could not start it, its own fault (protocol::Event::not_started).
  bool not_started = false;
};

std::string_view JobEventKindName(JobEvent::Kind kind);  // "started", "exited", ...

class Launcher {
 public:
  virtual ~Launcher() = default;

  // Starts one attempt of a job and returns once its command runs or has failed to
  // start; either way a kStarted or kFailed event is queued for Poll(). An error Status
  // means nothing was started (invalid spec, job already running here, no shim).
  virtual Status Launch(const LaunchSpec& spec, const JobStdio& stdio) = 0;
  Status Launch(const LaunchSpec& spec) { return Launch(spec, JobStdio{}); }

  // Asks the run's shim to stop it: SIGTERM to its process group, SIGKILL after
  // grace_s. Returns at once; the kExited event (cancelled = true) follows via Poll().
  // NotFound when the launcher does not supervise that run.
  virtual Status Cancel(const RunId& id) = 0;

  // A preemption's stop (stop_request.h): as Cancel, with SIGKILL stop.grace_s after
  // SIGTERM and the deadline given to the job first. A launcher without it cancels.
  virtual Status Stop(const RunId& id, const StopRequest& stop) {
    (void)stop;
    return Cancel(id);
  }

  // gpupool cancel --signal (Slurm's scancel --signal): `sig` to the run's job, which goes
  // on: to every process of it, as a cancel's SIGTERM goes, or with main_only to its main
  // process only (scancel --batch); a container's by podman kill. Carried out by its shim
  // (stop_request.h), at most once; returns at once. NotFound when the launcher does not
  // supervise the run or it has ended; FailedPrecondition when its shim predates signal
  // requests (started by an older agent).
  virtual Status SignalJob(const RunId& id, int sig, bool main_only) {
    (void)sig;
    (void)main_only;
    return Status::Unimplemented(ToString(id) + ": this launcher cannot signal jobs");
  }

  // Events since the last call, oldest first. Never blocks.
  virtual std::vector<JobEvent> Poll() = 0;

  // Like Poll(), but waits up to `timeout_ms` for at least one event.
  virtual std::vector<JobEvent> Wait(int timeout_ms) = 0;

  // After an agent restart: scans the state directory, both layouts (run_id.h). Runs
  // whose shims still run are supervised again (kStarted, adopted = true); runs that
  // ended meanwhile yield their kExited / kFailed event; runs whose shim vanished without
  // a status yield kLost. Runs this launcher already supervises are skipped.
  virtual Result<std::vector<JobEvent>> Adopt() = 0;

  // The agent has delivered the run's final event: empty its spec (the command line and
  // variables go; records and logs are kept) so that later Adopt() calls do not report it
  // again. FailedPrecondition while the run still runs.
  virtual Status Forget(const RunId& id) = 0;

  // The runs currently supervised.
  virtual std::vector<RunId> Running() const = 0;
};

// How container jobs are run on this node: found once per agent (DetectContainerOptions
// in container.h) and handed to every shim.
struct ContainerOptions {
  std::string podman = "podman";         // the podman binary: a name looked up in PATH, or a path
  std::vector<std::string> global_args;  // before the subcommand: --root, --runroot, ...
  std::string runtime;                   // --runtime; empty = podman's default
  std::vector<std::string> ulimits;      // --ulimit values, e.g. "nofile=20000:20000"
  std::string pull = "missing";          // --pull policy: always, missing, never, newer
  std::string network = "host";          // --network: jobs use the node's network like processes
  std::string note;                      // the adjustments above and why, for isolation notes
  std::string unavailable;               // non-empty: why container jobs cannot run here
  friend bool operator==(const ContainerOptions&, const ContainerOptions&) = default;
};

struct LauncherOptions {
  std::string state_dir;  // runs live in STATE/jobs/<job>/<run>/ (run_id.h)
  // Command that runs the shim, e.g. {"/usr/bin/gpupool", "agent-shim"}; the launcher
  // appends "--job-dir DIR --ready-fd N".
  std::vector<std::string> shim_command;
  // The shim for a share capped through NVML (LaunchSpec::nvml_library): one that can
  // load NVML (`gpupool agent-shim`, not the slim static one). Empty: shim_command.
  std::vector<std::string> nvml_shim_command;
  const Clock* clock = nullptr;  // nullptr = SystemClock
  // cgroup file system root; empty disables isolation (the shim notes that it skipped).
  std::string cgroup_root = "/sys/fs/cgroup";
  int start_timeout_ms = 30'000;  // how long Launch waits for the shim to report
  ContainerOptions container;     // for jobs with an image
  // An admin's opt-out of a /dev/shm of each process job's own (--shared-dev-shm): every
  // spec is launched with private_dev_shm cleared.
  bool shared_dev_shm = false;
};

std::unique_ptr<Launcher> NewProcessLauncher(LauncherOptions options);

}  // namespace gpupool::agent
