// How much room a filesystem has left, and whether that is too little: the agent's watch
// of its state directory (agent/runtime/disk_watch.h, as kubelet's DiskPressure) and the
// server's watch of the disk under its SQLite store (server/store_disk_watch.h) share it.
//
// Pure but for ReadDiskUsage; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool {

// What a filesystem has: its size and the room an unprivileged writer has left (as df's
// "Avail"), in bytes and in inodes (0 inodes in all: the filesystem does not count them).
struct DiskUsage {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t total_inodes = 0;
  uint64_t free_inodes = 0;
  bool read_only = false;  // mounted read-only (as ext4 remounts itself after errors)
};

// statvfs(path). An error names the path.
Result<DiskUsage> ReadDiskUsage(const std::string& path);

// --disk-min-free: how much room the filesystem must keep.
struct DiskMinFree {
  enum class Kind {
    kDefault,  // the smaller of 1 GiB and 5% of the filesystem's size
    kBytes,    // `bytes`
    kPercent,  // `percent` of the filesystem's size
    kOff,      // no watch
  };
  Kind kind = Kind::kDefault;
  uint64_t bytes = 0;
  double percent = 0;
};

// The bytes `min` asks a filesystem of `total_bytes` to keep free (0 when off).
uint64_t MinFreeBytes(const DiskMinFree& min, uint64_t total_bytes);

// Whether a filesystem has too little room, and what is short.
struct DiskVerdict {
  bool pressure = false;
  std::string reason;  // empty without pressure
};

// Whether the filesystem of `path` is under pressure, given whether it was at the last
// check (`was_under`): pressure begins when it is read-only, when its free bytes fall
// below MinFreeBytes, or its free inodes below 1% of its inodes, and ends only once it is
// writable and both are back above a quarter more than those levels (so that a disk
// hovering at the level does not flap). The reason says what is short, how much is left
// and the level, naming the level's flag as `flag` ("the agent's --disk-min-free"), e.g.
// "/var/lib/gpupool/agent has 120 MiB free of 50 GiB, below the agent's --disk-min-free
// of 1 GiB".
DiskVerdict JudgeDiskRoom(const std::string& path, const DiskUsage& usage, const DiskMinFree& min,
                          bool was_under, const std::string& flag);

// "120 MiB", "1.5 GiB": a byte count for people.
std::string BytesForPeople(uint64_t bytes);

}  // namespace gpupool
