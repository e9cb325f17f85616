// The agent protocol: every message that passes between the controller and a node agent,
// as plain structs with one JSON codec that both sides use (docs/api.md, "Agent protocol").
//
// Readers are lenient in one way and strict in another. A field they do not know is
// ignored, so a peer one minor version newer can add fields. A field they know with the
// wrong type or range is an error that names it ("launch[2].task_index: expected an
// integer"), never an exception: messages come from the network. In a work message an
// item that cannot be read (one launch order, say) is left out and listed in
// Work::rejected, so one bad order does not stop the others.
//
// Versions: MAJOR.MINOR. A registration carries the agent's version and its answer the
// controller's; peers of one major whose minors differ by at most one talk to each
// other, each sending only what the older of the two knows (SupportsExec). Minor 0 is
// the protocol without `gpupool exec`; minor 1 adds exec requests and exec reports;
// minor 2 adds interactive exec sessions (a terminal or standard input: ExecRequest's
// tty and stdin, and the exec I/O messages below); minor 3 adds GPU telemetry (the
// TelemetryBatch below, POST /v1/agent/telemetry), which an agent sends only to a
// controller of minor 3 or later (SupportsTelemetry); minor 4 adds signal orders (Work's
// `signal`, `gpupool cancel --signal`), which the controller sends only to an agent of
// minor 4 or later (SupportsSignal).
// Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/status.h"
#include "gpu/gpu_info.h"
#include "gpu/health_policy.h"
#include "jobs/job.h"
#include "protocol/kill_cause.h"

namespace gpupool::protocol {

struct Version {
  int major = 0;
  int minor = 0;
  friend bool operator==(const Version&, const Version&) = default;
};

inline constexpr Version kVersion{1, 4};

std::string VersionString(Version v);                 // "1.1"
Result<Version> ParseVersion(std::string_view text);  // InvalidArgument naming the text
// Whether a peer at `theirs` can talk to us at `ours`: the same major and minors at most
// one apart. kFailedPrecondition otherwise, naming both sides (`peer`, "the agent on node
// n1", and `self`) with their versions and saying which one to upgrade.
Status CheckCompatible(Version ours, Version theirs, std::string_view peer,
                       std::string_view self = "this side");
// Whether a peer at `v` understands exec requests (minor 1 on).
bool SupportsExec(Version v);
// Whether a peer at `v` runs interactive exec sessions (minor 2 on).
bool SupportsInteractiveExec(Version v);
// Whether a peer at `v` takes telemetry batches (minor 3 on).
bool SupportsTelemetry(Version v);
// Whether a peer at `v` carries out signal orders (minor 4 on).
bool SupportsSignal(Version v);

// One GPU given to a task.
struct GpuGrant {
  std::string vendor;  // "nvidia" or "amd" (others get no visibility variables)
  int index = -1;      // vendor runtime index on the node
  std::string uuid;    // "GPU-..." for NVIDIA; may be empty for AMD (index is used then)
  std::vector<std::string> device_nodes;  // informational; isolation uses the denied list
  int gpu_milli = 1000;                   // share in thousandths
  friend bool operator==(const GpuGrant&, const GpuGrant&) = default;
};

OrderedJson EncodeGpuGrant(const GpuGrant& g);
Result<GpuGrant> DecodeGpuGrant(const Json& j, const std::string& path);

// How the tasks of one job find each other (the variables of docs/cli.md, "Multi-node
// jobs", are made from it on the node).
struct Rendezvous {
  int task_index = 0;
  int num_tasks = 1;
  std::vector<std::string> hosts;  // per task, in task order: the address peers use
  std::vector<int> slots;          // per task: its GPU count, at least 1
  int master_port = 0;             // on hosts[0]; 0 in task 0's order: its agent picks one
  friend bool operator==(const Rendezvous&, const Rendezvous&) = default;
};

// Start one task of a job.
struct LaunchOrder {
  jobs::Job job;
  int task_index = 0;
  std::vector<GpuGrant> gpus;                    // the launch's GPUs on this node
  std::vector<std::string> denied_device_nodes;  // device nodes of every other GPU
  Rendezvous rendezvous;
  // The tasks of the job on this node whose allocations this launch covers, this task
  // first; empty: this task only. In a gang held for mpirun (--mpi, run, alloc) the first
  // task on a node is that node's launch unit: `gpus` are every co-located task's GPUs,
  // and its CPU and memory limits are node_tasks.size() times the job's per-task request
  // (mpirun starts all the node's ranks in it). The other tasks there hold their own.
  std::vector<int> node_tasks;
  friend bool operator==(const LaunchOrder&, const LaunchOrder&) = default;
};

// Stop every task of a job that runs on the node (only those of `attempt`, when set),
// and the exec sessions in them; or, with exec_id, one exec session.
struct CancelOrder {
  int64_t job_id = 0;
  int attempt = 0;  // 0 = whichever attempt runs
  int64_t exec_id = 0;
  // A preemption's stop (issue 28, cancel_order.h): SIGKILL this many seconds after
  // SIGTERM (-1: the job's own grace), and when its grace ends (epoch seconds; 0: none),
  // which the job finds in its GPUPOOL_PREEMPT_DEADLINE_FILE.
  int64_t grace_s = -1;
  int64_t deadline_s = 0;
  // Added within 1.3 (cancel_order.h): only this task of the job (-1: all of them on the
  // node), as a preempted gang's task that said checkpoint-done.
  int task = -1;
  friend bool operator==(const CancelOrder&, const CancelOrder&) = default;
};

// Send a signal to one running task of a job (`gpupool cancel --signal`, Slurm's scancel
// --signal) without stopping it: to every process of the task (its process group and its
// cgroups' processes, or its supervisor's descendants), or with main_only to its main
// process only (scancel --batch). A container's task: `podman kill --signal`. At most once:
// the controller never resends one (cancel_order.h has the codec).
struct SignalOrder {
  int64_t job_id = 0;
  int attempt = 0;  // the attempt that runs; another is not signalled
  int task_index = 0;
  int signal = 0;  // 1..64
  bool main_only = false;
  // How long the controller held the poll it answers with the order: the agent drops an
  // order that reaches it more than kSignalOrderMaxAgeMs after the answer (the agent was
  // frozen or cut off meanwhile), as the requester was told it may never arrive.
  // Optional on the wire (0).
  int64_t held_ms = 0;
  friend bool operator==(const SignalOrder&, const SignalOrder&) = default;
};

inline constexpr int64_t kSignalOrderMaxAgeMs = 3'000;

// Read bytes [offset, offset + max_bytes) of a log file of one of the node's jobs.
struct LogRequest {
  int64_t id = 0;
  std::string path;
  int64_t offset = 0;
  int64_t max_bytes = 0;
  friend bool operator==(const LogRequest&, const LogRequest&) = default;
};

// Run a command inside a running task's allocation (`gpupool exec`).
struct ExecRequest {
  int64_t id = 0;  // the controller's exec session
  int64_t job_id = 0;
  int attempt = 0;
  int task_index = 0;
  std::vector<std::string> argv;
  // The job's rendezvous port, for a task launched before task 0 had picked it (the
  // held tasks of an --mpi job start at once); 0 when the task's own variables have it.
  int master_port = 0;
  // An interactive session (minor 2): its I/O is relayed live through the controller
  // (ExecInput, ExecOutput) instead of going to files. `tty`: the command runs on a
  // pseudo-terminal of `rows` x `cols` (its stdout and stderr are the terminal); else
  // `stdin`: its standard input is the client's.
  bool tty = false;
  bool stdin_open = false;
  int rows = 0;
  int cols = 0;
  // A terminal session's client terminal: TERM, LANG, LC_*, ... (terminal_env.h).
  std::map<std::string, std::string> env;
  bool interactive() const { return tty || stdin_open; }
  friend bool operator==(const ExecRequest&, const ExecRequest&) = default;
};

// A work item the reader could not read, with what it could tell about it.
struct Rejected {
  std::string what;    // "launch[1]"
  int64_t job_id = 0;  // 0 when unreadable
  int task_index = 0;
  int num_tasks = 1;
  int attempt = 0;
  std::string error;
  friend bool operator==(const Rejected&, const Rejected&) = default;
};

// The answer to an agent's long poll.
struct Work {
  std::vector<LaunchOrder> launch;
  std::vector<CancelOrder> cancel;
  std::vector<LogRequest> logs;
  std::vector<ExecRequest> exec;
  std::vector<SignalOrder> signal;  // minor 4 on
  std::vector<Rejected> rejected;   // filled by the reader only
  bool empty() const {
    return launch.empty() && cancel.empty() && logs.empty() && exec.empty() && signal.empty();
  }
};

// A task the agent runs, or ran (reported when it registers).
struct RunningTask {
  int64_t job_id = 0;
  int task_index = 0;
  int attempt = 0;
  friend bool operator==(const RunningTask&, const RunningTask&) = default;
};

struct Registration {
  Version version = kVersion;
  std::string node;
  // Which agent this is (agent/runtime/agent_identity.h): the same across its restarts,
  // another for a second agent given the same node name. The controller refuses a
  // registration whose id differs from that of the node's live agent. Optional within
  // 1.3: "" (an older agent) is taken as before. At most 128 printable ASCII characters.
  std::string agent_id;
  std::string address;  // where the node's peers reach it; empty = where it polls from
  gpu::NodeInfo info;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<RunningTask> running;
  // Tasks that ended on this node and whose end the controller has not acknowledged yet
  // (they ended while no agent watched them, or while the controller was away). Their
  // events follow the registration; until then the controller must not take them for
  // tasks the node lost. Optional: a controller that does not know the field ignores it.
  std::vector<RunningTask> ended;
  // The agent runs a health program (docs/health.md) whose verdict has not been sent yet:
  // the controller places no work on the node until that verdict arrives (it follows at
  // once in a telemetry request). Optional: older controllers ignore it.
  bool health_pending = false;
};

// The most a pool's stop grace may be (server --kill-wait), in seconds.
inline constexpr int64_t kMaxKillWaitS = 3600;

struct RegistrationReply {
  Version version = kVersion;  // the controller's
  std::string address;         // the address the controller recorded for the node
  // The node's lease (docs/health.md, "A node cut off from the controller"): a task of a
  // job its loss would requeue (jobs::FencedOnLoss) is killed by its supervisor once the
  // agent has not reached the controller for three quarters of it, and the controller
  // starts such a job's next attempt only once it has run out. 0: no lease (a controller
  // without one, or run with --node-lease 0). Optional on the wire within protocol 1.3.
  int64_t node_lease_ms = 0;
  // The pool's stop grace (server --kill-wait, Slurm's KillWait): SIGKILL this long after
  // the SIGTERM of a cancel or a time limit, for the tasks the node starts from now on.
  // 0: the agent's own (10 s; a controller without the setting). Optional on the wire.
  int64_t kill_wait_s = 0;
  friend bool operator==(const RegistrationReply&, const RegistrationReply&) = default;
};

enum class EventKind { kStarted, kExited, kLost };
std::string_view EventKindName(EventKind kind);  // "started", "exited", "lost"

// What happened to one task.
struct Event {
  EventKind kind = EventKind::kStarted;
  int64_t job_id = 0;
  int attempt = 0;
  int task_index = 0;
  int64_t time_us = 0;  // 0: the controller's clock. Bounded: docs/security.md
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  bool cancelled = false;
  std::string reason;  // the node's words for the end, signal included
  // kExited: why the task was killed, and the node's words for that cause without the
  // signal ("killed by the kernel's OOM killer: ..."). Optional fields, no new minor:
  // nullopt is an agent older than them (the controller reads `reason` as before); a
  // name this build does not know decodes to KillCause::kUnknown, never an error.
  std::optional<KillCause> kill_cause;
  std::string kill_detail;
  std::string stdout_path;
  std::string stderr_path;
  int master_port = 0;  // kStarted of task 0: the rendezvous port its agent picked
  // kLost: the node could not start the task, by a fault of its own (a full or failing
  // disk, its supervisor missing); nothing of the task ran. Optional on the wire, no
  // new minor: an older controller reads it as a plain loss.
  bool not_started = false;
  friend bool operator==(const Event&, const Event&) = default;
};

// What happened to an exec session (minor 1).
struct ExecReport {
  int64_t id = 0;
  bool started = false;  // the command runs; its output is in the paths below
  bool ended = false;    // it ended (exit_code or signal), or could not start (error)
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string error;
  std::string stdout_path;
  std::string stderr_path;
  // A session that ended with little output carries all of it (base64 in JSON, at most
  // kMaxInlineExecOutput bytes of both streams together), so that the controller answers
  // its client's reads without asking the node for the files. Optional fields: readers
  // older than them ignore them and relay the files as before; no version marks them.
  bool output_complete = false;
  std::string stdout_data;
  std::string stderr_data;
  friend bool operator==(const ExecReport&, const ExecReport&) = default;
};

// The most output an ExecReport carries inline (stdout and stderr together).
inline constexpr size_t kMaxInlineExecOutput = 16 << 10;

// One item of an interactive session's input, in the order the client sent them.
struct ExecInputItem {
  int64_t seq = 0;         // 1, 2, ... within the session; a resent item is ignored
  std::string data;        // bytes for the command's standard input (base64 in JSON)
  bool eof = false;        // the client's input ended: the command's stdin is closed
  int rows = 0, cols = 0;  // both > 0: the terminal's new size
  int signal = 0;          // > 0: sent to the command's process group (no terminal)
  friend bool operator==(const ExecInputItem&, const ExecInputItem&) = default;
};

// GET /v1/agent/exec/ID/input?after=SEQ&wait_ms=N: the client's input after item SEQ.
struct ExecInput {
  std::vector<ExecInputItem> items;
  bool hangup = false;  // the session is over for the client (gone, or stopped it)
  friend bool operator==(const ExecInput&, const ExecInput&) = default;
};

// POST /v1/agent/exec/ID/output: what the command printed, at the given stream offsets
// (a resent or overlapping part is dropped). `eof`: the agent has read everything.
struct ExecOutput {
  int64_t stdout_offset = 0;
  std::string stdout_data;
  int64_t stderr_offset = 0;
  std::string stderr_data;
  bool eof = false;
  friend bool operator==(const ExecOutput&, const ExecOutput&) = default;
};

// The answer to that POST: how much of each stream the controller holds, and whether
// the agent should pause (the client reads slower than the command prints).
struct ExecOutputAck {
  int64_t stdout_end = 0;
  int64_t stderr_end = 0;
  bool full = false;
  bool hangup = false;
  friend bool operator==(const ExecOutputAck&, const ExecOutputAck&) = default;
};

struct EventBatch {
  std::string node;
  std::vector<Event> events;
  std::vector<ExecReport> exec;
};

// --- telemetry (minor 3) ---

// A task holding (a share of) a GPU when it was sampled.
struct TelemetryJob {
  int64_t job_id = 0;
  int gpu_milli = 1000;  // the task's share of this GPU
  // When the job's attempt started (ms since the epoch; 0: unknown). Not on the wire: the
  // controller sets it from its own record (Controller::GpuHolders), so that a sample
  // credits the job's use only from its start, not the whole gap since the GPU's previous.
  int64_t start_ms = 0;
  friend bool operator==(const TelemetryJob&, const TelemetryJob&) = default;
};

// A process using the GPU; job_id is the pool job whose cgroup it runs in (0: none).
struct TelemetryProcess {
  int64_t pid = 0;
  int64_t job_id = 0;
  std::optional<int64_t> used_mib;
  std::optional<double> util_pct;
  friend bool operator==(const TelemetryProcess&, const TelemetryProcess&) = default;
};

// One sample of one GPU (gpu::GpuSample on the wire). Absent figures stay unset.
struct GpuTelemetry {
  int index = -1;
  std::string uuid;
  int64_t at_ms = 0;  // the agent's wall clock
  std::optional<double> util_pct;
  std::optional<int64_t> mem_used_mib;
  std::optional<int64_t> mem_total_mib;
  std::optional<double> power_w;
  std::optional<double> temp_c;
  // The last Xid error since the agent started, 0 when none yet; unset where the GPU's
  // source cannot watch Xid events. (Agents before xid_count sent the ECC count here.)
  std::optional<int64_t> xid_errors;
  // Xid errors since the agent started; added within 1.3 (optional, so older readers
  // ignore it and older writers leave it unset).
  std::optional<int64_t> xid_count;
  // Uncorrected (double-bit) ECC errors since the driver loaded; added within 1.3 too.
  std::optional<int64_t> ecc_uncorrected;
  // Retired pages, row remapping, HW slowdown (NVML; AMD RAS and bad pages), the health
  // policy's threshold rows' inputs; added within 1.3 (hardware_health_json.h).
  gpu::HardwareHealth hw;
  std::vector<TelemetryJob> jobs;
  std::vector<TelemetryProcess> processes;
  friend bool operator==(const GpuTelemetry&, const GpuTelemetry&) = default;
};

// POST /v1/agent/telemetry: the samples an agent took since its last batch, oldest
// first (several rounds when the controller was out of reach).
// The node's health program's verdict (`gpupool agent --health-check`, docs/health.md):
// a GPU it named bad, by its index on the node.
struct HealthReportGpu {
  int index = -1;
  std::string reason;
  friend bool operator==(const HealthReportGpu&, const HealthReportGpu&) = default;
};
struct HealthReport {
  int64_t at_ms = 0;                  // when it ended, the agent's wall clock
  bool passed = false;                // exit 0 and nothing named bad
  std::string node_reason;            // why the whole node is bad (a non-zero exit, a time-out,
                                      // a "node bad REASON" line); empty when it is not
  std::vector<HealthReportGpu> gpus;  // GPUs named bad ("gpu=INDEX bad REASON")
  std::string output;                 // the end of its output, for people
  friend bool operator==(const HealthReport&, const HealthReport&) = default;
};

// The agent's disk watch (agent/runtime/disk_watch.h, docs/health.md): whether the
// filesystem of its state directory has too little room left. Sent at every check while
// it has, once when that ends, and once after each registration.
struct DiskReport {
  int64_t at_ms = 0;      // when it was read, the agent's wall clock
  std::string path;       // the directory whose filesystem was read
  bool pressure = false;  // too little room: the controller drains the node
  std::string reason;     // what is short, when under pressure
  uint64_t free_bytes = 0;
  uint64_t total_bytes = 0;
  uint64_t free_inodes = 0;
  uint64_t total_inodes = 0;
  friend bool operator==(const DiskReport&, const DiskReport&) = default;
};
OrderedJson EncodeDiskReport(const DiskReport& d);
Result<DiskReport> DecodeDiskReport(const Json& j);  // bounded; errors name the field

struct TelemetryBatch {
  std::string node;
  std::vector<GpuTelemetry> samples;
  // Added within 1.3: the health program's latest verdict, once per run of it (older
  // controllers ignore it; a batch may carry it with no samples).
  std::optional<HealthReport> health;
  // Added within 1.3: the disk watch's report (older controllers ignore it).
  std::optional<DiskReport> disk;
  friend bool operator==(const TelemetryBatch&, const TelemetryBatch&) = default;
};
// Most samples one batch carries; an agent keeps no more than this many unsent.
inline constexpr size_t kMaxTelemetrySamples = 8192;

// Encoders: what the sender writes. `peer` (work only) is the receiver's version: fields
// it does not know are left out.
OrderedJson EncodeRegistration(const Registration& r);
OrderedJson EncodeRegistrationReply(const RegistrationReply& r);
// The controller's answer, with HTTP 409, to a registration whose version it cannot talk
// to: {"error": why, "protocol": the controller's version}. Retrying cannot help, so an
// agent that reads one stops (DecodeRegistrationRefusal gives it the version to name).
OrderedJson EncodeRegistrationRefusal(Version controller, const std::string& why);
// The controller's version in such a refusal; nullopt for any other answer (a 409 of
// another cause, or a controller from before refusals said their version).
std::optional<Version> DecodeRegistrationRefusal(const Json& j);
// The controller's answer, with HTTP 409, to a registration under the name of a node
// whose live agent is another (Registration::agent_id): {"error": why, "refused":
// "agent_id"}. Retrying cannot help either; IsAgentIdRefusal tells it from any other 409
// (a controller that lost its lease answers one worth retrying).
OrderedJson EncodeAgentIdRefusal(const std::string& why);
bool IsAgentIdRefusal(const Json& j);
OrderedJson EncodeWork(const Work& w, Version peer = kVersion);
OrderedJson EncodeEventBatch(const EventBatch& b);
OrderedJson EncodeLaunchOrder(const LaunchOrder& o);

// Decoders: never throw; errors name the field. A registration without a version is
// refused (it comes from an agent older than this protocol).
Result<Registration> DecodeRegistration(const Json& j);
Result<RegistrationReply> DecodeRegistrationReply(const Json& j);
Result<Work> DecodeWork(const Json& j);
Result<EventBatch> DecodeEventBatch(const Json& j);
Result<LaunchOrder> DecodeLaunchOrder(const Json& j, std::string_view path);
OrderedJson EncodeTelemetryBatch(const TelemetryBatch& b);
Result<TelemetryBatch> DecodeTelemetryBatch(const Json& j);

// The exec I/O messages. ExecInputItem is also the body of a client's
// POST /v1/exec/ID/input (docs/api.md).
OrderedJson EncodeExecInputItem(const ExecInputItem& item);
Result<ExecInputItem> DecodeExecInputItem(const Json& j, const std::string& path);
OrderedJson EncodeExecInput(const ExecInput& in);
Result<ExecInput> DecodeExecInput(const Json& j);
OrderedJson EncodeExecOutput(const ExecOutput& out);
Result<ExecOutput> DecodeExecOutput(const Json& j);
OrderedJson EncodeExecOutputAck(const ExecOutputAck& ack);
Result<ExecOutputAck> DecodeExecOutputAck(const Json& j);
// Most bytes one input item or one output message carries.
inline constexpr size_t kMaxExecChunk = 256 << 10;

}  // namespace gpupool::protocol
