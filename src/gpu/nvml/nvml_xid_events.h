// XidEvents: the Xid critical errors NVML reports for a set of GPUs, read without waiting.
//
// One NVML event set, created and registered for Xid events (nvmlEventTypeXidCriticalError)
// once, at construction, and freed on destruction, which must come before nvmlShutdown
// (the owner keeps the NvmlSession alive longer). Drain() reads what is pending with a
// zero timeout, so it never blocks its caller. Per GPU it keeps the last Xid and how many
// Xid events it saw since construction, as dcgm-exporter's DCGM_FI_DEV_XID_ERRORS reports
// the last Xid.
//
// Never fails: a library without the event entry points, an event set that cannot be
// made, or a GPU whose registration fails (NVML_ERROR_NOT_SUPPORTED: the GPU cannot) just
// leaves those GPUs unwatched; note() says why, in one line. The library must outlive the
// object. Not thread-safe; the sampler uses it from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpu/nvml/nvml_library.h"

namespace gpupool::gpu::nvml {

class XidEvents {
 public:
  struct Gpu {
    int index = -1;  // the GPU's index, for note()
    Device device = nullptr;
  };
  // What one watched GPU has seen.
  struct Seen {
    int64_t last_xid = 0;  // 0: none yet
    int64_t count = 0;     // Xid events since construction
  };

  XidEvents(const NvmlLibrary& library, const std::vector<Gpu>& gpus);
  ~XidEvents();
  XidEvents(const XidEvents&) = delete;
  XidEvents& operator=(const XidEvents&) = delete;

  // Reads the pending events (at most kMaxEventsPerDrain) and files each under its GPU;
  // events of devices not watched are dropped. A failing wait ends the drain quietly:
  // the next one tries again.
  void Drain();

  // What `device` has seen; nullptr when it is not watched (the Xid figures are unknown).
  const Seen* Of(Device device) const;

  // Why some or all GPUs are not watched, in one line; "" when every GPU is.
  const std::string& note() const { return note_; }

  static constexpr int kMaxEventsPerDrain = 1024;

 private:
  const NvmlLibrary& library_;
  EventSet set_ = nullptr;
  std::map<Device, Seen> watched_;
  std::string note_;
};

}  // namespace gpupool::gpu::nvml
