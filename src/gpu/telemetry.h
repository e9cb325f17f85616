// TelemetrySampler: reads the node's GPUs' live figures (utilisation, memory, power,
// temperature, error counts, hardware health, the processes using them) at the agent's
// telemetry interval.
//
// Unlike a GpuBackend, a sampler keeps its vendor library open between samples (one
// dlopen and init at creation), so a sample costs only the per-device calls. A figure the
// source cannot give (a missing optional symbol, a failing call, a file that is absent)
// is left unset, never guessed. Sample() fails only when nothing could be read at all.
// The caller passes the time (its injected clock), which scripted sources (the fake
// node's profile) use. A sampler is used from one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpu/gpu_backend.h"
#include "gpu/gpu_info.h"
#include "gpu/health_policy.h"

namespace gpupool::gpu {

// A process using a GPU, as the vendor library sees it.
struct ProcessSample {
  int64_t pid = 0;
  std::optional<int64_t> used_mib;  // GPU memory it holds
  std::optional<double> util_pct;   // its share of the GPU's SMs over the last period
  friend bool operator==(const ProcessSample&, const ProcessSample&) = default;
};

// One reading of one GPU. Fields stay unset when the source lacks them.
struct GpuSample {
  int index = -1;    // GpuInfo::index
  std::string uuid;  // GpuInfo::uuid ("" when unknown)
  std::optional<double> util_pct;
  std::optional<int64_t> mem_used_mib;
  std::optional<int64_t> mem_total_mib;
  std::optional<double> power_w;
  std::optional<double> temp_c;
  // The last Xid error the driver reported for the GPU since the sampler started, 0 when
  // none yet (dcgm-exporter's DCGM_FI_DEV_XID_ERRORS); unset where the source cannot
  // watch Xid events.
  std::optional<int64_t> xid_errors;
  // How many Xid events the sampler saw for the GPU since it started; set with xid_errors.
  std::optional<int64_t> xid_count;
  // Uncorrected (double-bit) ECC errors since the driver loaded, NVML's volatile count
  // (dcgm-exporter's DCGM_FI_DEV_ECC_DBE_VOL_TOTAL).
  std::optional<int64_t> ecc_uncorrected;
  // Retired pages, row remapping and HW slowdown (NVML), bad pages (amdgpu RAS): the
  // health policy's threshold rows (gpu/health_policy.h); AMD's RAS "ue" counts, summed
  // over its blocks, are ecc_uncorrected.
  HardwareHealth hw;
  std::vector<ProcessSample> processes;
  friend bool operator==(const GpuSample&, const GpuSample&) = default;
};

class TelemetrySampler {
 public:
  virtual ~TelemetrySampler() = default;
  virtual std::string_view name() const = 0;
  // One sample of every GPU the sampler covers, in GpuInfo order. `now_us` is the
  // caller's clock (wall time, microseconds). Unavailable when no GPU could be read.
  virtual Result<std::vector<GpuSample>> Sample(int64_t now_us) = 0;
  // How many Xid events each GPU has seen so far (GpuSample::xid_count, by GPU index),
  // read cheaply and without waiting: the agent reads it between samples, every second,
  // to report a new Xid at once rather than with the next sample (docs/health.md).
  // Empty where the source cannot watch Xids (the default).
  virtual std::map<int, int64_t> XidCounts(int64_t now_us) {
    (void)now_us;
    return {};
  }
  // What the source could not set up and so will never report ("Xid errors are not
  // reported: ..."), in one line for the caller to log once; "" when nothing is missing.
  virtual std::string note() const { return ""; }
};

// A sampler for `node` (what discovery found with `options`): the fake node file's profile
// for a fake node; NVML for NVIDIA GPUs; ROCm SMI for AMD GPUs, else amdgpu sysfs (a node
// with both vendors samples both). Unavailable when no source fits the node's GPUs (a GPU-less
// node, a library that cannot be loaded any more); the agent then runs without telemetry.
Result<std::unique_ptr<TelemetrySampler>> CreateTelemetrySampler(const DiscoveryOptions& options,
                                                                 const NodeInfo& node);

// The individual sources, for tests and for CreateTelemetrySampler.
Result<std::unique_ptr<TelemetrySampler>> NewNvmlSampler(const std::string& library,
                                                         const NodeInfo& node);
Result<std::unique_ptr<TelemetrySampler>> NewRocmSmiSampler(const std::string& library,
                                                            const NodeInfo& node);
std::unique_ptr<TelemetrySampler> NewAmdSysfsSampler(const std::string& sysfs_root,
                                                     const NodeInfo& node);
// `inner` (ROCm SMI's) with each AMD GPU's RAS counts and bad pages read from amdgpu's
// sysfs files under `sysfs_root` (rocm/amdgpu_ras.h), as the sysfs sampler reads them.
std::unique_ptr<TelemetrySampler> NewAmdRasOverlay(std::unique_ptr<TelemetrySampler> inner,
                                                   const std::string& sysfs_root,
                                                   const NodeInfo& node);
// The fake node file's "telemetry" profile (docs/node-schema.md): per GPU index, lists of
// values stepped through every `step_s` seconds; without one, the node's static figures.
Result<std::unique_ptr<TelemetrySampler>> NewFakeSampler(const std::string& node_file,
                                                         const NodeInfo& node);

}  // namespace gpupool::gpu
