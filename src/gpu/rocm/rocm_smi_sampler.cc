// The ROCm SMI telemetry sampler: one dlopen and rsmi_init for its life; devices bound to
// the node's AMD GPUs by PCI bus id at creation; per sample the busy percentage, VRAM in
// use and in all, average power and the edge (else junction) temperature, and the
// processes using each GPU with the VRAM each holds there.
#include <algorithm>
#include <map>

#include "common/strings.h"
#include "gpu/rocm/rocm_smi_library.h"
#include "gpu/telemetry.h"

namespace gpupool::gpu {
namespace {

using rocm::kRsmiSuccess;

constexpr int64_t kRsmiMiB = 1 << 20;
constexpr uint32_t kMaxProcesses = 4096;  // more is a library's bad count, not a node's
constexpr uint32_t kMaxProcessGpus = 1024;

std::string BusIdOfBdf(uint64_t bdf) {
  // rocm-smi packs (domain << 32) | (bus << 8) | (device << 3) | function.
  return StrFormat("%04x:%02x:%02x.%x", static_cast<unsigned>(bdf >> 32),
                   static_cast<unsigned>((bdf >> 8) & 0xff),
                   static_cast<unsigned>((bdf >> 3) & 0x1f), static_cast<unsigned>(bdf & 0x7));
}

class RocmSmiSampler final : public TelemetrySampler {
 public:
  explicit RocmSmiSampler(std::unique_ptr<rocm::RocmSmiLibrary> lib) : lib_(std::move(lib)) {}

  Status Bind(const NodeInfo& node) {
    const rocm::RocmSmiApi& api = lib_->api();
    uint32_t count = 0;
    if (rocm::RsmiStatus rc = api.num_monitor_devices(&count); rc != kRsmiSuccess) {
      return Status::Unavailable("rsmi_num_monitor_devices failed: " + lib_->ErrorString(rc));
    }
    std::map<std::string, uint32_t> by_bus;
    for (uint32_t i = 0; i < count && i < 1024; ++i) {
      uint64_t bdf = 0;
      if (api.dev_pci_id_get(i, &bdf) == kRsmiSuccess) by_bus[BusIdOfBdf(bdf)] = i;
    }
    for (const GpuInfo& g : node.gpus) {
      if (g.vendor != Vendor::kAmd) continue;
      if (auto it = by_bus.find(g.pci_bus_id); it != by_bus.end()) {
        gpus_.push_back({g.index, g.uuid, it->second});
      }
    }
    if (gpus_.empty()) return Status::Unavailable("ROCm SMI sees none of the node's AMD GPUs");
    return Status::Ok();
  }

  std::string_view name() const override { return "rocm-smi"; }

  Result<std::vector<GpuSample>> Sample(int64_t) override {
    const rocm::RocmSmiApi& api = lib_->api();
    std::vector<GpuSample> out;
    int read = 0;
    for (const Bound& b : gpus_) {
      GpuSample s;
      s.index = b.index;
      s.uuid = b.uuid;
      uint32_t busy = 0;
      if (api.dev_busy_percent_get != nullptr &&
          api.dev_busy_percent_get(b.device, &busy) == kRsmiSuccess && busy <= 100) {
        s.util_pct = busy;
        ++read;
      }
      uint64_t used = 0, total = 0;
      if (api.dev_memory_usage_get != nullptr && api.dev_memory_total_get != nullptr &&
          api.dev_memory_usage_get(b.device, rocm::kRsmiMemTypeVram, &used) == kRsmiSuccess &&
          api.dev_memory_total_get(b.device, rocm::kRsmiMemTypeVram, &total) == kRsmiSuccess &&
          used <= total) {
        s.mem_used_mib = static_cast<int64_t>(used / kRsmiMiB);
        s.mem_total_mib = static_cast<int64_t>(total / kRsmiMiB);
      }
      uint64_t uw = 0;
      if (api.dev_power_ave_get != nullptr &&
          api.dev_power_ave_get(b.device, 0, &uw) == kRsmiSuccess && uw < 10'000'000'000ULL) {
        s.power_w = static_cast<double>(uw) / 1e6;
      }
      if (api.dev_temp_metric_get != nullptr) {
        for (uint32_t sensor : {rocm::kRsmiTempTypeEdge, rocm::kRsmiTempTypeJunction}) {
          int64_t mc = 0;
          if (api.dev_temp_metric_get(b.device, sensor, rocm::kRsmiTempCurrent, &mc) ==
                  kRsmiSuccess &&
              mc > -273'000 && mc < 1'000'000) {
            s.temp_c = static_cast<double>(mc) / 1000.0;
            break;
          }
        }
      }
      out.push_back(std::move(s));
    }
    std::map<uint32_t, GpuSample*> by_device;
    for (size_t i = 0; i < out.size(); ++i) by_device[gpus_[i].device] = &out[i];
    ReadProcesses(by_device);
    if (read == 0 && !out.empty()) {
      return Status::Unavailable("ROCm SMI gave no busy percentage for any of the " +
                                 std::to_string(out.size()) + " GPUs");
    }
    return out;
  }

 private:
  // The node's processes (rsmi_compute_process_info_get: pids only), each listed on the
  // bound GPUs where it holds VRAM or has queues, with its VRAM there.
  // rsmi_compute_process_gpus_get lists only the GPUs a process has queues on (KFD's
  // proc/PID/queues), not those it merely holds memory on; so where the per-device call
  // exists (rsmi_compute_process_info_by_device_get, ROCm 5.7+) every bound GPU is asked,
  // and a process with VRAM on one is listed there. Without it (or where it fails) a
  // process with queues on one GPU only gets its total (rsmi_compute_process_info_by_pid_get,
  // summed over its GPUs); one on several is listed with its memory unknown (never a
  // guessed split). A library without the list call, or without both the device and the
  // per-device call, lists none.
  void ReadProcesses(const std::map<uint32_t, GpuSample*>& by_device) {
    const rocm::RocmSmiApi& api = lib_->api();
    const bool per_device = api.compute_process_info_by_device_get != nullptr;
    if (api.compute_process_info_get == nullptr ||
        (api.compute_process_gpus_get == nullptr && !per_device)) {
      return;
    }
    for (uint32_t pid : Pids()) {
      const std::vector<uint32_t> queued = DevicesOf(pid);
      for (const auto& [dv, sample] : by_device) {
        const bool has_queues = std::binary_search(queued.begin(), queued.end(), dv);
        ProcessSample p;
        p.pid = pid;
        rocm::RsmiProcessInfo info{};
        if (per_device && api.compute_process_info_by_device_get(pid, dv, &info) == kRsmiSuccess) {
          if (info.vram_usage == 0 && !has_queues) continue;  // not a process of this GPU
          p.used_mib = static_cast<int64_t>(info.vram_usage / kRsmiMiB);
        } else if (!has_queues) {
          continue;
        } else if (queued.size() == 1 && api.compute_process_info_by_pid_get != nullptr &&
                   api.compute_process_info_by_pid_get(pid, &info) == kRsmiSuccess) {
          p.used_mib = static_cast<int64_t>(info.vram_usage / kRsmiMiB);
        }
        sample->processes.push_back(p);
      }
    }
  }

  // The pids of the node's GPU processes; empty when the call fails.
  std::vector<uint32_t> Pids() {
    const rocm::RocmSmiApi& api = lib_->api();
    std::vector<rocm::RsmiProcessInfo> procs(16);
    uint32_t n = static_cast<uint32_t>(procs.size());
    rocm::RsmiStatus rc = api.compute_process_info_get(procs.data(), &n);
    if (rc == rocm::kRsmiInsufficientSize) {
      // The count comes from a call without a buffer; room for processes that start.
      uint32_t want = 0;
      if (api.compute_process_info_get(nullptr, &want) != kRsmiSuccess || want > kMaxProcesses) {
        return {};
      }
      procs.resize(want + 8);
      n = static_cast<uint32_t>(procs.size());
      rc = api.compute_process_info_get(procs.data(), &n);
    }
    if (rc != kRsmiSuccess) return {};
    std::vector<uint32_t> pids;
    for (uint32_t i = 0; i < n && i < procs.size(); ++i) pids.push_back(procs[i].process_id);
    return pids;
  }

  // The dv indices `pid` has queues on, sorted, each once; empty when the call is absent
  // or fails (the process ended).
  std::vector<uint32_t> DevicesOf(uint32_t pid) {
    const rocm::RocmSmiApi& api = lib_->api();
    if (api.compute_process_gpus_get == nullptr) return {};
    std::vector<uint32_t> devices(8);
    uint32_t n = static_cast<uint32_t>(devices.size());
    rocm::RsmiStatus rc = api.compute_process_gpus_get(pid, devices.data(), &n);
    if (rc == rocm::kRsmiInsufficientSize) {
      uint32_t want = 0;
      if (api.compute_process_gpus_get(pid, nullptr, &want) != kRsmiSuccess ||
          want > kMaxProcessGpus) {
        return {};
      }
      devices.resize(want);
      n = want;
      rc = api.compute_process_gpus_get(pid, devices.data(), &n);
    }
    if (rc != kRsmiSuccess) return {};
    devices.resize(std::min<size_t>(n, devices.size()));
    std::sort(devices.begin(), devices.end());
    devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
    return devices;
  }

  struct Bound {
    int index;
    std::string uuid;
    uint32_t device;
  };
  std::unique_ptr<rocm::RocmSmiLibrary> lib_;
  std::vector<Bound> gpus_;
};

}  // namespace

Result<std::unique_ptr<TelemetrySampler>> NewRocmSmiSampler(const std::string& library,
                                                            const NodeInfo& node) {
  GP_ASSIGN_OR_RETURN(std::unique_ptr<rocm::RocmSmiLibrary> lib,
                      rocm::RocmSmiLibrary::Load(library));
  GP_RETURN_IF_ERROR(lib->Init());
  auto sampler = std::make_unique<RocmSmiSampler>(std::move(lib));
  GP_RETURN_IF_ERROR(sampler->Bind(node));
  return std::unique_ptr<TelemetrySampler>(std::move(sampler));
}

}  // namespace gpupool::gpu
