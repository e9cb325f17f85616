// CreateTelemetrySampler and the two samplers that need no vendor library: the fake
// node's scripted profile and amdgpu's sysfs files. The NVML one is nvml/nvml_sampler.cc.
#include "gpu/telemetry.h"

#include <dirent.h>

#include <cmath>
#include <map>

#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "gpu/rocm/amdgpu_ras.h"

namespace gpupool::gpu {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Several samplers as one: each covers its vendor's GPUs; the answer is in GPU order.
class CombinedSampler final : public TelemetrySampler {
 public:
  explicit CombinedSampler(std::vector<std::unique_ptr<TelemetrySampler>> parts)
      : parts_(std::move(parts)) {}
  std::string_view name() const override { return "combined"; }
  Result<std::vector<GpuSample>> Sample(int64_t now_us) override {
    std::vector<GpuSample> out;
    Status last = Status::Unavailable("no telemetry source");
    for (auto& p : parts_) {
      Result<std::vector<GpuSample>> s = p->Sample(now_us);
      if (!s.ok()) {
        last = s.status();
        continue;
      }
      for (GpuSample& g : *s) out.push_back(std::move(g));
    }
    if (out.empty()) return last;
    return out;
  }
  std::map<int, int64_t> XidCounts(int64_t now_us) override {
    std::map<int, int64_t> out;
    for (auto& p : parts_) out.merge(p->XidCounts(now_us));
    return out;
  }
  std::string note() const override {
    std::string out;
    for (const auto& p : parts_) {
      if (std::string n = p->note(); !n.empty()) out += (out.empty() ? "" : "; ") + n;
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<TelemetrySampler>> parts_;
};

// ---- fake ----------------------------------------------------------------------------

// Per GPU index, the series of each figure; the value at time t is series[(t / step) % n].
struct Profile {
  int64_t step_s = 5;
  std::map<int, std::map<std::string, std::vector<double>>> gpus;
};

constexpr const char* kProfileFields[] = {
    "util_pct", "mem_used_mib", "power_w", "temp_c", "xid_errors", "xid_count", "ecc_uncorrected",
    // Hardware health (HardwareHealth); the flags are 0 or not.
    "retired_pages", "retired_pages_pending", "remapped_rows", "remapped_rows_pending",
    "remapped_rows_failed", "hw_slowdown"};

Result<Profile> ReadProfile(const Json& t, const std::string& file) {
  Profile p;
  const std::string where = file + ": telemetry";
  if (!t.is_object()) return Status::InvalidArgument(where + ": expected an object");
  JsonFields f(t, "telemetry");
  f.Optional("step_s", &p.step_s, 1, 86400);
  const Json* gpus = f.Member("gpus");
  GP_RETURN_IF_ERROR(f.Finish().WithContext(file));
  if (gpus == nullptr) return p;
  if (!gpus->is_object()) return Status::InvalidArgument(where + ".gpus: expected an object");
  for (const auto& [key, series] : gpus->items()) {
    const std::string path = where + ".gpus." + key;
    std::optional<int64_t> index = ParseInt64(key);
    if (!index || *index < 0 || *index > 4096) {
      return Status::InvalidArgument(path + ": the key must be a GPU index");
    }
    if (!series.is_object()) return Status::InvalidArgument(path + ": expected an object");
    for (const auto& [field, values] : series.items()) {
      bool known = false;
      for (const char* k : kProfileFields) known = known || field == k;
      if (!known) {
        return Status::InvalidArgument(path + "." + field +
                                       ": unknown field; use util_pct, mem_used_mib, power_w, "
                                       "temp_c, xid_errors, xid_count, ecc_uncorrected, "
                                       "retired_pages, retired_pages_pending, remapped_rows, "
                                       "remapped_rows_pending, remapped_rows_failed or "
                                       "hw_slowdown");
      }
      std::vector<double>& out = p.gpus[static_cast<int>(*index)][field];
      const Json one = values.is_array() ? values : Json::array({values});
      if (one.empty() || one.size() > 100'000) {
        return Status::InvalidArgument(path + "." + field + ": expected 1 to 100000 numbers");
      }
      for (const Json& v : one) {
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
          return Status::InvalidArgument(path + "." + field +
                                         ": expected non-negative numbers, found " +
                                         std::string(JsonTypeName(v)));
        }
        out.push_back(v.get<double>());
      }
      if (field == "util_pct") {
        for (double& u : out) u = std::min(u, 100.0);
      }
    }
  }
  return p;
}

void SetHardwareHealth(const std::string& field, double v, HardwareHealth* hw) {
  const auto count = static_cast<int64_t>(std::min(v, 1e12));
  if (field == "retired_pages") hw->retired_pages = count;
  if (field == "retired_pages_pending") hw->retired_pages_pending = v != 0;
  if (field == "remapped_rows") hw->remapped_rows = count;
  if (field == "remapped_rows_pending") hw->remapped_rows_pending = v != 0;
  if (field == "remapped_rows_failed") hw->remapped_rows_failed = v != 0;
  if (field == "hw_slowdown") hw->hw_slowdown = v != 0;
}

class FakeSampler final : public TelemetrySampler {
 public:
  FakeSampler(Profile profile, NodeInfo node)
      : profile_(std::move(profile)), node_(std::move(node)) {}
  std::string_view name() const override { return "fake"; }
  Result<std::vector<GpuSample>> Sample(int64_t now_us) override {
    const int64_t step = now_us / 1'000'000 / profile_.step_s;
    std::vector<GpuSample> out;
    for (const GpuInfo& g : node_.gpus) {
      GpuSample s;
      s.index = g.index;
      s.uuid = g.uuid;
      if (g.utilization_percent) s.util_pct = *g.utilization_percent;
      if (g.memory_total_bytes > 0) {
        s.mem_total_mib = static_cast<int64_t>(g.memory_total_bytes / kMiB);
        s.mem_used_mib = static_cast<int64_t>(g.memory_used_bytes / kMiB);
      }
      if (g.power_watts) s.power_w = *g.power_watts;
      if (g.temperature_celsius) s.temp_c = *g.temperature_celsius;
      if (auto it = profile_.gpus.find(g.index); it != profile_.gpus.end()) {
        for (const auto& [field, series] : it->second) {
          const double v = series[static_cast<size_t>(step) % series.size()];
          if (field == "util_pct") s.util_pct = v;
          if (field == "mem_used_mib") s.mem_used_mib = static_cast<int64_t>(v);
          if (field == "power_w") s.power_w = v;
          if (field == "temp_c") s.temp_c = v;
          if (field == "xid_errors") s.xid_errors = static_cast<int64_t>(v);
          if (field == "xid_count") s.xid_count = static_cast<int64_t>(v);
          if (field == "ecc_uncorrected") s.ecc_uncorrected = static_cast<int64_t>(v);
          SetHardwareHealth(field, v, &s.hw);
        }
      }
      out.push_back(std::move(s));
    }
    return out;
  }
  std::map<int, int64_t> XidCounts(int64_t now_us) override {
    const int64_t step = now_us / 1'000'000 / profile_.step_s;
    std::map<int, int64_t> out;
    for (const auto& [index, fields] : profile_.gpus) {
      if (auto it = fields.find("xid_count"); it != fields.end()) {
        out[index] =
            static_cast<int64_t>(it->second[static_cast<size_t>(step) % it->second.size()]);
      }
    }
    return out;
  }

 private:
  Profile profile_;
  NodeInfo node_;
};

// ---- amdgpu sysfs --------------------------------------------------------------------

std::optional<int64_t> ReadNumber(const std::string& path) {
  Result<std::string> text = ReadFileToString(path, 64);
  if (!text.ok()) return std::nullopt;
  std::optional<int64_t> v = ParseInt64(Trim(*text));
  if (!v || *v < 0) return std::nullopt;
  return v;
}

class AmdSysfsSampler final : public TelemetrySampler {
 public:
  AmdSysfsSampler(std::string root, const NodeInfo& node) : root_(std::move(root)) {
    for (const GpuInfo& g : node.gpus) {
      if (g.vendor == Vendor::kAmd && !g.pci_bus_id.empty()) gpus_.push_back(g);
    }
  }
  std::string_view name() const override { return "amdgpu-sysfs"; }
  Result<std::vector<GpuSample>> Sample(int64_t) override {
    std::vector<GpuSample> out;
    int read = 0;
    for (const GpuInfo& g : gpus_) {
      const std::string dir = root_ + "/bus/pci/devices/" + g.pci_bus_id;
      GpuSample s;
      s.index = g.index;
      s.uuid = g.uuid;
      if (auto busy = ReadNumber(dir + "/gpu_busy_percent"); busy && *busy <= 100) {
        s.util_pct = static_cast<double>(*busy);
        ++read;
      }
      auto used = ReadNumber(dir + "/mem_info_vram_used");
      auto total = ReadNumber(dir + "/mem_info_vram_total");
      if (used && total && *used <= *total) {
        s.mem_used_mib = *used / kMiB;
        s.mem_total_mib = *total / kMiB;
      }
      if (const std::string hwmon = Hwmon(dir); !hwmon.empty()) {
        auto uw = ReadNumber(hwmon + "/power1_average");
        if (!uw) uw = ReadNumber(hwmon + "/power1_input");
        if (uw && *uw < int64_t{10'000'000'000}) s.power_w = static_cast<double>(*uw) / 1e6;
        if (auto mc = ReadNumber(hwmon + "/temp1_input"); mc && *mc < 200'000) {
          s.temp_c = static_cast<double>(*mc) / 1000.0;
        }
      }
      ReadAmdgpuRas(dir, &s);
      out.push_back(std::move(s));
    }
    if (read == 0 && !out.empty()) {
      return Status::Unavailable("no readable gpu_busy_percent under " + root_ +
                                 "/bus/pci/devices: is the amdgpu driver loaded?");
    }
    return out;
  }

 private:
  // The first hwmon directory of the device (hwmon/hwmonN), "" when none.
  std::string Hwmon(const std::string& dir) {
    if (auto it = hwmon_.find(dir); it != hwmon_.end()) return it->second;
    std::string found;
    if (DIR* d = opendir((dir + "/hwmon").c_str())) {
      while (dirent* e = readdir(d)) {
        if (std::string_view(e->d_name).rfind("hwmon", 0) == 0) {
          found = dir + "/hwmon/" + e->d_name;
          break;
        }
      }
      closedir(d);
    }
    return hwmon_[dir] = found;
  }

  std::string root_;
  std::vector<GpuInfo> gpus_;
  std::map<std::string, std::string> hwmon_;
};

// ROCm SMI's samples with the RAS counts from sysfs (amdgpu_ras.h: the files ROCm SMI's own
// RAS calls read), by each AMD GPU's PCI bus id.
class AmdRasOverlay final : public TelemetrySampler {
 public:
  AmdRasOverlay(std::unique_ptr<TelemetrySampler> inner, std::string root, const NodeInfo& node)
      : inner_(std::move(inner)), root_(std::move(root)) {
    for (const GpuInfo& g : node.gpus) {
      if (g.vendor == Vendor::kAmd && !g.pci_bus_id.empty()) bus_[g.index] = g.pci_bus_id;
    }
  }
  std::string_view name() const override { return inner_->name(); }
  std::string note() const override { return inner_->note(); }
  Result<std::vector<GpuSample>> Sample(int64_t now_us) override {
    GP_ASSIGN_OR_RETURN(std::vector<GpuSample> out, inner_->Sample(now_us));
    for (GpuSample& s : out) {
      if (auto it = bus_.find(s.index); it != bus_.end()) {
        ReadAmdgpuRas(root_ + "/bus/pci/devices/" + it->second, &s);
      }
    }
    return out;
  }

 private:
  std::unique_ptr<TelemetrySampler> inner_;
  std::string root_;
  std::map<int, std::string> bus_;
};

}  // namespace

Result<std::unique_ptr<TelemetrySampler>> NewFakeSampler(const std::string& node_file,
                                                         const NodeInfo& node) {
  Profile profile;
  if (!node_file.empty()) {
    GP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(node_file));
    if (j.is_object() && j.contains("telemetry")) {
      GP_ASSIGN_OR_RETURN(profile, ReadProfile(j["telemetry"], node_file));
    }
  }
  return std::unique_ptr<TelemetrySampler>(new FakeSampler(std::move(profile), node));
}

std::unique_ptr<TelemetrySampler> NewAmdSysfsSampler(const std::string& sysfs_root,
                                                     const NodeInfo& node) {
  return std::make_unique<AmdSysfsSampler>(sysfs_root, node);
}

std::unique_ptr<TelemetrySampler> NewAmdRasOverlay(std::unique_ptr<TelemetrySampler> inner,
                                                   const std::string& sysfs_root,
                                                   const NodeInfo& node) {
  return std::make_unique<AmdRasOverlay>(std::move(inner), sysfs_root, node);
}

Result<std::unique_ptr<TelemetrySampler>> CreateTelemetrySampler(const DiscoveryOptions& options,
                                                                 const NodeInfo& node) {
  if (node.gpus.empty()) return Status::Unavailable("the node has no GPUs to sample");
  if (!options.fake_node_file.empty()) return NewFakeSampler(options.fake_node_file, node);
  std::vector<std::unique_ptr<TelemetrySampler>> parts;
  Status why = Status::Unavailable("no telemetry source for the node's GPUs");
  bool nvidia = false, amd = false;
  for (const GpuInfo& g : node.gpus) {
    nvidia = nvidia || g.vendor == Vendor::kNvidia;
    amd = amd || g.vendor == Vendor::kAmd;
  }
  if (nvidia) {
    Result<std::unique_ptr<TelemetrySampler>> s = NewNvmlSampler(options.nvml_library, node);
    if (s.ok()) {
      parts.push_back(std::move(*s));
    } else {
      why = s.status();
    }
  }
  if (amd) {
    Result<std::unique_ptr<TelemetrySampler>> s = NewRocmSmiSampler(options.rocm_smi_library, node);
    parts.push_back(s.ok() ? NewAmdRasOverlay(std::move(*s), options.sysfs_root, node)
                           : NewAmdSysfsSampler(options.sysfs_root, node));
  }
  if (parts.empty()) return why;
  if (parts.size() == 1) return std::move(parts.front());
  return std::unique_ptr<TelemetrySampler>(new CombinedSampler(std::move(parts)));
}

}  // namespace gpupool::gpu
