#include "agent/job_process.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
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

[[noreturn]] void ChildFail(int fd, int stage, int err) {
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
  // Everything the child needs is built before fork.
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
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Status::Unavailable(std::string("cannot fork the job's process: ") + std::strerror(err));
  }
  if (pid == 0) {
    const int fd = pipefd[1];
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
      if (::setgroups(plan.groups.size(), plan.groups.data()) != 0) {
        ChildFail(fd, kStageGroups, errno);
      }
      if (::setresgid(plan.gid, plan.gid, plan.gid) != 0) ChildFail(fd, kStageGid, errno);
      if (::setresuid(plan.uid, plan.uid, plan.uid) != 0) ChildFail(fd, kStageUid, errno);
    }
    if (::chdir(plan.workdir.c_str()) != 0) ChildFail(fd, kStageChdir, errno);
    int err = ENOENT;
    bool denied = false;
    for (const std::string& c : plan.candidates) {
      ::execve(c.c_str(), argv.data(), envp.data());
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
