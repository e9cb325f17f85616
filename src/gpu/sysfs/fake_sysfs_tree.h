// Test helper: a throw-away sysfs tree in a temporary directory, shaped like the real
// one (PCI devices under devices/, symlinks from bus/pci/devices and class/drm, KFD
// topology nodes), so backends run their real code with sysfs_root pointing at it.
// Test-only; header-only so that only test binaries compile it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace gpupool::gpu::testing {

class FakeSysfsTree {
 public:
  FakeSysfsTree() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpupool-sysfs-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    root_ = tmpl;
  }
  ~FakeSysfsTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FakeSysfsTree(const FakeSysfsTree&) = delete;
  FakeSysfsTree& operator=(const FakeSysfsTree&) = delete;

  const std::string& root() const { return root_; }
  std::string Path(const std::string& rel) const { return root_ + "/" + rel; }

  // Writes `content` to root/rel, creating directories.
  void Write(const std::string& rel, const std::string& content) const {
    std::filesystem::path p = Path(rel);
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out) ADD_FAILURE() << "cannot write " << p;
  }
  void MakeDir(const std::string& rel) const { std::filesystem::create_directories(Path(rel)); }
  // A symlink at root/link pointing to root/target, as a relative link like the kernel's.
  void Link(const std::string& target, const std::string& link) const {
    std::filesystem::path l = Path(link);
    std::filesystem::create_directories(l.parent_path());
    std::filesystem::create_directory_symlink(
        std::filesystem::relative(Path(target), l.parent_path()), l);
  }

  // The real directory of a PCI device.
  static std::string DeviceDir(const std::string& bus) { return "devices/pci0000:00/" + bus; }

  // A PCI function with its ids and the bus/pci/devices link. Pass numa/cpus empty to
  // leave those files out.
  void AddPciDevice(const std::string& bus, const std::string& vendor, const std::string& device,
                    const std::string& cls, const std::string& numa = "",
                    const std::string& cpus = "") const {
    const std::string dir = DeviceDir(bus);
    Write(dir + "/vendor", vendor + "\n");
    Write(dir + "/device", device + "\n");
    Write(dir + "/class", cls + "\n");
    if (!numa.empty()) Write(dir + "/numa_node", numa + "\n");
    if (!cpus.empty()) Write(dir + "/local_cpulist", cpus + "\n");
    Write(dir + "/uevent", "DRIVER=fake\nPCI_SLOT_NAME=" + bus + "\n");
    Link(dir, "bus/pci/devices/" + bus);
  }

  // DRM nodes of a PCI device: drm/cardN and drm/renderDM, class/drm links, and the
  // card's device link back to the PCI device.
  void AddDrm(const std::string& bus, int card, int render_minor) const {
    const std::string dir = DeviceDir(bus);
    const std::string card_dir = dir + "/drm/card" + std::to_string(card);
    MakeDir(card_dir);
    Link(dir, card_dir + "/device");
    Link(card_dir, "class/drm/card" + std::to_string(card));
    if (render_minor >= 0) {
      const std::string render_dir = dir + "/drm/renderD" + std::to_string(render_minor);
      MakeDir(render_dir);
      Link(render_dir, "class/drm/renderD" + std::to_string(render_minor));
    }
  }

  // A KFD topology node with `properties` ("key value" lines).
  void AddKfdNode(int id, const std::string& properties) const {
    Write(KfdNodeDir(id) + "/properties", properties);
  }
  void AddKfdIoLink(int from, int link, int type, int to) const {
    Write(KfdNodeDir(from) + "/io_links/" + std::to_string(link) + "/properties",
          "type " + std::to_string(type) + "\nversion_major 0\nnode_from " + std::to_string(from) +
              "\nnode_to " + std::to_string(to) + "\nweight 15\n");
  }
  static std::string KfdNodeDir(int id) {
    return "class/kfd/kfd/topology/nodes/" + std::to_string(id);
  }

  // Where one CPU of a fake topology sits; its id is its position in AddCpus' list.
  // Cores, dies, clusters and L3 caches are numbered within their package.
  struct FakeCpu {
    int package = 0;
    int core = 0;
    int die = 0;
    int cluster = -1;  // -1: no cluster files
    int l3 = -1;       // -1: no L3 cache
    int numa = -1;     // -1: in no NUMA node
  };

  // The topology files of `cpus`, all online, below `prefix` ("" when root() stands for
  // /sys; "sys" when it is a whole file system, for hwloc's HWLOC_FSROOT): every set as
  // a kernel list (*_list) and as the hex mask hwloc reads, plus L3 caches and NUMA nodes.
  void AddCpus(const std::vector<FakeCpu>& cpus, const std::string& prefix = "") const {
    const std::string base = (prefix.empty() ? "" : prefix + "/") + "devices/system";
    const int n = static_cast<int>(cpus.size());
    auto select = [&](auto same) {
      std::vector<int> set;
      for (int i = 0; i < n; ++i) {
        if (same(cpus[static_cast<size_t>(i)])) set.push_back(i);
      }
      return set;
    };
    auto write_set = [&](const std::string& file, const std::vector<int>& set) {
      Write(file + "_list", CpuList(set) + "\n");
      Write(file, CpuMask(set, n) + "\n");
    };
    const std::string all = "0-" + std::to_string(n - 1) + "\n";
    for (const char* f : {"online", "possible", "present"}) Write(base + "/cpu/" + f, all);
    for (int i = 0; i < n; ++i) {
      const FakeCpu& me = cpus[static_cast<size_t>(i)];
      const std::string dir = base + "/cpu/cpu" + std::to_string(i);
      const std::string topo = dir + "/topology";
      auto in_package = [&](const FakeCpu& o) { return o.package == me.package; };
      const auto core =
          select([&](const FakeCpu& o) { return in_package(o) && o.core == me.core; });
      const auto package = select(in_package);
      Write(topo + "/physical_package_id", std::to_string(me.package) + "\n");
      Write(topo + "/core_id", std::to_string(me.core) + "\n");
      Write(topo + "/die_id", std::to_string(me.die) + "\n");
      write_set(topo + "/thread_siblings", core);
      write_set(topo + "/core_cpus", core);
      write_set(topo + "/core_siblings", package);
      write_set(topo + "/package_cpus", package);
      write_set(topo + "/die_cpus",
                select([&](const FakeCpu& o) { return in_package(o) && o.die == me.die; }));
      if (me.cluster >= 0) {
        Write(topo + "/cluster_id", std::to_string(me.cluster) + "\n");
        write_set(topo + "/cluster_cpus", select([&](const FakeCpu& o) {
                    return in_package(o) && o.cluster == me.cluster;
                  }));
      }
      // An L1 cache of its own, which must not change the order.
      const std::string l1 = dir + "/cache/index0";
      Write(l1 + "/level", "1\n");
      Write(l1 + "/type", "Data\n");
      Write(l1 + "/size", "48K\n");
      Write(l1 + "/shared_cpu_list", CpuList(core) + "\n");
      Write(l1 + "/shared_cpu_map", CpuMask(core, n) + "\n");
      if (me.l3 >= 0) {
        const std::string l3 = dir + "/cache/index3";
        const auto shared =
            select([&](const FakeCpu& o) { return in_package(o) && o.l3 == me.l3; });
        Write(l3 + "/level", "3\n");
        Write(l3 + "/type", "Unified\n");
        Write(l3 + "/size", "32768K\n");
        Write(l3 + "/id", std::to_string(me.package * 64 + me.l3) + "\n");
        Write(l3 + "/coherency_line_size", "64\n");
        Write(l3 + "/ways_of_associativity", "16\n");
        Write(l3 + "/number_of_sets", "32768\n");
        Write(l3 + "/shared_cpu_list", CpuList(shared) + "\n");
        Write(l3 + "/shared_cpu_map", CpuMask(shared, n) + "\n");
      }
    }
    std::vector<int> nodes;
    for (const FakeCpu& c : cpus) {
      if (c.numa >= 0 && std::find(nodes.begin(), nodes.end(), c.numa) == nodes.end()) {
        nodes.push_back(c.numa);
      }
    }
    if (nodes.empty()) return;
    std::sort(nodes.begin(), nodes.end());
    for (const char* f : {"online", "possible", "has_cpu", "has_memory", "has_normal_memory"}) {
      Write(base + "/node/" + f, CpuList(nodes) + "\n");
    }
    for (int node : nodes) {
      const std::string dir = base + "/node/node" + std::to_string(node);
      const auto set = select([&](const FakeCpu& o) { return o.numa == node; });
      Write(dir + "/cpulist", CpuList(set) + "\n");
      Write(dir + "/cpumap", CpuMask(set, n) + "\n");
      Write(dir + "/meminfo", "Node " + std::to_string(node) + " MemTotal: 16777216 kB\n");
      std::string distance;
      for (int other : nodes)
        distance += (distance.empty() ? "" : " ") + std::string(other == node ? "10" : "20");
      Write(dir + "/distance", distance + "\n");
    }
  }

  // "0-3,8" from sorted ids.
  static std::string CpuList(const std::vector<int>& cpus) {
    std::string out;
    for (size_t i = 0; i < cpus.size();) {
      size_t j = i;
      while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
      out += (out.empty() ? "" : ",") + std::to_string(cpus[i]);
      if (j > i) out += "-" + std::to_string(cpus[j]);
      i = j + 1;
    }
    return out;
  }
  // The kernel's mask form: 32-bit words in hex, highest first, joined by ','.
  static std::string CpuMask(const std::vector<int>& cpus, int total) {
    std::vector<uint32_t> words(static_cast<size_t>(total / 32 + 1), 0);
    for (int c : cpus) words[static_cast<size_t>(c / 32)] |= 1u << (c % 32);
    std::string out;
    for (size_t w = words.size(); w-- > 0;) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%08x", words[w]);
      out += (out.empty() ? "" : ",") + std::string(buf);
    }
    return out;
  }

 private:
  std::string root_;
};

}  // namespace gpupool::gpu::testing
