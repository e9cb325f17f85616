// A process job's own /dev/shm (docs/security.md, "Shared memory and /dev/shm"): the shim
// starts the job in a mount namespace of its own, a slave of the host's (nothing mounted
// in it propagates back), with a fresh tmpfs on /dev/shm (mode 1777, size= the job's
// memory limit when it has one). The job's processes touch its pages first, so they are
// charged to the job's memory cgroup; the namespace, and with it the tmpfs and all it
// holds, goes when the job's last process (or exec session) exits. The shim itself goes
// back to the host's namespace once the job's process is started, so it holds nothing.
// An exec session (gpupool exec) enters its task's namespace the same way.
//
// /tmp is left shared: a job's working directory, env_dir or output files are often under
// /tmp, and a fresh /tmp would hide them.
//
// Needs root (CAP_SYS_ADMIN); the callers must be single-threaded (the shim).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace gpupool::agent {

// What the job's environment says: GPUPOOL_DEV_SHM=private or shared.
inline constexpr char kDevShmVariable[] = "GPUPOOL_DEV_SHM";

// The tmpfs options of a job's /dev/shm: "mode=1777", and ",size=N" for a memory limit N.
std::string DevShmMountOptions(uint64_t memory_bytes);

// The caller's mount namespace before EnterPrivateDevShm or EnterMountNamespaceOf moved
// it; Return() (or the destructor) goes back. Children started in between stay.
class MountNamespaceSwitch {
 public:
  // `home_fd`: the namespace to go back to; `cwd_fd`: the working directory to go back
  // to (setns moves it to the namespace's root), or -1. Takes both.
  MountNamespaceSwitch(int home_fd, int cwd_fd) : home_fd_(home_fd), cwd_fd_(cwd_fd) {}
  MountNamespaceSwitch(const MountNamespaceSwitch&) = delete;
  MountNamespaceSwitch& operator=(const MountNamespaceSwitch&) = delete;
  ~MountNamespaceSwitch();
  Status Return();

 private:
  int home_fd_;
  int cwd_fd_;
};

// Moves the caller into a new mount namespace, made a slave of the one it leaves, with a
// fresh tmpfs on `dir` (DevShmMountOptions, nosuid, nodev). On failure the caller is where
// it was and the error says why (not root, no mount namespaces, ...).
Result<std::unique_ptr<MountNamespaceSwitch>> EnterPrivateDevShm(const std::string& dir,
                                                                 uint64_t memory_bytes);

// Moves the caller into the mount namespace of process `pid`, which must have started at
// `start_ticks` (proc_util.h: not a reused pid).
Result<std::unique_ptr<MountNamespaceSwitch>> EnterMountNamespaceOf(pid_t pid,
                                                                    uint64_t start_ticks);

// Whether the caller's mount namespace is the one of process `pid` (false when unknown).
bool SameMountNamespace(pid_t pid);

// The agent's check at its start: can a job get its own /dev/shm here? Tries it in a
// short-lived child (raw system calls only: safe in a threaded program). Ok, or why not.
Status ProbePrivateDevShm();

}  // namespace gpupool::agent
