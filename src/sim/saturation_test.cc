// The saturation experiment: curves, determinism, never-placeable tasks, and a reduced
// run of the published campaign that must stay inside the published band.
#include "sim/saturation.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/strings.h"
#include "sim/campaign.h"
#include "sim/curves.h"
#include "sim/mig_layout.h"
#include "sim/openb_reader.h"
#include "sim/result_files.h"

namespace gpupool::sim {
namespace {

TEST(SaturationMigTest, InstancesCountByTheirPartOfTheGpu) {
  // One 80 GB GPU in MIG mode: 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb. In any order (the
  // seed shuffles the tasks), a 0.1 share (8 GiB) takes a 1g.10gb (0.125 of the GPU), a
  // 0.2 share (16 GiB) the 2g.20gb (0.25), a 0.3 share (24 GiB) the 3g.40gb (0.5); a
  // whole GPU and a 0.6 share (48 GiB) can never be placed.
  sched::NodeSpec mig{"a-mig", 64000, 262144, 1, "A100", 0, 80};
  ASSERT_TRUE(ApplyMigLayout(*ParseMigLayout("3g.40gb+2g.20gb+1g.10gb+1g.10gb"), mig).ok());
  std::vector<sched::Task> tasks = {{"t1", "", 1000, 0, 1, 100, {}, 0},
                                    {"t2", "", 1000, 0, 1, 300, {}, 0},
                                    {"t3", "", 1000, 0, 1, 1000, {}, 0},
                                    {"t5", "", 1000, 0, 1, 600, {}, 0},
                                    {"t6", "", 1000, 0, 1, 200, {}, 0}};
  auto in = SaturationInputs::Prepare({mig}, tasks);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->capacity_gpu_milli, 1000);  // one GPU, not four devices
  for (uint64_t seed : {1, 2, 3}) {
    auto r = RunSaturation(*in, SaturationRun{"default", seed, 0.0, nullptr});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->placed, 3);
    EXPECT_EQ(r->failed_whole, 1);
    EXPECT_EQ(r->failed_shares, 1);
    EXPECT_EQ(r->never_placeable, 2);
    EXPECT_EQ(r->used_gpu_milli, 125 + 250 + 500);
    EXPECT_EQ(r->placed_gpu_milli, 100 + 200 + 300);
    EXPECT_DOUBLE_EQ(r->AllocatedPctAtEnd(), 87.5);
  }
}

TEST(CurvesTest, RoundHalfEvenLikePython) {
  EXPECT_EQ(RoundHalfEven(5, 10), 0);   // 0.5 -> 0
  EXPECT_EQ(RoundHalfEven(15, 10), 2);  // 1.5 -> 2
  EXPECT_EQ(RoundHalfEven(25, 10), 2);  // 2.5 -> 2
  EXPECT_EQ(RoundHalfEven(26, 10), 3);
  EXPECT_EQ(RoundHalfEven(24, 10), 2);
}

TEST(CurvesTest, BinsAndNeighbourFallback) {
  CurveAccumulator acc(1000);       // one GPU
  acc.Record(0, 0, 0.0, 1000);      // bin 0
  acc.Record(100, 100, 0.0, 900);   // bin 10
  acc.Record(300, 120, 50.0, 700);  // bin 12
  auto c = acc.Finish();
  EXPECT_DOUBLE_EQ(c.alloc[0], 0.0);
  EXPECT_DOUBLE_EQ(c.alloc[10], 10.0);
  EXPECT_DOUBLE_EQ(c.alloc[11], 20.0);  // empty: mean of bins 10 and 12
  EXPECT_DOUBLE_EQ(c.alloc[12], 30.0);
  EXPECT_DOUBLE_EQ(c.frag[12], 5.0);
  EXPECT_NEAR(c.frag_ratio[12], 100.0 * 50.0 / 700.0, 1e-9);
  EXPECT_TRUE(std::isnan(c.alloc[50]));
  EXPECT_EQ(FormatCurveValue(c.alloc[50]), "");
}

TEST(CampaignTest, SeedLists) {
  EXPECT_EQ(*ParseSeedList("42-44"), (std::vector<uint64_t>{42, 43, 44}));
  EXPECT_EQ(*ParseSeedList("1,5-6"), (std::vector<uint64_t>{1, 5, 6}));
  EXPECT_FALSE(ParseSeedList("9-1").ok());
  EXPECT_FALSE(ParseSeedList("x").ok());
  EXPECT_FALSE(ParseSeedList("").ok());
}

// A small synthetic trace: 6 nodes, mixed tasks, one task that no node can ever host.
SaturationInputs SmallInputs() {
  std::vector<sched::NodeSpec> nodes;
  for (int i = 0; i < 6; ++i) {
    nodes.push_back({fmt::format("n{}", i), 32000, 65536, i % 2 ? 8 : 2, i % 3 ? "T4" : "V100"});
  }
  std::vector<sched::Task> tasks;
  const int32_t shares[] = {1000, 500, 250, 1000, 300, 1000};
  for (int i = 0; i < 24; ++i) {
    sched::Task t{fmt::format("t{}", 100 + i), "", 2000, 1024, 1, shares[i % 6], {}, 0};
    if (i % 7 == 0) t.num_gpu = 0, t.gpu_milli = 0;
    if (i % 5 == 0 && t.gpu_milli == 1000) t.num_gpu = 2;
    tasks.push_back(t);
  }
  tasks.push_back({"too-big", "", 1000, 1024, 16, 1000, {}, 0});
  auto in = SaturationInputs::Prepare(std::move(nodes), std::move(tasks));
  EXPECT_TRUE(in.ok());
  return std::move(in).value();
}

TEST(SaturationTest, SameSeedSameBytesDifferentSeedDifferentOrder) {
  SaturationInputs in = SmallInputs();
  for (const char* policy : {"random", "bestfit", "fgd", "default"}) {
    CampaignSpec spec{{policy}, {1, 2}, 1.3, 2, nullptr};
    auto a = RunCampaign(in, spec);
    spec.jobs = 1;
    auto b = RunCampaign(in, spec);
    ASSERT_TRUE(a.ok() && b.ok());
    auto fa = FormatResultFiles("w", 1.3, 28, *a);
    auto fb = FormatResultFiles("w", 1.3, 28, *b);
    EXPECT_EQ(fa.allo, fb.allo) << policy;
    EXPECT_EQ(fa.frag, fb.frag) << policy;
    EXPECT_EQ(fa.frag_ratio, fb.frag_ratio) << policy;
    EXPECT_GE((*a)[0].never_placeable, 1) << policy;
  }
  auto w1 = BuildWorkload(in, 1, 1.3);
  auto w2 = BuildWorkload(in, 2, 1.3);
  EXPECT_NE(w1.order, w2.order);
  // Tuning appends copies up to 1.3x capacity (28 GPUs).
  int64_t total = 0;
  for (const auto* t : w1.order) total += t->TotalGpuMilli();
  EXPECT_LE(total, static_cast<int64_t>(1.3 * 28000) + 16000);
  EXPECT_GT(w1.order.size(), in.tasks.size());
}

TEST(SaturationTest, ResultFilesHaveThePublishedColumns) {
  SaturationInputs in = SmallInputs();
  auto r = RunCampaign(in, {{"fgd"}, {42}, 1.3, 1, nullptr});
  ASSERT_TRUE(r.ok());
  auto files = FormatResultFiles("openb_pod_list_x", 1.3, 28, *r);
  const std::string first = files.allo.substr(0, files.allo.find('\n'));
  EXPECT_EQ(Split(first, ',').size(), 136u);
  EXPECT_EQ(first.substr(0, 42), "workload,sc_policy,tune,seed,total_gpus,0,");
  EXPECT_NE(files.allo.find("\nopenb_pod_list_x,06-FGD,1.3,42,28,"), std::string::npos);
  const std::string dir = testing::TempDir() + "/gpupool_sat_files";
  ASSERT_TRUE(WriteResultFiles(dir, files).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/frag_ratio.csv"));
  EXPECT_FALSE(WriteResultFiles("/proc/gpupool-cannot-write", files).ok());
}

}  // namespace
}  // namespace gpupool::sim
