// amdgpu RAS (reliability, availability, serviceability) counts from sysfs, for the
// telemetry samplers' hardware health fields (gpu/telemetry.h, gpu/health_policy.h):
//   <device>/ras/<block>_err_count   "ue: N" and "ce: N" lines (newer kernels add "de: N"),
//                                    one file per RAS block (umc, gfx, sdma, mmhub, xgmi_wafl...)
//   <device>/ras/gpu_vram_bad_pages  one line per bad VRAM page, "0x<pfn> : 0x<size> : F",
//                                    F being R (reserved), P (pending) or F (failed to reserve)
// where <device> is /sys/bus/pci/devices/<bus id> (= /sys/class/drm/cardN/device). ROCm
// SMI reads the same files, so both AMD samplers use this.
#pragma once

#include <string>

#include "gpu/telemetry.h"

namespace gpupool::gpu {

// Sets s->ecc_uncorrected to the sum of the blocks' "ue" counts (when some block's file
// is readable), s->hw.retired_pages to the bad pages and s->hw.retired_pages_pending to
// whether one is pending (when the bad-page file is readable). A GPU or kernel without RAS
// has no ras/ directory: nothing is set. Malformed lines are skipped, never guessed at.
void ReadAmdgpuRas(const std::string& device_dir, GpuSample* s);

}  // namespace gpupool::gpu
