#include "gpu/cpu_topology.h"

#include <gtest/gtest.h>

namespace gpupool::gpu {
namespace {

std::vector<int> CoresOfEachCpu(const SlurmCoreNumbering& n, int cpus) {
  std::vector<int> out;
  for (int c = 0; c < cpus; ++c) out.push_back(n.CoreOf(c));
  return out;
}

TEST(CpuListTest, ParsesAndFormatsKernelCpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5,1-2,2"), (std::vector<int>{1, 2, 5}));
  EXPECT_EQ(ParseCpuList(""), std::vector<int>{});
  EXPECT_EQ(ParseCpuList("3-1"), std::nullopt);
  EXPECT_EQ(ParseCpuList("0-"), std::nullopt);
  EXPECT_EQ(ParseCpuList("a"), std::nullopt);
  EXPECT_EQ(ParseCpuList("-1"), std::nullopt);
  EXPECT_EQ(ParseCpuList("0,,1"), std::nullopt);
  EXPECT_EQ(ParseCpuList("0-99999999999"), std::nullopt);
  EXPECT_EQ(ParseCpuList("8191")->size(), 1u);
  EXPECT_EQ(ParseCpuList("8192"), std::nullopt);
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(FormatCpuList({}), "");
  EXPECT_EQ(FormatCpuList({7}), "7");
}

// Linux numbering on most x86 servers: CPU c and c + 8 are the two threads of one core;
// cores 0-3 on socket 0. Slurm counts the cores, so CPU 9 is core 1, not "9".
TEST(SlurmCoreNumberingTest, HyperThreadsShareTheirCoresNumber) {
  CpuTopology t;
  for (int c = 0; c < 8; ++c) t.cores.push_back({c, c + 8});
  t.packages = {{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}};
  auto n = SlurmCoreNumbering::Of(t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(CoresOfEachCpu(*n, 17),
            (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, -1}));
  EXPECT_EQ(*n->CoresOf("0-3,8-11"), "0-3");
  EXPECT_EQ(*n->CoresOf("12"), "4");
  EXPECT_EQ(*n->CoresOf("15,99"), "7");  // 99 is not online: skipped
  EXPECT_EQ(*n->CoresOf("99"), "");
  EXPECT_FALSE(n->CoresOf("x").ok());
  EXPECT_EQ(n->SlurmConfLayout(),
            "CPUs=16 Boards=1 SocketsPerBoard=2 CoresPerSocket=4 ThreadsPerCore=2");
}

// Some machines number CPUs round-robin over sockets: socket 0 holds the even CPUs.
// Slurm still counts socket 0's cores first.
TEST(SlurmCoreNumberingTest, SocketsComeFirstWhateverTheKernelNumbering) {
  CpuTopology t;
  for (int c = 0; c < 8; ++c) t.cores.push_back({c});
  t.packages = {{1, 3, 5, 7}, {0, 2, 4, 6}};  // order of the sets does not matter
  auto n = SlurmCoreNumbering::Of(t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(CoresOfEachCpu(*n, 8), (std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(*n->CoresOf("0,2,4,6"), "0-3");
}

// Inside a package hwloc walks its tree depth first: the cores under one L3 cache (or
// die, NUMA node, cluster) before the next one's, whatever their CPU ids.
TEST(SlurmCoreNumberingTest, CoresUnderOneCacheAreNumberedTogether) {
  CpuTopology t;
  for (int c = 0; c < 4; ++c) t.cores.push_back({c});
  t.packages = {{0, 1, 2, 3}};
  t.groups = {{0, 2}, {1, 3}};
  auto n = SlurmCoreNumbering::Of(t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(CoresOfEachCpu(*n, 4), (std::vector<int>{0, 2, 1, 3}));
}

// The order follows containment, not which kind of set came first: an L3 cache holding
// two dies orders the dies inside it.
TEST(SlurmCoreNumberingTest, NestedGroupsOrderByTheOuterOneFirst) {
  CpuTopology t;
  for (int c = 0; c < 8; ++c) t.cores.push_back({c});
  t.packages = {{0, 1, 2, 3, 4, 5, 6, 7}};
  // Two L3 caches {0,5,6,7} and {1,2,3,4}, each holding two dies.
  t.groups = {{6, 7}, {1, 2}, {0, 5, 6, 7}, {3, 4}, {1, 2, 3, 4}, {0, 5}};
  auto n = SlurmCoreNumbering::Of(t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(CoresOfEachCpu(*n, 8), (std::vector<int>{0, 4, 5, 6, 7, 1, 2, 3}));
}

TEST(SlurmCoreNumberingTest, GroupsEqualToAPackageOrCoreChangeNothing) {
  CpuTopology t;
  t.cores = {{0, 2}, {1, 3}};
  t.packages = {{0, 1, 2, 3}};
  t.groups = {{0, 1, 2, 3}, {0, 2}, {1, 3}, {0, 1, 2, 3, 4, 5}};
  auto n = SlurmCoreNumbering::Of(t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(CoresOfEachCpu(*n, 4), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(n->SlurmConfLayout(),
            "CPUs=4 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=2");
}

TEST(SlurmCoreNumberingTest, BrokenTopologiesAreErrorsNotCrashes) {
  auto error = [](std::vector<std::vector<int>> packages, std::vector<std::vector<int>> cores,
                  std::vector<std::vector<int>> groups = {}) {
    auto n = SlurmCoreNumbering::Of({std::move(packages), std::move(cores), std::move(groups)});
    EXPECT_FALSE(n.ok());
    return n.ok() ? "" : n.status().message();
  };
  EXPECT_EQ(error({{0}}, {}), "the CPU topology has no cores");
  EXPECT_EQ(error({{0}}, {{0}, {1}}), "core '1' is in no package");
  EXPECT_EQ(error({{0, 1, 2}}, {{0, 1}, {1, 2}}), "CPU 1 is in two cores");
  EXPECT_EQ(error({{0, 1}, {1}}, {{0}, {1}}), "CPU 1 is in two packages");
  EXPECT_EQ(error({{0}, {1}}, {{0, 1}}), "core '0-1' spans two packages");
  EXPECT_EQ(error({{0, 1}}, {{1, 0}}), "core '1,0' is not a sorted, non-empty set of CPU ids");
  EXPECT_EQ(error({{0}}, {{0}}, {{}}), "CPU group '' is not a sorted, non-empty set of CPU ids");
  EXPECT_EQ(error({{0}}, {{-1}}), "core '-1' is not a sorted, non-empty set of CPU ids");
}

}  // namespace
}  // namespace gpupool::gpu
