#include "agent/launcher_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "agent/cgroup.h"
#include "agent/job_files.h"
#include "agent/proc_util.h"
#include "common/file_util.h"

namespace gpupool::agent::testing {

ScratchDir::ScratchDir() {
  char tmpl[] = "/tmp/gpupool-launcher-XXXXXX";
  if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

LauncherOptions TestOptions(const std::string& state_dir) {
  LauncherOptions o;
  o.state_dir = state_dir;
  o.shim_command = {GPUPOOL_TEST_SHIM};
  o.start_timeout_ms = 10'000;
  return o;
}

LaunchSpec TestSpec(int64_t job_id, std::vector<std::string> argv) {
  LaunchSpec s;
  s.id = TaskRun(job_id);
  s.user = "tester";
  s.uid = ::geteuid();
  s.gid = ::getegid();
  s.argv = std::move(argv);
  s.workdir = "/";
  s.grace_s = 1;
  return s;
}

std::optional<JobEvent> WaitForEvent(Launcher& launcher, const RunId& id, int timeout_ms,
                                     std::vector<JobEvent>* others) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  static thread_local std::vector<JobEvent> backlog;
  while (true) {
    for (size_t i = 0; i < backlog.size(); ++i) {
      if (backlog[i].id == id) {
        JobEvent e = backlog[i];
        backlog.erase(backlog.begin() + static_cast<std::ptrdiff_t>(i));
        return e;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    for (JobEvent& e : launcher.Wait(static_cast<int>(left.count()))) {
      if (others != nullptr && e.id != id) {
        others->push_back(e);
      } else {
        backlog.push_back(std::move(e));
      }
    }
  }
}

std::string ReadWholeFile(const std::string& path) { return ReadFileToString(path).value_or(""); }

bool PollUntil(const std::function<bool()>& done, int timeout_ms, int interval_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
}

bool WaitForFileContaining(const std::string& path, const std::string& needle, int timeout_ms) {
  return PollUntil([&] { return ReadWholeFile(path).find(needle) != std::string::npos; },
                   timeout_ms);
}

bool WaitForExit(int pid, int timeout_ms) {
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return errno == ESRCH;  // gone (and reaped) already
  struct pollfd p = {static_cast<int>(fd), POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, timeout_ms);  // readable once the process has ended
  } while (n < 0 && errno == EINTR);
  ::close(static_cast<int>(fd));
  return n > 0;
}

bool ProcessAlive(int pid) {
  // A zombie counts as gone.
  std::string stat = ReadWholeFile("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

void KillLeftoverJobs(const std::string& state_dir) {
  std::error_code ec;
  // Runs of both layouts: jobs/<job>/<run>/ and jobs/<key>/.
  for (auto it = std::filesystem::recursive_directory_iterator(state_dir + "/jobs", ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it.depth() >= 1) it.disable_recursion_pending();
    if (!it->is_directory(ec)) continue;
    Result<ShimRecord> rec = ReadShimRecord(it->path().string());
    if (!rec.ok() || rec->boot_id != BootId()) continue;
    if (ProcessStartTicks(rec->pid).value_or(0) == rec->start_ticks) {
      ::kill(rec->pid, SIGKILL);
      ::waitpid(rec->pid, nullptr, 0);  // ECHILD when it is not ours: fine
    }
    if (rec->job_pid > 0 && ProcessStartTicks(rec->job_pid).value_or(0) == rec->job_start_ticks) {
      ::kill(-rec->job_pid, SIGKILL);
    }
    (void)RemoveCgroupDirs(rec->cgroup_dirs, 2000);
  }
}

Result<int> StartShimIn(const std::string& job_dir) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Status::Unavailable("pipe");
  const pid_t pid = ::fork();
  if (pid < 0) return Status::Unavailable("fork");
  if (pid == 0) {
    ::setsid();
    ::dup2(ready[1], 3);  // dup2 clears close-on-exec on the copy
    ::execl(GPUPOOL_TEST_SHIM, GPUPOOL_TEST_SHIM, "--job-dir", job_dir.c_str(), "--ready-fd", "3",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(ready[1]);
  std::string report;
  char buf[256];
  ssize_t n;
  while ((n = ::read(ready[0], buf, sizeof buf)) > 0) report.append(buf, static_cast<size_t>(n));
  ::close(ready[0]);
  if (report.rfind("started", 0) != 0) {
    return Status::Internal("the shim in " + job_dir + " reported '" + report + "'");
  }
  return static_cast<int>(pid);
}

}  // namespace gpupool::agent::testing
