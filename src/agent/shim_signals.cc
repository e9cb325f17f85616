// The shim's signals to its job: a stop's SIGTERM, SIGCONT and, after the grace,
// SIGKILL; Slurm's --signal warning; the node's own stops; and the job's processes outside
// its process group (its cgroups', or the supervisor's descendants without cgroups).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <ctime>

#include "agent/cgroup.h"
#include "agent/job_files.h"
#include "agent/proc_util.h"
#include "agent/shim_internal.h"
#include "agent/stop_request.h"

namespace gpupool::agent::shim_internal {

// After `podman stop --time GRACE` the container should be gone; this much later the
// shim kills it (`podman kill`) and its podman client itself.
constexpr int64_t kContainerKillSlackS = 5;

void Shim::BeginStop(bool cancel, int64_t grace_s) {
  if (stopping_) return;
  stopping_ = true;
  grace_s_ = grace_s;
  if (cancel) {
    final_.cancelled = true;
  } else {
    final_.timed_out = true;
  }
  SendStop(cancel ? "cancel" : "time limit");
}

// The stop's signals (stopping_ and grace_s_ set): SIGTERM now (a terminal's job: SIGHUP,
// SIGTERM a second later), or podman stop; SIGKILL once the grace is over (Supervise).
void Shim::SendStop(const char* what) {
  if (container_) {
    ShimLog("%s: podman stop --time %lld %s", what, static_cast<long long>(grace_s_),
            container_name_.c_str());
    StartHelper({"stop", "--time", std::to_string(grace_s_), container_name_}, "podman stop");
    kill_at_mono_ = MonoMicros() + (grace_s_ + kContainerKillSlackS) * 1'000'000;
    return;
  }
  kill_at_mono_ = MonoMicros() + grace_s_ * 1'000'000;
  if (config_.spec.tty) {
    // Its terminal hangs up first, as when an ssh connection drops (an interactive shell
    // ignores SIGTERM but not SIGHUP); SIGTERM follows a second later.
    ShimLog("%s: SIGHUP to process group %d", what, static_cast<int>(job_pid_));
    ::kill(-job_pid_, SIGHUP);
    ::kill(-job_pid_, SIGCONT);
    term_at_mono_ = std::min(MonoMicros() + 1'000'000, kill_at_mono_);
    return;
  }
  // SIGCONT after it, as Slurm does: a stopped process (kill -STOP) runs its handler.
  const std::string to = SignalJob(SIGTERM);
  SignalJob(SIGCONT);
  ShimLog("%s: SIGTERM to process group %d%s, SIGCONT after it", what, static_cast<int>(job_pid_),
          to.c_str());
}

// The process group, and the job's other processes: a process the job started in a
// session of its own (setsid) has left the group but not the job (SignalOthers). A
// container's are podman's to signal.
std::string Shim::SignalJob(int sig) {
  ::kill(-job_pid_, sig);
  if (container_) return "";
  const int sent = SignalOthers(sig, job_pid_);
  if (sent == 0 && !HasOwnCgroups()) return "";
  return " and " + std::to_string(sent) + " other processes of " +
         (HasOwnCgroups() ? "its cgroups" : "the job");
}

bool Shim::HasOwnCgroups() const { return cgroup_ != nullptr && !cgroup_->dirs().empty(); }

// The job's processes outside process group `skip_group` (0: none): those of its cgroups;
// without cgroups of its own (not root, isolation disabled, cgroup v1 with nothing to
// limit) the supervisor's descendants, which every process the job started stays (the
// supervisor is their subreaper). An exec session joined to its task's cgroups signals
// its own descendants, not the task's processes. Signal 0 only counts.
int Shim::SignalOthers(int sig, pid_t skip_group) {
  if (HasOwnCgroups()) return cgroup_->SignalAll(sig, skip_group);
  return SignalDescendants(sig, skip_group);
}

// The node's own stop with a grace (the lease's warning): the job is told as by a cancel
// and killed after `grace_s` unless KillForNode comes first; it fails with `reason`. A
// stop already under way keeps what it is.
void Shim::WarnForNode(const std::string& reason, protocol::KillCause cause, int64_t grace_s) {
  if (stopping_ || killed_) return;
  stopping_ = true;
  node_stop_reason_ = reason;
  node_stop_cause_ = cause;
  grace_s_ = grace_s;
  ShimLog("stopped by the node: %s", reason.c_str());
  if (config_.spec.preemptible) WriteDeadlineFile(WallMicros() / 1'000'000 + grace_s);
  SendStop("node stop");
}

// Before the SIGTERM, so that a job reading it on the signal finds it. In place: a
// container has the file itself mounted, and a new inode would not reach it.
void Shim::WriteDeadlineFile(int64_t deadline_s) {
  const std::string path = args_.job_dir + "/" + kPreemptDeadlineFile;
  // Unlocked: the job may hold a lock on its file, which must not delay its stop. One
  // write of a few bytes into an empty file: a reader sees it whole or not at all.
  Status st = RewriteFileLocked(path, std::to_string(deadline_s) + "\n", /*lock=*/false);
  if (!st.ok()) ShimLog("%s", st.message().c_str());
}

// The node's own stop: the job is killed now (the supervision loop sends SIGKILL, or
// kills the container, at once) and fails with `reason`; a stop already under way keeps
// what it is (a cancel stays a cancel) and only loses the rest of its grace.
void Shim::KillForNode(const std::string& reason, protocol::KillCause cause) {
  if (killed_) return;
  ShimLog("stopped by the node: %s", reason.c_str());
  if (!stopping_) {
    stopping_ = true;
    node_stop_reason_ = reason;
    node_stop_cause_ = cause;
  }
  grace_s_ = 0;
  kill_at_mono_ = MonoMicros();
}

void Shim::SendWarningSignal() {
  const long long before =
      static_cast<long long>(std::min(config_.spec.warn_time_s, config_.spec.time_limit_s));
  SendJobSignal(config_.spec.warn_signal, config_.spec.warn_main_only, "--signal",
                ", " + std::to_string(before) + " s before the time limit");
}

// `sig` to the job, which goes on: to every process of it, or to its main process only
// (Slurm's B: and --batch). `what` starts the log line and `when` ends it.
void Shim::SendJobSignal(int sig, bool main_only, const char* what, const std::string& when) {
  // Every process of a container: podman kill reaches its PID 1 alone, whose init
  // (catatonit) passes it on to the main process only, and what that one started never
  // got it. Its init is skipped, as it would pass the signal on a second time.
  const int sent = container_ && !main_only ? SignalContainerProcesses(sig, config_.spec.init) : 0;
  if (sent > 0) {
    ShimLog("%s: %s to the %d processes of container %s%s", what, SignalName(sig).c_str(), sent,
            container_name_.c_str(), when.c_str());
  } else if (container_) {
    // podman signals the container's PID 1 (its init passes it on to the main process).
    ShimLog("%s: %s to container %s%s", what, SignalName(sig).c_str(), container_name_.c_str(),
            when.c_str());
    StartHelper({"kill", "--signal", std::to_string(sig), container_name_}, "podman kill");
  } else if (main_only) {
    ShimLog("%s: %s to process %d (the main process only)%s", what, SignalName(sig).c_str(),
            static_cast<int>(job_pid_), when.c_str());
    // The main process is our child and not reaped before ReapChildren: its pid is its own.
    ::kill(job_pid_, sig);
  } else {
    const std::string to = SignalJob(sig);
    ShimLog("%s: %s to process group %d%s%s", what, SignalName(sig).c_str(),
            static_cast<int>(job_pid_), to.c_str(), when.c_str());
  }
}

// A signal request from the launcher (stop_request.h): `value` carries the signal. Once
// the job is being killed there is nothing left to tell it.
// A stop (SIGTERM) and signal requests pending together: the lowest-numbered signal is
// taken first, SIGTERM before the real-time request, though the agent sent the request
// first (AgentLoop::ApplyOrders). The requests already queued are carried out before the
// stop.
void Shim::TakeSignalRequests() {
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, SignalRequestSignal());
  const struct timespec now = {0, 0};
  siginfo_t info;
  while (::sigtimedwait(&only, &info, &now) == SignalRequestSignal()) OnSignalRequest(info);
}

void Shim::OnSignalRequest(const siginfo_t& info) {
  int sig = 0;
  bool main_only = false;
  if (info.si_code != SI_QUEUE || !DecodeSignalRequest(info.si_value.sival_int, &sig, &main_only)) {
    ShimLog("ignored a signal request without a valid signal (from pid %d)",
            static_cast<int>(info.si_pid));
    return;
  }
  if (killed_) {
    ShimLog("gpupool cancel --signal: %s not sent, the job is being killed",
            SignalName(sig).c_str());
    return;
  }
  if (stopping_ && (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)) {
    // Frozen, it could not run its SIGTERM handler: SIGKILL at the grace's end instead of
    // a clean stop (red team 8, finding 4).
    ShimLog(
        "gpupool cancel --signal: %s not sent, the job is being stopped (its grace is for "
        "its SIGTERM handler)",
        SignalName(sig).c_str());
    return;
  }
  SendJobSignal(sig, main_only, "gpupool cancel --signal", "");
}

// A stopped job's main process ended within its grace, but the job may still have
// processes outside its process group: the command of `gpupool run` and `gpupool exec`
// sessions, which joined the task's cgroups, or children that left the group. The stop's
// SIGTERM reached them too (SignalJob); they get the rest of the grace to end, before
// Finish's removal of the cgroups kills them: a run's command at its time limit was
// killed at once, a held task ending on its SIGTERM. The node's stop (KillForNode) still
// ends the wait at once.
void Shim::StopJoinedProcesses() {
  // Signal 0 only counts them (skipping no group).
  if (!stopping_ || killed_ || container_ || SignalOthers(0, 0) == 0) return;
  ShimLog("waiting for the processes left in the job; SIGKILL once the grace is over");
  const sigset_t set = ShimSignals();
  while (SignalOthers(0, 0) > 0) {
    CheckLease();
    const int64_t left_us = kill_at_mono_ - MonoMicros();
    if (left_us <= 0) return;
    // Polled: cgroup v1 has no event for its last process leaving.
    const int64_t wait_us = std::min<int64_t>(left_us, 50'000);
    struct timespec ts = {0, static_cast<long>(wait_us * 1000)};
    siginfo_t info;
    const int sig = ::sigtimedwait(&set, &info, &ts);
    if (sig == SIGTERM || sig == SIGINT) OnStopSignal();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // orphans we are the subreaper of
    }
  }
}

// Without cgroups of its own, what a job left running when its main process ended (a
// daemon it started, a worker in a session of its own) would outlive it and hold its
// GPUs: it is killed, as removing the job's cgroups kills it. An exec session's too, with
// or without its task's cgroups joined (a srun step's processes end with the step): it
// is the subreaper of all of them, and without cgroups nothing else would ever find them
// (its task's supervisor does not see them). mpirun's daemons started through one
// (orted, prted, hydra_pmi_proxy) stay in the foreground as its main process.
void Shim::KillLeftovers() {
  const int left = SignalDescendants(SIGKILL, 0);
  if (left == 0) return;
  ShimLog("SIGKILL to %d processes the job left running", left);
  // They may fork while they die: again until none is left (bounded: the job has ended).
  const int64_t until = MonoMicros() + 5'000'000;
  do {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {  // orphans we are the subreaper of
    }
    struct timespec ts = {0, 10'000'000};
    ::nanosleep(&ts, nullptr);
  } while (SignalDescendants(SIGKILL, 0) > 0 && MonoMicros() < until);
}

}  // namespace gpupool::agent::shim_internal
