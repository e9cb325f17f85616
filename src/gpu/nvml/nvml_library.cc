#include "gpu/nvml/nvml_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/strings.h"

namespace gpupool::gpu::nvml {
namespace {

// dlsym hands back an object pointer; copying the bits is the portable way to turn it
// into a function pointer without relying on a conditionally-supported cast.
template <typename Fn>
Fn SymbolAs(void* handle, const char* name) {
  static_assert(sizeof(Fn) == sizeof(void*));
  void* sym = dlsym(handle, name);
  Fn fn = nullptr;
  std::memcpy(&fn, &sym, sizeof fn);
  return fn;
}

std::string LoadedFrom(void* handle, const Functions& fn) {
  std::string path;
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    path = map->l_name;
  }
  if (path.empty()) {
    // Some loaders leave l_name empty; the file that defines a symbol is the same answer.
    Dl_info info{};
    void* addr = nullptr;
    std::memcpy(&addr, &fn.init_v2, sizeof addr);
    if (dladdr(addr, &info) != 0 && info.dli_fname != nullptr) path = info.dli_fname;
  }
  if (path.empty()) return "";
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) return "";
  return abs.lexically_normal().parent_path().string();
}

}  // namespace

const char* ReturnCodeName(Return code) {
  switch (code) {
    case kSuccess:
      return "NVML_SUCCESS";
    case kErrorUninitialized:
      return "NVML_ERROR_UNINITIALIZED";
    case kErrorInvalidArgument:
      return "NVML_ERROR_INVALID_ARGUMENT";
    case kErrorNotSupported:
      return "NVML_ERROR_NOT_SUPPORTED";
    case kErrorNoPermission:
      return "NVML_ERROR_NO_PERMISSION";
    case kErrorAlreadyInitialized:
      return "NVML_ERROR_ALREADY_INITIALIZED";
    case kErrorNotFound:
      return "NVML_ERROR_NOT_FOUND";
    case kErrorInsufficientSize:
      return "NVML_ERROR_INSUFFICIENT_SIZE";
    case kErrorInsufficientPower:
      return "NVML_ERROR_INSUFFICIENT_POWER";
    case kErrorDriverNotLoaded:
      return "NVML_ERROR_DRIVER_NOT_LOADED";
    case kErrorTimeout:
      return "NVML_ERROR_TIMEOUT";
    case kErrorIrqIssue:
      return "NVML_ERROR_IRQ_ISSUE";
    case kErrorLibraryNotFound:
      return "NVML_ERROR_LIBRARY_NOT_FOUND";
    case kErrorFunctionNotFound:
      return "NVML_ERROR_FUNCTION_NOT_FOUND";
    case kErrorCorruptedInforom:
      return "NVML_ERROR_CORRUPTED_INFOROM";
    case kErrorGpuIsLost:
      return "NVML_ERROR_GPU_IS_LOST";
    case kErrorResetRequired:
      return "NVML_ERROR_RESET_REQUIRED";
    case kErrorOperatingSystem:
      return "NVML_ERROR_OPERATING_SYSTEM";
    case kErrorLibRmVersionMismatch:
      return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
    case kErrorInUse:
      return "NVML_ERROR_IN_USE";
    case kErrorMemory:
      return "NVML_ERROR_MEMORY";
    case kErrorNoData:
      return "NVML_ERROR_NO_DATA";
    case kErrorVgpuEccNotSupported:
      return "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED";
    case kErrorInsufficientResources:
      return "NVML_ERROR_INSUFFICIENT_RESOURCES";
    case kErrorFreqNotSupported:
      return "NVML_ERROR_FREQ_NOT_SUPPORTED";
    case kErrorArgumentVersionMismatch:
      return "NVML_ERROR_ARGUMENT_VERSION_MISMATCH";
    case kErrorDeprecated:
      return "NVML_ERROR_DEPRECATED";
    case kErrorNotReady:
      return "NVML_ERROR_NOT_READY";
    case kErrorGpuNotFound:
      return "NVML_ERROR_GPU_NOT_FOUND";
    case kErrorInvalidState:
      return "NVML_ERROR_INVALID_STATE";
    case kErrorUnknown:
      return "NVML_ERROR_UNKNOWN";
    default:
      return nullptr;
  }
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& library) {
  dlerror();  // clear any stale error
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::Unavailable(
        library + " not found (" + SanitizeUtf8(err != nullptr ? err : "no loader message") +
        "): install the NVIDIA driver, which provides libnvidia-ml.so.1, or set "
        "GPUPOOL_NVML_LIBRARY to its path");
  }
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary(handle));
  Functions& f = lib->fn_;

  struct Required {
    const char* name;
    bool present;
  };
  f.init_v2 = SymbolAs<InitFn>(handle, "nvmlInit_v2");
  f.shutdown = SymbolAs<ShutdownFn>(handle, "nvmlShutdown");
  f.device_get_count_v2 = SymbolAs<GetCountFn>(handle, "nvmlDeviceGetCount_v2");
  f.device_get_handle_by_index_v2 =
      SymbolAs<GetHandleByIndexFn>(handle, "nvmlDeviceGetHandleByIndex_v2");
  f.error_string = SymbolAs<ErrorStringFn>(handle, "nvmlErrorString");
  for (const Required& r :
       {Required{"nvmlInit_v2", f.init_v2 != nullptr},
        Required{"nvmlShutdown", f.shutdown != nullptr},
        Required{"nvmlDeviceGetCount_v2", f.device_get_count_v2 != nullptr},
        Required{"nvmlDeviceGetHandleByIndex_v2", f.device_get_handle_by_index_v2 != nullptr},
        Required{"nvmlErrorString", f.error_string != nullptr}}) {
    if (!r.present) {
      // `lib` dlcloses the handle on the way out.
      return Status::Unavailable(library + " lacks the required entry point " + r.name +
                                 ": the NVIDIA driver is too old or its installation is "
                                 "broken; install a current NVIDIA driver");
    }
  }

  f.system_get_driver_version = SymbolAs<GetStringFn>(handle, "nvmlSystemGetDriverVersion");
  f.system_get_cuda_driver_version_v2 =
      SymbolAs<GetIntFn>(handle, "nvmlSystemGetCudaDriverVersion_v2");
  f.system_get_cuda_driver_version = SymbolAs<GetIntFn>(handle, "nvmlSystemGetCudaDriverVersion");
  f.device_get_name = SymbolAs<DeviceStringFn>(handle, "nvmlDeviceGetName");
  f.device_get_uuid = SymbolAs<DeviceStringFn>(handle, "nvmlDeviceGetUUID");
  f.device_get_pci_info_v3 = SymbolAs<DevicePciFn>(handle, "nvmlDeviceGetPciInfo_v3");
  f.device_get_pci_info_v2 = SymbolAs<DevicePciFn>(handle, "nvmlDeviceGetPciInfo_v2");
  f.device_get_memory_info = SymbolAs<DeviceMemoryFn>(handle, "nvmlDeviceGetMemoryInfo");
  f.device_get_cuda_compute_capability =
      SymbolAs<DeviceTwoIntsFn>(handle, "nvmlDeviceGetCudaComputeCapability");
  f.device_get_minor_number = SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetMinorNumber");
  f.device_get_numa_node_id = SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetNumaNodeId");
  f.device_get_cpu_affinity = SymbolAs<DeviceCpuAffinityFn>(handle, "nvmlDeviceGetCpuAffinity");
  f.device_get_mig_mode = SymbolAs<DeviceTwoUintsFn>(handle, "nvmlDeviceGetMigMode");
  f.device_get_max_mig_device_count =
      SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetMaxMigDeviceCount");
  f.device_get_mig_device_handle_by_index =
      SymbolAs<DeviceIndexedHandleFn>(handle, "nvmlDeviceGetMigDeviceHandleByIndex");
  f.device_get_gpu_instance_id = SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetGpuInstanceId");
  f.device_get_compute_instance_id =
      SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetComputeInstanceId");
  f.device_get_ecc_mode = SymbolAs<DeviceTwoUintsFn>(handle, "nvmlDeviceGetEccMode");
  f.device_get_utilization_rates =
      SymbolAs<DeviceUtilizationFn>(handle, "nvmlDeviceGetUtilizationRates");
  f.device_get_temperature = SymbolAs<DeviceTemperatureFn>(handle, "nvmlDeviceGetTemperature");
  f.device_get_power_usage = SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetPowerUsage");
  f.device_get_enforced_power_limit =
      SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetEnforcedPowerLimit");
  f.device_get_nvlink_state = SymbolAs<DeviceLinkUintFn>(handle, "nvmlDeviceGetNvLinkState");
  f.device_get_nvlink_remote_pci_info_v2 =
      SymbolAs<DeviceLinkPciFn>(handle, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  f.device_get_nvlink_remote_pci_info =
      SymbolAs<DeviceLinkPciFn>(handle, "nvmlDeviceGetNvLinkRemotePciInfo");
  f.device_get_nvlink_remote_device_type =
      SymbolAs<DeviceLinkIntFn>(handle, "nvmlDeviceGetNvLinkRemoteDeviceType");
  f.device_get_topology_common_ancestor =
      SymbolAs<DevicePairIntFn>(handle, "nvmlDeviceGetTopologyCommonAncestor");

  f.device_get_total_ecc_errors = SymbolAs<DeviceEccCountFn>(handle, "nvmlDeviceGetTotalEccErrors");
  f.device_get_compute_running_processes =
      SymbolAs<DeviceProcessesFn>(handle, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (f.device_get_compute_running_processes == nullptr) {
    f.device_get_compute_running_processes =
        SymbolAs<DeviceProcessesFn>(handle, "nvmlDeviceGetComputeRunningProcesses_v2");
  }
  f.device_get_process_utilization =
      SymbolAs<DeviceProcessUtilFn>(handle, "nvmlDeviceGetProcessUtilization");
  f.device_get_retired_pages = SymbolAs<DeviceRetiredPagesFn>(handle, "nvmlDeviceGetRetiredPages");
  f.device_get_retired_pages_pending_status =
      SymbolAs<DeviceUintFn>(handle, "nvmlDeviceGetRetiredPagesPendingStatus");
  f.device_get_remapped_rows = SymbolAs<DeviceRemappedRowsFn>(handle, "nvmlDeviceGetRemappedRows");
  f.device_get_current_clocks_event_reasons =
      SymbolAs<DeviceUllFn>(handle, "nvmlDeviceGetCurrentClocksEventReasons");
  if (f.device_get_current_clocks_event_reasons == nullptr) {
    f.device_get_current_clocks_event_reasons =
        SymbolAs<DeviceUllFn>(handle, "nvmlDeviceGetCurrentClocksThrottleReasons");
  }
  f.event_set_create = SymbolAs<EventSetCreateFn>(handle, "nvmlEventSetCreate");
  f.device_register_events = SymbolAs<DeviceRegisterEventsFn>(handle, "nvmlDeviceRegisterEvents");
  f.event_set_wait = SymbolAs<EventSetWaitFn>(handle, "nvmlEventSetWait_v2");
  if (f.event_set_wait == nullptr) {
    f.event_set_wait = SymbolAs<EventSetWaitFn>(handle, "nvmlEventSetWait");
  }
  f.event_set_free = SymbolAs<EventSetFreeFn>(handle, "nvmlEventSetFree");

  lib->directory_ = LoadedFrom(handle, f);
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string NvmlLibrary::ErrorText(Return code) const {
  std::string text;
  if (const char* s = fn_.error_string(code); s != nullptr) {
    // The library owns the string; read at most a screenful in case it is unterminated.
    text = SanitizeUtf8(std::string_view(s, strnlen(s, 256)));
  }
  const char* name = ReturnCodeName(code);
  std::string code_name =  // not const: returned, so moved
      name != nullptr ? std::string(name) : "NVML error " + std::to_string(code);
  if (text.empty()) return code_name;
  return text + " (" + code_name + ")";
}

Result<std::unique_ptr<NvmlSession>> NvmlSession::Start(const NvmlLibrary& library) {
  const Return rc = library.fn().init_v2();
  if (rc == kSuccess) return std::unique_ptr<NvmlSession>(new NvmlSession(library));
  const std::string why = library.ErrorText(rc);
  switch (rc) {
    case kErrorDriverNotLoaded:
      return Status::Unavailable("the NVIDIA kernel driver is not loaded: " + why +
                                 "; load it (modprobe nvidia) or install the NVIDIA driver");
    case kErrorNoPermission:
      return Status::Unavailable("no permission to use the NVIDIA devices: " + why +
                                 "; check the permissions of /dev/nvidia*");
    case kErrorLibRmVersionMismatch:
      return Status::Unavailable(
          "libnvidia-ml and the NVIDIA kernel driver have different versions: " + why +
          "; reboot after a driver upgrade, or reinstall the driver");
    case kErrorLibraryNotFound:
      return Status::Unavailable("NVML could not find a library it needs: " + why +
                                 "; reinstall the NVIDIA driver");
    default:
      return Status::Unavailable("nvmlInit_v2 failed: " + why +
                                 "; check that the NVIDIA driver works (nvidia-smi)");
  }
}

NvmlSession::~NvmlSession() { library_.fn().shutdown(); }

}  // namespace gpupool::gpu::nvml
