#include "envcheck/device_code.h"

#include <cstring>

namespace gpupool::envcheck {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindSass = 2;
// Entry flags seen in nvcc's output (CUDA 12-13).
constexpr uint32_t kFlagCompressed = 0x8000;
constexpr uint32_t kFlagArchSpecific = 0x100000;    // sm_90a
constexpr uint32_t kFlagFamilySpecific = 0x200000;  // sm_100f
constexpr size_t kMaxEntries = 100'000;
constexpr uint32_t kMinArch = 10;  // sm_10, the first CUDA GPUs
constexpr uint32_t kMaxArch = 9999;
constexpr std::string_view kBundleMagic = "__CLANG_OFFLOAD_BUNDLE__";

template <typename T>
T Load(std::span<const uint8_t> b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

}  // namespace

std::string CudaCodeName(const CudaCode& code) {
  return (code.kind == CudaCode::Kind::kSass ? "sm_" : "compute_") + std::to_string(code.arch) +
         code.suffix;
}

std::optional<CudaCode> ParseCudaCodeName(std::string_view name) {
  CudaCode c;
  if (name.substr(0, 3) == "sm_") {
    name.remove_prefix(3);
  } else if (name.substr(0, 8) == "compute_") {
    c.kind = CudaCode::Kind::kPtx;
    name.remove_prefix(8);
  } else {
    return std::nullopt;
  }
  size_t digits = 0;
  while (digits < name.size() && digits < 4 && name[digits] >= '0' && name[digits] <= '9') {
    c.arch = c.arch * 10 + (name[digits] - '0');
    ++digits;
  }
  const std::string_view rest = name.substr(digits);
  if (digits < 2 || (!rest.empty() && rest != "a" && rest != "f")) return std::nullopt;
  c.suffix = std::string(rest);
  return c;
}

Result<std::vector<CudaCode>> ParseFatbinary(std::span<const uint8_t> b, std::string_view source) {
  auto bad = [&](size_t at, const std::string& why) {
    return Status::InvalidArgument(std::string(source) + ": fatbinary at byte " +
                                   std::to_string(at) + ": " + why);
  };
  std::vector<CudaCode> out;
  size_t pos = 0;
  while (pos + 16 <= b.size()) {
    const auto magic = Load<uint32_t>(b, pos);
    if (magic != kFatbinMagic) {
      // Containers are 8-byte aligned with zero padding between them.
      if (magic == 0) {
        pos += 8;
        continue;
      }
      return bad(pos, "bad magic; this is not a CUDA fatbinary container");
    }
    const auto header_size = Load<uint16_t>(b, pos + 6);
    const auto body_size = Load<uint64_t>(b, pos + 8);
    if (header_size < 16 || header_size > b.size() - pos ||
        body_size > b.size() - pos - header_size) {
      return bad(pos, "truncated container (header says " + std::to_string(body_size) + " bytes, " +
                          std::to_string(b.size() - pos) + " remain)");
    }
    size_t e = pos + header_size;
    const size_t end = e + body_size;
    while (e < end) {
      if (end - e < 64) return bad(e, "truncated entry header");
      const auto kind = Load<uint16_t>(b, e);
      const auto entry_header = Load<uint32_t>(b, e + 4);
      const auto payload = Load<uint64_t>(b, e + 8);
      if (entry_header < 64 || entry_header > end - e || payload > end - e - entry_header) {
        return bad(e, "entry sizes run past the container");
      }
      if (out.size() >= kMaxEntries) return bad(e, "more than 100000 entries");
      const auto version = Load<uint32_t>(b, e + 24);
      const auto arch = Load<uint32_t>(b, e + 28);
      const auto flags = Load<uint32_t>(b, e + 40);
      if (kind == kKindPtx || kind == kKindSass) {
        // Two to four digits, as in every real sm_XY and what ParseCudaCodeName reads
        // back: CheckNode works on the names, so an sm_1 or sm_10000 would be dropped.
        if (arch < kMinArch || arch > kMaxArch)
          return bad(e, "implausible architecture " + std::to_string(arch));
        CudaCode code;
        code.kind = kind == kKindPtx ? CudaCode::Kind::kPtx : CudaCode::Kind::kSass;
        code.arch = static_cast<int>(arch);
        if (flags & kFlagArchSpecific) code.suffix = "a";
        if (flags & kFlagFamilySpecific) code.suffix = "f";
        code.compressed = (flags & kFlagCompressed) != 0;
        if (code.kind == CudaCode::Kind::kPtx) {
          code.ptx_major = static_cast<int>(version >> 16);
          code.ptx_minor = static_cast<int>(version & 0xffff);
        }
        out.push_back(std::move(code));
      }  // other kinds (none known today) are skipped, not fatal
      e += entry_header + payload;
    }
    pos = end;
  }
  return out;
}

Result<std::vector<std::string>> ParseOffloadBundles(std::span<const uint8_t> b,
                                                     std::string_view source) {
  auto bad = [&](size_t at, const std::string& why) {
    return Status::InvalidArgument(std::string(source) + ": offload bundle at byte " +
                                   std::to_string(at) + ": " + why);
  };
  std::vector<std::string> targets;
  const std::string_view all(reinterpret_cast<const char*>(b.data()), b.size());
  size_t pos = all.find(kBundleMagic);
  while (pos != std::string_view::npos) {
    size_t p = pos + kBundleMagic.size();
    if (b.size() - p < 8) return bad(pos, "truncated bundle header");
    const auto count = Load<uint64_t>(b, p);
    p += 8;
    if (count > 4096) return bad(pos, "implausible entry count " + std::to_string(count));
    for (uint64_t i = 0; i < count; ++i) {
      if (b.size() - p < 24) return bad(p, "truncated entry");
      const auto offset = Load<uint64_t>(b, p);
      const auto size = Load<uint64_t>(b, p + 8);
      const auto triple_len = Load<uint64_t>(b, p + 16);
      p += 24;
      if (triple_len > 4096 || triple_len > b.size() - p) return bad(p, "truncated target name");
      if (offset > b.size() - pos || size > b.size() - pos - offset) {
        return bad(p, "entry lies past the end of the section");
      }
      targets.emplace_back(all.substr(p, triple_len));
      p += triple_len;
    }
    pos = all.find(kBundleMagic, p);
  }
  return targets;
}

std::string GfxTargetOf(std::string_view t) {
  if (t.find("amdgcn-amd-amdhsa") == std::string_view::npos) return "";
  const auto dashes = t.rfind("--");
  if (dashes == std::string_view::npos) return "";
  return std::string(t.substr(dashes + 2));
}

}  // namespace gpupool::envcheck
