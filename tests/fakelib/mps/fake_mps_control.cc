// A stand-in for nvidia-cuda-mps-control, built by the tests, for machines without
// NVIDIA's: the same command line and environment, and a record of what it was asked.
//
//   fake_mps_control -d   start the daemon: it forks, the child (own session) writes its pid
//                         to $CUDA_MPS_PIPE_DIRECTORY/control.pid and waits for SIGTERM;
//                         the parent returns 0 once the child is ready. Refused (exit 1,
//                         as NVIDIA's) when a daemon of that folder already runs, or when
//                         FAKE_MPS_REFUSE_START is set (with FAKE_MPS_LOG_LINK=PATH it
//                         then replaces its control.log with a link to PATH).
//   fake_mps_control      read commands on stdin, one per line: quit (stops the daemon and
//                         waits for it), get_server_list (prints the pids a test wrote to
//                         $CUDA_MPS_PIPE_DIRECTORY/servers, one a line: the stand-in has no
//                         server of its own), the four limit setters checked for NVIDIA's
//                         form (set_[default_]active_thread_percentage [PID] 1-100,
//                         set_[default_]device_pinned_mem_limit [PID] DEV <n>M|G; a PID
//                         must be a listed server) and recorded as "command ..." or, when
//                         malformed, "invalid ..." with an error on stderr; any other is
//                         recorded only. Exit 1 with NVIDIA's message when no daemon of
//                         that folder runs; with FAKE_MPS_REFUSE_LIMITS set, exit 1 at the
//                         first limit setter.
//
// Every start, command and stop is appended to $CUDA_MPS_LOG_DIRECTORY/control.log, with
// the uid and CUDA_VISIBLE_DEVICES of the daemon's start, so tests can read what the agent
// did. No C++ library beyond libc and libstdc++.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string Env(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

const std::string kPipe = Env("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps");
const std::string kLog = Env("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps");

void Record(const std::string& line) {
  std::ofstream(kLog + "/control.log", std::ios::app) << line << "\n";
}

pid_t DaemonPid() {
  std::ifstream in(kPipe + "/control.pid");
  long pid = 0;  // NOLINT(google-runtime-int)
  if (!(in >> pid) || pid <= 0) return 0;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 ? static_cast<pid_t>(pid) : 0;
}

volatile sig_atomic_t g_stop = 0;
void OnTerm(int) { g_stop = 1; }

int StartDaemon() {
  if (DaemonPid() != 0) {
    std::cerr << "An instance of this daemon is already running\n";
    return 1;
  }
  if (!Env("FAKE_MPS_REFUSE_START", "").empty()) {
    Record("refused start (FAKE_MPS_REFUSE_START)");
    // The share's user, who owns the log folder, swaps the log for a link to a file of
    // root's before the agent reads its tail (FAKE_MPS_LOG_LINK=PATH).
    if (const std::string link = Env("FAKE_MPS_LOG_LINK", ""); !link.empty()) {
      const std::string log = kLog + "/control.log";
      if (::unlink(log.c_str()) != 0 || ::symlink(link.c_str(), log.c_str()) != 0) return 2;
    }
    std::cerr << "fake: refusing to start\n";
    return 1;
  }
  int ready[2];
  if (::pipe(ready) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child > 0) {
    ::close(ready[1]);
    char c = 0;
    const bool ok = ::read(ready[0], &c, 1) == 1;
    return ok ? 0 : 1;
  }
  ::close(ready[0]);
  ::setsid();
  struct sigaction sa {};
  sa.sa_handler = OnTerm;
  ::sigaction(SIGTERM, &sa, nullptr);
  std::ofstream(kPipe + "/control.pid") << ::getpid() << "\n";
  Record("start uid=" + std::to_string(::getuid()) + " CUDA_VISIBLE_DEVICES=" +
         Env("CUDA_VISIBLE_DEVICES", "(unset)") + " pid=" + std::to_string(::getpid()));
  const int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
  }
  (void)!::write(ready[1], "r", 1);
  ::close(ready[1]);
  sigset_t none;
  sigemptyset(&none);
  while (g_stop == 0) ::sigsuspend(&none);
  ::unlink((kPipe + "/control.pid").c_str());
  Record("stopped pid=" + std::to_string(::getpid()));
  return 0;
}

std::set<std::string> Servers() {
  std::ifstream in(kPipe + "/servers");
  std::set<std::string> out;
  std::string pid;
  while (in >> pid) out.insert(pid);
  return out;
}

bool IsCount(const std::string& s, int64_t lo, int64_t hi) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  const int64_t v = std::stoll(s);
  return v >= lo && v <= hi;
}

// Whether `line`, a limit setter, has NVIDIA's form; true for any other command.
bool WellFormed(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string word; in >> word;) w.push_back(word);
  const bool per_server =
      w[0] == "set_active_thread_percentage" || w[0] == "set_device_pinned_mem_limit";
  if (per_server && (w.size() < 2 || Servers().count(w[1]) == 0)) return false;
  const size_t at = per_server ? 2 : 1;  // the first word after the command (and PID)
  if (w[0] == "set_default_active_thread_percentage" || w[0] == "set_active_thread_percentage") {
    return w.size() == at + 1 && IsCount(w[at], 1, 100);
  }
  if (w[0] == "set_default_device_pinned_mem_limit" || w[0] == "set_device_pinned_mem_limit") {
    if (w.size() != at + 2 || !IsCount(w[at], 0, 63)) return false;
    const std::string& v = w[at + 1];
    return v.size() > 1 && (v.back() == 'M' || v.back() == 'G') &&
           IsCount(v.substr(0, v.size() - 1), 1, int64_t{1} << 30);
  }
  return true;
}

int Commands() {
  const pid_t daemon = DaemonPid();
  if (daemon == 0) {
    std::cerr << "Cannot find MPS control daemon process\n";
    return 1;
  }
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (!WellFormed(line)) {
      Record("invalid " + line);
      std::cerr << "Invalid command: " << line << "\n";
      continue;
    }
    if (line.rfind("set_", 0) == 0 && !Env("FAKE_MPS_REFUSE_LIMITS", "").empty()) {
      Record("refused " + line);
      std::cerr << "fake: refusing " << line << "\n";
      return 1;
    }
    Record("command " + line);
    if (line == "get_server_list") {
      for (const std::string& pid : Servers()) std::cout << pid << "\n";
      continue;
    }
    if (line == "quit") {
      // NVIDIA's returns once the daemon took the command; this one waits (up to 5 s)
      // until it is gone, so a test reading the log sees the stop.
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, daemon, 0));
      ::kill(daemon, SIGTERM);
      if (fd >= 0) {
        pollfd p{fd, POLLIN, 0};
        (void)::poll(&p, 1, 5000);
        ::close(fd);
      }
      return 0;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "-d") == 0) return StartDaemon();
  if (argc > 1) {
    std::cerr << "fake_mps_control: unknown option " << argv[1] << "\n";
    return 2;
  }
  return Commands();
}
