#include "agent/stray_runs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <map>

#include "agent/cgroup.h"
#include "agent/container.h"
#include "agent/job_files.h"
#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

bool IsDir(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// `dir` and the cgroups below it (a container's, podman's), deepest first.
void CgroupTree(const std::string& dir, std::vector<std::string>* out) {
  for (const std::string& name : ListDir(dir)) {
    if (IsDir(dir + "/" + name)) CgroupTree(dir + "/" + name, out);
  }
  out->push_back(dir);
}

// The live (not zombie) processes in the cgroups of `dirs` and below them.
std::vector<int> LivePids(const std::vector<std::string>& dirs, const std::string& proc_root) {
  std::vector<int> pids;
  for (const std::string& dir : dirs) {
    std::vector<std::string> tree;
    CgroupTree(dir, &tree);
    for (const std::string& c : tree) {
      Result<std::string> text = ReadFileToString(c + "/cgroup.procs", 1u << 20);
      if (!text.ok()) continue;
      for (const std::string& line : Split(*text, '\n')) {
        std::optional<int64_t> pid = ParseInt64(Trim(line));
        if (!pid || *pid <= 0) continue;
        // "PID (comm) S ...": a zombie has ended (its parent reaps it).
        Result<std::string> stat =
            ReadFileToString(proc_root + "/" + std::to_string(*pid) + "/stat", 4096);
        if (!stat.ok()) continue;
        const size_t paren = stat->rfind(')');
        if (paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 2] == 'Z') {
          continue;
        }
        if (std::find(pids.begin(), pids.end(), *pid) == pids.end()) {
          pids.push_back(static_cast<int>(*pid));
        }
      }
    }
  }
  return pids;
}

// The run directory a running shim `pid` names (`... agent-shim --job-dir DIR ...`), or
// "" when `pid` is not a gpupool shim (gone, or the pid is another process's now).
std::string ShimJobDir(const std::string& proc_root, const std::string& pid) {
  Result<std::string> cmdline = ReadFileToString(proc_root + "/" + pid + "/cmdline", 64 << 10);
  if (!cmdline.ok()) return "";
  const std::vector<std::string> argv = Split(*cmdline, '\0');
  bool shim = false;
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() >= 10 && a.compare(a.size() - 10, 10, "agent-shim") == 0) shim = true;
    if (shim && a == "--job-dir") return argv[i + 1];
  }
  return "";
}

bool SamePath(const std::string& a, const std::string& b) {
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(a, ec1);
  const fs::path cb = fs::weakly_canonical(b, ec2);
  if (ec1 || ec2) return fs::path(a).lexically_normal() == fs::path(b).lexically_normal();
  return ca == cb;
}

// Whether an agent holds the state directory `agent_dir` (its agent.lock,
// agent_identity.h): that agent's runs are its own, whatever its node's name.
bool AgentHolds(const std::string& agent_dir) {
  const int fd = ::open((agent_dir + "/agent.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // releases it when it was taken here
  return held;
}

// Whether the agent of `agent_dir` recorded a controller of `controllers`' (true when
// either is unknown: an agent from before the record, or one not told its address).
bool SharesAController(const std::string& agent_dir, const std::string& controllers) {
  Result<std::string> kept = ReadFileToString(agent_dir + "/controller", 64 << 10);
  if (!kept.ok() || Trim(*kept).empty() || controllers.empty()) return true;
  const std::vector<std::string> ours = Split(controllers, ',');
  for (const std::string& c : Split(Trim(*kept), ',')) {
    if (std::find(ours.begin(), ours.end(), c) != ours.end()) return true;
  }
  return false;
}

// Why the run in `job_dir` (job `job`, run `run`) is a stray for `scan`'s agent, or "".
std::string StrayReason(const StrayScan& scan, const std::string& job_dir, int64_t job,
                        const std::string& run) {
  const size_t at = job_dir.rfind("/jobs/");
  if (at == std::string::npos) return "";
  const std::string owner = job_dir.substr(0, at);
  if (SamePath(owner, scan.agent_dir)) {
    // The run as its directory's spec names it (either layout's leaf), else as the leaf
    // of this layout does.
    std::optional<RunId> id;
    if (Result<ShimConfig> config = ReadShimConfig(job_dir); config.ok()) id = config->spec.id;
    for (const RunId& r : scan.running) {
      if (id ? r == *id
             : !r.is_exec() && r.job == job &&
                   std::to_string(r.task) + "." + std::to_string(r.attempt) == run) {
        return "";  // re-adopted: this agent's own
      }
    }
    return "this agent does not supervise its run directory " + job_dir;
  }
  if (AgentHolds(owner)) return "";  // a live agent's (another node's on this host, or a clone)
  if (!SharesAController(owner, scan.controllers)) return "";  // another pool's
  Result<std::string> node = ReadFileToString(owner + "/node-name", 4096);
  if (node.ok()) {
    if (Trim(*node) != scan.node_name) return "";  // another node's agent on this host
    return "state directory " + owner + " not this one's";
  }
  if (!fs::exists(owner)) return "state directory " + owner + " is gone";
  return "";
}

// The leaves under the gpupool cgroup of every hierarchy below `root` (v1), or of root
// itself (v2): leaf name -> its directories.
std::map<std::string, std::vector<std::string>> JobLeaves(const std::string& root) {
  std::vector<std::string> parents = {root + "/gpupool"};
  for (const std::string& name : ListDir(root)) {
    if (IsDir(root + "/" + name + "/gpupool")) parents.push_back(root + "/" + name + "/gpupool");
  }
  std::map<std::string, std::vector<std::string>> leaves;
  for (const std::string& parent : parents) {
    for (const std::string& name : ListDir(parent)) {
      if (name.rfind("job-", 0) == 0 && IsDir(parent + "/" + name)) {
        leaves[name].push_back(parent + "/" + name);
      }
    }
  }
  return leaves;
}

void SleepMillis(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1'000'000L};
  ::nanosleep(&ts, nullptr);
}

}  // namespace

std::vector<StrayRun> FindStrayRuns(const StrayScan& scan, std::vector<std::string>* unknown) {
  std::vector<StrayRun> out;
  if (scan.cgroup_root.empty()) return out;
  for (const auto& [leaf, dirs] : JobLeaves(scan.cgroup_root)) {
    // job-J-T.A-INSTANCE, or an older agent's job-KEY-ATTEMPT-INSTANCE.
    const std::string rest = leaf.substr(4);
    const size_t first = rest.find('-');
    const size_t last = rest.rfind('-');
    if (first == std::string::npos || last == first) continue;
    std::optional<int64_t> job = ParseInt64(rest.substr(0, first));
    const std::string instance = rest.substr(last + 1);
    if (!job || !ParseInt64(instance)) continue;
    const std::string job_dir = ShimJobDir(scan.proc_root, instance);
    if (job_dir.empty()) {
      if (unknown != nullptr && !LivePids(dirs, scan.proc_root).empty()) {
        unknown->push_back(dirs.front());
      }
      continue;
    }
    StrayRun s;
    s.job = *job;
    s.run = rest.substr(first + 1, last - first - 1);
    s.why = StrayReason(scan, job_dir, s.job, s.run);
    if (s.why.empty()) continue;
    s.leaf = leaf;
    s.dirs = dirs;
    s.shim_pid = static_cast<int>(*ParseInt64(instance));
    s.job_dir = job_dir;
    out.push_back(std::move(s));
  }
  return out;
}

void RecordController(const std::string& agent_dir, const std::string& controllers) {
  (void)WriteFileAtomically(agent_dir + "/controller", controllers + "\n");
}

Status StopStrayRun(const StrayRun& run, const std::string& proc_root, int grace_ms,
                    int timeout_ms) {
  // The job first, as a cancel would: SIGTERM, then what is left gets SIGKILL below.
  for (int pid : LivePids(run.dirs, proc_root)) ::kill(pid, SIGTERM);
  for (int waited = 0; waited < grace_ms && !LivePids(run.dirs, proc_root).empty(); waited += 20) {
    SleepMillis(20);
  }
  Status removed = RemoveCgroupDirs(run.dirs, timeout_ms);
  // A container job's container (its processes died with the cgroups below the leaf):
  // podman's record of it goes too, when the run's directory still names it.
  if (Result<ShimConfig> config = ReadShimConfig(run.job_dir);
      config.ok() && !config->spec.image.empty()) {
    Result<bool> rm = RemoveContainer(config->container, ContainerName(config->spec), timeout_ms);
    if (!rm.ok() && removed.ok()) removed = rm.status();
  }
  if (run.shim_pid > 0) {
    // Its job ended, the shim records that in its run directory and exits; one that does
    // not within a second is killed (it holds no GPU, but nothing would ever stop it).
    const std::string pid = std::to_string(run.shim_pid);
    for (int waited = 0; waited < 1000 && ShimJobDir(proc_root, pid) == run.job_dir; waited += 20) {
      SleepMillis(20);
    }
    if (ShimJobDir(proc_root, pid) == run.job_dir) ::kill(run.shim_pid, SIGKILL);
  }
  return removed;
}

}  // namespace gpupool::agent
