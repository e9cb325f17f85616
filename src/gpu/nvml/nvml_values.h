// Turning raw NVML answers into gpupool values: bounded C strings, PCI bus ids, CPU
// masks. Pure functions, so the odd inputs a broken driver can produce are unit-tested
// without a library.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "gpu/nvml/nvml_api.h"

namespace gpupool::gpu::nvml {

// The text in a buffer of `capacity` bytes that the library may have left without a
// terminator, made valid UTF-8.
std::string BoundedString(const char* buffer, size_t capacity);

// True for a canonical bus id "dddd:bb:dd.f" as CanonicalPciBusId produces.
bool IsCanonicalPciBusId(std::string_view s);

// The canonical bus id of a PciInfo: the long string, else the legacy one, else the
// domain/bus/device words (function 0); nullopt when none of them is sane.
// `legacy_layout` is set for the v1 calls, which fill only the shorter, older layout.
std::optional<std::string> PciBusIdFromInfo(const PciInfo& info, bool legacy_layout);

// A CPU bitmask as nvmlDeviceGetCpuAffinity fills it (`words` unsigned longs, CPU n in
// bit n % bits of word n / bits) as a kernel CPU list, "0-23,48-71"; "" when empty.
std::string CpuListFromMask(const unsigned long* words, size_t count);

// True when `s` looks like a kernel CPU list ("0-3,8,10-11"), as sysfs local_cpulist.
bool IsCpuList(std::string_view s);

// "12.4" from NVML's CUDA version 12040; "" when not positive.
std::string CudaVersionString(int version);

// The MIG profile ("1g.10gb") from a MIG device's name ("NVIDIA A100-SXM4-80GB MIG
// 1g.10gb"); "" when the name does not carry one.
std::string MigProfileFromName(std::string_view name);

}  // namespace gpupool::gpu::nvml
