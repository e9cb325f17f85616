#include "controller/job_scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "controller/sched_input.h"

namespace gpupool::controller {
namespace {

TEST(GpuModelKeyTest, ShortNames) {
  EXPECT_EQ(GpuModelKey("NVIDIA H100 80GB HBM3"), "H100");
  EXPECT_EQ(GpuModelKey("NVIDIA A100-SXM4-80GB"), "A100");
  EXPECT_EQ(GpuModelKey("Tesla V100-SXM2-32GB"), "V100");
  EXPECT_EQ(GpuModelKey("AMD Instinct MI250X"), "MI250X");
  EXPECT_EQ(GpuModelKey("NVIDIA GeForce RTX 4090"), "4090");
  EXPECT_EQ(GpuModelKey(""), "GPU");
}

gpu::NodeInfo MpsNode(const std::string& host, const std::vector<std::string>& enforcement) {
  gpu::NodeInfo n;
  n.hostname = host;
  for (size_t i = 0; i < enforcement.size(); ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = static_cast<int>(i);
    g.name = "NVIDIA H100 80GB HBM3";
    g.uuid = host + "-GPU-" + std::to_string(i);
    g.memory_total_bytes = uint64_t{80} << 30;
    g.enforcement = enforcement[i];
    n.gpus.push_back(g);
  }
  return n;
}

jobs::Job Share(int64_t id, uint32_t uid, int milli, const std::string& node = "",
                const std::string& uuid = "") {
  jobs::Job j;
  j.id = id;
  j.uid = uid;
  j.user = "u" + std::to_string(uid);
  j.command = {"true"};
  j.request.gpus = 1;
  j.request.gpu_milli = milli;
  j.request.cpu_milli = 100;
  if (!node.empty()) {
    j.state = jobs::JobState::kRunning;
    j.placement = {jobs::TaskPlacement{node, {0}, {uuid}, milli}};
  }
  return j;
}

// Issue 28: GPUs whose node states MPS are single-owner unless the admin allows several
// users; a share is owned by its uid + 1; running shares hold their GPU's owner.
TEST(SchedInputTest, MpsGpusAreSingleOwnerAndSharesOwnedByTheirUser) {
  const gpu::NodeInfo a = MpsNode("a", {"mps", "none"}), b = MpsNode("b", {"mps", ""});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}},
                                        {"b", &b, 64000, 256000, false, {}}};
  SchedInput in(nodes);
  EXPECT_EQ(in.cluster.node(0).single_owner_gpus, 0b01u);
  EXPECT_EQ(in.cluster.node(1).single_owner_gpus, 0b01u);
  SchedInput multi(nodes, MpsSharing::kUsers);
  EXPECT_FALSE(multi.cluster.has_single_owner_gpus());

  EXPECT_EQ(in.TaskFor(Share(1, 1000, 300))->owner, 1001);
  jobs::Job by_memory = Share(2, 0, 1000);
  by_memory.request.gpu_memory_bytes = uint64_t{20} << 30;
  EXPECT_EQ(in.TaskFor(by_memory)->owner, 1);             // root's share: uid 0 is owner 1
  EXPECT_EQ(in.TaskFor(Share(3, 1000, 1000))->owner, 0);  // a whole GPU is no share
  jobs::Job two = Share(4, 1000, 1000);
  two.request.gpus = 2;
  EXPECT_EQ(in.TaskFor(two)->owner, 0);

  // Running: uid 1000's share holds GPU 0 of a. A share of uid 1001 already running there
  // (placed under --mps-multi-user) is still counted, without an owner.
  const jobs::Job first = Share(10, 1000, 300, "a", "a-GPU-0");
  const jobs::Job second = Share(11, 1001, 200, "a", "a-GPU-0");
  in.AddJobs({&first, &second}, {});
  EXPECT_EQ(in.cluster.OwnerOf(0, 0), 1001);
  EXPECT_EQ(in.cluster.node(0).gpu_free_milli[0], 500);
  EXPECT_EQ(in.running.size(), 2u);
}

// A GPU whose memory discovery could not read (0, docs/node-schema.md) takes no share
// sized by memory: it could not be checked there. With no known size anywhere the
// submission is refused saying so (it said "the largest GPU here has 0.0 GiB").
TEST(SchedInputTest, AShareSizedByMemoryNeedsAGpuOfKnownMemory) {
  gpu::NodeInfo unknown = MpsNode("u", {"", ""});
  for (gpu::GpuInfo& g : unknown.gpus) g.memory_total_bytes = 0;
  const gpu::NodeInfo known = MpsNode("k", {""});
  jobs::Job by_memory = Share(1, 1000, 1000);
  by_memory.request.gpu_memory_bytes = uint64_t{20} << 30;
  SchedInput alone({{"u", &unknown, 64000, 256000, false, {}}});
  Result<sched::Task> refused = alone.TaskFor(by_memory);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no GPU here has a known memory size"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(alone.TaskFor(Share(2, 1000, 250)).ok());  // a share by fraction is placed
  SchedInput mixed(
      {{"u", &unknown, 64000, 256000, false, {}}, {"k", &known, 64000, 256000, false, {}}});
  Result<sched::Task> task = mixed.TaskFor(by_memory);
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  EXPECT_FALSE(mixed.cluster.Fits(0, *task));
  EXPECT_TRUE(mixed.cluster.Fits(1, *task));
}

// Under --mps-one-size a share is owned by its user and its size: MPS holds each client to
// the largest share among its server's, so only shares of one size share an MPS GPU (each
// then held to its own). A different fraction, a memory ask or another user is another
// owner; the same ask is the same owner; a whole GPU is none.
TEST(SchedInputTest, UnderOneSizeASharesSizeIsPartOfItsOwner) {
  const gpu::NodeInfo a = MpsNode("a", {"mps"});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}}};
  SchedInput in(nodes, MpsSharing::kOneSize);
  EXPECT_EQ(in.cluster.node(0).single_owner_gpus, 0b1u);
  const int64_t quarter = in.TaskFor(Share(1, 1000, 250))->owner;
  EXPECT_EQ(in.TaskFor(Share(2, 1000, 250))->owner, quarter);
  EXPECT_NE(in.TaskFor(Share(3, 1000, 500))->owner, quarter);
  EXPECT_NE(in.TaskFor(Share(4, 1001, 250))->owner, quarter);
  jobs::Job by_memory = Share(5, 1000, 250);
  by_memory.request.gpu_memory_bytes = uint64_t{20} << 30;
  EXPECT_NE(in.TaskFor(by_memory)->owner, quarter);
  EXPECT_EQ(in.TaskFor(Share(6, 1000, 1000))->owner, 0);
  EXPECT_EQ(MpsOwner(1000, 250, 0, MpsSharing::kOneSize), quarter);
  // Owners of different users never meet, whatever the sizes; uid 2^32-1 fits.
  EXPECT_GT(MpsOwner(4294967295u, 999, ~uint64_t{0}, MpsSharing::kOneSize), 0);
  EXPECT_NE(MpsOwner(0, 250, 0, MpsSharing::kOneSize) >> 30,
            MpsOwner(1, 250, 0, MpsSharing::kOneSize) >> 30);
  EXPECT_EQ(MpsOwner(1000, 250, 0, MpsSharing::kOneUser), 1001);

  // A running share of another size on the GPU (placed without --mps-one-size) holds it:
  // the quarter waits for it like another user's share.
  const jobs::Job half = Share(10, 1000, 500, "a", "a-GPU-0");
  in.AddJobs({&half}, {});
  EXPECT_EQ(in.cluster.OwnerOf(0, 0), in.TaskFor(half)->owner);
}

// A 4-GPU job on node a, started `ran_s` before kNowS.
constexpr int64_t kNowS = 1'700'000'000;
jobs::Job Whole(int64_t id, const std::string& user, int priority, int64_t ran_s = -1) {
  jobs::Job j;
  j.id = id;
  j.user = user;
  j.uid = 1000;
  j.command = {"true"};
  j.priority = priority;
  j.request.gpus = 4;
  j.request.cpu_milli = 100;
  j.submit_time_us = (kNowS - 7200) * 1'000'000 + id;
  if (ran_s >= 0) {
    j.state = jobs::JobState::kRunning;
    j.start_time_us = (kNowS - ran_s) * 1'000'000;
    j.placement = {
        jobs::TaskPlacement{"a", {0, 1, 2, 3}, {"a-GPU-0", "a-GPU-1", "a-GPU-2", "a-GPU-3"}, 1000}};
  }
  return j;
}

// Issue 28 item 5: the live scheduler picks victims with the simulator's rule, among
// --preemptible jobs past their own minimum run time, and not again while they stop.
TEST(JobSchedulerPreemptionTest, APreemptibleJobPastItsMinimumRunTimeMakesRoom) {
  const gpu::NodeInfo a = MpsNode("a", {"", "", "", ""});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}}};
  Result<std::unique_ptr<JobScheduler>> s = JobScheduler::Create("default", "fair", "easy");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  jobs::Job victim = Whole(1, "alice", 0, /*ran_s=*/700);
  victim.preemptible = true;
  victim.preempt_grace_s = 30;
  const jobs::Job urgent = Whole(2, "alice", 10);
  Result<ScheduleResult> plan = (*s)->Plan({&victim, &urgent}, nodes, kNowS);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(plan->starts.empty());  // not before the victim has ended
  ASSERT_EQ(plan->preemptions.size(), 1u);
  EXPECT_EQ(plan->preemptions[0].victim, 1);
  EXPECT_EQ(plan->preemptions[0].by_job, 2);
  EXPECT_EQ(plan->preemptions[0].grace_s, 30);
  EXPECT_EQ(plan->preemptions[0].why, "of higher priority (10 > 0)");
  EXPECT_NE(plan->pending_reasons[2].find("preempting job 1, which stops within 30 s"),
            std::string::npos)
      << plan->pending_reasons[2];

  // Inside its own minimum run time (or the default 600 s), not preemptible, of the same
  // priority, or being stopped already: nothing.
  jobs::Job young = victim;
  young.min_runtime_s = 3600;
  jobs::Job fresh = Whole(1, "alice", 0, /*ran_s=*/500);
  fresh.preemptible = true;
  jobs::Job fixed = Whole(1, "alice", 0, 700);
  jobs::Job stopping = victim;
  stopping.preempted_by = 2;
  stopping.cancel_requested = true;
  for (const jobs::Job* v : {&young, &fresh, &fixed, &stopping}) {
    plan = (*s)->Plan({v, &urgent}, nodes, kNowS);
    ASSERT_TRUE(plan.ok());
    EXPECT_TRUE(plan->preemptions.empty()) << "victim " << v->min_runtime_s;
  }
  const jobs::Job peer = Whole(2, "bob", 0);
  plan = (*s)->Plan({&victim, &peer}, nodes, kNowS);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->preemptions.empty());  // bob is not below his share: alice's is all
  // A priority is the user's own choice (--priority): bob's highest stops none of alice's
  // jobs (the red team's attack); only fair share preempts across users.
  jobs::Job pushy = Whole(2, "bob", 1'000'000);
  plan = (*s)->Plan({&victim, &pushy}, nodes, kNowS);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->preemptions.empty());
  // Off: never.
  (*s)->set_preemption(std::nullopt);
  plan = (*s)->Plan({&victim, &urgent}, nodes, kNowS);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->preemptions.empty());
}

// The red team's starvation: bob's four waiting jobs, each too large for his share and
// so able to stop nobody, came first in the order (bob and carol both held nothing, bob
// submitted first) and took every place a pass weighs; carol, below her share, was never
// weighed and alice's preemptible job, over her share, was never stopped for her.
TEST(JobSchedulerPreemptionTest, OneUsersWaitingJobsDoNotKeepAnotherUsersFromBeingWeighed) {
  const gpu::NodeInfo a = MpsNode("a", {"", "", "", ""});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}}};
  Result<std::unique_ptr<JobScheduler>> s = JobScheduler::Create("default", "fair", "easy");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  jobs::Job victim = Whole(1, "alice", 0, /*ran_s=*/700);
  victim.preemptible = true;
  std::vector<jobs::Job> bobs;
  for (int64_t id = 2; id <= 6; ++id) bobs.push_back(Whole(id, "bob", 0));
  jobs::Job carol = Whole(7, "carol", 0);
  carol.request.gpus = 1;
  std::vector<const jobs::Job*> active = {&victim};
  for (const jobs::Job& b : bobs) active.push_back(&b);
  active.push_back(&carol);
  Result<ScheduleResult> plan = (*s)->Plan(active, nodes, kNowS);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->preemptions.size(), 1u);
  EXPECT_EQ(plan->preemptions[0].victim, 1);
  EXPECT_EQ(plan->preemptions[0].by_job, 7);
  EXPECT_EQ(plan->preemptions[0].why, "of user carol, below its fair share of GPUs");
}

// Issue 30 (squeue --start): with plan_starts, pending jobs queued behind running jobs
// with known time limits get their planned starts in queue order; a job behind one
// without a time limit gets a note instead; held jobs are not planned.
TEST(JobSchedulerStartPlanTest, QueuedJobsGetTheirStartsInQueueOrder) {
  const gpu::NodeInfo a = MpsNode("a", {"", "", "", ""});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}}};
  Result<std::unique_ptr<JobScheduler>> s = JobScheduler::Create("default", "fifo", "easy");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  jobs::Job running = Whole(1, "alice", 0, /*ran_s=*/100);
  running.time_limit_s = 600;  // ends at kNowS + 500
  jobs::Job big = Whole(2, "bob", 0);
  big.time_limit_s = 300;
  jobs::Job mid = Whole(3, "bob", 0);
  mid.request.gpus = 2;
  mid.time_limit_s = 300;
  jobs::Job endless = Whole(4, "carol", 0);
  endless.request.gpus = 2;
  jobs::Job last = Whole(5, "carol", 0);
  jobs::Job held = Whole(6, "carol", 0);
  held.request.gpus = 1;
  held.held_by = "carol";
  const std::vector<const jobs::Job*> active = {&running, &big, &mid, &endless, &last, &held};
  Result<ScheduleResult> plan = (*s)->Plan(active, nodes, kNowS, {}, {}, /*plan_starts=*/100);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->start_estimates_us, (std::map<int64_t, int64_t>{{2, (kNowS + 500) * 1'000'000},
                                                                  {3, (kNowS + 800) * 1'000'000},
                                                                  {4, (kNowS + 800) * 1'000'000}}));
  EXPECT_EQ(plan->start_notes,
            (std::map<int64_t, std::string>{{5, "a job in its way has no time limit"}}));
  // Without plan_starts: the EASY reservation's start only, as every pass has it.
  plan = (*s)->Plan(active, nodes, kNowS);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->start_estimates_us, (std::map<int64_t, int64_t>{{2, (kNowS + 500) * 1'000'000}}));
  EXPECT_TRUE(plan->start_notes.empty());
}

// Issue 31: a job's conversion is kept from pass to pass and made again when the job
// changes: a hold and its release, a priority change, a requeue, its request; jobs the
// pass's feed names (a dependency) are converted each pass.
TEST(ConversionCacheTest, AChangedJobIsConvertedAgain) {
  const gpu::NodeInfo a = MpsNode("a", {"", "", "", ""});
  const std::vector<SchedNode> nodes = {{"a", &a, 64000, 256000, false, {}}};
  Result<std::unique_ptr<JobScheduler>> made =
      JobScheduler::Create("default", "priority", "strict");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  JobScheduler& s = **made;
  // Both alice's: a priority orders only its user's own jobs.
  jobs::Job first = Whole(1, "alice", 0), second = Whole(2, "alice", 0);
  auto plan = [&](std::vector<const jobs::Job*> active, const AdmissionFeed& feed = {}) {
    Result<ScheduleResult> r = s.Plan(active, nodes, kNowS, feed);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<int64_t> started;
    for (const auto& [id, placement] : r->starts) started.push_back(id);
    return std::make_pair(started, r->pending_reasons);
  };
  EXPECT_EQ(plan({&first, &second}).first, std::vector<int64_t>{1});
  EXPECT_EQ(s.conversion_cache().converted, 2u);
  EXPECT_EQ(plan({&first, &second}).first, std::vector<int64_t>{1});
  EXPECT_EQ(s.conversion_cache().converted, 0u);  // nothing changed
  // Held: the other starts, and the held one says why.
  first.held_by = "alice";
  ++first.version;
  auto [started, reasons] = plan({&first, &second});
  EXPECT_EQ(started, std::vector<int64_t>{2});
  EXPECT_EQ(s.conversion_cache().converted, 1u);
  EXPECT_EQ(reasons[1].rfind("held by", 0), 0u) << reasons[1];
  first.held_by.clear();  // released
  ++first.version;
  EXPECT_EQ(plan({&first, &second}).first, std::vector<int64_t>{1});
  EXPECT_EQ(s.conversion_cache().converted, 1u);
  // A priority change reorders them.
  second.priority = 5;
  ++second.version;  // a change steps it (JobScheduler takes a job by address and version)
  EXPECT_EQ(plan({&first, &second}).first, std::vector<int64_t>{2});
  EXPECT_EQ(s.conversion_cache().converted, 1u);
  // A request no node can meet (a GPU model there is none of): it cannot run anywhere.
  second.request.gpu_models = {"A100"};
  ++second.version;
  auto unplaceable = plan({&first, &second});
  EXPECT_EQ(unplaceable.first, std::vector<int64_t>{1});
  EXPECT_EQ(unplaceable.second[2].rfind("cannot run on any node", 0), 0u) << unplaceable.second[2];
  second.request.gpu_models.clear();
  ++second.version;
  // Requeued: a job that ran is pending again and takes the node once it is free.
  jobs::Job running = Whole(3, "carol", 9, /*ran_s=*/10);
  EXPECT_TRUE(plan({&running, &first, &second}).first.empty());
  jobs::Job requeued = running;
  requeued.state = jobs::JobState::kPending;
  requeued.placement.clear();
  requeued.start_time_us = 0;
  ++requeued.version;
  EXPECT_EQ(plan({&requeued, &first, &second}).first, std::vector<int64_t>{3});
  EXPECT_EQ(s.conversion_cache().converted, 1u);
  // The feed is the pass's: a job waiting for a dependency does not start, and starts
  // once it no longer waits (its conversion was not kept with the wait).
  AdmissionFeed waiting;
  waiting.waiting[2] = "waits for job 7 (RUNNING) to end";
  auto waited = plan({&second}, waiting);
  EXPECT_TRUE(waited.first.empty());
  EXPECT_EQ(waited.second[2], "waits for job 7 (RUNNING) to end");
  EXPECT_EQ(plan({&second}).first, std::vector<int64_t>{2});
  // Jobs no longer active are dropped from the cache.
  EXPECT_EQ(s.conversion_cache().jobs.size(), 1u);
}

// The admin's QoS: the project's defaults first, else the user's own, else every user's;
// a job's own --min-runtime and --grace win; interactive jobs are never made preemptible.
TEST(PreemptionDefaultsTest, ProjectThenUserThenDefault) {
  Limits limits;
  limits.user_default.preemptible = true;
  limits.user_default.preempt_grace_s = 60;
  limits.users["alice"].preemptible = false;
  limits.projects["batch"].preemptible = true;
  limits.projects["batch"].min_runtime_s = 1800;
  jobs::Job j = Whole(1, "bob", 0);
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_TRUE(j.preemptible);
  EXPECT_EQ(j.preempt_grace_s, 60);
  EXPECT_EQ(j.min_runtime_s, 0);  // none set: the server's
  j = Whole(2, "alice", 0);
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_FALSE(j.preemptible);
  j.project = "batch";
  j.preempt_grace_s = 5;  // (its own, were it preemptible)
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_TRUE(j.preemptible);
  EXPECT_EQ(j.min_runtime_s, 1800);
  EXPECT_EQ(j.preempt_grace_s, 5);
  jobs::Job run = Whole(3, "bob", 0);
  run.interactive = "run";
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &run).ok());
  EXPECT_FALSE(run.preemptible);
}

// The red team's attacks on the admin's QoS: a job the admin makes preemptible asking
// `--preemptible=false` (no effect), a minimum run time of a year (never a victim), or
// any preemptible job asking a grace of a day (its GPUs kept a day after its SIGTERM,
// its preemptor waiting): refused, naming the field and the bound. Less is allowed.
TEST(PreemptionDefaultsTest, AJobMayAskLessThanThePoolNeverMore) {
  Limits limits;
  limits.projects["batch"].preemptible = true;
  limits.projects["batch"].min_runtime_s = 1800;
  PreemptionSettings server;  // 600 s minimum, 120 s grace
  jobs::Job j = Whole(1, "bob", 0);
  j.project = "batch";
  j.preemptible = false;
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, server, &j).ok());
  EXPECT_TRUE(j.preemptible);
  jobs::Job dodge = Whole(2, "bob", 0);
  dodge.project = "batch";
  dodge.preemptible = true;
  dodge.min_runtime_s = int64_t{365} * 24 * 3600;
  Status s = ApplyPreemptionDefaults(limits, server, &dodge);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("min_runtime_s (--min-runtime): 31536000 s is longer than the "
                             "1800 s"),
            std::string::npos)
      << s.message();
  dodge.min_runtime_s = 1800;  // the admin's own: fine
  EXPECT_TRUE(ApplyPreemptionDefaults(limits, server, &dodge).ok());
  // Of its own accord a job may wait longer before it can be a victim...
  jobs::Job own = Whole(3, "bob", 0);
  own.preemptible = true;
  own.min_runtime_s = 3600;
  EXPECT_TRUE(ApplyPreemptionDefaults(limits, server, &own).ok());
  // ...but no preemptible job keeps its GPUs past the pool's grace.
  own.preempt_grace_s = 24 * 3600;
  s = ApplyPreemptionDefaults(limits, server, &own);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("preempt_grace_s (--grace): 86400 s is longer than the 120 s"),
            std::string::npos)
      << s.message();
  dodge.preempt_grace_s = 121;
  EXPECT_EQ(ApplyPreemptionDefaults(limits, server, &dodge).code(), StatusCode::kInvalidArgument);
  limits.projects["batch"].preempt_grace_s = 600;  // the admin's longer grace: up to it
  EXPECT_TRUE(ApplyPreemptionDefaults(limits, server, &dodge).ok());
  own.preempt_grace_s = 120;
  EXPECT_TRUE(ApplyPreemptionDefaults(limits, server, &own).ok());
}

// An admin's entry of 0 s (the API takes it; `limits set` refuses it) was the bound of a
// job's own --grace, so every --grace was refused as "longer than the 0 s grace", while
// a job without one got the server's 120 s: 0 in an entry is no value, as in a job.
TEST(PreemptionDefaultsTest, AnEntryOfZeroSecondsIsTheServersDefault) {
  Limits limits;
  limits.users["bob"].preemptible = true;
  limits.users["bob"].min_runtime_s = 0;
  limits.users["bob"].preempt_grace_s = 0;
  PreemptionSettings server;  // 600 s minimum, 120 s grace
  jobs::Job j = Whole(1, "bob", 0);
  j.preempt_grace_s = 30;
  j.min_runtime_s = 300;
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, server, &j).ok());
  EXPECT_EQ(j.preempt_grace_s, 30);
  EXPECT_EQ(j.min_runtime_s, 300);
  j = Whole(2, "bob", 0);
  j.preempt_grace_s = 121;  // over the server's: still refused, naming the real bound
  Status s = ApplyPreemptionDefaults(limits, server, &j);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("121 s is longer than the 120 s grace"), std::string::npos)
      << s.message();
  // The message names a command that exists.
  EXPECT_NE(s.message().find("`gpupool limits set --grace`"), std::string::npos) << s.message();
  j = Whole(3, "bob", 0);
  j.min_runtime_s = 601;
  s = ApplyPreemptionDefaults(limits, server, &j);
  EXPECT_NE(s.message().find("601 s is longer than the 600 s"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("limits show"), std::string::npos) << s.message();
}

// The third red team: under enforce-projects none (or known) anyone may name any
// project, and its entry came first: bob, whom the admin made preemptible after 10 min
// with a 30 s grace, named project 'prod' (unpreemptible, or a day's minimum run time
// and an hour's grace, for its team) and was never preempted, or kept his GPUs an hour.
// Another project's entry now binds a non-member only where it is stricter.
TEST(PreemptionDefaultsTest, NamingAnotherTeamsProjectDoesNotUndoTheUsersQos) {
  Limits limits;
  limits.users["bob"].preemptible = true;
  limits.users["bob"].min_runtime_s = 600;
  limits.users["bob"].preempt_grace_s = 30;
  limits.projects["prod"].preemptible = false;
  limits.projects["prod"].members = {"alice"};
  limits.projects["long"].preemptible = true;
  limits.projects["long"].min_runtime_s = 86400;
  limits.projects["long"].preempt_grace_s = 3600;
  limits.projects["short"].min_runtime_s = 60;
  jobs::Job j = Whole(1, "bob", 0);
  j.project = "prod";
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_TRUE(j.preemptible);
  EXPECT_EQ(j.min_runtime_s, 600);
  EXPECT_EQ(j.preempt_grace_s, 30);
  j = Whole(2, "bob", 0);
  j.project = "long";
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_EQ(j.min_runtime_s, 600);
  EXPECT_EQ(j.preempt_grace_s, 30);
  j.min_runtime_s = 86400;  // asked outright: over the user's bound
  EXPECT_EQ(ApplyPreemptionDefaults(limits, {}, &j).code(), StatusCode::kInvalidArgument);
  j = Whole(3, "bob", 0);
  j.project = "short";  // stricter than his own: it binds him too
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_EQ(j.min_runtime_s, 60);
  // Its members get their team's entry, as before.
  j = Whole(4, "alice", 0);
  j.project = "prod";
  limits.users["alice"].preemptible = true;
  ASSERT_TRUE(ApplyPreemptionDefaults(limits, {}, &j).ok());
  EXPECT_FALSE(j.preemptible);
}

// Capped passes over a queue that changes at random (starts run, jobs end, jobs arrive,
// holds come and go): after each pass the reasons the scheduler keeps, and the ones its
// results handed out applied in turn, are those a fresh scheduler gives for the same jobs
// (the jobs a capped pass does not reach share one reason, kept as one).
TEST(KeptReasonsTest, CappedPassesKeepWhatAFreshSchedulerGives) {
  std::vector<gpu::NodeInfo> infos(3);
  std::vector<SchedNode> nodes;
  for (size_t n = 0; n < infos.size(); ++n) {
    infos[n].hostname = "n" + std::to_string(n);
    for (int g = 0; g < 4; ++g) {
      gpu::GpuInfo gi;
      gi.vendor = gpu::Vendor::kNvidia;
      gi.index = g;
      gi.name = "NVIDIA H100 80GB HBM3";
      gi.uuid = infos[n].hostname + "-GPU-" + std::to_string(g);
      gi.memory_total_bytes = uint64_t{80} << 30;
      infos[n].gpus.push_back(gi);
    }
    nodes.push_back({infos[n].hostname, &infos[n], 64000, 256000, false, {}});
  }
  auto make = [] {
    return JobScheduler::Create("default", "fair", "skip", MpsSharing::kOneUser, 3);
  };
  auto kept = make();
  ASSERT_TRUE(kept.ok());
  std::mt19937 rng(5);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::map<int64_t, std::unique_ptr<jobs::Job>> jobs;
  int64_t next_id = 1;
  std::map<int64_t, std::string> shown;  // the results' reasons applied in turn
  for (int step = 0; step < 150; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (int i = pick(8); i > 0; --i) {
      auto j = std::make_unique<jobs::Job>();
      j->id = next_id++;
      j->version = 1;
      j->uid = 1000 + static_cast<uint32_t>(pick(3));
      j->user = "u" + std::to_string(j->uid);
      j->request.gpus = 1 + pick(3);
      j->submit_time_us = (1000 + j->id) * 1'000'000;
      j->time_limit_s = 100;
      jobs[j->id] = std::move(j);
    }
    for (auto it = jobs.begin(); it != jobs.end();) {
      jobs::Job& j = *it->second;
      if (j.state == jobs::JobState::kRunning && pick(4) == 0) {
        it = jobs.erase(it);
        continue;
      }
      if (j.state == jobs::JobState::kPending && pick(10) == 0) {
        j.held_by = j.held_by.empty() ? j.user : "";
        ++j.version;
      }
      ++it;
    }
    std::vector<const jobs::Job*> active;
    for (const auto& [id, j] : jobs) active.push_back(j.get());
    const int64_t now = 2000 + step;
    auto r = (*kept)->Plan(active, nodes, now);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto fresh = make();
    ASSERT_TRUE(fresh.ok());
    auto f = (*fresh)->Plan(active, nodes, now);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(r->starts, f->starts);
    EXPECT_EQ(r->capped, f->capped);
    EXPECT_EQ(r->no_room, f->no_room);
    for (const auto& [id, why] : r->pending_reasons) shown[id] = why;
    for (int64_t id : r->reasons_dropped) shown.erase(id);
    EXPECT_EQ(shown, f->pending_reasons);
    std::map<int64_t, std::pair<std::string, bool>> want, got;
    for (const auto& [id, k] : (*fresh)->pending_reasons()) want[id] = {k.why, k.resources};
    for (const auto& [id, k] : (*kept)->pending_reasons()) got[id] = {k.why, k.resources};
    EXPECT_EQ(got, want);
    for (const auto& [id, placement] : r->starts) {
      jobs::Job& j = *jobs.at(id);
      j.state = jobs::JobState::kRunning;
      j.placement = placement;
      j.start_time_us = now * 1'000'000;
      ++j.version;
    }
  }
}

}  // namespace
}  // namespace gpupool::controller
