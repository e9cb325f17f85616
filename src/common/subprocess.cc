#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>

#include "common/strings.h"

namespace gpupool {
namespace {

constexpr size_t kMaxCapture = size_t{16} << 20;

std::string ErrnoText(int err) { return std::strerror(err); }

int64_t MonoMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The child side of a failed ForkAs: a line on standard error (the capture pipe when
// there is one) and exit 127, with async-signal-safe calls only.
[[noreturn]] void ChildFail(const char* what, int err) {
  char buf[192];
  size_t n = 0;
  auto put = [&](const char* s) {
    while (*s != '\0' && n + 16 < sizeof buf) buf[n++] = *s++;
  };
  put("cannot start the command as its user: ");
  put(what);
  put(" failed, errno ");
  char digits[12];
  int k = 0;
  auto e = static_cast<unsigned>(err);
  do {
    digits[k++] = static_cast<char>('0' + e % 10);
    e /= 10;
  } while (e != 0 && k < 11);
  while (k > 0) buf[n++] = digits[--k];
  buf[n++] = '\n';
  (void)!::write(2, buf, n);
  ::_exit(127);
}

void CloseRange(unsigned first, unsigned last) {
  if (first > last) return;
  if (::syscall(SYS_close_range, first, last, 0) != 0) {
    for (unsigned fd = first; fd <= std::min(last, 65535U); ++fd) ::close(static_cast<int>(fd));
  }
}

// SpawnCommand with a user switch: fork, then only raw system calls until execve. The
// parent may be multi-threaded, so nothing here allocates or takes a lock in the child.
Result<pid_t> ForkAs(const std::vector<std::string>& argv, const SpawnOptions& o) {
  const SpawnOptions::RunAs& as = *o.run_as;
  if (argv[0].empty() || argv[0].front() != '/') {
    return Status::InvalidArgument("cannot run '" + argv[0] +
                                   "' as another user: give its absolute path");
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Not the server's environment: once the user owns the process, its /proc/PID/environ
  // is theirs to read, and the server's variables may hold secrets.
  static char kPath[] = "PATH=/usr/local/bin:/usr/bin:/bin";
  static char kLang[] = "LC_ALL=C";
  char* env[] = {kPath, kLang, nullptr};
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : o.blocked) sigaddset(&mask, sig);
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return Status::Unavailable("cannot open /dev/null: " + ErrnoText(errno));
  const int out = o.null_output ? devnull : o.out_fd;
  const int err = o.null_output ? devnull : o.err_fd;
  const gid_t* groups = as.groups.data();
  const size_t ngroups = as.groups.size();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    ::close(devnull);
    return Status::Unavailable("cannot start " + argv[0] + ": fork: " + ErrnoText(e));
  }
  if (pid == 0) {
    for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE}) {
      struct sigaction sa {};
      sa.sa_handler = SIG_DFL;
      ::sigaction(sig, &sa, nullptr);
    }
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    if (o.new_session && ::setsid() < 0) ChildFail("setsid", errno);
    if (o.pass_fd >= 0 && o.pass_fd_as >= 0 && ::dup2(o.pass_fd, o.pass_fd_as) < 0) {
      ChildFail("dup2", errno);
    }
    if (::dup2(devnull, 0) < 0 || (out >= 0 && ::dup2(out, 1) < 0) ||
        (err >= 0 && ::dup2(err, 2) < 0)) {
      ChildFail("dup2", errno);
    }
    // Nothing of the server's (sockets, the store) may reach a process the user owns.
    const int keep = o.pass_fd >= 0 ? o.pass_fd_as : -1;
    if (keep >= 3) {
      CloseRange(3, static_cast<unsigned>(keep) - 1);
      CloseRange(static_cast<unsigned>(keep) + 1, ~0U);
    } else {
      CloseRange(3, ~0U);
    }
    // Raw calls: glibc's wrappers would try to signal the parent's other threads.
    if (::syscall(SYS_setgroups, ngroups, groups) != 0) ChildFail("setgroups", errno);
    if (::syscall(SYS_setresgid, as.gid, as.gid, as.gid) != 0) ChildFail("setresgid", errno);
    if (::syscall(SYS_setresuid, as.uid, as.uid, as.uid) != 0) ChildFail("setresuid", errno);
    ::execve(args[0], args.data(), env);
    ChildFail("execve", errno);
  }
  ::close(devnull);
  return pid;
}

}  // namespace

Result<pid_t> SpawnCommand(const std::vector<std::string>& argv, const SpawnOptions& o) {
  if (argv.empty()) return Status::InvalidArgument("no command to run");
  if (o.run_as && !o.more_fds.empty()) {
    return Status::InvalidArgument("more_fds cannot be passed to a command run as another user");
  }
  if (o.run_as && (o.in_fd >= 0 || o.env)) {
    return Status::InvalidArgument(
        "in_fd and env cannot be given to a command run as another user");
  }
  if (o.run_as) return ForkAs(argv, o);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The passed descriptor first (dup2 onto itself clears close-on-exec), then /dev/null
  // on 0-2, so one that got a low number is moved before it would be overwritten.
  if (o.pass_fd >= 0 && o.pass_fd_as >= 0) {
    posix_spawn_file_actions_adddup2(&fa, o.pass_fd, o.pass_fd_as);
  }
  for (const auto& [fd, as] : o.more_fds) posix_spawn_file_actions_adddup2(&fa, fd, as);
  if (o.in_fd >= 0) {
    posix_spawn_file_actions_adddup2(&fa, o.in_fd, 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", o.null_output ? O_RDWR : O_RDONLY, 0);
  }
  if (o.null_output) {
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  } else {
    if (o.out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.out_fd, 1);
    if (o.err_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.err_fd, 2);
  }
  if (o.close_from >= 0) posix_spawn_file_actions_addclosefrom_np(&fa, o.close_from);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t mask;
  sigemptyset(&mask);
  for (int sig : o.blocked) sigaddset(&mask, sig);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &mask);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;  // NOLINT(google-runtime-int)
  if (o.new_session) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (o.env) {
    envp.reserve(o.env->size() + 1);
    for (const std::string& e : *o.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  char** const env = o.env ? envp.data() : environ;
  pid_t pid = 0;
  const int rc = o.search_path ? ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), env)
                               : ::posix_spawn(&pid, args[0], &fa, &attr, args.data(), env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status::Unavailable("cannot run " + argv[0] + ": " + std::strerror(rc));
  return pid;
}

Result<pid_t> SpawnCommand(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  SpawnOptions o;
  o.out_fd = out_fd;
  o.err_fd = err_fd;
  return SpawnCommand(argv, o);
}

bool CommandResult::Succeeded() const {
  return !timed_out && !cancelled && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

std::string CommandResult::Failure(const std::vector<std::string>& argv, int timeout_ms) const {
  const std::string what =
      (argv.empty() ? std::string("command") : argv[0]) + (argv.size() > 1 ? " " + argv[1] : "");
  if (timed_out) {
    return what + " did not finish within " + std::to_string(timeout_ms) + " ms and was killed";
  }
  if (cancelled) return what + " was stopped before it finished";
  std::vector<std::string> lines = Split(std::string(Trim(err.empty() ? out : err)), '\n');
  const std::string last = lines.empty() ? std::string() : std::string(Trim(lines.back()));
  return what + " failed" + (last.empty() ? "" : ": " + last);
}

Result<CommandResult> RunCommandCapture(const std::vector<std::string>& argv, int timeout_ms) {
  return RunCommandCapture(argv, timeout_ms, SpawnOptions{}, {});
}

Result<CommandResult> RunCommandCapture(const std::vector<std::string>& argv, int timeout_ms,
                                        const SpawnOptions& options,
                                        const std::function<bool()>& cancelled) {
  if (argv.empty()) return Status::InvalidArgument("no command to run");
  int out[2];
  int err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return Status::Unavailable("pipe: " + std::string(std::strerror(errno)));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return Status::Unavailable("pipe: " + std::string(std::strerror(errno)));
  }
  SpawnOptions o = options;
  o.null_output = false;
  o.out_fd = out[1];
  o.err_fd = err[1];
  Result<pid_t> spawned = SpawnCommand(argv, o);
  ::close(out[1]);
  ::close(err[1]);
  if (!spawned.ok()) {
    ::close(out[0]);
    ::close(err[0]);
    return spawned.status();
  }
  const pid_t pid = *spawned;
  CommandResult r;
  std::array<pollfd, 2> fds = {pollfd{out[0], POLLIN, 0}, pollfd{err[0], POLLIN, 0}};
  int open_fds = 2;
  std::array<char, 4096> buf{};
  const int64_t deadline = MonoMillis() + timeout_ms;
  while (open_fds > 0) {
    const int64_t left = deadline - MonoMillis();
    if (left <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    if (cancelled && cancelled()) {
      r.cancelled = true;
      ::kill(pid, SIGKILL);
      break;
    }
    const int n = ::poll(fds.data(), fds.size(),
                         static_cast<int>(std::min<int64_t>(left, cancelled ? 50 : 1000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (pollfd& p : fds) {
      if (p.fd < 0 || p.revents == 0) continue;
      const ssize_t got = ::read(p.fd, buf.data(), buf.size());
      if (got > 0) {
        std::string& dst = p.fd == out[0] ? r.out : r.err;
        if (dst.size() < kMaxCapture) dst.append(buf.data(), static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(p.fd);
        p.fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) ::close(p.fd);
  }
  while (::waitpid(pid, &r.wait_status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

}  // namespace gpupool
