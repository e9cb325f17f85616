// Test helper: a throw-away sysfs tree in a temporary directory, shaped like the real
// one (PCI devices under devices/, symlinks from bus/pci/devices and class/drm, KFD
// topology nodes), so backends run their real code with sysfs_root pointing at it.
// Test-only; header-only so that only test binaries compile it.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

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

 private:
  std::string root_;
};

}  // namespace gpupool::gpu::testing
