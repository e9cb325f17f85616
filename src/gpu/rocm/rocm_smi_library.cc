#include "gpu/rocm/rocm_smi_library.h"

#include <dlfcn.h>
#include <link.h>

#include <cstring>
#include <string_view>

#include "common/strings.h"

namespace gpupool::gpu::rocm {
namespace {

// Names of rsmi_status_t values, for libraries that lack rsmi_status_string.
std::string StatusCodeNameOf(RsmiStatus status) {
  static constexpr std::string_view kNames[] = {
      "RSMI_STATUS_SUCCESS",
      "RSMI_STATUS_INVALID_ARGS",
      "RSMI_STATUS_NOT_SUPPORTED",
      "RSMI_STATUS_FILE_ERROR",
      "RSMI_STATUS_PERMISSION",
      "RSMI_STATUS_OUT_OF_RESOURCES",
      "RSMI_STATUS_INTERNAL_EXCEPTION",
      "RSMI_STATUS_INPUT_OUT_OF_BOUNDS",
      "RSMI_STATUS_INIT_ERROR",
      "RSMI_STATUS_NOT_YET_IMPLEMENTED",
      "RSMI_STATUS_NOT_FOUND",
      "RSMI_STATUS_INSUFFICIENT_SIZE",
      "RSMI_STATUS_INTERRUPT",
      "RSMI_STATUS_UNEXPECTED_SIZE",
      "RSMI_STATUS_NO_DATA",
      "RSMI_STATUS_UNEXPECTED_DATA",
      "RSMI_STATUS_BUSY",
      "RSMI_STATUS_REFCOUNT_OVERFLOW",
  };
  if (status < std::size(kNames)) return std::string(kNames[status]);
  if (status == 0xFFFFFFFFu) return "RSMI_STATUS_UNKNOWN_ERROR";
  return "rsmi status " + std::to_string(status);
}

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? SanitizeUtf8(e) : "unknown dlopen error";
}

template <typename Fn>
void* Resolve(void* handle, const char* symbol, Fn** slot) {
  void* sym = dlsym(handle, symbol);
  // POSIX guarantees that a dlsym result converts to a function pointer.
  *slot = reinterpret_cast<Fn*>(sym);
  return sym;
}

}  // namespace

std::vector<std::string> RocmSmiLibraryCandidates(const std::string& name) {
  if (name.find('/') != std::string::npos) return {name};
  std::vector<std::string> out = {name};
  if (name == "librocm_smi64.so") {
    for (const char* soname : {"librocm_smi64.so.1", "librocm_smi64.so.5", "librocm_smi64.so.6",
                               "librocm_smi64.so.7", "/opt/rocm/lib/librocm_smi64.so"}) {
      out.push_back(soname);
    }
  }
  return out;
}

Result<std::unique_ptr<RocmSmiLibrary>> RocmSmiLibrary::Load(const std::string& name) {
  std::unique_ptr<RocmSmiLibrary> lib(new RocmSmiLibrary());
  std::string first_error;
  for (const std::string& candidate : RocmSmiLibraryCandidates(name)) {
    lib->handle_ = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib->handle_ != nullptr) {
      lib->path_ = candidate;
      break;
    }
    if (first_error.empty()) first_error = DlError();
  }
  if (lib->handle_ == nullptr) {
    return Status::Unavailable(name + " could not be loaded (" + first_error + ")");
  }
  const struct link_map* map = nullptr;
  if (dlinfo(lib->handle_, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr &&
      map->l_name != nullptr && map->l_name[0] == '/') {
    lib->path_ = map->l_name;
  }

  RocmSmiApi& a = lib->api_;
  struct Required {
    const char* symbol;
    void* found;
  };
  const Required required[] = {
      {"rsmi_init", Resolve(lib->handle_, "rsmi_init", &a.init)},
      {"rsmi_shut_down", Resolve(lib->handle_, "rsmi_shut_down", &a.shut_down)},
      {"rsmi_num_monitor_devices",
       Resolve(lib->handle_, "rsmi_num_monitor_devices", &a.num_monitor_devices)},
      {"rsmi_dev_pci_id_get", Resolve(lib->handle_, "rsmi_dev_pci_id_get", &a.dev_pci_id_get)},
  };
  for (const Required& r : required) {
    if (r.found == nullptr) {
      return Status::Unavailable(lib->path_ + " lacks the required symbol " + r.symbol +
                                 ": install a ROCm SMI library of ROCm 5.0 or newer");
    }
  }
  auto optional = [&](const char* symbol, auto** slot) {
    if (Resolve(lib->handle_, symbol, slot) == nullptr) lib->missing_optional_.push_back(symbol);
  };
  optional("rsmi_dev_name_get", &a.dev_name_get);
  optional("rsmi_dev_unique_id_get", &a.dev_unique_id_get);
  optional("rsmi_dev_memory_total_get", &a.dev_memory_total_get);
  optional("rsmi_dev_memory_usage_get", &a.dev_memory_usage_get);
  optional("rsmi_dev_busy_percent_get", &a.dev_busy_percent_get);
  optional("rsmi_topo_numa_affinity_get", &a.topo_numa_affinity_get);
  optional("rsmi_dev_drm_render_minor_get", &a.dev_drm_render_minor_get);
  optional("rsmi_dev_temp_metric_get", &a.dev_temp_metric_get);
  optional("rsmi_dev_power_ave_get", &a.dev_power_ave_get);
  optional("rsmi_topo_get_link_type", &a.topo_get_link_type);
  optional("rsmi_version_get", &a.version_get);
  optional("rsmi_version_str_get", &a.version_str_get);
  optional("rsmi_status_string", &a.status_string);
  optional("rsmi_compute_process_info_get", &a.compute_process_info_get);
  optional("rsmi_compute_process_gpus_get", &a.compute_process_gpus_get);
  optional("rsmi_compute_process_info_by_pid_get", &a.compute_process_info_by_pid_get);
  optional("rsmi_compute_process_info_by_device_get", &a.compute_process_info_by_device_get);
  return lib;
}

RocmSmiLibrary::~RocmSmiLibrary() {
  if (initialized_ && api_.shut_down != nullptr) api_.shut_down();
  if (handle_ != nullptr) dlclose(handle_);
}

Status RocmSmiLibrary::Init() {
  const RsmiStatus s = api_.init(0);
  if (s != kRsmiSuccess) {
    return Status::Unavailable("rsmi_init failed: " + ErrorString(s) +
                               " (is the amdgpu driver loaded and /dev/kfd readable?)");
  }
  initialized_ = true;
  return Status::Ok();
}

std::string RocmSmiLibrary::ErrorString(RsmiStatus status) const {
  std::string out = StatusCodeNameOf(status);
  if (api_.status_string == nullptr) return out;
  const char* text = nullptr;
  if (api_.status_string(status, &text) != kRsmiSuccess || text == nullptr) return out;
  // The string belongs to the library; bound the read in case it is not terminated.
  const std::string described = SanitizeUtf8(std::string_view(text, strnlen(text, 256)));
  if (described.empty()) return out;
  return described.find(out) != std::string::npos ? described : out + " (" + described + ")";
}

}  // namespace gpupool::gpu::rocm
