#include "agent/shim.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include "agent/cgroup.h"
#include "agent/job_env.h"
#include "agent/job_files.h"
#include "agent/job_process.h"
#include "agent/proc_util.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace {

int64_t WallMicros() {
  struct timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

int64_t MonoMicros() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

// The shim's own diagnostics go to its stderr, which is DIR/shim.log.
void ShimLog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void ShimLog(const char* fmt, ...) {
  char when[32];
  time_t now = ::time(nullptr);
  struct tm tm;
  ::gmtime_r(&now, &tm);
  ::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  std::fprintf(stderr, "%s gpupool-shim[%d]: ", when, static_cast<int>(::getpid()));
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::fflush(stderr);
}

sigset_t ShimSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
  return set;
}

class Shim {
 public:
  explicit Shim(ShimArgs args) : args_(std::move(args)) {}
  int Run();

 private:
  Status Prepare();
  Status StartJob();
  void Supervise();
  bool ReapChildren();  // true once the job's main process ended
  void BeginStop(bool cancel);
  void Report(const std::string& line);
  int Finish();
  std::string ExitReason() const;

  ShimArgs args_;
  ShimConfig config_;
  ShimRecord record_;
  FinalStatus final_;
  std::unique_ptr<JobCgroup> cgroup_;
  JobProcessPlan plan_;
  int devnull_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  pid_t job_pid_ = 0;
  bool stopping_ = false;
  bool killed_ = false;
  int64_t kill_at_mono_ = 0;
};

void Shim::Report(const std::string& line) {
  if (args_.ready_fd < 0) return;
  std::string msg = line + "\n";
  (void)!::write(args_.ready_fd, msg.data(), msg.size());
  ::close(args_.ready_fd);
  args_.ready_fd = -1;
}

Result<int> OpenLog(const std::string& path, const LaunchSpec& spec, bool chown_to_user) {
  // The job directory belongs to root, so nobody can plant a link here; O_NOFOLLOW is a
  // second guard.
  int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return Status::Unavailable("cannot create log file '" + path + "': " + std::strerror(errno));
  }
  if ((chown_to_user && ::fchown(fd, spec.uid, spec.gid) != 0) || ::fchmod(fd, 0600) != 0) {
    int err = errno;
    ::close(fd);
    return Status::Unavailable("cannot give log file '" + path + "' to user '" + spec.user +
                               "': " + std::strerror(err));
  }
  return fd;
}

Status Shim::Prepare() {
  const LaunchSpec& spec = config_.spec;
  const bool root = ::geteuid() == 0;
  if (!root && spec.uid != ::geteuid()) {
    return Status::PermissionDenied("the agent runs as uid " + std::to_string(::geteuid()) +
                                    " and cannot start jobs as user '" + spec.user + "' (uid " +
                                    std::to_string(spec.uid) + "); run the agent as root");
  }
  LoginDefaults defaults;
  plan_.switch_user = root;
  plan_.uid = spec.uid;
  plan_.gid = spec.gid;
  plan_.user = spec.user;
  plan_.groups = {spec.gid};
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(spec.uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    if (pw.pw_dir != nullptr && pw.pw_dir[0] != '\0') defaults.home = pw.pw_dir;
    if (pw.pw_shell != nullptr && pw.pw_shell[0] != '\0') defaults.shell = pw.pw_shell;
    int n = 64;
    std::vector<gid_t> groups(static_cast<size_t>(n));
    if (::getgrouplist(pw.pw_name, spec.gid, groups.data(), &n) < 0 && n > 64) {
      groups.resize(static_cast<size_t>(n));
      ::getgrouplist(pw.pw_name, spec.gid, groups.data(), &n);
    }
    groups.resize(static_cast<size_t>(std::max(n, 0)));
    if (!groups.empty()) plan_.groups = groups;
  } else {
    ShimLog("uid %u has no passwd entry; HOME=/ and only group %u", spec.uid, spec.gid);
  }

  std::map<std::string, std::string> env = BuildJobEnvironment(spec, defaults);
  plan_.env = EnvironmentStrings(env);
  plan_.argv = spec.argv;
  plan_.candidates = CommandCandidates(spec.argv[0], env["PATH"]);
  plan_.workdir = spec.workdir.empty() ? defaults.home : spec.workdir;

  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_ < 0)
    return Status::Unavailable("cannot open /dev/null: " + std::string(std::strerror(errno)));
  GP_ASSIGN_OR_RETURN(stdout_fd_, OpenLog(args_.job_dir + "/" + kStdoutFile, spec, root));
  GP_ASSIGN_OR_RETURN(stderr_fd_, OpenLog(args_.job_dir + "/" + kStderrFile, spec, root));
  plan_.stdin_fd = devnull_;
  plan_.stdout_fd = stdout_fd_;
  plan_.stderr_fd = stderr_fd_;

  CgroupRequest req;
  req.job_id = spec.job_id;
  req.attempt = spec.attempt;
  req.deny_device_nodes = spec.denied_device_nodes;
  req.cpu_milli = spec.cpu_milli;
  req.memory_bytes = spec.memory_bytes;
  req.instance = std::to_string(::getpid());
  cgroup_ = JobCgroup::Create(config_.cgroup_root, req);
  final_.isolation = cgroup_->note();
  record_.isolation = cgroup_->note();
  record_.cgroup_dirs = cgroup_->dirs();
  ShimLog("isolation: %s", cgroup_->note().c_str());
  plan_.cgroup = cgroup_.get();
  return Status::Ok();
}

Status Shim::StartJob() {
  GP_ASSIGN_OR_RETURN(job_pid_, StartJobProcess(plan_));
  final_.started = true;
  final_.start_time_us = WallMicros();
  record_.job_pid = job_pid_;
  record_.job_start_ticks = ProcessStartTicks(job_pid_).value_or(0);
  record_.start_time_us = final_.start_time_us;
  Status st = WriteFileDurably(args_.job_dir + "/" + kShimFile, ShimRecordToJson(record_), 0600,
                               /*sync=*/false);
  if (!st.ok()) ShimLog("%s", st.message().c_str());  // the job runs; Adopt copes
  ShimLog("started job %lld attempt %d as pid %d", static_cast<long long>(config_.spec.job_id),
          config_.spec.attempt, static_cast<int>(job_pid_));
  return Status::Ok();
}

void Shim::BeginStop(bool cancel) {
  if (stopping_) return;
  stopping_ = true;
  if (cancel) {
    final_.cancelled = true;
  } else {
    final_.timed_out = true;
  }
  ShimLog("%s: SIGTERM to process group %d", cancel ? "cancel" : "time limit",
          static_cast<int>(job_pid_));
  ::kill(-job_pid_, SIGTERM);
  kill_at_mono_ = MonoMicros() + config_.spec.grace_s * 1'000'000;
}

void Shim::Supervise() {
  const sigset_t set = ShimSignals();
  const int64_t start_mono = MonoMicros();
  const int64_t limit_at =
      config_.spec.time_limit_s > 0 ? start_mono + config_.spec.time_limit_s * 1'000'000 : 0;
  while (true) {
    const int64_t now = MonoMicros();
    if (limit_at != 0 && now >= limit_at && !stopping_) BeginStop(/*cancel=*/false);
    if (stopping_ && !killed_ && now >= kill_at_mono_) {
      ShimLog("grace period over: SIGKILL to process group %d", static_cast<int>(job_pid_));
      ::kill(-job_pid_, SIGKILL);
      killed_ = true;
    }
    int64_t next = now + 3'600'000'000LL;
    if (limit_at != 0 && !stopping_) next = std::min(next, limit_at);
    if (stopping_ && !killed_) next = std::min(next, kill_at_mono_);
    const int64_t wait_us = std::max<int64_t>(next - now, 1000);
    struct timespec ts = {static_cast<time_t>(wait_us / 1'000'000),
                          static_cast<long>((wait_us % 1'000'000) * 1000)};
    siginfo_t info;
    const int sig = ::sigtimedwait(&set, &info, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      BeginStop(/*cancel=*/true);
    } else if (sig == SIGCHLD && ReapChildren()) {
      return;
    }
  }
}

bool Shim::ReapChildren() {
  while (true) {
    // Look without reaping first: while the main process is a zombie its pid cannot be
    // reused, so killing its process group below cannot hit a stranger.
    siginfo_t child{};
    if (::waitid(P_ALL, 0, &child, WEXITED | WNOHANG | WNOWAIT) != 0 || child.si_pid == 0) {
      return false;
    }
    if (child.si_pid != job_pid_) {
      // An orphaned descendant of the job (we are its subreaper) ended.
      ::waitpid(child.si_pid, nullptr, WNOHANG);
      continue;
    }
    ::kill(-job_pid_, SIGKILL);  // stragglers left in the job's process group
    int status = 0;
    while (::waitpid(job_pid_, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) final_.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) final_.signal = WTERMSIG(status);
    final_.end_time_us = WallMicros();
    return true;
  }
}

std::string Shim::ExitReason() const {
  const int64_t grace = config_.spec.grace_s;
  std::string how;
  if (final_.signal) {
    how = "ended by " + SignalName(*final_.signal);
  } else if (final_.exit_code) {
    how = "exited with code " + std::to_string(*final_.exit_code);
  }
  std::string why;
  if (final_.timed_out) {
    why = "time limit of " + std::to_string(config_.spec.time_limit_s) + " s reached";
  } else if (final_.cancelled) {
    why = "cancelled";
  }
  if (!why.empty()) {
    if (killed_) why += "; SIGKILL after the grace period of " + std::to_string(grace) + " s";
    return why + " (" + how + ")";
  }
  if (final_.signal || (final_.exit_code && *final_.exit_code != 0)) return how;
  return "";
}

int Shim::Finish() {
  if (cgroup_ != nullptr && final_.started && cgroup_->OomKilled()) {
    const std::string oom = "killed by the kernel's OOM killer: the memory limit of " +
                            std::to_string(config_.spec.memory_bytes) + " bytes was reached";
    final_.reason = final_.reason.empty() ? oom : oom + "; " + final_.reason;
  }
  if (cgroup_ != nullptr) {
    Status st = cgroup_->Destroy(5000);
    if (!st.ok()) ShimLog("%s", st.message().c_str());
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  if (final_.end_time_us == 0) final_.end_time_us = WallMicros();
  Status st = WriteFileDurably(args_.job_dir + "/" + kStatusFile, FinalStatusToJson(final_), 0600);
  if (!st.ok()) {
    ShimLog("cannot record the job's status: %s", st.message().c_str());
    return 1;
  }
  ShimLog("job %lld finished: %s", static_cast<long long>(final_.job_id),
          final_.reason.empty() ? "ok" : final_.reason.c_str());
  return 0;
}

int Shim::Run() {
  // Before anything else: a cancel that arrives early must wait for us, not kill us.
  sigset_t set = ShimSignals();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  ::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the job behind our back
  // The job must not inherit the start report's pipe, or the launcher would wait for it.
  if (args_.ready_fd >= 0) ::fcntl(args_.ready_fd, F_SETFD, FD_CLOEXEC);
  // Orphaned descendants of the job become our children, so we can reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  const std::string base = args_.job_dir.substr(args_.job_dir.find_last_of('/') + 1);
  final_.job_id = ParseInt64(base).value_or(0);
  Result<ShimConfig> config = ReadShimConfig(args_.job_dir);
  if (!config.ok()) {
    ShimLog("%s", config.status().message().c_str());
    final_.reason = "the job's supervisor cannot read its spec: " + config.status().message();
    int rc = final_.job_id > 0 ? Finish() : 1;
    Report("failed");
    return rc == 0 ? 0 : 1;
  }
  config_ = std::move(*config);
  final_.job_id = config_.spec.job_id;
  final_.attempt = config_.spec.attempt;

  record_.job_id = config_.spec.job_id;
  record_.attempt = config_.spec.attempt;
  record_.pid = ::getpid();
  record_.start_ticks = ProcessStartTicks(record_.pid).value_or(0);
  record_.boot_id = BootId();
  Status st = WriteFileDurably(args_.job_dir + "/" + kShimFile, ShimRecordToJson(record_), 0600,
                               /*sync=*/false);
  if (st.ok()) st = Prepare();
  if (st.ok()) st = StartJob();
  if (!st.ok()) {
    ShimLog("job did not start: %s", st.message().c_str());
    final_.reason = st.message();
    int rc = Finish();
    Report("failed");
    return rc;
  }
  Report("started " + std::to_string(final_.start_time_us));
  Supervise();
  final_.reason = ExitReason();
  return Finish();
}

}  // namespace

Result<ShimArgs> ParseShimArgs(int argc, char** argv) {
  ShimArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--job-dir" || a == "--ready-fd") && i + 1 >= argc) {
      return Status::InvalidArgument(a + " needs a value");
    }
    if (a == "--job-dir") {
      args.job_dir = argv[++i];
    } else if (a == "--ready-fd") {
      std::optional<int64_t> fd = ParseInt64(argv[++i]);
      if (!fd || *fd < 0 || *fd > 1'000'000) {
        return Status::InvalidArgument("--ready-fd: expected a file descriptor number");
      }
      args.ready_fd = static_cast<int>(*fd);
    } else {
      return Status::InvalidArgument("unknown argument '" + a +
                                     "'; usage: agent-shim --job-dir DIR [--ready-fd N]");
    }
  }
  if (args.job_dir.empty()) return Status::InvalidArgument("--job-dir is required");
  return args;
}

int RunShim(const ShimArgs& args) {
  // Our own output goes to the job directory: the agent may be gone at any moment.
  const std::string log = args.job_dir + "/" + kShimLogFile;
  int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) ::dup2(null_fd, 0);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  if (fd > 2) ::close(fd);
  if (null_fd > 2) ::close(null_fd);
  Shim shim(args);
  return shim.Run();
}

int RunShim(int argc, char** argv) {
  Result<ShimArgs> args = ParseShimArgs(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "gpupool agent-shim: %s\n", args.status().message().c_str());
    return 2;
  }
  return RunShim(*args);
}

}  // namespace gpupool::agent
