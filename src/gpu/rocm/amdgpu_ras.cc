#include "gpu/rocm/amdgpu_ras.h"

#include <dirent.h>

#include <optional>
#include <vector>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::gpu {
namespace {

constexpr size_t kMaxRasFile = 1 << 20;  // a bad-page list of some 30000 pages
constexpr int64_t kMaxCount = int64_t{1} << 40;

// The "ue" count of one <block>_err_count file; nullopt when it has none.
std::optional<int64_t> UncorrectedOf(const std::string& text) {
  for (const std::string& line : Split(text, '\n')) {
    const std::string_view l = Trim(line);
    if (l.rfind("ue:", 0) != 0) continue;
    std::optional<int64_t> v = ParseInt64(Trim(l.substr(3)));
    if (v && *v >= 0 && *v < kMaxCount) return v;
  }
  return std::nullopt;
}

}  // namespace

void ReadAmdgpuRas(const std::string& device_dir, GpuSample* s) {
  const std::string ras = device_dir + "/ras";
  std::vector<std::string> counts;
  if (DIR* d = opendir(ras.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      if (name.size() > 10 && name.substr(name.size() - 10) == "_err_count") {
        counts.emplace_back(name);
      }
    }
    closedir(d);
  }
  int64_t ue = 0;
  bool any = false;
  for (const std::string& name : counts) {
    Result<std::string> text = ReadFileToString(ras + "/" + name, 4096);
    if (!text.ok()) continue;
    if (std::optional<int64_t> v = UncorrectedOf(*text)) {
      ue = std::min(ue + *v, kMaxCount);
      any = true;
    }
  }
  if (any) s->ecc_uncorrected = ue;
  Result<std::string> pages = ReadFileToString(ras + "/gpu_vram_bad_pages", kMaxRasFile);
  if (!pages.ok()) return;
  int64_t bad = 0;
  bool pending = false;
  for (const std::string& line : Split(*pages, '\n')) {
    const std::vector<std::string> parts = Split(line, ':');
    if (parts.size() != 3 || Trim(parts[0]).rfind("0x", 0) != 0) continue;
    const std::string_view flag = Trim(parts[2]);
    if (flag != "R" && flag != "P" && flag != "F") continue;
    ++bad;
    pending = pending || flag == "P";
  }
  s->hw.retired_pages = bad;
  s->hw.retired_pages_pending = pending;
}

}  // namespace gpupool::gpu
