#include "controller/pool_accounting.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/telemetry_service.h"
#include "controller/usage.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

gpu::NodeInfo NodeOf(const std::string& name, int gpus) {
  gpu::NodeInfo n;
  n.hostname = name;
  for (int i = 0; i < gpus; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "NVIDIA A100-SXM4-80GB";
    g.uuid = "GPU-" + name + "-" + std::to_string(i);
    g.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
    g.memory_total_bytes = uint64_t{80} << 30;
    g.compute_capability = gpu::ComputeCapability{8, 0};
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    n.gpus.push_back(g);
  }
  return n;
}

// Issue 31: the accounting's runs add the ends the controller fed them (no store read
// after the first), and their totals are those of a run that reads every ended job from
// the store, after each step of a random sequence of submissions, starts, ends of every
// kind, cancels and node losses over several hours (past the kept ids' expiry).
TEST(PoolAccountingTest, FedRunsMakeTheTotalsOfAFullReadOverRandomSequences) {
  ManualClock clock{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store = store::OpenSqliteStore(":memory:").value();
  ControllerOptions options;
  options.node_timeout_us = 600'000'000;
  std::unique_ptr<Controller> c = Controller::Create(store.get(), &clock, options).value();
  TelemetryService telemetry(c.get(), store.get(), &clock);
  PoolAccounting fed(c.get(), store.get(), &clock, &telemetry);
  const Caller root{"root", 0, 0, true};
  const std::vector<Caller> users = {{"alice", 1000, 1000, false}, {"bob", 1001, 1001, false}};
  const std::vector<std::string> nodes = {"n1", "n2", "n3"};
  auto register_node = [&](const std::string& name) {
    protocol::Registration r;
    r.node = name;
    r.info = NodeOf(name, 4);
    r.version = protocol::kVersion;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c->RegisterNode(r, "").ok());
  };
  for (const std::string& n : nodes) register_node(n);
  std::mt19937 rng(31);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  ASSERT_TRUE(fed.Fold().ok());  // the first run reads the store
  for (int step = 0; step < 400; ++step) {
    clock.AdvanceMicros(int64_t{1'000'000} * (1 + pick(900)));
    store::JobFilter active;
    active.active_only = true;
    std::vector<Job> jobs = c->List(active, root).value();
    const int what = pick(10);
    if (what < 3 || jobs.empty()) {
      Job j;
      j.command = {"true"};
      j.request.gpus = 1 + pick(2);
      j.request.gpu_milli = j.request.gpus == 1 && pick(2) == 0 ? 500 : 1000;
      j.request.cpu_milli = 100;
      j.project = pick(3) == 0 ? "" : "p" + std::to_string(pick(2));
      const Result<Job> submitted = c->Submit(j, users[static_cast<size_t>(pick(2))]);
      ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    } else if (what < 5) {
      ASSERT_TRUE(c->ScheduleOnce().ok());
    } else if (what < 9) {
      const Job& j = jobs[static_cast<size_t>(pick(static_cast<int>(jobs.size())))];
      if (j.placement.empty() || what == 8) {
        (void)c->Cancel(j.id, root);
        continue;
      }
      protocol::Event e;
      e.job_id = j.id;
      e.attempt = j.attempt;
      e.time_us = clock.NowMicros();
      e.kind = j.state == JobState::kAssigned ? protocol::EventKind::kStarted
                                              : protocol::EventKind::kExited;
      e.exit_code = pick(3) == 0 ? 1 : 0;
      e.timed_out = pick(10) == 0;
      const std::string& node = j.placement[0].node;
      (void)c->ApplyEvents(node, EventBatch{node, {e}, {}});
    } else {
      clock.AdvanceMicros(options.node_timeout_us + 1);  // every node lost, then back
      ASSERT_TRUE(c->SweepNodes().ok());
      for (const std::string& n : nodes) register_node(n);
    }
    ASSERT_TRUE(fed.Fold().ok());
    // A new accounting's first run reads every ended job from the store (after the run
    // above took what was fed: nothing ended since).
    PoolAccounting full(c.get(), store.get(), &clock, &telemetry);
    ASSERT_TRUE(full.Fold().ok());
    const PoolAccounting::EndedTotals want = full.ended_totals();
    const PoolAccounting::EndedTotals got = fed.ended_totals();
    ASSERT_EQ(got.by_state, want.by_state) << "step " << step;
    ASSERT_EQ(got.gpu_hours.size(), want.gpu_hours.size()) << "step " << step;
    for (const auto& [key, hours] : want.gpu_hours) {
      ASSERT_NEAR(got.gpu_hours.at(key), hours, 1e-9 * hours) << key.first << " " << key.second;
    }
  }
  EXPECT_EQ(fed.store_reads(), 1);
  const PoolAccounting::EndedTotals totals = fed.ended_totals();
  int64_t ended = 0;
  for (const auto& [state, n] : totals.by_state) ended += n;
  EXPECT_GT(ended, 50);
  EXPECT_GE(totals.by_state.size(), 3u);  // several kinds of end
}

// Whole-script confusables after a restart: alice's jobs charged "coco" and ended; the
// restarted controller loads active jobs only, so bob's all-Cyrillic "\u0441\u043e\u0441\u043e"
// would list like hers. The accounting's first run reads the ended jobs from the store and
// hands their projects to the controller, which then refuses the look-alike.
TEST(PoolAccountingTest, TheProjectsOfJobsEndedBeforeARestartAreKnownAfterTheFirstRun) {
  ManualClock clock{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store = store::OpenSqliteStore(":memory:").value();
  const Caller alice{"alice", 1000, 1000, false};
  const Caller bob{"bob", 1001, 1001, false};
  Job job;
  job.command = {"true"};
  job.project = "coco";
  {
    std::unique_ptr<Controller> before = Controller::Create(store.get(), &clock, {}).value();
    const Result<Job> submitted = before->Submit(job, alice);
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    ASSERT_TRUE(before->Cancel(submitted->id, alice).ok());
  }
  std::unique_ptr<Controller> c = Controller::Create(store.get(), &clock, {}).value();
  TelemetryService telemetry(c.get(), store.get(), &clock);
  PoolAccounting accounting(c.get(), store.get(), &clock, &telemetry);
  ASSERT_TRUE(accounting.Fold().ok());
  job.project = "\xd1\x81\xd0\xbe\xd1\x81\xd0\xbe";  // сосо
  const Result<Job> look_alike = c->Submit(job, bob);
  ASSERT_FALSE(look_alike.ok());
  EXPECT_EQ(look_alike.status().message().rfind("project: the project name prints like", 0), 0u)
      << look_alike.status().ToString();
  job.project = "coco";
  EXPECT_TRUE(c->Submit(job, bob).ok());
}

// A --requeue job ran 10 hours before its node was lost, then 1 hour: the allocated
// counter keeps the lost attempt's GPU-hours while the job waits (no running or ended job
// holds them then) and after its second attempt ends, and usage counts both: 11 hours,
// not the last attempt's 1.
TEST(PoolAccountingTest, ALostAttemptOfARequeuedJobStaysCounted) {
  constexpr int64_t kHourUs = int64_t{3600} * 1'000'000;
  ManualClock clock{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store = store::OpenSqliteStore(":memory:").value();
  ControllerOptions options;
  options.node_timeout_us = 60'000'000;
  std::unique_ptr<Controller> c = Controller::Create(store.get(), &clock, options).value();
  TelemetryService telemetry(c.get(), store.get(), &clock);
  PoolAccounting accounting(c.get(), store.get(), &clock, &telemetry);
  const Caller root{"root", 0, 0, true};
  auto register_node = [&] {
    protocol::Registration r;
    r.node = "n1";
    r.info = NodeOf("n1", 1);
    r.version = protocol::kVersion;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c->RegisterNode(r, "").ok());
  };
  auto event = [&](int64_t id, protocol::EventKind kind) {
    const Job j = c->Get(id, root).value();
    protocol::Event e;
    e.job_id = id;
    e.attempt = j.attempt;
    e.kind = kind;
    e.time_us = clock.NowMicros();
    e.exit_code = 0;
    ASSERT_TRUE(c->ApplyEvents("n1", EventBatch{"n1", {e}, {}}).ok());
  };
  auto allocated_s = [&] {
    const std::string series =
        R"(gpupool_allocated_gpu_seconds_total{user="alice",project="vision"} )";
    const std::string text = accounting.Scrape().value();
    const size_t at = text.find(series);
    return at == std::string::npos ? 0.0 : std::stod(text.substr(at + series.size()));
  };
  register_node();
  Job job;
  job.command = {"true"};
  job.project = "vision";
  job.request.gpus = 1;
  job.request.cpu_milli = 100;
  job.requeue = true;
  const int64_t id = c->Submit(job, {"alice", 1000, 1000, false}).value().id;
  ASSERT_TRUE(c->ScheduleOnce().ok());
  event(id, protocol::EventKind::kStarted);
  clock.AdvanceMicros(10 * kHourUs);
  ASSERT_TRUE(c->SweepNodes().ok());  // n1 stopped answering: requeued
  ASSERT_EQ(c->Get(id, root)->state, JobState::kPending);
  EXPECT_DOUBLE_EQ(allocated_s(), 10 * 3600.0);
  register_node();
  ASSERT_TRUE(c->ScheduleOnce().ok());
  ASSERT_EQ(c->Get(id, root)->attempt, 2);
  event(id, protocol::EventKind::kStarted);
  clock.AdvanceMicros(kHourUs);
  event(id, protocol::EventKind::kExited);
  const Job ended = c->Get(id, root).value();
  ASSERT_EQ(ended.state, JobState::kSucceeded);
  EXPECT_DOUBLE_EQ(allocated_s(), 11 * 3600.0);
  EXPECT_DOUBLE_EQ(JobGpuHours(ended, 0, INT64_MAX, clock.NowMicros()), 11.0);
  const std::vector<UsageRow> rows =
      ComputeUsage({ended}, 0, clock.NowMicros(), clock.NowMicros(), "project");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].gpu_hours, 11.0);
}

}  // namespace
}  // namespace gpupool::controller
