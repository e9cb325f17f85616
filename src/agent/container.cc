#include "agent/container.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "agent/job_env.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "jobs/job_validation.h"

namespace gpupool::agent {
namespace {

constexpr int kCapSysResource = 24;

// Paths podman's --mount syntax would misread.
Status CheckMountPath(const std::string& what, const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Status::InvalidArgument(what + " '" + path + "' must be an absolute path");
  }
  if (path.find_first_of(",\n\r") != std::string::npos) {
    return Status::InvalidArgument(what + " '" + path +
                                   "' contains a comma or line break, which podman's --mount "
                                   "cannot express; rename it or mount its parent");
  }
  return Status::Ok();
}

std::string BindArg(const std::string& source, const std::string& target, bool read_only) {
  std::string arg = "type=bind,source=" + source + ",target=" + target;
  if (read_only) arg += ",ro=true";
  return arg;
}

std::string CpusValue(int64_t cpu_milli) {
  char buf[32];
  (void)std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(cpu_milli / 1000),
                      static_cast<long long>(cpu_milli % 1000));
  return buf;
}

std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) {
    return ::access(name.c_str(), X_OK) == 0 ? name : std::string();
  }
  const char* env_path = std::getenv("PATH");
  std::string path = env_path != nullptr && *env_path != '\0' ? env_path : "";
  // Root's usual directories too: the agent may run with a narrow PATH.
  path += ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const std::string& dir : Split(path, ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir;
    candidate.append("/").append(name);
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return "";
}

bool HasCapability(int cap) {
  Result<std::string> status = ReadFileToString("/proc/self/status");
  if (!status.ok()) return false;
  for (const std::string& line : Split(*status, '\n')) {
    if (!StartsWith(line, "CapEff:")) continue;
    const std::string hex(Trim(line.substr(7)));
    errno = 0;
    const unsigned long long caps = std::strtoull(hex.c_str(), nullptr, 16);
    return errno == 0 && ((caps >> cap) & 1ULL) != 0;
  }
  return false;
}

uint64_t HardLimit(int resource) {
  struct rlimit rl;
  if (::getrlimit(resource, &rl) != 0) return 0;
  return rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(rl.rlim_max);
}

std::string Joined(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += sep;
    out += p;
  }
  return out;
}

bool HasUlimit(const std::vector<std::string>& ulimits, const std::string& type) {
  return std::any_of(ulimits.begin(), ulimits.end(),
                     [&](const std::string& u) { return StartsWith(u, type + "="); });
}

}  // namespace

std::string ContainerName(const LaunchSpec& spec) {
  // Two tasks of one job may share a node, so a gang's task index is part of the name,
  // and an exec session runs in a container of its own beside its task's.
  std::string name = "gpupool-job-" + std::to_string(spec.id.job);
  if (spec.num_tasks > 1) name += "-t" + std::to_string(spec.id.task);
  name += "-" + std::to_string(spec.id.attempt);
  if (spec.id.is_exec()) name += "-exec" + std::to_string(spec.id.exec);
  return name;
}

std::vector<std::string> PodmanArgv(const ContainerOptions& options,
                                    const std::vector<std::string>& rest) {
  std::vector<std::string> argv = {options.podman.empty() ? std::string("podman") : options.podman};
  argv.insert(argv.end(), options.global_args.begin(), options.global_args.end());
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

bool EnvFileCan(const std::string& key, const std::string& value) {
  if (key.empty() || key[0] == '#' || key.find_first_of(" \t\n\r\v\f") != std::string::npos) {
    return false;
  }
  // bufio.Scanner's default line limit is 64 KiB.
  return value.find_first_of("\n\r") == std::string::npos && key.size() + value.size() < 60'000;
}

std::string ContainerEnvFile(const LaunchSpec& spec) {
  std::string text;
  for (const auto& [k, v] : BuildContainerEnvironment(spec)) {
    if (EnvFileCan(k, v)) text.append(k).append("=").append(v).append("\n");
  }
  return text;
}

Result<std::vector<std::string>> BuildPodmanRunArgv(const LaunchSpec& spec,
                                                    const ContainerOptions& options,
                                                    const std::vector<uint32_t>& groups,
                                                    const std::string& env_file,
                                                    const std::string& cgroup_parent) {
  if (spec.image.empty()) return Status::InvalidArgument("the job has no image");
  // The controller checked it at submit; an agent takes no value from the network on
  // trust before it reaches podman's command line.
  GP_RETURN_IF_ERROR(jobs::ValidateImageRef(spec.image));
  if (spec.argv.empty()) return Status::InvalidArgument("the job's command is empty");
  std::vector<std::string> run = {"run", "--rm", "--name", ContainerName(spec), "--label",
                                  "gpupool.job=" + std::to_string(spec.id.job), "--label",
                                  "gpupool.task=" + std::to_string(spec.id.task),
                                  // Output goes to the attached client (the job's logs) only.
                                  "--log-driver", "none"};
  if (!options.runtime.empty()) run.insert(run.end(), {"--runtime", options.runtime});
  for (const std::string& u : options.ulimits) run.insert(run.end(), {"--ulimit", u});
  if (!options.pull.empty()) run.insert(run.end(), {"--pull", options.pull});
  if (!options.network.empty()) run.insert(run.end(), {"--network", options.network});
  run.insert(run.end(), {"--user", std::to_string(spec.uid) + ":" + std::to_string(spec.gid)});
  for (uint32_t g : groups) {
    if (g != spec.gid) run.insert(run.end(), {"--group-add", std::to_string(g)});
  }
  if (spec.uid != 0) {
    // Nothing in the image (setuid binaries, file capabilities) may gain privileges.
    run.insert(run.end(), {"--cap-drop", "all", "--security-opt", "no-new-privileges"});
  }
  bool workdir_mounted = spec.workdir.empty();
  for (const BindMount& m : spec.mounts) {
    GP_RETURN_IF_ERROR(CheckMountPath("mount source", m.source));
    GP_RETURN_IF_ERROR(CheckMountPath("mount target", m.target));
    if (m.target == spec.workdir) workdir_mounted = true;
  }
  if (!spec.workdir.empty()) {
    GP_RETURN_IF_ERROR(CheckMountPath("working directory", spec.workdir));
    run.insert(run.end(), {"--workdir", spec.workdir});
    if (!workdir_mounted) {
      run.insert(run.end(), {"--mount", BindArg(spec.workdir, spec.workdir, false)});
    }
  }
  for (const BindMount& m : spec.mounts) {
    run.insert(run.end(), {"--mount", BindArg(m.source, m.target, m.read_only)});
  }
  // A client of its GPU's MPS daemon (docs/sharing.md): the daemon's pipe folder at the
  // same path, and the host's IPC namespace, where MPS clients and server share memory.
  const bool mps = spec.share_enforcement == "mps" && !spec.mps_pipe_dir.empty();
  if (mps) {
    GP_RETURN_IF_ERROR(CheckMountPath("MPS pipe folder", spec.mps_pipe_dir));
    const bool mounted =
        std::any_of(spec.mounts.begin(), spec.mounts.end(),
                    [&](const BindMount& m) { return m.target == spec.mps_pipe_dir; });
    if (!mounted) {
      run.insert(run.end(), {"--mount", BindArg(spec.mps_pipe_dir, spec.mps_pipe_dir, false)});
    }
    run.insert(run.end(), {"--ipc", "host"});
  }
  for (const std::string& d : spec.cdi_devices) run.insert(run.end(), {"--device", d});
  if (!env_file.empty()) run.insert(run.end(), {"--env-file", env_file});
  for (const auto& [k, v] : BuildContainerEnvironment(spec)) {
    if (env_file.empty() || !EnvFileCan(k, v)) {
      std::string kv = k;
      kv.append("=").append(v);
      run.insert(run.end(), {"--env", std::move(kv)});
    }
  }
  // An init as PID 1 (podman's catatonit) passes the stop signal on to the command, so a
  // cancel ends it with SIGTERM instead of SIGKILL after the grace period.
  if (spec.init) run.push_back("--init");
  // An interactive job: the container's stdin stays open, on a terminal of its own with
  // --tty (podman passes the size of the terminal it was given and later changes on).
  if (spec.stdio_relayed) run.push_back("--interactive");
  if (spec.stdio_relayed && spec.tty) run.push_back("--tty");
  // The host's IPC namespace brings the host's /dev/shm, which podman does not size.
  if (spec.shm_bytes > 0 && !mps) {
    run.insert(run.end(), {"--shm-size", std::to_string(spec.shm_bytes) + "b"});
  }
  if (spec.cpu_milli > 0) run.insert(run.end(), {"--cpus", CpusValue(spec.cpu_milli)});
  if (spec.memory_bytes > 0) {
    run.insert(run.end(), {"--memory", std::to_string(spec.memory_bytes) + "b"});
  }
  if (!cgroup_parent.empty()) {
    // A path, not a systemd slice: podman takes it under the cgroupfs manager only.
    if (cgroup_parent[0] != '/' || cgroup_parent.find('\n') != std::string::npos) {
      return Status::InvalidArgument("cgroup parent '" + cgroup_parent +
                                     "' must be an absolute cgroup path on one line");
    }
    run.insert(run.end(), {"--cgroup-parent", cgroup_parent});
    run.insert(run.begin(), {"--cgroup-manager", "cgroupfs"});
  }
  // "--": whatever follows is the image and its command, never a podman option.
  run.insert(run.end(), {"--", spec.image});
  run.insert(run.end(), spec.argv.begin(), spec.argv.end());
  return PodmanArgv(options, run);
}

std::string LastPodmanError(const std::string& stderr_text) {
  std::vector<std::string> lines = Split(stderr_text, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::string line(Trim(*it));
    if (StartsWith(line, "Error: ")) return line.substr(7);
  }
  return "";
}

ContainerExit MapPodmanExit(int status, const std::string& stderr_tail, const std::string& image,
                            const std::string& command) {
  ContainerExit out;
  out.exit_code = status;
  const std::string err = LastPodmanError(stderr_tail);
  // 125-127 are podman's own only when podman said so; a command may exit with them too.
  if (status == 125) {
    out.reason = "podman could not run the container: " +
                 (err.empty() ? std::string("see the job's stderr.log") : err);
  } else if (status == 126 && !err.empty()) {
    out.reason = "command '" + command + "' could not be executed in image '" + image + "': " + err;
  } else if (status == 127 && !err.empty()) {
    out.reason = "command '" + command + "' not found in image '" + image + "': " + err;
  } else if (status > 128 && status <= 128 + 64) {
    out.exit_code.reset();
    out.signal = status - 128;
  } else if (status == 1) {
    // With --init, catatonit runs the command and, when it cannot, says so and exits 1:
    // "ERROR (catatonit:6): failed to exec pid1: No such file or directory".
    std::vector<std::string> lines = Split(stderr_tail, '\n');
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
      const std::string line(Trim(*it));
      if (line.empty()) continue;
      const std::string tag = "failed to exec pid1: ";
      const size_t at = line.find(tag);
      if (StartsWith(line, "ERROR (catatonit") && at != std::string::npos) {
        const std::string why = line.substr(at + tag.size());
        const bool missing = why == "No such file or directory";
        out.exit_code = missing ? 127 : 126;
        out.reason = "command '" + command + "' " +
                     (missing ? "not found" : "could not be executed") + " in image '" + image +
                     "': " + why;
      }
      break;
    }
  }
  return out;
}

Result<pid_t> StartCommand(const std::vector<std::string>& argv) { return SpawnCommand(argv); }

Result<std::string> RunCommand(const std::vector<std::string>& argv, int timeout_ms,
                               std::string* err_out) {
  GP_ASSIGN_OR_RETURN(CommandResult r, RunCommandCapture(argv, timeout_ms));
  if (err_out != nullptr) *err_out = r.err;
  if (r.Succeeded()) return std::move(r.out);
  if (!r.timed_out) {
    if (std::string msg = LastPodmanError(r.err); !msg.empty()) {
      return Status::Unavailable(argv[0] + (argv.size() > 1 ? " " + argv[1] : std::string()) +
                                 " failed: " + msg);
    }
  }
  return Status::Unavailable(r.Failure(argv, timeout_ms));
}

Result<bool> RemoveContainer(const ContainerOptions& options, const std::string& name,
                             int timeout_ms) {
  std::string err;
  Result<std::string> rm =
      RunCommand(PodmanArgv(options, {"rm", "--force", "--time", "0", name}), timeout_ms, &err);
  // With --force podman prints the names it removed and is silent about missing ones.
  if (rm.ok()) return !Trim(*rm).empty();
  if (err.find("no such container") != std::string::npos) return false;
  return Status::Unavailable("cannot remove container " + name + ": " + rm.status().message());
}

PodmanFacts ProbePodman(const ContainerOptions& base) {
  PodmanFacts f;
  f.crun_present = !FindInPath("crun").empty();
  f.runc_present = !FindInPath("runc").empty();
  f.cap_sys_resource = HasCapability(kCapSysResource);
  f.nofile_hard = HardLimit(RLIMIT_NOFILE);
  f.nproc_hard = HardLimit(RLIMIT_NPROC);
  if (Result<std::string> pid_max = ReadFileToString("/proc/sys/kernel/pid_max"); pid_max.ok()) {
    f.pid_max = static_cast<uint64_t>(ParseInt64(std::string(Trim(*pid_max))).value_or(0));
  }
  const std::string name = base.podman.empty() ? "podman" : base.podman;
  f.podman_path = FindInPath(name);
  if (f.podman_path.empty()) {
    f.missing_reason = "'" + name + "' not found (install podman, e.g. apt-get install podman)";
    return f;
  }
  ContainerOptions probe = base;
  probe.podman = f.podman_path;
  Result<std::string> info = RunCommand(PodmanArgv(probe, {"info", "--format", "json"}), 60'000);
  if (!info.ok()) {
    f.missing_reason = "`podman info` failed: " + info.status().message();
    return f;
  }
  Result<Json> j = ParseJson(*info, "podman info");
  if (!j.ok() || !j->is_object()) {
    f.missing_reason = "`podman info` printed no JSON object";
    return f;
  }
  const Json host = j->value("host", Json::object());
  if (host.is_object()) {
    const Json runtime = host.value("ociRuntime", Json::object());
    if (runtime.is_object()) f.default_runtime = runtime.value("name", "");
    f.cgroup_version = host.value("cgroupVersion", "");
  }
  return f;
}

ContainerOptions DecideContainerOptions(const PodmanFacts& facts, ContainerOptions base) {
  std::vector<std::string> notes;
  if (facts.podman_path.empty() || !facts.missing_reason.empty()) {
    base.unavailable = facts.missing_reason.empty() ? "podman is not usable" : facts.missing_reason;
  } else {
    base.podman = facts.podman_path;
  }
  if (!base.runtime.empty()) {
    notes.push_back("--runtime " + base.runtime + " (configured)");
  } else if (!facts.crun_present && facts.runc_present) {
    base.runtime = "runc";
    notes.push_back("--runtime runc (crun missing)");
  } else if (facts.crun_present && facts.runc_present && facts.cgroup_version == "v1") {
    base.runtime = "runc";
    notes.push_back("--runtime runc (cgroup v1: crun rejects this hierarchy)");
  } else if (!facts.crun_present && !facts.runc_present && facts.default_runtime.empty() &&
             base.unavailable.empty()) {
    base.unavailable = "no OCI runtime (crun or runc) is installed";
  }
  if (!facts.cap_sys_resource) {
    const std::string why = " < podman's default " + std::to_string(kPodmanDefaultRlimit) +
                            ", and no CAP_SYS_RESOURCE to raise it)";
    if (facts.nofile_hard > 0 && facts.nofile_hard < kPodmanDefaultRlimit &&
        !HasUlimit(base.ulimits, "nofile")) {
      const std::string n = std::to_string(facts.nofile_hard);
      base.ulimits.push_back("nofile=" + n + ":" + n);
      notes.push_back("--ulimit nofile=" + n + ":" + n + " (hard RLIMIT_NOFILE " + n + why);
    }
    uint64_t nproc = facts.nproc_hard;
    if (facts.pid_max > 0 && (nproc == 0 || facts.pid_max < nproc)) nproc = facts.pid_max;
    if (nproc > 0 && nproc < kPodmanDefaultRlimit && !HasUlimit(base.ulimits, "nproc")) {
      const std::string n = std::to_string(nproc);
      base.ulimits.push_back("nproc=" + n + ":" + n);
      notes.push_back("--ulimit nproc=" + n + ":" + n + " (min of hard RLIMIT_NPROC and pid_max " +
                      n + why);
    }
  }
  base.note = "podman: " + (notes.empty() ? std::string("no adjustments") : Joined(notes, "; "));
  return base;
}

ContainerOptions DetectContainerOptions(const ContainerOptions& base) {
  return DecideContainerOptions(ProbePodman(base), base);
}

Status CheckUserAccess(const std::string& path, const std::string& user, uid_t uid, gid_t gid,
                       const std::vector<gid_t>& groups, bool write) {
  const std::string who = "user '" + user + "' (uid " + std::to_string(uid) + ")";
  auto check = [&]() -> int {  // 0 or an errno
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno;
    int mode = R_OK;
    if (S_ISDIR(st.st_mode)) mode |= X_OK;
    if (write) mode |= W_OK;
    return ::access(path.c_str(), mode) == 0 ? 0 : errno;
  };
  int err = 0;
  if (::geteuid() != 0 || uid == 0) {
    err = check();
  } else {
    // A child that becomes the user answers; the access checks then use the user's ids.
    pid_t pid = ::fork();
    if (pid < 0) return Status::Unavailable("cannot fork: " + std::string(std::strerror(errno)));
    if (pid == 0) {
      if (::setgroups(groups.size(), groups.data()) != 0 || ::setresgid(gid, gid, gid) != 0 ||
          ::setresuid(uid, uid, uid) != 0) {
        ::_exit(255);
      }
      ::_exit(std::min(check(), 254));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 255) {
      return Status::Unavailable("cannot switch to " + who + " to check access to '" + path + "'");
    }
    err = WEXITSTATUS(status);
  }
  if (err == 0) return Status::Ok();
  if (err == ENOENT || err == ENOTDIR) {
    return Status::FailedPrecondition("'" + path + "' does not exist (or is not reachable by " +
                                      who + ")");
  }
  if (err == EACCES || err == EPERM) {
    return Status::FailedPrecondition(
        "'" + path + "' is not " + (write ? "readable and writable" : "readable") + " by " + who +
        "; the container may only mount what its user can " + (write ? "write" : "read"));
  }
  return Status::FailedPrecondition("cannot check '" + path + "' for " + who + ": " +
                                    std::strerror(err));
}

}  // namespace gpupool::agent
