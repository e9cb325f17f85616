#include "gpu/sysfs/cpu_topology_reader.h"

#include <gtest/gtest.h>

#include "gpu/sysfs/fake_sysfs_tree.h"

namespace gpupool::gpu {
namespace {

using testing::FakeSysfsTree;
using FakeCpu = FakeSysfsTree::FakeCpu;

// 2 sockets x 2 cores x 2 threads, Linux numbering (CPU c and c + 4 share a core), one
// L3 per socket, one NUMA node per socket.
std::vector<FakeCpu> SmallServer() {
  std::vector<FakeCpu> cpus;
  for (int thread = 0; thread < 2; ++thread) {
    for (int c = 0; c < 4; ++c) {
      FakeCpu cpu;
      cpu.package = c / 2;
      cpu.core = c % 2;
      cpu.cluster = c % 2;
      cpu.l3 = 0;
      cpu.numa = c / 2;
      cpus.push_back(cpu);
    }
  }
  return cpus;
}

TEST(CpuTopologyReaderTest, ReadsCoresPackagesAndTheGroupsThatOrderThem) {
  FakeSysfsTree tree;
  tree.AddCpus(SmallServer());
  Result<CpuTopology> t = ReadCpuTopology(tree.root());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  using Sets = std::vector<std::vector<int>>;
  EXPECT_EQ(t->cores, (Sets{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(t->packages, (Sets{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  // Dies, L3 caches and NUMA nodes equal the packages and clusters the cores here; each
  // set is kept once. L1 caches are not read.
  EXPECT_EQ(t->groups, (Sets{{0, 1, 4, 5}, {0, 4}, {1, 5}, {2, 3, 6, 7}, {2, 6}, {3, 7}}));

  auto n = SlurmCoreNumbering::Of(*t);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n->CoresOf("2-3,6-7"), "2-3");
}

TEST(CpuTopologyReaderTest, OfflineCpusAreLeftOut) {
  FakeSysfsTree tree;
  tree.AddCpus(SmallServer());
  tree.Write("devices/system/cpu/online", "0-3,5-6\n");
  Result<CpuTopology> t = ReadCpuTopology(tree.root());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->cores, (std::vector<std::vector<int>>{{0}, {1, 5}, {2, 6}, {3}}));
  EXPECT_EQ(t->packages, (std::vector<std::vector<int>>{{0, 1, 5}, {2, 3, 6}}));
}

TEST(CpuTopologyReaderTest, OlderKernelsThreadAndCoreSiblingLists) {
  FakeSysfsTree tree;
  tree.Write("devices/system/cpu/online", "0-1\n");
  for (const char* cpu : {"cpu0", "cpu1"}) {
    const std::string topo = std::string("devices/system/cpu/") + cpu + "/topology/";
    tree.Write(topo + "thread_siblings_list", "0-1\n");
    tree.Write(topo + "core_siblings_list", "0-1\n");
  }
  Result<CpuTopology> t = ReadCpuTopology(tree.root());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->cores, (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_EQ(t->packages, (std::vector<std::vector<int>>{{0, 1}}));
  EXPECT_TRUE(t->groups.empty());
}

TEST(CpuTopologyReaderTest, MissingOrGarbledFilesAreErrors) {
  FakeSysfsTree tree;
  Result<CpuTopology> t = ReadCpuTopology(tree.root());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("devices/system/cpu/online"), std::string::npos);

  tree.AddCpus(SmallServer());
  tree.Write("devices/system/cpu/cpu3/topology/core_cpus_list", "3-1\n");
  t = ReadCpuTopology(tree.root());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("cpu3/topology/core_cpus_list: '3-1' is not a CPU list"),
            std::string::npos)
      << t.status().message();

  tree.Write("devices/system/cpu/cpu3/topology/core_cpus_list", "1\n");
  t = ReadCpuTopology(tree.root());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("CPU 3 is not in its own core or package list"),
            std::string::npos)
      << t.status().message();

  std::filesystem::remove_all(tree.Path("devices/system/cpu/cpu3/topology"));
  t = ReadCpuTopology(tree.root());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("which core"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace gpupool::gpu
