#include "agent/mps.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/file_util.h"
#include "common/strings.h"
#include "common/subprocess.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

bool IsExecutable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111) != 0 &&
         ::access(path.c_str(), X_OK) == 0;
}

// A GPU id that can name a folder: "GPU-<uuid>", "MIG-<uuid>", an index.
bool IsFolderSafe(const std::string& gpu) {
  if (gpu.empty() || gpu.size() > 96 || gpu[0] == '.' || gpu[0] == '-') return false;
  for (char c : gpu) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// Waits for `pid` to exit within `timeout_ms` (on its pidfd: no polling loop); its wait
// status, or -1 when it had to be killed.
int WaitWithin(pid_t pid, int timeout_ms) {
  int status = 0;
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    int n = 0;
    do {
      n = ::poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    ::close(fd);
    if (n == 0) ::kill(pid, SIGKILL);
    if (::waitpid(pid, &status, 0) != pid || n == 0) return -1;
    return status;
  }
  ::kill(pid, SIGKILL);  // no pidfd (Linux < 5.3): not waited for blindly
  ::waitpid(pid, &status, 0);
  return -1;
}

// The log folder belongs to the share's user, who may swap control.log for a link to, or
// a hard link of, a file of root's (the red team: /etc/shadow's last line reached the
// job's reason). Only a regular file, not a link, with one name, of the daemon's owner
// (this agent's user, who starts it) is read.
std::string LogTail(const std::string& log_dir) {
  const std::string path = log_dir + "/control.log";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string raw;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
      st.st_uid == ::geteuid()) {
    raw.resize(static_cast<size_t>(std::min<off_t>(st.st_size, 1 << 20)));
    const off_t from = std::max<off_t>(0, st.st_size - static_cast<off_t>(raw.size()));
    const ssize_t n = ::pread(fd, raw.data(), raw.size(), from);
    raw.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  ::close(fd);
  if (raw.empty()) return "";
  std::vector<std::string> lines = Split(std::string(Trim(raw)), '\n');
  return lines.empty() ? "" : std::string(Trim(lines.back()));
}

Status MakeOwnedDir(const std::string& path, uid_t uid, gid_t gid, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return Status::Unavailable("cannot create " + path + ": " + std::strerror(errno));
  }
  if (::chown(path.c_str(), uid, gid) != 0 && ::geteuid() == 0) {
    return Status::Unavailable("cannot give " + path + " to uid " + std::to_string(uid) + ": " +
                               std::strerror(errno));
  }
  if (::chmod(path.c_str(), mode) != 0) {
    return Status::Unavailable("cannot set the mode of " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace

std::string FindMpsControl(const std::string& configured) {
  if (!configured.empty()) return IsExecutable(configured) ? configured : "";
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH"); path != nullptr) dirs = Split(path, ':');
  dirs.insert(dirs.end(), {"/usr/local/nvidia/bin", "/usr/bin"});
  for (const std::string& d : dirs) {
    if (d.empty()) continue;
    const std::string candidate = d + "/nvidia-cuda-mps-control";
    if (IsExecutable(candidate)) return candidate;
  }
  return "";
}

std::string LeftoverMpsControl(const std::string& state_dir, const std::string& fallback) {
  bool left = false;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(state_dir + "/mps", ec)) {
    const std::string gpu = e.path().filename().string();
    if (!IsFolderSafe(gpu) || !e.is_directory(ec)) continue;
    left = true;
    // Written by the agent into its own folder (root's, 0711): no user's to swap.
    Result<std::string> recorded = ReadFileToString(e.path().string() + "/control", 4096);
    const std::string control = recorded.ok() ? std::string(Trim(*recorded)) : "";
    if (!control.empty() && control.front() == '/' && IsExecutable(control)) return control;
  }
  return left ? fallback : "";
}

MpsLimits MpsLimitsFor(int gpu_milli, uint64_t memory_bytes) {
  MpsLimits l;
  l.thread_percentage = std::clamp((gpu_milli + 9) / 10, 1, 100);
  l.pinned_mib = memory_bytes == 0 ? 0 : std::max<uint64_t>(1, memory_bytes >> 20);
  return l;
}

MpsDaemons::MpsDaemons(MpsOptions options) : options_(std::move(options)) {}

std::string MpsDaemons::Dir(const std::string& gpu) const {
  return options_.state_dir + "/mps/" + gpu;
}

std::vector<std::string> MpsDaemons::Env(const std::string& gpu) const {
  const std::string dir = Dir(gpu);
  std::vector<std::string> env = options_.base_env;
  env.push_back("CUDA_VISIBLE_DEVICES=" + gpu);
  env.push_back("CUDA_MPS_PIPE_DIRECTORY=" + dir + "/pipe");
  env.push_back("CUDA_MPS_LOG_DIRECTORY=" + dir + "/log");
  return env;
}

Result<std::string> MpsDaemons::Control(const std::string& gpu, const std::string& input) const {
  int in[2];
  if (::pipe2(in, O_CLOEXEC) != 0) {
    return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  // A few short lines: they fit the pipe, so writing before the command reads cannot block.
  const ssize_t wrote = ::write(in[1], input.data(), input.size());
  ::close(in[1]);
  if (wrote != static_cast<ssize_t>(input.size())) {
    ::close(in[0]);
    return Status::Unavailable("cannot hand the MPS control its command");
  }
  SpawnOptions o;
  o.in_fd = in[0];
  o.search_path = false;
  o.env = Env(gpu);
  const std::vector<std::string> argv = {options_.control};
  Result<CommandResult> r = RunCommandCapture(argv, options_.timeout_ms, o, {});
  ::close(in[0]);
  if (!r.ok()) return r.status();
  if (!r->Succeeded()) return Status::Unavailable(r->Failure(argv, options_.timeout_ms));
  return r->out;
}

bool MpsDaemons::Answers(const std::string& gpu) const {
  struct stat st;
  if (::stat((Dir(gpu) + "/pipe").c_str(), &st) != 0) return false;
  return Control(gpu, "get_server_list\n").ok();
}

Status MpsDaemons::Start(const std::string& gpu, uid_t uid, gid_t gid) {
  const std::string dir = Dir(gpu);
  ceilings_.erase(gpu);  // a new daemon starts with NVIDIA's defaults
  std::error_code ec;
  fs::remove_all(dir, ec);  // a dead daemon's leftovers
  fs::create_directories(dir, ec);
  if (ec) return Status::Unavailable("cannot create " + dir + ": " + ec.message());
  // The share's user reaches its pipe folder by path, through folders the daemons' umask
  // (077) made 0700: traversable by all, listable by none (as STATE/agent is).
  for (const std::string& d : {options_.state_dir + "/mps", dir}) {
    if (::chmod(d.c_str(), 0711) != 0) {
      return Status::Unavailable("cannot make " + d + " traversable: " + std::strerror(errno));
    }
  }
  GP_RETURN_IF_ERROR(MakeOwnedDir(dir + "/pipe", uid, gid, 0700));
  GP_RETURN_IF_ERROR(MakeOwnedDir(dir + "/log", uid, gid, 0700));
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/owner", std::to_string(uid) + "\n"));
  // For a later agent that no longer runs MPS, to quit it with (LeftoverMpsControl).
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/control", options_.control + "\n"));
  SpawnOptions o;
  o.null_output = true;  // the daemon keeps what it inherits: no pipe of ours
  o.new_session = true;  // nor our process group: it outlives an agent restart
  o.search_path = false;
  o.env = Env(gpu);
  GP_ASSIGN_OR_RETURN(pid_t pid, SpawnCommand({options_.control, "-d"}, o));
  const int status = WaitWithin(pid, options_.timeout_ms);
  if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string tail = LogTail(dir + "/log");
    return Status::Unavailable(
        "the MPS control daemon of " + gpu + " did not start (" + options_.control + " -d " +
        (status < 0 ? "did not return within " + std::to_string(options_.timeout_ms) + " ms"
                    : "exited " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1)) +
        (tail.empty() ? "" : "; its log: " + tail) + ")");
  }
  if (!Answers(gpu)) {
    return Status::Unavailable("the MPS control daemon of " + gpu +
                               " started but does not answer (its log: " + LogTail(dir + "/log") +
                               ")");
  }
  return Status::Ok();
}

Status MpsDaemons::Stop(const std::string& gpu) {
  const std::string dir = Dir(gpu);
  ceilings_.erase(gpu);
  if (Answers(gpu)) {
    if (Result<std::string> q = Control(gpu, "quit\n"); !q.ok()) return q.status();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Status::Unavailable("cannot remove " + dir + ": " + ec.message());
  return Status::Ok();
}

Status MpsDaemons::ApplyCeiling(const std::string& gpu) {
  auto it = clients_.find(gpu);
  if (it == clients_.end() || it->second.empty()) return Status::Ok();
  MpsLimits top{1, 0};
  bool capped = true;  // a client without a memory cap leaves the memory ceiling alone
  for (const auto& [run, limits] : it->second) {
    top.thread_percentage = std::max(top.thread_percentage, limits.thread_percentage);
    capped = capped && limits.pinned_mib > 0;
    top.pinned_mib = std::max(top.pinned_mib, limits.pinned_mib);
  }
  if (!capped) top.pinned_mib = 0;
  if (auto was = ceilings_.find(gpu); was != ceilings_.end() && was->second == top) {
    return Status::Ok();
  }
  // The running servers (one per user at a time): the defaults reach only servers started
  // later. The device is 0, the one the daemon's CUDA_VISIBLE_DEVICES leaves it.
  GP_ASSIGN_OR_RETURN(std::string servers, Control(gpu, "get_server_list\n"));
  const std::string pct = std::to_string(top.thread_percentage);
  const std::string mib = std::to_string(top.pinned_mib) + "M";
  std::string commands = "set_default_active_thread_percentage " + pct + "\n";
  if (top.pinned_mib > 0) commands += "set_default_device_pinned_mem_limit 0 " + mib + "\n";
  for (const std::string& line : Split(servers, '\n')) {
    const std::string pid(Trim(line));
    if (pid.empty() ||
        !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    commands += "set_active_thread_percentage " + pid + " " + pct + "\n";
    if (top.pinned_mib > 0) commands += "set_device_pinned_mem_limit " + pid + " 0 " + mib + "\n";
  }
  GP_RETURN_IF_ERROR(Control(gpu, commands).status());
  ceilings_[gpu] = top;
  return Status::Ok();
}

Result<std::string> MpsDaemons::Acquire(const std::string& gpu, const RunId& run, uid_t uid,
                                        gid_t gid, const MpsLimits& limits) {
  if (!IsFolderSafe(gpu)) {
    return Status::InvalidArgument("GPU id '" + gpu + "' cannot name an MPS folder");
  }
  std::lock_guard lock(mu_);
  std::map<RunId, MpsLimits>& runs = clients_[gpu];
  const std::string dir = Dir(gpu);
  if (!Answers(gpu)) {
    if (options_.adopt_only) {
      if (runs.empty()) clients_.erase(gpu);
      return Status::Unavailable("the MPS control daemon of " + gpu +
                                 " does not run, and this agent starts none (MPS is not its mode)");
    }
    if (Status s = Start(gpu, uid, gid); !s.ok()) {
      if (runs.empty()) clients_.erase(gpu);
      return s;
    }
  } else {
    Result<std::string> owner = ReadFileToString(dir + "/owner", 64);
    const std::string was = owner.ok() ? std::string(Trim(*owner)) : "";
    if (was != std::to_string(uid) && was != "shared") {
      // A second user on this GPU: the admin allowed it (the controller placed it so).
      GP_RETURN_IF_ERROR(MakeOwnedDir(dir + "/pipe", 0, 0, 01777));
      GP_RETURN_IF_ERROR(MakeOwnedDir(dir + "/log", 0, 0, 01777));
      GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/owner", "shared\n"));
    }
  }
  const bool counted = runs.count(run) != 0;
  runs[run] = limits;
  if (Status s = ApplyCeiling(gpu); !s.ok()) {
    // Not held to its share: the run does not start as this GPU's client.
    if (!counted) runs.erase(run);
    if (runs.empty()) {
      clients_.erase(gpu);
      (void)Stop(gpu);
    }
    return Status::Unavailable("the MPS control daemon of " + gpu +
                               " did not take the share's limits: " + s.message());
  }
  return dir + "/pipe";
}

Status MpsDaemons::Release(const RunId& run) {
  std::lock_guard lock(mu_);
  for (auto it = clients_.begin(); it != clients_.end(); ++it) {
    if (it->second.erase(run) == 0) continue;
    const std::string gpu = it->first;
    if (!it->second.empty()) return ApplyCeiling(gpu);
    clients_.erase(it);
    return Stop(gpu);
  }
  return Status::Ok();
}

std::vector<std::string> MpsDaemons::StopUnused() {
  std::lock_guard lock(mu_);
  std::vector<std::string> failed;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(options_.state_dir + "/mps", ec)) {
    const std::string gpu = e.path().filename().string();
    if (clients_.count(gpu) != 0 || !IsFolderSafe(gpu)) continue;
    if (Status s = Stop(gpu); !s.ok()) failed.push_back(gpu + ": " + s.message());
  }
  return failed;
}

std::map<std::string, size_t> MpsDaemons::Clients() const {
  std::lock_guard lock(mu_);
  std::map<std::string, size_t> out;
  for (const auto& [gpu, runs] : clients_) out[gpu] = runs.size();
  return out;
}

}  // namespace gpupool::agent
