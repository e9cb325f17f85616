// The server's watch of the disk under its SQLite store (docs/health.md, "The
// controller's own disk"): a full store cannot record jobs' ends (they stay RUNNING until
// it has room) nor take submissions. Every --disk-check-interval seconds the server reads
// the room the store's filesystem has left; below --disk-min-free (bytes or inodes, as
// the agent's watch: common/disk_room.h) new submissions are refused, naming what is
// short, so that what is left goes to the jobs already in the pool (their starts, ends,
// cancels). Without pressure, or with the watch off, everything is taken as before.
//
// Thread-safe: Check runs on the server's watch thread, Room on the API's.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "common/disk_room.h"
#include "common/status.h"

namespace gpupool::server {

class StoreDiskWatch {
 public:
  using Reader = std::function<Result<DiskUsage>(const std::string& path)>;
  // `path`: the directory whose filesystem holds the store. `read`: ReadDiskUsage when
  // empty (tests give their own).
  StoreDiskWatch(std::string path, DiskMinFree min, Reader read = nullptr);

  // Reads the filesystem and judges it; logs when pressure begins or ends. A failed read
  // keeps the last verdict (and is logged once until a read succeeds again).
  void Check();
  // Ok, or ResourceExhausted saying what is short and that submissions wait for room:
  // the answer to a submission now.
  Status Room() const;
  bool under_pressure() const;

 private:
  const std::string path_;
  const DiskMinFree min_;
  const Reader read_;
  mutable std::mutex mu_;
  DiskVerdict verdict_;       // guarded by mu_
  bool read_failed_ = false;  // guarded by mu_: the last read failed (logged once)
};

}  // namespace gpupool::server
