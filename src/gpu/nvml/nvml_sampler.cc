// The NVML telemetry sampler: one dlopen and nvmlInit for the sampler's life, then per
// sample the per-device calls only. Devices are matched to the node's GPUs by UUID (by
// index when the UUID is unknown), once, at creation, and registered for Xid events then
// (nvml_xid_events.h), which each sample drains without waiting.
#include <algorithm>
#include <cstring>
#include <map>

#include "gpu/nvml/nvml_library.h"
#include "gpu/nvml/nvml_xid_events.h"
#include "gpu/telemetry.h"

namespace gpupool::gpu {
namespace {

using nvml::Device;
using nvml::kSuccess;
using nvml::Return;

constexpr int64_t kMiB = 1 << 20;
// Above these a figure is a driver fault, not a reading: it is left unset.
constexpr unsigned kMaxMilliwatts = 10'000'000;
constexpr unsigned kMaxCelsius = 200;
constexpr unsigned kMaxProcesses = 1024;
constexpr unsigned kMaxCount = 1u << 30;  // retired pages or remapped rows

class NvmlSampler final : public TelemetrySampler {
 public:
  NvmlSampler(std::unique_ptr<nvml::NvmlLibrary> library,
              std::unique_ptr<nvml::NvmlSession> session)
      : library_(std::move(library)), session_(std::move(session)) {}

  // Finds the device of each NVIDIA GPU of `node`.
  Status Bind(const NodeInfo& node) {
    const nvml::Functions& fn = library_->fn();
    unsigned count = 0;
    if (Return rc = fn.device_get_count_v2(&count); rc != kSuccess) {
      return Status::Unavailable("nvmlDeviceGetCount_v2 failed: " + library_->ErrorText(rc));
    }
    std::map<std::string, Device> by_uuid;
    std::map<int, Device> by_index;
    for (unsigned i = 0; i < count && i < 4096; ++i) {
      Device d = nullptr;
      if (fn.device_get_handle_by_index_v2(i, &d) != kSuccess || d == nullptr) continue;
      by_index[static_cast<int>(i)] = d;
      char uuid[nvml::kDeviceUuidBufferSize] = {};
      if (fn.device_get_uuid != nullptr &&
          fn.device_get_uuid(d, uuid, sizeof uuid - 1) == kSuccess) {
        by_uuid[std::string(uuid, strnlen(uuid, sizeof uuid - 1))] = d;
      }
    }
    for (const GpuInfo& g : node.gpus) {
      if (g.vendor != Vendor::kNvidia) continue;
      Device d = nullptr;
      if (auto it = by_uuid.find(g.uuid); !g.uuid.empty() && it != by_uuid.end()) {
        d = it->second;
      } else if (auto at = by_index.find(g.index); at != by_index.end()) {
        d = at->second;
      }
      if (d != nullptr) gpus_.push_back({g.index, g.uuid, d});
    }
    if (gpus_.empty()) return Status::Unavailable("NVML sees none of the node's NVIDIA GPUs");
    std::vector<nvml::XidEvents::Gpu> watch;
    for (const Bound& b : gpus_) watch.push_back({b.index, b.device});
    xids_ = std::make_unique<nvml::XidEvents>(*library_, watch);
    return Status::Ok();
  }

  std::string_view name() const override { return "nvml"; }
  std::string note() const override { return xids_ != nullptr ? xids_->note() : ""; }

  std::map<int, int64_t> XidCounts(int64_t) override {
    std::map<int, int64_t> out;
    xids_->Drain();  // never waits
    for (const Bound& b : gpus_) {
      if (const nvml::XidEvents::Seen* x = xids_->Of(b.device); x != nullptr) {
        out[b.index] = x->count;
      }
    }
    return out;
  }

  Result<std::vector<GpuSample>> Sample(int64_t) override {
    const nvml::Functions& fn = library_->fn();
    std::vector<GpuSample> out;
    int read = 0;
    xids_->Drain();
    for (const Bound& b : gpus_) {
      GpuSample s;
      s.index = b.index;
      s.uuid = b.uuid;
      bool any = false;
      if (fn.device_get_utilization_rates != nullptr) {
        nvml::Utilization u{};
        if (fn.device_get_utilization_rates(b.device, &u) == kSuccess && u.gpu <= 100) {
          s.util_pct = u.gpu;
          any = true;
        }
      }
      if (fn.device_get_memory_info != nullptr) {
        nvml::Memory m{};
        if (fn.device_get_memory_info(b.device, &m) == kSuccess && m.used <= m.total) {
          s.mem_used_mib = static_cast<int64_t>(m.used / kMiB);
          s.mem_total_mib = static_cast<int64_t>(m.total / kMiB);
          any = true;
        }
      }
      if (fn.device_get_power_usage != nullptr) {
        unsigned mw = 0;
        if (fn.device_get_power_usage(b.device, &mw) == kSuccess && mw <= kMaxMilliwatts) {
          s.power_w = mw / 1000.0;
        }
      }
      if (fn.device_get_temperature != nullptr) {
        unsigned t = 0;
        if (fn.device_get_temperature(b.device, nvml::kTemperatureGpu, &t) == kSuccess &&
            t <= kMaxCelsius) {
          s.temp_c = t;
        }
      }
      if (fn.device_get_total_ecc_errors != nullptr) {
        unsigned long long n = 0;
        if (fn.device_get_total_ecc_errors(b.device, nvml::kMemoryErrorTypeUncorrected,
                                           nvml::kVolatileEcc, &n) == kSuccess &&
            n < (1ULL << 62)) {
          s.ecc_uncorrected = static_cast<int64_t>(n);
        }
      }
      if (const nvml::XidEvents::Seen* x = xids_->Of(b.device); x != nullptr) {
        s.xid_errors = x->last_xid;
        s.xid_count = x->count;
      }
      ReadHardwareHealth(b.device, &s.hw);
      ReadProcesses(b.device, &s);
      if (any) ++read;
      out.push_back(std::move(s));
    }
    if (read == 0 && !out.empty()) {
      return Status::Unavailable("NVML answered for none of the " + std::to_string(out.size()) +
                                 " GPUs; check them with nvidia-smi");
    }
    return out;
  }

 private:
  struct Bound {
    int index;
    std::string uuid;
    Device device;
  };

  // Retired pages (both causes) and whether one waits, row remapping, and whether the
  // hardware slows the clocks; each left unset when its entry point is missing (an older
  // driver) or answers otherwise than success (NOT_SUPPORTED: a GPU without the feature).
  void ReadHardwareHealth(Device d, HardwareHealth* hw) {
    const nvml::Functions& fn = library_->fn();
    if (fn.device_get_retired_pages != nullptr) {
      int64_t pages = 0;
      bool known = true;
      for (int cause : {nvml::kPageRetirementCauseMultipleSingleBitEcc,
                        nvml::kPageRetirementCauseDoubleBitEcc}) {
        unsigned count = 0;  // 0: the count only (INSUFFICIENT_SIZE when there are pages)
        const Return rc = fn.device_get_retired_pages(d, cause, &count, nullptr);
        known = known && (rc == kSuccess || rc == nvml::kErrorInsufficientSize);
        pages += count;
      }
      if (known && pages < kMaxCount) hw->retired_pages = pages;
    }
    if (fn.device_get_retired_pages_pending_status != nullptr) {
      unsigned pending = 0;
      if (fn.device_get_retired_pages_pending_status(d, &pending) == kSuccess) {
        hw->retired_pages_pending = pending == nvml::kFeatureEnabled;
      }
    }
    if (fn.device_get_remapped_rows != nullptr) {
      unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      if (fn.device_get_remapped_rows(d, &corrected, &uncorrected, &pending, &failed) == kSuccess &&
          corrected < kMaxCount && uncorrected < kMaxCount) {
        hw->remapped_rows = int64_t{corrected} + uncorrected;
        hw->remapped_rows_pending = pending != 0;
        hw->remapped_rows_failed = failed != 0;
      }
    }
    if (fn.device_get_current_clocks_event_reasons != nullptr) {
      unsigned long long reasons = 0;
      if (fn.device_get_current_clocks_event_reasons(d, &reasons) == kSuccess) {
        hw->hw_slowdown = (reasons & (nvml::kClocksEventReasonHwSlowdown |
                                      nvml::kClocksEventReasonHwThermalSlowdown |
                                      nvml::kClocksEventReasonHwPowerBrakeSlowdown)) != 0;
      }
    }
  }

  void ReadProcesses(Device d, GpuSample* s) {
    const nvml::Functions& fn = library_->fn();
    if (fn.device_get_compute_running_processes == nullptr) return;
    std::vector<nvml::ProcessInfo> infos(16);
    unsigned count = static_cast<unsigned>(infos.size());
    Return rc = fn.device_get_compute_running_processes(d, &count, infos.data());
    if (rc == nvml::kErrorInsufficientSize && count <= kMaxProcesses) {
      infos.resize(count + 4);  // room for processes that start meanwhile
      count = static_cast<unsigned>(infos.size());
      rc = fn.device_get_compute_running_processes(d, &count, infos.data());
    }
    if (rc != kSuccess) return;
    count = std::min<unsigned>(count, static_cast<unsigned>(infos.size()));
    for (unsigned i = 0; i < count; ++i) {
      ProcessSample p;
      p.pid = infos[i].pid;
      if (infos[i].used_gpu_memory != ~0ULL) {
        p.used_mib = static_cast<int64_t>(infos[i].used_gpu_memory / kMiB);
      }
      s->processes.push_back(p);
    }
    if (fn.device_get_process_utilization == nullptr || s->processes.empty()) return;
    std::vector<nvml::ProcessUtilizationSample> util(s->processes.size() + 4);
    unsigned n = static_cast<unsigned>(util.size());
    // Samples since the last call: only the newest per process is kept.
    if (fn.device_get_process_utilization(d, util.data(), &n, last_seen_us_) != kSuccess) return;
    n = std::min<unsigned>(n, static_cast<unsigned>(util.size()));
    std::map<unsigned, std::pair<unsigned long long, unsigned>> newest;
    for (unsigned i = 0; i < n; ++i) {
      auto& [ts, sm] = newest[util[i].pid];
      if (util[i].time_stamp >= ts && util[i].sm_util <= 100) {
        ts = util[i].time_stamp;
        sm = util[i].sm_util;
      }
      last_seen_us_ = std::max(last_seen_us_, util[i].time_stamp);
    }
    for (ProcessSample& p : s->processes) {
      if (auto it = newest.find(static_cast<unsigned>(p.pid)); it != newest.end()) {
        p.util_pct = it->second.second;
      }
    }
  }

  std::unique_ptr<nvml::NvmlLibrary> library_;
  std::unique_ptr<nvml::NvmlSession> session_;
  std::vector<Bound> gpus_;
  // Declared after session_, so destroyed (its event set freed) before nvmlShutdown.
  std::unique_ptr<nvml::XidEvents> xids_;
  unsigned long long last_seen_us_ = 0;
};

}  // namespace

Result<std::unique_ptr<TelemetrySampler>> NewNvmlSampler(const std::string& library,
                                                         const NodeInfo& node) {
  GP_ASSIGN_OR_RETURN(std::unique_ptr<nvml::NvmlLibrary> lib, nvml::NvmlLibrary::Open(library));
  GP_ASSIGN_OR_RETURN(std::unique_ptr<nvml::NvmlSession> session, nvml::NvmlSession::Start(*lib));
  auto sampler = std::make_unique<NvmlSampler>(std::move(lib), std::move(session));
  GP_RETURN_IF_ERROR(sampler->Bind(node));
  return std::unique_ptr<TelemetrySampler>(std::move(sampler));
}

}  // namespace gpupool::gpu
