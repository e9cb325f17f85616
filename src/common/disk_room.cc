#include "common/disk_room.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "common/strings.h"

namespace gpupool {

Result<DiskUsage> ReadDiskUsage(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) {
    return Status::Internal("cannot read the free space of '" + path +
                            "': " + std::strerror(errno));
  }
  const uint64_t unit = st.f_frsize != 0 ? st.f_frsize : st.f_bsize;
  DiskUsage u;
  u.total_bytes = static_cast<uint64_t>(st.f_blocks) * unit;
  u.free_bytes = static_cast<uint64_t>(st.f_bavail) * unit;
  u.total_inodes = st.f_files;
  u.free_inodes = st.f_favail;
  u.read_only = (st.f_flag & ST_RDONLY) != 0;
  return u;
}

uint64_t MinFreeBytes(const DiskMinFree& min, uint64_t total_bytes) {
  switch (min.kind) {
    case DiskMinFree::Kind::kDefault:
      return std::min<uint64_t>(uint64_t{1} << 30, total_bytes / 20);
    case DiskMinFree::Kind::kBytes:
      return min.bytes;
    case DiskMinFree::Kind::kPercent:
      return static_cast<uint64_t>(static_cast<double>(total_bytes) * min.percent / 100.0);
    case DiskMinFree::Kind::kOff:
      return 0;
  }
  return 0;
}

std::string BytesForPeople(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0 || v >= 100.0 || v == static_cast<double>(static_cast<uint64_t>(v))) {
    return StrFormat("%.0f %s", v, kUnits[u]);
  }
  return StrFormat("%.1f %s", v, kUnits[u]);
}

namespace {

std::string MinFreeText(const DiskMinFree& min, uint64_t level) {
  switch (min.kind) {
    case DiskMinFree::Kind::kDefault:
      return BytesForPeople(level) + " (the default: 1 GiB or 5% of the filesystem, the smaller)";
    case DiskMinFree::Kind::kPercent:
      return StrFormat("%g%%", min.percent) + " (" + BytesForPeople(level) + ")";
    default:
      return BytesForPeople(level);
  }
}

}  // namespace

DiskVerdict JudgeDiskRoom(const std::string& path, const DiskUsage& usage, const DiskMinFree& min,
                          bool was_under, const std::string& flag) {
  DiskVerdict v;
  if (min.kind == DiskMinFree::Kind::kOff) return v;
  const uint64_t bytes_level = MinFreeBytes(min, usage.total_bytes);
  const uint64_t inode_level = usage.total_inodes / 100;
  // Under pressure it takes a quarter more than the level to end it.
  const uint64_t bytes_needed = was_under ? bytes_level + bytes_level / 4 : bytes_level;
  const uint64_t inodes_needed = was_under ? inode_level + inode_level / 4 : inode_level;
  if (usage.read_only) {
    v.pressure = true;
    v.reason = path + " is on a read-only filesystem (remounted after errors?)";
  } else if (usage.free_bytes < bytes_needed) {
    v.pressure = true;
    v.reason = path + " has " + BytesForPeople(usage.free_bytes) + " free of " +
               BytesForPeople(usage.total_bytes) + ", below " + flag + " of " +
               MinFreeText(min, bytes_level);
    if (was_under && usage.free_bytes >= bytes_level) {
      v.reason += " and a quarter more, which ends the pressure";
    }
  } else if (usage.total_inodes > 0 && usage.free_inodes < inodes_needed) {
    v.pressure = true;
    v.reason = path + " has " + std::to_string(usage.free_inodes) + " free inodes of " +
               std::to_string(usage.total_inodes) + ", below 1%";
    if (was_under && usage.free_inodes >= inode_level) {
      v.reason += " and a quarter more, which ends the pressure";
    }
  }
  return v;
}

}  // namespace gpupool
