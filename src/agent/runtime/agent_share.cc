// AgentLoop's GPU shares (docs/sharing.md): a share's MPS client or CU mask when it is
// launched, and the MPS clients of the runs adopted after a restart.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "agent/cu_mask.h"
#include "agent/runtime/agent_loop.h"

namespace gpupool::agent {

Status AgentLoop::PrepareShare(const jobs::Job& job, agent::LaunchSpec* spec) {
  if (spec->gpus.size() != 1 || spec->gpus[0].gpu_milli >= 1000) return Status::Ok();
  const agent::GpuGrant& g = spec->gpus[0];
  const gpu::GpuInfo* info = nullptr;
  for (const gpu::GpuInfo& candidate : options_.node.gpus) {
    if (g.uuid.empty() ? candidate.index == g.index : candidate.uuid == g.uuid) info = &candidate;
    // A MIG instance, held whole (docs/sharing.md): the hardware holds the job to it.
    for (const gpu::MigDevice& m : candidate.mig_devices) {
      if (g.uuid.empty() || m.uuid != g.uuid) continue;
      spec->share_enforcement = "mig";
      spec->share_memory_bytes = m.memory_total_bytes;
      return Status::Ok();
    }
  }
  spec->share_enforcement = "none";
  if (job.request.gpu_memory_bytes > 0) {
    spec->share_memory_bytes = job.request.gpu_memory_bytes;
  } else if (info != nullptr) {
    spec->share_memory_bytes = info->memory_total_bytes / 1000 * static_cast<uint64_t>(g.gpu_milli);
  }
  // The kernel's dmem controller, else NVML's per-cgroup limits, caps the job's cgroup (a
  // container's: the cgroup podman makes the container's below, shim.cc).
  if (info != nullptr && info->enforcement == "dmem") {
    auto region = options_.dmem_regions.find(info->uuid);
    auto nvml = options_.nvml_memory_limits.find(info->uuid);
    if (region != options_.dmem_regions.end()) {
      spec->share_enforcement = "dmem";
      spec->dmem_region = region->second;
    } else if (nvml != options_.nvml_memory_limits.end()) {
      spec->share_enforcement = "dmem";
      spec->nvml_library = nvml->second;
    }
    return Status::Ok();
  }
  // MPS for process and container jobs (a container gets the daemon's pipe folder and the
  // host's IPC namespace: container.h).
  if (info == nullptr || info->enforcement != "mps" || options_.mps == nullptr) {
    return Status::Ok();
  }
  Result<std::string> pipe =
      options_.mps->Acquire(g.uuid.empty() ? std::to_string(g.index) : g.uuid, spec->id, spec->uid,
                            spec->gid, agent::MpsLimitsFor(g.gpu_milli, spec->share_memory_bytes));
  if (!pipe.ok()) {
    return Status::Unavailable("GPU share on " + g.uuid + " (MPS): " + pipe.status().message());
  }
  spec->share_enforcement = "mps";
  spec->mps_pipe_dir = *pipe;
  return Status::Ok();
}

void AgentLoop::AssignCuMaskLocked(agent::LaunchSpec* spec) {
  // Shares only (a MIG instance is held whole by the hardware), and on an AMD GPU whose CU
  // count discovery found.
  if (spec->share_enforcement.empty() || spec->share_enforcement == "mig" ||
      spec->gpus.size() != 1) {
    return;
  }
  const agent::GpuGrant& g = spec->gpus[0];
  if (g.vendor != "amd") return;
  const gpu::GpuInfo* info = nullptr;
  for (const gpu::GpuInfo& candidate : options_.node.gpus) {
    if (candidate.vendor != gpu::Vendor::kAmd) continue;
    if (g.uuid.empty() ? candidate.index == g.index : candidate.uuid == g.uuid) info = &candidate;
  }
  if (info == nullptr || info->compute_units <= 0) return;
  std::vector<std::string> taken;
  for (const auto& [id, held] : held_) {
    const agent::LaunchSpec& other = held.spec;
    if (other.cu_mask.empty() || other.gpus.size() != 1) continue;
    if (other.gpus[0].uuid == g.uuid && other.gpus[0].index == g.index) {
      taken.push_back(other.cu_mask);
    }
  }
  agent::CuChoice choice = agent::ChooseCus(info->compute_units, g.gpu_milli, taken);
  if (choice.overlapping) {
    spdlog::warn(
        "agent: {} shares CUs of GPU {} with other shares (HSA_CU_MASK 0:{}): too few "
        "free of its {}",
        agent::ToString(spec->id), g.uuid.empty() ? std::to_string(g.index) : g.uuid, choice.list,
        info->compute_units);
  }
  spec->cu_mask = std::move(choice.list);
}

void AgentLoop::AdoptMpsClients() {
  if (options_.mps == nullptr) return;
  std::vector<std::pair<RunId, agent::LaunchSpec>> runs;
  {
    std::lock_guard lock(mu_);
    const std::vector<RunId> live = launcher_->Running();
    for (const auto& [id, held] : held_) {
      if (held.spec.share_enforcement != "mps" || held.spec.gpus.size() != 1) continue;
      if (std::find(live.begin(), live.end(), id) == live.end()) continue;
      runs.emplace_back(id, held.spec);
    }
  }
  for (const auto& [id, spec] : runs) {
    const agent::GpuGrant& g = spec.gpus[0];
    Result<std::string> pipe =
        options_.mps->Acquire(g.uuid.empty() ? std::to_string(g.index) : g.uuid, id, spec.uid,
                              spec.gid, agent::MpsLimitsFor(g.gpu_milli, spec.share_memory_bytes));
    if (!pipe.ok()) {
      spdlog::warn("agent: {} is an MPS client of a daemon that cannot run: {}",
                   agent::ToString(id), pipe.status().message());
      continue;
    }
    // Ended meanwhile (its end may have been seen before this count): not a client.
    const std::vector<RunId> live = launcher_->Running();
    if (std::find(live.begin(), live.end(), id) == live.end()) (void)options_.mps->Release(id);
  }
  for (const std::string& failed : options_.mps->StopUnused()) {
    spdlog::warn("agent: stopping an unused MPS daemon: {}", failed);
  }
}

}  // namespace gpupool::agent
