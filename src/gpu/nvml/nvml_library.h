// NvmlLibrary: one dlopen of libnvidia-ml and the entry points resolved from it.
//
// Open() fails (kUnavailable) when the library cannot be loaded or lacks one of the
// entry points every supported driver has; every other entry point is optional and left
// null when absent, so callers check before calling. The object owns the dlopen handle
// and dlcloses it on destruction; it does not call nvmlInit (see NvmlSession).
// Not thread-safe; one discovery at a time.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "gpu/nvml/nvml_api.h"

namespace gpupool::gpu::nvml {

struct Functions {
  // Required: present in every driver since R319 (2013); Open() fails without them.
  InitFn init_v2 = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  GetCountFn device_get_count_v2 = nullptr;
  GetHandleByIndexFn device_get_handle_by_index_v2 = nullptr;

  // Optional.
  GetStringFn system_get_driver_version = nullptr;
  GetIntFn system_get_cuda_driver_version_v2 = nullptr;
  GetIntFn system_get_cuda_driver_version = nullptr;
  DeviceStringFn device_get_name = nullptr;
  DeviceStringFn device_get_uuid = nullptr;
  DevicePciFn device_get_pci_info_v3 = nullptr;
  DevicePciFn device_get_pci_info_v2 = nullptr;
  DeviceMemoryFn device_get_memory_info = nullptr;
  DeviceTwoIntsFn device_get_cuda_compute_capability = nullptr;
  DeviceUintFn device_get_minor_number = nullptr;
  DeviceUintFn device_get_numa_node_id = nullptr;
  DeviceCpuAffinityFn device_get_cpu_affinity = nullptr;
  DeviceTwoUintsFn device_get_mig_mode = nullptr;
  DeviceUintFn device_get_max_mig_device_count = nullptr;
  DeviceIndexedHandleFn device_get_mig_device_handle_by_index = nullptr;
  DeviceUintFn device_get_gpu_instance_id = nullptr;
  DeviceUintFn device_get_compute_instance_id = nullptr;
  DeviceTwoUintsFn device_get_ecc_mode = nullptr;
  DeviceUtilizationFn device_get_utilization_rates = nullptr;
  DeviceTemperatureFn device_get_temperature = nullptr;
  DeviceUintFn device_get_power_usage = nullptr;
  DeviceUintFn device_get_enforced_power_limit = nullptr;
  DeviceLinkUintFn device_get_nvlink_state = nullptr;
  DeviceLinkPciFn device_get_nvlink_remote_pci_info_v2 = nullptr;
  DeviceLinkPciFn device_get_nvlink_remote_pci_info = nullptr;  // v1 layout, see PciInfo
  DeviceLinkIntFn device_get_nvlink_remote_device_type = nullptr;
  DevicePairIntFn device_get_topology_common_ancestor = nullptr;
  // Telemetry (TelemetrySampler).
  DeviceEccCountFn device_get_total_ecc_errors = nullptr;
  DeviceProcessesFn device_get_compute_running_processes = nullptr;  // _v3, else _v2
  DeviceProcessUtilFn device_get_process_utilization = nullptr;
  // Hardware health (TelemetrySampler, gpu::HardwareHealth), each optional on its own.
  DeviceRetiredPagesFn device_get_retired_pages = nullptr;
  DeviceUintFn device_get_retired_pages_pending_status = nullptr;  // nvmlEnableState_t
  DeviceRemappedRowsFn device_get_remapped_rows = nullptr;
  DeviceUllFn device_get_current_clocks_event_reasons = nullptr;  // else ThrottleReasons
  // Xid events (TelemetrySampler): all four, or the sampler reports no Xid.
  EventSetCreateFn event_set_create = nullptr;
  DeviceRegisterEventsFn device_register_events = nullptr;
  EventSetWaitFn event_set_wait = nullptr;  // _v2, else v1 (which fills less of EventData)
  EventSetFreeFn event_set_free = nullptr;
};

class NvmlLibrary {
 public:
  // Loads `library` (a file name searched by the dynamic loader, or a path).
  static Result<std::unique_ptr<NvmlLibrary>> Open(const std::string& library);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  const Functions& fn() const { return fn_; }

  // "GPU is lost (NVML_ERROR_GPU_IS_LOST)": the library's own text, bounded and made
  // printable, and our name for the code.
  std::string ErrorText(Return code) const;

  // The absolute directory the library was loaded from ("" when the loader does not
  // say); the driver's other user-space libraries sit beside it.
  const std::string& directory() const { return directory_; }

 private:
  explicit NvmlLibrary(void* handle) : handle_(handle) {}
  void* handle_;
  Functions fn_;
  std::string directory_;
};

// Calls nvmlInit_v2 and, on destruction, nvmlShutdown when the init succeeded.
class NvmlSession {
 public:
  // Fails with kUnavailable and a message that says what to do.
  static Result<std::unique_ptr<NvmlSession>> Start(const NvmlLibrary& library);
  ~NvmlSession();
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;

 private:
  explicit NvmlSession(const NvmlLibrary& library) : library_(library) {}
  const NvmlLibrary& library_;
};

}  // namespace gpupool::gpu::nvml
