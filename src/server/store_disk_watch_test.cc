#include "server/store_disk_watch.h"

#include <gtest/gtest.h>

#include <string>

namespace gpupool::server {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// A filesystem whose free bytes the test sets; `fail` makes the read fail.
struct FakeDisk {
  DiskUsage usage{100 * kGiB, 50 * kGiB, 1'000'000, 900'000, false};
  bool fail = false;
  std::string read_path;
  StoreDiskWatch::Reader Reader() {
    return [this](const std::string& path) -> Result<DiskUsage> {
      read_path = path;
      if (fail) return Status::Internal("cannot read the free space of '" + path + "'");
      return usage;
    };
  }
};

TEST(StoreDiskWatch, SubmissionsAreRefusedBelowTheLevelUntilTheRoomIsBack) {
  FakeDisk disk;
  StoreDiskWatch watch("/var/lib/gpupool", DiskMinFree{}, disk.Reader());
  EXPECT_TRUE(watch.Room().ok());  // nothing read yet: nothing refused
  watch.Check();
  EXPECT_EQ(disk.read_path, "/var/lib/gpupool");
  EXPECT_TRUE(watch.Room().ok());
  disk.usage.free_bytes = 300 * kMiB;  // the default level: 1 GiB (5% is 5 GiB)
  watch.Check();
  EXPECT_TRUE(watch.under_pressure());
  const Status refused = watch.Room();
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "the disk that holds the pool's database is short of room (/var/lib/gpupool has 300 "
            "MiB free of 100 GiB, below the server's --disk-min-free of 1 GiB (the default: 1 "
            "GiB or 5% of the filesystem, the smaller)): new jobs are refused until an admin "
            "frees room there; jobs already queued and running go on");
  // Back above the level but not a quarter more: still refused (no flapping).
  disk.usage.free_bytes = kGiB + 100 * kMiB;
  watch.Check();
  EXPECT_FALSE(watch.Room().ok());
  EXPECT_NE(watch.Room().message().find("and a quarter more"), std::string::npos);
  disk.usage.free_bytes = 2 * kGiB;
  watch.Check();
  EXPECT_TRUE(watch.Room().ok());
  EXPECT_FALSE(watch.under_pressure());
}

TEST(StoreDiskWatch, AReadOnlyFilesystemOrTooFewInodesRefuse) {
  FakeDisk disk;
  StoreDiskWatch watch("/s", DiskMinFree{}, disk.Reader());
  disk.usage.read_only = true;
  watch.Check();
  EXPECT_NE(watch.Room().message().find("/s is on a read-only filesystem"), std::string::npos);
  disk.usage.read_only = false;
  disk.usage.free_inodes = 5'000;
  watch.Check();
  EXPECT_NE(watch.Room().message().find("/s has 5000 free inodes of 1000000, below 1%"),
            std::string::npos)
      << watch.Room().message();
}

TEST(StoreDiskWatch, AFailedReadKeepsTheLastVerdict) {
  FakeDisk disk;
  StoreDiskWatch watch("/s", DiskMinFree{DiskMinFree::Kind::kBytes, 10 * kGiB, 0}, disk.Reader());
  disk.usage.free_bytes = 5 * kGiB;
  watch.Check();
  EXPECT_FALSE(watch.Room().ok());
  disk.fail = true;
  watch.Check();
  EXPECT_FALSE(watch.Room().ok());  // not taken for room
  disk.fail = false;
  disk.usage.free_bytes = 20 * kGiB;
  watch.Check();
  EXPECT_TRUE(watch.Room().ok());
  disk.fail = true;
  watch.Check();
  EXPECT_TRUE(watch.Room().ok());  // nor for pressure
}

TEST(StoreDiskWatch, OffRefusesNothingAndReadsNothing) {
  FakeDisk disk;
  disk.usage.free_bytes = 0;
  StoreDiskWatch watch("/s", DiskMinFree{DiskMinFree::Kind::kOff, 0, 0}, disk.Reader());
  watch.Check();
  EXPECT_TRUE(watch.Room().ok());
  EXPECT_TRUE(disk.read_path.empty());
}

}  // namespace
}  // namespace gpupool::server
