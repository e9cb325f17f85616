#include "gpu/nvml/nvml_values.h"

#include <climits>
#include <cstring>

#include "common/strings.h"
#include "gpu/gpu_info.h"

namespace gpupool::gpu::nvml {

std::string BoundedString(const char* buffer, size_t capacity) {
  return SanitizeUtf8(std::string_view(buffer, strnlen(buffer, capacity)));
}

bool IsCanonicalPciBusId(std::string_view s) {
  // dddd:bb:dd.f
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::optional<std::string> PciBusIdFromInfo(const PciInfo& info, bool legacy_layout) {
  if (!legacy_layout) {
    std::string id = CanonicalPciBusId(BoundedString(info.bus_id, sizeof info.bus_id));
    if (IsCanonicalPciBusId(id)) return id;
  }
  std::string legacy =
      CanonicalPciBusId(BoundedString(info.bus_id_legacy, sizeof info.bus_id_legacy));
  if (IsCanonicalPciBusId(legacy)) return legacy;
  if (info.domain <= 0xffff && info.bus <= 0xff && info.device <= 0x1f &&
      (info.domain | info.bus | info.device) != 0) {
    return StrFormat("%04x:%02x:%02x.0", info.domain, info.bus, info.device);
  }
  return std::nullopt;
}

std::string CpuListFromMask(const unsigned long* words, size_t count) {
  constexpr size_t kBits = sizeof(unsigned long) * CHAR_BIT;
  std::string out;
  const size_t total = count * kBits;
  size_t cpu = 0;
  while (cpu < total) {
    auto set = [&](size_t n) { return ((words[n / kBits] >> (n % kBits)) & 1ul) != 0; };
    if (!set(cpu)) {
      ++cpu;
      continue;
    }
    size_t end = cpu;
    while (end + 1 < total && set(end + 1)) ++end;
    if (!out.empty()) out += ',';
    out += std::to_string(cpu);
    if (end > cpu) out += '-' + std::to_string(end);
    cpu = end + 1;
  }
  return out;
}

bool IsCpuList(std::string_view s) {
  if (s.empty()) return false;
  for (const std::string& range : Split(s, ',')) {
    const auto dash = range.find('-');
    const std::string_view first = std::string_view(range).substr(0, dash);
    if (!ParseUint64(first)) return false;
    if (dash != std::string::npos) {
      const auto last = ParseUint64(std::string_view(range).substr(dash + 1));
      if (!last || *last < *ParseUint64(first)) return false;
    }
  }
  return true;
}

std::string CudaVersionString(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string MigProfileFromName(std::string_view name) {
  const auto pos = name.rfind("MIG ");
  if (pos == std::string_view::npos) return "";
  return std::string(Trim(name.substr(pos + 4)));
}

}  // namespace gpupool::gpu::nvml
