#include "gpu/nvml/nvml_driver.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "common/strings.h"
#include "gpu/nvml/nvml_values.h"

namespace gpupool::gpu::nvml {
namespace {

// The user-space pieces of the driver that CUDA programs load (what the NVIDIA
// container toolkit mounts for compute): CUDA driver API, NVML, the JIT compilers,
// debugger support, the allocator, the config library and OpenCL.
constexpr const char* kDriverLibraries[] = {
    "libcuda",        "libnvidia-ml",     "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm", "libcudadebugger",  "libnvidia-allocator",
    "libnvidia-cfg",  "libnvidia-opencl",
};

constexpr const char* kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                         "nvidia-modeset"};

// A version is used in file names only if it cannot walk out of the directory.
bool IsPlainVersion(std::string_view v) {
  if (v.empty() || v.size() > 32) return false;
  return std::all_of(v.begin(), v.end(), [](char c) { return (c >= '0' && c <= '9') || c == '.'; });
}

}  // namespace

std::vector<std::string> ListDriverLibraries(const std::string& directory,
                                             const std::string& driver_version) {
  std::vector<std::string> out;
  if (directory.empty()) return out;
  const bool versioned = IsPlainVersion(driver_version);
  // Iterated with error codes: the range-for form throws on a read error mid-listing.
  std::error_code ec;
  for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::filesystem::directory_entry& entry = *it;
    const std::string name = entry.path().filename().string();
    const bool wanted =
        std::any_of(std::begin(kDriverLibraries), std::end(kDriverLibraries), [&](const char* lib) {
          const std::string prefix = std::string(lib) + ".so.";
          if (versioned) return name == prefix + driver_version;
          return StartsWith(name, prefix) && name.size() > prefix.size();
        });
    if (!wanted) continue;
    std::error_code fec;
    if (!std::filesystem::is_regular_file(entry.path(), fec)) continue;  // follows symlinks
    if (!versioned && std::filesystem::is_symlink(entry.symlink_status(fec))) continue;
    out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> ListControlNodes(const std::string& dev_root) {
  std::vector<std::string> out;
  for (const char* node : kControlNodes) {
    std::error_code ec;
    if (std::filesystem::exists(dev_root + "/" + node, ec))
      out.push_back(std::string("/dev/") + node);
  }
  return out;
}

DriverInfo QueryDriver(const NvmlLibrary& library, const DiscoveryOptions& options,
                       DiagnosticSink* sink) {
  const Functions& fn = library.fn();
  DriverInfo d;
  if (fn.system_get_driver_version == nullptr) {
    sink->MissingSymbol("nvmlSystemGetDriverVersion", "the driver version is unknown");
  } else {
    char buf[kDriverVersionBufferSize + 1] = {};
    if (Return rc = fn.system_get_driver_version(buf, kDriverVersionBufferSize); rc != kSuccess) {
      sink->CallFailed("nvmlSystemGetDriverVersion", rc);
    } else {
      d.version = std::string(Trim(BoundedString(buf, kDriverVersionBufferSize)));
    }
  }

  GetIntFn cuda = fn.system_get_cuda_driver_version_v2;
  const char* cuda_symbol = "nvmlSystemGetCudaDriverVersion_v2";
  if (cuda == nullptr) {
    cuda = fn.system_get_cuda_driver_version;
    cuda_symbol = "nvmlSystemGetCudaDriverVersion";
  }
  if (cuda == nullptr) {
    sink->MissingSymbol("nvmlSystemGetCudaDriverVersion_v2",
                        "the supported CUDA version is unknown");
  } else {
    int version = 0;
    if (Return rc = cuda(&version); rc != kSuccess) {
      sink->CallFailed(cuda_symbol, rc);
    } else if (version <= 0 || version >= 1000000) {
      sink->Note("NVML reports CUDA driver version " + std::to_string(version) +
                 "; the supported CUDA version is left unknown");
    } else {
      d.runtime_version = CudaVersionString(version);
    }
  }

  d.libraries = ListDriverLibraries(library.directory(), d.version);
  d.control_nodes = ListControlNodes(options.dev_root);
  return d;
}

}  // namespace gpupool::gpu::nvml
