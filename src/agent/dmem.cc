#include "agent/dmem.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace gpupool::agent {
namespace {

Status WriteFile(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return Status::Unavailable("cannot open '" + path + "': " + std::strerror(errno));
  const ssize_t n = ::write(fd, value.data(), value.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Status::Unavailable("cannot write '" + value + "' to '" + path +
                               "': " + std::strerror(n < 0 ? err : EIO));
  }
  return Status::Ok();
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::vector<DmemRegion> ParseDmemCapacity(std::string_view text) {
  std::vector<DmemRegion> out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos) continue;
    std::string_view size = line.substr(space + 1);
    while (!size.empty() && size.front() == ' ') size.remove_prefix(1);
    while (!size.empty() && (size.back() == ' ' || size.back() == '\r')) size.remove_suffix(1);
    if (size.empty() || size.size() > 20) continue;
    uint64_t bytes = 0;
    bool digits = true;
    for (char c : size) {
      if (c < '0' || c > '9') {
        digits = false;
        break;
      }
      bytes = bytes * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!digits) continue;
    out.push_back({std::string(line.substr(0, space)), bytes});
  }
  return out;
}

std::string DmemRegionOf(const std::vector<DmemRegion>& regions, std::string_view pci_bus_id) {
  if (pci_bus_id.empty()) return "";
  const std::string prefix = "drm/" + Lower(pci_bus_id) + "/vram";
  for (const DmemRegion& r : regions) {
    if (Lower(r.name).rfind(prefix, 0) == 0) return r.name;
  }
  return "";
}

Status ApplyDmemLimit(const std::string& root, const std::string& leaf_dir,
                      const std::string& region, uint64_t bytes) {
  if (region.empty() || region.find_first_of(" \n") != std::string::npos) {
    return Status::InvalidArgument("'" + region + "' is not a dmem region name");
  }
  // Controllers must be enabled in every ancestor's subtree_control to appear below.
  GP_RETURN_IF_ERROR(WriteFile(root + "/cgroup.subtree_control", "+dmem"));
  GP_RETURN_IF_ERROR(WriteFile(root + "/gpupool/cgroup.subtree_control", "+dmem"));
  const std::string limit = region + " " + std::to_string(bytes);
  GP_RETURN_IF_ERROR(WriteFile(leaf_dir + "/dmem.max", limit));
  return WriteFile(leaf_dir + "/dmem.low", limit);
}

}  // namespace gpupool::agent
