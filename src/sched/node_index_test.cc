// The node index (node_index.h, change_journal.h) and FrameworkPolicy's indexed
// placement: the index picks exactly the node the full scan picks, through allocations,
// releases, copies, scan orders, refused candidates and single-owner GPUs.
#include "sched/node_index.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "sched/fragmentation.h"
#include "sched/framework.h"
#include "sched/policy_registry.h"
#include "sched/rng.h"

namespace gpupool::sched {
namespace {

TEST(ScoreIndexTest, BestIsTheHighestValueFirstInPosition) {
  Rng rng(3);
  ScoreIndex index;
  const int32_t n = 37;
  index.Reset(n);
  std::vector<int64_t> values(n, ScoreIndex::kAbsent);
  EXPECT_EQ(index.Best(), -1);
  for (int step = 0; step < 2000; ++step) {
    const auto pos = static_cast<int32_t>(rng.Uniform(n));
    const int64_t v =
        rng.Uniform(4) == 0 ? ScoreIndex::kAbsent : static_cast<int64_t>(rng.Uniform(6));
    values[static_cast<size_t>(pos)] = v;
    index.Set(pos, pos, static_cast<uint64_t>(step + 1), v);
    int32_t want = -1;
    for (int32_t p = 0; p < n; ++p) {
      if (values[static_cast<size_t>(p)] == ScoreIndex::kAbsent) continue;
      if (want < 0 || values[static_cast<size_t>(p)] > values[static_cast<size_t>(want)]) want = p;
    }
    ASSERT_EQ(index.Best(), want) << "step " << step;
    if (want >= 0 && step % 7 == 0) {  // the runner-up after taking the best out
      const int64_t old = index.Exclude(want);
      int32_t next = -1;
      for (int32_t p = 0; p < n; ++p) {
        const int64_t pv = values[static_cast<size_t>(p)];
        if (p == want || pv == ScoreIndex::kAbsent) continue;
        if (next < 0 || pv > values[static_cast<size_t>(next)]) next = p;
      }
      EXPECT_EQ(index.Best(), next);
      index.Restore(want, old);
      EXPECT_EQ(index.Best(), want);
    }
  }
}

TEST(ChangeJournalTest, RecordsTrimsAndStartsAfreshOnCopy) {
  ChangeJournal j;
  for (int32_t i = 0; i < 10; ++i) j.Record(i, 8);
  EXPECT_EQ(j.end(), 10u);
  EXPECT_GT(j.first(), 0u);  // trimmed: the oldest half went
  EXPECT_EQ(j.at(9), 9);
  EXPECT_EQ(j.at(j.first()), static_cast<int32_t>(j.first()));
  ChangeJournal copy = j;
  EXPECT_NE(copy.id(), j.id());
  EXPECT_EQ(copy.end(), 0u);
  const uint64_t id = j.id();
  ChangeJournal moved = std::move(j);
  EXPECT_EQ(moved.id(), id);
  EXPECT_EQ(moved.end(), 10u);
  EXPECT_NE(j.id(), id);  // NOLINT(bugprone-use-after-move): the moved-from starts anew
}

TEST(ChangeJournalTest, ClusterStateRecordsEveryChange) {
  ClusterState s;
  ASSERT_TRUE(s.AddNode({"a", 8000, 8192, 2, "T4"}).ok());
  ASSERT_TRUE(s.AddNode({"b", 8000, 8192, 2, "T4"}).ok());
  const uint64_t id = s.journal().id();
  Task t{"t", "", 1000, 100, 1, 500, {}, 0};
  ASSERT_TRUE(s.Allocate(t, {1, {0}}).ok());
  ASSERT_FALSE(s.Allocate(t, {1, {7}}).ok());  // refused: nothing changed, nothing recorded
  ASSERT_TRUE(s.Release(t, {1, {0}}).ok());
  EXPECT_EQ(s.journal().id(), id);
  ASSERT_EQ(s.journal().end(), 2u);
  EXPECT_EQ(s.journal().at(0), 1);
  ASSERT_TRUE(s.SetScanOrder({1, 0}).ok());
  EXPECT_NE(s.journal().id(), id);  // positions changed: indexes must rebuild
}

// A mixed cluster: four models, 4- and 8-GPU nodes, some with single-owner GPUs, some
// with MIG instances (whole-only devices of their own memory).
ClusterState MixedCluster(int nodes, bool single_owner) {
  ClusterState s;
  const char* models[] = {"A100", "V100", "T4", "G2"};
  for (int i = 0; i < nodes; ++i) {
    NodeSpec spec{fmt::format("n{:03}", i), 32000, 262144, i % 3 == 0 ? 4 : 8, models[i % 4]};
    if (single_owner && i % 5 == 0) spec.single_owner_gpus = (uint64_t{1} << spec.num_gpus) - 1;
    if (i % 7 == 3) {  // a MIG node: its devices are instances of 10, 20 and 40 GiB
      spec.whole_only_gpus = (uint64_t{1} << spec.num_gpus) - 1;
      for (int32_t g = 0; g < spec.num_gpus; ++g) {
        spec.device_memory_mib.push_back(int64_t{10240} << (g % 3));
      }
    }
    EXPECT_TRUE(s.AddNode(spec).ok());
  }
  return s;
}

Task RandomTask(Rng& rng, int nodes, int i) {
  Task t;
  t.name = fmt::format("t{}", i);
  t.cpu_milli = 1000 * static_cast<int64_t>(1 + rng.Uniform(8));
  t.memory_mib = 4096 * static_cast<int64_t>(1 + rng.Uniform(24));
  const uint64_t kind = rng.Uniform(10);
  const int32_t shares[] = {100, 250, 500, 700};
  if (kind < 4) {
    t.num_gpu = 1;
    t.gpu_milli = shares[rng.Uniform(4)];
    t.owner = static_cast<int64_t>(rng.Uniform(3));
    if (rng.Uniform(3) == 0) t.gpu_memory_mib = 8192 * static_cast<int64_t>(1 + rng.Uniform(4));
  } else if (kind < 8) {
    t.num_gpu = 1 << rng.Uniform(4);
    t.gpu_milli = 1000;
  }
  if (t.num_gpu > 0 && rng.Uniform(6) == 0) t.gpu_models = {"A100", "T4"};
  if (t.num_gpu > 0 && rng.Uniform(15) == 0) t.min_capability = 80;
  if (t.num_gpu > 0 && rng.Uniform(12) == 0) {  // few allowed nodes: many refused candidates
    for (int k = 0; k < 2; ++k) {
      t.allowed_nodes.push_back(fmt::format("n{:03}", rng.Uniform(static_cast<uint64_t>(nodes))));
    }
    std::sort(t.allowed_nodes.begin(), t.allowed_nodes.end());
  }
  return t;
}

// Seed 1 and a target workload of 200 random tasks (RandomTask, drawn from `rng`).
PolicyConfig RandomWorkloadConfig(Rng& rng, int nodes) {
  std::vector<Task> sample;
  for (int i = 0; i < 200; ++i) sample.push_back(RandomTask(rng, nodes, i));
  PolicyConfig config;
  config.seed = 1;
  config.target_workload =
      std::make_shared<const TargetWorkload>(TargetWorkload::FromTasks(sample));
  return config;
}

struct Placed {
  Task task;
  Placement placement;
};

// Drives an indexed and a scanning instance of `policy` through the same random
// sequence of placements, releases, copies and scan orders; every decision must match.
void ExpectSameDecisions(const std::string& policy, bool single_owner, uint64_t seed) {
  const int nodes = 60;
  Rng rng(seed);
  const PolicyConfig config = RandomWorkloadConfig(rng, nodes);
  auto indexed = BuiltinPlacementPolicies().Create(policy, config);
  auto scanning = BuiltinPlacementPolicies().Create(policy, config);
  ASSERT_TRUE(indexed.ok() && scanning.ok());
  auto* scan = dynamic_cast<FrameworkPolicy*>(scanning->get());
  ASSERT_NE(scan, nullptr);
  scan->DisableIndexForTest();
  ClusterState state = MixedCluster(nodes, single_owner);
  std::vector<Placed> running;
  int placed = 0, refused = 0;
  for (int step = 0; step < 3000; ++step) {
    const uint64_t op = rng.Uniform(100);
    if (op < 35 && !running.empty()) {  // an end
      const size_t k = rng.Uniform(running.size());
      ASSERT_TRUE(state.Release(running[k].task, running[k].placement).ok());
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    if (op == 35) {  // a copy: a new history the index must not confuse with the old
      ClusterState copy = state;
      state = copy;
      continue;
    }
    if (op == 36) {  // a new scan order
      std::vector<int32_t> order(static_cast<size_t>(nodes));
      for (int32_t i = 0; i < nodes; ++i) order[static_cast<size_t>(i)] = i;
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.Uniform(i + 1)]);
      ASSERT_TRUE(state.SetScanOrder(order).ok());
      continue;
    }
    Task t = RandomTask(rng, nodes, step);
    const PlacementDecision a = (*indexed)->Place(state, t);
    const PlacementDecision b = (*scanning)->Place(state, t);
    ASSERT_EQ(a.placed, b.placed) << policy << " step " << step << ": " << b.reason;
    if (!a.placed) {
      EXPECT_EQ(a.reason, b.reason);
      ++refused;
      continue;
    }
    ASSERT_EQ(a.placement, b.placement) << policy << " step " << step;
    ASSERT_EQ(a.score, b.score) << policy << " step " << step;
    ASSERT_TRUE(state.Allocate(t, a.placement).ok());
    running.push_back({t, a.placement});
    ++placed;
  }
  EXPECT_GT(dynamic_cast<FrameworkPolicy*>(indexed->get())->indexed_keys(), 0u) << policy;
  EXPECT_EQ(scan->indexed_keys(), 0u);
  // The sequence must have exercised both outcomes.
  EXPECT_GT(placed, 500) << policy;
  EXPECT_GT(refused, 50) << policy;
}

TEST(IndexedPlacementTest, FgdPoliciesDecideAsTheFullScan) {
  // The FGD policies whose score does not read the task's memory (fgd_score.h).
  for (const char* policy : {"fgd", "fgd-bestfit", "fgd-exact", "fgd-demand", "fgd-coarse20",
                             "fgd-pack", "fgd-reserve"}) {
    SCOPED_TRACE(policy);
    ExpectSameDecisions(policy, /*single_owner=*/false, 11);
    ExpectSameDecisions(policy, /*single_owner=*/true, 12);
  }
}

// The FGD policies whose score reads the task's memory (the strand term, memory shapes)
// keep their results per (shape, node, version), computed by the first task that scores
// the node (fgd_score.h): their index is lazy (ScorePlugin::CachedScoreKey) and must make
// the same first calls, in the same order, as the full scan. The random tasks' memory
// (4-96 GiB on nodes of 256 GiB) both fails the filter and moves the strand term.
TEST(IndexedPlacementTest, PoliciesThatReadTheTasksMemoryDecideAsTheFullScan) {
  for (const char* policy :
       {"default", "fgd-strand", "fgd-strand-gpufit", "fgd-strand-lookahead", "fgd-mem"}) {
    SCOPED_TRACE(policy);
    ExpectSameDecisions(policy, /*single_owner=*/false, 13);
    ExpectSameDecisions(policy, /*single_owner=*/true, 14);
  }
}

TEST(IndexedPlacementTest, NormalizedScoresScan) {
  // BestFit normalizes its scores over the feasible nodes: no index.
  auto p = BuiltinPlacementPolicies().Create("bestfit", PolicyConfig{});
  ASSERT_TRUE(p.ok());
  ClusterState state = MixedCluster(4, false);
  Task t{"t", "", 1000, 100, 1, 1000, {}, 0};
  ASSERT_TRUE((*p)->Place(state, t).placed);
  auto* framework = dynamic_cast<FrameworkPolicy*>(p->get());
  ASSERT_NE(framework, nullptr);
  EXPECT_EQ(framework->indexed_keys(), 0u);
}

// Issue 31: the full scan of a GPU task looks only at the nodes with a GPU share free,
// a set kept in step with the cluster's journal. A policy that lives through a random
// sequence of placements, releases, copies and scan orders decides as another instance
// that is given a copy of the cluster for every task (a new history: it builds the set
// afresh each time).
TEST(IndexedPlacementTest, TheScanOfNodesWithFreeGpusKeepsUpWithTheCluster) {
  for (const char* policy : {"default", "fgd-strand", "bestfit"}) {
    SCOPED_TRACE(policy);
    const int nodes = 60;
    Rng rng(21);
    const PolicyConfig config = RandomWorkloadConfig(rng, nodes);
    auto lived = BuiltinPlacementPolicies().Create(policy, config);
    auto afresh = BuiltinPlacementPolicies().Create(policy, config);
    ASSERT_TRUE(lived.ok() && afresh.ok());
    ClusterState state = MixedCluster(nodes, false);
    std::vector<Placed> running;
    int placed = 0, refused = 0;
    for (int step = 0; step < 1500; ++step) {
      const uint64_t op = rng.Uniform(100);
      if (op < 35 && !running.empty()) {
        const size_t k = rng.Uniform(running.size());
        ASSERT_TRUE(state.Release(running[k].task, running[k].placement).ok());
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(k));
        continue;
      }
      if (op == 35) {
        ClusterState copy = state;
        state = copy;
        continue;
      }
      if (op == 36) {
        std::vector<int32_t> order(static_cast<size_t>(nodes));
        for (int32_t i = 0; i < nodes; ++i) order[static_cast<size_t>(i)] = i;
        for (size_t i = order.size() - 1; i > 0; --i)
          std::swap(order[i], order[rng.Uniform(i + 1)]);
        ASSERT_TRUE(state.SetScanOrder(order).ok());
        continue;
      }
      Task t = RandomTask(rng, nodes, step);
      const ClusterState copy = state;
      const PlacementDecision a = (*lived)->Place(state, t);
      const PlacementDecision b = (*afresh)->Place(copy, t);
      ASSERT_EQ(a.placed, b.placed) << "step " << step << ": " << b.reason;
      if (!a.placed) {
        ++refused;
        continue;
      }
      ASSERT_EQ(a.placement, b.placement) << "step " << step;
      ASSERT_TRUE(state.Allocate(t, a.placement).ok());
      running.push_back({t, a.placement});
      ++placed;
    }
    EXPECT_GT(placed, 300);
    EXPECT_GT(refused, 30);
  }
}

TEST(IndexedPlacementTest, ManyRefusedCandidatesFallBackToTheScan) {
  // 100 idle nodes; only the last one is allowed: the index offers 32 refused
  // candidates, then the cycle scans the index's values.
  ClusterState state;
  for (int i = 0; i < 100; ++i)
    ASSERT_TRUE(state.AddNode({fmt::format("n{:03}", i), 8000, 8192, 2, "T4"}).ok());
  auto policy = BuiltinPlacementPolicies().Create("fgd", PolicyConfig{});
  ASSERT_TRUE(policy.ok());
  Task t{"t", "", 1000, 100, 1, 1000, {}, 0};
  t.allowed_nodes = {"n099"};
  PlacementDecision d = (*policy)->Place(state, t);
  ASSERT_TRUE(d.placed) << d.reason;
  EXPECT_EQ(d.placement.node, 99);
  t.allowed_nodes = {"nowhere"};
  d = (*policy)->Place(state, t);
  EXPECT_FALSE(d.placed);
  EXPECT_NE(d.reason.find("no node fits"), std::string::npos);
  // The index is intact after the refusals: an unconstrained task goes to the first node.
  t.allowed_nodes.clear();
  d = (*policy)->Place(state, t);
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.placement.node, 0);
}

TEST(IndexedPlacementTest, AnotherClusterHistoryDropsTheOldIndexes) {
  auto policy = BuiltinPlacementPolicies().Create("fgd", PolicyConfig{});
  ASSERT_TRUE(policy.ok());
  auto* framework = dynamic_cast<FrameworkPolicy*>(policy->get());
  ASSERT_NE(framework, nullptr);
  ClusterState state = MixedCluster(6, false);
  Task whole{"w", "", 1000, 100, 1, 1000, {}, 0};
  Task share{"s", "", 1000, 100, 1, 500, {}, 0};
  ASSERT_TRUE(framework->Place(state, whole).placed);
  ASSERT_TRUE(framework->Place(state, share).placed);
  EXPECT_EQ(framework->indexed_keys(), 2u);
  ClusterState next = state;  // a new history, as the controller's next pass
  ASSERT_TRUE(framework->Place(next, whole).placed);
  EXPECT_EQ(framework->indexed_keys(), 1u);
}

}  // namespace
}  // namespace gpupool::sched
