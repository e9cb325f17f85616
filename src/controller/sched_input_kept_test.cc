// The cluster kept between passes (KeptCluster) against a cluster built from scratch,
// after random changes to jobs and nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "controller/sched_input.h"

namespace gpupool::controller {
namespace {

gpu::NodeInfo KeptTestNode(const std::string& host, int gpus, const std::string& enforcement,
                           uint64_t gib = 80) {
  gpu::NodeInfo n;
  n.hostname = host;
  for (int i = 0; i < gpus; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = host + "-GPU-" + std::to_string(i);
    g.memory_total_bytes = gib << 30;
    g.enforcement = enforcement;
    n.gpus.push_back(g);
  }
  return n;
}

// A pool whose nodes and jobs change at random; each step compares the kept cluster
// with one built from the same jobs.
class KeptClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    infos_["a"] = KeptTestNode("a", 4, "none");
    infos_["b"] = KeptTestNode("b", 4, "");
    infos_["m"] = KeptTestNode("m", 2, "mps");  // single-owner GPUs
    infos_["c"] = KeptTestNode("c", 8, "dmem", 40);
  }

  std::vector<SchedNode> Nodes() const {
    std::vector<SchedNode> out;
    for (const auto& [name, info] : infos_) {
      SchedNode n{name, &info, 1000000, 256000, drain_.count(name) > 0, {}};
      if (name == out_of_service_) n.out_of_service_gpus.push_back({name + "-GPU-1", "cordoned"});
      out.push_back(n);
    }
    return out;
  }

  jobs::Job NewJob(std::mt19937& rng) {
    jobs::Job j;
    j.id = next_id_++;
    j.uid = 1000 + rng() % 3;
    j.user = "u" + std::to_string(j.uid);
    j.request.gpus = 1 + static_cast<int>(rng() % 3 == 0);
    j.request.gpu_milli = rng() % 2 == 0 ? 1000 : 500;
    if (j.request.gpus > 1) j.request.gpu_milli = 1000;
    j.request.cpu_milli = 1000 * (1 + static_cast<int64_t>(rng() % 4));
    j.submit_time_us = j.id * 1'000'000;
    return j;
  }

  // Puts `j` on a random node's GPUs, in service or not: mostly where they are free (for
  // its user on an MPS GPU), sometimes on GPUs already taken (a conflict).
  void Place(jobs::Job& j, std::mt19937& rng) {
    auto it = infos_.begin();
    std::advance(it, rng() % infos_.size());
    const gpu::NodeInfo& info = it->second;
    std::map<std::string, std::pair<int, uint32_t>> used;  // uuid -> milli, a user
    for (const auto& [id, other] : jobs_) {
      if (id == j.id) continue;
      for (const jobs::TaskPlacement& p : other.placement) {
        for (const std::string& uuid : p.gpu_uuids) {
          used[uuid].first += p.gpu_milli;
          used[uuid].second = other.uid;
        }
      }
    }
    const bool conflict = rng() % 30 == 0;
    jobs::TaskPlacement p{it->first, {}, {}, j.request.gpu_milli};
    for (size_t k = rng() % info.gpus.size(), tries = 0;
         static_cast<int>(p.gpu_uuids.size()) < j.request.gpus && tries < 2 * info.gpus.size();
         k = (k + 1) % info.gpus.size(), ++tries) {
      const auto u = used.find(info.gpus[k].uuid);
      const bool taken = u != used.end() && (u->second.first + j.request.gpu_milli > 1000 ||
                                             (it->first == "m" && u->second.second != j.uid));
      if ((taken && !conflict) ||
          std::count(p.gpu_uuids.begin(), p.gpu_uuids.end(), info.gpus[k].uuid) > 0) {
        continue;
      }
      p.gpu_indices.push_back(static_cast<int>(k));
      p.gpu_uuids.push_back(info.gpus[k].uuid);
    }
    if (static_cast<int>(p.gpu_uuids.size()) < j.request.gpus) return;  // no room: stays as is
    j.state = rng() % 2 == 0 ? jobs::JobState::kRunning : jobs::JobState::kAssigned;
    j.start_time_us = j.state == jobs::JobState::kRunning ? j.submit_time_us + 5'000'000 : 0;
    j.placement = {p};
  }

  void Step(std::mt19937& rng) {
    const int what = static_cast<int>(rng() % 20);
    if (what < 6 || jobs_.empty()) {  // a job arrives, pending or placed
      jobs::Job j = NewJob(rng);
      if (rng() % 2 == 0) Place(j, rng);
      jobs_[j.id] = j;
      return;
    }
    auto it = jobs_.begin();
    std::advance(it, rng() % jobs_.size());
    jobs::Job& j = it->second;
    ++j.version;  // as the controller's: a change steps it (harmless when none follows)
    if (what < 10) {
      jobs_.erase(it);  // ends
    } else if (what < 13) {
      Place(j, rng);  // starts or moves
    } else if (what < 14) {
      j.state = jobs::JobState::kPending;  // requeued
      j.placement.clear();
    } else if (what < 15) {
      j.request.cpu_milli += 500;  // converted again
    } else if (what < 16) {
      j.request.gpu_models = {rng() % 2 == 0 ? "H100" : "A100"};  // maybe unplaceable
    } else if (what < 17) {
      const std::string name = rng() % 2 == 0 ? "a" : "b";
      if (drain_.count(name) > 0) {
        drain_.erase(name);
      } else {
        drain_.insert(name);
      }
    } else if (what < 18) {
      out_of_service_ = out_of_service_.empty() ? "a" : "";
    } else if (what < 19) {
      if (infos_.count("d") > 0) {  // a node goes or comes
        infos_.erase("d");
      } else {
        infos_["d"] = KeptTestNode("d", 4, "none");
      }
    } else {
      infos_["b"].gpus[0].memory_total_bytes ^= uint64_t{1} << 30;             // a node changes
      infos_["b"].gpus[1].temperature_celsius = static_cast<int>(rng() % 90);  // telemetry only
    }
  }

  std::map<std::string, gpu::NodeInfo> infos_;
  std::set<std::string> drain_;
  std::string out_of_service_;
  std::map<int64_t, jobs::Job> jobs_;
  int64_t next_id_ = 1;
};

TEST_F(KeptClusterTest, AppliedChangesMakeTheClusterARebuildMakes) {
  std::mt19937 rng(31);
  ConversionCache cache;
  KeptCluster kept;
  size_t kept_passes = 0, built_passes = 0, allocated = 0, occupying = 0;
  for (int step = 0; step < 1500; ++step) {
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) Step(rng);
    const std::vector<SchedNode> nodes = Nodes();
    std::vector<const jobs::Job*> active;
    for (const auto& [id, j] : jobs_) active.push_back(&j);
    SchedInput in(nodes, MpsSharing::kOneUser, &cache, &kept);
    in.AddJobs(active, {});
    SchedInput fresh(nodes);
    fresh.AddJobs(active, {});
    ASSERT_EQ(SchedInput::ClusterDifferences(in.cluster, fresh.cluster), "") << "step " << step;
    ASSERT_EQ(in.running.size(), fresh.running.size()) << "step " << step;
    for (size_t i = 0; i < in.running.size(); ++i) {
      ASSERT_EQ(in.running_source[i], fresh.running_source[i]) << "step " << step;
      ASSERT_EQ(in.running[i].placements, fresh.running[i].placements) << "step " << step;
      ASSERT_EQ(in.running[i].start_s, fresh.running[i].start_s) << "step " << step;
      ASSERT_EQ(in.running[i].job->id, fresh.running[i].job->id) << "step " << step;
    }
    ASSERT_EQ(in.occupying.size(), fresh.occupying.size());
    ASSERT_EQ(in.pending.size(), fresh.pending.size());
    ASSERT_EQ(in.draining, fresh.draining);
    (kept.rebuilt ? built_passes : kept_passes) += 1;
    if (!kept.rebuilt) {
      allocated += kept.allocated;
      occupying += in.occupying.size();
    }
  }
  // Both ways were taken, and a kept pass allocates a few jobs, not all of them.
  EXPECT_GT(kept_passes, 300u);
  EXPECT_GT(built_passes, 50u);
  EXPECT_LT(allocated * 5, occupying);
}

// The rebuild check (SchedInput::KeptDifferences, which Debug builds run after every kept
// pass and abort on) finds nothing over random changes, with an admission feed naming
// some jobs (converted apart from the cache each pass, kept where `jobs_` has room).
TEST_F(KeptClusterTest, TheRebuildCheckFindsNoDifferenceOverChanges) {
  std::mt19937 rng(59);
  ConversionCache cache;
  KeptCluster kept;
  size_t kept_passes = 0, named = 0;
  for (int step = 0; step < 1000; ++step) {
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) Step(rng);
    const std::vector<SchedNode> nodes = Nodes();
    std::vector<const jobs::Job*> active;
    AdmissionFeed feed;
    for (const auto& [id, j] : jobs_) {
      active.push_back(&j);
      if (rng() % 5 == 0) feed.waiting[id] = "job " + std::to_string(id - 1);
      if (rng() % 7 == 0) feed.stopping[id] = {1, "a"};
    }
    named += feed.waiting.size() + feed.stopping.size();
    SchedInput in(nodes, MpsSharing::kOneUser, &cache, &kept);
    in.AddJobs(active, feed);
    ASSERT_EQ(in.KeptDifferences(active, feed), "") << "step " << step;
    if (!kept.rebuilt) ++kept_passes;
  }
  EXPECT_GT(kept_passes, 200u);
  EXPECT_GT(named, 1000u);
}

// The check sees a kept cluster or running job that a rebuild would not make.
TEST_F(KeptClusterTest, TheRebuildCheckFindsADifference) {
  std::mt19937 rng(3);
  ConversionCache cache;
  KeptCluster kept;
  jobs::Job j = NewJob(rng);
  j.request.gpus = 1;
  j.request.gpu_milli = 1000;
  j.state = jobs::JobState::kRunning;
  j.placement = {jobs::TaskPlacement{"a", {0}, {"a-GPU-0"}, 1000}};
  jobs_[j.id] = j;
  const std::vector<SchedNode> nodes = Nodes();
  const std::vector<const jobs::Job*> active = {&jobs_.begin()->second};
  for (int pass = 0; pass < 2; ++pass) {  // built, then kept
    SchedInput in(nodes, MpsSharing::kOneUser, &cache, &kept);
    in.AddJobs(active, {});
    EXPECT_EQ(kept.rebuilt, pass == 0);
    EXPECT_EQ(in.KeptDifferences(active, {}), "");
    ASSERT_EQ(kept.running.size(), 1u);
    const std::vector<sched::Placement> placed = kept.running[0].placements;
    kept.running[0].placements[0].gpus = {1};  // the job's record moved, not the cluster
    EXPECT_EQ(in.KeptDifferences(active, {}), "running job 1 differs");
    kept.running[0].placements = placed;
    sched::Task t{"t", "", 1000, 0, 1, 1000, {}, 0};
    ASSERT_TRUE(in.cluster.Allocate(t, {0, {1}}).ok());  // a GPU taken that no job holds
    EXPECT_EQ(in.KeptDifferences(active, {}), "node a differs");
  }
}

// Everything a pass reads of a conversion, as text.
std::string Describe(const sched::QueuedJob& q) {
  const sched::AdmissionFacts& a = q.admission;
  std::string out = q.id + "|" + q.user + "|" + q.project + "|" + std::to_string(q.priority) + "|" +
                    std::to_string(q.submit_s) + "|" + std::to_string(q.time_limit_s) + "|" +
                    std::to_string(q.runtime_estimate_s) + "|" + a.held_by + "|" +
                    std::to_string(a.held_by_admin) + "|" + a.waits_for + "|" +
                    std::to_string(a.stopping_attempt) + a.stopping_node + "/" +
                    std::to_string(a.stopping_nodes) + "|" + a.array_id + "|" +
                    std::to_string(a.array_max_running) + "|" + std::to_string(a.gpus) + "|" +
                    a.environment + "|" + a.unplaceable;
  for (const sched::Task& t : q.tasks) {
    out += "|" + t.name + "," + t.job_id + "," + std::to_string(t.cpu_milli) + "," +
           std::to_string(t.memory_mib) + "," + std::to_string(t.num_gpu) + "," +
           std::to_string(t.gpu_milli) + "," + std::to_string(t.min_capability) + "," +
           std::to_string(t.owner) + "," + std::to_string(t.enforce_memory) + "," +
           std::to_string(t.gpu_memory_mib);
    for (const std::string& m : t.gpu_models) out += "," + m;
    for (const std::string& n : t.allowed_nodes) out += ";" + n;
  }
  return out;
}

// With ConversionCache::by_version (JobScheduler's), a job given at the same address and
// version is neither compared nor converted again, nor is its placement: each pass's
// conversions, cluster and running jobs are still those of a fresh conversion of every
// job, while jobs change (their version stepped), move to another address or stay.
TEST_F(KeptClusterTest, KeptByVersionTheConversionsAreFreshOnes) {
  std::mt19937 rng(131);
  ConversionCache cache;
  cache.by_version = true;
  KeptCluster kept;
  size_t hits = 0, given = 0;
  for (int step = 0; step < 1500; ++step) {
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) Step(rng);
    if (rng() % 3 == 0 && !jobs_.empty()) {  // a copy at another address, the same version
      auto it = jobs_.begin();
      std::advance(it, rng() % jobs_.size());
      const jobs::Job copy = it->second;
      jobs_.erase(it);
      jobs_.emplace(copy.id, copy);
    }
    const std::vector<SchedNode> nodes = Nodes();
    std::vector<const jobs::Job*> active;
    for (const auto& [id, j] : jobs_) active.push_back(&j);
    SchedInput in(nodes, MpsSharing::kOneUser, &cache, &kept);
    in.AddJobs(active, {});
    SchedInput fresh(nodes);
    fresh.AddJobs(active, {});
    hits += cache.by_version_hits;
    given += active.size();
    ASSERT_EQ(in.pending.size(), fresh.pending.size()) << "step " << step;
    for (size_t i = 0; i < in.pending.size(); ++i) {
      ASSERT_EQ(in.pending_source[i], fresh.pending_source[i]) << "step " << step;
      ASSERT_EQ(Describe(*in.pending[i]), Describe(*fresh.pending[i])) << "step " << step;
    }
    ASSERT_EQ(in.occupying.size(), fresh.occupying.size()) << "step " << step;
    for (size_t i = 0; i < in.occupying.size(); ++i) {
      ASSERT_EQ(Describe(*in.occupying[i]), Describe(*fresh.occupying[i])) << "step " << step;
    }
    ASSERT_EQ(SchedInput::ClusterDifferences(in.cluster, fresh.cluster), "") << "step " << step;
    ASSERT_EQ(in.running.size(), fresh.running.size()) << "step " << step;
    for (size_t i = 0; i < in.running.size(); ++i) {
      ASSERT_EQ(in.running_source[i], fresh.running_source[i]) << "step " << step;
      ASSERT_EQ(in.running[i].placements, fresh.running[i].placements) << "step " << step;
    }
  }
  EXPECT_GT(hits * 2, given);  // most jobs were taken by their version
}

// Jobs that do not change are not allocated again; one that ends is released.
TEST_F(KeptClusterTest, APassAllocatesOnlyWhatChanged) {
  std::mt19937 rng(7);
  ConversionCache cache;
  KeptCluster kept;
  for (int i = 0; i < 6; ++i) {
    jobs::Job j = NewJob(rng);
    j.request.gpus = 1;
    j.request.gpu_milli = 1000;
    j.state = jobs::JobState::kRunning;
    j.placement = {jobs::TaskPlacement{"a", {i % 4}, {"a-GPU-" + std::to_string(i % 4)}, 1000}};
    if (i >= 4)
      j.placement = {jobs::TaskPlacement{"b", {i % 4}, {"b-GPU-" + std::to_string(i % 4)}, 1000}};
    jobs_[j.id] = j;
  }
  auto pass = [&] {
    const std::vector<SchedNode> nodes = Nodes();
    std::vector<const jobs::Job*> active;
    for (const auto& [id, j] : jobs_) active.push_back(&j);
    SchedInput in(nodes, MpsSharing::kOneUser, &cache, &kept);
    in.AddJobs(active, {});
    return std::make_pair(in.cluster.TotalFree().gpu_milli, in.running.size());
  };
  EXPECT_EQ(pass(), std::make_pair(int64_t{12000}, size_t{6}));
  EXPECT_TRUE(kept.rebuilt);
  EXPECT_EQ(pass(), std::make_pair(int64_t{12000}, size_t{6}));
  EXPECT_FALSE(kept.rebuilt);
  EXPECT_EQ(kept.allocated, 0u);
  EXPECT_EQ(kept.released, 0u);
  jobs_.erase(jobs_.begin());
  EXPECT_EQ(pass(), std::make_pair(int64_t{13000}, size_t{5}));
  EXPECT_FALSE(kept.rebuilt);
  EXPECT_EQ(kept.allocated, 0u);
  EXPECT_EQ(kept.released, 1u);
  infos_["b"].gpus[0].temperature_celsius = 70;  // telemetry: the layout stays
  EXPECT_EQ(pass(), std::make_pair(int64_t{13000}, size_t{5}));
  EXPECT_FALSE(kept.rebuilt);
  infos_["b"].gpus[0].memory_total_bytes = uint64_t{40} << 30;  // built again
  EXPECT_EQ(pass(), std::make_pair(int64_t{13000}, size_t{5}));
  EXPECT_TRUE(kept.rebuilt);
}

}  // namespace
}  // namespace gpupool::controller
