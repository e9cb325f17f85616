#include "agent/launcher_test_util.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
  s.job_id = job_id;
  s.attempt = 1;
  s.user = "tester";
  s.uid = ::geteuid();
  s.gid = ::getegid();
  s.argv = std::move(argv);
  s.workdir = "/";
  s.grace_s = 1;
  return s;
}

std::optional<JobEvent> WaitForEvent(Launcher& launcher, int64_t job_id, int timeout_ms,
                                     std::vector<JobEvent>* others) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  static thread_local std::vector<JobEvent> backlog;
  while (true) {
    for (size_t i = 0; i < backlog.size(); ++i) {
      if (backlog[i].job_id == job_id) {
        JobEvent e = backlog[i];
        backlog.erase(backlog.begin() + static_cast<std::ptrdiff_t>(i));
        return e;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    for (JobEvent& e : launcher.Wait(static_cast<int>(left.count()))) {
      if (others != nullptr && e.job_id != job_id) {
        others->push_back(e);
      } else {
        backlog.push_back(std::move(e));
      }
    }
  }
}

std::string ReadWholeFile(const std::string& path) { return ReadFileToString(path).value_or(""); }

bool WaitForFileContaining(const std::string& path, const std::string& needle, int timeout_ms) {
  for (int waited = 0; waited <= timeout_ms; waited += 10) {
    if (ReadWholeFile(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
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
  for (const auto& entry : std::filesystem::directory_iterator(state_dir + "/jobs", ec)) {
    Result<ShimRecord> rec = ReadShimRecord(entry.path().string());
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

}  // namespace gpupool::agent::testing
