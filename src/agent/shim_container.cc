// A container job's part of the shim: podman's command line, a share's parent cgroup,
// the staged mount sources, the podman helpers and the container's exit status.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include "agent/container.h"
#include "agent/job_env.h"
#include "agent/mount_source.h"
#include "agent/output_file.h"
#include "agent/proc_util.h"
#include "agent/shim_internal.h"
#include "agent/stop_request.h"

namespace gpupool::agent::shim_internal {
namespace {

// The last 64 KiB of a log file (podman's errors are at its end).
std::string FileTail(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  struct stat st;
  std::string out;
  if (::fstat(fd, &st) == 0) {
    const off_t from = st.st_size > 65536 ? st.st_size - 65536 : 0;
    out.resize(static_cast<size_t>(st.st_size - from));
    ssize_t n = ::pread(fd, out.data(), out.size(), from);
    out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  return out;
}

}  // namespace

void Shim::GpuMemoryCap(CgroupRequest* req) const {
  const LaunchSpec& spec = config_.spec;
  req->dmem_bytes = spec.share_memory_bytes;
  if (!spec.dmem_region.empty()) {
    req->dmem_region = spec.dmem_region;
  } else {
    // NVML's: a share has one GPU; with none named, nothing can be capped (fails closed).
    req->nvml_library = spec.nvml_library.empty() ? "-" : spec.nvml_library;
    req->nvml_gpu_uuid = spec.gpus.empty() ? "" : spec.gpus[0].uuid;
    req->nvml_limit = args_.nvml_limit;
  }
}

const char* Shim::CapMechanism() const {
  return config_.spec.dmem_region.empty() ? "NVML's per-cgroup memory limits"
                                          : "the kernel's dmem controller";
}

// Fail closed: a share placed on a GPU whose mode promised a memory cap does not start
// without it.
Status Shim::DmemCapInPlace() const {
  const LaunchSpec& spec = config_.spec;
  if (cgroup_ == nullptr || cgroup_->dmem_enforced()) return Status::Ok();
  const std::string of = spec.dmem_region.empty()
                             ? "GPU " + (spec.gpus.empty() ? std::string() : spec.gpus[0].uuid)
                             : spec.dmem_region;
  return Status::FailedPrecondition(
      "the GPU share's memory cap (" + std::to_string(spec.share_memory_bytes) + " B of " + of +
      ", " + CapMechanism() + ") could not be set on node " + HostName() + " (" + cgroup_->note() +
      "), so the share would not be held to its size; not started. Run the node's agent "
      "with --gpu-enforcement none (shares then say they are not enforced) or fix the "
      "cgroup v2 setup");
}

// A container runs below a cgroup of the job's own: podman makes the container's cgroups
// under it (--cgroup-parent), so /proc/PID/cgroup names the job for every process of the
// container, the agent's GPU memory watch and telemetry attribute them (docs/sharing.md,
// "The GPU memory watch"), and, holding the container's memory limit too, it tells the
// container's OOM kills (JobCgroup::OomKilled; Finish). On a dmem GPU the cgroup also
// holds the cap (dmem.max and dmem.low, or NVML's soft and hard limits; the kernel charges
// a cgroup's descendants to its limit). Returns that cgroup's path under the hierarchy's
// root, for --cgroup-parent, or "" when none could be made and no cap was promised: the
// container then starts in podman's own cgroup, and `*missing` says why (its isolation
// note). An exec session's container goes below its task's cgroup (join_cgroups): one
// cap holds both, and the cgroup stays its task's (not recorded or removed here).
Result<std::string> Shim::ContainerParent(std::string* missing) {
  const LaunchSpec& spec = config_.spec;
  const bool dmem = spec.share_enforcement == "dmem";
  if (!spec.join_cgroups.empty()) {
    for (const std::string& dir : spec.join_cgroups) {
      const size_t at = dir.rfind("/gpupool/job-");
      struct stat st;
      if (at != std::string::npos && dir.find("..") == std::string::npos &&
          ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        return dir.substr(at);
      }
    }
    if (!dmem) {
      *missing = "its task's cgroup is gone";
      return std::string();
    }
    return Status::FailedPrecondition("the GPU share's memory cap (" + std::string(CapMechanism()) +
                                      ") is held by its task's cgroup, which is gone on node " +
                                      HostName() + "; not started");
  }
  CgroupRequest req;
  req.id = spec.id;
  req.instance = std::to_string(::getpid());
  req.container_parent = true;
  // The container's memory limit (podman's --memory) on its parent too: the parent's
  // events then tell its OOM kills, which podman's cgroup takes with it (JobCgroup).
  req.memory_bytes = spec.memory_bytes;
  if (dmem) GpuMemoryCap(&req);
  cgroup_ = JobCgroup::Create(config_.cgroup_root, req);
  record_.cgroup_dirs = cgroup_->dirs();
  GP_RETURN_IF_ERROR(DmemCapInPlace());
  if (cgroup_->dirs().empty()) {  // never for dmem: its cap is in place, so the cgroup exists
    *missing = cgroup_->note();
    return std::string();
  }
  const std::string& dir = cgroup_->dirs().front();
  return dir.substr(dir.rfind("/gpupool/"));
}

// A container job: the shim runs `podman run` as root, its output in the job's logs; the
// container itself runs as the job's user (container.h). podman creates the container's
// cgroup (--cpus, --memory); the CDI spec gives it exactly its GPUs' device nodes.
Status Shim::PrepareContainer(const std::vector<gid_t>& groups) {
  const LaunchSpec& spec = config_.spec;
  const ContainerOptions& copt = config_.container;
  container_ = true;
  container_name_ = ContainerName(spec);
  if (!copt.unavailable.empty()) {
    return Status::FailedPrecondition("podman is not installed on node " + HostName() + ": " +
                                      copt.unavailable);
  }
  LaunchSpec run = spec;
  // The deadline file of a preemptible job and an MPS client's pipe folder, mounted at
  // their paths on the node like the host file.
  if (spec.preemptible) {
    GP_ASSIGN_OR_RETURN(const std::string path, MakePreemptDeadlineFile());
    run.mounts.push_back({path, path, /*read_only=*/true});
    run.pool_env["GPUPOOL_PREEMPT_DEADLINE_FILE"] = path;
  }
  if (spec.share_enforcement == "mps" && !spec.mps_pipe_dir.empty()) {
    run.mounts.push_back({spec.mps_pipe_dir, spec.mps_pipe_dir, /*read_only=*/false});
  }
  // Root-run podman must not read what the user cannot: every source is opened as the
  // user, and podman mounts what was opened (mount_source.h).
  if (::geteuid() == 0 && spec.uid != 0) {
    GP_ASSIGN_OR_RETURN(run.mounts, StageMountSources(run, groups));
  } else {
    // podman runs as the user itself (or the job is root's): it mounts nothing they
    // could not read; the check only gives a clear reason early.
    if (!spec.workdir.empty()) {
      Status st = CheckUserAccess(spec.workdir, spec.user, spec.uid, spec.gid, groups,
                                  /*write=*/false);
      if (!st.ok()) return Status::FailedPrecondition("working directory: " + st.message());
    }
    for (const BindMount& m : run.mounts) {
      Status st = CheckUserAccess(m.source, spec.user, spec.uid, spec.gid, groups,
                                  /*write=*/!m.read_only);
      if (!st.ok()) return Status::FailedPrecondition("mount " + m.target + ": " + st.message());
    }
  }
  // The job's variables travel in a root-only file, not on podman's command line.
  const std::string env_file = args_.job_dir + "/container.env";
  GP_RETURN_IF_ERROR(WriteFileDurably(env_file, ContainerEnvFile(run), 0600, /*sync=*/false));
  std::vector<uint32_t> gids(groups.begin(), groups.end());
  std::string cgroup_parent;
  std::string no_parent;  // why the container has no job cgroup
  GP_ASSIGN_OR_RETURN(cgroup_parent, ContainerParent(&no_parent));
  GP_ASSIGN_OR_RETURN(plan_.argv, BuildPodmanRunArgv(run, copt, gids, env_file, cgroup_parent));
  plan_.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"};
  plan_.candidates = CommandCandidates(plan_.argv[0],
                                       "/usr/local/sbin:/usr/local/bin:"
                                       "/usr/sbin:/usr/bin:/sbin:/bin");
  plan_.workdir = "/";
  plan_.switch_user = false;  // podman runs as root; --user switches inside
  plan_.user = "root";
  plan_.uid = 0;
  plan_.gid = 0;

  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_ < 0)
    return Status::Unavailable("cannot open /dev/null: " + std::string(std::strerror(errno)));
  const bool root = ::geteuid() == 0;
  GP_RETURN_IF_ERROR(OpenStreams(spec, root));
  plan_.cgroup = nullptr;
  std::string note = copt.note.empty() ? std::string("podman") : copt.note;
  note += "; container " + container_name_ + " in podman's own cgroup";
  if (spec.cpu_milli > 0 || spec.memory_bytes > 0) note += " (--cpus/--memory)";
  if (!cgroup_parent.empty()) {
    note += ", under " + cgroup_parent + " (" +
            (cgroup_ != nullptr ? cgroup_->note() : std::string("its task's cgroup")) + ")";
  } else if (!no_parent.empty()) {
    note += "; no job cgroup (" + no_parent +
            "): the GPU memory watch and telemetry cannot attribute its processes";
  }
  note += spec.cdi_devices.empty() ? "; no GPU devices"
                                   : "; GPUs by CDI: " + std::to_string(spec.cdi_devices.size());
  final_.isolation = note;
  record_.isolation = note;
  ShimNote("isolation: %s", note.c_str());
  std::string cmdline;
  for (const std::string& a : plan_.argv) cmdline += (cmdline.empty() ? "" : " ") + a;
  ShimLog("container: %s", cmdline.c_str());  // podman commands write here too
  return Status::Ok();
}

// A preemptible job's GPUPOOL_PREEMPT_DEADLINE_FILE: empty until a preemption's deadline
// is written into it (OnStopSignal); the pool writes it (the job directory belongs to
// root, so no entry can be swapped), and only the job's user may read it (0600, theirs:
// before, any user could read when a job was preempted, and lock the file).
Result<std::string> Shim::MakePreemptDeadlineFile() {
  const std::string path = args_.job_dir + "/" + kPreemptDeadlineFile;
  GP_RETURN_IF_ERROR(WriteFileDurably(path, "", 0600, /*sync=*/false));
  const LaunchSpec& spec = config_.spec;
  if (::lchown(path.c_str(), spec.uid, spec.gid) != 0 && ::geteuid() == 0) {
    return Status::Unavailable("cannot give " + path + " to uid " + std::to_string(spec.uid) +
                               ": " + std::strerror(errno));
  }
  return path;
}

// The spec's mounts with staged sources (mount_source.h), the working directory's bind
// mount first when no mount has it as its target (BuildPodmanRunArgv then adds none).
Result<std::vector<BindMount>> Shim::StageMountSources(const LaunchSpec& spec,
                                                       const std::vector<gid_t>& groups) {
  const MountUser who{spec.user, spec.uid, spec.gid, groups};
  staged_ = std::make_unique<StagedMounts>(args_.job_dir + "/mounts");
  // An earlier attempt's shim that was killed may have left its mounts.
  if (Status st = staged_->Clear(); !st.ok()) return st;
  auto stage = [&](const std::string& source, bool write,
                   const std::string& what) -> Result<std::string> {
    Result<int> fd = OpenMountSource(source, who, write);
    if (!fd.ok()) return Status::FailedPrecondition(what + ": " + fd.status().message());
    Result<std::string> path = staged_->Add(*fd);
    ::close(*fd);
    if (!path.ok()) return Status::Unavailable(what + ": " + path.status().message());
    return path;
  };
  std::vector<BindMount> mounts;
  if (!spec.workdir.empty()) {
    const bool covered = std::any_of(spec.mounts.begin(), spec.mounts.end(),
                                     [&](const BindMount& m) { return m.target == spec.workdir; });
    if (covered) {
      // Not mounted: only checked, for the same clear reason as when it is.
      Result<int> fd = OpenMountSource(spec.workdir, who, /*write=*/false);
      if (!fd.ok())
        return Status::FailedPrecondition("working directory: " + fd.status().message());
      ::close(*fd);
    } else {
      GP_ASSIGN_OR_RETURN(std::string path, stage(spec.workdir, false, "working directory"));
      mounts.push_back({path, spec.workdir, /*read_only=*/false});
    }
  }
  for (const BindMount& m : spec.mounts) {
    GP_ASSIGN_OR_RETURN(std::string path, stage(m.source, !m.read_only, "mount " + m.target));
    mounts.push_back({path, m.target, m.read_only});
  }
  return mounts;
}

void Shim::StartHelper(const std::vector<std::string>& podman_args, const char* what) {
  Result<pid_t> pid = StartCommand(PodmanArgv(config_.container, podman_args));
  if (!pid.ok()) {
    ShimLog("%s: %s", what, pid.status().message().c_str());
    return;
  }
  helpers_.insert(*pid);
  if (podman_args[0] == "stop") stop_pid_ = *pid;
}

void Shim::MapContainerExit() {
  if (!final_.exit_code) return;  // the podman client itself was killed: signal stays
  const std::string cmd = config_.spec.argv.empty() ? "" : config_.spec.argv[0];
  const std::string& err_file =
      config_.spec.stderr_file.empty() ? config_.spec.stdout_file : config_.spec.stderr_file;
  ContainerExit m = MapPodmanExit(
      *final_.exit_code, FileTail(err_file.empty() ? args_.job_dir + "/" + kStderrFile : err_file),
      config_.spec.image, cmd);
  final_.exit_code = m.exit_code;
  final_.signal = m.signal;
  container_reason_ = m.reason;
  container_signal_ = m.signal.has_value();
  if (stopping_ && m.signal && *m.signal == SIGKILL) killed_ = true;
}

}  // namespace gpupool::agent::shim_internal
