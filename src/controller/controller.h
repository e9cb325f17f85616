// Controller: the pool's brain. Owns the job state machine, the node registry and the
// scheduler loop; persists every transition to the Store before acting on it.
//
// In memory it keeps the active (non-terminal) jobs and the nodes, mirrored from the
// store at start-up, so the scheduler and the agents' polls never scan the store. All
// public methods are thread-safe (one mutex; the HTTP server calls in from many
// threads). The controller never touches a GPU and never launches anything: agents poll
// for work (WaitForWork) and report what happened (ApplyEvents).
//
// Under a long queue the lock stays short: node views and agent polls walk only the jobs
// holding resources (occupying_), a scheduling pass takes its snapshot by sharing
// immutable per-job copies (slim_) and plans outside the lock, and its pending reasons
// replace the previous ones in one swap. Submissions to a pool whose last pass could
// start nothing are planned together after arrival_batch_us; freed resources, node
// changes and cancellations trigger a pass at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "controller/log_relay.h"
#include "gpu/gpu_info.h"
#include "jobs/job.h"
#include "store/store.h"

namespace gpupool::controller {

class JobScheduler;

struct Caller {
  std::string user;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool admin = false;
};

struct ControllerOptions {
  std::string placement_policy = "default";  // a name from the placement registry
  std::string queue_policy = "fair";         // a name from the queue registry
  std::string start_rule = "easy";           // strict | easy | skip
  int64_t node_timeout_us = 30'000'000;      // no poll for this long: the node is down
  int64_t scheduler_period_us = 1'000'000;   // a pass at least this often
  // While the last pass could start nothing, new submissions wait up to this long so
  // that one pass plans them together; freed resources still trigger a pass at once.
  int64_t arrival_batch_us = 100'000;
  int64_t cancel_grace_s = 10;
};

// One GPU grant in a launch order.
struct GpuGrant {
  std::string vendor;
  int index = -1;
  std::string uuid;
  std::vector<std::string> device_nodes;
  int gpu_milli = 1000;
};

// What an agent is told to run: the job plus its GPUs on this node.
struct LaunchOrder {
  jobs::Job job;
  int task_index = 0;
  std::vector<GpuGrant> gpus;
  std::vector<std::string> denied_device_nodes;
};

struct AgentWork {
  std::vector<LaunchOrder> launch;
  std::vector<int64_t> cancel;
  std::vector<LogRequest> logs;  // log reads for the API (log_relay.h)
};

// What an agent reports about one job.
struct AgentEvent {
  enum class Kind { kStarted, kExited, kLost };
  int64_t job_id = 0;
  int attempt = 0;
  int task_index = 0;
  Kind kind = Kind::kStarted;
  int64_t time_us = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  bool timed_out = false;
  bool cancelled = false;
  std::string reason;
  std::string stdout_path;
  std::string stderr_path;
};

struct NodeView {
  std::string name;
  std::string state;  // "up", "down", "draining"
  int64_t last_seen_us = 0;
  gpu::NodeInfo info;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::vector<int> allocated_milli;  // per GPU, in node.info.gpus order
  int running_jobs = 0;
};

class Controller {
 public:
  // Loads state from `store`. Both `store` and `clock` must outlive the controller.
  static Result<std::unique_ptr<Controller>> Create(store::Store* store, const Clock* clock,
                                                    ControllerOptions options);
  ~Controller();

  // Starts / stops the scheduler thread (passes on events and periodically) and the
  // node-timeout sweep.
  void Start();
  void Stop();

  // --- users ---
  Result<jobs::Job> Submit(jobs::Job job, const Caller& caller);
  Result<jobs::Job> Cancel(int64_t id, const Caller& caller);
  Result<jobs::Job> Get(int64_t id, const Caller& caller);
  Result<std::vector<jobs::Job>> List(const store::JobFilter& filter, const Caller& caller);
  std::vector<NodeView> Nodes();
  // Ids of queued or running jobs that use named environment "NAME:VERSION".
  std::vector<int64_t> JobsUsingEnvironment(const std::string& ref);

  // --- agents ---
  Status RegisterNode(const std::string& name, gpu::NodeInfo info, int64_t cpu_milli,
                      int64_t memory_mib, const std::vector<std::pair<int64_t, int>>& running);
  // Returns work for the node, waiting up to wait_ms for some; also the heartbeat.
  Result<AgentWork> WaitForWork(const std::string& node, int64_t wait_ms);
  Status ApplyEvents(const std::string& node, const std::vector<AgentEvent>& events);
  // Whether `node` is registered and polling (not timed out).
  bool NodeUp(const std::string& node);
  // Reads of log files on the nodes ride on the agents' polls.
  LogRelay& log_relay() { return log_relay_; }

  // --- scheduling ---
  // One scheduling pass now (the loop calls this; tests call it directly).
  Status ScheduleOnce();
  // Marks jobs on nodes silent for longer than the timeout LOST (or requeues them).
  Status SweepNodes();

 private:
  Controller(store::Store* store, const Clock* clock, ControllerOptions options);
  Status Load();
  Status FinishOnNodeLoss(jobs::Job& job, const std::string& reason);
  LaunchOrder MakeLaunchOrder(const jobs::Job& job, size_t task_index) const;
  void Loop();
  // Asks for a pass: WakeScheduler when resources or nodes changed (runs at once),
  // WakeSchedulerForArrival for new jobs (batched while the pool is full).
  void WakeScheduler();
  void WakeSchedulerForArrival();
  void NotifyNode(const std::string& node);
  // After job `id` changed in active_ (or left it): updates occupying_ and slim_.
  void Touched(int64_t id);
  // Sets a pending job's pending_reason from the last pass.
  void AttachPendingReason(jobs::Job* job) const;

  struct NodeEntry {
    gpu::NodeInfo info;
    int64_t cpu_milli = 0;
    int64_t memory_mib = 0;
    int64_t last_seen_us = 0;
    bool up = false;
    std::map<int64_t, int64_t> launch_sent_us;  // job id -> when last sent
    std::map<int64_t, int64_t> cancel_sent_us;
  };

  store::Store* store_;
  const Clock* clock_;
  ControllerOptions options_;

  std::mutex mu_;
  std::condition_variable work_cv_;       // agents waiting for work
  std::condition_variable scheduler_cv_;  // the loop waiting for a reason to run
  bool capacity_changed_ = false;         // resources freed, nodes changed: plan at once
  bool jobs_arrived_ = false;             // new submissions
  bool last_pass_blocked_ = false;        // the last pass had pending jobs and started none
  bool stopping_ = false;
  std::map<int64_t, jobs::Job> active_;  // non-terminal jobs by id
  // Ids of the jobs in active_ that hold resources (ASSIGNED or RUNNING): what node
  // views, agent polls and node-loss sweeps walk, not the whole queue.
  std::set<int64_t> occupying_;
  // For each job in active_, an immutable copy with what planning needs: a pass takes
  // its snapshot by sharing these, not by copying thousands of jobs under the lock.
  std::map<int64_t, std::shared_ptr<const jobs::Job>> slim_;
  // Why each job left pending by the last pass waits (swapped in whole by the pass).
  std::map<int64_t, std::string> pending_reasons_;
  std::map<std::string, NodeEntry> nodes_;
  std::unique_ptr<JobScheduler> scheduler_;  // used by one pass at a time (the loop)
  LogRelay log_relay_;
  // Gangs: exit events seen so far per job (task index -> job failed?).
  std::map<int64_t, std::map<int, bool>> task_exits_;
  std::thread loop_;
};

}  // namespace gpupool::controller
