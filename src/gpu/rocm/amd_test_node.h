// Test helper: the sysfs side of AMD nodes (PCI devices, DRM nodes, KFD topology), shared
// by the fallback, library and merge tests. Test-only.
#pragma once

#include <string>

#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu::testing {

// One AMD GPU in the tree: PCI device, DRM card/render nodes and its KFD node
// (kfd_id > 0, gfx_target_version as KFD writes it).
inline void AddAmdGpu(const FakeSysfsTree& tree, const std::string& bus, int card, int render_minor,
                      int numa, const std::string& cpus, int kfd_id, int gfx_target_version) {
  tree.AddPciDevice(bus, "0x1002", "0x740c", "0x038000", std::to_string(numa), cpus);
  tree.AddDrm(bus, card, render_minor);
  unsigned domain = 0, b = 0, d = 0, f = 0;
  std::sscanf(bus.c_str(), "%x:%x:%x.%x", &domain, &b, &d, &f);
  const unsigned location = (b << 8) | (d << 3) | f;
  tree.AddKfdNode(kfd_id, "cpu_cores_count 0\nsimd_count 440\ngfx_target_version " +
                              std::to_string(gfx_target_version) + "\nlocation_id " +
                              std::to_string(location) + "\ndomain " + std::to_string(domain) +
                              "\ndrm_render_minor " + std::to_string(render_minor) +
                              "\nunique_id " + std::to_string(1000 + kfd_id) + "\n");
}

inline void AddKfdCpuNode(const FakeSysfsTree& tree, int id) {
  tree.AddKfdNode(id, "cpu_cores_count 64\nsimd_count 0\ngfx_target_version 0\n");
}

}  // namespace gpupool::gpu::testing
