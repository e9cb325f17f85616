#include "gpu/sysfs/pci_ids.h"

#include <fstream>
#include <string_view>

#include "common/strings.h"
#include "gpu/sysfs/pci_device.h"
#include "gpu/sysfs/sysfs_reader.h"

namespace gpupool::gpu {
namespace {

// "10de  NVIDIA Corporation" / "\t2330  GH100 [H100 SXM5 80GB]": four hex digits, then
// the name after white space.
std::optional<std::pair<uint32_t, std::string>> ParseIdLine(std::string_view line) {
  if (line.size() < 6) return std::nullopt;
  std::optional<uint64_t> id = ParseHexUint64(line.substr(0, 4));
  if (!id || (line[4] != ' ' && line[4] != '\t')) return std::nullopt;
  return std::make_pair(static_cast<uint32_t>(*id), SanitizeUtf8(Trim(line.substr(5))));
}

}  // namespace

std::vector<std::string> DefaultPciIdsFiles() {
  return {"/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"};
}

std::map<PciId, std::string> LookupPciDeviceNames(const std::vector<std::string>& files,
                                                  const std::set<PciId>& wanted) {
  std::map<PciId, std::string> out;
  if (wanted.empty()) return out;
  std::set<uint32_t> vendors;
  for (const PciId& id : wanted) vendors.insert(id.first);
  for (const std::string& file : files) {
    std::ifstream in(file);
    if (!in) continue;
    std::optional<uint32_t> vendor;  // the vendor section we are in, if one we want
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      // The device-class section at the end reuses the layout with other meanings.
      if (line.size() >= 2 && line[0] == 'C' && line[1] == ' ') break;
      if (line[0] != '\t') {
        auto v = ParseIdLine(line);
        vendor =
            v && vendors.count(v->first) > 0 ? std::optional<uint32_t>(v->first) : std::nullopt;
        continue;
      }
      if (!vendor || line.size() < 2 || line[1] == '\t') continue;  // subsystem lines
      auto d = ParseIdLine(std::string_view(line).substr(1));
      if (d && wanted.count({*vendor, d->first}) > 0) out[{*vendor, d->first}] = d->second;
    }
    return out;  // the first readable file is the database; later ones are fallbacks
  }
  return out;
}

}  // namespace gpupool::gpu

namespace gpupool::gpu {

std::string GpuNameFromPciIds(uint32_t vendor_id, uint32_t device_id,
                              const std::map<PciId, std::string>& names) {
  std::string vendor(VendorDisplayName(VendorOfPciId(vendor_id)));
  if (vendor == "unknown") vendor = "PCI";
  auto it = names.find({vendor_id, device_id});
  if (it != names.end() && !it->second.empty()) return vendor + " " + it->second;
  return vendor + " GPU " + StrFormat("[%04x:%04x]", vendor_id & 0xffff, device_id & 0xffff);
}

}  // namespace gpupool::gpu
