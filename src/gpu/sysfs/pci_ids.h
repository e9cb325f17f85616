// Names of PCI devices from the pci.ids database (the file lspci reads), so GPUs found
// without a vendor library still get a readable name.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gpupool::gpu {

// Where Debian's pciutils / hwdata packages put the database.
std::vector<std::string> DefaultPciIdsFiles();

using PciId = std::pair<uint32_t, uint32_t>;  // vendor id, device id

// Looks up the device names of `wanted` in the first readable file of `files`, in one
// pass. Ids it does not know are absent from the result; a missing or garbled file gives
// an empty result, never an error, since the names are a convenience.
std::map<PciId, std::string> LookupPciDeviceNames(const std::vector<std::string>& files,
                                                  const std::set<PciId>& wanted);

}  // namespace gpupool::gpu

namespace gpupool::gpu {

// "<Vendor> <pci.ids device name>" when `names` knows the id, else "<Vendor> GPU
// [vvvv:dddd]" so the user can still look the device up.
std::string GpuNameFromPciIds(uint32_t vendor_id, uint32_t device_id,
                              const std::map<PciId, std::string>& names);

}  // namespace gpupool::gpu
