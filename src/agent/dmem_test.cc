// The dmem controller's files against a fake cgroup tree (the real one needs Linux 6.14+,
// cgroup v2 and a driver that registers its VRAM).
#include "agent/dmem.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "agent/cgroup.h"
#include "common/file_util.h"

namespace gpupool::agent {
namespace {

TEST(DmemTest, CapacityListsRegionsAndAGpuFindsItsVram) {
  const std::vector<DmemRegion> regions = ParseDmemCapacity(
      "drm/0000:03:00.0/vram0 17163091968\n"
      "drm/0000:03:00.0/gtt 1024\n"
      "bad line\n"
      "drm/0000:3B:00.0/vram0 85899345920\r\n"
      " 12\n"
      "drm/0000:04:00.0/vram0 x12\n"
      "drm/0000:05:00.0/vram0 123456789012345678901234\n");
  ASSERT_EQ(regions.size(), 3u);
  EXPECT_EQ(regions[0].name, "drm/0000:03:00.0/vram0");
  EXPECT_EQ(regions[0].capacity, 17163091968u);
  EXPECT_EQ(regions[2].capacity, 85899345920u);
  EXPECT_EQ(DmemRegionOf(regions, "0000:03:00.0"), "drm/0000:03:00.0/vram0");
  EXPECT_EQ(DmemRegionOf(regions, "0000:3b:00.0"), "drm/0000:3B:00.0/vram0");  // any case
  EXPECT_EQ(DmemRegionOf(regions, "0000:04:00.0"), "");
  EXPECT_EQ(DmemRegionOf(regions, ""), "");
  EXPECT_TRUE(ParseDmemCapacity("").empty());
}

TEST(DmemTest, ALimitEnablesTheControllerAndCapsAndProtectsTheLeaf) {
  char tmpl[] = "/tmp/gpupool-dmem-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  const std::string leaf = root + "/gpupool/job-1-0.1-7";
  std::filesystem::create_directories(leaf);
  for (const std::string& f :
       {root + "/cgroup.subtree_control", root + "/gpupool/cgroup.subtree_control",
        leaf + "/dmem.max", leaf + "/dmem.low"}) {
    std::ofstream(f).put('\n');
  }
  ASSERT_TRUE(ApplyDmemLimit(root, leaf, "drm/0000:03:00.0/vram0", 2147483648).ok());
  EXPECT_EQ(ReadFileToString(root + "/cgroup.subtree_control").value_or(""), "+dmem");
  EXPECT_EQ(ReadFileToString(root + "/gpupool/cgroup.subtree_control").value_or(""), "+dmem");
  EXPECT_EQ(ReadFileToString(leaf + "/dmem.max").value_or(""), "drm/0000:03:00.0/vram0 2147483648");
  EXPECT_EQ(ReadFileToString(leaf + "/dmem.low").value_or(""), "drm/0000:03:00.0/vram0 2147483648");
  // A region name that would write a second line is refused; a missing file is named.
  EXPECT_FALSE(ApplyDmemLimit(root, leaf, "drm/x\nother 1", 1).ok());
  std::filesystem::remove(leaf + "/dmem.max");
  Status st = ApplyDmemLimit(root, leaf, "drm/0000:03:00.0/vram0", 1);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(leaf + "/dmem.max"), std::string::npos) << st.ToString();
  std::filesystem::remove_all(root);
}

// A dmem limit that cannot be set is never silently dropped: the cgroup says it is not
// in place (the shim then refuses to start the share).
TEST(DmemTest, ACgroupWithoutTheLimitSaysSo) {
  CgroupRequest req;
  req.id = RunId{5, 0, 1, 0};
  req.dmem_region = "drm/0000:03:00.0/vram0";
  req.dmem_bytes = 1 << 30;
  std::unique_ptr<JobCgroup> off = JobCgroup::Create("", req);
  EXPECT_FALSE(off->dmem_enforced());
  std::unique_ptr<JobCgroup> nowhere = JobCgroup::Create("/nonexistent-cgroup-root", req);
  EXPECT_FALSE(nowhere->dmem_enforced());
  req.dmem_region.clear();
  EXPECT_TRUE(JobCgroup::Create("", req)->dmem_enforced());
}

}  // namespace
}  // namespace gpupool::agent
