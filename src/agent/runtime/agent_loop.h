// AgentLoop: the node agent's main loop. Registers the node's GPUs with the controller,
// long-polls it for launch and cancel orders, runs them through the Launcher, and reports
// what happens, through a protocol::ControllerLink: over the same HTTP protocol whether
// the controller is in this process (`gpupool up`) or on another machine (docs/api.md,
// "Agent protocol"), or to an in-process fake in tests.
//
// It survives a controller restart (retries with back-off, re-registers when the
// controller no longer knows the node) and its own restart (Launcher::Adopt finds the
// jobs whose shims still run, in either directory layout). Events are kept until the
// controller has acknowledged them, and launch orders are de-duplicated by their run
// (job, task, attempt: agent::RunId), so nothing is started twice and no final state is
// lost; a task holds one attempt at a time. Run() blocks until Stop(); both are
// thread-safe.
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
#include <vector>

#include "agent/launcher.h"
#include "agent/mps.h"
#include "agent/runtime/disk_watch.h"
#include "agent/runtime/exec_relay.h"
#include "agent/runtime/gpu_mem_watch.h"
#include "common/clock.h"
#include "common/json.h"
#include "gpu/gpu_info.h"
#include "gpu/telemetry.h"
#include "jobs/job.h"
#include "protocol/agent_protocol.h"
#include "protocol/controller_link.h"

namespace gpupool::agent {

struct AgentLoopOptions {
  std::string node_name;
  // Registered with (protocol::Registration::agent_id; agent_identity.h); "" sends none.
  std::string agent_id;
  std::string state_dir;      // the Launcher's state directory (job logs live there)
  gpu::NodeInfo node;         // what discovery found (or the fake node)
  int64_t cpu_milli = 0;      // 0 = all online CPUs
  int64_t memory_mib = 0;     // 0 = all physical memory
  int poll_wait_ms = 10'000;  // long-poll length; also the heartbeat period
  int64_t cancel_grace_s = 10;
  int launch_workers = 8;  // launches in flight at once
  // Container jobs (docs/containers.md). `container` as detected at start (its
  // `unavailable` says why image jobs cannot run here); `cdi_kind` the kind of the CDI
  // spec the agent wrote for the node's GPUs, `cdi_error` why none was written.
  agent::ContainerOptions container;
  std::string cdi_kind;
  std::string cdi_error;
  // An admin's per-node opt-out of fail-closed device isolation (launcher.h,
  // LaunchSpec::require_device_isolation).
  bool allow_unisolated_devices = false;
  // The node was replayed from a file (--fake) or is the stand-in of a GPU-less machine:
  // its device nodes are stand-ins with no GPU behind them, so isolation is not required.
  bool fake_node = false;
  // Where the node's peers reach it (--address); empty = the address the controller sees
  // this agent's requests come from.
  std::string address;
  // For tasks: the command mpirun runs as its rsh agent (ExecAgentCommand) and the
  // controller's address as a job's `gpupool exec` should use it (GPUPOOL_SERVER).
  std::string exec_agent;
  std::string server_for_jobs;
  // GPU telemetry (issue 17): every telemetry_interval_s seconds (0 = off) the sampler
  // reads the GPUs; the samples go to the controller in batches (protocol 1.3, only to a
  // controller that speaks it). Null sampler: no telemetry. `clock` times the samples,
  // the back-offs and the exec sessions' relays (null: the system clock); `proc_root` is
  // where a process's cgroup is read to find its job.
  int telemetry_interval_s = 5;
  // Between rounds the sampler's Xid counts are read this often (0: not); a new Xid
  // sends a round at once (TelemetrySampler::XidCounts).
  int xid_watch_ms = 1000;
  std::shared_ptr<gpu::TelemetrySampler> sampler;
  const Clock* clock = nullptr;
  std::string proc_root = "/proc";
  // Where the launcher makes job cgroups (LauncherOptions::cgroup_root); empty: none.
  // Before its first registration the agent stops the runs under it that a previous
  // agent of this node left (agent/stray_runs.h, agent_strays.cc).
  std::string cgroup_root;
  // GPU shares under MPS (docs/sharing.md): a share on a GPU whose node info says
  // enforcement "mps" is made a client of that GPU's daemon here. Null: no MPS (every
  // share is "none"). Must outlive the loop.
  agent::MpsDaemons* mps = nullptr;
  // The GPU memory watch (gpu_mem_watch.h, docs/sharing.md): with telemetry on, each
  // round stops (SIGKILL, the job fails saying why) the shares whose processes use more
  // device memory than their share plus this slack. Negative: no watch.
  int64_t gpu_mem_slack_bytes = int64_t{1} << 30;
  // GPU UUID -> its dmem region, for GPUs in enforcement "dmem" (agent/dmem.h).
  std::map<std::string, std::string> dmem_regions;
  // GPU UUID -> the libnvidia-ml whose per-cgroup memory limits hold its shares, for GPUs
  // in enforcement "dmem" without a dmem region (agent/nvml_memory.h).
  std::map<std::string, std::string> nvml_memory_limits;
  // The node's health program (health_check.h; empty: none): run before the first
  // registration, its verdict sent at once after it, then again every interval.
  std::string health_check;
  int health_check_interval_s = 300;
  int health_check_timeout_s = 60;
  // The disk watch (disk_watch.h): every disk_check_interval_s seconds (0: no watch) the
  // filesystem of state_dir is read (`disk_usage`; null: statvfs) and judged against
  // disk_min_free. Reports go with the telemetry: at every check while under pressure,
  // once when it ends, once after each registration; a task the node could not start
  // checks at once.
  int disk_check_interval_s = 0;
  DiskMinFree disk_min_free;
  std::function<Result<DiskUsage>(const std::string&)> disk_usage;
  // The node lease's clock (agent/node_lease.h): CLOCK_BOOTTIME in microseconds; null:
  // the real one. Its file is state_dir/node_lease.
  std::function<int64_t()> boot_clock;
};

// How long an agent whose registration was refused because another agent runs its node
// (a 409 for Registration::agent_id) waits before it tries again.
inline constexpr int64_t kTakenRetryUs = 30'000'000;

// The pool job whose cgroup the process `pid` runs in (its /proc/PID/cgroup names a
// gpupool job cgroup of either layout, agent/cgroup.h), or 0.
int64_t JobOfProcess(const std::string& proc_root, int64_t pid);

// One GPU's sample as the agent sends it, stamped `at_ms`, each process with its job
// (JobOfProcess); `jobs` (which tasks hold the GPU) is left to the caller. `gpupool gpus
// --sample` prints the same.
protocol::GpuTelemetry TelemetryOfSample(const gpu::GpuSample& s, int64_t at_ms,
                                         const std::string& proc_root);

class AgentLoop {
 public:
  // `launcher` must outlive the loop; `link` is how it reaches the controller (shared
  // with the exec sessions' relays, which may outlive the loop).
  AgentLoop(AgentLoopOptions options, std::shared_ptr<protocol::ControllerLink> link,
            agent::Launcher* launcher);

  // Runs until Stop(), then returns Ok; or until the controller turns out to speak a
  // protocol too far from this agent's, which retrying cannot mend: then it stops by
  // itself and returns kFailedPrecondition naming both versions and which side to upgrade;
  // or until the controller refuses the registration because another agent runs the node
  // (409): kAlreadyExists with the controller's words.
  Status Run();
  // Ends Run() within about a second: the controller's long poll and any other call in
  // flight are cut short (ControllerLink::Shutdown).
  void Stop() {
    stopping_ = true;
    link_->Shutdown();
    // Under each wait's mutex, so that a wait that has just seen stopping_ false cannot
    // miss the wake-up and sleep out its period.
    { std::lock_guard lock(telemetry_mu_); }
    telemetry_cv_.notify_all();
    { std::lock_guard lock(pause_mu_); }
    pause_cv_.notify_all();
  }
  ~AgentLoop() = default;
  AgentLoop(const AgentLoop&) = delete;
  AgentLoop& operator=(const AgentLoop&) = delete;

  // One round of telemetry: samples the GPUs, adds the round to the unsent batch and, when
  // the controller takes telemetry, sends the batch. Run() calls it every interval; tests
  // call it directly. Returns how many samples are still unsent.
  size_t TelemetryRound();

 private:
  Status Register();
  Status PollOnce();
  // A poll answer's rejected orders, cancels, signals and log reads, acted on at once
  // (its launches and exec requests are queued by PollOnce). `took_ms`: how long the poll
  // took, sent to answered (the signals' age check).
  void ApplyOrders(const protocol::Work& work, int64_t took_ms);
  void AnswerLogReads(const std::vector<protocol::LogRequest>& reads);
  // A signal order from an answer read `age_ms` after the controller gave it.
  void SignalOrdered(const protocol::SignalOrder& o, int64_t age_ms);
  void CancelOrdered(const protocol::CancelOrder& c);
  // The runs here that a cancel order names (callers hold mu_); refuses the job's queued
  // and deferred launches.
  std::vector<RunId> RunsToCancelLocked(const protocol::CancelOrder& c);
  // Once an end is acknowledged (callers hold mu_): forgets the run and lets its task's
  // deferred attempt start.
  void EndAcknowledgedLocked(const agent::JobEvent& ev);
  void ReportEvents();  // runs on its own thread
  void LaunchWorker();  // several run: a launch waits for its shim, others need not
  void Launch(const protocol::LaunchOrder& order);
  Status BatchIo(const jobs::Job& job, int task, agent::LaunchSpec* spec) const;
  void RememberOutputLocked(const agent::LaunchSpec& spec);  // callers hold mu_
  void StartExec(const protocol::ExecRequest& x);
  // Why exec session `x` must not start (callers hold mu_): its cancel came first, its
  // job is stopping, or its task does not run here (any more); "" when it may.
  std::string ExecRefusalLocked(const protocol::ExecRequest& x) const;
  // An exec session that started while its cancel, its job's or its task's end came (they
  // found nothing running to stop) is stopped now (callers hold no lock).
  void StopIfStaleExec(const protocol::ExecRequest& x, const RunId& id);
  // A task's end ends its exec sessions: with cgroups their processes went with the
  // task's, without them they would run on (callers hold no lock).
  void StopExecSessionsOf(const RunId& task);
  // An exec session's cancel, remembered (callers hold mu_): a request read later (it
  // waited in the launch queue, or the controller sent it again) is refused.
  void RememberExecCancelLocked(int64_t exec_id);
  // Converts a launcher event into the wire's task event or exec report.
  void ToWire(const agent::JobEvent& ev, protocol::EventBatch* batch);
  // A share's enforcement (LaunchSpec::share_enforcement, share_memory_bytes and, under
  // MPS, the daemon's pipe folder, the daemon started if need be). An error is the job's
  // failure reason.
  Status PrepareShare(const jobs::Job& job, agent::LaunchSpec* spec);
  // An AMD share's advisory CU mask (LaunchSpec::cu_mask, docs/sharing.md "AMD"): CUs no
  // other held share of the same GPU has, where the GPU has enough. Called with mu_ held,
  // just before the run joins held_, so concurrent launches cannot pick the same CUs.
  void AssignCuMaskLocked(agent::LaunchSpec* spec);
  // Re-counts the adopted runs' MPS clients after an agent restart and stops the daemons
  // no run needs.
  void AdoptMpsClients();
  // An earlier attempt of this task is still here (it outlived an agent restart while the
  // controller requeued the job): it stops, and `order` starts once its end is
  // acknowledged. At most one attempt of a task runs at a time.
  void DeferLocked(const protocol::LaunchOrder& order, const RunId& id, int earlier_attempt);
  // Stops the stray runs a previous agent of this node left (agent/stray_runs.h), once,
  // before the first registration: an error while one is still there.
  Status StopStrays();
  // The checks before an image job (podman, CDI, environment needs); fills the spec's
  // CDI devices. An error is the job's failure reason.
  Status PrepareContainerJob(const jobs::Job& job, agent::LaunchSpec* spec);
  // What the job's environment needs: job.needs, or the inspected image (cached by id).
  Result<jobs::EnvNeeds> NeedsOf(const jobs::Job& job);
  void FailLaunch(const RunId& id, const std::string& reason, bool cancelled = false);
  void FailLaunchLocked(const RunId& id, const std::string& reason, bool cancelled);
  // The node could not start the task, by a fault of its own (its disk): reported lost
  // with not_started (protocol::Event), so the controller requeues the job and drains us.
  void NodeCannotLaunch(const RunId& id, const std::string& why);
  // The GPU memory watch's view of a run (callers hold mu_): a share it watches, or
  // nothing (not a share, a MIG instance, the watch off, already stopped by it).
  std::optional<WatchedShare> WatchedShareOf(const RunId& id, const agent::LaunchSpec& spec) const;
  // Stops the runs of `shares` that `round` finds over their memory (callers hold no lock).
  void StopSharesOverMemory(const std::vector<protocol::GpuTelemetry>& round,
                            const std::vector<WatchedShare>& shares);
  void TelemetryLoop();  // runs on its own thread while telemetry is on
  void HealthLoop();     // runs on its own thread while a health program is set
  // Sends the latest unsent health verdict (callers hold no lock); false if it could not.
  bool SendHealth();
  void DiskLoop();  // runs on its own thread while the disk watch is on
  // Sends a disk report (callers hold no lock); false if it could not.
  bool SendDisk(const protocol::DiskReport& report);
  // Wakes the disk watch for a check now (a task the node could not start).
  void CheckDiskNow();
  // Waits `micros` of the clock's time, or until Stop: the back-off of a call that
  // failed. Under a ManualClock it ends as the test advances the clock.
  void Pause(int64_t micros);
  // The node lease (agent/node_lease.h; agent_lease.cc). BootNow: options_.boot_clock's
  // time. RenewLease, after an exchange sent at `sent_us` proved the controller knows the
  // node (Run's thread only): keeps `lease_ms` and writes state_dir/node_lease when its
  // deadline moved by a second or more; removes the file for a lease of 0. LeaseFileFor:
  // the file a task of `job` is fenced by (LaunchSpec::lease_file), or "". LeaseGraceFor:
  // how long before the lease runs out such a task is told to stop (LaunchSpec::
  // lease_grace_s): a preemptible job's own grace (by default, or at most, 1/8 of the
  // lease), else the node's cancel grace, at most 1/8 of the lease; 0 for no file.
  int64_t BootNow() const;
  void RenewLease(int64_t sent_us, int64_t lease_ms);
  std::string LeaseFileFor(const jobs::Job& job) const;
  int64_t LeaseGraceFor(const jobs::Job& job) const;

  AgentLoopOptions options_;
  // The stop grace of the tasks it starts: the controller's (RegistrationReply::
  // kill_wait_s) from the registration on, options_.cancel_grace_s before or without it.
  std::atomic<int64_t> kill_wait_s_;
  std::shared_ptr<protocol::ControllerLink> link_;
  agent::Launcher* launcher_;
  const Clock* clock_;  // options_.clock, or the system's
  std::atomic<bool> stopping_{false};
  std::mutex pause_mu_;  // guards nothing: Pause's wait
  std::condition_variable pause_cv_;
  std::atomic<bool> registered_{false};
  bool strays_stopped_ = false;  // StopStrays ran to its end
  bool mps_adopted_ = false;     // AdoptMpsClients ran (once, at the first registration)
  Status incompatible_;          // set by Register: a protocol too far off, or the node refused us
  std::atomic<int> controller_minor_{-1};  // the controller's protocol minor (major 1)
  std::atomic<int> registrations_{0};      // successful registrations so far
  std::atomic<bool> disk_check_now_{false};
  std::atomic<int64_t> lease_ms_{0};  // the node lease the controller gave; 0: none
  // The deadline last written to the lease file (Run's thread only); nullopt: none since
  // the lease was last 0 (or since start).
  std::optional<int64_t> lease_written_deadline_;
  bool lease_file_removed_ = false;  // with a lease of 0: the file was removed (Run's thread)
  std::mutex health_mu_;             // guards unsent_health_; taken alone
  std::optional<protocol::HealthReport> unsent_health_;
  std::mutex telemetry_mu_;  // guards unsent_telemetry_; taken alone
  std::condition_variable telemetry_cv_;
  std::deque<protocol::GpuTelemetry> unsent_telemetry_;

  // A task of a job, whatever its attempt: (job, task index).
  using TaskSlot = std::pair<int64_t, int>;
  static TaskSlot SlotOf(const RunId& id) { return {id.job, id.task}; }
  // What a run here was started with, and where its files are.
  struct Held {
    agent::LaunchSpec spec;
    std::string dir;
  };

  std::mutex mu_;
  // Batch jobs' output files (-o/-e) of the runs launched or adopted since this agent
  // started, with their user: the only paths outside the run directories whose bytes it
  // sends for `gpupool logs` (ReadOutputFileSlice).
  // At most kMaxOutputFiles, the oldest forgotten first (output_order_).
  static constexpr size_t kMaxOutputFiles = 100'000;
  std::map<std::string, std::optional<uint32_t>> output_files_;
  std::deque<std::string> output_order_;
  std::set<RunId> launched_;                     // runs seen (launched, refused or adopted)
  std::set<std::pair<int64_t, int>> cancelled_;  // (job, attempt) told to stop here
  // Exec sessions told to stop here (CancelOrder::exec_id), seen or not: at most
  // kMaxExecCancels, the oldest forgotten first (exec_cancel_order_).
  static constexpr size_t kMaxExecCancels = 100'000;
  std::set<int64_t> exec_cancelled_;
  std::deque<int64_t> exec_cancel_order_;
  // The attempt each task holds here: it runs, or it ended and its end is not
  // acknowledged yet (the launcher then still has its spec). One per task.
  std::map<TaskSlot, int> current_;
  // Launch orders of a later attempt that wait for the attempt in current_ to end and
  // be acknowledged (issue 25 item 2: a node that comes back still running attempt 1 of
  // a job the controller requeued). Re-queued by ReportEvents.
  std::map<TaskSlot, protocol::LaunchOrder> deferred_;
  // What each task and exec session here was started with: a later exec runs with its
  // task's spec (in its task's directory), and task 0's started event carries its
  // rendezvous port.
  std::map<RunId, Held> held_;
  std::set<RunId> mem_stopped_;  // runs the GPU memory watch stopped, until their end is acked
  std::vector<agent::JobEvent> unsent_;  // waiting for the controller's ack
  struct WorkItem {
    std::optional<protocol::LaunchOrder> launch;
    std::optional<protocol::ExecRequest> exec;
  };
  std::deque<WorkItem> launch_queue_;
  std::condition_variable launch_cv_;
  std::map<std::string, jobs::EnvNeeds> needs_by_image_id_;  // guarded by mu_
  // Interactive exec sessions' relays, by run (null while it launches), and those whose
  // command ended before its relay was registered.
  std::map<RunId, std::shared_ptr<ExecRelay>> relays_;
  std::set<RunId> ended_before_relay_;
  void SessionEndedLocked(const RunId& id);
};

}  // namespace gpupool::agent
