#include "agent/shim.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "agent/cgroup.h"
#include "agent/container.h"
#include "agent/job_env.h"
#include "agent/job_files.h"
#include "agent/job_process.h"
#include "agent/node_lease.h"
#include "agent/output_file.h"
#include "agent/proc_util.h"
#include "agent/shim_internal.h"
#include "agent/stop_request.h"
#include "common/strings.h"

namespace gpupool::agent {
namespace shim_internal {

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

// The shim's own diagnostics go to DIR/shim.log, which is created only when there is
// something to say: a file per job costs an inode allocation, most of a trivial job's
// cost on ext4 (job_files.h). ShimNote keeps a routine line (isolation, start) in memory;
// ShimLog writes a line worth keeping, after the notes before it, so a log that exists
// tells the whole story. From the first ShimLog on, the shim's stdout and stderr (a
// crash's last words) go to the file too; before it they are /dev/null.
std::string g_log_path;       // set by RunShim
std::string g_pending_notes;  // ShimNote's lines not yet written
bool g_log_open = false;

std::string ShimLine(const char* fmt, va_list ap) {
  char when[32];
  time_t now = ::time(nullptr);
  struct tm tm;
  ::gmtime_r(&now, &tm);
  // Neither can fail or truncate: 20 characters of time, and well under 96 in all.
  (void)::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  char head[96];
  (void)std::snprintf(head, sizeof head, "%s gpupool-shim[%d]: ", when,
                      static_cast<int>(::getpid()));
  va_list copy;
  va_copy(copy, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string line = head;
  if (n > 0) {
    std::string body(static_cast<size_t>(n) + 1, '\0');
    (void)std::vsnprintf(body.data(), body.size(), fmt, ap);  // sized by the call above
    body.resize(static_cast<size_t>(n));
    line += body;
  }
  line += '\n';
  return line;
}

void OpenShimLog() {
  if (g_log_open || g_log_path.empty()) return;
  g_log_open = true;
  int fd = ::open(g_log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  // Best effort, as the open above: without the log the shim's output stays where it was.
  (void)::dup2(fd, 1);
  (void)::dup2(fd, 2);
  if (fd > 2) ::close(fd);
}

void ShimNote(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string line = ShimLine(fmt, ap);
  va_end(ap);
  if (g_log_open) {
    // The log is best effort: a failed write has nowhere left to be reported.
    (void)std::fputs(line.c_str(), stderr);
    (void)std::fflush(stderr);
  } else if (g_pending_notes.size() < size_t{64} * 1024) {
    g_pending_notes += line;
  }
}

void ShimLog(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string line = ShimLine(fmt, ap);
  va_end(ap);
  OpenShimLog();
  // The log is best effort: a failed write has nowhere left to be reported.
  (void)std::fputs(g_pending_notes.c_str(), stderr);
  g_pending_notes.clear();
  (void)std::fputs(line.c_str(), stderr);
  (void)std::fflush(stderr);
}

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "this node";
  return buf;
}

sigset_t ShimSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SignalRequestSignal()}) {
    sigaddset(&set, sig);
  }
  return set;
}

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

// A submitted script's copy (LaunchSpec::script) into the run directory, the user's and
// executable, run in place of argv[0]; mounted at the same path into a container. The
// job directory belongs to root, so nobody can plant a link here.
Status Shim::WriteScript(bool root) {
  LaunchSpec& spec = config_.spec;
  if (spec.script.empty() || spec.argv.empty()) return Status::Ok();
  const std::string path = args_.job_dir + "/" + kScriptFile;
  GP_RETURN_IF_ERROR(WriteFileDurably(path, spec.script, 0700, /*sync=*/false));
  if (root && ::chown(path.c_str(), spec.uid, spec.gid) != 0) {
    return Status::Unavailable("cannot give the script '" + path + "' to user '" + spec.user +
                               "': " + std::strerror(errno));
  }
  spec.argv[0] = path;
  if (!spec.image.empty()) spec.mounts.push_back({path, path, /*read_only=*/true});
  return Status::Ok();
}

// The job's standard streams: the relayed descriptors of an interactive job, else
// /dev/null and its log files.
Status Shim::OpenStreams(const LaunchSpec& spec, bool root) {
  if (spec.stdio_relayed) {
    if (args_.stdio_fd < 0) {
      return Status::FailedPrecondition(
          "the interactive job's terminal was not passed to its supervisor (--stdio-fd)");
    }
    plan_.stdin_fd = args_.stdio_fd;
    plan_.stdout_fd = args_.stdio_fd + 1;
    plan_.stderr_fd = args_.stdio_fd + 2;
    plan_.controlling_tty = spec.tty;
    return Status::Ok();
  }
  if (!spec.stdout_file.empty()) {
    // -o/-e: created as the user where the user asked (output_file.h); one file for both
    // streams unless -e names another. Nothing is written to the run directory. A later
    // attempt (a requeue) appends: the earlier attempts' output, a checkpoint's last
    // words included, is kept.
    const OutputUser who{spec.user, spec.uid, spec.gid, plan_.groups};
    const bool keep = spec.id.attempt > 1;
    GP_ASSIGN_OR_RETURN(stdout_fd_, OpenOutputFile(spec.stdout_file, who, keep));
    if (spec.stderr_file.empty() || spec.stderr_file == spec.stdout_file) {
      stderr_fd_ = ::fcntl(stdout_fd_, F_DUPFD_CLOEXEC, 0);
      if (stderr_fd_ < 0) return Status::Unavailable("cannot duplicate the output file");
    } else {
      GP_ASSIGN_OR_RETURN(stderr_fd_, OpenOutputFile(spec.stderr_file, who, keep));
    }
  } else {
    GP_ASSIGN_OR_RETURN(stdout_fd_, OpenLog(args_.job_dir + "/" + kStdoutFile, spec, root));
    GP_ASSIGN_OR_RETURN(stderr_fd_, OpenLog(args_.job_dir + "/" + kStderrFile, spec, root));
  }
  plan_.stdin_fd = devnull_;
  plan_.stdout_fd = stdout_fd_;
  plan_.stderr_fd = stderr_fd_;
  return Status::Ok();
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
  // The launcher looked the user up (ShimConfig::user); the shim loads no NSS module.
  // A spec without it (written by hand) runs as a user without a passwd entry.
  plan_.groups = {spec.gid};
  if (config_.user && config_.user->known) {
    plan_.groups.assign(config_.user->groups.begin(), config_.user->groups.end());
    if (!config_.user->home.empty()) defaults.home = config_.user->home;
    if (!config_.user->shell.empty()) defaults.shell = config_.user->shell;
  } else {
    ShimLog("uid %u has no passwd entry%s; HOME=/ and only group %u", spec.uid,
            config_.user ? "" : " in the spec", spec.gid);
  }

  if (!spec.hostfile.empty()) {
    // The job's to read (and mounted into its container), nobody else's. The job
    // directory belongs to root, so nobody can plant a link here.
    const std::string path = args_.job_dir + "/" + kHostFile;
    // Writing the run's files can fail only by the node's fault (a full disk): such a
    // failure is reported as the node's (FinalStatus::node_fault) until they are written.
    final_.node_fault = true;
    GP_RETURN_IF_ERROR(WriteFileDurably(path, spec.hostfile, 0600, /*sync=*/false));
    if (root && ::chown(path.c_str(), spec.uid, spec.gid) != 0) {
      return Status::Unavailable("cannot give the host file '" + path + "' to user '" + spec.user +
                                 "': " + std::strerror(errno));
    }
  }
  final_.node_fault = true;
  GP_RETURN_IF_ERROR(WriteScript(root));
  final_.node_fault = false;
  if (!spec.image.empty()) return PrepareContainer(plan_.groups);
  if (!spec.env_dir.empty()) {
    struct stat st;
    if (::stat(spec.env_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::FailedPrecondition("environment directory '" + spec.env_dir +
                                        "' does not exist on node " + HostName());
    }
  }
  std::map<std::string, std::string> env = BuildJobEnvironment(spec, defaults);
  if (spec.preemptible) {  // only the pool sets the variable (job_env.h)
    GP_ASSIGN_OR_RETURN(env["GPUPOOL_PREEMPT_DEADLINE_FILE"], MakePreemptDeadlineFile());
  }
  plan_.env = EnvironmentStrings(env);
  plan_.argv = spec.argv;
  plan_.candidates = CommandCandidates(spec.argv[0], env["PATH"]);
  plan_.workdir = spec.workdir.empty() ? defaults.home : spec.workdir;

  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_ < 0)
    return Status::Unavailable("cannot open /dev/null: " + std::string(std::strerror(errno)));
  GP_RETURN_IF_ERROR(OpenStreams(spec, root));

  CgroupRequest req;
  req.id = spec.id;
  req.deny_device_nodes = spec.denied_device_nodes;
  req.cpu_milli = spec.cpu_milli;
  req.memory_bytes = spec.memory_bytes;
  req.instance = std::to_string(::getpid());
  if (spec.share_enforcement == "dmem") GpuMemoryCap(&req);
  cgroup_ = spec.join_cgroups.empty() ? JobCgroup::Create(config_.cgroup_root, req)
                                      : JobCgroup::Join(spec.join_cgroups);
  final_.isolation = cgroup_->note();
  record_.isolation = cgroup_->note();
  record_.cgroup_dirs = cgroup_->dirs();
  GP_RETURN_IF_ERROR(DmemCapInPlace());
  if (spec.require_device_isolation && !cgroup_->devices_enforced()) {
    // Fail closed: without every deny rule the job would reach GPUs it was not given.
    return Status::FailedPrecondition(
        "GPU isolation could not be set up on node " + HostName() + " (" + cgroup_->note() +
        "), so the job would reach GPUs it was not given; not started. Create the missing "
        "device nodes (nvidia-modprobe -c N, or load the driver), or have an admin run this "
        "node's agent with --allow-unisolated-devices to accept unisolated GPUs");
  }
  ShimNote("isolation: %s", cgroup_->note().c_str());
  plan_.cgroup = cgroup_.get();
  plan_.require_cgroup = spec.require_device_isolation;
  return Status::Ok();
}

Status Shim::StartJob() {
  // A process job's own /dev/shm (job_mounts.h): the shim is in the job's mount
  // namespace only while it starts the job's process.
  std::unique_ptr<MountNamespaceSwitch> mounts = container_ ? nullptr : EnterJobMounts();
  Result<pid_t> started = StartJobProcess(plan_);
  if (mounts != nullptr) {
    if (Status back = mounts->Return(); !back.ok()) ShimLog("%s", back.message().c_str());
  }
  if (!started.ok() && container_) {
    return Status::FailedPrecondition("podman is not installed on node " + HostName() + ": " +
                                      started.status().message());
  }
  // The job holds its terminal now: our copies would keep it open after the job ends.
  CloseRelayedStreams();
  GP_ASSIGN_OR_RETURN(job_pid_, std::move(started));
  final_.started = true;
  final_.start_time_us = WallMicros();
  record_.job_pid = job_pid_;
  record_.job_start_ticks = ProcessStartTicks(job_pid_).value_or(0);
  record_.start_time_us = final_.start_time_us;
  // In place: a second tmp+rename would allocate and free an inode per job (job_files.h).
  Status st = RewriteFileLocked(args_.job_dir + "/" + kShimFile, ShimRecordToJson(record_));
  if (!st.ok()) ShimLog("%s", st.message().c_str());  // the job runs; Adopt copes
  ShimNote("started %s as pid %d", ToString(config_.spec.id).c_str(), static_cast<int>(job_pid_));
  return Status::Ok();
}

void Shim::CloseRelayedStreams() {
  if (args_.stdio_fd < 0) return;
  for (int i = 0; i < 3; ++i) ::close(args_.stdio_fd + i);
  args_.stdio_fd = -1;
}

// A SIGTERM or SIGINT: the node's own stop or a preemption's when the launcher left one
// (stop_request.h), else a cancel with the spec's grace.
void Shim::OnStopSignal() {
  const std::optional<StopRequest> stop = ReadStopRequest(args_.job_dir);
  if (stop && !stop->reason.empty()) {
    KillForNode(stop->reason);
    return;
  }
  if (!stop) {
    BeginStop(/*cancel=*/true, config_.spec.grace_s);
    return;
  }
  if (stopping_) {
    // Told again with a shorter grace (the job said it has checkpointed): SIGKILL sooner.
    const int64_t kill_at = MonoMicros() + stop->grace_s * 1'000'000;
    if (!killed_ && kill_at < kill_at_mono_) {
      ShimLog("preemption: the grace now ends in %lld s", static_cast<long long>(stop->grace_s));
      kill_at_mono_ = kill_at;
    }
    return;
  }
  if (config_.spec.preemptible) WriteDeadlineFile(stop->deadline_s);
  ShimLog("preempted: grace %lld s, deadline %lld", static_cast<long long>(stop->grace_s),
          static_cast<long long>(stop->deadline_s));
  BeginStop(/*cancel=*/true, stop->grace_s);
}

// The lease is checked at least this often while it is on: the monotonic timer of the
// wait stops during a suspend, the boot clock of the lease does not.
constexpr int64_t kLeaseCheckUs = 5'000'000;

// How long before the held lease runs out the job is told to stop; 0 once told.
int64_t Shim::LeaseWarnMicros() const {
  return lease_warned_ ? 0 : std::max<int64_t>(config_.spec.lease_grace_s, 0) * 1'000'000;
}

void Shim::CheckLease() {
  if (config_.spec.lease_file.empty() || lease_fenced_ || killed_) return;
  const int64_t now = BootMicros();
  if (lease_ && now < lease_->deadline_us - LeaseWarnMicros()) return;
  Result<NodeLease> read = ReadNodeLease(config_.spec.lease_file);
  if (!read.ok()) {
    // Fail open: no lease known fences nothing (the agent removes the file when the
    // controller gives none). Read again at every check.
    if (!lease_noted_) {
      ShimLog("%s; the job is not fenced by the node lease until it can be read",
              read.status().message().c_str());
      lease_noted_ = true;
    }
    lease_.reset();
    return;
  }
  if (!lease_) lease_ = *read;  // the first lease read: judged as it is
  switch (JudgeLease(*lease_, now, *read, LeaseWarnMicros())) {
    case LeaseVerdict::kHolds:
    case LeaseVerdict::kUnknown:
      return;
    case LeaseVerdict::kRenewed:
      lease_ = *read;
      return;
    case LeaseVerdict::kWarn:
      lease_warned_ = true;
      WarnForNode(LeaseReason(now, /*warning=*/true), protocol::KillCause::kNodeLease,
                  (lease_->deadline_us - now + 999'999) / 1'000'000);
      return;
    case LeaseVerdict::kFence:
      break;
  }
  lease_fenced_ = true;
  KillForNode(LeaseReason(now, /*warning=*/false), protocol::KillCause::kNodeLease);
}

std::string Shim::LeaseReason(int64_t now, bool warning) const {
  const std::string ago =
      std::to_string(std::max<int64_t>(0, now - lease_->written_us) / 1'000'000);
  const std::string left =
      std::to_string((std::max<int64_t>(0, lease_->deadline_us - now) + 999'999) / 1'000'000);
  // The pool's name of the node, as the agent's messages and `gpupool nodes` say it.
  const std::string node = config_.spec.node_name.empty() ? HostName() : config_.spec.node_name;
  return (warning ? "node lease running out in " + left + " s: node " + node +
                        " has not reached the controller for " + ago + " s"
                  : "node lease ran out: node " + node +
                        " has not reached the controller for 3/4 of its lease (last renewed " +
                        ago + " s ago)") +
         ", and the job may be started again elsewhere; stopped here";
}

int64_t Shim::LeaseWaitMicros() const {
  if (config_.spec.lease_file.empty() || lease_fenced_ || killed_) return INT64_MAX;
  int64_t wait = kLeaseCheckUs;
  if (lease_) wait = std::min(wait, lease_->deadline_us - LeaseWarnMicros() - BootMicros());
  return std::max<int64_t>(wait, 1000);
}

void Shim::Supervise() {
  const sigset_t set = ShimSignals();
  const int64_t start_mono = MonoMicros();
  const int64_t limit_at =
      config_.spec.time_limit_s > 0 ? start_mono + config_.spec.time_limit_s * 1'000'000 : 0;
  // --signal: warn_time_s before the limit, at the start when the limit is shorter.
  int64_t warn_at = 0;
  if (limit_at != 0 && config_.spec.warn_signal > 0) {
    warn_at = std::max(start_mono, limit_at - config_.spec.warn_time_s * 1'000'000);
  }
  while (true) {
    CheckLease();  // first: a fence is carried out below, in this round
    const int64_t now = MonoMicros();
    if (warn_at != 0 && now >= warn_at && !stopping_) {
      SendWarningSignal();
      warn_at = 0;
    }
    if (limit_at != 0 && now >= limit_at && !stopping_) {
      BeginStop(/*cancel=*/false, config_.spec.grace_s);
    }
    if (stopping_ && !killed_ && now >= kill_at_mono_) {
      if (container_) {
        // podman stop did not end it: kill the container and its client; the container
        // is removed when the shim finishes either way.
        ShimLog("container still running after the grace period: podman kill %s",
                container_name_.c_str());
        StartHelper({"kill", "--signal", "KILL", container_name_}, "podman kill");
      }
      const std::string to = SignalJob(SIGKILL);
      if (!container_) {
        ShimLog("grace period over: SIGKILL to process group %d%s", static_cast<int>(job_pid_),
                to.c_str());
      }
      killed_ = true;
    }
    if (term_at_mono_ != 0 && now >= term_at_mono_ && !killed_) {
      const std::string to = SignalJob(SIGTERM);
      SignalJob(SIGCONT);
      ShimLog("SIGTERM to process group %d%s, SIGCONT after it", static_cast<int>(job_pid_),
              to.c_str());
      term_at_mono_ = 0;
    }
    if (stop_retry_at_mono_ != 0 && now >= stop_retry_at_mono_ && !killed_) {
      // The container did not exist yet when podman stop ran: ask again.
      stop_retry_at_mono_ = 0;
      StartHelper({"stop", "--time", std::to_string(grace_s_), container_name_}, "podman stop");
    }
    int64_t next = now + 3'600'000'000LL;
    if (limit_at != 0 && !stopping_) next = std::min(next, limit_at);
    if (warn_at != 0 && !stopping_) next = std::min(next, warn_at);
    if (stopping_ && !killed_) next = std::min(next, kill_at_mono_);
    if (stop_retry_at_mono_ != 0) next = std::min(next, stop_retry_at_mono_);
    if (term_at_mono_ != 0) next = std::min(next, term_at_mono_);
    const int64_t wait_us = std::min(std::max<int64_t>(next - now, 1000), LeaseWaitMicros());
    struct timespec ts = {static_cast<time_t>(wait_us / 1'000'000),
                          static_cast<long>((wait_us % 1'000'000) * 1000)};
    siginfo_t info;
    const int sig = ::sigtimedwait(&set, &info, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      TakeSignalRequests();
      OnStopSignal();
    } else if (sig == SignalRequestSignal()) {
      OnSignalRequest(info);
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
      // A podman helper, or an orphaned descendant of the job (we are its subreaper).
      int status = 0;
      ::waitpid(child.si_pid, &status, WNOHANG);
      if (helpers_.erase(child.si_pid) != 0 && child.si_pid == stop_pid_) {
        stop_pid_ = 0;
        if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && !killed_) {
          stop_retry_at_mono_ = MonoMicros() + 500'000;
        }
      }
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

// How the job ended, in words (final_.reason, signal included), and why it was killed as
// its own fields (final_.kill_cause, and kill_detail: those words without the signal), so
// that the controller builds the job's reason from them instead of parsing the words.
void Shim::SetExitReason() {
  const int64_t grace = grace_s_;
  std::string how;
  if (final_.signal) {
    how = "ended by " + SignalName(*final_.signal);
  } else if (final_.exit_code) {
    how = "exited with code " + std::to_string(*final_.exit_code);
  }
  if (container_signal_) {
    how += ", container exit status " + std::to_string(128 + *final_.signal);
  } else if (container_ && final_.signal) {
    how += " (the podman client)";
  }
  std::string why;
  final_.kill_cause = protocol::KillCause::kNone;
  if (final_.timed_out) {
    why = "time limit of " + std::to_string(config_.spec.time_limit_s) + " s reached";
    final_.kill_cause = protocol::KillCause::kTimeLimit;
  } else if (final_.cancelled) {
    why = "cancelled";
    final_.kill_cause = protocol::KillCause::kStopRequest;
  } else if (!node_stop_reason_.empty()) {
    // The node's own stop: its GPU memory watch (stop_request.h) or its lease.
    final_.kill_cause = node_stop_cause_;
    final_.kill_detail = node_stop_reason_;
    final_.reason = node_stop_reason_ + " (" + how + ")";
    return;
  }
  if (!why.empty()) {
    if (killed_) why += "; SIGKILL after the grace period of " + std::to_string(grace) + " s";
    final_.kill_detail = why;
    final_.reason = why + " (" + how + ")";
    return;
  }
  if (!container_reason_.empty()) {
    final_.kill_detail = container_reason_;
    final_.reason = container_reason_;
    return;
  }
  const bool failed = final_.signal || (final_.exit_code && *final_.exit_code != 0);
  final_.reason = failed ? how : "";
}

// The kernel's OOM killer ended a process of the job (JobCgroup::OomKilled): said first
// in its reason.
void Shim::AddOomReason() {
  const std::string oom =
      config_.spec.memory_bytes > 0
          ? "killed by the kernel's OOM killer: the memory limit of " +
                std::to_string(config_.spec.memory_bytes) + " bytes was reached"
          : "killed by the kernel's OOM killer: node " + HostName() + " ran out of memory";
  final_.reason = final_.reason.empty() ? oom : oom + "; " + final_.reason;
  final_.kill_cause = config_.spec.memory_bytes > 0 ? protocol::KillCause::kOomKernel
                                                    : protocol::KillCause::kOomNode;
  final_.kill_detail = final_.kill_detail.empty() ? oom : oom + "; " + final_.kill_detail;
}

int Shim::Finish() {
  if (cgroup_ != nullptr && final_.started && cgroup_->OomKilled()) AddOomReason();
  auto destroy_cgroup = [this] {
    if (cgroup_ == nullptr) return;
    Status st = cgroup_->Destroy(5000);
    if (!st.ok()) ShimLog("%s", st.message().c_str());
  };
  // An exec session never has cgroups of its own (it joins its task's, or none): what it
  // left running goes with it, as a task's goes with its cgroups.
  if (!container_ && !HasOwnCgroups()) KillLeftovers();
  if (!container_) destroy_cgroup();  // a container's goes after the container
  if (container_ && final_.started) {
    // Whatever happened to podman's client (killed, crashed), conmon keeps a container
    // running on its own: make sure it is gone.
    Result<bool> rm = RemoveContainer(config_.container, container_name_);
    if (!rm.ok()) {
      ShimLog("%s", rm.status().message().c_str());
      final_.reason += std::string(final_.reason.empty() ? "" : "; ") +
                       "the container may still run: " + rm.status().message();
    } else if (*rm) {
      ShimLog("container %s was still there and has been removed", container_name_.c_str());
    }
  }
  if (container_) {
    destroy_cgroup();
    ::unlink((args_.job_dir + "/container.env").c_str());
  }
  if (staged_ != nullptr) {
    // The container is gone: its mount sources may go too.
    if (Status st = staged_->Clear(); !st.ok()) ShimLog("%s", st.message().c_str());
    staged_.reset();
  }
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  if (final_.end_time_us == 0) final_.end_time_us = WallMicros();
  // A job's status must survive a power loss (it is reported after the reboot); an exec
  // session's need not: its client, and so the session, is gone after a reboot. The
  // fsync cost an exec about 0.6 ms of CPU (docs/benchmarks.md, "Gang start-up").
  const bool exec_session = final_.id.is_exec();
  if (!RecordStatus(/*sync=*/!exec_session)) return 1;
  if (final_.reason.empty()) {
    ShimNote("%s finished: ok", ToString(final_.id).c_str());
  } else {
    ShimLog("%s finished: %s", ToString(final_.id).c_str(), final_.reason.c_str());
  }
  return 0;
}

// The status file is the only record of how a started job ended: a shim that exits
// without it makes the agent report the job LOST however it ended. So a write that
// fails (a full or failing disk) is tried again, waiting 0.5 s and up to 30 s between
// tries, for as long as the run's directory exists. Meanwhile the agent sees the shim
// alive and the job still running; it learns the real outcome, with its real end time,
// once the write lands. The directory gone (the agent removed the run) ends the tries.
bool Shim::RecordStatus(bool sync) {
  const std::string path = args_.job_dir + "/" + kStatusFile;
  const std::string status = FinalStatusToJson(final_);
  Status st = WriteFileDurably(path, status, 0600, sync);
  if (st.ok()) return true;
  if (!final_.started) {
    // The launcher waits for this shim to say the job did not start: it reports the
    // failure itself, as the node's, when the status is missing.
    ShimLog("cannot record the job's status: %s", st.message().c_str());
    return false;
  }
  ShimLog("cannot record the job's status: %s; trying again until it can", st.message().c_str());
  int64_t wait_ms = 500;
  int tries = 1;
  while (!st.ok()) {
    if (::access(args_.job_dir.c_str(), F_OK) != 0) {
      ShimLog("the run's directory %s is gone; the job's status is not recorded",
              args_.job_dir.c_str());
      return false;
    }
    struct timespec pause = {static_cast<time_t>(wait_ms / 1000),
                             static_cast<long>(wait_ms % 1000) * 1'000'000};
    while (::nanosleep(&pause, &pause) != 0 && errno == EINTR) {
    }
    wait_ms = std::min<int64_t>(wait_ms * 2, 30'000);
    st = WriteFileDurably(path, status, 0600, sync);
    ++tries;
  }
  ShimLog("recorded the job's status at try %d", tries);
  return true;
}

int Shim::Run() {
  // Before anything else: a cancel that arrives early must wait for us, not kill us.
  sigset_t set = ShimSignals();
  // None can fail: valid signals and a valid `how`; the old dispositions are not needed.
  (void)::sigprocmask(SIG_BLOCK, &set, nullptr);
  (void)::signal(SIGPIPE, SIG_IGN);
  (void)::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the job behind our back
  // The job must not inherit the start report's pipe, or the launcher would wait for it.
  if (args_.ready_fd >= 0) ::fcntl(args_.ready_fd, F_SETFD, FD_CLOEXEC);
  if (args_.stdio_fd >= 0) {
    for (int i = 0; i < 3; ++i) ::fcntl(args_.stdio_fd + i, F_SETFD, FD_CLOEXEC);
  }
  // Orphaned descendants of the job become our children, so we can reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);

  // Whose status this is, should the spec be unreadable: the directory names the run.
  const std::optional<RunId> dir_id = RunIdOfDir(args_.job_dir);
  if (dir_id) final_.id = *dir_id;
  Result<ShimConfig> config = ReadShimConfig(args_.job_dir);
  if (!config.ok()) {
    ShimLog("%s", config.status().message().c_str());
    final_.reason = "the job's supervisor cannot read its spec: " + config.status().message();
    int rc = dir_id ? Finish() : 1;
    Report("failed");
    return rc == 0 ? 0 : 1;
  }
  config_ = std::move(*config);
  final_.id = config_.spec.id;
  record_.id = config_.spec.id;
  record_.pid = ::getpid();
  record_.start_ticks = ProcessStartTicks(record_.pid).value_or(0);
  record_.boot_id = BootId();
  record_.signal_requests = true;  // blocked since the start of Run, taken in Supervise
  Status st = WriteFileDurably(args_.job_dir + "/" + kShimFile, ShimRecordToJson(record_), 0600,
                               /*sync=*/false);
  if (st.ok()) st = Prepare();
  if (st.ok()) st = StartJob();
  if (!st.ok()) {
    ShimLog("job did not start: %s", st.message().c_str());
    final_.reason = st.message();
    final_.kill_cause = protocol::KillCause::kNone;
    int rc = Finish();
    Report("failed");
    return rc;
  }
  Report("started " + std::to_string(final_.start_time_us));
  Supervise();
  if (!container_) StopJoinedProcesses();
  if (container_) MapContainerExit();
  SetExitReason();
  return Finish();
}

}  // namespace shim_internal

using shim_internal::g_log_path;
using shim_internal::Shim;

Result<ShimArgs> ParseShimArgs(int argc, char** argv) {
  ShimArgs args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--job-dir" || a == "--ready-fd" || a == "--stdio-fd") && i + 1 >= argc) {
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
    } else if (a == "--stdio-fd") {
      std::optional<int64_t> fd = ParseInt64(argv[++i]);
      if (!fd || *fd < 3 || *fd > 1'000'000) {
        return Status::InvalidArgument("--stdio-fd: expected a file descriptor number from 3");
      }
      args.stdio_fd = static_cast<int>(*fd);
    } else {
      return Status::InvalidArgument(
          "unknown argument '" + a +
          "'; usage: agent-shim --job-dir DIR [--ready-fd N] [--stdio-fd N]");
    }
  }
  if (args.job_dir.empty()) return Status::InvalidArgument("--job-dir is required");
  return args;
}

int RunShim(const ShimArgs& args) {
  // Our own output goes to the job directory (the agent may be gone at any moment), and
  // only once there is something to say (ShimLog).
  g_log_path = args.job_dir + "/" + kShimLogFile;
  int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd >= 0) {
    for (int i = 0; i < 3; ++i) ::dup2(null_fd, i);
  }
  if (null_fd > 2) ::close(null_fd);
  Shim shim(args);
  return shim.Run();
}

int RunShim(int argc, char** argv, NvmlMemoryLimitFn nvml_limit) {
  Result<ShimArgs> args = ParseShimArgs(argc, argv);
  if (!args.ok()) {
    (void)std::fprintf(stderr, "gpupool agent-shim: %s\n",
                       args.status().message().c_str());  // best effort: exiting anyway
    return 2;
  }
  args->nvml_limit = nvml_limit;
  return RunShim(*args);
}

}  // namespace gpupool::agent
