#include "agent/job_process.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "common/strings.h"

namespace gpupool::agent {
namespace {

// What the child reports through the pipe when it cannot exec.
enum Stage : int {
  kStageSetsid = 1,
  kStageIo,
  kStageGroups,
  kStageGid,
  kStageUid,
  kStageChdir,
  kStageExec,
  kStageCgroup,
};

struct ChildError {
  int stage;
  int err;
};

// The child's functions never return, so AddressSanitizer would leave the redzones of
// their frames poisoned on a stack that is unmapped and whose addresses are reused: they
// are not instrumented.
#define GP_CHILD_CODE __attribute__((no_sanitize_address))

[[noreturn]] GP_CHILD_CODE void ChildFail(int fd, int stage, int err) {
  ChildError e{stage, err};
  (void)!::write(fd, &e, sizeof e);
  ::_exit(127);
}

std::string DescribeFailure(const JobProcessPlan& plan, const ChildError& e) {
  const std::string cmd = plan.argv.empty() ? std::string() : plan.argv[0];
  const std::string who = "user '" + plan.user + "' (uid " + std::to_string(plan.uid) + ")";
  switch (e.stage) {
    case kStageChdir:
      if (e.err == ENOENT) return "working directory '" + plan.workdir + "' does not exist";
      if (e.err == ENOTDIR) return "working directory '" + plan.workdir + "' is not a directory";
      if (e.err == EACCES) {
        return "working directory '" + plan.workdir + "' is not accessible to " + who;
      }
      return "cannot enter working directory '" + plan.workdir + "': " + std::strerror(e.err);
    case kStageExec:
      if (e.err == ENOENT || e.err == ENOTDIR) return "command '" + cmd + "' not found";
      if (e.err == EACCES) return "command '" + cmd + "' is not executable by " + who;
      if (e.err == ENOEXEC) {
        return "command '" + cmd + "' is not an executable file (a script needs a #! line)";
      }
      return "cannot run command '" + cmd + "': " + std::strerror(e.err);
    case kStageGroups:
    case kStageGid:
    case kStageUid:
      return "cannot switch to " + who + ": " + std::strerror(e.err);
    case kStageCgroup:
      return "cannot move the job into its cgroups, so it would reach GPUs it was not given; "
             "not started";
    case kStageIo:
      return std::string("cannot connect the job's standard streams to its log files: ") +
             std::strerror(e.err);
    default:
      return std::string("cannot start a new session for the job: ") + std::strerror(e.err);
  }
}

// What the child gets: pointers into the parent's memory, which it shares until exec.
struct ChildArgs {
  const JobProcessPlan* plan;
  char* const* argv;
  char* const* envp;
  int fd;  // the write end of the error pipe
};

// The child, on a stack of its own in the shim's memory (CLONE_VM | CLONE_VFORK): the
// shim is suspended until it execs or exits. So nothing here allocates, takes a lock or
// returns: system calls only (raw ones for the user switch, whose glibc wrappers would
// look at other threads), then execve or ChildFail.
GP_CHILD_CODE int ChildMain(void* p) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(p);
  const JobProcessPlan& plan = *a.plan;
  const int fd = a.fd;
  // The shim blocks and ignores signals for itself; the job starts from defaults.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::setsid() < 0) ChildFail(fd, kStageSetsid, errno);
  // Limits are best effort (a failed move leaves the job unconfined), except where
  // device isolation is required: that fails closed.
  if (plan.cgroup != nullptr && !plan.cgroup->JoinFromChild() && plan.require_cgroup) {
    ChildFail(fd, kStageCgroup, EPERM);
  }
  // The daemons run with umask 077 for their own files; a job starts from the usual 022.
  ::umask(022);
  if (::dup2(plan.stdin_fd, 0) < 0 || ::dup2(plan.stdout_fd, 1) < 0 ||
      ::dup2(plan.stderr_fd, 2) < 0) {
    ChildFail(fd, kStageIo, errno);
  }
  // An interactive job's terminal: the new session's controlling terminal, so that ^C
  // and a hangup reach its foreground process group.
  if (plan.controlling_tty && ::ioctl(0, TIOCSCTTY, 0) < 0) ChildFail(fd, kStageIo, errno);
  if (plan.switch_user) {
    if (::syscall(SYS_setgroups, plan.groups.size(), plan.groups.data()) != 0) {
      ChildFail(fd, kStageGroups, errno);
    }
    if (::syscall(SYS_setresgid, plan.gid, plan.gid, plan.gid) != 0) {
      ChildFail(fd, kStageGid, errno);
    }
    if (::syscall(SYS_setresuid, plan.uid, plan.uid, plan.uid) != 0) {
      ChildFail(fd, kStageUid, errno);
    }
  }
  if (::chdir(plan.workdir.c_str()) != 0) ChildFail(fd, kStageChdir, errno);
  int err = ENOENT;
  bool denied = false;
  for (const std::string& c : plan.candidates) {
    ::execve(c.c_str(), a.argv, a.envp);
    // Like a shell: keep searching past missing entries, remember a permission problem.
    if (errno == EACCES) {
      denied = true;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      err = errno;
      break;
    }
  }
  ChildFail(fd, kStageExec, denied && err == ENOENT ? EACCES : err);
}

// The child's stack. Only the pages it touches are ever allocated.
constexpr size_t kChildStackBytes = 256 << 10;

}  // namespace

std::vector<std::string> CommandCandidates(const std::string& argv0, const std::string& path) {
  if (argv0.find('/') != std::string::npos) return {argv0};
  std::vector<std::string> out;
  for (const std::string& dir : Split(path, ':')) {
    out.push_back((dir.empty() ? std::string(".") : dir) + "/" + argv0);
  }
  return out;
}

Result<pid_t> StartJobProcess(const JobProcessPlan& plan) {
  if (plan.argv.empty()) return Status::InvalidArgument("the command is empty");
  // Everything the child needs is built before it starts.
  std::vector<char*> argv;
  for (const std::string& a : plan.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const std::string& e : plan.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    return Status::Unavailable(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  // Not fork: the child shares the shim's memory until exec (as posix_spawn does), so
  // neither the page tables are copied nor written pages are faulted in twice.
  void* stack = ::mmap(nullptr, kChildStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) {
    const int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Status::Unavailable(std::string("cannot start the job's process: ") +
                               std::strerror(err));
  }
  ChildArgs args{&plan, argv.data(), envp.data(), pipefd[1]};
  const pid_t pid = ::clone(ChildMain, static_cast<char*>(stack) + kChildStackBytes,
                            CLONE_VM | CLONE_VFORK | SIGCHLD, &args);
  const int clone_err = errno;
  ::munmap(stack, kChildStackBytes);
  if (pid < 0) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Status::Unavailable(std::string("cannot start the job's process: ") +
                               std::strerror(clone_err));
  }
  ::close(pipefd[1]);
  ChildError e{};
  ssize_t n;
  do {
    n = ::read(pipefd[0], &e, sizeof e);
  } while (n < 0 && errno == EINTR);
  ::close(pipefd[0]);
  if (n == 0) return pid;  // exec succeeded and closed the pipe
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof e)) {
    return Status::Internal("the job's process failed before exec without saying why");
  }
  return Status::FailedPrecondition(DescribeFailure(plan, e));
}

}  // namespace gpupool::agent
