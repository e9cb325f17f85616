// The controller's scheduler loop (ControllerTest, controller_test.h): batched passes
// while the pool is full, freed resources planned at once, capped passes, and an unknown
// policy.

#include "controller/controller_test.h"
#include "controller/job_scheduler.h"

namespace gpupool::controller::controller_test {
namespace {

// The scheduler thread: submissions to a full pool wait for one batched pass, while freed
// resources are planned at once. It runs on the ManualClock: time moves only here.
TEST_F(ControllerTest, LoopBatchesArrivalsWhileFullButPlansFreedResourcesAtOnce) {
  ControllerOptions o;
  o.scheduler_period_us = 60'000'000;
  o.arrival_batch_us = 4'000'000;
  Restart(o);
  Register(1);
  c_->Start();
  // What the loop does without time moving, it does at once; this waits for it.
  auto eventually = [&](const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    return done();
  };
  // After each pass the loop leaves a short gap (at most 20 ms) before the next.
  auto end_gap = [&] {
    ASSERT_TRUE(clock_.WaitForWaiters(1));
    clock_.AdvanceMicros(20'000);
  };
  end_gap();  // after the pass the node's registration asked for
  Job a = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(eventually([&] { return Get(a.id).state == JobState::kAssigned; }));  // at once
  end_gap();
  Job b = c_->Submit(MakeJob(1), bob_).value();  // its pass starts nothing
  ASSERT_TRUE(eventually([&] { return !Get(b.id).pending_reason.empty(); }));
  EXPECT_EQ(Get(b.id).state, JobState::kPending);
  end_gap();
  Job cpu_only = c_->Submit(MakeJob(0), bob_).value();  // would fit, but is batched
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  clock_.AdvanceMicros(500'000);
  ASSERT_TRUE(clock_.WaitForWaiters(1));
  EXPECT_EQ(Get(cpu_only.id).state, JobState::kPending);
  EXPECT_TRUE(Get(cpu_only.id).pending_reason.empty());  // no pass has seen it
  a = Get(a.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(a, protocol::EventKind::kExited, 0)}).ok());
  // Well before the batch ends (no time passes): the freed GPU goes to b, and cpu_only
  // rides along.
  EXPECT_TRUE(eventually([&] { return Get(b.id).state == JobState::kAssigned; }));
  EXPECT_TRUE(eventually([&] { return Get(cpu_only.id).state == JobState::kAssigned; }));
  c_->Stop();
}

// Issue 31: --max-starts-per-pass. Capped passes, run one after the other, place the
// jobs one uncapped pass places, each on the same GPUs (the walk is the same up to each
// cap), under every start rule with fair share; the jobs a capped pass did not reach
// say so.
TEST_F(ControllerTest, CappedPassesPlaceWhatOneUncappedPassPlaces) {
  const int gpus[] = {1, 2, 1, 1, 2, 1, 4, 1, 2, 1};
  const int64_t limits[] = {60, 0, 600, 60, 30, 0, 60, 900, 20, 60};
  for (const char* rule : {"strict", "easy", "skip"}) {
    std::map<size_t, std::map<int64_t, std::vector<std::string>>> placed;  // cap -> job -> GPUs
    for (size_t cap : {size_t{0}, size_t{2}}) {
      SCOPED_TRACE(std::string(rule) + ", cap " + std::to_string(cap));
      store_ = OpenSqliteStore(":memory:");
      ControllerOptions o;
      o.start_rule = rule;
      o.max_starts_per_pass = cap;
      Restart(o);
      Register(4, {}, "n1");
      Register(4, {}, "n2");
      Register(4, {}, "n3");
      Job busy = MakeJob(3);  // three of n1's GPUs until it ends (no time limit)
      busy = c_->Submit(busy, root_).value();
      ASSERT_TRUE(c_->ScheduleOnce().ok());
      ASSERT_EQ(Get(busy.id).state, JobState::kAssigned);
      std::vector<int64_t> ids;
      for (size_t i = 0; i < std::size(gpus); ++i) {
        Job j = MakeJob(gpus[i]);
        j.time_limit_s = limits[i];
        ids.push_back(c_->Submit(j, i % 3 == 0 ? bob_ : alice_).value().id);
      }
      int passes = 0;
      for (size_t before = 0;; ++passes) {
        ASSERT_TRUE(c_->ScheduleOnce().ok());
        size_t now = 0;
        for (int64_t id : ids) now += Get(id).state == JobState::kAssigned ? 1 : 0;
        if (cap > 0) {
          EXPECT_LE(now - before, cap);
        }
        if (passes == 0 && cap > 0) {
          // The last job of the queue was not reached by the first capped pass.
          EXPECT_EQ(Get(ids.back())
                        .pending_reason.rfind(
                            "waiting for its turn: the last pass started its maximum of 2 jobs", 0),
                    0u)
              << Get(ids.back()).pending_reason;
        }
        if (now == before && passes > 0) break;
        before = now;
        ASSERT_LT(passes, 20);
      }
      size_t assigned = 0;
      for (int64_t id : ids) assigned += Get(id).state == JobState::kAssigned ? 1 : 0;
      if (cap > 0) {
        EXPECT_GE(static_cast<size_t>(passes), (assigned + cap - 1) / cap);  // the cap did cut
      }
      for (int64_t id : ids) {
        const Job j = Get(id);
        if (j.state != JobState::kAssigned) continue;
        for (const jobs::TaskPlacement& p : j.placement) {
          for (const std::string& uuid : p.gpu_uuids)
            placed[cap][id].push_back(p.node + "/" + uuid);
        }
      }
    }
    SCOPED_TRACE(rule);
    EXPECT_GE(placed[0].size(), 5u);
    EXPECT_EQ(placed[2], placed[0]);
  }
}

// After a capped pass the loop runs the next at once: neither the period nor an arrival
// batch is waited for. On the ManualClock only the 20 ms gaps after each pass pass.
TEST_F(ControllerTest, LoopRunsTheNextPassAtOnceAfterACappedOne) {
  ControllerOptions o;
  o.scheduler_period_us = 60'000'000;
  o.arrival_batch_us = 4'000'000;
  o.max_starts_per_pass = 1;
  Restart(o);
  Register(4);
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(c_->Submit(MakeJob(1), alice_).value().id);
  c_->Start();
  auto assigned = [&] {
    int n = 0;
    for (int64_t id : ids) n += Get(id).state == JobState::kAssigned ? 1 : 0;
    return n;
  };
  // What the loop does without time moving, it does at once; this waits for it.
  auto eventually = [&](const std::function<bool()>& done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    return done();
  };
  // Each pass places one job and is followed by a gap of at most 20 ms.
  for (int n = 1; n <= 3; ++n) {
    ASSERT_TRUE(eventually([&] { return assigned() >= n; })) << n << " passes";
    ASSERT_TRUE(clock_.WaitForWaiters(1));
    clock_.AdvanceMicros(20'000);
  }
  EXPECT_EQ(assigned(), 3);
  c_->Stop();
}

TEST_F(ControllerTest, UnknownPolicyIsAConfigurationError) {
  ControllerOptions o;
  o.placement_policy = "nonsense";
  auto c = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(c.ok());
  // Named as the flag that sets it (ValidateControllerOptions), with the policies known.
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("--policy: unknown placement policy 'nonsense'"),
            std::string::npos)
      << c.status().message();
}

}  // namespace
}  // namespace gpupool::controller::controller_test
