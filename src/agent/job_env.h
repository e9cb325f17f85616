// The environment a job's command sees: exactly the user's variables, plus the
// variables that tell vendor runtimes which GPUs are the job's, plus login defaults.
//
// Rules, in order:
//   1. Start from LaunchSpec::env.
//   2. Fill HOME, USER, LOGNAME, SHELL and PATH when the user did not set them.
//   3. Set (overriding the user) GPUPOOL_JOB_ID (the pool's job id, also for each task
//      of a gang), GPUPOOL_ATTEMPT, LaunchSpec::pool_env (a gang's rendezvous),
//      GPUPOOL_GPU_MILLI and GPUPOOL_GPU_ENFORCEMENT (when GPUs were granted: "exclusive"
//      for whole GPUs, else LaunchSpec::share_enforcement), GPUPOOL_GPU_MEM_LIMIT_BYTES
//      (a share's memory cap), under MPS CUDA_MPS_PIPE_DIRECTORY,
//      CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (the share in percent, rounded up) and
//      CUDA_MPS_PINNED_DEVICE_MEM_LIMIT ("0=<MiB>M"); the user's own CUDA_MPS_* variables
//      are removed, so no job names another daemon or widens its cap through them;
//      for a share that is not a MIG instance, where the user set none of them, the
//      frameworks' caps: XLA_PYTHON_CLIENT_MEM_FRACTION and XLA_CLIENT_MEM_FRACTION (JAX;
//      the share's fraction, "0.250"), CUPY_GPU_MEMORY_LIMIT (its memory in bytes) and
//      TF_FORCE_GPU_ALLOW_GROWTH=true (TensorFlow);
//      HSA_CU_MASK="0:<LaunchSpec::cu_mask>" for an AMD share (replacing the user's; an
//      advisory mask, docs/sharing.md "AMD"); and
//      the visibility variables:
//        NVIDIA grants: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES = UUIDs
//        AMD grants:    ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES = UUIDs (both
//                       accept UUIDs; with a grant lacking a UUID, ROCR gets the
//                       indices and HIP the positions 0..n-1 within what ROCR shows)
//        no GPU at all: CUDA_VISIBLE_DEVICES="", NVIDIA_VISIBLE_DEVICES=void,
//                       ROCR_VISIBLE_DEVICES="" and HIP_VISIBLE_DEVICES="", so that
//                       runtimes see nothing (the cgroup, where present, enforces it)
//      A visibility variable the user set for a vendor without grants is removed, so
//      no job can widen its own view.
//   4. With LaunchSpec::env_dir (a conda env or virtualenv directory): PATH gets
//      ENV_DIR/bin first, GPUPOOL_ENV_DIR=ENV_DIR, CONDA_PREFIX=ENV_DIR when
//      ENV_DIR/conda-meta exists, VIRTUAL_ENV=ENV_DIR when ENV_DIR/pyvenv.cfg exists.
// Container jobs (BuildContainerEnvironment) get rules 1 and 3 and USER/LOGNAME, but no
// HOME, SHELL or PATH from the host: the image supplies those.
// Thread-safe; rule 4 looks at the file system, everything else is pure.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/launcher.h"

namespace gpupool::agent {

struct LoginDefaults {
  std::string home = "/";
  std::string shell = "/bin/sh";
  std::string path = "/usr/local/bin:/usr/bin:/bin";
};

std::map<std::string, std::string> BuildJobEnvironment(const LaunchSpec& spec,
                                                       const LoginDefaults& defaults);

// The job's user as the passwd and group databases know it: home, shell and every group
// (getgrouplist). The launcher looks it up in the agent, whose NSS modules stay loaded,
// and passes it in the spec (ShimConfig::user), so that no shim loads them (0.4 ms of CPU
// per job with `files systemd`, docs/benchmarks.md); a shim given none runs the job as a
// user without a passwd entry. Defined in job_user.cc, which the shim does not link.
struct JobUser {
  bool known = false;  // false: no passwd entry (HOME=/, only the spec's gid)
  std::string home;    // empty: the passwd entry has none
  std::string shell;
  std::vector<uint32_t> groups;  // the spec's gid first when not known
  friend bool operator==(const JobUser&, const JobUser&) = default;
};
JobUser LookUpJobUser(uint32_t uid, uint32_t gid);

std::map<std::string, std::string> BuildContainerEnvironment(const LaunchSpec& spec);

// "KEY=VALUE" strings for execve.
std::vector<std::string> EnvironmentStrings(const std::map<std::string, std::string>& env);

}  // namespace gpupool::agent
