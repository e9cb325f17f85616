// NodeAgent: one node agent's parts, below the CLI. It finds the node's GPUs (or replays
// a node file), opens the agent's state directory STATE/agent, probes podman and writes
// the node's CDI spec for container jobs, makes the launcher and a telemetry sampler, and
// runs an AgentLoop against the controller on a thread of its own. `gpupool agent` runs
// one alone; `gpupool up` runs one beside its Server, connected through the Unix socket.
//
// Discover() may be called first (`up` finds the node before it starts its controller);
// Start() discovers when that was not done. Start and Stop are called from one thread;
// the accessors are valid once Discover (node) or Start (the rest) returned Ok. Stop()
// leaves running jobs running (they are adopted by the next start); the destructor stops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "agent/launcher.h"
#include "agent/runtime/agent_loop.h"
#include "common/file_lock.h"
#include "common/status.h"
#include "gpu/gpu_info.h"
#include "protocol/controller_link.h"

namespace gpupool::agent {

struct NodeAgentOptions {
  std::string state_dir;  // the daemon's state directory; the agent's files are in STATE/agent
  std::string fake_file;  // a node description to use instead of discovery
  // `up`: a machine without GPUs runs a stand-in node of 8 fake GPUs, so the pool works
  // anywhere; `agent`: it registers no GPUs.
  bool stand_in_when_no_gpus = false;
  // Default: the host name. With fake_file and a name other than the file's host name,
  // the file's GPU UUIDs are made the node's own (NodeScopedUuid in node_agent.cc).
  std::string node_name;
  std::string address;           // where peers reach this node (AgentLoopOptions::address)
  int telemetry_interval_s = 5;  // 0: no telemetry
  // What the node offers jobs (AgentLoopOptions): 0 = the host's online CPUs and memory.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // How jobs reach the controller (GPUPOOL_SERVER): the agent's own address list.
  std::string server_for_jobs;
  // Container jobs (docs/containers.md).
  bool allow_unisolated_devices = false;
  bool shared_dev_shm = false;  // LauncherOptions::shared_dev_shm
  std::string cdi_kind = "gpupool.local/gpu";
  std::string dev_root = "/dev";
  std::string podman = "podman";
  std::vector<std::string> podman_args;
  // GPU shares (docs/sharing.md): "auto" runs MPS on each NVIDIA GPU without MIG where
  // nvidia-cuda-mps-control is found (never on a replayed or stand-in node); "mps"
  // requires it (Start fails without it); "none": shares are scheduled, not enforced.
  std::string gpu_enforcement = "auto";
  std::string mps_control;  // its path; empty = looked up (mps.h, FindMpsControl)
  // Where the kernel lists its dmem regions (dmem.h): "auto" holds a share of a GPU MPS
  // does not serve to its memory through the dmem controller where the GPU's VRAM is
  // listed there, else through NVML's per-cgroup limits where the libnvidia-ml that
  // discovery loaded offers them (agent/nvml_memory.h); "dmem" requires one of the two.
  std::string dmem_capacity = "/sys/fs/cgroup/dmem.capacity";
  // The GPU memory watch's slack (AgentLoopOptions::gpu_mem_slack_bytes); negative: off.
  int64_t gpu_mem_slack_bytes = int64_t{1} << 30;
  // The node's health program (health_check.h), its period and time limit.
  std::string health_check;
  int health_check_interval_s = 300;
  int health_check_timeout_s = 60;
  // The disk watch (disk_watch.h): its period (0: off) and level.
  int disk_check_interval_s = 10;
  DiskMinFree disk_min_free;
  // Where systemd keeps its lingering users (LingeringUsers): each can have a user
  // manager that starts processes outside any job's cgroup; a root agent warns of them.
  std::string linger_dir = "/var/lib/systemd/linger";
  // The machine's id, part of the agent's identity (agent_identity.h).
  std::string machine_id_path = "/etc/machine-id";
};

// The users systemd keeps a user manager for without a login (`loginctl enable-linger`:
// one file per user in `linger_dir`), sorted; none where the directory is absent. A job
// of such a user could ask its manager (`systemd-run --user`) to start a process outside
// the job's cgroup, past its device isolation and memory watch (docs/deploy.md).
std::vector<std::string> LingeringUsers(const std::string& linger_dir);

// The GPUs NVML's per-cgroup memory limits hold (agent/nvml_memory.h): with `library`
// the path of the libnvidia-ml discovery used, exporting nvmlDeviceSetMemoryLimits_v1
// (NvmlMemoryLimitsLibrary; "": none, and no GPU is), each NVIDIA GPU found through NVML
// (backend "nvml") that no other mode holds (MIG, MPS, the kernel's dmem controller) gets
// enforcement "dmem" and an entry UUID -> library in *out. Returns how many.
int HoldWithNvmlMemoryLimits(const std::string& library, gpu::NodeInfo* node,
                             std::map<std::string, std::string>* out);

class NodeAgent {
 public:
  explicit NodeAgent(NodeAgentOptions options);
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Finds the node. Errors: discovery failed (the backend's words), an unreadable node file.
  Status Discover();
  // Starts the agent, talking to the controller through `link`
  // (protocol::NewHttpControllerLink). Errors: Discover's, an unusable state directory
  // (Unavailable, FailedPrecondition), another agent on it (AlreadyExists: its lock,
  // agent_identity.h, held until the agent is destroyed).
  Status Start(std::shared_ptr<protocol::ControllerLink> link);
  // Ends the loop (within a fraction of a second) and removes the CDI spec it wrote.
  // Returns what the loop ended with: Ok, or why it stopped by itself (a controller of a
  // protocol too far off, or a registration refused: AgentLoop::Run).
  Status Stop();
  // Whether the loop stopped by itself (Stop() then says why).
  bool ended() const { return ended_; }
  // Blocks until the loop stopped by itself (true; Stop() then says why) or `stop` is
  // requested (false), waking at either. Any thread.
  bool WaitEnded(std::stop_token stop);

  const gpu::NodeInfo& node() const { return node_; }
  // The node is the stand-in of a GPU-less machine (stand_in_when_no_gpus).
  bool stand_in() const { return stand_in_; }
  const std::string& node_name() const { return loop_options_.node_name; }
  // What container jobs get here, in words (podman, the CDI spec), for the start message.
  std::string ContainersSummary() const;
  // How GPU shares are enforced here, in words, for the start message.
  const std::string& EnforcementSummary() const { return enforcement_note_; }

 private:
  void SetUpContainers(const std::string& agent_dir);
  // Says once, in the log, when process jobs share the host's /dev/shm (job_mounts.h).
  void SayDevShm() const;
  // Decides each GPU's enforcement mode (GpuInfo::enforcement) and makes the MPS daemons'
  // keeper when one is "mps". Errors: an unknown mode, "mps" without its control program.
  // The GPUs the kernel's dmem controller, else NVML's per-cgroup limits, holds
  // (enforcement "dmem"); how many of each in dmem_gpus_ and nvml_gpus_.
  // `required`: --gpu-enforcement dmem (else auto, where NVML needs a cgroup v2 host).
  void SetUpDmem(bool wanted, bool required);
  std::string DmemSummary() const;
  Status SetUpEnforcement(const std::string& agent_dir);
  void RemoveCdiSpec();

  NodeAgentOptions options_;
  FileLock state_lock_;  // STATE/agent/agent.lock, from Start on
  bool discovered_ = false;
  gpu::NodeInfo node_;
  bool stand_in_ = false;
  // Container jobs: what podman offers, and the CDI spec written (removed by Stop) or
  // why none was.
  ContainerOptions container_;
  std::string cdi_error_;
  std::string cdi_path_;
  std::string cdi_notes_;
  AgentLoopOptions loop_options_;
  std::unique_ptr<MpsDaemons> mps_;
  std::map<std::string, std::string> dmem_regions_;        // GPU UUID -> dmem region
  std::map<std::string, std::string> nvml_memory_limits_;  // GPU UUID -> libnvidia-ml
  int dmem_gpus_ = 0;
  int nvml_gpus_ = 0;
  std::string nvml_note_;         // why auto left NVML's limits unused, or empty
  std::string enforcement_note_;  // for the start message
  std::unique_ptr<Launcher> launcher_;
  std::unique_ptr<AgentLoop> loop_;
  std::thread thread_;
  std::mutex ended_mu_;                   // WaitEnded's, with ended_cv_
  std::condition_variable_any ended_cv_;  // ended_ was set, or a waiter's stop requested
  std::atomic<bool> ended_{false};        // set under ended_mu_
  Status end_;  // what the loop returned; written by thread_, read after it is joined
};

// Makes STATE/agent (0711) and STATE traversable, as jobs read their host file by path
// (node_agent.cc says how). Returns STATE/agent.
Result<std::string> OpenAgentStateDir(const std::string& state_dir);

}  // namespace gpupool::agent
