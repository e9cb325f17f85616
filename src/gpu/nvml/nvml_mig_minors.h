// MIG capability device nodes: which /dev/nvidia-caps/nvidia-capN grants access to each
// MIG GPU instance and compute instance. NVML does not say; the driver lists them in
// /proc/driver/nvidia-caps/mig-minors, in lines like
//   gpu0/gi1/access 12
//   gpu0/gi1/ci0/access 13
// where gpu<N> is the GPU's minor number (/dev/nvidiaN), not its NVML index, and the
// number is N of /dev/nvidia-caps/nvidia-capN. A MIG device can be handed out alone only
// with both its nodes and the parent's /dev/nvidiaN, which is what Slurm's gpu_nvml.c
// (_nvml_get_mig_minor_numbers, _handle_mig) and NVIDIA's container toolkit give a job.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"
#include "gpu/nvml/nvml_diagnostics.h"

namespace gpupool::gpu::nvml {

class MigMinors {
 public:
  // Lines that are not "<name> <number>" are skipped: the file is the driver's.
  static MigMinors Parse(std::string_view text);

  // The capability nodes of the MIG device with GPU instance `gi` and compute instance
  // `ci` on the GPU with minor number `gpu_minor`, as container paths
  // ({"/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"}); empty unless
  // both are listed.
  std::vector<std::string> DeviceNodes(int gpu_minor, int gi, int ci) const;

 private:
  std::map<std::string, unsigned, std::less<>> minors_;
};

// <proc_root>/driver/nvidia-caps/mig-minors.
std::string MigMinorsPath(std::string_view proc_root);

// Sets the device_nodes of every MIG device in `gpus` from the mig-minors file below
// `proc_root`, which is read only when some GPU has MIG devices. Each MIG device left
// without nodes (file unreadable, device not listed, ids unknown) is noted in `sink`:
// Slurm and containers cannot be given such a device alone.
void FillMigDeviceNodes(std::string_view proc_root, std::vector<GpuInfo>* gpus,
                        DiagnosticSink* sink);

}  // namespace gpupool::gpu::nvml
