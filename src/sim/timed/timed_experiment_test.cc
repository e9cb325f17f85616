#include "sim/timed/timed_experiment.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>

#include "sched/rng.h"
#include "sim/timed/cluster_spec.h"
#include "sim/timed/timed_metrics.h"
#include "sim/timed/timed_report.h"
#include "sim/timed/timed_test_util.h"

namespace gpupool::sim {
namespace {

using testing::Cluster;
using testing::FirstFitRegistry;
using testing::TJob;

TimedOptions Options(const std::string& queue = "fifo",
                     sched::StartRule rule = sched::StartRule::kStrict) {
  TimedOptions o;
  o.queue_policy = queue;
  o.start_rule = rule;
  o.placement_policy = "first-fit";
  o.placement_registry = &FirstFitRegistry();
  return o;
}

std::map<std::string, JobRecord> ById(const TimedRun& run) {
  std::map<std::string, JobRecord> m;
  for (const JobRecord& j : run.jobs) m[j.id] = j;
  return m;
}

TEST(TimedExperiment, FifoOnOneNodeGivesTheHandComputedSchedule) {
  // Times are relative to the first submission (1000).
  std::vector<TraceJob> jobs = {TJob("a", "u", 1000, 100, 4), TJob("b", "u", 1010, 50, 2),
                                TJob("c", "u", 1020, 10, 2)};
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, Options());
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->origin_s, 1000);
  auto j = ById(*run);
  EXPECT_EQ(j["a"].start_s, 0);
  EXPECT_EQ(j["b"].start_s, 100);
  EXPECT_EQ(j["c"].start_s, 100);
  EXPECT_EQ(j["b"].end_s, 150);
  EXPECT_EQ(j["c"].end_s, 110);
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  EXPECT_EQ(s.finished, 3u);
  EXPECT_EQ(s.makespan_s, 150);
  EXPECT_DOUBLE_EQ(s.delay_s.mean, (0 + 90 + 80) / 3.0);
  EXPECT_DOUBLE_EQ(s.jct_s.max, 140);
  // 4 GPUs busy for 110 s, then 2 for 40 s, of 150 s.
  EXPECT_NEAR(s.mean_gpu_alloc_pct, 100.0 * (4 * 110 + 2 * 40) / (4.0 * 150), 1e-9);
  EXPECT_DOUBLE_EQ(s.peak_gpu_alloc_pct, 100);
}

std::map<std::string, JobRecord> RunHole(sched::StartRule rule, int64_t c_limit) {
  std::vector<TraceJob> jobs = {TJob("a", "u", 0, 100, 2, 1, 100), TJob("b", "u", 1, 10, 4, 1, 10),
                                TJob("c", "u", 2, c_limit, 2, 1, c_limit)};
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, Options("fifo", rule));
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  return ById(*run);
}

TEST(TimedExperiment, EasyBackfillFillsTheHoleWithoutDelayingTheHead) {
  auto strict = RunHole(sched::StartRule::kStrict, 50);
  EXPECT_EQ(strict["b"].start_s, 100);
  EXPECT_EQ(strict["c"].start_s, 110);
  auto easy = RunHole(sched::StartRule::kEasyBackfill, 50);
  EXPECT_EQ(easy["b"].start_s, 100);
  EXPECT_EQ(easy["c"].start_s, 2);  // backfilled: done at 52, before b's reservation at 100
}

TEST(TimedExperiment, EasyBackfillProtectsTheHeadWhereSkippingDoesNot) {
  auto skip = RunHole(sched::StartRule::kSkipBlocked, 500);
  EXPECT_EQ(skip["c"].start_s, 2);
  EXPECT_EQ(skip["b"].start_s, 502);  // the big job starves behind the long one
  auto easy = RunHole(sched::StartRule::kEasyBackfill, 500);
  EXPECT_EQ(easy["b"].start_s, 100);
  EXPECT_EQ(easy["c"].start_s, 110);
}

TEST(TimedExperiment, FairShareLetsTheLightUserIn) {
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 4; ++i) jobs.push_back(TJob(fmt::format("h{}", i), "heavy", 0, 100, 4));
  jobs.push_back(TJob("l", "light", 1, 100, 4));
  auto fifo = RunTimedExperiment(Cluster("2x4"), jobs, Options("fifo"));
  auto fair = RunTimedExperiment(Cluster("2x4"), jobs, Options("fair"));
  ASSERT_TRUE(fifo.ok() && fair.ok());
  EXPECT_EQ(ById(*fifo)["l"].start_s, 200);
  EXPECT_EQ(ById(*fair)["l"].start_s, 100);
  TimedSummary sf = Summarize(*fifo, sched::FairShareGroup::kUser);
  TimedSummary sr = Summarize(*fair, sched::FairShareGroup::kUser);
  EXPECT_GT(sr.jain_index, sf.jain_index);
}

TEST(TimedExperiment, UnplaceableJobsAreCountedAndTheRestRuns) {
  std::vector<TraceJob> jobs = {TJob("ok", "u", 0, 10, 2), TJob("too-wide", "u", 1, 10, 8),
                                TJob("gang", "u", 2, 10, 4, 2),
                                TJob("gang-too-big", "u", 3, 10, 4, 3)};
  jobs[0].tasks[0].gpu_models = {"V100"};
  auto run = RunTimedExperiment(Cluster("2x4:V100"), jobs, Options());
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["ok"].fate, JobFate::kFinished);
  EXPECT_EQ(j["gang"].fate, JobFate::kFinished);
  EXPECT_EQ(j["too-wide"].fate, JobFate::kNeverFits);
  EXPECT_NE(j["too-wide"].reason.find("8 GPUs"), std::string::npos) << j["too-wide"].reason;
  EXPECT_EQ(j["gang-too-big"].fate, JobFate::kNeverFits);
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  EXPECT_EQ(s.never_fits, 2u);
  EXPECT_EQ(s.finished, 2u);
  TimedRunInfo info;
  EXPECT_NE(TimedReportText(info, *run, s).find("too-wide (never_fits)"), std::string::npos);

  std::vector<TraceJob> wrong_model = {TJob("t4", "u", 0, 10, 1)};
  wrong_model[0].tasks[0].gpu_models = {"T4"};
  auto r2 = RunTimedExperiment(Cluster("2x4:V100"), wrong_model, Options());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->jobs[0].fate, JobFate::kNeverFits);
}

TEST(TimedExperiment, TimeLimitStopsAJob) {
  std::vector<TraceJob> jobs = {TJob("long", "u", 0, 100, 1, 1, 30)};
  auto run = RunTimedExperiment(Cluster("1x1"), jobs, Options());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->jobs[0].end_s, 30);
  EXPECT_EQ(run->jobs[0].fate, JobFate::kTimedOut);
}

TEST(TimedExperiment, UnknownPoliciesAreErrors) {
  std::vector<TraceJob> jobs = {TJob("a", "u", 0, 1, 1)};
  TimedOptions o = Options();
  o.placement_policy = "nope";
  EXPECT_EQ(RunTimedExperiment(Cluster("1x1"), jobs, o).status().code(), StatusCode::kNotFound);
  o = Options("lifo");
  EXPECT_EQ(RunTimedExperiment(Cluster("1x1"), jobs, o).status().code(), StatusCode::kNotFound);
}

std::vector<TraceJob> RandomWorkload(uint64_t seed, int n) {
  sched::Rng rng(seed);
  std::vector<TraceJob> jobs;
  int64_t t = 0;
  for (int i = 0; i < n; ++i) {
    t += static_cast<int64_t>(rng.Uniform(30));
    const int gpus = 1 << rng.Uniform(4);  // 1, 2, 4, 8
    const int tasks = gpus == 8 && rng.Uniform(3) == 0 ? 2 : 1;
    const int64_t duration = 1 + static_cast<int64_t>(rng.Uniform(600));
    jobs.push_back(TJob(fmt::format("j{}", i), fmt::format("user{}", rng.Uniform(4)), t, duration,
                        gpus, tasks, duration * 2));
    if (rng.Uniform(5) == 0) {  // a fractional job
      jobs.back().tasks.resize(1);
      jobs.back().tasks[0].num_gpu = 1;
      jobs.back().tasks[0].gpu_milli = 250 + static_cast<int>(rng.Uniform(500));
    }
  }
  return jobs;
}

TEST(TimedExperiment, SameSeedSameOutputAndInvariantsHold) {
  const std::vector<TraceJob> jobs = RandomWorkload(7, 300);
  for (const char* queue : {"fifo", "priority", "sjf", "fair"}) {
    for (sched::StartRule rule : {sched::StartRule::kStrict, sched::StartRule::kEasyBackfill,
                                  sched::StartRule::kSkipBlocked}) {
      TimedOptions o = Options(queue, rule);
      o.seed = 3;
      auto a = RunTimedExperiment(Cluster("4x8"), jobs, o);
      auto b = RunTimedExperiment(Cluster("4x8"), jobs, o);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
      TimedSummary sa = Summarize(*a, sched::FairShareGroup::kUser);
      TimedSummary sb = Summarize(*b, sched::FairShareGroup::kUser);
      TimedRunInfo info;
      EXPECT_EQ(DumpJson(TimedReportJson(info, *a, sa)), DumpJson(TimedReportJson(info, *b, sb)));
      EXPECT_EQ(JobsCsv(*a), JobsCsv(*b));
      EXPECT_EQ(sa.finished + sa.timed_out, jobs.size()) << queue;
      for (const JobRecord& j : a->jobs) {
        EXPECT_GE(j.start_s, j.submit_s);
        EXPECT_EQ(j.end_s - j.start_s, j.duration_s) << j.id;  // limits are 2x durations
      }
      for (const AllocationPoint& p : a->timeline) {
        EXPECT_LE(p.gpu_milli_used, a->capacity.gpu_milli);
        EXPECT_GE(p.gpu_milli_used, 0);
      }
      EXPECT_EQ(a->timeline.back().gpu_milli_used, 0);  // everything left in the end
    }
  }
}

// The simulator runs the live scheduler's admission gates: an array throttle, limits
// and holds change the schedule as they would on a pool.
TEST(TimedExperiment, ArrayThrottleRunsAtMostNElementsAtOnce) {
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(TJob(fmt::format("e{}", i), "u", 0, 100, 1));
    jobs.back().array = "A";
    jobs.back().array_max_running = 2;
  }
  jobs.push_back(TJob("other", "u", 10, 100, 1));  // not an element: the GPUs are free
  auto run = RunTimedExperiment(Cluster("1x8"), jobs, Options());
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["e0"].start_s, 0);
  EXPECT_EQ(j["e1"].start_s, 0);
  EXPECT_EQ(j["e2"].start_s, 100);  // waits for an earlier element to end
  EXPECT_EQ(j["e3"].start_s, 100);
  EXPECT_EQ(j["other"].start_s, 10);
  for (TraceJob& t : jobs) t.array_max_running = 0;  // the same trace without the throttle
  run = RunTimedExperiment(Cluster("1x8"), jobs, Options());
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(ById(*run)["e3"].start_s, 0);
}

TEST(TimedExperiment, LimitsHoldAUserAtTheirLimitAndOthersGoOn) {
  std::vector<TraceJob> jobs = {TJob("a0", "alice", 0, 100, 2), TJob("a1", "alice", 0, 50, 2),
                                TJob("a2", "alice", 0, 100, 2), TJob("b0", "bob", 0, 100, 2),
                                TJob("huge", "carol", 0, 100, 4)};
  TimedOptions o = Options("fifo", sched::StartRule::kSkipBlocked);
  o.limits.users["alice"].max_gpus = 4;
  o.limits.users["carol"].max_gpus = 2;  // less than her job needs: it never starts
  auto run = RunTimedExperiment(Cluster("1x8"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["a0"].start_s, 0);
  EXPECT_EQ(j["a1"].start_s, 0);
  EXPECT_EQ(j["a2"].start_s, 50);  // when a1 ends, alice is under her 4 GPUs again
  EXPECT_EQ(j["b0"].start_s, 0);   // 2 GPUs were idle for bob
  EXPECT_EQ(j["huge"].fate, JobFate::kNeverStarted);
  o.limits = {};
  run = RunTimedExperiment(Cluster("1x8"), jobs, o);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(ById(*run)["a2"].start_s, 0);  // without limits alice takes 6 GPUs at once
}

TEST(TimedExperiment, HeldJobsStartWhenReleased) {
  std::vector<TraceJob> jobs = {TJob("held", "u", 0, 100, 1), TJob("free", "u", 5, 100, 1)};
  jobs[0].held_for_s = 30;
  auto run = RunTimedExperiment(Cluster("1x2"), jobs, Options());
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["free"].start_s, 5);
  EXPECT_EQ(j["held"].start_s, 30);  // released 30 s after its submission
  EXPECT_EQ(j["held"].end_s, 130);
}

TEST(TimedExperiment, EmptyWorkloadIsFine) {
  auto run = RunTimedExperiment(Cluster("1x1"), {}, Options());
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(run->jobs.empty());
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  EXPECT_EQ(s.makespan_s, 0);
}

TEST(TimedExperiment, ProgressReportsReachTheTotal) {
  const std::vector<TraceJob> jobs = RandomWorkload(5, 50);
  TimedOptions o = Options();
  size_t last = 0, calls = 0;
  o.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, jobs.size());
    EXPECT_GE(done, last);
    last = done;
    ++calls;
  };
  ASSERT_TRUE(RunTimedExperiment(Cluster("2x8"), jobs, o).ok());
  EXPECT_EQ(last, jobs.size());
  EXPECT_GT(calls, 1u);
}

}  // namespace
}  // namespace gpupool::sim

namespace gpupool::sim {
namespace {

// Preemption by hand: bob fills the one 4-GPU node with two 2-GPU jobs (b1 at 0, b2 at
// 20); alice's 2-GPU job comes at 30. Two groups: fair share 2 GPUs; bob holds 4. With a
// 10 s minimum run time both of bob's jobs may go; the newest (b2) does, at 30, and alice
// starts at once. b2 kept its checkpoint at 10 s of run time (interval 10 of its 10 run
// seconds), goes back to the queue and runs its remaining 90 s when alice's job ends.
TEST(TimedExperiment, PreemptionStopsTheNewestOverShareJobForAnUnderShareOne) {
  std::vector<TraceJob> jobs = {TJob("b1", "bob", 0, 1000, 2), TJob("b2", "bob", 20, 100, 2),
                                TJob("a", "alice", 30, 50, 2)};
  TimedOptions o = Options();
  o.preemption = true;
  o.preempt.min_runtime_s = 10;
  o.checkpoint_interval_s = 10;
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["a"].start_s, 30);
  EXPECT_EQ(j["a"].waited_s, 0);
  EXPECT_EQ(j["a"].end_s, 80);
  EXPECT_EQ(j["b2"].preemptions, 1);
  EXPECT_EQ(j["b2"].lost_s, 0);     // 10 s run, checkpointed at 10
  EXPECT_EQ(j["b2"].start_s, 20);   // its first start
  EXPECT_EQ(j["b2"].waited_s, 50);  // queued again from 30 to 80
  EXPECT_EQ(j["b2"].end_s, 170);    // the 90 s left, from 80
  EXPECT_EQ(j["b2"].fate, JobFate::kFinished);
  EXPECT_EQ(j["b1"].preemptions, 0);
  EXPECT_EQ(run->preemptions, 1u);
  EXPECT_DOUBLE_EQ(run->preempted_gpu_s, 0);
  TimedSummary s = Summarize(*run, sched::FairShareGroup::kUser);
  // b2's delay counts both waits; its run time is its 100 s of work.
  EXPECT_DOUBLE_EQ(s.delay_s.mean, (0 + 50 + 0) / 3.0);
  const std::string json = DumpJson(TimedReportJson(TimedRunInfo{}, *run, s));
  EXPECT_NE(json.find("\"preemptions\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"preempted_gpu_hours\":0"), std::string::npos) << json;

  // Without a checkpoint b2 loses its 10 s (2 GPUs: 20 GPU-seconds) and runs 100 s again;
  // without preemption alice waits for b2.
  o.checkpoint_interval_s = 0;
  run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok());
  j = ById(*run);
  EXPECT_EQ(j["b2"].lost_s, 10);
  EXPECT_EQ(j["b2"].end_s, 180);
  EXPECT_DOUBLE_EQ(run->preempted_gpu_s, 20);
  o.preemption = false;
  run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(ById(*run)["a"].start_s, 120);
  EXPECT_EQ(run->preemptions, 0u);
  EXPECT_EQ(
      DumpJson(TimedReportJson(TimedRunInfo{}, *run, Summarize(*run, sched::FairShareGroup::kUser)))
          .find("preemptions"),
      std::string::npos);
}

// Inside its minimum run time a job is never chosen: alice waits.
TEST(TimedExperiment, AJobInsideItsMinimumRunTimeIsNotPreempted) {
  std::vector<TraceJob> jobs = {TJob("b1", "bob", 0, 1000, 2), TJob("b2", "bob", 20, 100, 2),
                                TJob("a", "alice", 30, 50, 2)};
  TimedOptions o = Options();
  o.preemption = true;
  o.preempt.min_runtime_s = 600;
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(ById(*run)["a"].start_s, 120);
  EXPECT_EQ(run->preemptions, 0u);
}

}  // namespace
}  // namespace gpupool::sim

namespace gpupool::sim {
namespace {

// The wait budget (TimedOptions::victim_wait_budget_s). On one 4-GPU node bob's b0
// (2 GPUs, 15 s) and b1 (2 GPUs) start at 0; his b2 (2 GPUs) waits for b0 and starts at
// 15 (delay 15 s). Alice's 2-GPU job comes at 30: bob holds 4 GPUs against a share of 2,
// so b1 and b2 are candidates, and b2, the newest, is the victim unless protected.
std::vector<TraceJob> VictimOrderJobs() {
  return {TJob("b0", "bob", 0, 15, 2), TJob("b1", "bob", 0, 1000, 2), TJob("b2", "bob", 0, 1000, 2),
          TJob("a", "alice", 30, 50, 2)};
}

// Which of bob's jobs was stopped, with `o` plus preemption after 10 s.
std::string VictimUnder(TimedOptions o) {
  o.preemption = true;
  o.preempt.min_runtime_s = 10;
  auto run = RunTimedExperiment(Cluster("1x4"), VictimOrderJobs(), o);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok()) return "";
  auto j = ById(*run);
  EXPECT_EQ(j["a"].start_s, 30);
  EXPECT_EQ(run->preemptions, 1u);
  for (const char* id : {"b1", "b2"}) {
    if (j[id].preemptions == 1) return id;
  }
  return "none";
}

TEST(TimedExperiment, AJobThatWaitedPastTheBudgetIsNoVictim) {
  TimedOptions o = Options();
  o.victim_wait_budget_s = 10;  // b2 waited 15 s: b1, older, goes instead
  EXPECT_EQ(VictimUnder(o), "b1");
  o.victim_wait_budget_s = 15;  // not above the budget
  EXPECT_EQ(VictimUnder(o), "b2");
}

// Bob's b1 and b2 (2 GPUs each) fill the node from 0; alice's a1 at 30 stops b2 (the
// newest: the larger id), which starts again at 50 when a1 ends; her a2 at 100 stops b2
// again (started at 50), or b1 when a job preempted once is no victim any more.
TEST(TimedExperiment, AJobPreemptedMaxTimesIsNoVictimAgain) {
  std::vector<TraceJob> jobs = {TJob("b1", "bob", 0, 1000, 2), TJob("b2", "bob", 0, 1000, 2),
                                TJob("a1", "alice", 30, 20, 2), TJob("a2", "alice", 100, 20, 2)};
  TimedOptions o = Options();
  o.preemption = true;
  o.preempt.min_runtime_s = 10;
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  auto j = ById(*run);
  EXPECT_EQ(j["a2"].start_s, 100);
  EXPECT_EQ(j["b2"].preemptions, 2);
  EXPECT_EQ(j["b1"].preemptions, 0);
  o.victim_max_preemptions = 1;
  run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  j = ById(*run);
  EXPECT_EQ(j["a2"].start_s, 100);
  EXPECT_EQ(j["b2"].preemptions, 1);
  EXPECT_EQ(j["b1"].preemptions, 1);
}

}  // namespace
}  // namespace gpupool::sim

namespace gpupool::sim {
namespace {

// Where a victim re-enters the order (TimedOptions::preempt_resume), under sjf. Bob's b1
// and b2 (2 GPUs, time limit 2000 s) fill one 4-GPU node from 0; alice's a (2 GPUs, 50 s)
// at 30 stops b2 (the newest), which keeps 30 s of work (checkpoints every 10 s). Bob's
// c (2 GPUs, 100 s, limit `c_limit`) comes at 40 and waits (bob is over his share: no
// preemption). When a ends at 80, b2 and c wait for the same 2 GPUs; the other 2 free up
// when b1 ends at 1000. Returns when b2 and c start their last runs.
std::pair<int64_t, int64_t> ResumeStarts(PreemptResume resume, int64_t c_limit) {
  std::vector<TraceJob> jobs = {
      TJob("b1", "bob", 0, 1000, 2, 1, 2000), TJob("b2", "bob", 0, 1000, 2, 1, 2000),
      TJob("a", "alice", 30, 50, 2, 1, 100), TJob("c", "bob", 40, 100, 2, 1, c_limit)};
  TimedOptions o = Options("sjf");
  o.preemption = true;
  o.preempt.min_runtime_s = 10;
  o.checkpoint_interval_s = 10;
  o.preempt_resume = resume;
  auto run = RunTimedExperiment(Cluster("1x4"), jobs, o);
  EXPECT_TRUE(run.ok()) << run.status().ToString();
  if (!run.ok()) return {-1, -1};
  auto j = ById(*run);
  EXPECT_EQ(j["a"].start_s, 30);
  EXPECT_EQ(j["b2"].preemptions, 1);
  EXPECT_EQ(run->preemptions, 1u);
  // b2 runs its 970 s left in its last run; c ran its 100 s.
  return {j["b2"].end_s - 970, j["c"].end_s - 100};
}

TEST(TimedExperiment, AVictimResumesAtItsPlaceFirstOrByItsRemainingWork) {
  // c's limit 200 is shorter than b2's 2000: sjf starts c at 80, b2 when c ends.
  EXPECT_EQ(ResumeStarts(PreemptResume::kQueue, 200), std::make_pair(int64_t{180}, int64_t{80}));
  // Ahead of every job never preempted: b2 at 80, c when b1 ends.
  EXPECT_EQ(ResumeStarts(PreemptResume::kFirst, 200), std::make_pair(int64_t{80}, int64_t{1000}));
  // Bob alone has jobs at 80: his share is the node, and b2 fits it.
  EXPECT_EQ(ResumeStarts(PreemptResume::kFirstUnderShare, 200),
            std::make_pair(int64_t{80}, int64_t{1000}));
  // By its remaining work b2's key is 2000 - 30 = 1970: still after c's 200, but before
  // a limit of 1990 (which goes first at its place: 1990 < 2000).
  EXPECT_EQ(ResumeStarts(PreemptResume::kRemaining, 200),
            std::make_pair(int64_t{180}, int64_t{80}));
  EXPECT_EQ(ResumeStarts(PreemptResume::kQueue, 1990), std::make_pair(int64_t{180}, int64_t{80}));
  EXPECT_EQ(ResumeStarts(PreemptResume::kRemaining, 1990),
            std::make_pair(int64_t{80}, int64_t{1000}));
}

}  // namespace
}  // namespace gpupool::sim
