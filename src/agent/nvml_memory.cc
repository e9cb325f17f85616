#include "agent/nvml_memory.h"

#include <dlfcn.h>

namespace gpupool::agent {
namespace {

// NVML's ABI as its reference gives it (our own declarations, as gpu/nvml's: no nvml.h).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct SetMemoryLimitsV1 {  // nvmlSetMemoryLimits_v1_t
  const char* name_space;   // the cgroup's directory
  unsigned long long soft_limit;
  unsigned long long hard_limit;
};
using InitFn = NvmlReturn (*)();
using ErrorStringFn = const char* (*)(NvmlReturn);
using HandleByUuidFn = NvmlReturn (*)(const char*, NvmlDevice*);
using SetMemoryLimitsFn = NvmlReturn (*)(NvmlDevice, SetMemoryLimitsV1*);

constexpr char kSetLimits[] = "nvmlDeviceSetMemoryLimits_v1";

// One dlopen, closed on destruction.
class Library {
 public:
  explicit Library(const std::string& path)
      : handle_(::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~Library() {
    if (handle_ != nullptr) ::dlclose(handle_);
  }
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  void* handle() const { return handle_; }
  template <typename Fn>
  Fn Find(const char* name) const {
    return handle_ == nullptr ? nullptr : reinterpret_cast<Fn>(::dlsym(handle_, name));
  }

 private:
  void* handle_;
};

std::string NvmlError(ErrorStringFn error_string, const char* call, NvmlReturn rc) {
  const char* text = error_string != nullptr ? error_string(rc) : nullptr;
  std::string out = std::string(call) + ": ";
  // Bounded and printable: the text is the library's.
  for (size_t i = 0; text != nullptr && text[i] != '\0' && i < 200; ++i) {
    out += text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
  }
  return out + " (NVML error " + std::to_string(rc) + ")";
}

}  // namespace

std::string NvmlMemoryLimitsLibrary(const std::string& library) {
  Library lib(library);
  void* set = lib.Find<void*>(kSetLimits);
  Dl_info info{};
  if (set == nullptr || ::dladdr(set, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

Status ApplyNvmlMemoryLimit(const NvmlMemoryLimit& limit) {
  const std::string what = "NVML could not cap GPU " + limit.gpu_uuid + " at " +
                           std::to_string(limit.hard_bytes) + " B for the cgroup '" +
                           limit.cgroup_dir + "'";
  Library lib(limit.library);
  if (lib.handle() == nullptr) {
    const char* err = ::dlerror();
    return Status::Unavailable(what + ": cannot load '" + limit.library +
                               "': " + (err != nullptr ? err : "unknown error"));
  }
  auto init = lib.Find<InitFn>("nvmlInit_v2");
  auto shutdown = lib.Find<InitFn>("nvmlShutdown");
  auto error_string = lib.Find<ErrorStringFn>("nvmlErrorString");
  auto by_uuid = lib.Find<HandleByUuidFn>("nvmlDeviceGetHandleByUUID");
  auto set = lib.Find<SetMemoryLimitsFn>(kSetLimits);
  if (init == nullptr || shutdown == nullptr || by_uuid == nullptr || set == nullptr) {
    return Status::FailedPrecondition(what + ": '" + limit.library +
                                      "' lacks nvmlInit_v2, nvmlShutdown, "
                                      "nvmlDeviceGetHandleByUUID or " +
                                      kSetLimits + " (a driver before R615)");
  }
  if (NvmlReturn rc = init(); rc != 0) {
    return Status::Unavailable(what + ": " + NvmlError(error_string, "nvmlInit_v2", rc));
  }
  NvmlDevice device = nullptr;
  NvmlReturn rc = by_uuid(limit.gpu_uuid.c_str(), &device);
  const char* call = "nvmlDeviceGetHandleByUUID";
  if (rc == 0) {
    SetMemoryLimitsV1 limits{limit.cgroup_dir.c_str(), limit.soft_bytes, limit.hard_bytes};
    rc = set(device, &limits);
    call = kSetLimits;
  }
  Status st =
      rc == 0 ? Status::Ok() : Status::Unavailable(what + ": " + NvmlError(error_string, call, rc));
  (void)shutdown();
  return st;
}

}  // namespace gpupool::agent
