#include "agent/cu_mask.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

TEST(CuMaskTest, ShareGetsItsPartRoundedDownAtLeastOne) {
  EXPECT_EQ(CuCountForShare(304, 250), 76);  // MI300X: 304 CUs
  EXPECT_EQ(CuCountForShare(38, 333), 12);   // one CPX partition: 38 CUs
  EXPECT_EQ(CuCountForShare(38, 1), 1);
  EXPECT_EQ(CuCountForShare(38, 1000), 38);
  EXPECT_EQ(CuCountForShare(0, 500), 0);
}

TEST(CuMaskTest, ListsRoundTripAndBadPartsAreSkipped) {
  EXPECT_EQ(FormatCuList({3, 0, 1, 2, 7, 9, 8, 8}), "0-3,7-9");
  EXPECT_EQ(FormatCuList({}), "");
  EXPECT_EQ(ParseCuList("0-3,7-9", 304), (std::vector<int>{0, 1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(ParseCuList("x,2,-1,5-a,300-310", 302), (std::vector<int>{2, 300, 301}));
}

// Shares on one GPU get disjoint CUs while the GPU has them, lowest free first.
TEST(CuMaskTest, SharesOfOneGpuGetDisjointCus) {
  CuChoice a = ChooseCus(304, 250, {});
  EXPECT_EQ(a.list, "0-75");
  EXPECT_FALSE(a.overlapping);
  CuChoice b = ChooseCus(304, 500, {a.list});
  EXPECT_EQ(b.list, "76-227");
  CuChoice c = ChooseCus(304, 250, {b.list});  // a ended: its CUs are free again
  EXPECT_EQ(c.list, "0-75");
  CuChoice d = ChooseCus(304, 250, {a.list, b.list});
  EXPECT_EQ(d.list, "228-303");
  EXPECT_FALSE(d.overlapping);
  // Fragmented free CUs still make a disjoint mask.
  CuChoice e = ChooseCus(10, 400, {"2-4,7-9"});
  EXPECT_EQ(e.list, "0-1,5-6");
  EXPECT_FALSE(e.overlapping);
}

TEST(CuMaskTest, TooFewFreeCusOverlapAndSaySo) {
  CuChoice full = ChooseCus(38, 500, {"0-30"});
  EXPECT_TRUE(full.overlapping);
  EXPECT_EQ(ParseCuList(full.list, 38).size(), 19u);
  EXPECT_EQ(full.list, "0-11,31-37");
  EXPECT_EQ(ChooseCus(0, 500, {}).list, "");
}

}  // namespace
}  // namespace gpupool::agent
