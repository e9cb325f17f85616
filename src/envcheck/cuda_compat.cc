#include "envcheck/cuda_compat.h"

#include <mutex>

#include "common/json.h"
#include "common/strings.h"
#include "envcheck/cuda_driver_compat_data.h"  // generated from data/cuda_driver_compat.json

namespace gpupool::envcheck {
namespace {

struct Table {
  struct Row {
    Version cuda;
    std::string driver;
  };
  std::vector<Row> toolkits;
  std::vector<std::pair<int, std::string>> minor_compat;
  std::vector<std::pair<Version, std::string>> ptx;
  std::string source;
};

// The compiled-in table; a malformed data file is a build-time bug, caught by the tests.
const Table& TheTable() {
  static const Table* const kTable = [] {
    auto* t = new Table();
    Result<Json> j = ParseJson(kCudaDriverCompatJson, "data/cuda_driver_compat.json");
    if (!j.ok() || !j->is_object()) return t;
    t->source = j->value("source", "");
    for (const Json& r : j->value("toolkits", Json::array())) {
      auto v = Version::Parse(r.value("cuda", ""));
      if (v) t->toolkits.push_back({*v, r.value("min_driver", "")});
    }
    for (const Json& r : j->value("minor_version_compatibility", Json::array())) {
      t->minor_compat.emplace_back(r.value("cuda_major", 0), r.value("min_driver", ""));
    }
    for (const Json& r : j->value("ptx_isa", Json::array())) {
      auto v = Version::Parse(r.value("ptx", ""));
      if (v) t->ptx.emplace_back(*v, r.value("cuda", ""));
    }
    return t;
  }();
  return *kTable;
}

}  // namespace

std::optional<Version> Version::Parse(std::string_view text) {
  Version v;
  for (const std::string& part : Split(Trim(text), '.')) {
    auto n = ParseInt64(part);
    if (!n || *n < 0 || *n > 1'000'000) return std::nullopt;
    v.parts.push_back(static_cast<int>(*n));
  }
  if (v.parts.empty()) return std::nullopt;
  return v;
}

std::string Version::ToString() const {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "." : "") + std::to_string(parts[i]);
  return out;
}

std::string CompatSource() { return TheTable().source; }

Result<DriverNeed> DriverNeedFor(std::string_view cuda) {
  auto v = Version::Parse(cuda);
  if (!v || v->parts.size() < 2) {
    return Status::InvalidArgument("'" + std::string(cuda) + "' is not a CUDA version like 12.4");
  }
  const Version want{{v->parts[0], v->parts[1]}};
  const Table& t = TheTable();
  const Table::Row* best = nullptr;
  for (const Table::Row& r : t.toolkits) {
    if (r.cuda.parts[0] == want.parts[0] && r.cuda <= want) best = &r;
  }
  if (best == nullptr) {
    return Status::NotFound("CUDA " + want.ToString() +
                            " is not in the driver table (data/cuda_driver_compat.json)");
  }
  DriverNeed need;
  need.cuda = want.ToString();
  need.min_driver = best->driver;
  need.min_driver_minor_compat = best->driver;
  for (const auto& [major, driver] : t.minor_compat) {
    if (major == want.parts[0]) need.min_driver_minor_compat = driver;
  }
  return need;
}

std::string CudaForPtx(int major, int minor) {
  const Version want{{major, minor}};
  std::string found;
  for (const auto& [ptx, cuda] : TheTable().ptx) {
    if (ptx <= want) found = cuda;
  }
  return found;
}

bool RunsOn(const CudaCode& c, int cap_major, int cap_minor) {
  const int code_major = c.arch / 10;
  const int code_minor = c.arch % 10;
  const int cap = cap_major * 10 + cap_minor;
  if (c.kind == CudaCode::Kind::kPtx) {
    // Arch-specific PTX cannot be JIT-compiled for other architectures.
    if (c.suffix == "a") return cap == c.arch;
    return cap >= c.arch;
  }
  if (c.suffix == "a") return cap == c.arch;
  return cap_major == code_major && cap_minor >= code_minor;
}

}  // namespace gpupool::envcheck
