// The shim's part in a process job's own /dev/shm (job_mounts.h, docs/security.md).
#include <unistd.h>

#include "agent/job_mounts.h"
#include "agent/shim_internal.h"

namespace gpupool::agent::shim_internal {

void Shim::SetJobVariable(const std::string& name, const std::string& value) {
  const std::string prefix = name + "=";
  std::erase_if(plan_.env, [&](const std::string& e) { return e.starts_with(prefix); });
  plan_.env.push_back(prefix + value);
}

std::unique_ptr<MountNamespaceSwitch> Shim::EnterJobMounts() {
  const LaunchSpec& spec = config_.spec;
  std::unique_ptr<MountNamespaceSwitch> mounts;
  std::string note;
  if (spec.join_job_pid > 0) {
    // An exec session sees what its task sees: the task's /dev/shm, when it has its own.
    const pid_t task = static_cast<pid_t>(spec.join_job_pid);
    if (SameMountNamespace(task)) {
      note = "/dev/shm shared: the task has none of its own";
    } else {
      Result<std::unique_ptr<MountNamespaceSwitch>> in =
          EnterMountNamespaceOf(task, spec.join_job_start_ticks);
      if (in.ok()) {
        mounts = std::move(*in);
        note = "/dev/shm private: the task's";
      } else {
        note = "/dev/shm shared: cannot enter the task's mount namespace: " + in.status().message();
        ShimLog("%s", note.c_str());
      }
    }
  } else if (!spec.private_dev_shm) {
    note = "/dev/shm shared: the agent runs with --shared-dev-shm";
  } else if (::geteuid() != 0) {
    note = "/dev/shm shared: the agent does not run as root";
  } else {
    Result<std::unique_ptr<MountNamespaceSwitch>> own =
        EnterPrivateDevShm("/dev/shm", spec.memory_bytes);
    if (own.ok()) {
      mounts = std::move(*own);
      note = "/dev/shm private (tmpfs " + DevShmMountOptions(spec.memory_bytes) + ")";
    } else {
      note = "/dev/shm shared with other jobs: " + own.status().message();
    }
  }
  SetJobVariable(kDevShmVariable, mounts != nullptr ? "private" : "shared");
  // A note, not a line of its own in shim.log: the job's environment and isolation note
  // say it, and the agent said it once at its start (a file per job costs an inode).
  ShimNote("%s", note.c_str());
  final_.isolation += (final_.isolation.empty() ? "" : "; ") + note;
  record_.isolation = final_.isolation;
  return mounts;
}

}  // namespace gpupool::agent::shim_internal
