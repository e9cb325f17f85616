// GpuBackend: one way of discovering GPUs (NVML, ROCm SMI, sysfs, a fake node file).
//
// Backends load their vendor libraries at run time (dlopen), so one gpupool binary runs
// on hosts with and without them. Discover() never crashes on a missing library, missing
// symbol, failing call or odd value: it returns kUnavailable when the backend cannot run
// here at all, and otherwise a NodeInfo that may carry Diagnostics for partial failures.
// A backend object is used from one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpu/gpu_info.h"

namespace gpupool::gpu {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  virtual std::string_view name() const = 0;
  // Reports the GPUs this backend can see, with driver info and topology for its vendor.
  virtual Result<NodeInfo> Discover() = 0;
};

// Where backends look; overridable so tests point the real code at fake libraries and
// fake sysfs trees.
struct DiscoveryOptions {
  // Backends to use, in priority order. Empty means probe all real ones ("nvml",
  // "rocm-smi", "sysfs"); "fake" needs fake_node_file.
  std::vector<std::string> backends;
  std::string nvml_library = "libnvidia-ml.so.1";     // env GPUPOOL_NVML_LIBRARY overrides
  std::string rocm_smi_library = "librocm_smi64.so";  // env GPUPOOL_ROCM_SMI_LIBRARY overrides
  std::string sysfs_root = "/sys";                    // env GPUPOOL_SYSFS_ROOT overrides
  std::string dev_root = "/dev";                      // env GPUPOOL_DEV_ROOT overrides
  std::string proc_root = "/proc";                    // env GPUPOOL_PROC_ROOT overrides
  std::string fake_node_file;
};

// Applies the GPUPOOL_* environment overrides above to `options`.
DiscoveryOptions WithEnvironmentOverrides(DiscoveryOptions options);

// Creates a backend by name: "nvml", "rocm-smi", "sysfs", "fake". Unknown names are an
// InvalidArgument listing the known ones.
Result<std::unique_ptr<GpuBackend>> CreateBackend(std::string_view name,
                                                  const DiscoveryOptions& options);

// Runs the chosen (or all) backends and merges their answers: GPUs are de-duplicated by
// PCI bus id, the first backend in priority order winning; an unavailable backend becomes
// a Diagnostic, not an error. Fails only when a backend that was explicitly asked for
// fails, or on bad options.
Result<NodeInfo> DiscoverNode(const DiscoveryOptions& options);

}  // namespace gpupool::gpu
