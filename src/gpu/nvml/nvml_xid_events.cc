#include "gpu/nvml/nvml_xid_events.h"

namespace gpupool::gpu::nvml {
namespace {

// Xids are small numbers (the driver's table ends in the hundreds; 999 is "unknown"); a
// larger eventData is a driver fault, not an Xid, and is not counted.
constexpr unsigned long long kMaxXid = 1 << 20;

std::string JoinIndices(const std::vector<int>& indices) {
  std::string out;
  for (int i : indices) out += (out.empty() ? "" : ", ") + std::to_string(i);
  return out;
}

}  // namespace

XidEvents::XidEvents(const NvmlLibrary& library, const std::vector<Gpu>& gpus) : library_(library) {
  const Functions& fn = library.fn();
  // Tested pointer by pointer (not only through the list below), so that clang-tidy's
  // analyzer sees each one non-null where it is called.
  if (fn.event_set_create == nullptr || fn.device_register_events == nullptr ||
      fn.event_set_wait == nullptr || fn.event_set_free == nullptr) {
    std::string missing;
    for (const auto& [present, name] :
         {std::pair{fn.event_set_create != nullptr, "nvmlEventSetCreate"},
          std::pair{fn.device_register_events != nullptr, "nvmlDeviceRegisterEvents"},
          std::pair{fn.event_set_wait != nullptr, "nvmlEventSetWait_v2 (or nvmlEventSetWait)"},
          std::pair{fn.event_set_free != nullptr, "nvmlEventSetFree"}}) {
      if (!present) missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
    note_ = "Xid errors are not reported: libnvidia-ml lacks " + missing +
            "; a current NVIDIA driver has them";
    return;
  }
  if (gpus.empty()) return;
  if (Return rc = fn.event_set_create(&set_); rc != kSuccess || set_ == nullptr) {
    note_ = "Xid errors are not reported: nvmlEventSetCreate failed: " + library.ErrorText(rc);
    set_ = nullptr;
    return;
  }
  // The GPUs that could not register, by the reason.
  std::map<Return, std::vector<int>> failed;
  for (const Gpu& g : gpus) {
    const Return rc = fn.device_register_events(g.device, kEventTypeXidCriticalError, set_);
    if (rc == kSuccess) {
      watched_[g.device] = Seen{};
    } else {
      failed[rc].push_back(g.index);
    }
  }
  for (const auto& [rc, indices] : failed) {
    note_ +=
        std::string(note_.empty() ? "Xid errors are not reported for " : "; for ") +
        (indices.size() == 1 ? "GPU " : "GPUs ") + JoinIndices(indices) + ": " +
        (rc == kErrorNotSupported ? std::string("Xid events not supported")
                                  : "nvmlDeviceRegisterEvents failed: " + library.ErrorText(rc));
  }
  if (watched_.empty()) {
    // Nothing to wait for: give the set back now.
    fn.event_set_free(set_);
    set_ = nullptr;
  }
}

XidEvents::~XidEvents() {
  if (set_ != nullptr) library_.fn().event_set_free(set_);
}

void XidEvents::Drain() {
  if (set_ == nullptr) return;
  const Functions& fn = library_.fn();
  for (int n = 0; n < kMaxEventsPerDrain; ++n) {
    EventData data{};
    // Timeout 0: what is pending, or NVML_ERROR_TIMEOUT at once when nothing is.
    if (fn.event_set_wait(set_, &data, 0) != kSuccess) return;
    if ((data.event_type & kEventTypeXidCriticalError) == 0 || data.event_data > kMaxXid) continue;
    auto it = watched_.find(data.device);
    if (it == watched_.end()) continue;
    it->second.last_xid = static_cast<int64_t>(data.event_data);
    ++it->second.count;
  }
}

const XidEvents::Seen* XidEvents::Of(Device device) const {
  auto it = watched_.find(device);
  return it == watched_.end() ? nullptr : &it->second;
}

}  // namespace gpupool::gpu::nvml
