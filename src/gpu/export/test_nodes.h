// Small hand-built nodes for the exporter unit tests.
#pragma once

#include <string>

#include "gpu/gpu_info.h"

namespace gpupool::gpu::testing {

inline GpuInfo NvidiaGpu(int index, std::string uuid, std::string bus) {
  GpuInfo g;
  g.vendor = Vendor::kNvidia;
  g.index = index;
  g.name = "NVIDIA H100 80GB HBM3";
  g.uuid = std::move(uuid);
  g.pci_bus_id = std::move(bus);
  g.memory_total_bytes = 81559ULL << 20;
  g.compute_capability = ComputeCapability{9, 0};
  g.minor_number = index;
  g.device_nodes = {"/dev/nvidia" + std::to_string(index)};
  g.ecc_enabled = true;
  return g;
}

inline GpuInfo AmdGpu(int index, std::string uuid, std::string bus) {
  GpuInfo g;
  g.vendor = Vendor::kAmd;
  g.index = index;
  g.name = "AMD Instinct MI250X";
  g.uuid = std::move(uuid);
  g.pci_bus_id = std::move(bus);
  g.memory_total_bytes = 65520ULL << 20;
  g.gfx_target = "gfx90a";
  g.device_nodes = {"/dev/dri/card" + std::to_string(index + 1),
                    "/dev/dri/renderD" + std::to_string(128 + index)};
  return g;
}

// Two NVLinked H100s with driver info.
inline NodeInfo TwoH100() {
  NodeInfo n;
  n.hostname = "h100-pair";
  n.nvidia = DriverInfo{"550.54.15",
                        "12.4",
                        {"/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"},
                        {"/dev/nvidiactl", "/dev/nvidia-uvm"}};
  n.gpus = {NvidiaGpu(0, "GPU-11111111-2222-3333-4444-555555555555", "0000:18:00.0"),
            NvidiaGpu(1, "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee", "0000:2a:00.0")};
  n.links = {GpuLink{"0000:18:00.0", "0000:2a:00.0", 18, 0, PcieLevel::kNode}};
  return n;
}

}  // namespace gpupool::gpu::testing
