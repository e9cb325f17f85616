// JobCgroup: the cgroups that isolate one job attempt, under cgroup v1 (the `devices`,
// `cpu` and `memory` hierarchies, ROOT/<controller>/gpupool/LEAF) or cgroup v2
// (ROOT/gpupool/LEAF), where LEAF is job-<job>-<task>.<attempt>-<instance> (run_id.h;
// agents before it named it job-<key>-<attempt>-<instance>, and such leaves may still
// exist): the instance (the shim's pid) keeps two agents on one host, as in tests, from
// sharing a cgroup.
//
// What it enforces:
//   v1: devices.deny "c MAJ:MIN rwm" for every denied device node; cpu.cfs_quota_us /
//       cfs_period_us from cpu_milli; memory.limit_in_bytes.
//   v2: cpu.max and memory.max; denied device nodes through an eBPF device program
//       attached to the job's cgroup (device_filter.h).
// Isolation is best effort: when not root, when ROOT is not a cgroup file system or a
// write fails, the job still runs and note() says what was skipped. Not thread-safe;
// the shim owns one per job.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/nvml_memory.h"
#include "agent/run_id.h"
#include "common/status.h"

namespace gpupool::agent {

struct CgroupRequest {
  RunId id;  // a task's run: exec sessions join their task's cgroups
  std::vector<std::string> deny_device_nodes;
  int64_t cpu_milli = 0;      // 0 = no limit
  uint64_t memory_bytes = 0;  // 0 = no limit
  std::string instance;       // appended to the leaf name when not empty
  // A GPU share held by the kernel's dmem controller (dmem.h; cgroup v2 only): at most
  // dmem_bytes of dmem_region. Empty = none.
  std::string dmem_region;
  uint64_t dmem_bytes = 0;
  // Or held by NVML's per-cgroup limits (nvml_memory.h; cgroup v2 only): dmem_bytes, soft
  // and hard, of GPU nvml_gpu_uuid through the libnvidia-ml nvml_library, set by
  // `nvml_limit` (null: this binary cannot load NVML, and the cap is not set). Empty = none.
  std::string nvml_library;
  std::string nvml_gpu_uuid;
  NvmlMemoryLimitFn nvml_limit = nullptr;
  // The parent of a container's podman cgroups (shim_container.cc): under v1 the leaf is
  // made in every mounted hierarchy, as podman's cgroupfs manager makes the container's
  // cgroups below it in each, so the job's processes carry the leaf's name in
  // /proc/PID/cgroup and every hierarchy's leaf is removed with the job.
  bool container_parent = false;
};

class JobCgroup {
 public:
  // Creates and configures the cgroups under `root` (empty = isolation disabled).
  static std::unique_ptr<JobCgroup> Create(const std::string& root, const CgroupRequest& request);
  // Joins the cgroups another job made (`dirs`, from its shim record): `gpupool exec`
  // runs in its task's cgroups, under the task's limits and device rules. Destroy()
  // leaves them to their owner. devices_enforced() is false when a directory is gone (or
  // is not a gpupool job cgroup), so a caller that requires isolation fails closed.
  static std::unique_ptr<JobCgroup> Join(const std::vector<std::string>& dirs);
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  // Moves the calling process into the job's cgroups. Async-signal-safe (only write(2)
  // on descriptors opened by Create), so a freshly forked child may call it before exec.
  // The caller must be single-threaded (under v1 only the calling thread is moved, which
  // avoids a global kernel lock). Returns false when a move failed.
  bool JoinFromChild() const;

  // Kills whatever still runs in the cgroups and in any cgroup below them (podman's, for a
  // container share's capped parent) and removes them all, deepest first, waiting up to
  // `timeout_ms` for them to empty. The note of what happened is kept.
  Status Destroy(int timeout_ms);

  // Sends `sig` once to every process in the cgroups and any cgroup below them; 0 only
  // asks. Returns how many there were: a stop's SIGTERM reaches what joined the job's
  // cgroups (exec sessions, a `gpupool run` command) as it reaches the job's own.
  int Signal(int sig) const;

  // Whether the kernel's OOM killer killed a process of the job for reaching its memory
  // limit. Call before Destroy().
  bool OomKilled() const;

  // "cgroup v1: devices denied 2, cpu 1500m, memory 1073741824 B" or why it was skipped.
  const std::string& note() const { return note_; }
  // Every requested device node is denied (true when none was requested).
  bool devices_enforced() const { return devices_enforced_; }
  // The requested GPU memory cap (dmem or NVML) is in place (true when none was requested).
  bool dmem_enforced() const { return dmem_enforced_; }
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  JobCgroup() = default;
  void SetUpV1(const std::string& root, const CgroupRequest& request);
  void MakeV1Parents(const std::string& root, const std::string& leaf,
                     std::vector<std::string>* applied);
  void SetUpV2(const std::string& root, const CgroupRequest& request);
  // The request's GPU memory cap on the v2 leaf `dir` (dmem files or NVML).
  void CapGpuMemory(const std::string& root, const std::string& dir, const CgroupRequest& request,
                    std::vector<std::string>* applied);
  bool MakeDir(const std::string& parent, const std::string& leaf, std::string* dir);
  void WatchOomV1(const std::string& dir);
  void CloseOomWatch();
  void OpenProcs(const std::string& dir, bool v1);

  std::vector<std::string> dirs_;  // created leaf directories
  std::string oom_events_;         // memory.oom_control (v1) or memory.events (v2)
  // A v1 container parent's OOM notifications (WatchOomV1): an eventfd registered on its
  // memory.oom_control (kept open), and its memory.failcnt.
  int oom_eventfd_ = -1;
  int oom_control_fd_ = -1;
  std::string oom_failcnt_;
  struct JoinFd {
    int fd;  // v1 `tasks` (write "0": this thread) or cgroup.procs (write the pid)
    bool write_zero;
  };
  std::vector<JoinFd> join_fds_;  // one per created cgroup, opened for writing
  std::vector<std::string> notes_;
  std::string note_;
  bool devices_enforced_ = false;
  bool dmem_enforced_ = true;
};

// For a job whose shim died: kills whatever still runs in `dirs` (JobCgroup::dirs() as
// the shim recorded them) and removes them. Paths that are not job cgroups of gpupool
// are ignored; missing ones are fine.
Status RemoveCgroupDirs(const std::vector<std::string>& dirs, int timeout_ms);

// "c 195:3 rwm" for a character device node (b for block); an error when the path does
// not exist or is not a device node.
Result<std::string> DeviceRuleFor(const std::string& node);

// cfs quota in microseconds for `cpu_milli` thousandths of a CPU per `period_us`,
// never below the kernel's minimum of 1000.
int64_t CpuQuotaMicros(int64_t cpu_milli, int64_t period_us);

}  // namespace gpupool::agent
