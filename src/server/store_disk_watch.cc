#include "server/store_disk_watch.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace gpupool::server {

StoreDiskWatch::StoreDiskWatch(std::string path, DiskMinFree min, Reader read)
    : path_(std::move(path)), min_(min), read_(read ? std::move(read) : Reader(ReadDiskUsage)) {}

void StoreDiskWatch::Check() {
  if (min_.kind == DiskMinFree::Kind::kOff) return;
  Result<DiskUsage> usage = read_(path_);
  std::lock_guard lock(mu_);
  if (!usage.ok()) {
    if (!read_failed_) spdlog::warn("store disk watch: {}", usage.status().message());
    read_failed_ = true;
    return;
  }
  read_failed_ = false;
  DiskVerdict v =
      JudgeDiskRoom(path_, *usage, min_, verdict_.pressure, "the server's --disk-min-free");
  if (v.pressure && !verdict_.pressure) {
    spdlog::error(
        "the store's disk is short of room: {}; new submissions are refused until "
        "it has room (jobs in the pool go on)",
        v.reason);
  } else if (!v.pressure && verdict_.pressure) {
    spdlog::warn("the store's disk has room again ({} free of {}): submissions are taken",
                 BytesForPeople(usage->free_bytes), BytesForPeople(usage->total_bytes));
  }
  verdict_ = std::move(v);
}

Status StoreDiskWatch::Room() const {
  std::lock_guard lock(mu_);
  if (!verdict_.pressure) return Status::Ok();
  return Status::ResourceExhausted(
      "the disk that holds the pool's database is short of room (" + verdict_.reason +
      "): new jobs are refused until an admin frees room there; jobs already queued and "
      "running go on");
}

bool StoreDiskWatch::under_pressure() const {
  std::lock_guard lock(mu_);
  return verdict_.pressure;
}

}  // namespace gpupool::server
