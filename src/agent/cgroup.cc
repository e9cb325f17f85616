#include "agent/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <set>

#include "agent/device_filter.h"
#include "agent/dmem.h"
#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

constexpr int64_t kCfsPeriodUs = 100'000;

// Writes a whole value to an existing control file; cgroup files reject partial writes.
Status WriteControl(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::Unavailable("cannot open '" + path + "': " + std::strerror(errno));
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Status::Unavailable("cannot write '" + value + "' to '" + path +
                               "': " + std::strerror(n < 0 ? err : EIO));
  }
  return Status::Ok();
}

bool IsFsType(const std::string& path, int64_t magic) {
  struct statfs st;
  if (::statfs(path.c_str(), &st) != 0) return false;
  return static_cast<int64_t>(st.f_type) == magic;
}

std::vector<int> ReadPids(const std::string& procs_path) {
  std::vector<int> pids;
  Result<std::string> text = ReadFileToString(procs_path, 1u << 20);
  if (!text.ok()) return pids;
  for (const std::string& line : Split(*text, '\n')) {
    if (std::optional<int64_t> pid = ParseInt64(Trim(line)); pid && *pid > 0) {
      pids.push_back(static_cast<int>(*pid));
    }
  }
  return pids;
}

std::string LeafName(const CgroupRequest& r) {
  std::string leaf = "job-" + std::to_string(r.id.job) + "-" + std::to_string(r.id.task) + "." +
                     std::to_string(r.id.attempt);
  if (!r.instance.empty()) leaf += "-" + r.instance;
  return leaf;
}

void SleepMillis(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1'000'000L};
  ::nanosleep(&ts, nullptr);
}

}  // namespace

Result<std::string> DeviceRuleFor(const std::string& node) {
  struct stat st;
  if (::stat(node.c_str(), &st) != 0) {
    return Status::NotFound("device node '" + node + "': " + std::strerror(errno));
  }
  char type = 0;
  if (S_ISCHR(st.st_mode)) {
    type = 'c';
  } else if (S_ISBLK(st.st_mode)) {
    type = 'b';
  } else {
    return Status::InvalidArgument("'" + node + "' is not a device node");
  }
  return std::string(1, type) + " " + std::to_string(major(st.st_rdev)) + ":" +
         std::to_string(minor(st.st_rdev)) + " rwm";
}

int64_t CpuQuotaMicros(int64_t cpu_milli, int64_t period_us) {
  const int64_t quota = cpu_milli * period_us / 1000;
  return quota < 1000 ? 1000 : quota;
}

std::unique_ptr<JobCgroup> JobCgroup::Create(const std::string& root,
                                             const CgroupRequest& request) {
  std::unique_ptr<JobCgroup> cg(new JobCgroup());
  // Until SetUpV2 puts it in place.
  cg->dmem_enforced_ = request.dmem_region.empty() && request.nvml_library.empty();
  if (root.empty()) {
    cg->note_ = "isolation skipped: disabled by configuration";
  } else if (::geteuid() != 0) {
    cg->note_ = "isolation skipped: the agent does not run as root";
  } else if (IsFsType(root, CGROUP2_SUPER_MAGIC)) {
    cg->SetUpV2(root, request);
  } else if (IsFsType(root + "/devices", CGROUP_SUPER_MAGIC) ||
             IsFsType(root + "/cpu", CGROUP_SUPER_MAGIC) ||
             IsFsType(root + "/memory", CGROUP_SUPER_MAGIC)) {
    cg->SetUpV1(root, request);
  } else {
    cg->note_ = "isolation skipped: no cgroup file system at '" + root + "'";
  }
  return cg;
}

std::unique_ptr<JobCgroup> JobCgroup::Join(const std::vector<std::string>& dirs) {
  std::unique_ptr<JobCgroup> cg(new JobCgroup());
  if (::geteuid() != 0) {
    cg->note_ = "isolation skipped: the agent does not run as root";
    return cg;
  }
  bool all = !dirs.empty();
  for (const std::string& dir : dirs) {
    // The list comes from a file: only gpupool's own job cgroups are joined.
    struct stat st;
    if (dir.find("/gpupool/job-") == std::string::npos || dir.find("..") != std::string::npos ||
        ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      cg->notes_.push_back("cannot join '" + dir + "'");
      all = false;
      continue;
    }
    const size_t before = cg->join_fds_.size();
    cg->OpenProcs(dir, /*v1=*/!IsFsType(dir, CGROUP2_SUPER_MAGIC));
    if (cg->join_fds_.size() == before) all = false;
  }
  // The owner's device rules hold for whatever joins its cgroups; with no cgroups to
  // join (isolation was skipped for the task), nothing is enforced.
  cg->devices_enforced_ = all;
  cg->note_ = "joined the task's cgroups (" + std::to_string(cg->join_fds_.size()) + ")";
  for (const std::string& n : cg->notes_) cg->note_ += "; " + n;
  return cg;
}

JobCgroup::~JobCgroup() {
  for (const JoinFd& j : join_fds_) ::close(j.fd);
  CloseOomWatch();
}

void JobCgroup::CloseOomWatch() {
  if (oom_eventfd_ >= 0) ::close(oom_eventfd_);
  if (oom_control_fd_ >= 0) ::close(oom_control_fd_);
  oom_eventfd_ = oom_control_fd_ = -1;
}

bool JobCgroup::MakeDir(const std::string& parent, const std::string& leaf, std::string* dir) {
  const std::string mid = parent + "/gpupool";
  if (::mkdir(mid.c_str(), 0755) != 0 && errno != EEXIST) {
    notes_.push_back("cannot create '" + mid + "': " + std::strerror(errno));
    return false;
  }
  *dir = mid + "/" + leaf;
  if (::mkdir(dir->c_str(), 0755) != 0 && errno != EEXIST) {
    notes_.push_back("cannot create '" + *dir + "': " + std::strerror(errno));
    return false;
  }
  if (std::find(dirs_.begin(), dirs_.end(), *dir) == dirs_.end()) dirs_.push_back(*dir);
  return true;
}

// Under v1 an OOM kill counts only in the killed process's own memory cgroup (not in its
// ancestors', as under v2), and podman removes a container's with the container. So a
// container's parent, which holds the same limit and is charged for the container and
// conmon, asks the kernel for its OOM notifications (an eventfd in cgroup.event_control,
// as conmon does): an OOM at the parent's limit is noticed in its eventfd, read at the end.
void JobCgroup::WatchOomV1(const std::string& dir) {
  const std::string control = dir + "/memory.oom_control";
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int ofd = ::open(control.c_str(), O_RDONLY | O_CLOEXEC);
  Status st = efd < 0 || ofd < 0
                  ? Status::Unavailable("cannot watch '" + control + "': " + std::strerror(errno))
                  : WriteControl(dir + "/cgroup.event_control",
                                 std::to_string(efd) + " " + std::to_string(ofd));
  if (!st.ok()) {
    notes_.push_back(st.message() + ": OOM kills not told apart from SIGKILL");
    if (efd >= 0) ::close(efd);
    if (ofd >= 0) ::close(ofd);
    return;
  }
  oom_eventfd_ = efd;
  oom_control_fd_ = ofd;
  oom_failcnt_ = dir + "/memory.failcnt";
}

void JobCgroup::OpenProcs(const std::string& dir, bool v1) {
  // Under v1, writing "0" to `tasks` moves only the calling thread, and the kernel then
  // skips the global threadgroup lock whose write side waits for an RCU grace period:
  // 5-17 ms per controller on an idle host, against 0.1 ms. The caller of
  // JoinFromChild is a freshly forked, single-threaded child, so the thread is the
  // whole process. cgroup.procs with the pid is the fallback (and v2's only way).
  if (v1) {
    const std::string tasks = dir + "/tasks";
    int fd = ::open(tasks.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      join_fds_.push_back({fd, /*write_zero=*/true});
      return;
    }
  }
  const std::string path = dir + "/cgroup.procs";
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    notes_.push_back("cannot open '" + path + "': " + std::strerror(errno));
    return;
  }
  join_fds_.push_back({fd, /*write_zero=*/false});
}

// A container share's parent leaf in every cgroup hierarchy mounted under `root` (v1
// controllers, name=systemd and a hybrid host's unified one): podman's cgroupfs manager
// makes the container's cgroups in each, below the parent it is given.
void JobCgroup::MakeV1Parents(const std::string& root, const std::string& leaf,
                              std::vector<std::string>* applied) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    notes_.push_back("cannot list '" + root + "': " + std::strerror(errno));
    return;
  }
  int made = 0;
  std::string dir;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string h = root + "/" + name;
    struct stat st;
    if (::lstat(h.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;  // cpu,cpuacct links
    if (!IsFsType(h, CGROUP_SUPER_MAGIC) && !IsFsType(h, CGROUP2_SUPER_MAGIC)) continue;
    if (MakeDir(h, leaf, &dir)) ++made;
  }
  ::closedir(d);
  applied->push_back("podman's parent in " + std::to_string(made) + " hierarchies");
}

void JobCgroup::SetUpV1(const std::string& root, const CgroupRequest& request) {
  const std::string leaf = LeafName(request);
  std::vector<std::string> applied;
  std::string dir;
  if (!request.dmem_region.empty() || !request.nvml_library.empty()) {
    notes_.push_back("GPU memory not capped: " +
                     std::string(request.dmem_region.empty() ? "NVML's per-cgroup limits"
                                                             : "the dmem controller") +
                     " need cgroup v2 here");
  }

  if (request.container_parent) MakeV1Parents(root, leaf, &applied);
  if (request.deny_device_nodes.empty()) {
    // Nothing to deny: skip the cgroup, as every move into a v1 cgroup costs milliseconds.
    devices_enforced_ = true;
  } else if (!IsFsType(root + "/devices", CGROUP_SUPER_MAGIC)) {
    notes_.push_back("no devices controller: device access not restricted");
  } else if (MakeDir(root + "/devices", leaf, &dir)) {
    int denied = 0;
    bool all = true;
    for (const std::string& node : request.deny_device_nodes) {
      Result<std::string> rule = DeviceRuleFor(node);
      Status st = rule.ok() ? WriteControl(dir + "/devices.deny", *rule) : rule.status();
      if (st.ok()) {
        ++denied;
      } else {
        all = false;
        notes_.push_back(st.message());
      }
    }
    devices_enforced_ = all;
    applied.push_back("devices denied " + std::to_string(denied));
    OpenProcs(dir, /*v1=*/true);
  }

  const bool want_cpu = request.cpu_milli > 0;
  const bool want_mem = request.memory_bytes > 0;
  if (want_cpu) {
    if (!IsFsType(root + "/cpu", CGROUP_SUPER_MAGIC)) {
      notes_.push_back("no cpu controller: CPU not limited");
    } else if (MakeDir(root + "/cpu", leaf, &dir)) {
      Status st = WriteControl(dir + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs));
      if (st.ok()) {
        st = WriteControl(dir + "/cpu.cfs_quota_us",
                          std::to_string(CpuQuotaMicros(request.cpu_milli, kCfsPeriodUs)));
      }
      if (st.ok()) {
        applied.push_back("cpu " + std::to_string(request.cpu_milli) + "m");
      } else {
        notes_.push_back(st.message());
      }
      OpenProcs(dir, /*v1=*/true);
    }
  }
  if (want_mem) {
    if (!IsFsType(root + "/memory", CGROUP_SUPER_MAGIC)) {
      notes_.push_back("no memory controller: memory not limited");
    } else if (MakeDir(root + "/memory", leaf, &dir)) {
      Status st =
          WriteControl(dir + "/memory.limit_in_bytes", std::to_string(request.memory_bytes));
      if (st.ok()) {
        applied.push_back("memory " + std::to_string(request.memory_bytes) + " B");
        oom_events_ = dir + "/memory.oom_control";
        if (request.container_parent) WatchOomV1(dir);
      } else {
        notes_.push_back(st.message());
      }
      OpenProcs(dir, /*v1=*/true);
    }
  }
  note_ = "cgroup v1";
  if (!applied.empty()) {
    note_ += ": ";
    for (size_t i = 0; i < applied.size(); ++i) note_ += (i ? ", " : "") + applied[i];
  }
  for (const std::string& n : notes_) note_ += "; " + n;
}

void JobCgroup::SetUpV2(const std::string& root, const CgroupRequest& request) {
  const std::string leaf = LeafName(request);
  std::vector<std::string> applied;
  std::string dir;
  if (MakeDir(root, leaf, &dir)) {
    // v2 has no devices.deny: an eBPF program attached to the job's cgroup denies them.
    if (request.deny_device_nodes.empty()) {
      devices_enforced_ = true;
    } else {
      std::vector<DeviceNumber> deny;
      bool all = true;
      for (const std::string& node : request.deny_device_nodes) {
        Result<DeviceNumber> d = DeviceNumberOf(node);
        if (d.ok()) {
          deny.push_back(*d);
        } else {
          all = false;
          notes_.push_back(d.status().message());
        }
      }
      Status st = AttachDeviceFilter(dir, deny);
      if (st.ok()) {
        devices_enforced_ = all;
        applied.push_back("devices denied " + std::to_string(deny.size()) + " (eBPF)");
      } else {
        notes_.push_back(st.message() + ": device access not restricted");
      }
    }
    // Controllers must be enabled in every ancestor's subtree_control to appear below.
    for (const char* ctrl : {"+cpu", "+memory"}) {
      (void)WriteControl(root + "/cgroup.subtree_control", ctrl);
      (void)WriteControl(root + "/gpupool/cgroup.subtree_control", ctrl);
    }
    if (request.cpu_milli > 0) {
      Status st = WriteControl(
          dir + "/cpu.max", std::to_string(CpuQuotaMicros(request.cpu_milli, kCfsPeriodUs)) + " " +
                                std::to_string(kCfsPeriodUs));
      if (st.ok()) {
        applied.push_back("cpu " + std::to_string(request.cpu_milli) + "m");
      } else {
        notes_.push_back(st.message());
      }
    }
    CapGpuMemory(root, dir, request, &applied);
    if (request.memory_bytes > 0) {
      Status st = WriteControl(dir + "/memory.max", std::to_string(request.memory_bytes));
      if (st.ok()) {
        applied.push_back("memory " + std::to_string(request.memory_bytes) + " B");
        oom_events_ = dir + "/memory.events";
      } else {
        notes_.push_back(st.message());
      }
    }
    OpenProcs(dir, /*v1=*/false);
  }
  note_ = "cgroup v2";
  if (!applied.empty()) {
    note_ += ": ";
    for (size_t i = 0; i < applied.size(); ++i) note_ += (i ? ", " : "") + applied[i];
  }
  for (const std::string& n : notes_) note_ += "; " + n;
}

void JobCgroup::CapGpuMemory(const std::string& root, const std::string& dir,
                             const CgroupRequest& request, std::vector<std::string>* applied) {
  Status st;
  std::string what;
  if (!request.dmem_region.empty()) {
    st = ApplyDmemLimit(root, dir, request.dmem_region, request.dmem_bytes);
    what = request.dmem_region + " (dmem)";
  } else if (!request.nvml_library.empty()) {
    const NvmlMemoryLimit limit{request.nvml_library, request.nvml_gpu_uuid, dir,
                                request.dmem_bytes, request.dmem_bytes};
    st = request.nvml_limit != nullptr
             ? request.nvml_limit(limit)
             : Status::FailedPrecondition(
                   "this shim cannot load NVML (the slim static one; the agent runs "
                   "`gpupool agent-shim` for such shares)");
    what = request.nvml_gpu_uuid + " (NVML)";
  } else {
    return;
  }
  if (st.ok()) {
    dmem_enforced_ = true;
    applied->push_back("GPU memory " + std::to_string(request.dmem_bytes) + " B of " + what);
  } else {
    notes_.push_back("GPU memory not capped: " + st.message());
  }
}

bool JobCgroup::OomKilled() const {
  if (oom_eventfd_ >= 0) {
    // An OOM notification, and the parent's own limit reached (not only an ancestor's).
    uint64_t events = 0;
    if (::read(oom_eventfd_, &events, sizeof events) != sizeof events || events == 0) {
      return false;
    }
    Result<std::string> failcnt = ReadFileToString(oom_failcnt_, 64);
    return failcnt.ok() && ParseUint64(std::string(Trim(*failcnt))).value_or(0) > 0;
  }
  if (oom_events_.empty()) return false;
  Result<std::string> text = ReadFileToString(oom_events_, 1u << 16);
  if (!text.ok()) return false;
  // Both files hold "key value" lines; "oom_kill N" counts the kills.
  for (const std::string& line : Split(*text, '\n')) {
    std::vector<std::string> kv = Split(Trim(line), ' ');
    if (kv.size() == 2 && kv[0] == "oom_kill") return ParseUint64(kv[1]).value_or(0) > 0;
  }
  return false;
}

bool JobCgroup::JoinFromChild() const {
  char buf[24];
  int len = 0;
  char rev[24];
  int rlen = 0;
  for (pid_t pid = ::getpid(); pid > 0; pid /= 10) rev[rlen++] = static_cast<char>('0' + pid % 10);
  while (rlen > 0) buf[len++] = rev[--rlen];
  bool ok = true;
  for (const JoinFd& j : join_fds_) {
    const ssize_t want = j.write_zero ? 1 : len;
    if (::write(j.fd, j.write_zero ? "0" : buf, static_cast<size_t>(want)) != want) ok = false;
  }
  return ok;
}

namespace {

// The cgroups below `dir`, deepest first: a container job's leaf holds the cgroups podman
// made for the container and its conmon (container.h), which must go before it.
std::vector<std::string> ChildCgroups(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || e->d_type != DT_DIR) continue;
    for (std::string& sub : ChildCgroups(dir + "/" + name)) out.push_back(std::move(sub));
    out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  return out;
}

Status KillAndRemove(const std::vector<std::string>& dirs, int timeout_ms) {
  std::string failed;
  for (const std::string& dir : dirs) {
    int waited = 0;
    while (true) {
      std::vector<std::string> tree = ChildCgroups(dir);
      tree.push_back(dir);
      for (const std::string& c : tree) {
        for (int pid : ReadPids(c + "/cgroup.procs")) ::kill(pid, SIGKILL);
      }
      for (size_t i = 0; i + 1 < tree.size(); ++i) (void)::rmdir(tree[i].c_str());
      if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) break;
      if (waited >= timeout_ms) {
        failed += (failed.empty() ? "" : ", ") + dir + " (" + std::strerror(errno) + ")";
        break;
      }
      SleepMillis(20);
      waited += 20;
    }
  }
  if (!failed.empty()) {
    return Status::Unavailable("cannot remove the job's cgroups: " + failed +
                               "; remove them by hand once their processes are gone");
  }
  return Status::Ok();
}

}  // namespace

int JobCgroup::Signal(int sig) const {
  std::set<int> pids;  // under v1 every hierarchy lists the same processes
  for (const std::string& dir : dirs_) {
    std::vector<std::string> tree = ChildCgroups(dir);
    tree.push_back(dir);
    for (const std::string& c : tree) {
      for (int pid : ReadPids(c + "/cgroup.procs")) pids.insert(pid);
    }
  }
  int n = 0;
  for (int pid : pids) n += ::kill(pid, sig) == 0 ? 1 : 0;
  return n;
}

Status JobCgroup::Destroy(int timeout_ms) {
  for (const JoinFd& j : join_fds_) ::close(j.fd);
  join_fds_.clear();
  CloseOomWatch();
  Status st = KillAndRemove(dirs_, timeout_ms);
  dirs_.clear();
  return st;
}

Status RemoveCgroupDirs(const std::vector<std::string>& dirs, int timeout_ms) {
  std::vector<std::string> ours;
  for (const std::string& dir : dirs) {
    // The list comes from a file: never let it point the killing elsewhere.
    if (dir.find("/gpupool/job-") == std::string::npos || dir.find("..") != std::string::npos) {
      continue;
    }
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) ours.push_back(dir);
  }
  return KillAndRemove(ours, timeout_ms);
}

}  // namespace gpupool::agent
