// Time-driven runs on clusters with MIG layouts (`--cluster ...:mig=LAYOUT`): a share is
// granted the smallest idle instance that fits it, a whole-GPU job never lands on a GPU
// in MIG mode, and the spec's errors name the bad profile.
#include <gtest/gtest.h>

#include <map>

#include "sim/timed/cluster_spec.h"
#include "sim/timed/timed_experiment.h"
#include "sim/timed/timed_test_util.h"

namespace gpupool::sim {
namespace {

using testing::TJob;

TraceJob MigShare(std::string id, int64_t submit, int64_t duration, int milli,
                  int64_t gpu_memory_mib = 0) {
  TraceJob j = TJob(std::move(id), "u", submit, duration, 1);
  j.tasks[0].gpu_milli = milli;
  j.tasks[0].gpu_memory_mib = gpu_memory_mib;
  return j;
}

std::map<std::string, JobRecord> RunOn(const std::string& spec, const std::vector<TraceJob>& jobs,
                                       const std::string& queue = "fifo") {
  TimedOptions o;  // the production default placement policy
  o.queue_policy = queue;
  auto run = RunTimedExperiment(testing::Cluster(spec), jobs, o);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  std::map<std::string, JobRecord> m;
  for (const JobRecord& j : run->jobs) m[j.id] = j;
  return m;
}

TEST(MigSimTest, ClusterSpecCutsGpusIntoInstances) {
  auto nodes = ParseClusterSpec("2x2:A100:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb,1x4:V100");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 3u);
  EXPECT_EQ((*nodes)[0].num_gpus, 8);
  EXPECT_EQ((*nodes)[0].whole_only_gpus, 0xffu);
  EXPECT_EQ((*nodes)[0].cpu_milli, 16000);  // per GPU, not per instance
  EXPECT_EQ((*nodes)[0].gpu_memory_mib, 81920);
  EXPECT_EQ((*nodes)[2].whole_only_gpus, 0u);
  auto bad = ParseClusterSpec("2x2:A100:mig=3g.40gb+5g.50gb");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'5g.50gb' is not a MIG profile"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("[:mig=LAYOUT]"), std::string::npos);
  bad = ParseClusterSpec("1x10:A100:mig=1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("70 devices"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParseClusterSpec("2x0:A100:mig=7g.80gb").ok());
}

TEST(MigSimTest, SharesTakeTheSmallestInstanceThatFits) {
  // One 80 GB GPU as 3g.40gb + 2g.20gb + 1g.10gb + 1g.10gb. In queue order: 36 GiB (the
  // 3g), then 8 GiB twice (the two 1g), then 16 GiB (the 2g): all four start at once only
  // because each small share took the smallest instance it fits. A fifth share waits for
  // the first instance to come free, even though it would fit a "0.1 GPU" of any of them.
  std::vector<TraceJob> jobs = {MigShare("big", 0, 100, 450),
                                MigShare("s1", 0, 100, 100),
                                MigShare("s2", 0, 100, 100),
                                MigShare("mid", 0, 50, 500, 16 * 1024),  // asks memory, not 40 GiB
                                MigShare("late", 0, 10, 100),
                                MigShare("huge", 0, 10, 600)};  // 48 GiB: no instance holds it
  auto j = RunOn("1x1:A100:mig=3g.40gb+2g.20gb+1g.10gb+1g.10gb", jobs);
  EXPECT_EQ(j["big"].start_s, 0);
  EXPECT_EQ(j["s1"].start_s, 0);
  EXPECT_EQ(j["s2"].start_s, 0);
  EXPECT_EQ(j["mid"].start_s, 0);
  EXPECT_EQ(j["late"].start_s, 50);  // on the 2g.20gb that "mid" held
  // A share asks for its share of the GPU's 80 GB: 0.6 is 48 GiB, more than any instance.
  EXPECT_EQ(j["huge"].fate, JobFate::kNeverFits);
  EXPECT_NE(j["huge"].reason.find("MIG"), std::string::npos) << j["huge"].reason;
}

TEST(MigSimTest, WholeGpuJobsNeverLandOnMigGpus) {
  // Node 0: one GPU in MIG mode; node 1: one plain GPU. Two 1-GPU jobs: the second waits
  // for the plain GPU although the MIG GPU is idle; a 2-GPU job never fits (and is never
  // queued). The share, queued before the second, takes an instance at once.
  std::vector<TraceJob> jobs = {TJob("w1", "u", 0, 100, 1), MigShare("s", 0, 30, 250),
                                TJob("w2", "u", 0, 100, 1), TJob("w3", "u", 0, 100, 2)};
  auto j = RunOn("1x1:A100:mig=4g.40gb+3g.40gb,1x1:A100", jobs);
  EXPECT_EQ(j["w1"].start_s, 0);
  EXPECT_EQ(j["w2"].start_s, 100);
  EXPECT_EQ(j["w3"].fate, JobFate::kNeverFits);
  EXPECT_EQ(j["s"].start_s, 0);
}

// The fair queue charges a job on an instance the instance (docs/sharing.md, "MIG
// instances"), as the live controller does: "m" holds all seven 1g.10gb instances of one
// GPU with 1-thousandth asks, 0.875 GPU as charged; "p" holds 0.05 of the plain GPU (CPU
// and memory asks too small to count). When both wait for the 0.95 left there, p's job
// goes first although m's came first (charged the asks, 0.007 against 0.05, m's went).
TEST(MigSimTest, TheFairQueueChargesAJobOnAnInstanceTheInstance) {
  auto job = [](std::string id, std::string user, int64_t submit, int64_t duration, int milli,
                int64_t gpu_memory_mib) {
    TraceJob j = MigShare(std::move(id), submit, duration, milli, gpu_memory_mib);
    j.user = j.project = std::move(user);
    j.tasks[0].cpu_milli = 10;
    j.tasks[0].memory_mib = 10;
    return j;
  };
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 7; ++i) jobs.push_back(job("m" + std::to_string(i), "m", 0, 1000, 1, 0));
  jobs.push_back(job("p", "p", 1, 1000, 50, 20 * 1024));  // only the plain GPU holds 20 GiB
  jobs.push_back(job("mx", "m", 10, 100, 950, 20 * 1024));
  jobs.push_back(job("px", "p", 10, 100, 950, 20 * 1024));
  auto j = RunOn("1x1:A100:mig=1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb+1g.10gb,1x1:A100",
                 jobs, "fair");
  for (int i = 0; i < 7; ++i) EXPECT_EQ(j["m" + std::to_string(i)].start_s, 0) << i;
  EXPECT_EQ(j["p"].start_s, 1);
  EXPECT_EQ(j["px"].start_s, 10);
  EXPECT_EQ(j["mx"].start_s, 110);
}

}  // namespace
}  // namespace gpupool::sim
