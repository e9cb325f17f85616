#include "agent/runtime/disk_watch.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace gpupool::agent {
namespace {

constexpr uint64_t kDiskMiB = uint64_t{1} << 20;
constexpr uint64_t kDiskGiB = uint64_t{1} << 30;

DiskUsage Usage(uint64_t total, uint64_t free, uint64_t inodes = 1'000'000,
                uint64_t free_inodes = 900'000) {
  return DiskUsage{total, free, inodes, free_inodes};
}

DiskMinFree Bytes(uint64_t b) { return {DiskMinFree::Kind::kBytes, b, 0}; }
DiskMinFree Percent(double p) { return {DiskMinFree::Kind::kPercent, 0, p}; }

TEST(DiskWatch, TheDefaultIsOneGibOrFivePercentTheSmaller) {
  EXPECT_EQ(MinFreeBytes({}, 100 * kDiskGiB), kDiskGiB);
  EXPECT_EQ(MinFreeBytes({}, 10 * kDiskGiB), 512 * kDiskMiB);
  EXPECT_EQ(MinFreeBytes({}, 4 * kDiskMiB), 4 * kDiskMiB / 20);
  EXPECT_EQ(MinFreeBytes(Bytes(3 * kDiskGiB), 10 * kDiskGiB), 3 * kDiskGiB);
  EXPECT_EQ(MinFreeBytes(Percent(10), 10 * kDiskGiB), kDiskGiB);
  EXPECT_EQ(MinFreeBytes({DiskMinFree::Kind::kOff, 0, 0}, 10 * kDiskGiB), 0u);
}

TEST(DiskWatch, BelowTheLevelIsPressureAndTheReasonSaysWhatIsShort) {
  const protocol::DiskReport ok =
      JudgeDisk("/s", Usage(100 * kDiskGiB, 2 * kDiskGiB), {}, false, 7);
  EXPECT_FALSE(ok.pressure);
  EXPECT_TRUE(ok.reason.empty());
  EXPECT_EQ(ok.at_ms, 7);
  EXPECT_EQ(ok.path, "/s");
  EXPECT_EQ(ok.free_bytes, 2 * kDiskGiB);
  EXPECT_EQ(ok.total_bytes, 100 * kDiskGiB);
  const protocol::DiskReport low =
      JudgeDisk("/s", Usage(100 * kDiskGiB, 120 * kDiskMiB), {}, false, 7);
  EXPECT_TRUE(low.pressure);
  EXPECT_EQ(low.reason,
            "/s has 120 MiB free of 100 GiB, below the agent's --disk-min-free of 1 GiB (the "
            "default: 1 GiB or 5% of the filesystem, the smaller)");
  const protocol::DiskReport pct =
      JudgeDisk("/s", Usage(10 * kDiskGiB, 900 * kDiskMiB), Percent(10), false, 7);
  EXPECT_TRUE(pct.pressure);
  EXPECT_NE(pct.reason.find("--disk-min-free of 10% (1 GiB)"), std::string::npos) << pct.reason;
  EXPECT_FALSE(
      JudgeDisk("/s", Usage(10 * kDiskGiB, 900 * kDiskMiB), Bytes(800 * kDiskMiB), false, 7)
          .pressure);
  EXPECT_FALSE(
      JudgeDisk("/s", Usage(10 * kDiskGiB, 0), {DiskMinFree::Kind::kOff, 0, 0}, false, 7).pressure);
}

TEST(DiskWatch, TooFewInodesIsPressureWhereTheFilesystemCountsThem) {
  const protocol::DiskReport r =
      JudgeDisk("/s", Usage(100 * kDiskGiB, 50 * kDiskGiB, 1'000'000, 9'999), {}, false, 0);
  EXPECT_TRUE(r.pressure);
  EXPECT_EQ(r.reason, "/s has 9999 free inodes of 1000000, below 1%");
  EXPECT_FALSE(JudgeDisk("/s", Usage(100 * kDiskGiB, 50 * kDiskGiB, 0, 0), {}, false, 0).pressure)
      << "a filesystem that counts no inodes (btrfs) is judged by its bytes";
}

// A filesystem that went read-only (ext4's errors=remount-ro) cannot take a job's files
// whatever its room: pressure too, even with the watch's level off.
TEST(DiskWatch, AReadOnlyFilesystemIsPressure) {
  DiskUsage u = Usage(100 * kDiskGiB, 50 * kDiskGiB);
  u.read_only = true;
  const protocol::DiskReport r = JudgeDisk("/s", u, {}, false, 0);
  EXPECT_TRUE(r.pressure);
  EXPECT_EQ(r.reason, "/s is on a read-only filesystem (remounted after errors?)");
  EXPECT_FALSE(JudgeDisk("/s", u, {DiskMinFree::Kind::kOff, 0, 0}, false, 0).pressure)
      << "off is off";
}

// Pressure ends only a quarter above the level, so that a disk hovering at it does not
// drain and resume the node at every check.
TEST(DiskWatch, PressureEndsAQuarterAboveTheLevel) {
  const DiskMinFree min = Bytes(kDiskGiB);
  const DiskUsage at_level = Usage(100 * kDiskGiB, kDiskGiB + 100 * kDiskMiB);
  EXPECT_FALSE(JudgeDisk("/s", at_level, min, /*was_under=*/false, 0).pressure);
  const protocol::DiskReport still = JudgeDisk("/s", at_level, min, /*was_under=*/true, 0);
  EXPECT_TRUE(still.pressure);
  EXPECT_NE(still.reason.find("and a quarter more"), std::string::npos) << still.reason;
  EXPECT_FALSE(
      JudgeDisk("/s", Usage(100 * kDiskGiB, kDiskGiB + 256 * kDiskMiB), min, true, 0).pressure);
  EXPECT_TRUE(JudgeDisk("/s", Usage(100 * kDiskGiB, 50 * kDiskGiB, 1'000'000, 11'000), min, true, 0)
                  .pressure);
  EXPECT_FALSE(
      JudgeDisk("/s", Usage(100 * kDiskGiB, 50 * kDiskGiB, 1'000'000, 12'500), min, true, 0)
          .pressure);
}

TEST(DiskWatch, ReadsARealFilesystemAndNamesAPathItCannotRead) {
  Result<DiskUsage> u = ReadDiskUsage(std::filesystem::temp_directory_path().string());
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_GT(u->total_bytes, 0u);
  EXPECT_LE(u->free_bytes, u->total_bytes);
  Result<DiskUsage> missing = ReadDiskUsage("/nonexistent/gpupool-disk-watch");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/gpupool-disk-watch"), std::string::npos);
}

TEST(DiskWatch, BytesForPeople) {
  EXPECT_EQ(BytesForPeople(512), "512 B");
  EXPECT_EQ(BytesForPeople(120 * kDiskMiB), "120 MiB");
  EXPECT_EQ(BytesForPeople(kDiskGiB + kDiskGiB / 2), "1.5 GiB");
  EXPECT_EQ(BytesForPeople(4 * kDiskMiB / 20), "205 KiB");
  EXPECT_EQ(BytesForPeople(3 * kDiskMiB / 2), "1.5 MiB");
}

}  // namespace
}  // namespace gpupool::agent
