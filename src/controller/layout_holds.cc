#include "controller/layout_holds.h"

#include <algorithm>

#include "controller/sched_input.h"

namespace gpupool::controller {
namespace {

// The GPU of `info` that hosts device `uuid` (a GPU's or one of its MIG instances'), else
// the GPU of vendor index `index` (-1: none); null when neither is there.
const gpu::GpuInfo* HostOf(const gpu::NodeInfo& info, const std::string& uuid, int index) {
  for (const gpu::GpuInfo& g : info.gpus) {
    if (!uuid.empty() && g.uuid == uuid) return &g;
    for (const gpu::MigDevice& m : g.mig_devices) {
      if (!uuid.empty() && m.uuid == uuid) return &g;
    }
  }
  for (const gpu::GpuInfo& g : info.gpus) {
    if (index >= 0 && g.index == index) return &g;
  }
  return nullptr;
}

}  // namespace

std::vector<NodeGpu> LayoutChangedGpus(const jobs::Job& job, const NodeInfoOf& info_of) {
  bool changed = false;
  std::vector<NodeGpu> gpus;
  for (const jobs::TaskPlacement& p : job.placement) {
    const gpu::NodeInfo* info = info_of(p.node);
    if (info == nullptr) continue;
    const std::vector<SchedDevice> devices = SchedDevicesOf(*info);
    for (size_t k = 0; k < p.gpu_uuids.size(); ++k) {
      const std::string& uuid = p.gpu_uuids[k];
      const bool offered = std::any_of(devices.begin(), devices.end(), [&](const SchedDevice& d) {
        return SchedDeviceUuid(*info, d) == uuid;
      });
      if (!offered) changed = true;
      const int index = k < p.gpu_indices.size() ? p.gpu_indices[k] : -1;
      const gpu::GpuInfo* host = HostOf(*info, uuid, index);
      if (host == nullptr) continue;  // gone with its GPU: nothing to hold
      NodeGpu held{p.node, host->uuid};
      if (std::find(gpus.begin(), gpus.end(), held) == gpus.end()) gpus.push_back(held);
    }
  }
  if (!changed) gpus.clear();
  return gpus;
}

std::string GoneUnderJobs(const std::string& node, const gpu::NodeInfo& before,
                          const gpu::NodeInfo& after, const std::vector<const jobs::Job*>& jobs) {
  std::string gpus, holders;
  int gone = 0;
  for (const gpu::GpuInfo& g : before.gpus) {
    if (g.uuid.empty() || std::any_of(after.gpus.begin(), after.gpus.end(),
                                      [&](const auto& a) { return a.uuid == g.uuid; })) {
      continue;
    }
    bool held = false;
    for (const jobs::Job* job : jobs) {
      for (const jobs::TaskPlacement& p : job->placement) {
        if (p.node != node) continue;
        for (const std::string& u : p.gpu_uuids) {
          const bool on_it = u == g.uuid || std::any_of(g.mig_devices.begin(), g.mig_devices.end(),
                                                        [&](const auto& m) { return m.uuid == u; });
          if (!on_it) continue;
          held = true;
          const std::string id = std::to_string(job->id);
          if (holders.find(" " + id + ",") == std::string::npos) holders += " " + id + ",";
        }
      }
    }
    if (!held) continue;
    ++gone;
    gpus += (gpus.empty() ? "" : ", ") + std::string("GPU ") + std::to_string(g.index) + " (" +
            g.uuid + ")";
  }
  if (gone == 0) return "";
  holders.pop_back();  // the last ","
  const bool one = holders.find(',') == std::string::npos;
  return gpus + (gone == 1 ? " is" : " are") + " gone from its inventory under running job" +
         (one ? "" : "s") + holders +
         " (fallen off the bus? `gpupool gpus` on the node): drained; `gpupool node resume " +
         node + "` once it is checked";
}

std::string LayoutHeldWhy(const std::vector<std::string>& jobs) {
  std::string names;
  for (const std::string& j : jobs) names += (names.empty() ? "" : ", ") + j;
  return std::string("layout changed under running job") + (jobs.size() == 1 ? " " : "s ") + names +
         ": held until " + (jobs.size() == 1 ? "it ends" : "they end");
}

bool LayoutHolds::Update(const jobs::Job& job, const NodeInfoOf& info_of) {
  std::vector<NodeGpu> gpus = LayoutChangedGpus(job, info_of);
  if (gpus.empty()) {
    holds_.erase(job.id);
    return false;
  }
  holds_[job.id] = Hold{job.attempt, std::move(gpus)};
  return true;
}

void LayoutHolds::Prune(const std::function<bool(int64_t id, int attempt)>& occupies) {
  std::erase_if(holds_, [&](const auto& h) { return !occupies(h.first, h.second.attempt); });
}

std::map<std::string, std::vector<int64_t>> LayoutHolds::OnNode(
    const std::string& node, const std::function<bool(int64_t id, int attempt)>& occupies) const {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [id, hold] : holds_) {
    if (!occupies(id, hold.attempt)) continue;
    for (const NodeGpu& g : hold.gpus) {
      if (g.first == node) out[g.second].push_back(id);
    }
  }
  return out;
}

}  // namespace gpupool::controller
