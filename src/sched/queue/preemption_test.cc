#include "sched/queue/preemption.h"

#include <gtest/gtest.h>

#include "sched/queue/first_fit_for_test.h"
#include "sched/queue/gang_placement.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::FirstFitForTest;
using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;
using testing::Snapshot;

// A cluster with jobs placed on it, as the running list of a pass sees them.
struct RunningSet {
  ClusterState cluster;
  std::vector<QueuedJob> jobs;
  std::vector<RunningJob> runs;

  RunningSet(int nodes, int gpus) : cluster(MakeCluster(nodes, gpus)) { jobs.reserve(64); }

  void Add(const std::string& id, const std::string& user, int64_t start, std::vector<Task> tasks,
           int priority = 0) {
    jobs.push_back(Job(id, user, 0, std::move(tasks)));
    jobs.back().priority = priority;
    FirstFitForTest policy;
    auto g = PlaceGang(cluster, jobs.back().tasks, policy);
    ASSERT_TRUE(g.ok() && g->placed) << id;
    runs.push_back(RunningJob{&jobs.back(), start, g->placements});
  }
  std::vector<PreemptibleRun> All(bool preemptible = true) const {
    std::vector<PreemptibleRun> out;
    for (const RunningJob& r : runs) out.push_back({&r, preemptible});
    return out;
  }
};

std::vector<std::string> VictimIds(const RunningSet& r, const std::vector<size_t>& idx) {
  std::vector<std::string> out;
  for (size_t i : idx) out.push_back(r.runs[i].job->id);
  return out;
}

TEST(PreemptionCandidates, OnlyPreemptibleJobsPastTheirMinimumRuntime) {
  RunningSet r(2, 4);
  r.Add("old", "bob", 0, {GpuTask(4)});
  r.Add("young", "bob", 900, {GpuTask(4)});  // ran 100 s at t=1000
  QueuedJob waiting = Job("w", "alice", 1000, {GpuTask(4)});
  waiting.priority = 5;
  PreemptionOptions o;
  o.min_runtime_s = 600;
  GroupUse use = UseOf(r.All(), {&waiting}, 8000, o);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(waiting, r.All(), use, 1000, o)),
            (std::vector<std::string>{"old"}));
  EXPECT_TRUE(PreemptionCandidates(waiting, r.All(/*preemptible=*/false), use, 1000, o).empty());
}

// With the cluster, a job on a MIG instance counts as the instance's part of its GPU (the
// charge rule, cluster_state.h), against the capacity counting a GPU in MIG mode once: bob,
// holding every instance of a GPU and a thousandth of another with 1-thousandth asks, is
// over his share of the two GPUs, and alice may preempt him.
TEST(PreemptionCandidates, AJobOnAMigInstanceCountsAsTheInstance) {
  ClusterState cluster;
  NodeSpec mig{"mig", 64000, 262144, 5, "A100", 81920, 80};
  mig.whole_only_gpus = 0b01111;  // 3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb; GPU 4 outside MIG
  mig.device_memory_mib = {40960, 20480, 10240, 10240, 81920};
  ASSERT_TRUE(cluster.AddNode(mig).ok());
  std::vector<QueuedJob> jobs;
  jobs.reserve(5);
  std::vector<RunningJob> runs;
  for (int32_t g = 0; g < 5; ++g) {
    jobs.push_back(Job("b" + std::to_string(g), "bob", 0, {GpuTask(1, 1)}));
    ASSERT_TRUE(cluster.Allocate(jobs.back().tasks[0], {0, {g}}).ok());
    runs.push_back(RunningJob{&jobs.back(), 0, {{0, {g}}}});
  }
  std::vector<PreemptibleRun> all;
  for (const RunningJob& r : runs) all.push_back({&r, true});
  PreemptionOptions o;
  o.min_runtime_s = 0;
  QueuedJob alice = Job("a", "alice", 10, {GpuTask(1, 1)});
  const GroupUse use = UseOf(all, {&alice}, cluster.TotalGpuWeightMilli(), o, &cluster);
  EXPECT_EQ(use.gpu_milli.at("bob"), 500 + 250 + 125 + 125 + 1);
  EXPECT_EQ(use.FairShare(), 1000);
  EXPECT_EQ(PreemptionCandidates(alice, all, use, 10, o).size(), 5u);
  // Without the cluster, the asks: 5 thousandths, under any share.
  const GroupUse asked = UseOf(all, {&alice}, cluster.TotalGpuWeightMilli(), o);
  EXPECT_EQ(asked.gpu_milli.at("bob"), 5);
  EXPECT_TRUE(PreemptionCandidates(alice, all, asked, 10, o).empty());
}

TEST(PreemptionCandidates, HigherPriorityOrAnUnderShareGroupAgainstAnOverShareOne) {
  RunningSet r(2, 4);
  r.Add("b1", "bob", 0, {GpuTask(4)});
  r.Add("b2", "bob", 0, {GpuTask(2)});
  r.Add("c1", "carol", 0, {GpuTask(2)});
  PreemptionOptions o;
  o.min_runtime_s = 0;
  // Three groups active: fair share 8/3 GPUs. Bob holds 6 (over), carol 2 (within).
  QueuedJob alice = Job("a", "alice", 10, {GpuTask(2)});
  GroupUse use = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(use.FairShare(), 2666);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), use, 10, o)),
            (std::vector<std::string>{"b1", "b2"}));
  // A job that would take alice past her share preempts nobody on fairness grounds...
  QueuedJob big = Job("big", "alice", 10, {GpuTask(4)});
  EXPECT_TRUE(PreemptionCandidates(big, r.All(), UseOf(r.All(), {&big}, 8000, o), 10, o).empty());
  // ...nor does bob's own job take from bob, but a higher priority takes from anyone lower.
  QueuedJob bob = Job("b3", "bob", 10, {GpuTask(1)});
  EXPECT_TRUE(PreemptionCandidates(bob, r.All(), use, 10, o).empty());
  bob.priority = 1;
  EXPECT_EQ(PreemptionCandidates(bob, r.All(), use, 10, o).size(), 3u);
}

// The red team of the preemption work: users set their own --priority, so in the live pool
// (priority_within_user) a higher priority stops only its own user's jobs; another user's
// job falls only to fair share.
TEST(PreemptionCandidates, WithinUserAHigherPriorityTakesOnlyFromItsOwnUser) {
  RunningSet r(1, 4);
  r.Add("a1", "alice", 0, {GpuTask(2)});
  r.Add("b1", "bob", 0, {GpuTask(2)});
  PreemptionOptions o;
  o.min_runtime_s = 0;
  o.priority_within_user = true;
  // Bob asks the highest priority there is; both hold their fair share (2 of 4).
  QueuedJob bob = Job("b2", "bob", 10, {GpuTask(2)});
  bob.priority = 1'000'000;
  GroupUse use = UseOf(r.All(), {&bob}, 4000, o);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(bob, r.All(), use, 10, o)),
            (std::vector<std::string>{"b1"}));
  // Without the option (the simulator's traces): anyone lower.
  o.priority_within_user = false;
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(bob, r.All(), use, 10, o)),
            (std::vector<std::string>{"a1", "b1"}));
}

TEST(PreemptionCandidates, SharesByDemandGiveWhatLightGroupsLeaveToTheHeavyOnes) {
  RunningSet r(2, 4);
  r.Add("b1", "bob", 0, {GpuTask(4)});
  r.Add("b2", "bob", 0, {GpuTask(1)});
  r.Add("c1", "carol", 0, {GpuTask(1)});
  PreemptionOptions o;
  o.min_runtime_s = 0;
  // Alice waits for 2 GPUs; carol holds 1 and wants no more; bob holds 5. Equal shares:
  // 8/3 each, bob is over his and alice may preempt him.
  QueuedJob alice = Job("a", "alice", 10, {GpuTask(2)});
  GroupUse equal = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), equal, 10, o)),
            (std::vector<std::string>{"b1", "b2"}));
  // By demand: carol's share is her 1 GPU, alice's her 2, bob gets the 5 left: he is
  // within his share, so alice preempts nobody.
  o.shares_by_demand = true;
  GroupUse demand = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(demand.ShareOf("carol"), 1000);
  EXPECT_EQ(demand.ShareOf("alice"), 2000);
  EXPECT_EQ(demand.ShareOf("bob"), 5000);
  EXPECT_TRUE(PreemptionCandidates(alice, r.All(), demand, 10, o).empty());
  // With a second waiting job alice's demand is 4: the 7 left after carol are split 3.5
  // and 3.5, and bob's 5 are over his share again.
  QueuedJob alice2 = Job("a2", "alice", 10, {GpuTask(2)});
  demand = UseOf(r.All(), {&alice, &alice2}, 8000, o);
  EXPECT_EQ(demand.ShareOf("bob"), 3500);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), demand, 10, o)),
            (std::vector<std::string>{"b1", "b2"}));
}

// Fair-share weights (Slurm's Fairshare=N): a group's share is the capacity in proportion
// to its weight among the active groups. Bob holds 6 of 8 GPUs and carol 2; alice waits
// for 2. Equally (8/3 each) bob is over his share and alice, within hers, preempts him.
TEST(PreemptionCandidates, WeightsSetEachGroupsShareInProportion) {
  RunningSet r(2, 4);
  r.Add("b1", "bob", 0, {GpuTask(4)});
  r.Add("b2", "bob", 0, {GpuTask(2)});
  r.Add("c1", "carol", 0, {GpuTask(2)});
  PreemptionOptions o;
  o.min_runtime_s = 0;
  QueuedJob alice = Job("a", "alice", 0, {GpuTask(2)});
  GroupUse use = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), use, 10, o)),
            (std::vector<std::string>{"b1", "b2"}));
  // Bob at weight 3 (3:1:1): his share is 4.8 GPUs, alice's 1.6, below the 2 she asks
  // for, so she preempts nobody.
  o.weights = {{"bob", 3}};
  use = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(use.ShareOf("bob"), 4800);
  EXPECT_EQ(use.ShareOf("alice"), 1600);
  EXPECT_EQ(use.ShareOf("carol"), 1600);
  EXPECT_TRUE(PreemptionCandidates(alice, r.All(), use, 10, o).empty());
  // Alice at weight 4 next to bob's 3 and carol's 1: her share is 4 GPUs, bob's 3 and
  // carol's 1, both over theirs: alice may preempt either.
  o.weights = {{"bob", 3}, {"alice", 4}};
  use = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(use.ShareOf("alice"), 4000);
  EXPECT_EQ(use.ShareOf("bob"), 3000);
  EXPECT_EQ(use.ShareOf("carol"), 1000);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), use, 10, o)),
            (std::vector<std::string>{"b1", "b2", "c1"}));
  // By demand, weighted: alice wants 2 GPUs, carol 2 and bob 6 against an even split by
  // weight (4:3:1) of 4, 3 and 1: alice's 2 are met, the 6 left go 3:1 between bob
  // (4.5, still below his demand) and carol (1.5).
  o.shares_by_demand = true;
  use = UseOf(r.All(), {&alice}, 8000, o);
  EXPECT_EQ(use.ShareOf("alice"), 2000);
  EXPECT_EQ(use.ShareOf("bob"), 4500);
  EXPECT_EQ(use.ShareOf("carol"), 1500);
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), use, 10, o)),
            (std::vector<std::string>{"b1", "b2", "c1"}));
}

TEST(PreemptionCandidates, AStarvingJobCountsAsUnderItsShare) {
  RunningSet r(2, 4);
  r.Add("b1", "bob", 0, {GpuTask(4)});
  r.Add("a1", "alice", 0, {GpuTask(2)});
  PreemptionOptions o;
  o.min_runtime_s = 0;
  // Three groups (carol waits too): shares of 8/3 GPUs. Alice's second job would take her
  // to 4, past hers: it may not preempt bob (4, over his)...
  QueuedJob alice = Job("a2", "alice", 100, {GpuTask(2)});
  QueuedJob carol = Job("c1", "carol", 100, {GpuTask(1)});
  GroupUse use = UseOf(r.All(), {&alice, &carol}, 8000, o);
  EXPECT_TRUE(PreemptionCandidates(alice, r.All(), use, 1000, o).empty());
  // ...unless it has waited starving_after_s since its submission.
  o.starving_after_s = 900;
  EXPECT_TRUE(PreemptionCandidates(alice, r.All(), use, 999, o).empty());
  EXPECT_EQ(VictimIds(r, PreemptionCandidates(alice, r.All(), use, 1000, o)),
            (std::vector<std::string>{"b1"}));
}

TEST(ChooseVictims, TheFewestAndNewestThatMakeRoomAndGangsWhole) {
  RunningSet r(2, 4);
  r.Add("a", "bob", 100, {GpuTask(2)});              // n0
  r.Add("b", "bob", 300, {GpuTask(2)});              // n0
  r.Add("g", "bob", 200, {GpuTask(2), GpuTask(2)});  // a gang, n1 twice
  QueuedJob waiting = Job("w", "alice", 1000, {GpuTask(4)});
  FirstFitForTest policy;
  const auto before = Snapshot(r.cluster);
  std::vector<size_t> all = {0, 1, 2};
  auto v = ChooseVictims(r.cluster, waiting, r.All(), all, policy);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(v->has_value());
  // Newest first: b (300), then g (200) frees node 1 whole: b is put back, g alone stays.
  EXPECT_EQ(VictimIds(r, (*v)->running), (std::vector<std::string>{"g"}));
  ASSERT_EQ((*v)->placements.size(), 1u);
  EXPECT_EQ((*v)->placements[0].node, 1);
  EXPECT_EQ(Snapshot(r.cluster), before);  // the caller's cluster is not touched
}

// On MIG instances (cluster_state.h) the victim is the share whose instance holds the
// waiting share's memory, though another is newer: freeing the 1g.10gb makes no room for
// 30 GiB.
TEST(ChooseVictims, OnMigInstancesTheVictimIsTheOneWhoseInstanceFits) {
  ClusterState c;
  NodeSpec spec{"mig", 64000, 262144, 2, "A100", 81920, 80};
  spec.whole_only_gpus = 0b11;
  spec.device_memory_mib = {40960, 10240};
  ASSERT_TRUE(c.AddNode(spec).ok());
  std::vector<QueuedJob> jobs = {Job("big", "bob", 0, {GpuTask(1, 100)}),
                                 Job("small", "bob", 0, {GpuTask(1, 100)})};
  ASSERT_TRUE(c.Allocate(jobs[0].tasks[0], {0, {0}}).ok());
  ASSERT_TRUE(c.Allocate(jobs[1].tasks[0], {0, {1}}).ok());
  const std::vector<RunningJob> runs = {{&jobs[0], 100, {{0, {0}}}}, {&jobs[1], 200, {{0, {1}}}}};
  const std::vector<PreemptibleRun> running = {{&runs[0], true}, {&runs[1], true}};
  Task wide = GpuTask(1, 375);  // 30 GiB of the 80 GiB GPU
  QueuedJob waiting = Job("w", "alice", 1000, {wide});
  FirstFitForTest policy;
  auto v = ChooseVictims(c, waiting, running, {0, 1}, policy);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ((*v)->running, std::vector<size_t>{0});
  EXPECT_EQ((*v)->placements[0], (Placement{0, {0}}));
  // A whole GPU makes room on no instance: no victims.
  auto whole = ChooseVictims(c, Job("x", "alice", 1000, {GpuTask(1)}), running, {0, 1}, policy);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->has_value());
}

TEST(ChooseVictims, NothingWhenEvenAllCandidatesDoNotMakeRoom) {
  RunningSet r(2, 4);
  r.Add("a", "bob", 100, {GpuTask(4)});
  r.Add("b", "carol", 100, {GpuTask(4)});
  QueuedJob waiting = Job("w", "alice", 1000, {GpuTask(4), GpuTask(4)});
  FirstFitForTest policy;
  auto v = ChooseVictims(r.cluster, waiting, r.All(), {0}, policy);  // only a may go
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  auto both = ChooseVictims(r.cluster, waiting, r.All(), {0, 1}, policy);
  ASSERT_TRUE(both.ok());
  ASSERT_TRUE(both->has_value());
  EXPECT_EQ((*both)->running.size(), 2u);
}

// A gang that fits without preempting anyone gets no victims (the queue decides when it
// starts).
TEST(ChooseVictims, NothingWhenTheGangFitsAsThingsAre) {
  RunningSet r(2, 4);
  r.Add("a", "bob", 100, {GpuTask(4)});
  QueuedJob waiting = Job("w", "alice", 1000, {GpuTask(2)});
  FirstFitForTest policy;
  auto v = ChooseVictims(r.cluster, waiting, r.All(), {0}, policy);
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
}

TEST(ChooseVictims, PrefersNewestWorkWhenOneVictimIsEnough) {
  RunningSet r(2, 4);
  r.Add("older", "bob", 100, {GpuTask(4)});
  r.Add("newer", "bob", 500, {GpuTask(4)});
  QueuedJob waiting = Job("w", "alice", 1000, {GpuTask(4)});
  FirstFitForTest policy;
  auto v = ChooseVictims(r.cluster, waiting, r.All(), {0, 1}, policy);
  ASSERT_TRUE(v.ok());
  ASSERT_TRUE(v->has_value());
  EXPECT_EQ(VictimIds(r, (*v)->running), (std::vector<std::string>{"newer"}));
}

}  // namespace
}  // namespace gpupool::sched
