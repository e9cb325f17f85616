#include "agent/job_env.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "agent/mps.h"

namespace gpupool::agent {
namespace {

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (!out.empty()) out += ',';
    out += p;
  }
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void ApplyEnvDir(const std::string& dir, std::map<std::string, std::string>& env) {
  std::string root = dir;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  const std::string& path = env["PATH"];
  env["PATH"] = path.empty() ? root + "/bin" : root + "/bin:" + path;
  env["GPUPOOL_ENV_DIR"] = root;
  if (Exists(root + "/conda-meta")) env["CONDA_PREFIX"] = root;
  if (Exists(root + "/pyvenv.cfg")) env["VIRTUAL_ENV"] = root;
}

// Rule 3's share variables (docs/sharing.md): the enforcement mode, the memory cap, an AMD
// share's CU mask and, under MPS, the client's daemon, thread percentage and pinned memory
// limit on its one visible device (0).
void SetShareLimits(const LaunchSpec& spec, int milli, std::map<std::string, std::string>& env) {
  if (spec.share_enforcement.empty()) {
    env["GPUPOOL_GPU_ENFORCEMENT"] = "exclusive";
    return;
  }
  env["GPUPOOL_GPU_ENFORCEMENT"] = spec.share_enforcement;
  if (spec.share_memory_bytes > 0) {
    env["GPUPOOL_GPU_MEM_LIMIT_BYTES"] = std::to_string(spec.share_memory_bytes);
  }
  // The frameworks' own caps where the user set none (docs/sharing.md, "What a share job
  // sees"): JAX's memory fraction (else it takes 75% of the GPU at its first operation,
  // and may grow to all of it), CuPy's pool limit, TensorFlow's allocation on demand (else
  // it maps nearly all of the GPU's memory at start). Not for a MIG instance: the device
  // the job sees is the instance, all of it the share's.
  if (spec.share_enforcement != "mig" && spec.share_memory_bytes > 0) {
    char fraction[16];
    std::snprintf(fraction, sizeof fraction, "%d.%03d", milli / 1000, milli % 1000);
    if (!env.contains("XLA_PYTHON_CLIENT_MEM_FRACTION") &&
        !env.contains("XLA_CLIENT_MEM_FRACTION")) {
      env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = fraction;
      env["XLA_CLIENT_MEM_FRACTION"] = fraction;
    }
    env.try_emplace("CUPY_GPU_MEMORY_LIMIT", std::to_string(spec.share_memory_bytes));
    env.try_emplace("TF_FORCE_GPU_ALLOW_GROWTH", "true");
  }
  // The pool's CU mask replaces the user's (advisory either way: docs/sharing.md, "AMD").
  if (!spec.cu_mask.empty()) env["HSA_CU_MASK"] = "0:" + spec.cu_mask;
  if (spec.share_enforcement != "mps" || spec.mps_pipe_dir.empty()) return;
  env["CUDA_MPS_PIPE_DIRECTORY"] = spec.mps_pipe_dir;
  // The same limits as the daemon's ceiling for this client (mps.h).
  const MpsLimits limits = MpsLimitsFor(milli, spec.share_memory_bytes);
  env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(limits.thread_percentage);
  if (limits.pinned_mib > 0) {
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + std::to_string(limits.pinned_mib) + "M";
  }
}

void SetGpupoolAndVisibility(const LaunchSpec& spec, std::map<std::string, std::string>& env) {
  for (const char* key : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                          "HIP_VISIBLE_DEVICES", "GPUPOOL_GPU_MILLI", "GPUPOOL_GPU_ENFORCEMENT",
                          "GPUPOOL_GPU_MEM_LIMIT_BYTES", "CUDA_MPS_PIPE_DIRECTORY",
                          "CUDA_MPS_LOG_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                          "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPUPOOL_PREEMPT_DEADLINE_FILE"}) {
    env.erase(key);
  }
  // Every CUDA_MPS_* of the user's, as job_env.h says (the third red team found
  // CUDA_MPS_CLIENT_PRIORITY and the SM partitioning switch passed through).
  std::erase_if(env, [](const auto& kv) { return kv.first.starts_with("CUDA_MPS_"); });
  env["GPUPOOL_JOB_ID"] = std::to_string(spec.id.job);
  env["GPUPOOL_ATTEMPT"] = std::to_string(spec.id.attempt);
  for (const auto& [k, v] : spec.pool_env) env[k] = v;

  if (spec.gpus.empty()) {
    env["CUDA_VISIBLE_DEVICES"] = "";
    env["NVIDIA_VISIBLE_DEVICES"] = "void";
    env["ROCR_VISIBLE_DEVICES"] = "";
    env["HIP_VISIBLE_DEVICES"] = "";
    return;
  }

  std::vector<std::string> nvidia;
  std::vector<std::string> amd_uuids;
  std::vector<std::string> amd_indices;
  bool amd_all_uuids = true;
  int milli = 1000;
  for (const GpuGrant& g : spec.gpus) {
    milli = std::min(milli, g.gpu_milli);
    if (g.vendor == "nvidia") {
      nvidia.push_back(g.uuid.empty() ? std::to_string(g.index) : g.uuid);
    } else if (g.vendor == "amd") {
      amd_uuids.push_back(g.uuid);
      amd_indices.push_back(std::to_string(g.index));
      if (g.uuid.empty()) amd_all_uuids = false;
    }
  }
  env["GPUPOOL_GPU_MILLI"] = std::to_string(milli);
  SetShareLimits(spec, milli, env);
  if (!nvidia.empty()) {
    env["CUDA_VISIBLE_DEVICES"] = Join(nvidia);
    env["NVIDIA_VISIBLE_DEVICES"] = Join(nvidia);
  }
  if (!amd_uuids.empty()) {
    if (amd_all_uuids) {
      env["ROCR_VISIBLE_DEVICES"] = Join(amd_uuids);
      env["HIP_VISIBLE_DEVICES"] = Join(amd_uuids);
    } else {
      std::vector<std::string> positions;
      for (size_t i = 0; i < amd_indices.size(); ++i) positions.push_back(std::to_string(i));
      env["ROCR_VISIBLE_DEVICES"] = Join(amd_indices);
      env["HIP_VISIBLE_DEVICES"] = Join(positions);
    }
  }
}

}  // namespace

std::map<std::string, std::string> BuildJobEnvironment(const LaunchSpec& spec,
                                                       const LoginDefaults& defaults) {
  std::map<std::string, std::string> env = spec.env;
  env.try_emplace("HOME", defaults.home);
  env.try_emplace("USER", spec.user);
  env.try_emplace("LOGNAME", spec.user);
  env.try_emplace("SHELL", defaults.shell);
  env.try_emplace("PATH", defaults.path);
  SetGpupoolAndVisibility(spec, env);
  if (!spec.env_dir.empty()) ApplyEnvDir(spec.env_dir, env);
  return env;
}

std::map<std::string, std::string> BuildContainerEnvironment(const LaunchSpec& spec) {
  std::map<std::string, std::string> env = spec.env;
  env.try_emplace("USER", spec.user);
  env.try_emplace("LOGNAME", spec.user);
  SetGpupoolAndVisibility(spec, env);
  return env;
}

std::vector<std::string> EnvironmentStrings(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace gpupool::agent
