// NewProcessLauncher: the Launcher that runs each job under a `gpupool agent-shim`
// process and watches the shims through pidfds.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <set>

#include "agent/cgroup.h"
#include "agent/container.h"
#include "agent/job_files.h"
#include "agent/launcher.h"
#include "agent/mount_source.h"
#include "agent/proc_util.h"
#include "common/logging.h"
#include "common/strings.h"
#include "common/subprocess.h"

namespace gpupool::agent {

std::string_view JobEventKindName(JobEvent::Kind kind) {
  switch (kind) {
    case JobEvent::Kind::kStarted:
      return "started";
    case JobEvent::Kind::kExited:
      return "exited";
    case JobEvent::Kind::kFailed:
      return "failed";
    case JobEvent::Kind::kLost:
      return "lost";
  }
  return "unknown";
}

namespace {

constexpr int kReadyFd = 3;  // where the shim finds the start-report pipe
constexpr int kStdioFd = 4;  // an interactive job's stdin, stdout, stderr: 4, 5, 6

struct Supervised {
  std::string dir;  // the run's directory (either layout, run_id.h)
  pid_t shim_pid = 0;
  int pidfd = -1;  // -2: no pidfd support, liveness by start ticks
  uint64_t start_ticks = 0;
  bool our_child = false;  // started by this launcher, so ours to reap
};

// Creates `path` if needed, with `mode` whatever the umask (a daemon's 077 would make it
// 0700, closed to the jobs that read their host file inside); `enforce` also resets the
// mode of an existing directory.
Status MakeDir(const std::string& path, mode_t mode, bool enforce = true) {
  const bool created = ::mkdir(path.c_str(), mode) == 0;
  if (!created && errno != EEXIST) {
    return Status::Unavailable("cannot create directory '" + path + "': " + std::strerror(errno));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition("'" + path + "' is not a directory; remove it");
  }
  if (enforce || created) ::chmod(path.c_str(), mode);
  return Status::Ok();
}

Status ValidateSpec(const LaunchSpec& s) {
  if (s.id.job <= 0) return Status::InvalidArgument("id.job must be positive");
  if (s.id.task < 0 || s.id.attempt < 0 || s.id.exec < 0) {
    return Status::InvalidArgument(ToString(s.id) +
                                   ": task, attempt and exec must not be negative");
  }
  const std::string what = ToString(s.id);
  if (s.argv.empty() || s.argv[0].empty()) {
    return Status::InvalidArgument(what + " has an empty command");
  }
  if (s.user.empty()) return Status::InvalidArgument(what + " has no user name");
  if (s.grace_s < 0 || s.time_limit_s < 0 || s.cpu_milli < 0) {
    return Status::InvalidArgument(what + ": grace, time limit and cpus must not be negative");
  }
  for (const auto& [k, v] : s.env) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos) {
      return Status::InvalidArgument(what + ": invalid environment variable name '" + k + "'");
    }
  }
  return Status::Ok();
}

// The runs in STATE/jobs, with their directories, in both layouts (run_id.h): a numeric
// entry with a spec inside is a run of the previous layout; any numeric entry's children
// named as runs are runs. Their identity is read from their specs later.
std::vector<std::string> ListRunDirs(const std::string& jobs_dir, Status* error) {
  std::vector<std::string> dirs;
  DIR* d = ::opendir(jobs_dir.c_str());
  if (d == nullptr) {
    if (errno != ENOENT) {
      *error = Status::Unavailable("cannot list '" + jobs_dir + "': " + std::strerror(errno));
    }
    return dirs;
  }
  std::vector<std::string> jobs;
  while (struct dirent* e = ::readdir(d)) {
    if (std::optional<int64_t> id = ParseInt64(e->d_name); id && *id > 0) jobs.push_back(e->d_name);
  }
  ::closedir(d);
  for (const std::string& job : jobs) {
    const std::string job_dir = jobs_dir + "/" + job;
    struct stat st;
    if (::stat((job_dir + "/" + kSpecFile).c_str(), &st) == 0) dirs.push_back(job_dir);
    DIR* jd = ::opendir(job_dir.c_str());
    if (jd == nullptr) continue;
    while (struct dirent* e = ::readdir(jd)) {
      if (IsRunDirName(e->d_name)) dirs.push_back(job_dir + "/" + e->d_name);
    }
    ::closedir(jd);
  }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

bool ShimExited(const Supervised& s) {
  if (s.pidfd >= 0) return PidFdExited(s.pidfd);
  Result<uint64_t> ticks = ProcessStartTicks(s.shim_pid);
  return !ticks.ok() || *ticks != s.start_ticks;
}

// A shim that ended while no launcher watched it may still be a zombie child of this
// process (a launcher destroyed and recreated in one process, as in tests). Reaped only
// when the pid still names that very process, so no other child's status is stolen.
void ReapIfOurs(const std::string& job_dir) {
  Result<ShimRecord> rec = ReadShimRecord(job_dir);
  if (!rec.ok()) return;
  Result<uint64_t> ticks = ProcessStartTicks(rec->pid);
  if (ticks.ok() && *ticks == rec->start_ticks) ::waitpid(rec->pid, nullptr, WNOHANG);
}

class ProcessLauncher final : public Launcher {
 public:
  explicit ProcessLauncher(LauncherOptions options) : opt_(std::move(options)) {
    if (opt_.clock == nullptr) opt_.clock = SystemClock::Get();
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  }
  ~ProcessLauncher() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
    // The shims keep running; only our handles go.
    for (auto& [id, s] : jobs_) {
      if (s.pidfd >= 0) ::close(s.pidfd);
    }
  }

  using Launcher::Launch;
  Status Launch(const LaunchSpec& spec, const JobStdio& stdio) override;
  Status Cancel(const RunId& id) override;
  Status Stop(const RunId& id, const StopRequest& stop) override;
  Status SignalJob(const RunId& id, int sig, bool main_only) override;
  std::vector<JobEvent> Poll() override;
  std::vector<JobEvent> Wait(int timeout_ms) override;
  Result<std::vector<JobEvent>> Adopt() override;
  Status Forget(const RunId& id) override;
  std::vector<RunId> Running() const override;

 private:
  Result<Supervised> SpawnShim(const std::vector<std::string>& command, const std::string& job_dir,
                               const JobStdio& stdio, std::string* report);
  JobEvent FinalEvent(const RunId& id, pid_t shim_pid, const std::string& job_dir);
  // Cancel (stop null: any stop request left is removed) and Stop (written first).
  Status Signal(const RunId& id, const StopRequest* stop);
  // Reserves `id` for a launch (callers hold mu_): AlreadyExists while it, or another
  // attempt of its task, is supervised or launching.
  Status ReserveLocked(const RunId& id);
  // Adopts the run in `dir` (callers hold mu_): its event, or nothing when it was
  // forgotten, is supervised already, or its directory cannot be read.
  std::optional<JobEvent> AdoptRunLocked(const std::string& dir, const std::string& boot);
  // Queues an event and wakes Wait (callers hold mu_).
  void Queue(JobEvent e) {
    // A batch job's logs are its output files (-o/-e) when it has them.
    if (auto out = outputs_.find(e.id); out != outputs_.end() && e.stdout_file.empty()) {
      e.stdout_file = out->second.first;
      e.stderr_file = out->second.second;
    }
    events_.push_back(std::move(e));
    Wake();
  }
  // Wakes Wait: an event was queued or a job to watch was added.
  void Wake() const {
    if (wake_fd_ < 0) return;
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
  }

  LauncherOptions opt_;
  mutable std::mutex mu_;
  std::map<RunId, Supervised> jobs_;  // guarded by mu_
  std::set<RunId> launching_;         // guarded by mu_
  // The directory of every run launched or adopted and not yet forgotten (a run of the
  // previous layout is not where JobDir puts it). Guarded by mu_.
  std::map<RunId, std::string> dirs_;
  // Runs with output files (LaunchSpec::stdout_file, stderr_file); guarded by mu_.
  std::map<RunId, std::pair<std::string, std::string>> outputs_;
  std::vector<JobEvent> events_;  // guarded by mu_
  int wake_fd_ = -1;              // eventfd: Launch/Queue -> Wait
};

Result<Supervised> ProcessLauncher::SpawnShim(const std::vector<std::string>& command,
                                              const std::string& job_dir, const JobStdio& stdio,
                                              std::string* report) {
  if (command.empty()) {
    return Status::FailedPrecondition("no shim command configured for the launcher");
  }
  std::vector<std::string> args = command;
  args.insert(args.end(), {"--job-dir", job_dir, "--ready-fd", std::to_string(kReadyFd)});

  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    return Status::Unavailable(std::string("cannot create a pipe: ") + std::strerror(errno));
  }
  // Its own session: signals to the agent's group or terminal never reach it. Signals
  // stay blocked across exec until the shim installs its handling; a cancel then waits.
  SpawnOptions so;
  so.null_output = true;
  so.new_session = true;
  so.search_path = false;
  so.blocked = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  so.pass_fd = pipefd[1];
  so.pass_fd_as = kReadyFd;
  so.close_from = kReadyFd + 1;
  // An interactive job's streams, as descriptors 4, 5 and 6 (copied above any low number
  // first, so that no source is overwritten by an earlier target).
  std::vector<int> copies;
  if (stdio.in >= 0 && stdio.out >= 0 && stdio.err >= 0) {
    for (int fd : {stdio.in, stdio.out, stdio.err}) {
      const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 16);
      if (copy < 0) {
        for (int c : copies) ::close(c);
        ::close(pipefd[0]);
        ::close(pipefd[1]);
        return Status::Unavailable(std::string("cannot pass the job's terminal: ") +
                                   std::strerror(errno));
      }
      copies.push_back(copy);
    }
    for (size_t i = 0; i < copies.size(); ++i) {
      so.more_fds.emplace_back(copies[i], kStdioFd + static_cast<int>(i));
    }
    so.close_from = kStdioFd + 3;
    args.insert(args.end(), {"--stdio-fd", std::to_string(kStdioFd)});
  }
  Result<pid_t> spawned = SpawnCommand(args, so);
  for (int c : copies) ::close(c);
  if (!spawned.ok()) {
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return Status::FailedPrecondition("the job's supervisor: " + spawned.status().message());
  }
  const pid_t pid = *spawned;
  ::close(pipefd[1]);

  Supervised s;
  s.shim_pid = pid;
  s.our_child = true;
  s.pidfd = OpenVerifiedPidFd(pid, 0);
  s.start_ticks = ProcessStartTicks(pid).value_or(0);

  // Wait for the start report: the shim closes the pipe after one line (and so does
  // everything else that holds it once it exits).
  const int64_t deadline = opt_.clock->MonotonicMicros() + opt_.start_timeout_ms * 1000LL;
  std::string text;
  bool timed_out = false;
  while (true) {
    const int64_t left_ms = (deadline - opt_.clock->MonotonicMicros()) / 1000;
    if (left_ms <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd p = {pipefd[0], POLLIN, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    char buf[512];
    ssize_t got = ::read(pipefd[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(buf, static_cast<size_t>(got));
    if (text.size() > 4096) break;
  }
  ::close(pipefd[0]);
  if (timed_out) {
    SignalProcess(s.pidfd, pid, SIGKILL);
    if (Result<ShimRecord> rec = ReadShimRecord(job_dir); rec.ok() && rec->job_pid > 0) {
      ::kill(-rec->job_pid, SIGKILL);
    }
    ::waitpid(pid, nullptr, 0);
    if (s.pidfd >= 0) ::close(s.pidfd);
    return Status::Unavailable("the job's supervisor did not report within " +
                               std::to_string(opt_.start_timeout_ms) + " ms and was killed; see " +
                               job_dir + "/" + kShimLogFile);
  }
  *report = std::string(Trim(text));
  return s;
}

Status ProcessLauncher::ReserveLocked(const RunId& id) {
  if (jobs_.count(id) != 0 || launching_.count(id) != 0) {
    return Status::AlreadyExists(ToString(id) + " is already running on this node");
  }
  // At most one attempt of a task runs on a node at a time.
  if (!id.is_exec()) {
    auto other = [&](const RunId& r) {
      return !r.is_exec() && r.job == id.job && r.task == id.task && r.attempt != id.attempt;
    };
    for (const auto& [r, s] : jobs_) {
      if (other(r)) return Status::AlreadyExists(ToString(r) + " still runs on this node");
    }
    for (const RunId& r : launching_) {
      if (other(r)) return Status::AlreadyExists(ToString(r) + " is being launched on this node");
    }
  }
  launching_.insert(id);
  return Status::Ok();
}

Status ProcessLauncher::Launch(const LaunchSpec& spec, const JobStdio& stdio) {
  GP_RETURN_IF_ERROR(ValidateSpec(spec));
  if (spec.stdio_relayed != (stdio.in >= 0 && stdio.out >= 0 && stdio.err >= 0)) {
    return Status::InvalidArgument(
        spec.stdio_relayed ? "an interactive job needs its stdin, stdout and stderr"
                           : "standard streams given for a job that does not relay them");
  }
  const std::string what = ToString(spec.id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    GP_RETURN_IF_ERROR(ReserveLocked(spec.id));
  }
  struct Unreserve {
    ProcessLauncher* self;
    RunId id;
    ~Unreserve() {
      std::lock_guard<std::mutex> lock(self->mu_);
      self->launching_.erase(id);
    }
  } unreserve{this, spec.id};

  // STATE/jobs and a job's folder may be traversed by users to reach their own files
  // (host file, logs), not listed. An existing STATE keeps the mode its owner gave it.
  GP_RETURN_IF_ERROR(MakeDir(opt_.state_dir, 0711, /*enforce=*/false));
  GP_RETURN_IF_ERROR(MakeDir(opt_.state_dir + "/jobs", 0711));
  GP_RETURN_IF_ERROR(MakeDir(opt_.state_dir + "/jobs/" + std::to_string(spec.id.job), 0711));
  const std::string dir = JobDir(opt_.state_dir, spec.id);
  GP_RETURN_IF_ERROR(MakeDir(dir, 0711));
  // A shim from an earlier launch (before a restart) that still runs owns this directory.
  if (Result<ShimRecord> rec = ReadShimRecord(dir); rec.ok() && rec->boot_id == BootId()) {
    if (Result<FinalStatus> done = ReadFinalStatus(dir); !done.ok()) {
      int fd = OpenVerifiedPidFd(rec->pid, rec->start_ticks);
      if (fd != -1) {
        if (fd >= 0) ::close(fd);
        return Status::AlreadyExists(what + " is already running on this node (shim pid " +
                                     std::to_string(rec->pid) + "); call Adopt()");
      }
    }
  }
  for (const char* f : {kStatusFile, kShimFile}) ::unlink((dir + "/" + f).c_str());

  ShimConfig config{spec, opt_.cgroup_root, opt_.container, LookUpJobUser(spec.uid, spec.gid)};
  if (opt_.shared_dev_shm) config.spec.private_dev_shm = false;
  GP_RETURN_IF_ERROR(WriteFileDurably(dir + "/" + kSpecFile, ShimConfigToJson(config), 0600,
                                      /*sync=*/false));

  std::string report;
  // A share capped through NVML needs a shim that can load it (nvml_memory.h).
  const std::vector<std::string>& shim = spec.nvml_library.empty() || opt_.nvml_shim_command.empty()
                                             ? opt_.shim_command
                                             : opt_.nvml_shim_command;
  GP_ASSIGN_OR_RETURN(Supervised s, SpawnShim(shim, dir, stdio, &report));
  s.dir = dir;
  std::lock_guard<std::mutex> lock(mu_);
  dirs_[spec.id] = dir;
  if (!spec.stdout_file.empty()) outputs_[spec.id] = {spec.stdout_file, spec.stderr_file};
  if (StartsWith(report, "started ")) {
    JobEvent e;
    e.id = spec.id;
    e.dir = dir;
    e.kind = JobEvent::Kind::kStarted;
    e.start_time_us = ParseInt64(report.substr(8)).value_or(opt_.clock->NowMicros());
    e.time_us = e.start_time_us;
    if (Result<ShimRecord> rec = ReadShimRecord(dir); rec.ok()) e.isolation = rec->isolation;
    Queue(std::move(e));
    jobs_[spec.id] = s;  // Queue woke Wait, whose next poll includes this shim
    return Status::Ok();
  }
  // The shim said "failed", or nothing at all: it ends (or has ended) by itself.
  int status = 0;
  while (::waitpid(s.shim_pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (s.pidfd >= 0) ::close(s.pidfd);
  Result<FinalStatus> final_status = ReadFinalStatus(dir);
  if (!final_status.ok()) {
    return Status::Internal("the job's supervisor ended without starting " + what +
                            " or saying why; see " + dir + "/" + kShimLogFile);
  }
  Queue(EventFromFinalStatus(*final_status, spec.id, dir));
  return Status::Ok();
}

Status ProcessLauncher::Cancel(const RunId& id) { return Signal(id, nullptr); }

Status ProcessLauncher::Stop(const RunId& id, const StopRequest& stop) { return Signal(id, &stop); }

Status ProcessLauncher::Signal(const RunId& id, const StopRequest* stop) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound(ToString(id) + " is not running on this node");
  // Read by the shim when the signal below reaches it. A plain cancel takes away one
  // left by a stop whose signal never came (an agent killed in between): else a user's
  // cancel would be read as that stop, the node's GPU memory watch's failing the job.
  if (stop != nullptr) {
    GP_RETURN_IF_ERROR(WriteStopRequest(it->second.dir, *stop));
  } else if (::unlink((it->second.dir + "/" + kStopFile).c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("{}: cannot remove its stop request: {}", ToString(id), std::strerror(errno));
  }
  // The shim turns TERM into TERM-then-KILL for the job's process group. If it already
  // ended, its final event is on its way and there is nothing to do.
  if (!ShimExited(it->second)) {
    SignalProcess(it->second.pidfd, it->second.shim_pid, SIGTERM);
  }
  return Status::Ok();
}

Status ProcessLauncher::SignalJob(const RunId& id, int sig, bool main_only) {
  if (sig < 1 || sig > 64) {
    return Status::InvalidArgument("signal " + std::to_string(sig) + ": give 1..64");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || ShimExited(it->second)) {
    return Status::NotFound(ToString(id) + " is not running on this node");
  }
  const Supervised& s = it->second;
  // The request's signal would kill a shim that does not wait for it.
  Result<ShimRecord> rec = ReadShimRecord(s.dir);
  if (!rec.ok() || !rec->signal_requests) {
    return Status::FailedPrecondition(
        ToString(id) +
        "'s supervisor was started by an older gpupool agent and takes no "
        "signal requests; signal the job's processes yourself (kill, or gpupool "
        "exec into it)");
  }
  // Queued with its value, so that requests in a row are each carried out (stop_request.h).
  siginfo_t info{};
  info.si_signo = SignalRequestSignal();
  info.si_code = SI_QUEUE;
  info.si_pid = ::getpid();
  info.si_uid = ::getuid();
  info.si_value.sival_int = EncodeSignalRequest(sig, main_only);
  const int rc =
      s.pidfd >= 0
          ? static_cast<int>(::syscall(SYS_pidfd_send_signal, s.pidfd, info.si_signo, &info, 0))
          : ::sigqueue(s.shim_pid, info.si_signo, info.si_value);
  if (rc != 0) {
    return Status::Unavailable(ToString(id) + ": cannot reach its supervisor (pid " +
                               std::to_string(s.shim_pid) + "): " + std::strerror(errno));
  }
  return Status::Ok();
}

JobEvent ProcessLauncher::FinalEvent(const RunId& id, pid_t shim_pid, const std::string& job_dir) {
  Result<FinalStatus> st = ReadFinalStatus(job_dir);
  if (st.ok()) return EventFromFinalStatus(*st, id, job_dir);
  JobEvent e;
  e.id = id;
  e.dir = job_dir;
  e.kind = JobEvent::Kind::kLost;
  e.time_us = opt_.clock->NowMicros();
  e.reason = "the job's supervisor (pid " + std::to_string(shim_pid) +
             ") ended without recording the job's status; it was probably killed";
  if (st.status().code() != StatusCode::kNotFound) e.reason += " (" + st.status().message() + ")";
  // The job itself may have outlived its supervisor: nobody would account for it.
  if (Result<ShimRecord> rec = ReadShimRecord(job_dir); rec.ok() && rec->job_pid > 0) {
    e.start_time_us = rec->start_time_us;
    Result<uint64_t> ticks = ProcessStartTicks(rec->job_pid);
    if (rec->boot_id == BootId() && ticks.ok() && *ticks == rec->job_start_ticks) {
      ::kill(-rec->job_pid, SIGKILL);
      e.reason += "; its remaining processes were killed";
    }
  }
  // A container job's container outlives its podman client (conmon keeps it).
  if (Result<ShimConfig> config = ReadShimConfig(job_dir);
      config.ok() && !config->spec.image.empty()) {
    const std::string name = ContainerName(config->spec);
    if (Result<bool> rm = RemoveContainer(config->container, name); !rm.ok()) {
      spdlog::warn("{}: {}", ToString(id), rm.status().message());
    } else if (*rm) {
      e.reason += "; its container " + name + " was removed";
    }
    // And the mount sources the shim staged for it (mount_source.h).
    if (Status rm = StagedMounts(job_dir + "/mounts").Clear(); !rm.ok()) {
      spdlog::warn("{}: {}", ToString(id), rm.message());
    }
  }
  // Its cgroups too (this also kills job processes that left the process group).
  if (Result<ShimRecord> rec = ReadShimRecord(job_dir); rec.ok() && rec->boot_id == BootId()) {
    if (Status rm = RemoveCgroupDirs(rec->cgroup_dirs, 2000); !rm.ok()) {
      spdlog::warn("{}: {}", ToString(id), rm.message());
    }
  }
  return e;
}

std::vector<JobEvent> ProcessLauncher::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Supervised& s = it->second;
    if (!ShimExited(s)) {
      ++it;
      continue;
    }
    if (s.our_child) {
      ::waitpid(s.shim_pid, nullptr, WNOHANG);
    } else {
      ReapIfOurs(s.dir);
    }
    Queue(FinalEvent(it->first, s.shim_pid, s.dir));
    if (s.pidfd >= 0) ::close(s.pidfd);
    it = jobs_.erase(it);
  }
  std::vector<JobEvent> out;
  out.swap(events_);
  return out;
}

std::vector<JobEvent> ProcessLauncher::Wait(int timeout_ms) {
  const int64_t deadline = opt_.clock->MonotonicMicros() + int64_t{timeout_ms} * 1000;
  while (true) {
    std::vector<JobEvent> events = Poll();
    const int64_t left_ms = (deadline - opt_.clock->MonotonicMicros()) / 1000;
    if (!events.empty() || left_ms <= 0) return events;
    // Wait on duplicates of the pidfds, so another thread's Poll may close the originals,
    // and on the wake eventfd, which Launch and Queue signal (a new shim to watch, an event).
    std::vector<struct pollfd> fds;
    if (wake_fd_ >= 0) fds.push_back({wake_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, s] : jobs_) {
        if (s.pidfd >= 0) {
          int dup = ::fcntl(s.pidfd, F_DUPFD_CLOEXEC, 0);
          if (dup >= 0) fds.push_back({dup, POLLIN, 0});
        }
      }
    }
    // Slices of at most a second: a safety net; wakes come through the eventfd.
    ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (wake_fd_ >= 0) {
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof count);  // non-blocking: drain
    }
    for (const struct pollfd& p : fds) {
      if (p.fd != wake_fd_) ::close(p.fd);
    }
  }
}

std::optional<JobEvent> ProcessLauncher::AdoptRunLocked(const std::string& dir,
                                                        const std::string& boot) {
  struct stat spec_st;
  if (::stat((dir + "/" + kSpecFile).c_str(), &spec_st) == 0 && spec_st.st_size == 0) {
    return std::nullopt;  // forgotten (Forget emptied the spec): only records and logs remain
  }
  Result<ShimConfig> config = ReadShimConfig(dir);
  if (!config.ok()) {
    if (config.status().code() != StatusCode::kNotFound) {
      spdlog::warn("job directory '{}' is unreadable, skipped: {}", dir, config.status().message());
    }
    return std::nullopt;  // forgotten: only logs remain
  }
  const RunId id = config->spec.id;
  if (jobs_.count(id) != 0 || launching_.count(id) != 0) return std::nullopt;
  dirs_[id] = dir;
  if (!config->spec.stdout_file.empty()) {
    outputs_[id] = {config->spec.stdout_file, config->spec.stderr_file};
  }
  if (Result<FinalStatus> st = ReadFinalStatus(dir); st.ok()) {
    ReapIfOurs(dir);
    JobEvent e = EventFromFinalStatus(*st, id, dir);
    e.adopted = true;
    return e;
  }
  JobEvent e;
  e.id = id;
  e.dir = dir;
  e.adopted = true;
  Result<ShimRecord> rec = ReadShimRecord(dir);
  if (!rec.ok() || rec->boot_id != boot) {
    e.kind = JobEvent::Kind::kLost;
    e.time_us = opt_.clock->NowMicros();
    if (rec.ok()) e.start_time_us = rec->start_time_us;
    e.reason = rec.ok() ? "the node restarted while the job ran"
                        : "the job's supervisor never recorded itself; the node or agent "
                          "stopped while the job was being launched";
    return e;
  }
  Supervised s;
  s.dir = dir;
  s.shim_pid = rec->pid;
  s.start_ticks = rec->start_ticks;
  s.pidfd = OpenVerifiedPidFd(rec->pid, rec->start_ticks);
  if (s.pidfd == -1 || ShimExited(s)) {
    ReapIfOurs(dir);
    JobEvent fin = FinalEvent(id, rec->pid, dir);
    fin.adopted = true;
    if (s.pidfd >= 0) ::close(s.pidfd);
    return fin;
  }
  e.kind = JobEvent::Kind::kStarted;
  e.start_time_us = rec->start_time_us;
  e.time_us = rec->start_time_us != 0 ? rec->start_time_us : opt_.clock->NowMicros();
  e.isolation = rec->isolation;
  jobs_[id] = s;
  return e;
}

Result<std::vector<JobEvent>> ProcessLauncher::Adopt() {
  Status listed;
  const std::vector<std::string> dirs = ListRunDirs(opt_.state_dir + "/jobs", &listed);
  GP_RETURN_IF_ERROR(listed);
  const std::string boot = BootId();
  std::vector<JobEvent> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& dir : dirs) {
    if (std::optional<JobEvent> e = AdoptRunLocked(dir, boot)) {
      if (auto o = outputs_.find(e->id); o != outputs_.end()) {
        e->stdout_file = o->second.first;
        e->stderr_file = o->second.second;
      }
      out.push_back(std::move(*e));
    }
  }
  return out;
}

Status ProcessLauncher::Forget(const RunId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (jobs_.count(id) != 0 || launching_.count(id) != 0) {
    return Status::FailedPrecondition(ToString(id) +
                                      " still runs; cancel it and wait for its final event");
  }
  // Emptying the spec (its command line and variables go) marks the run forgotten. The
  // files are not deleted: on a file system without a journal every recently deleted
  // inode slows each later file creation (ext4 skips them), and a job's small records
  // cost less kept beside its logs than deleted.
  auto known = dirs_.find(id);
  const std::string dir = known != dirs_.end() ? known->second : JobDir(opt_.state_dir, id);
  const std::string spec = dir + "/" + kSpecFile;
  if (::truncate(spec.c_str(), 0) != 0 && errno != ENOENT) {
    return Status::Unavailable("cannot empty '" + spec + "': " + std::strerror(errno));
  }
  if (known != dirs_.end()) dirs_.erase(known);
  outputs_.erase(id);
  return Status::Ok();
}

std::vector<RunId> ProcessLauncher::Running() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RunId> ids;
  for (const auto& [id, s] : jobs_) ids.push_back(id);
  return ids;
}

}  // namespace

std::unique_ptr<Launcher> NewProcessLauncher(LauncherOptions options) {
  return std::make_unique<ProcessLauncher>(std::move(options));
}

}  // namespace gpupool::agent
