// SchedulingProfile: gates, then the host's unplaceable jobs, then admission filters,
// then the pass, then the explain step; indices and reasons come back per pending job.
#include "sched/admission/profile.h"

#include <gtest/gtest.h>

#include <map>

#include "sched/queue/first_fit_for_test.h"
#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;

const PlacementPolicyRegistry& FirstFit() {
  static const PlacementPolicyRegistry r = [] {
    PlacementPolicyRegistry reg;
    (void)reg.Register("first-fit", "test double", [](const PolicyConfig&) {
      return std::unique_ptr<PlacementPolicy>(std::make_unique<testing::FirstFitForTest>());
    });
    return reg;
  }();
  return r;
}

std::unique_ptr<SchedulingProfile> Profile(StartRule rule = StartRule::kStrict) {
  ProfileSpec spec;
  spec.placement_policy = "first-fit";
  spec.placements = &FirstFit();
  spec.pass.rule = rule;
  auto p = SchedulingProfile::Create(spec);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(*p);
}

std::map<std::string, std::string> ById(const std::vector<QueuedJob>& pending,
                                        const ProfileResult& r) {
  std::map<std::string, std::string> out;
  for (const auto& [i, why] : r.reasons) out[pending[i].id] = why;
  for (const auto& s : r.started) out[pending[s.pending_index].id] = "started";
  return out;
}

QueuedJob Element(std::string id, int gpus) {
  QueuedJob j = Job(std::move(id), "alice", 0, {GpuTask(gpus)});
  j.admission.gpus = gpus;
  j.admission.array_id = "9";
  j.admission.array_max_running = 1;
  return j;
}

// Two filters that narrow a job's nodes leave it the nodes both allow; none in common
// means it cannot run, saying why.
TEST(SchedulingProfile, NarrowingFiltersIntersect) {
  std::vector<QueuedJob> pending;
  pending.push_back(Job("both", "carol", 0, {GpuTask(1, 500)}));
  pending.back().admission.environment = "cuda";
  pending.back().tasks[0].enforce_memory = true;
  pending.push_back(Job("none", "carol", 0, {GpuTask(1, 500)}));
  pending.back().admission.environment = "old";
  pending.back().tasks[0].enforce_memory = true;
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  const std::vector<std::string> enforced = {"n1", "n2"};
  PassContext ctx;
  ctx.pending = ptrs;
  ctx.memory_enforced_nodes = enforced;
  ctx.environments = [](std::string_view env) {
    return env == "cuda" ? EnvironmentNodes{{"n0", "n2"}, ""} : EnvironmentNodes{{"n0"}, ""};
  };
  ClusterState cluster = testing::MakeCluster(3, 1);
  auto profile = Profile();
  auto r = profile->Run(cluster, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->started.size(), 1u);
  EXPECT_EQ(r->started[0].placements[0].node, 2);  // n2: runs "cuda" and enforces memory
  const auto got = ById(pending, *r);
  EXPECT_EQ(got.at("both"), "started");
  EXPECT_EQ(got.at("none"),
            "cannot run on any node: none both can run its environment and holds its share to "
            "its memory (--enforce memory)");
}

TEST(SchedulingProfile, RunsGatesFiltersThePassAndExplainsInThatOrder) {
  ClusterState cluster = testing::MakeCluster(2, 2);  // n0, n1; n1 drains
  std::vector<QueuedJob> pending;
  pending.push_back(Element("held", 1));
  pending.back().admission.held_by = "alice";  // held: not counted by the throttle
  pending.push_back(Element("a1", 1));
  pending.push_back(Element("a2", 1));
  pending.push_back(Job("greedy", "bob", 0, {GpuTask(2)}));
  pending.back().admission.gpus = 2;
  pending.push_back(Job("nomodel", "carol", 0, {}));
  pending.back().admission.unplaceable = "no node has GPUs of model H100";
  pending.push_back(Job("env", "carol", 0, {GpuTask(1)}));
  pending.back().admission.environment = "cuda";
  pending.push_back(Job("big", "carol", 0, {GpuTask(2)}));
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  Limits limits;
  limits.users["bob"].max_gpus = 1;
  const std::vector<int32_t> draining = {1};
  PassContext ctx;
  ctx.pending = ptrs;
  ctx.limits = &limits;
  ctx.draining = draining;
  ctx.environments = [](std::string_view) { return EnvironmentNodes{{"n1"}, ""}; };
  auto profile = Profile();
  auto r = profile->Run(cluster, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto got = ById(pending, *r);
  EXPECT_EQ(got.at("held"), "held by alice: `gpupool release held` lets it start");
  EXPECT_EQ(got.at("a1"), "started");
  EXPECT_EQ(got.at("a2"),
            "array 9 runs at most 1 elements at once (--array ...%1); its earlier elements come "
            "first");
  EXPECT_EQ(got.at("greedy"),
            "waits: this job alone asks for 2 GPUs, more than user bob's limit (max_gpus 1): it "
            "starts only if an admin raises the limit (`gpupool limits`)");
  EXPECT_EQ(got.at("nomodel"), "cannot run on any node: no node has GPUs of model H100");
  EXPECT_EQ(got.at("env"),
            "needs 1 idle GPU on the 1 node that can run its environment; largest idle block on "
            "any node: 0; 0/2 nodes are available: 1 cannot run its environment, 1 drained (n1)");
  EXPECT_EQ(got.at("big"),
            "needs 2 idle GPUs; largest idle block on any node: 1; 0/2 nodes are available: 1 "
            "insufficient GPUs, 1 drained (n1)");
  EXPECT_EQ(cluster.node(0).gpu_free_milli, (std::vector<int32_t>{0, 1000}));  // a1 on n0

  // Without the explain step only refusals come back.
  ClusterState again = testing::MakeCluster(2, 2);
  r = profile->Run(again, ctx, /*explain=*/false);
  ASSERT_TRUE(r.ok());
  const auto quiet = ById(pending, *r);
  EXPECT_EQ(quiet.count("big"), 0u);
  EXPECT_EQ(quiet.count("env"), 0u);
  EXPECT_EQ(quiet.at("a1"), "started");
}

TEST(SchedulingProfile, ReservationAndStartsNameThePendingJobsNotTheAdmittedOnes) {
  ClusterState cluster = testing::MakeCluster(1, 2);
  std::vector<QueuedJob> running_jobs = {Job("r", "u", 0, {GpuTask(2)}, 100)};
  ASSERT_TRUE(cluster.Allocate(running_jobs[0].tasks[0], {0, {0, 1}}).ok());
  const std::vector<RunningJob> running = {{&running_jobs[0], 0, {{0, {0, 1}}}}};
  std::vector<QueuedJob> pending = {Job("held", "u", 1, {GpuTask(1)}, 10),
                                    Job("wide", "u", 2, {GpuTask(2)}, 50)};
  pending[0].admission.held_by = "u";
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  const std::vector<const QueuedJob*> occupying = {&running_jobs[0]};
  PassContext ctx;
  ctx.now_s = 40;
  ctx.pending = ptrs;
  ctx.running = running;
  ctx.occupying = occupying;
  auto r = Profile(StartRule::kEasyBackfill)->Run(cluster, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->reserved_index.has_value());
  EXPECT_EQ(*r->reserved_index, 1u);
  EXPECT_EQ(ById(pending, *r).at("wide"),
            "next in line; resources reserved from 60 s from now, when running jobs reach their "
            "time limits; 0/1 nodes are available: 1 insufficient GPUs");
}

// A draining node takes no new work, so what runs there never comes free for the head's
// reservation: it reserves where it can really start (n1, once b ends), and a long job
// that would take those GPUs does not backfill. Before, the head reserved n0 at a's end,
// the long job started on n1, and the head waited for both.
TEST(SchedulingProfile, AReservationIsNeverPlannedOnADrainingNode) {
  ClusterState cluster = testing::MakeCluster(2, 4);  // n0 drains
  std::vector<QueuedJob> running_jobs = {Job("a", "u", 0, {GpuTask(4)}, 600),
                                         Job("b", "u", 0, {GpuTask(2)}, 3600)};
  ASSERT_TRUE(cluster.Allocate(running_jobs[0].tasks[0], {0, {0, 1, 2, 3}}).ok());
  ASSERT_TRUE(cluster.Allocate(running_jobs[1].tasks[0], {1, {0, 1}}).ok());
  const std::vector<RunningJob> running = {{&running_jobs[0], 0, {{0, {0, 1, 2, 3}}}},
                                           {&running_jobs[1], 0, {{1, {0, 1}}}}};
  std::vector<QueuedJob> pending = {Job("head", "u", 1, {GpuTask(4)}, 100),
                                    Job("long", "u", 2, {GpuTask(2)}, 7200)};
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  const std::vector<const QueuedJob*> occupying = {&running_jobs[0], &running_jobs[1]};
  const std::vector<int32_t> draining = {0};
  PassContext ctx;
  ctx.pending = ptrs;
  ctx.running = running;
  ctx.occupying = occupying;
  ctx.draining = draining;
  ctx.plan_starts = 2;
  auto r = Profile(StartRule::kEasyBackfill)->Run(cluster, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->reserved_index.has_value());
  EXPECT_EQ(*r->reserved_index, 0u);
  EXPECT_EQ(r->reservation_start_s, 3600);
  EXPECT_TRUE(r->started.empty()) << ById(pending, *r).at("long");
  ASSERT_FALSE(r->planned_starts.empty());
  EXPECT_EQ(r->planned_starts[0].first, 0u);
  EXPECT_EQ(r->planned_starts[0].second.start_s, 3600);

  // A job that fits only on the draining node holds nobody back: the next one reserves.
  std::vector<QueuedJob> only_n0 = {Job("wide", "u", 1, {GpuTask(4)}, 100),
                                    Job("next", "u", 2, {GpuTask(4)}, 100)};
  only_n0[0].tasks[0].allowed_nodes = {"n0"};
  const std::vector<const QueuedJob*> ptrs2 = testing::Pointers(only_n0);
  ctx.pending = ptrs2;
  ctx.plan_starts = 0;
  ClusterState again = testing::MakeCluster(2, 4);
  ASSERT_TRUE(again.Allocate(running_jobs[0].tasks[0], {0, {0, 1, 2, 3}}).ok());
  ASSERT_TRUE(again.Allocate(running_jobs[1].tasks[0], {1, {0, 1}}).ok());
  r = Profile(StartRule::kEasyBackfill)->Run(again, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->reserved_index.has_value());
  EXPECT_EQ(*r->reserved_index, 1u);
  EXPECT_EQ(r->reservation_start_s, 3600);
}

// A fair queue between projects (the server's --fair-by project) says whose order a job
// waits in: its project's share, not its user's.
TEST(SchedulingProfile, AFairQueueByProjectSaysSoInTheReasonOfAJobWaitingItsTurn) {
  std::vector<QueuedJob> pending;
  pending.push_back(Job("big", "alice", 0, {GpuTask(3)}));  // never fits: blocks (strict)
  pending.back().project = "P";
  pending.push_back(Job("small", "bob", 1, {GpuTask(1)}));
  pending.back().project = "Q";
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  PassContext ctx;
  ctx.pending = ptrs;
  for (FairShareGroup group : {FairShareGroup::kUser, FairShareGroup::kProject}) {
    ProfileSpec spec;
    spec.placement_policy = "first-fit";
    spec.placements = &FirstFit();
    spec.pass.rule = StartRule::kStrict;
    spec.queue_policy = "fair";
    spec.queue_config.fair_group = group;
    auto profile = SchedulingProfile::Create(spec);
    ASSERT_TRUE(profile.ok()) << profile.status().ToString();
    ClusterState cluster = testing::MakeCluster(1, 2);
    auto r = (*profile)->Run(cluster, ctx);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(ById(pending, *r).at("small"),
              std::string("waiting for its turn: jobs ahead of it in the queue (") +
                  (group == FairShareGroup::kProject ? "fair-by-project" : "fair") +
                  " order) come first");
  }
}

TEST(SchedulingProfile, TheJobsACappedPassDidNotReachShareOneReason) {
  ClusterState cluster = testing::MakeCluster(1, 4);
  std::vector<QueuedJob> pending;
  for (int i = 0; i < 6; ++i) pending.push_back(Job("j" + std::to_string(i), "u", i, {GpuTask(1)}));
  const std::vector<const QueuedJob*> ptrs = testing::Pointers(pending);
  PassContext ctx;
  ctx.pending = ptrs;
  ProfileSpec spec;
  spec.queue_policy = "fifo";
  spec.placement_policy = "first-fit";
  spec.pass.max_starts = 2;
  spec.placements = &FirstFit();
  auto profile = SchedulingProfile::Create(spec);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  auto r = (*profile)->Run(cluster, ctx);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->capped);
  EXPECT_EQ(r->not_reached, (std::vector<size_t>{2, 3, 4, 5}));
  EXPECT_EQ(r->not_reached_reason, CappedReason(2));
  EXPECT_TRUE(r->reasons.empty());  // not one string per job
}

TEST(SchedulingProfile, UnknownPluginsAndPoliciesAreErrorsThatNameTheKnownOnes) {
  ProfileSpec spec;
  spec.gates = {"hold", "karma"};
  auto bad = SchedulingProfile::Create(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "unknown admission gate 'karma'; known gates: hold, dependency, earlier-attempt, "
            "array-throttle, project, quota");
  ProfileSpec twice;
  twice.filters = {"drain", "drain"};  // the same filter twice is allowed: two instances
  EXPECT_TRUE(SchedulingProfile::Create(twice).ok());
  twice.queue_policy = "lifo";
  EXPECT_EQ(SchedulingProfile::Create(twice).status().code(), StatusCode::kNotFound);
  ProfileSpec placement;
  placement.placement_policy = "nope";
  EXPECT_EQ(SchedulingProfile::Create(placement).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpupool::sched
