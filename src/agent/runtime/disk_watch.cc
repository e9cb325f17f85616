#include "agent/runtime/disk_watch.h"

namespace gpupool::agent {

protocol::DiskReport JudgeDisk(const std::string& path, const DiskUsage& usage,
                               const DiskMinFree& min, bool was_under, int64_t now_ms) {
  protocol::DiskReport r;
  r.at_ms = now_ms;
  r.path = path;
  r.free_bytes = usage.free_bytes;
  r.total_bytes = usage.total_bytes;
  r.free_inodes = usage.free_inodes;
  r.total_inodes = usage.total_inodes;
  DiskVerdict v = JudgeDiskRoom(path, usage, min, was_under, "the agent's --disk-min-free");
  r.pressure = v.pressure;
  r.reason = std::move(v.reason);
  return r;
}

}  // namespace gpupool::agent
