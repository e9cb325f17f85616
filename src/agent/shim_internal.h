// The shim's pieces shared by its source files (shim.cc: the job's life; shim_container.cc:
// a container job's podman command, a share's parent cgroup, its mounts and its exit). Not
// an interface: only the shim's own files include it.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/job_files.h"
#include "agent/job_mounts.h"
#include "agent/job_process.h"
#include "agent/launcher.h"
#include "agent/mount_source.h"
#include "agent/node_lease.h"
#include "agent/shim.h"
#include "common/status.h"

namespace gpupool::agent::shim_internal {

int64_t WallMicros();
int64_t MonoMicros();
// ShimNote keeps a routine line in memory; ShimLog writes a line worth keeping to
// DIR/shim.log, after the notes before it (shim.cc).
void ShimNote(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void ShimLog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string HostName();
// The signals the shim waits for with sigtimedwait (blocked from its start).
sigset_t ShimSignals();

class Shim {
 public:
  explicit Shim(ShimArgs args) : args_(std::move(args)) {}
  int Run();

 private:
  Status Prepare();
  Status PrepareContainer(const std::vector<gid_t>& groups);
  // A "dmem" share's memory cap in `req`: the dmem region's, or NVML's (LaunchSpec).
  void GpuMemoryCap(CgroupRequest* req) const;
  // "the kernel's dmem controller" or "NVML's per-cgroup memory limits".
  const char* CapMechanism() const;
  Status DmemCapInPlace() const;
  Result<std::string> ContainerParent(std::string* missing);
  void AddOomReason();
  Result<std::vector<BindMount>> StageMountSources(const LaunchSpec& spec,
                                                   const std::vector<gid_t>& groups);
  Result<std::string> MakePreemptDeadlineFile();
  Status OpenStreams(const LaunchSpec& spec, bool root);
  Status WriteScript(bool root);
  void CloseRelayedStreams();
  Status StartJob();
  // Moves the shim into the job's mount namespace (a new one with its own /dev/shm, or an
  // exec session's task's) and says so in the job's environment and isolation note; null
  // when it stays where it is (shim_mounts.cc).
  std::unique_ptr<MountNamespaceSwitch> EnterJobMounts();
  void SetJobVariable(const std::string& name, const std::string& value);
  void StartHelper(const std::vector<std::string>& podman_args, const char* what);
  void MapContainerExit();
  void Supervise();
  bool ReapChildren();  // true once the job's main process ended
  void StopJoinedProcesses();
  void BeginStop(bool cancel, int64_t grace_s);
  // Slurm's --signal: spec.warn_signal to the job, spec.warn_time_s before its time limit.
  void SendWarningSignal();
  void SendJobSignal(int sig, bool main_only, const char* what, const std::string& when);
  // gpupool cancel --signal: a signal request (stop_request.h) the shim was sent.
  void OnSignalRequest(const siginfo_t& info);
  // The signal requests queued behind a stop's SIGTERM, carried out first.
  void TakeSignalRequests();
  void SendStop(const char* what);
  // `sig` to the job's process group and to every process of its cgroups (shim.cc); says
  // " and N processes of its cgroups" for the log.
  std::string SignalJob(int sig);
  bool HasOwnCgroups() const;
  int SignalOthers(int sig, pid_t skip_group);
  void KillLeftovers();
  void WriteDeadlineFile(int64_t deadline_s);
  // The node's own stop: its GPU memory watch's (stop_request.h) or its lease's (`cause`).
  void KillForNode(const std::string& reason,
                   protocol::KillCause cause = protocol::KillCause::kGpuMemWatch);
  void WarnForNode(const std::string& reason, protocol::KillCause cause, int64_t grace_s);
  // The node lease (node_lease.h; spec.lease_file set): read at the start, again
  // spec.lease_grace_s before its deadline (the job is told to stop unless it was renewed:
  // WarnForNode) and once its deadline has passed; fences the job (KillForNode,
  // kNodeLease) unless it was renewed in time. LeaseWaitMicros: how long the supervision
  // may wait before the next check.
  void CheckLease();
  int64_t LeaseWarnMicros() const;
  int64_t LeaseWaitMicros() const;
  std::string LeaseReason(int64_t now, bool warning) const;
  void OnStopSignal();
  void Report(const std::string& line);
  int Finish();
  bool RecordStatus(bool sync);  // writes status.json, trying again while it fails
  void SetExitReason();

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
  int64_t grace_s_ = 0;       // the stop's grace: the spec's, or a preemption's (stop_request.h)
  int64_t term_at_mono_ = 0;  // a terminal job: SIGTERM this long after the hangup
  std::string node_stop_reason_;  // why the node stopped the job itself (KillForNode)
  protocol::KillCause node_stop_cause_ = protocol::KillCause::kGpuMemWatch;
  std::optional<NodeLease> lease_;  // the lease held; nullopt: none read (yet)
  bool lease_noted_ = false;        // an unreadable lease was said in shim.log
  bool lease_warned_ = false;       // told to stop before the lease runs out (lease_grace_s)
  bool lease_fenced_ = false;       // the lease ran out: the job was killed for it
  // Container jobs: the job process is the podman client; the container is reached by name.
  bool container_ = false;
  std::string container_name_;
  std::string container_reason_;   // from podman's exit status (MapPodmanExit)
  bool container_signal_ = false;  // final_.signal is the container's (128+N), not the client's
  std::unique_ptr<StagedMounts> staged_;  // the mount sources podman is given (root only)
  std::set<pid_t> helpers_;               // podman stop/kill commands in flight
  pid_t stop_pid_ = 0;
  int64_t stop_retry_at_mono_ = 0;
};

}  // namespace gpupool::agent::shim_internal
