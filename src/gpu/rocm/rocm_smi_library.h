// A thin run-time binding of librocm_smi64.so (ROCm SMI): our own declarations of the
// few rsmi_* entry points gpupool uses, resolved with dlopen/dlsym, so one gpupool binary
// runs with and without ROCm and never needs rocm_smi.h to build.
//
// The declarations follow the C ABI of rocm_smi_lib 5.x and later: every call returns
// rsmi_status_t (a C enum whose range needs 32 unsigned bits), enum parameters are passed
// as 32-bit integers, and rsmi_version_t is {uint32 major, minor, patch; const char*}.
//
// Required symbols are those without which no GPU can be listed; the others are
// optional, their fields stay unknown when absent. One object owns one dlopen handle
// and, once Init() succeeded, one rsmi_init reference: the destructor shuts ROCm SMI
// down and closes the library. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::gpu::rocm {

using RsmiStatus = uint32_t;  // rsmi_status_t
inline constexpr RsmiStatus kRsmiSuccess = 0;
inline constexpr RsmiStatus kRsmiInvalidArgs = 1;
inline constexpr RsmiStatus kRsmiNotSupported = 2;
inline constexpr RsmiStatus kRsmiInsufficientSize = 11;

inline constexpr uint32_t kRsmiMemTypeVram = 0;   // rsmi_memory_type_t
inline constexpr uint32_t kRsmiTempTypeEdge = 0;  // rsmi_temperature_type_t
inline constexpr uint32_t kRsmiTempTypeJunction = 1;
inline constexpr uint32_t kRsmiTempCurrent = 0;   // rsmi_temperature_metric_t
inline constexpr uint32_t kRsmiSwCompDriver = 0;  // rsmi_sw_component_t
inline constexpr uint32_t kRsmiIoLinkPcie = 1;    // RSMI_IO_LINK_TYPE
inline constexpr uint32_t kRsmiIoLinkXgmi = 2;

// rsmi_process_info_t as of rocm_smi_lib 3.9 (cu_occupancy added), so every library this
// binding accepts (5.0+). vram_usage is in bytes.
struct RsmiProcessInfo {
  uint32_t process_id;
  uint32_t pasid;
  uint64_t vram_usage;
  uint64_t sdma_usage;
  uint32_t cu_occupancy;
};

struct RsmiVersion {  // rsmi_version_t
  uint32_t major;
  uint32_t minor;
  uint32_t patch;
  const char* build;
};

// Entry points; optional ones are nullptr when the library lacks them.
struct RocmSmiApi {
  // Required.
  RsmiStatus (*init)(uint64_t flags) = nullptr;
  RsmiStatus (*shut_down)() = nullptr;
  RsmiStatus (*num_monitor_devices)(uint32_t* count) = nullptr;
  RsmiStatus (*dev_pci_id_get)(uint32_t dv, uint64_t* bdfid) = nullptr;
  // Optional.
  RsmiStatus (*dev_name_get)(uint32_t dv, char* name, size_t len) = nullptr;
  RsmiStatus (*dev_unique_id_get)(uint32_t dv, uint64_t* id) = nullptr;
  RsmiStatus (*dev_memory_total_get)(uint32_t dv, uint32_t mem_type, uint64_t* total) = nullptr;
  RsmiStatus (*dev_memory_usage_get)(uint32_t dv, uint32_t mem_type, uint64_t* used) = nullptr;
  RsmiStatus (*dev_busy_percent_get)(uint32_t dv, uint32_t* percent) = nullptr;
  RsmiStatus (*topo_numa_affinity_get)(uint32_t dv, uint32_t* numa_node) = nullptr;
  RsmiStatus (*dev_drm_render_minor_get)(uint32_t dv, uint32_t* minor) = nullptr;
  RsmiStatus (*dev_temp_metric_get)(uint32_t dv, uint32_t sensor, uint32_t metric,
                                    int64_t* millidegrees) = nullptr;
  RsmiStatus (*dev_power_ave_get)(uint32_t dv, uint32_t sensor, uint64_t* microwatts) = nullptr;
  RsmiStatus (*topo_get_link_type)(uint32_t src, uint32_t dst, uint64_t* hops,
                                   uint32_t* type) = nullptr;
  RsmiStatus (*version_get)(RsmiVersion* version) = nullptr;
  RsmiStatus (*version_str_get)(uint32_t component, char* text, uint32_t len) = nullptr;
  RsmiStatus (*status_string)(RsmiStatus status, const char** text) = nullptr;
  // The processes using GPUs (KFD's /sys/class/kfd/kfd/proc): the node's list (pids and
  // pasids only, no memory), the devices (dv indices) one uses, its VRAM summed over
  // every device, and (ROCm 5.7+) its VRAM on one device.
  RsmiStatus (*compute_process_info_get)(RsmiProcessInfo* procs, uint32_t* num_items) = nullptr;
  RsmiStatus (*compute_process_gpus_get)(uint32_t pid, uint32_t* dv_indices,
                                         uint32_t* num_devices) = nullptr;
  RsmiStatus (*compute_process_info_by_pid_get)(uint32_t pid, RsmiProcessInfo* proc) = nullptr;
  RsmiStatus (*compute_process_info_by_device_get)(uint32_t pid, uint32_t dv,
                                                   RsmiProcessInfo* proc) = nullptr;
};

// File names to try for `name`: itself, and for a bare default name also the versioned
// sonames and /opt/rocm/lib, since Debian and AMD package the library differently. A
// name with a '/' is a path and is tried alone.
std::vector<std::string> RocmSmiLibraryCandidates(const std::string& name);

class RocmSmiLibrary {
 public:
  // Loads the first loadable candidate of `name` and resolves the symbols. Unavailable
  // when no candidate loads or a required symbol is missing (the message names it).
  static Result<std::unique_ptr<RocmSmiLibrary>> Load(const std::string& name);

  RocmSmiLibrary(const RocmSmiLibrary&) = delete;
  RocmSmiLibrary& operator=(const RocmSmiLibrary&) = delete;
  ~RocmSmiLibrary();

  // rsmi_init(0). Unavailable with the library's own words on failure.
  Status Init();

  const RocmSmiApi& api() const { return api_; }
  // Optional symbols the library lacks, in declaration order.
  const std::vector<std::string>& missing_optional() const { return missing_optional_; }
  // The loaded file's absolute path when the loader tells it, else the name loaded.
  const std::string& path() const { return path_; }

  // "RSMI_STATUS_PERMISSION: ..." from rsmi_status_string, or our own name of the code.
  std::string ErrorString(RsmiStatus status) const;

 private:
  RocmSmiLibrary() = default;

  void* handle_ = nullptr;
  bool initialized_ = false;
  RocmSmiApi api_;
  std::vector<std::string> missing_optional_;
  std::string path_;
};

}  // namespace gpupool::gpu::rocm
