#include "agent/runtime/node_agent.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "agent/cdi_spec.h"
#include "agent/container.h"
#include "agent/dmem.h"
#include "agent/job_mounts.h"
#include "agent/mps.h"
#include "agent/nvml_memory.h"
#include "agent/runtime/agent_identity.h"
#include "common/file_util.h"
#include "common/host.h"
#include "gpu/gpu_backend.h"
#include "gpu/node_json.h"
#include "gpu/telemetry.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

// Where the launcher puts job cgroups (LauncherOptions::cgroup_root's default).
constexpr const char* kCgroupV2Root = "/sys/fs/cgroup";

// A stand-in 8-GPU node for machines without GPUs, so `make run` works anywhere.
gpu::NodeInfo FakeEightGpuNode() {
  gpu::NodeInfo n;
  n.hostname = HostName();
  n.nvidia = gpu::DriverInfo{"fake", "13.0", {}, {}};
  for (int i = 0; i < 8; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "Fake GPU F100 16GB";
    char uuid[64];
    std::snprintf(uuid, sizeof uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
    g.uuid = uuid;
    char bus[32];
    std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x10 + i);
    g.pci_bus_id = bus;
    g.memory_total_bytes = uint64_t{16} << 30;
    g.compute_capability = gpu::ComputeCapability{8, 0};
    g.minor_number = i;
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    g.backend = "fake";
    n.gpus.push_back(g);
  }
  return n;
}

// A replayed GPU's (or MIG instance's) UUID for the node `node_name`: "GPU-" (or "MIG-")
// and 8 hex digits of the name's hash, then the file's UUID from its 13th character, so that agents
// replaying one file under different names have GPUs of different UUIDs (which the controller's
// health records and metrics tell GPUs apart by), each still recognisable by its file's tail.
std::string NodeScopedUuid(const std::string& uuid, const std::string& node_name) {
  if (uuid.empty()) return uuid;
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : node_name) h = (h ^ c) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", h);
  if ((uuid.starts_with("GPU-") || uuid.starts_with("MIG-")) && uuid.size() >= 12)
    return uuid.substr(0, 4) + std::string(hex) + uuid.substr(12);
  return uuid + "-" + hex;
}

// The agent's telemetry source for the node it runs (the fake file's profile with --fake);
// null, with a note, where none fits: the agent then sends no telemetry.
std::shared_ptr<gpu::TelemetrySampler> TelemetrySamplerFor(const std::string& fake_file,
                                                           const gpu::NodeInfo& node) {
  gpu::DiscoveryOptions opts = gpu::WithEnvironmentOverrides({});
  opts.fake_node_file = fake_file;
  Result<std::unique_ptr<gpu::TelemetrySampler>> s = gpu::CreateTelemetrySampler(opts, node);
  if (!s.ok()) {
    spdlog::info("agent: no GPU telemetry: {}", s.status().message());
    return nullptr;
  }
  // What the source lacks for good (Xid events, say): said once here, not every sample.
  if (const std::string note = (*s)->note(); !note.empty()) {
    spdlog::info("agent: GPU telemetry: {}", note);
  }
  return std::shared_ptr<gpu::TelemetrySampler>(std::move(*s));
}

// The slim supervisor binary beside this one (a faster exec per job), else this binary's
// own `agent-shim` subcommand.
std::vector<std::string> ShimCommand() {
  const std::string self = SelfExePath();
  const std::string slim = (fs::path(self).parent_path() / "gpupool-agent-shim").string();
  if (::access(slim.c_str(), X_OK) == 0) return {slim};
  return {self, "agent-shim"};
}

// What mpirun runs as its rsh agent in a task: the slim gpupool-exec beside this binary
// (it starts in a third of gpupool's time; mpirun starts one per host at once), else
// this binary's `exec` subcommand.
std::string ExecAgentCommand() {
  const std::string self = SelfExePath();
  const std::string slim = (fs::path(self).parent_path() / "gpupool-exec").string();
  if (::access(slim.c_str(), X_OK) == 0) return slim;
  return self + " exec";
}

// Warns about a directory on the way to `dir` that the jobs' users cannot pass (jobs run
// as other users only under a root agent) and that is not ours to change.
void WarnAboutClosedParents(const std::string& dir) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(dir, ec);
  fs::path prefix;
  for (const fs::path& part : absolute) {
    prefix /= part;
    struct stat up {};
    if (::geteuid() == 0 && ::stat(prefix.c_str(), &up) == 0 && (up.st_mode & S_IXOTH) == 0) {
      spdlog::warn(
          "'{}' (mode {:o}) does not let other users through: jobs of users other than root "
          "cannot read their host file (GPUPOOL_HOSTFILE) under '{}'; chmod o+x it or choose "
          "another --state-dir",
          prefix.string(), up.st_mode & 07777, dir);
      return;
    }
  }
}

}  // namespace

std::vector<std::string> LingeringUsers(const std::string& linger_dir) {
  std::vector<std::string> users;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(linger_dir, ec)) {
    users.push_back(e.path().filename().string());
  }
  std::sort(users.begin(), users.end());
  return users;
}

// A job reads a file of its own in its job directory (its host file, GPUPOOL_HOSTFILE) by
// path, as its user: every directory on the way must let it through, whatever mode it
// had or was made with (the daemons' umask 077 makes a new one 0700). The state directory,
// when it is the daemon's own, gets execute (traverse) for all added and nothing taken
// away (so a shared one such as /tmp keeps its 1777; a new one becomes 0711); STATE/agent
// is 0711: traversable, not listable. What is inside keeps its own mode (node token 0600,
// job directories 0711, their spec and status 0600 root's, the host file and logs 0600
// the job user's).
Result<std::string> OpenAgentStateDir(const std::string& state_dir) {
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec) {
    return Status::Unavailable("cannot create the state directory '" + state_dir +
                               "': " + ec.message() + ": pass a writable --state-dir");
  }
  struct stat st {};
  if (::stat(state_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("the state directory '" + state_dir + "' is not a directory");
  }
  if (st.st_uid == ::geteuid() && (st.st_mode & 0111) != 0111 &&
      ::chmod(state_dir.c_str(), (st.st_mode & 07777) | 0111) != 0) {
    return Status::Unavailable("cannot make the state directory '" + state_dir +
                               "' traversable (chmod a+x): " + std::strerror(errno));
  }
  const std::string dir = state_dir + "/agent";
  if (::mkdir(dir.c_str(), 0711) != 0 && errno != EEXIST) {
    return Status::Unavailable("cannot create '" + dir + "': " + std::strerror(errno));
  }
  if (::chmod(dir.c_str(), 0711) != 0) {
    return Status::Unavailable("cannot make '" + dir +
                               "' traversable (chmod 0711): " + std::strerror(errno));
  }
  WarnAboutClosedParents(dir);
  return dir;
}

NodeAgent::NodeAgent(NodeAgentOptions options) : options_(std::move(options)) {}

NodeAgent::~NodeAgent() { (void)Stop(); }

Status NodeAgent::Discover() {
  if (discovered_) return Status::Ok();
  gpu::DiscoveryOptions opts = gpu::WithEnvironmentOverrides({});
  if (!options_.fake_file.empty()) {
    opts.backends = {"fake"};
    opts.fake_node_file = options_.fake_file;
  }
  GP_ASSIGN_OR_RETURN(node_, gpu::DiscoverNode(opts));
  if (!options_.fake_file.empty()) {
    // What the file says the machine offers, unless --fake-cpus/--fake-mem say otherwise.
    GP_ASSIGN_OR_RETURN(Json file, ReadJsonFile(options_.fake_file));
    GP_ASSIGN_OR_RETURN(gpu::HostResources host,
                        gpu::HostResourcesFromJson(file, options_.fake_file));
    if (options_.cpu_milli <= 0) options_.cpu_milli = host.cpu_milli;
    if (options_.memory_mib <= 0) options_.memory_mib = host.memory_mib;
  }
  // One node file replayed under another name (two agents from one file): GPUs of their
  // own. Under the file's own host name, its UUIDs as they are.
  if (!options_.fake_file.empty() && !options_.node_name.empty() &&
      options_.node_name != node_.hostname) {
    for (gpu::GpuInfo& g : node_.gpus) {
      g.uuid = NodeScopedUuid(g.uuid, options_.node_name);
      for (gpu::MigDevice& m : g.mig_devices) m.uuid = NodeScopedUuid(m.uuid, options_.node_name);
    }
  }
  // A replayed file was checked as it was read. What the backends found is checked here,
  // where the operator sees it at once: the controller would refuse the registration
  // anyway, and jobs on two GPUs of one device node would share one device.
  if (options_.fake_file.empty()) {
    if (Status s = gpu::CheckNode(node_); !s.ok()) {
      return Status::FailedPrecondition(
          "GPU discovery reported GPUs that cannot all be given out: " + s.message() +
          " (gpus[N]: as in `gpupool gpus --json`); the agent does not start. Check the driver's "
          "view "
          "(nvidia-smi -q, rocm-smi --showbus, ls -l /dev/nvidia* /dev/dri) and restart the "
          "agent once it lists each GPU once");
    }
  }
  if (node_.gpus.empty() && options_.stand_in_when_no_gpus) {
    node_ = FakeEightGpuNode();
    stand_in_ = true;
  }
  discovered_ = true;
  return Status::Ok();
}

void NodeAgent::SayDevShm() const {
  const std::string harm =
      "what a job leaves there outlives it, is charged to no job's memory, and other users' "
      "jobs may read it (docs/security.md)";
  if (options_.shared_dev_shm) {
    spdlog::warn("agent: process jobs share the host's /dev/shm (--shared-dev-shm): {}", harm);
  } else if (Status st = ProbePrivateDevShm(); !st.ok()) {
    spdlog::warn("agent: process jobs share the host's /dev/shm: {}; {}", st.message(), harm);
  }
}

// `fake_node`: the node comes from a file; its stand-in driver libraries, if it needs
// any, go under the agent's directory.
void NodeAgent::SetUpContainers(const std::string& agent_dir) {
  ContainerOptions base;
  base.podman = options_.podman;
  base.global_args = options_.podman_args;
  container_ = DetectContainerOptions(base);
  CdiSpecOptions cdi;
  cdi.kind = options_.cdi_kind;
  cdi.dev_root = options_.dev_root.empty() ? "/dev" : options_.dev_root;
  cdi.hook_path = SelfExePath();
  cdi.fake_node = stand_in_ || !options_.fake_file.empty();
  cdi.stand_in_root = agent_dir + "/stand-in-driver";
  std::vector<std::string> notes;
  Result<std::string> path = WriteNodeCdiSpec(node_, cdi, &notes);
  for (const std::string& n : notes) cdi_notes_ += "; " + n;
  if (path.ok()) {
    cdi_path_ = *path;
  } else {
    cdi_error_ = path.status().message();
  }
  spdlog::info("agent: container jobs: {}", ContainersSummary());
}

std::string NodeAgent::ContainersSummary() const {
  std::string s = container_.unavailable.empty() ? container_.note
                                                 : "unavailable (" + container_.unavailable + ")";
  s += cdi_path_.empty()
           ? "; no CDI spec (" + cdi_error_ + "): GPU container jobs fail"
           : "; CDI spec " + cdi_path_ + " (kind " + options_.cdi_kind + ")" + cdi_notes_;
  return s;
}

void NodeAgent::RemoveCdiSpec() {
  if (!cdi_path_.empty() && ::unlink(cdi_path_.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("cannot remove the CDI spec '{}': {}", cdi_path_, std::strerror(errno));
  }
  cdi_path_.clear();
}

int HoldWithNvmlMemoryLimits(const std::string& library, gpu::NodeInfo* node,
                             std::map<std::string, std::string>* out) {
  if (library.empty()) return 0;
  int gpus = 0;
  for (gpu::GpuInfo& g : node->gpus) {
    // MIG, MPS or the kernel's dmem hold it; NVML sets no limit on a MIG handle.
    if (g.enforcement == "mps" || g.enforcement == "mig" || g.enforcement == "dmem" ||
        g.mig_enabled.value_or(false) || g.vendor != gpu::Vendor::kNvidia || g.backend != "nvml" ||
        g.uuid.empty()) {
      continue;
    }
    g.enforcement = "dmem";
    (*out)[g.uuid] = library;
    ++gpus;
  }
  return gpus;
}

void NodeAgent::SetUpDmem(bool wanted, bool required) {
  dmem_regions_.clear();
  nvml_memory_limits_.clear();
  nvml_note_.clear();
  dmem_gpus_ = nvml_gpus_ = 0;
  if (!wanted) return;
  // The kernel's dmem controller where it lists the GPU's VRAM.
  if (Result<std::string> text = ReadFileToString(options_.dmem_capacity, 1 << 20); text.ok()) {
    const std::vector<DmemRegion> regions = ParseDmemCapacity(*text);
    for (gpu::GpuInfo& g : node_.gpus) {
      if (g.enforcement == "mps" || g.enforcement == "mig") continue;  // they hold it
      const std::string region = DmemRegionOf(regions, g.pci_bus_id);
      if (region.empty()) continue;
      g.enforcement = "dmem";
      dmem_regions_[g.uuid] = region;
      ++dmem_gpus_;
    }
  }
  // Else NVML's per-cgroup limits, where the library discovery loaded offers them.
  const bool nvml_gpu = std::any_of(node_.gpus.begin(), node_.gpus.end(), [](const auto& g) {
    return g.backend == "nvml" && g.enforcement == "none";
  });
  if (!nvml_gpu) return;
  // NVML caps the job's cgroup v2 leaf: on a host whose jobs get cgroup v1 every share
  // would fail closed, so "auto" leaves such GPUs unenforced (and says so); "dmem", asked
  // for by name, holds them and fails each share with the reason.
  std::error_code ec;
  if (!required && !fs::exists(kCgroupV2Root + std::string("/cgroup.controllers"), ec)) {
    nvml_note_ = "NVML's per-cgroup memory limits need cgroup v2 at " + std::string(kCgroupV2Root);
    return;
  }
  const std::string library =
      NvmlMemoryLimitsLibrary(gpu::WithEnvironmentOverrides({}).nvml_library);
  nvml_gpus_ = HoldWithNvmlMemoryLimits(library, &node_, &nvml_memory_limits_);
}

std::string NodeAgent::DmemSummary() const {
  const std::string of = " of " + std::to_string(node_.gpus.size()) + " GPUs";
  const std::string kernel = "the kernel's dmem controller on " + std::to_string(dmem_gpus_) +
                             (nvml_gpus_ > 0 ? "" : of) + " (" + options_.dmem_capacity + ")";
  if (nvml_gpus_ == 0) return "GPU shares: " + kernel;
  const std::string nvml = "dmem (NVML's per-cgroup memory limits) on " +
                           std::to_string(nvml_gpus_) + of + " (" +
                           nvml_memory_limits_.begin()->second + ")";
  return "GPU shares: " + (dmem_gpus_ > 0 ? kernel + ", " + nvml : nvml);
}

Status NodeAgent::SetUpEnforcement(const std::string& agent_dir) {
  const std::string& mode = options_.gpu_enforcement;
  if (mode != "auto" && mode != "mps" && mode != "dmem" && mode != "none") {
    return Status::InvalidArgument("--gpu-enforcement: '" + mode +
                                   "' is not a mode; use auto, mps, dmem or none");
  }
  const bool replayed = stand_in_ || !options_.fake_file.empty();
  // A replayed node has no GPU for NVIDIA's daemon: MPS there only when asked for by name
  // (tests, with the stand-in control program).
  std::string control;
  if (mode == "mps" || (mode == "auto" && !replayed))
    control = FindMpsControl(options_.mps_control);
  if (mode == "mps" && control.empty()) {
    return Status::FailedPrecondition(
        "--gpu-enforcement mps: " +
        (options_.mps_control.empty()
             ? std::string(
                   "nvidia-cuda-mps-control is not on PATH, in /usr/local/nvidia/bin or /usr/bin")
             : "'" + options_.mps_control + "' is not an executable") +
        "; install NVIDIA's MPS (part of the driver's utilities), give --mps-control PATH, or "
        "run with --gpu-enforcement none");
  }
  int mps_gpus = 0, mig_gpus = 0;
  for (gpu::GpuInfo& g : node_.gpus) {
    // MIG partitions are the hardware's, whatever the mode asked for: shares of a GPU in
    // MIG mode are its instances (docs/sharing.md).
    const bool mig = g.vendor == gpu::Vendor::kNvidia && g.mig_enabled.value_or(false);
    const bool can_mps = !control.empty() && g.vendor == gpu::Vendor::kNvidia && !mig;
    g.enforcement = mig ? "mig" : can_mps ? "mps" : "none";
    mps_gpus += can_mps ? 1 : 0;
    mig_gpus += mig ? 1 : 0;
  }
  SetUpDmem(mode == "dmem" || (mode == "auto" && !replayed), mode == "dmem");
  const int dmem_gpus = dmem_gpus_ + nvml_gpus_;
  if (mode == "dmem" && dmem_gpus == 0) {
    return Status::FailedPrecondition(
        "--gpu-enforcement dmem: no GPU of this node has a VRAM region in " +
        options_.dmem_capacity +
        " (the kernel's dmem cgroup controller: Linux 6.14 or later, cgroup v2, a driver "
        "that registers its memory), nor NVML's per-cgroup memory limits "
        "(nvmlDeviceSetMemoryLimits_v1: NVIDIA driver R615 or later, GPUs not in MIG mode); "
        "run with --gpu-enforcement auto or none");
  }
  // Daemons an earlier run left, while MPS is no longer the mode: quit once their adopted
  // clients end (AgentLoop::AdoptMpsClients), the others at once; none started.
  const std::string leftover =
      mps_gpus > 0 ? "" : LeftoverMpsControl(agent_dir, FindMpsControl(options_.mps_control));
  if (std::error_code ec;
      mps_gpus == 0 && leftover.empty() && !fs::is_empty(agent_dir + "/mps", ec) && !ec) {
    spdlog::warn(
        "agent: MPS daemons of an earlier run may be left under {}/mps, and no "
        "nvidia-cuda-mps-control is found to quit them with (--mps-control PATH)",
        agent_dir);
  }
  if (mps_gpus > 0 || !leftover.empty()) {
    MpsOptions mo;
    mo.control = mps_gpus > 0 ? control : leftover;
    mo.adopt_only = mps_gpus == 0;
    mo.state_dir = agent_dir;
    for (const char* var : {"PATH", "LD_LIBRARY_PATH"}) {
      if (const char* v = std::getenv(var); v != nullptr)
        mo.base_env.push_back(std::string(var) + "=" + v);
    }
    mps_ = std::make_unique<MpsDaemons>(std::move(mo));
  }
  enforcement_note_ = node_.gpus.empty()               ? ""
                      : dmem_gpus > 0 && mps_gpus == 0 ? DmemSummary()
                      : mps_gpus > 0
                          ? "GPU shares: MPS on " + std::to_string(mps_gpus) + " of " +
                                std::to_string(node_.gpus.size()) + " GPUs (" + control + ")"
                          : "GPU shares: not enforced (" +
                                (mode == "none" ? std::string("--gpu-enforcement none")
                                 : replayed     ? std::string("a replayed node")
                                                : std::string("no nvidia-cuda-mps-control") +
                                                  (nvml_note_.empty() ? "" : "; " + nvml_note_)) +
                                ")";
  if (mig_gpus > 0) {
    const std::string mig =
        "MIG instances of " + std::to_string(mig_gpus) + " GPU(s) in MIG mode, each granted whole";
    enforcement_note_ = static_cast<size_t>(mig_gpus) == node_.gpus.size()
                            ? "GPU shares: " + mig
                            : enforcement_note_ + " on the other GPUs; " + mig;
  }
  return Status::Ok();
}

Status NodeAgent::Start(std::shared_ptr<protocol::ControllerLink> link) {
  GP_RETURN_IF_ERROR(Discover());
  GP_ASSIGN_OR_RETURN(const std::string agent_dir, OpenAgentStateDir(options_.state_dir));
  // Before anything else touches the directory: one agent per state directory.
  GP_ASSIGN_OR_RETURN(state_lock_, LockAgentStateDir(options_.state_dir, agent_dir));
  GP_ASSIGN_OR_RETURN(const std::string identity,
                      AgentIdentity(agent_dir, options_.machine_id_path));
  GP_RETURN_IF_ERROR(SetUpEnforcement(agent_dir));
  SetUpContainers(agent_dir);
  SayDevShm();
  if (const std::vector<std::string> lingering = LingeringUsers(options_.linger_dir);
      ::geteuid() == 0 && !lingering.empty()) {
    std::string names;
    for (const std::string& u : lingering) names += (names.empty() ? "" : ", ") + u;
    spdlog::warn(
        "agent: systemd keeps user managers for {} on this node ({}): a job of theirs can have "
        "it start processes outside the job's cgroup (systemd-run --user), past its device "
        "isolation and GPU memory watch; `loginctl disable-linger USER` (docs/deploy.md)",
        names, options_.linger_dir);
  }
  LauncherOptions lo;
  lo.state_dir = agent_dir;
  lo.shim_command = ShimCommand();
  // Shares capped through NVML: a shim that can load it (agent/nvml_memory.h).
  if (nvml_gpus_ > 0) lo.nvml_shim_command = {SelfExePath(), "agent-shim"};
  lo.container = container_;
  lo.shared_dev_shm = options_.shared_dev_shm;
  launcher_ = NewProcessLauncher(lo);

  AgentLoopOptions& ao = loop_options_;
  ao.node_name = options_.node_name.empty() ? HostName() : options_.node_name;
  ao.agent_id = identity;
  ao.state_dir = agent_dir;
  ao.node = node_;
  ao.fake_node = stand_in_ || !options_.fake_file.empty();
  ao.address = options_.address;
  ao.cpu_milli = options_.cpu_milli;
  ao.memory_mib = options_.memory_mib;
  ao.telemetry_interval_s = options_.telemetry_interval_s;
  if (ao.telemetry_interval_s > 0) ao.sampler = TelemetrySamplerFor(options_.fake_file, node_);
  ao.exec_agent = ExecAgentCommand();
  ao.server_for_jobs = options_.server_for_jobs;
  ao.allow_unisolated_devices = options_.allow_unisolated_devices;
  ao.container = container_;
  ao.cdi_kind = options_.cdi_kind;
  ao.cdi_error = cdi_error_;
  ao.mps = mps_.get();
  ao.gpu_mem_slack_bytes = options_.gpu_mem_slack_bytes;
  ao.dmem_regions = dmem_regions_;
  ao.nvml_memory_limits = nvml_memory_limits_;
  ao.health_check = options_.health_check;
  ao.health_check_interval_s = options_.health_check_interval_s;
  ao.health_check_timeout_s = options_.health_check_timeout_s;
  ao.disk_check_interval_s = options_.disk_check_interval_s;
  ao.disk_min_free = options_.disk_min_free;
  // A root agent's job cgroups (JobCgroup skips them for any other): the runs a previous
  // agent of this node left there are stopped before it registers.
  if (::geteuid() == 0) ao.cgroup_root = lo.cgroup_root;
  loop_ = std::make_unique<AgentLoop>(ao, std::move(link), launcher_.get());
  AgentLoop* loop = loop_.get();
  thread_ = std::thread([this, loop] {
    end_ = loop->Run();
    std::lock_guard lock(ended_mu_);
    ended_ = true;
    ended_cv_.notify_all();
  });
  return Status::Ok();
}

bool NodeAgent::WaitEnded(std::stop_token stop) {
  std::unique_lock lock(ended_mu_);
  return ended_cv_.wait(lock, stop, [this] { return ended_.load(); });
}

Status NodeAgent::Stop() {
  if (loop_) loop_->Stop();
  if (thread_.joinable()) thread_.join();
  RemoveCdiSpec();
  return end_;
}

}  // namespace gpupool::agent
