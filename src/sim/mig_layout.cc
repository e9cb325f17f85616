#include "sim/mig_layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "common/strings.h"

namespace gpupool::sim {
namespace {

// One GPU's profiles, by the memory slices (of 8, or 4 on A30) they hold and where
// the hardware lets them start.
struct ProfileShape {
  int32_t compute;
  int32_t memory_slices;
  std::vector<int32_t> starts;
};
struct Family {
  int64_t gpu_gb;
  const char* gpus;
  int32_t compute_slices;
  int32_t memory_slices;
  std::vector<std::pair<std::string, ProfileShape>> profiles;
};

// The 7-slice GPUs (A100, H100, H200, B200): profiles named by the memory they get of a
// GPU with `gb` gigabytes, `eighth` being one memory slice's GB as NVIDIA rounds it.
Family SevenSlice(int64_t gb, const char* gpus, std::array<int64_t, 4> names) {
  // names: 1 slice, 2 slices, 4 slices, 8 slices (GB as in the profile names).
  return Family{gb,
                gpus,
                7,
                8,
                {{fmt::format("1g.{}gb", names[0]), {1, 1, {0, 1, 2, 3, 4, 5, 6}}},
                 {fmt::format("1g.{}gb", names[1]), {1, 2, {0, 2, 4, 6}}},
                 {fmt::format("2g.{}gb", names[1]), {2, 2, {0, 2, 4}}},
                 {fmt::format("3g.{}gb", names[2]), {3, 4, {0, 4}}},
                 {fmt::format("4g.{}gb", names[2]), {4, 4, {0}}},
                 {fmt::format("7g.{}gb", names[3]), {7, 8, {0}}}}};
}

const std::vector<Family>& Families() {
  static const std::vector<Family> kFamilies = [] {
    std::vector<Family> f;
    f.push_back(Family{
        24,
        "A30",
        4,
        4,
        {{"1g.6gb", {1, 1, {0, 1, 2, 3}}}, {"2g.12gb", {2, 2, {0, 2}}}, {"4g.24gb", {4, 4, {0}}}}});
    f.push_back(SevenSlice(40, "A100 40GB", {5, 10, 20, 40}));
    f.push_back(SevenSlice(80, "A100 80GB, H100", {10, 20, 40, 80}));
    f.push_back(SevenSlice(94, "H100 NVL", {12, 24, 47, 94}));
    f.push_back(SevenSlice(141, "H200", {18, 35, 71, 141}));
    f.push_back(SevenSlice(180, "B200", {23, 45, 90, 180}));
    return f;
  }();
  return kFamilies;
}

const ProfileShape* Find(const Family& f, std::string_view name) {
  for (const auto& [n, shape] : f.profiles) {
    if (n == name) return &shape;
  }
  return nullptr;
}

std::string ProfileList(const Family& f) {
  std::vector<std::string> names;
  for (const auto& p : f.profiles) names.push_back(p.first);
  return fmt::format("{} GB GPUs ({}): {}", f.gpu_gb, f.gpus,
                     fmt::format("{}", fmt::join(names, ", ")));
}

// Whether the instances (sorted by memory slices, largest first) can be placed on one
// GPU's memory slices at their allowed starts, from instance k on.
bool Place(const std::vector<const ProfileShape*>& shapes, size_t k, uint32_t used) {
  if (k == shapes.size()) return true;
  const ProfileShape& s = *shapes[k];
  const uint32_t mask = (1u << s.memory_slices) - 1;
  for (int32_t start : s.starts) {
    const uint32_t m = mask << start;
    if ((used & m) == 0 && Place(shapes, k + 1, used | m)) return true;
  }
  return false;
}

Status LayoutError(std::string_view text, std::string_view what) {
  return Status::InvalidArgument(
      fmt::format("MIG layout '{}': {}; a layout is PROFILE[+PROFILE...] of one GPU, e.g. "
                  "3g.40gb+2g.20gb+1g.10gb+1g.10gb",
                  SanitizeUtf8(text.substr(0, 80)), what));
}

}  // namespace

Result<MigLayout> ParseMigLayout(std::string_view text) {
  std::vector<std::string> names;
  for (const std::string& raw : Split(text, '+')) names.emplace_back(ToLower(Trim(raw)));
  if (Trim(text).empty()) return LayoutError(text, "empty");
  // The largest family that has every profile.
  const Family* family = nullptr;
  for (const Family& f : Families()) {
    bool all = true;
    for (const std::string& n : names) all = all && Find(f, n) != nullptr;
    if (all) family = &f;
  }
  if (family == nullptr) {
    const Family* first = nullptr;
    for (const std::string& n : names) {
      if (n.empty()) return LayoutError(text, "an empty profile between '+'");
      const Family* of = nullptr;
      for (const Family& f : Families()) {
        if (Find(f, n) != nullptr && of == nullptr) of = &f;
      }
      if (of == nullptr) {
        return LayoutError(text,
                           fmt::format("'{}' is not a MIG profile; profiles are "
                                       "<compute>g.<memory>gb, for {}",
                                       SanitizeUtf8(n.substr(0, 20)), ProfileList(Families()[2])));
      }
      if (first == nullptr) first = of;
    }
    return LayoutError(text, fmt::format("the profiles are of different GPUs (all must be "
                                         "of one; {})",
                                         ProfileList(*first)));
  }
  MigLayout layout;
  layout.text = fmt::format("{}", fmt::join(names, "+"));
  layout.gpu_memory_mib = family->gpu_gb * 1024;
  std::vector<const ProfileShape*> shapes;
  int32_t compute = 0;
  for (const std::string& n : names) {
    const ProfileShape* s = Find(*family, n);
    shapes.push_back(s);
    compute += s->compute;
    const auto dot = n.find('.');
    const int64_t gb = ParseInt64(std::string_view(n).substr(dot + 1, n.size() - dot - 3)).value();
    layout.instances.push_back(MigInstance{n, s->compute, s->memory_slices, gb * 1024});
  }
  std::stable_sort(shapes.begin(), shapes.end(), [](const auto* a, const auto* b) {
    return a->memory_slices > b->memory_slices;
  });
  if (compute > family->compute_slices || !Place(shapes, 0, 0)) {
    return LayoutError(
        text, fmt::format("the instances do not fit one {} GB GPU ({} compute "
                          "slices and {} memory slices, at the placements the "
                          "hardware allows; these need {} compute slices)",
                          family->gpu_gb, family->compute_slices, family->memory_slices, compute));
  }
  return layout;
}

Status ApplyMigLayout(const MigLayout& layout, sched::NodeSpec& node) {
  if (node.whole_only_gpus != 0) {
    return Status::InvalidArgument(
        fmt::format("node '{}' already has MIG instances; give it one layout", node.name));
  }
  const auto per_gpu = static_cast<int64_t>(layout.instances.size());
  const int64_t devices = per_gpu * node.num_gpus;
  if (devices > 64) {
    return Status::InvalidArgument(fmt::format(
        "node '{}': {} GPUs cut into {} instances each make {} devices; at most 64 per node",
        node.name, node.num_gpus, per_gpu, devices));
  }
  node.device_memory_mib.clear();
  node.physical_gpus.clear();
  for (int32_t g = 0; g < node.num_gpus; ++g) {
    for (const MigInstance& i : layout.instances) {
      node.device_memory_mib.push_back(i.memory_mib);
      node.physical_gpus.push_back(g);  // a gang's shares take instances of different GPUs
    }
  }
  node.num_gpus = static_cast<int32_t>(devices);
  node.whole_only_gpus = devices == 64 ? ~uint64_t{0} : (uint64_t{1} << devices) - 1;
  node.gpu_memory_mib = layout.gpu_memory_mib;
  return Status::Ok();
}

int64_t NodeGpuCapacityMilli(const sched::NodeState& node) {
  if (node.whole_only_gpus == 0) return int64_t{node.num_gpus()} * 1000;
  int64_t sum = 0;
  for (int32_t g = 0; g < node.num_gpus(); ++g) sum += sched::InstanceWeightMilli(node, g);
  return sum;
}

int64_t NodeGpuUsedMilli(const sched::NodeState& node) {
  if (node.whole_only_gpus == 0) return int64_t{node.num_gpus()} * 1000 - node.gpu_free_total;
  int64_t sum = 0;
  for (int32_t g = 0; g < node.num_gpus(); ++g) {
    const int64_t used = 1000 - node.gpu_free_milli[static_cast<size_t>(g)];
    sum += used * sched::InstanceWeightMilli(node, g) / 1000;
  }
  return sum;
}

int64_t SpecGpuCapacityMilli(const sched::NodeSpec& node) {
  int64_t sum = 0;
  for (int32_t g = 0; g < node.num_gpus; ++g) {
    const bool instance = (node.whole_only_gpus >> g & 1) != 0 && node.gpu_memory_mib > 0;
    sum += instance ? node.device_memory_mib[static_cast<size_t>(g)] * 1000 / node.gpu_memory_mib
                    : 1000;
  }
  return sum;
}

}  // namespace gpupool::sim
