// Controller: the pool's brain. Owns the job state machine, the node registry and the
// scheduler loop; persists every transition to the Store before acting on it.
//
// In memory it keeps the active (non-terminal) jobs and the nodes, mirrored from the
// store at start-up, so the scheduler and the agents' polls never scan the store. All
// public methods are thread-safe (one mutex; the HTTP server calls in from many
// threads). The controller never touches a GPU and never launches anything: agents poll
// for work (WaitForWork) and report what happened (ApplyEvents).
//
// Under a long queue the lock stays short: node views walk only the jobs holding resources, agent
// polls and registrations only those on their node (index_), a scheduling pass takes under the lock
// only the jobs changed since the last pass (their immutable per-job copies, slim_, into its own
// sched_jobs_) and the nodes' infos changed since, plans outside the lock, and applies only the
// pending reasons that changed. Submissions to a pool whose last pass could start nothing are
// planned together after arrival_batch_us; freed resources, node changes and cancellations trigger
// a pass at once. A pass starts at most max_starts_per_pass jobs, so that its commit (each step and
// install under the lock) stays bounded after a mass release; a capped pass is followed by the next
// at once. The scheduler keeps each job's conversion from pass to pass (sched_input.h,
// ConversionCache) and the cluster (KeptCluster), redoing only what started, ended, moved or
// changed since the last pass.
//
// No store read or write happens under the lock. Every change of an active job goes
// through one commit path (Commit): the job's next state is stepped under the lock
// (job_lifecycle.h), written without it as a compare-and-set on the state and version
// the step read, and installed under it again. Until the write lands readers see the job
// as it was; a writer whose write loses to another's steps again on what that one left.
// So a slow database delays only the callers whose own change is being written, never
// reads, polls or changes of other jobs, and no change is lost or applied twice.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "controller/controller_options.h"
#include "controller/group_commit.h"
#include "controller/job_index.h"
#include "controller/job_lifecycle.h"
#include "controller/job_signal.h"
#include "controller/layout_holds.h"
#include "controller/limits.h"
#include "controller/log_relay.h"
#include "controller/metrics.h"
#include "controller/poll_waiters.h"
#include "controller/preemption_holds.h"
#include "gpu/gpu_info.h"
#include "gpu/health_policy.h"
#include "jobs/job.h"
#include "protocol/agent_protocol.h"
#include "sched/queue/queue_policy.h"
#include "store/store.h"

namespace gpupool::controller {

class JobScheduler;
struct ScheduleResult;
struct FitCheck;
struct SchedNode;

struct Caller {
  std::string user;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool admin = false;
};

// The largest request body the API server takes: room for a submission of
// max_submission_bytes as JSON (quotes, escapes: twice its size), and at least the 1 MiB
// other requests need (an agent's relayed log chunk).
size_t MaxRequestBodyBytes(const ControllerOptions& options);

// How a `gpupool exec` session runs: with the client's terminal (tty, of rows x cols) or
// standard input relayed live, or (all false) with its output in files on the node.
struct ExecOptions {
  bool tty = false;
  bool stdin_open = false;
  int rows = 0;
  int cols = 0;
  std::map<std::string, std::string> env;  // a terminal's TERM, LANG, ... (terminal_env.h)
};

using protocol::Event;
using protocol::EventBatch;
using protocol::LaunchOrder;
using AgentWork = protocol::Work;

// One `gpupool exec` session: a command run inside a running task's allocation.
struct ExecSession {
  int64_t id = 0;       // random, 1 .. 2^53 - 1 (an exact JSON number everywhere)
  int64_t created = 0;  // the order sessions were started in (their ids have none)
  int64_t job_id = 0;
  std::string job_name;  // as its user names the job (lifecycle::UserJobId): 40_3, or the id
  int attempt = 0;
  int task_index = 0;
  std::string node;
  uint32_t uid = 0;  // the job's owner
  std::vector<std::string> argv;
  bool sent = false;     // handed to the node's agent
  int64_t sent_us = 0;   // when last handed out (resent until it is reported)
  bool started = false;  // the command runs; output in the paths
  bool ended = false;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string error;  // why it could not run
  std::string stdout_path;
  std::string stderr_path;
  // Ended with little output: all of it came with the end (ExecReport::output_complete)
  // and reads are answered from here, not relayed from the node.
  bool output_complete = false;
  std::string complete_output[2];  // stdout, stderr
  int64_t ended_mono_us = 0;
  // Interactive sessions (ExecOptions): I/O relayed live through the controller.
  ExecOptions io;
  bool primary = false;  // the command of a `gpupool run` job: its end is the job's
  std::deque<protocol::ExecInputItem> input;  // from the client, not yet applied
  int64_t input_seq = 0;                      // the last item the client sent
  size_t input_bytes = 0;
  std::string output[2];            // stdout, stderr: not yet read by the client
  int64_t output_base[2] = {0, 0};  // the stream offset of output[i][0]
  bool output_eof = false;          // the agent relayed everything
  int64_t client_seen_mono_us = 0;  // the client's last request
  int client_waiting = 0;           // client reads in progress
  bool hung_up = false;             // the client left or stopped it
  std::string hangup_reason;
  bool interactive() const { return io.tty || io.stdin_open; }
};

// A client's read of an interactive session: what is new in each stream and the state.
struct ExecStreamRead {
  std::string stdout_data;
  std::string stderr_data;
  int64_t stdout_next = 0;
  int64_t stderr_next = 0;
  bool eof = false;  // both streams are complete: nothing more will come
  bool started = false;
  bool ended = false;
  std::optional<int> exit_code;
  std::optional<int> signal;
  std::string error;
};

struct NodeView {
  std::string name;
  std::string address;       // where the node's peers reach it (agent --address)
  std::string protocol;      // the agent protocol version it speaks
  std::string state;         // "up", "down", "draining" (jobs still run), "drained"
  std::string drain_reason;  // set while drained (`gpupool node drain`)
  int64_t last_seen_us = 0;
  gpu::NodeInfo info;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t cpu_allocated_milli = 0;  // what the tasks placed on it asked for
  int64_t memory_allocated_mib = 0;
  std::vector<int> allocated_milli;  // per GPU, in node.info.gpus order
  // Who holds each GPU (in node.info.gpus order): one entry per task placed on it, in job
  // id order; a shared GPU has one per share.
  struct Holder {
    int64_t job_id = 0;
    int64_t array_id = 0;  // its array's id (the first element's), 0 for a plain job
    int array_index = 0;
    std::string user;
    int gpu_milli = 0;
  };
  std::vector<std::vector<Holder>> holders;
  // MIG instance UUID -> the job that holds it (docs/sharing.md); absent = free.
  std::map<std::string, int64_t> mig_jobs;
  // The health of the GPUs that are not healthy, by UUID (docs/health.md).
  std::map<std::string, gpu::GpuHealth> gpu_health;
  bool health_pending = false;  // no verdict from its health program yet: takes no work
  std::map<size_t, std::vector<Holder>> layout_held;  // GPU -> jobs it changed layout under
  // GPU (node.info.gpus order) -> why it takes no new work, as the scheduler holds it: its
  // health ("cordoned: REASON", "failed: ..."), its layout changed under running jobs, or a
  // stopped attempt still on it. A GPU in MIG mode takes none on any of its instances.
  std::map<size_t, std::string> out_of_service;
  std::optional<protocol::DiskReport> disk;  // its agent's latest disk watch report
  int running_jobs = 0;
};

// What cancelling a whole array did (Controller::CancelArray).
struct ArrayCancelled {
  jobs::Job head;    // its first element (whose id is the array's), as it is now
  int elements = 0;  // how many the array has
  int queued = 0;    // pending elements cancelled
  int running = 0;   // assigned or running elements now being stopped
  int stopping = 0;  // elements an earlier cancel is stopping still (not counted above)
};

// The start plan (`queue --start`, sched/queue/start_plan.h): the first this many pending
// jobs that may start, in queue order, planned at most every this often.
inline constexpr size_t kStartPlanJobs = 100;
inline constexpr int64_t kStartPlanPeriodUs = 5'000'000;

class Controller {
 public:
  // Loads state from `store`. Both `store` and `clock` must outlive the controller.
  static Result<std::unique_ptr<Controller>> Create(store::Store* store, const Clock* clock,
                                                    ControllerOptions options);
  ~Controller();

  // Start / stop the scheduler thread (on events and periodically), the node-timeout sweep.
  void Start();
  void Stop();

  // --- users ---
  // A job with a submit_key that its user used before is not created again: the answer is the job
  // that key made, with *duplicate set. ResourceExhausted, naming the bound and its key: a
  // submission over max_submission_bytes, or past a bound on the queue (CheckQueuedLimits).
  // PermissionDenied: a project the user may not charge (enforce_projects).
  Result<jobs::Job> Submit(jobs::Job job, const Caller& caller, bool* duplicate = nullptr);
  // ResourceExhausted, naming the size, the bound and its key, when `job`'s submission
  // (jobs::SubmissionBytes) is over max_submission_bytes. Submit checks it first; the API
  // asks before it inspects a job's image, to answer 413 rather than 429.
  Status CheckSubmissionSize(const jobs::Job& job) const;
  const ControllerOptions& options() const { return options_; }
  Result<jobs::Job> Cancel(int64_t id, const Caller& caller);
  // The command of a `gpupool alloc` job ended on its client's machine: the allocation is released
  // and the job ends as the command did (SUCCEEDED for exit 0, else FAILED), as salloc's job does,
  // not CANCELLED. InvalidArgument for a job that is no allocation; a job already stopping (an
  // admin's cancel, its time limit) keeps that outcome; a pending allocation is cancelled (Cancel).
  Result<jobs::Job> EndAllocation(int64_t id, const Caller& caller, std::optional<int> exit_code,
                                  std::optional<int> signal);
  // `hold`: keeps a pending job from starting until released (owner or admin; a hold an
  // admin put on another user's job is released by admins only). Holding a held job or
  // releasing one that is not held changes nothing (*changed: false); a running one is refused.
  Result<jobs::Job> Hold(int64_t id, const Caller& caller, bool hold, bool* changed = nullptr);
  // checkpoint-done: preempted job `id` checkpointed; its grace ends (a `task`'s alone).
  Result<jobs::Job> CheckpointDone(int64_t id, const Caller& caller, std::optional<int> task = {});
  // The usage limits (limits.h) at their revision: anyone reads them; admins replace them
  // whole, if at revision `expected` when >= 0 (else FailedPrecondition naming both), and
  // if `check` passes on the limits replaced (its error otherwise).
  RevisedLimits GetLimits();
  Result<RevisedLimits> SetLimits(Limits limits, const Caller& caller, int64_t expected = -1,
                                  const LimitsCheck& check = nullptr);
  // Ids of the queued or running elements of array `array_id` (all when index < 0).
  std::vector<int64_t> ArrayElements(int64_t array_id, int index = -1);
  // The job id of element `index` of array `array_id`, in any state: what `gpupool queue` prints as
  // ARRAY_INDEX (e.g. 12_3). NotFound, naming ARRAY_INDEX and what to use instead, when `array_id`
  // is no array or the array has no such element; owners and admins only, as Get.
  Result<int64_t> ArrayElementId(int64_t array_id, int index, const Caller& caller);
  // Cancels every element of array `array_id` still queued or running (`gpupool cancel
  // 12`), and says how many were in each state; a repeated cancel while running elements
  // stop is no error and counts them as `stopping`. FailedPrecondition when none was: the
  // array has ended. InvalidArgument when `array_id` is no array's id.
  Result<ArrayCancelled> CancelArray(int64_t array_id, const Caller& caller);
  // `gpupool cancel --signal` (Slurm's scancel --signal): job_signal.h says what it does.
  Result<SignalSent> SignalJob(int64_t id, const Caller& c, int sig, bool main_only, bool array);
  Result<jobs::Job> Get(int64_t id, const Caller& caller);
  // The last pass's planned starts of pending jobs (µs since the epoch) by id: under the easy
  // start rule the reservation's holder has one (`queue --start`); none otherwise.
  std::map<int64_t, int64_t> StartEstimates();
  // Why a pending job has no planned start, by id (the last start plan's).
  std::map<int64_t, std::string> StartNotes();
  // Active jobs come from memory. A list of every active job (no user, no order, no
  // limit) and Nodes are copied internal::kChunkUnderLock at a time with mu_ let go
  // between chunks: each job or node is listed once, in order, as it was when its chunk
  // was copied (a job that ended in a gap before its chunk is left out).
  Result<std::vector<jobs::Job>> List(const store::JobFilter& filter, const Caller& caller);
  std::vector<NodeView> Nodes();
  // How a placed job's GPUs are held to it (docs/sharing.md), as its node's agent applies
  // it: "exclusive" for whole GPUs, "mig" on a MIG instance, else the share's GPU's mode
  // ("mps", "dmem", "none"; a container share on a dmem GPU: "none"). Empty for a job
  // without GPUs or not placed, or when its node is no longer known.
  std::string GpuEnforcement(const jobs::Job& job) EXCLUDES(mu_);
  // Admins only. On a drained node what runs finishes and nothing new starts, until
  // ResumeNode; the drain and its reason are stored, so they outlive restarts of the
  // controller and re-registrations of the agent. Returns the node as Nodes() shows it.
  Result<NodeView> DrainNode(const std::string& name, const std::string& reason,
                             const Caller& caller);
  Result<NodeView> ResumeNode(const std::string& name, const Caller& caller);
  // Admins only: GPU `gpu` (its index on the node, or its UUID), taken out of service by the health
  // policy, takes work again; its health is stored as healthy, "resumed by" the admin. NotFound
  // naming what to use for an unknown node or GPU; FailedPrecondition for a GPU that is in service.
  Result<NodeView> ResumeGpu(const std::string& node, const std::string& gpu, const Caller& caller)
      EXCLUDES(mu_);
  // GPU health (controller_health.cc, docs/health.md): the Xids in an agent's telemetry samples of
  // its own GPUs (oldest first) move each GPU's health by the policy; a GPU out of service takes no
  // new work, the jobs on a failed one end or requeue (lifecycle::GpuFailed), and a reboot-class
  // Xid drains the node. NotFound for a node that is not registered.
  Status ObserveGpuErrors(const std::string& node,
                          const std::vector<protocol::GpuTelemetry>& samples) EXCLUDES(mu_);
  // The hardware health fields in an agent's telemetry samples of its own GPUs (retired pages,
  // row remapping, HW slowdown, uncorrected ECC; controller_hw_health.cc): each threshold row of
  // the policy whose level rises makes the GPU suspect or cordons it ("by" policy; its jobs go
  // on), held by the breaker as Xids are. NotFound for a node that is not registered.
  Status ObserveHardwareHealth(const std::string& node,
                               const std::vector<protocol::GpuTelemetry>& samples) EXCLUDES(mu_);
  // The node's health program's verdict (agent/runtime/health_check.h): the GPUs it names are
  // cordoned "by" health-check, a node it calls bad is drained ("health check: ..."); a passing
  // run returns what it took out (and nothing else) to service. The breaker (--health-breaker)
  // holds automatic drains and cordons as for Xids. NotFound for a node not registered.
  Status ObserveHealthReport(const std::string& node, const protocol::HealthReport& report)
      EXCLUDES(mu_);
  // The agent's disk watch (agent/runtime/disk_watch.h): pressure drains the node ("disk
  // pressure: ..."); its end returns a node so drained, or drained for a job it could not start
  // for want of room, and nothing else. NotFound for a node not registered.
  Status ObserveDiskReport(const std::string& node, const protocol::DiskReport& report)
      EXCLUDES(mu_);
  // Ids of queued or running jobs that use named environment "NAME:VERSION".
  std::vector<int64_t> JobsUsingEnvironment(const std::string& ref);

  // --- exec (gpupool exec) ---
  // Starts `argv` in task `task_index` of job `job_id` for its owner (or an admin), once
  // that task runs (it may still be starting). Returns the session id.
  // FailedPrecondition once the job or task has ended or is being stopped.
  Result<int64_t> StartExec(int64_t job_id, int task_index, std::vector<std::string> argv,
                            const Caller& caller, ExecOptions io = {});
  // The session once it differs from `seen` (started / ended changed), or after wait_ms.
  Result<ExecSession> WaitExec(int64_t exec_id, const Caller& caller, bool seen_started,
                               bool seen_ended, int64_t wait_ms);
  // Stops a session's command (its agent is told to cancel it).
  Status CancelExec(int64_t exec_id, const Caller& caller);

  // --- interactive sessions (exec_sessions.cc; docs/api.md "Interactive sessions") ---
  // gpupool run: waits up to wait_ms for task 0 of `job_id` to run, then starts the job's
  // command there (once; a later attach gets the same session) with a terminal of rows x
  // cols when the job asked for one. Returns the session id, or 0 while the job still
  // waits (`*job` then says why). For a gpupool alloc job, waits until every task runs
  // and returns 0 with the job. FailedPrecondition once the job has ended, and for batch jobs.
  Result<int64_t> AttachRun(int64_t job_id, const Caller& caller, int rows, int cols,
                            int64_t wait_ms, jobs::Job* job);
  // The client's input, in order: item.seq must be the next one (a resent one is
  // ignored). ResourceExhausted while the command leaves 1 MiB of input unread.
  Status PushExecInput(int64_t exec_id, const Caller& caller, protocol::ExecInputItem item);
  // What the session printed from the given offsets (bytes before them are dropped: the client
  // has them), waiting up to wait_ms for news: output, the start (unless seen_started), the end.
  Result<ExecStreamRead> ReadExecStream(int64_t exec_id, const Caller& caller,
                                        int64_t stdout_offset, int64_t stderr_offset,
                                        bool seen_started, int64_t wait_ms);
  // The agent's side, for sessions on `node` only: the client's input after item
  // `after` (waiting up to wait_ms), and what the command printed.
  Result<protocol::ExecInput> TakeExecInput(const std::string& node, int64_t exec_id, int64_t after,
                                            int64_t wait_ms);
  // With wait_ms, the answer waits (that long at most) while the client is over 1 MiB
  // behind, so the agent reads no more than the client can take.
  Result<protocol::ExecOutputAck> PutExecOutput(const std::string& node, int64_t exec_id,
                                                const protocol::ExecOutput& out,
                                                int64_t wait_ms = 0);
  // POST /v1/jobs/ID/alive from `gpupool alloc` (the caller's allocation `id`): released once
  // silent for exec_client_timeout_us (SweepExecClients); answers that timeout in seconds.
  Result<int64_t> AllocAlive(int64_t id, const Caller& caller);
  // Hangs up silent interactive sessions, cancels `gpupool run` jobs nobody attached to and
  // releases silent allocations (exec_client_timeout_us). The loop calls it every period.
  Status SweepExecClients();

  // --- agents ---
  // `remote_ip`: where it came from (the default address), "" for the Unix socket. Errors:
  // FailedPrecondition (protocol too far off), AlreadyExists (another live agent's node).
  Result<protocol::RegistrationReply> RegisterNode(protocol::Registration reg,
                                                   const std::string& remote_ip);
  // Returns work for the node, waiting up to wait_ms for some; also the heartbeat.
  // Blocks its thread while it waits: the API's long poll uses AwaitWork instead.
  Result<AgentWork> WaitForWork(const std::string& node, int64_t wait_ms);
  // WaitForWork without a thread (issue 31): `done` gets what WaitForWork would return. At once, on
  // this thread, when there is work, the node is unknown or lost, wait_ms is 0 or the controller
  // stops; otherwise the controller's one poll thread answers once work for the node comes
  // (WakeAgent/WakeAgents) or the wait's deadline passes, and looks again every kResendAfterUs
  // meanwhile (orders not acknowledged are sent again; the node counts as seen). `done` runs
  // exactly once, with no lock of the controller held, unless CancelWorkWait(ticket) came first.
  // Returns the ticket, 0 when answered already.
  using WorkCallback = std::function<void(Result<AgentWork>)>;
  uint64_t AwaitWork(const std::string& node, int64_t wait_ms, WorkCallback done);
  // Forgets a waiting poll (its client left): its `done` never runs. Idempotent.
  void CancelWorkWait(uint64_t ticket);
  size_t WaitingPolls();  // polls waiting in AwaitWork now
  // Answers once the batch's changes are written and installed. Batches that arrive while
  // another's are written are written together, in one transaction (CommitEventGroup).
  Status ApplyEvents(const std::string& node, const EventBatch& batch);
  // Tests: event batches waiting for the batches in flight to be written, and a wait
  // until `n` of them wait.
  size_t EventBatchesWaiting() { return event_commits_.waiting(); }
  void WaitForEventBatches(size_t n) { event_commits_.WaitUntilWaiting(n); }
  // Whether `node` is registered and polling (not timed out).
  bool NodeUp(const std::string& node);
  // Every GPU of `node` by index, with the jobs holding it now and their shares: what an
  // agent's telemetry may name (the rest of a batch is not the agent's to report).
  std::map<int, std::vector<protocol::TelemetryJob>> GpuHolders(const std::string& node);
  // The agent protocol version `node` registered with (1.0 when unknown).
  protocol::Version NodeVersion(const std::string& node);
  // Reads of log files on the nodes ride on the agents' polls.
  LogRelay& log_relay() { return log_relay_; }

  // Whether the scheduler loop is running and went round recently (GET /readyz).
  bool SchedulerLooping() const;

  // --- metrics (GET /metrics) ---
  // The active jobs by state and pending reason, the nodes by state, the GPUs; `nodes`, when
  // given, receives the Nodes() the snapshot was made from.
  PoolSnapshot MetricsSnapshot(std::vector<NodeView>* nodes = nullptr);
  PoolMetrics& metrics() { return metrics_; }
  // For the metrics' accounting (pool_accounting.h), which then reads no ended job from
  // the store each run: from WatchEnds on, each job that ends here (Install) is kept, as
  // installed, until TakeEnds hands the kept ones over. At most kMaxKeptEnds are kept;
  // beyond, they are dropped and the next TakeEnds says so (`complete` false: the taker
  // reads the store instead). A standby has no controller, so every end is installed here.
  static constexpr size_t kMaxKeptEnds = 1'000'000;
  // `late`: ended jobs whose records gained GPU-hours from a lost attempt's end reported
  // late (Effects::late_gpu_hours), as installed, with those hours; kept whatever the
  // count (they are rare), and handed over with the ends.
  struct LateCharge {
    jobs::Job job;
    double gpu_hours = 0;
  };
  struct Ends {
    std::vector<jobs::Job> jobs;
    bool complete = true;
    std::vector<LateCharge> late;
  };
  void WatchEnds() EXCLUDES(mu_);
  Ends TakeEnds() EXCLUDES(mu_);
  // The projects of ended jobs the accounting read from the store: names AdmitProject knows.
  void NoteListedProjects(const std::set<std::string>& names) EXCLUDES(mu_);

  // --- scheduling ---
  // One scheduling pass now (the loop calls this; tests call it directly).
  Status ScheduleOnce();
  // Marks jobs on nodes silent for longer than the timeout LOST (or requeues them).
  Status SweepNodes();
  // Stops the running jobs past their time limit by time_limit_grace_s (TimeLimit).
  Status SweepTimeLimits();
  // Internal, naming the lookup and the job, unless every lookup the controller keeps
  // over its active jobs (job_index.h) is what a walk of them makes (tests).
  Status VerifyIndexes() EXCLUDES(mu_);
  // How many times submissions' fit check over the nodes was built (tests: once per
  // change of the nodes, not per submission).
  uint64_t FitChecksBuilt() EXCLUDES(mu_);

 private:
  using Lock = UniqueLock;
  Controller(store::Store* store, const Clock* clock, ControllerOptions options);
  Status Load() EXCLUDES(mu_);
  // Holds the store's limits if their revision moved without this controller; answers it.
  Result<int64_t> FollowStoredLimits() EXCLUDES(mu_);
  // A change asked of an active job: `event`, stepped (job_lifecycle.h) on job `id` as it
  // is when the change is made. `guard`, when set, first looks at the job (mu_ held): its
  // refusal is the change's answer and nothing is stepped (NotFound: the change no longer
  // applies, as for a job that is not active).
  struct Change {
    int64_t id = 0;
    lifecycle::Event event;
    std::function<Status(const jobs::Job&)> guard;
    // A preemption's hold, stored with the job's transition (Store::JobUpdate::hold).
    std::optional<store::PreemptHoldRecord> hold;
    // A node's report of a task's end: when the job is not active it is read from the
    // store and stepped as it is there, for the late end of a lost attempt of it
    // (job_lifecycle_late.h); the transition leaves it ended and out of memory.
    bool may_have_ended = false;
  };
  // What Commit does with a change whose job another writer changed after it was stepped.
  enum class OnConflict {
    kRetry,  // step it again on the job as that writer left it
    kDrop,   // leave it out (FailedPrecondition): the scheduler's, whose next pass looks again
  };
  // The one way active jobs change (issue 27's commit path): under mu_, each change is stepped on
  // its job as it is in memory (a second change of one job on the first one's result); without mu_,
  // the transitions are written in one compare-and-set transaction on the state and version each
  // step read; under mu_ again, each is installed with its effects (Install). When another writer
  // changed one of the jobs meanwhile (the store's IsConflict), nothing was written: once that
  // writer's transition is installed, the changes are stepped again, but for kDrop's of the changed
  // jobs. Called without mu_, which is not held across the store's write; no other path writes a
  // job's change. Returns each change's answer, in order: the job as installed (as it is, for a
  // change that changes nothing), NotFound when the job is not active, the guard's or the
  // lifecycle's refusal. Its own error only when the store fails.
  Result<std::vector<Result<jobs::Job>>> Commit(std::vector<Change> changes, OnConflict on_conflict)
      EXCLUDES(mu_);
  // Logs a Commit's answers that are refusals (NotFound is none: the change no longer applies).
  static void LogRefusals(std::string_view what, const std::vector<Result<jobs::Job>>& answers);
  // What Cancel, Hold and release answer for job `id` when it is not active (read from
  // the store, without mu_): NotFound, PermissionDenied, or the lifecycle's refusal.
  // List's active jobs in the order of f.sort (jobs/job_sort.h), the first f.limit of them.
  std::vector<jobs::Job> SortedActive(const store::JobFilter& f,
                                      const std::function<bool(const jobs::Job&)>& matches)
      REQUIRES(mu_);
  Result<jobs::Job> NotActiveAnswer(int64_t id, const Caller& caller, const lifecycle::Event& event)
      EXCLUDES(mu_);
  // One change, with kRetry: its answer, or the store's error.
  Result<jobs::Job> CommitOne(Change change) EXCLUDES(mu_);
  // The changes of agents' event batches that arrived while one of them was committed
  // (ApplyEvents, event_commits_): one Commit (kRetry) of all of them in the order they
  // came, so one store transaction when no compare-and-set fails; each batch's answers
  // as its own Commit would give them. When that Commit fails (the store's error, or a
  // job changed outside this controller), each batch is committed again on its own, so
  // the failure is only the answer of the batches it is about.
  using EventCommit = Result<std::vector<Result<jobs::Job>>>;
  std::vector<EventCommit> CommitEventGroup(std::vector<std::vector<Change>> group) EXCLUDES(mu_);
  // A Commit round's steps: the transitions of the changes that change their job, the
  // writes they make, and which change each one is.
  struct Stepped {
    std::vector<size_t> change;
    std::vector<lifecycle::Transition> steps;
    std::vector<store::Store::JobUpdate> updates;
  };
  // Under mu_: steps changes `todo` (indexes into `changes`); the answers of those that
  // write nothing go in `answers`.
  // `stored`: ended jobs as read from the store, for changes that may_have_ended.
  Stepped StepChanges(const std::vector<Change>& changes, const std::vector<size_t>& todo,
                      std::vector<Result<jobs::Job>>& answers,
                      const std::map<int64_t, jobs::Job>& stored) REQUIRES(mu_);
  // Under mu_: installs a round's written steps, each change's answer in `answers`.
  void InstallSteps(Stepped& stepped, std::vector<Result<jobs::Job>>& answers) REQUIRES(mu_);
  // Puts a written transition in memory (the job in active_, or out of it) and carries
  // out its effects: stop orders, strays, pending reasons, wake-ups. mu_ held.
  void Install(lifecycle::Transition t) REQUIRES(mu_);
  LaunchOrder MakeLaunchOrder(const jobs::Job& job, size_t task_index) const REQUIRES(mu_);
  // How a `gpupool run` job's command ended: a copy (its session may be gone by the write).
  struct CommandEnd {
    int64_t job_id = 0;
    int attempt = 0;
    std::optional<int> exit_code;
    std::optional<int> signal;
    std::string error;
    bool hung_up = false;
    std::string hangup_reason;
  };
  static CommandEnd CommandEndOf(const ExecSession& x);
  // Under mu_: an agent's report on a session; the end of a `gpupool run` job's command
  // goes in `ended`, for the caller to commit once it lets mu_ go (CommitCommandEnds).
  void ExecReported(const std::string& node, const protocol::ExecReport& r,
                    std::vector<CommandEnd>* ended) REQUIRES(mu_);
  // Under mu_: StartExec's checks and session; the task's checks; dropping sessions long ended.
  Result<int64_t> StartExecLocked(int64_t job_id, int task_index, std::vector<std::string> argv,
                                  const Caller& caller, ExecOptions io) REQUIRES(mu_);
  Status CheckExecTargetLocked(const jobs::Job& job, int task, const ExecOptions& io) REQUIRES(mu_);
  void PruneExecSessionsLocked(int64_t mono_us) REQUIRES(mu_);
  // A client_keepalive alloc's client silence counts from now (Submit; Load: + the grace).
  void WatchAllocClientLocked(const jobs::Job& job, bool loaded) REQUIRES(mu_);
  // Under mu_: ends session `exec_id` for its client (gone, or stopped it) and has its
  // agent stop the command; a `gpupool run` job's command end goes in `ended`.
  void HangUpLocked(int64_t exec_id, const std::string& reason, std::vector<CommandEnd>* ended)
      REQUIRES(mu_);
  // Under mu_: the caller's session `exec_id`. A session that does not exist and one
  // that is another user's get the same NotFound, word for word: whether someone else's
  // id exists does not show (issue 25).
  Result<ExecSession*> CallersExecLocked(int64_t exec_id, const Caller& caller) REQUIRES(mu_);
  // Under mu_: a new session id, random (ControllerOptions::random) and unused.
  Result<int64_t> NewExecIdLocked() REQUIRES(mu_);
  // Without mu_: `gpupool run` jobs' commands ended: the jobs end with them (Commit).
  void CommitCommandEnds(const std::vector<CommandEnd>& ends) EXCLUDES(mu_);
  void Loop();
  // Asks for a pass: WakeScheduler when resources or nodes changed (runs at once),
  // WakeSchedulerForArrival for new jobs (batched while the pool is full).
  void WakeScheduler() REQUIRES(mu_);
  void WakeSchedulerForArrival() REQUIRES(mu_);
  // Something may have come for the agent of `node` (of every node): its waiting polls look again.
  void WakeAgent(const std::string& node) REQUIRES(mu_);
  void WakeAgents() REQUIRES(mu_);
  // When a poll asking to wait wait_ms is answered at the latest (monotonic).
  int64_t PollDeadline(int64_t wait_ms) const;
  // What a poll of `node` gets now (maybe nothing); NotFound for an unknown or lost node.
  // Marks the orders it hands out as sent, the node as seen, a poll that `arrived`.
  Result<AgentWork> TakeWorkLocked(const std::string& node, bool arrived = false) REQUIRES(mu_);
  // AwaitWork's thread, until Stop: answers the polls that notifications or their time made due.
  void PollLoop();
  // After job `id` changed in active_ (or left it): updates index_, slim_ and the queued
  // counts. Every change of active_ must call it.
  void Touched(int64_t id) REQUIRES(mu_);
  void NoteSlimChange(int64_t id) REQUIRES(mu_);  // slim_changed_
  // Adds `delta` to the queued counts of `job`'s user, project and the pool, and its
  // submission's bytes to the queued bytes when it is the first queued job holding that
  // submission (or takes them away when it was the last). `job` is whole for +1; for -1
  // its ids and user suffice (a slim_ copy).
  void CountQueued(const jobs::Job& job, int64_t delta) REQUIRES(mu_);
  // The bytes part of it: `delta` queued jobs (or a submission still landing) more hold
  // `job`'s submission (its array's, for an element).
  void CountQueuedSubmission(const jobs::Job& job, int64_t delta) REQUIRES(mu_);
  // Sets a pending job's pending_reason from the last pass.
  void AttachPendingReason(jobs::Job* job) const REQUIRES(mu_);
  // The health circuit breaker (docs/health.md): whether taking `node` (or a GPU) out now
  // keeps the hour's automatic ones within health_breaker_fraction (>= 1); counted if so.
  bool BreakerAllows(const std::string& node, int64_t now) REQUIRES(mu_);
  void DrainAfterLaunchFailure(const std::string& node, const std::string& reason) EXCLUDES(mu_);
  // What the breaker does instead: the GPU is only suspect, with the reason; no job ends.
  void HoldBack(const std::string& node, const std::string& uuid, gpu::XidOutcome* o) REQUIRES(mu_);
  // Writes node `name`'s GPU health to its stored record (node_write_mu_ then mu_).
  Status StoreGpuHealth(const std::string& node) EXCLUDES(mu_);
  // With `seen` (the drain reason read under mu_, "" for none): only while it is still so.
  Result<NodeView> SetDrain(const std::string& name, bool draining, const std::string& reason,
                            const std::optional<std::string>& seen = std::nullopt) EXCLUDES(mu_);
  // ResourceExhausted, naming the user, project or pool and the limit (its max_queued,
  // or the options' max_queued_per_user / max_queued_total / max_queued_bytes_*), when
  // `adding` more jobs of `job`'s user and project, holding `bytes` more of submissions,
  // would pass it, counting submissions still being stored. mu_ held.
  Status CheckQueuedLimits(const jobs::Job& job, int64_t adding, int64_t bytes) REQUIRES(mu_);
  // Why no node of the pool could ever run `job` ("" when one could, or when there is no
  // node yet), on fit_check_, built again first if the nodes changed since. mu_ held.
  std::string NeverFitsLocked(const jobs::Job& job) REQUIRES(mu_);
  // NotFound or PermissionDenied naming the flag (--after-ok 12) when a dependency of `job`
  // names no job or another user's (an admin's may name any). Reads the store: without mu_.
  Status CheckDependencies(const jobs::Job& job, const Caller& caller) EXCLUDES(mu_);
  // The job an earlier submission with `job`'s user and submit_key made, if any (then
  // *duplicate is set). Reads the store: call without mu_.
  Result<std::optional<jobs::Job>> EarlierSubmission(const jobs::Job& job, bool* duplicate)
      EXCLUDES(mu_);
  // One job per index of `spec` (job.array parsed), stored in one transaction (all or
  // none); returns the first element, whose id is the array's. Each element that lands in
  // active_ takes one of `*reserved` (its user's, counted in submitting_) into the queued counts;
  // the first takes `*reserved_bytes` (the submission's, counted once for all the elements).
  Result<jobs::Job> SubmitArray(jobs::Job job, const jobs::ArraySpec& spec, int64_t* reserved,
                                int64_t* reserved_bytes) EXCLUDES(mu_);
  // Gives back `n` jobs and `bytes` reserved in submitting_* by a submission. mu_ held.
  void Unreserve(const std::string& user, const std::string& project, int64_t n, int64_t bytes)
      REQUIRES(mu_);
  // Ends (DependencyFailed) the pending jobs whose dependencies can never be met, and
  // puts those whose dependencies are unmet in `waiting` with the reason: the three
  // steps below, the store read without mu_ (controller_dependencies.cc).
  Status EndUnmeetableDependencies(std::map<int64_t, std::string>* waiting) EXCLUDES(mu_);
  // What ApplyPlan did with a pass's plan.
  enum class PlanApplied {
    kStale,  // something the plan relied on changed: nothing applied, a pass runs again
    kNone,   // nothing to start
    kSome,   // assignments written
  };
  // Commits the plan's starts (Placed), unless a job it saw holding resources changed since
  // `snapshot`; a job placed on a node declared down meanwhile ends as the node's sweep would have
  // ended it. Applies a pass's pending reasons (null: no pass ran; the touched ones only).
  void ApplyPendingReasons(ScheduleResult* plan) REQUIRES(mu_);
  Result<PlanApplied> ApplyPlan(ScheduleResult& plan) EXCLUDES(mu_);
  // Under mu_: brings the scheduler's copy of slim_ (sched_jobs_) up to date with what
  // Touched changed since the last pass (`*changes`, applied by the caller after the lock),
  // or all of it after a resync. True when a job is pending.
  bool TakeJobChanges(std::vector<std::pair<int64_t, std::shared_ptr<const jobs::Job>>>* changes,
                      bool* all) REQUIRES(mu_);
  // Under mu_: the pass's nodes, with infos copied only if changed since last (sched_infos_).
  void TakeNodes(std::vector<std::pair<SchedNode, std::shared_ptr<const gpu::NodeInfo>>>* out)
      REQUIRES(mu_);
  // Dependency resolution reads the store only without mu_, in three steps. Under mu_:
  // what pending jobs depend on whose state is not in memory (active_, ended_states_).
  // In `arrays`: the arrays with elements still active that an --after-ok waits for and
  // whose ended elements were not read since the controller started (array_failures_).
  std::set<int64_t> UnknownDependencies(std::set<int64_t>* arrays) const REQUIRES(mu_);
  // Without mu_: of each of `arrays`, its first element that ended other than SUCCEEDED
  // (none: absent); an array whose elements could not be read is left out of `read`.
  struct ArrayFailure {
    jobs::JobState state;
    std::string element;  // as its user names it, "51_3"
  };
  std::map<int64_t, std::optional<ArrayFailure>> ReadArrayFailures(const std::set<int64_t>& arrays)
      EXCLUDES(mu_);
  // Under mu_: a job ended; dependants ask (an ended job's state never changes).
  void NoteEnded(const jobs::Job& job) REQUIRES(mu_);
  // Without mu_: their states from the store (an array's as its elements' together), and
  // in `names` those of an array's other elements as their users name them ("51_3").
  std::map<int64_t, Result<jobs::JobState>> ReadEndStates(const std::set<int64_t>& ids,
                                                          std::map<int64_t, std::string>* names)
      EXCLUDES(mu_);
  // Under mu_, with those states and names (cached in ended_states_, ended_names_): pending
  // jobs whose dependencies are unmet go in `blocked` with the reason; those whose
  // dependencies can no longer be met are returned as changes to end them (DependencyFailed).
  std::vector<Change> ResolveDependencies(const std::map<int64_t, Result<jobs::JobState>>& read,
                                          const std::map<int64_t, std::string>& names,
                                          std::map<int64_t, std::string>* blocked) REQUIRES(mu_);
  // Adds the pending jobs whose earlier attempt a node still runs (and is told to stop)
  // to `stopping`, with that attempt and node, for the scheduler's EarlierAttemptGate.
  void BlockWhileEarlierAttemptsStop(
      std::map<int64_t, std::pair<int32_t, std::string>>* stopping) const REQUIRES(mu_);
  // Preemption (controller_preemption.cc). Commits a pass's preemptions (Preempt), each
  // only if its victim still holds what the plan saw.
  Status ApplyPreemptions(const ScheduleResult& plan) EXCLUDES(mu_);
  // A requeued victim waits (`waiting`, the dependency gate) while the job that preempted it
  // is pending with its hold, or waits for GPUs: not when a limit or a gate keeps it.
  // `only`: that victim alone (its reason from the moment it is requeued, Install).
  void BlockPreemptedWhilePreemptorsWait(std::map<int64_t, std::string>* waiting,
                                         int64_t only = 0) const REQUIRES(mu_);
  // The GPUs held for preemptors (preemption_holds.h), for a pass at `now_us`: first ends the
  // holds whose preemptor no longer waits (started, held, cancelled, ended), that expired, or
  // that name a node that is down or draining, and adds their preemptors to `ended` (ForgetHolds);
  // a hold ended by its user's withdrawal bars that user (BarPreemptor).
  PreemptorHolds HoldsForPass(int64_t now_us, std::vector<int64_t>* ended) REQUIRES(mu_);
  // A hold whose preemptor its user withdrew (ended before it started, or held by its
  // user) after it preempted another user's job bars that user from preempting others for
  // --preempt-withdraw-cooldown (docs/preemption.md, "A preemptor withdrawn").
  // Stores the bars if they changed (first: a bar is stored before its hold is deleted), then
  // deletes the ended holds from the store (before the pass that may preempt for the same jobs
  // again); a failed delete is logged, and the next controller to load the hold ends it again.
  void ForgetHolds(const std::vector<int64_t>& ended) EXCLUDES(mu_);
  // The stored holds (Load), with each hold's victims waiting for their preemptor, and the
  // stored bars (`bars`: the setting kPreemptBarsKey's value, if any).
  void RestoreHolds(const std::vector<store::PreemptHoldRecord>& rows,
                    const std::optional<std::string>& bars) REQUIRES(mu_);
  // Install: `next`, a preemptor with a hold, ends before it started (a withdrawal, unless
  // another user, an admin, cancelled it).
  void NotePreemptorEnded(const jobs::Job& next) REQUIRES(mu_);
  // Bars `user` from preempting others until --preempt-withdraw-cooldown after `now_us`,
  // for withdrawing `job` (as its user names it); logs it and counts it.
  void BarPreemptor(const std::string& user, const std::string& job, int64_t now_us) REQUIRES(mu_);
  void RestoreBars(const std::optional<std::string>& bars) REQUIRES(mu_);  // RestoreHolds
  // The users barred from preempting others at `now_us`, with why (AdmissionFeed); drops
  // the bars that have ended.
  std::map<std::string, std::string, std::less<>> PreemptBarsForPass(int64_t now_us) REQUIRES(mu_);

  struct NodeEntry {
    gpu::NodeInfo info;
    uint64_t info_version = 0;  // set anew (node_info_versions_) whenever `info` is
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    int64_t last_seen_us = 0;
    bool heard = true;  // since Load (false there): SweepNodes' restart grace
    bool up = false;
    std::string address;              // what peers use; the name when unknown
    protocol::Version version{1, 0};  // the agent's protocol
    bool draining = false;            // `gpupool node drain`
    std::string drain_reason;
    std::map<std::pair<int64_t, int>, int64_t> launch_sent_us;  // (job, task) -> when sent
    std::map<int64_t, int64_t> cancel_sent_us;
    // Tasks of jobs that ended here or elsewhere while this node may still run them:
    // (job, attempt) -> when last sent (0: not yet); dropped when the node reports their
    // end, when it registers again (it then lists what it runs), or after kStrayGiveUpUs
    // of answers without such a report (it ran nothing of that job).
    std::map<std::pair<int64_t, int>, int64_t> stray_sent_us;
    std::map<std::pair<int64_t, int>, int64_t> stray_first_us;
    // The strays above that are known to run here: listed by the agent's registration,
    // or started here by the controller's record and not ended. A requeued job is not
    // placed again while an earlier attempt of it is among them (at most one attempt
    // runs at a time); dropped with their stray_sent_us entry.
    std::set<std::pair<int64_t, int>> stray_running;
    // The GPUs (UUIDs) of the strays' attempts here where the record knew them: used while
    // a stray of stray_running holds them (its supervisor may run it until its grace ends).
    // A stray here of unknown GPUs keeps the whole node from new work until its end.
    std::map<std::pair<int64_t, int>, std::vector<std::string>> stray_gpus;
    std::map<int64_t, int64_t> exec_cancel_sent_us;  // exec sessions to stop, as above
    // GPU health by UUID (gpu/health_policy.h), and how many Xids of each GPU its agent
    // has reported so far (its count since the agent started).
    std::map<std::string, gpu::GpuHealth> gpu_health;
    std::map<std::string, int64_t> xid_count_seen;
    // Who let its GPUs go lately: device UUID (a GPU's, or a MIG instance's, as placements
    // name them) -> user -> when a job of theirs last let it go (it ended, was requeued
    // or moved). The agent's Xid watch runs every second, so the job that caused an Xid has
    // often ended by the time it arrives: it is pinned on them too (XidHolders). Entries
    // older than internal::kXidHolderWindowUs are dropped as the device is next let go.
    std::map<std::string, std::map<std::string, int64_t>> let_go_us;
    // Registration::health_pending: nothing is placed on it until the verdict comes.
    bool health_pending = false;
    std::string agent_id;  // Registration::agent_id of its agent ("": none, not known)
    // Its end reports for jobs not in memory looked up in the store in the minute that
    // began at ended_lookups_since_us (internal::kMaxEndedLookupsPerMinute).
    int64_t ended_lookups_since_us = 0;
    int ended_lookups = 0;
    std::optional<protocol::DiskReport> disk;  // its agent's latest disk watch report
    SignalQueue signals;                       // orders for its next poll, once (job_signal.h)
  };
  // Nodes' view of node `name` (entry `e`): its tasks from the job index.
  NodeView NodeViewLocked(const std::string& name, const NodeEntry& e) const REQUIRES(mu_);
  void UpdateLayoutHolds(const std::string& node) REQUIRES(mu_);  // its jobs' (layout_holds.h)
  // Who an application Xid on GPU `gpu` of `node` (entry `e`) is pinned on at `now`
  // (gpu::OnXid's holders): the users whose jobs hold it or one of its MIG instances, and
  // those whose jobs let it go within internal::kXidHolderWindowUs (NodeEntry::let_go_us).
  std::vector<std::string> XidHolders(const std::string& node, const NodeEntry& e,
                                      const gpu::GpuInfo& gpu, int64_t now) const REQUIRES(mu_);
  // After a change of job `before` (the slim_ copy) to `after` (nullptr: it left active_):
  // the GPUs it held and holds no more are let go now, by its user (NodeEntry::let_go_us).
  void NoteGpusLetGo(const jobs::Job& before, const jobs::Job* after) REQUIRES(mu_);

  store::Store* store_;
  const Clock* clock_;
  ControllerOptions options_;

  Mutex mu_;
  // Serialises writes of node records (registration, drain, resume), so a registration
  // never stores a node's drain state as it was before a concurrent drain. Taken before mu_.
  Mutex node_write_mu_ ACQUIRED_BEFORE(mu_);
  // Serialises writes of settings (limits), which happen without mu_.
  Mutex settings_write_mu_ ACQUIRED_BEFORE(mu_);
  std::condition_variable work_cv_;    // agents waiting for work in WaitForWork
  std::condition_variable signal_cv_;  // SignalJob waiting: a poll arrived or took orders
  PollWaiters polls_ GUARDED_BY(mu_);  // and in AwaitWork, served by poll_thread_
  std::condition_variable poll_cv_;
  std::thread poll_thread_;  // started by the first AwaitWork that waits
  // Notified by every Install: a Commit whose write lost to another writer's waits on
  // it for that writer's transition to be in memory before it steps again.
  std::condition_variable install_cv_;
  std::condition_variable scheduler_cv_;            // the loop waiting for a reason to run
  bool capacity_changed_ GUARDED_BY(mu_) = false;   // resources freed, nodes changed: plan at once
  bool jobs_arrived_ GUARDED_BY(mu_) = false;       // new submissions
  bool last_pass_blocked_ GUARDED_BY(mu_) = false;  // pending jobs, and it started none
  bool stopping_ GUARDED_BY(mu_) = false;
  std::map<int64_t, jobs::Job> active_ GUARDED_BY(mu_);  // non-terminal jobs by id
  std::map<int64_t, int> unlaunched_ GUARDED_BY(mu_);    // NeverLaunched (controller.cc)
  // Of ended jobs others depend on: their states, and the names of an array's elements
  // among them but its first ("51_3", as reasons name them).
  std::map<int64_t, jobs::JobState> ended_states_ GUARDED_BY(mu_);
  std::map<int64_t, std::string> ended_names_ GUARDED_BY(mu_);
  // Of arrays: the first element that ended other than SUCCEEDED (an --after-ok on the
  // array can never be met from then on), and the arrays whose ended elements were read
  // from the store since start (those that ended before it).
  std::map<int64_t, ArrayFailure> array_failures_ GUARDED_BY(mu_);
  std::set<int64_t> arrays_read_ GUARDED_BY(mu_);
  RevisedLimits limits_ GUARDED_BY(mu_);  // and their revision in the store
  // What AdmitProject's look-alike check reads: the projects of active_'s jobs since start, of
  // ended ones (NoteListedProjects), the entries' (never shrinks, as PoolAccounting's do not).
  sched::ProjectNames listed_projects_ GUARDED_BY(mu_);
  // Submissions past the queue bounds' check, not yet in active_: per user, project, all.
  std::map<std::string, int64_t> submitting_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> submitting_project_ GUARDED_BY(mu_);
  int64_t submitting_total_ GUARDED_BY(mu_) = 0;
  // Their submissions' bytes, per user.
  std::map<std::string, int64_t> submitting_bytes_ GUARDED_BY(mu_);
  int64_t submitting_bytes_total_ GUARDED_BY(mu_) = 0;
  // The PENDING jobs of active_ (held ones too) per user, per accounting project and in
  // all, kept by Touched: what the queue bounds count, without a walk of the queue.
  std::map<std::string, int64_t> queued_by_user_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> queued_by_project_ GUARDED_BY(mu_);
  int64_t queued_total_ GUARDED_BY(mu_) = 0;
  // The submissions of those jobs, by the job id of their holder (an array's id for its
  // elements, which share one copy of it), with how many queued jobs hold each; and
  // their bytes per user and in all: what the bounds on queued bytes count.
  struct QueuedSubmission {
    std::string user;
    int64_t bytes = 0;
    int64_t jobs = 0;
  };
  std::map<int64_t, QueuedSubmission> queued_submissions_ GUARDED_BY(mu_);
  std::map<std::string, int64_t> queued_bytes_by_user_ GUARDED_BY(mu_);
  int64_t queued_bytes_total_ GUARDED_BY(mu_) = 0;
  // Lookups over active_ (job_index.h), kept by Touched: the jobs that hold resources
  // (ASSIGNED or RUNNING), those on each node, each user's jobs, the pending jobs with
  // dependencies, each array's active elements. What node views, agent polls,
  // registrations, node-loss sweeps, dependency resolution and job lists walk, not the whole queue.
  JobIndex index_ GUARDED_BY(mu_);
  // For each job in active_, an immutable copy with what planning needs: a pass takes
  // its snapshot by sharing these, not by copying thousands of jobs under the lock.
  std::map<int64_t, std::shared_ptr<const jobs::Job>> slim_ GUARDED_BY(mu_);
  // The ids Touched since the scheduler last took them (TakeJobChanges); past a bound the
  // list is dropped and the next pass takes every job (slim_resync_).
  std::vector<int64_t> slim_changed_ GUARDED_BY(mu_);
  bool slim_resync_ GUARDED_BY(mu_) = true;
  // The scheduler loop's own: slim_ as of its last pass (what that pass planned on), and
  // each node's info as of its last copy (NodeEntry::info_version).
  std::map<int64_t, std::shared_ptr<const jobs::Job>> sched_jobs_;
  std::unordered_map<std::string, std::pair<uint64_t, std::shared_ptr<const gpu::NodeInfo>>>
      sched_infos_;
  uint64_t node_info_versions_ GUARDED_BY(mu_) = 0;
  // Why each job left pending by the last pass waits. A pass applies what changed
  // (ScheduleResult::pending_reasons, reasons_dropped) and sets the jobs in
  // reasons_touched_ (whose reason a transition set or cleared since) to the pass's, so
  // after each pass this holds exactly the pass's reasons (ApplyPendingReasons).
  std::map<int64_t, std::string> pending_reasons_ GUARDED_BY(mu_);
  std::unordered_set<int64_t> reasons_touched_ GUARDED_BY(mu_);
  // The last start plan's (ScheduleResult), with each later pass's reservation.
  std::map<int64_t, int64_t> start_estimates_us_ GUARDED_BY(mu_);
  std::map<int64_t, std::string> start_notes_ GUARDED_BY(mu_);
  bool start_planned_ = false;  // this and the next: touched by the scheduler loop only
  int64_t last_start_plan_mono_us_ = 0;
  // Preempted job -> the job it was preempted for (restored from stored holds that last).
  std::map<int64_t, int64_t> preempted_for_ GUARDED_BY(mu_);
  // Preemptor -> its victims' GPUs, held for it; stored (one row per victim) with each victim's
  // preemption, restored by Load, deleted when the hold ends (ForgetHolds).
  PreemptorHolds preempt_holds_ GUARDED_BY(mu_);
  // User -> until when (µs) and for which withdrawn preemptor (as its user names it) that
  // user's jobs preempt no other user's; stored as one setting (kPreemptBarsKey) when
  // changed (preempt_bars_changed_), restored by Load.
  std::map<std::string, std::pair<int64_t, std::string>, std::less<>> preempt_bars_ GUARDED_BY(mu_);
  bool preempt_bars_changed_ GUARDED_BY(mu_) = false;
  std::map<std::string, NodeEntry> nodes_ GUARDED_BY(mu_);
  LayoutHolds layout_holds_ GUARDED_BY(mu_);  // GPUs whose layout changed under running jobs
  // Stepped when nodes_ gains a node or one's GPUs, CPUs or memory change: fit_check_ is stale.
  uint64_t nodes_generation_ GUARDED_BY(mu_) = 0;
  // Submissions' check that some node could ever run the job (JobScheduler::NeverFits), built
  // once per nodes_generation_ (NeverFitsLocked): at 10,000 nodes it takes tens of ms under mu_.
  std::shared_ptr<FitCheck> fit_check_ GUARDED_BY(mu_);
  uint64_t fit_checks_built_ GUARDED_BY(mu_) = 0;
  gpu::HealthPolicy health_policy_;  // immutable after Create
  // Automatic cordons within the last hour: (when, node), oldest first (BreakerAllows).
  std::deque<std::pair<int64_t, std::string>> auto_cordons_ GUARDED_BY(mu_);
  int64_t health_actions_held_ GUARDED_BY(mu_) = 0;  // by the breaker, since start
  std::unique_ptr<JobScheduler> scheduler_;          // used by one pass at a time (the loop)
  LogRelay log_relay_;
  std::map<int64_t, ExecSession> execs_ GUARDED_BY(mu_);
  // Interactive sessions a user may have open (each holds a waiting request of 16).
  static constexpr int kMaxInteractivePerUser = 12;
  std::map<int64_t, int64_t> primary_exec_ GUARDED_BY(mu_);  // `gpupool run` job -> its session
  std::map<int64_t, int64_t> alloc_seen_mono_us_ GUARDED_BY(mu_);  // AllocAlive's, per job
  size_t exec_output_held_ GUARDED_BY(mu_) = 0;  // bytes of ExecSession::complete_output
  int64_t exec_created_ GUARDED_BY(mu_) = 0;     // ExecSession::created of the last session started
  std::condition_variable exec_cv_;
  std::thread loop_;
  std::atomic<int64_t> loop_seen_mono_us_{0};  // the loop's last round; 0 = not running
  PoolMetrics metrics_;
  GroupCommit<std::vector<Change>, EventCommit> event_commits_{
      [this](std::vector<std::vector<Change>> group) {
        return CommitEventGroup(std::move(group));
      }};
  bool ends_watched_ GUARDED_BY(mu_) = false;  // WatchEnds
  Ends ends_ GUARDED_BY(mu_);                  // ended since the last TakeEnds
};

}  // namespace gpupool::controller
