// MIG instances in the controller (issue 28 item 1, docs/sharing.md): a share is granted
// the smallest idle instance that holds its memory, by the instance's MIG- UUID; the
// launch order lets the job reach its GPU's node and its instance's cap nodes only; a
// whole-GPU job never gets a GPU in MIG mode; the node view names who holds each
// instance; an out-of-service GPU in MIG mode takes its instances with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/controller.h"
#include "controller/pool_accounting.h"
#include "controller/sched_input.h"
#include "controller/telemetry_service.h"
#include "controller/usage.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller {
namespace mig_test {

using jobs::Job;
using jobs::JobState;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// GPU 0 in MIG mode (3g.40gb, 1g.10gb, 1g.10gb), GPU 1 not; both 80 GiB A100s.
gpu::NodeInfo MigNode() {
  gpu::NodeInfo n;
  n.hostname = "n1";
  for (int i = 0; i < 2; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "NVIDIA A100-SXM4-80GB";
    g.uuid = "GPU-" + std::to_string(i);
    g.memory_total_bytes = 80 * kGiB;
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    n.gpus.push_back(g);
  }
  n.gpus[0].mig_enabled = true;
  n.gpus[0].enforcement = "mig";
  n.gpus[0].mig_devices = {
      {"MIG-big", "3g.40gb", 2, 0, 40 * kGiB, {"/dev/nvidia-caps/nvidia-cap21"}},
      {"MIG-s1", "1g.10gb", 9, 0, 10 * kGiB, {"/dev/nvidia-caps/nvidia-cap84"}},
      {"MIG-s2", "1g.10gb", 10, 0, 10 * kGiB, {"/dev/nvidia-caps/nvidia-cap93"}}};
  n.gpus[1].mig_enabled = false;
  n.gpus[1].enforcement = "none";
  return n;
}

TEST(SchedInputMigTest, InstancesAreWholeOnlyDevicesWithTheirMemory) {
  const gpu::NodeInfo info = MigNode();
  const std::vector<SchedNode> nodes = {{"n1", &info, 64000, 256000, false, {}}};
  SchedInput in(nodes);
  const sched::NodeState& n = in.cluster.node(0);
  ASSERT_EQ(n.num_gpus(), 4);  // three instances, then GPU 1
  EXPECT_EQ(n.whole_only_gpus, 0b0111u);
  EXPECT_EQ(n.device_memory_mib, (std::vector<int64_t>{40960, 10240, 10240, 81920}));
  EXPECT_EQ(n.gpu_memory_mib, 81920);  // the GPUs', which a share's part is of
  // A running share on instance MIG-s2 holds it whole.
  Job running;
  running.id = 5;
  running.command = {"true"};
  running.state = JobState::kRunning;
  running.request.gpus = 1;
  running.request.gpu_memory_bytes = 8 * kGiB;
  running.request.gpu_milli = 100;
  running.placement = {jobs::TaskPlacement{"n1", {0}, {"MIG-s2"}, 100}};
  in.AddJobs({&running}, {});
  ASSERT_EQ(in.running.size(), 1u);
  EXPECT_EQ(in.cluster.node(0).gpu_free_milli, (std::vector<int32_t>{1000, 1000, 0, 1000}));
  EXPECT_EQ(in.TaskFor(running)->gpu_memory_mib, 8192);
  // A placement on device 1 is named by the instance's UUID and its GPU's index.
  sched::QueuedJob q;
  q.tasks = {*in.TaskFor(running)};
  const auto tp = in.ToTaskPlacements(q, {sched::Placement{0, {1}}});
  EXPECT_EQ(tp[0].gpu_uuids, std::vector<std::string>{"MIG-s1"});
  EXPECT_EQ(tp[0].gpu_indices, std::vector<int>{0});
}

// A report's instances without a UUID, or with one another device has, are not
// scheduled: nothing could grant them.
TEST(SchedInputMigTest, InstancesWithoutAUuidOfTheirOwnAreLeftOut) {
  gpu::NodeInfo info = MigNode();
  info.gpus[0].mig_devices[1].uuid = "";
  info.gpus[0].mig_devices[2].uuid = "MIG-big";
  const std::vector<SchedDevice> devices = SchedDevicesOf(info);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].mig, 0);
  EXPECT_EQ(devices[1].mig, -1);
  EXPECT_EQ(devices[1].gpu, 1u);
}

TEST(SchedInputMigTest, AGpuOutOfServiceTakesItsInstances) {
  const gpu::NodeInfo info = MigNode();
  const std::vector<SchedNode> nodes = {
      {"n1", &info, 64000, 256000, false, {{"GPU-0", "cordoned: Xid 95"}}}};
  SchedInput in(nodes);
  in.AddJobs({}, {});
  EXPECT_EQ(in.cluster.node(0).gpu_free_milli, (std::vector<int32_t>{0, 0, 0, 1000}));
}

class ControllerMigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions o;
    o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
    auto c = Controller::Create(store_.get(), &clock_, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c).value();
    protocol::Registration r;
    r.node = "n1";
    r.info = MigNode();
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  Job Submit(int gpus, uint64_t gpu_memory_bytes) {
    return SubmitAs(alice_, gpus, gpu_memory_bytes);
  }
  // `gpu_milli`: a --gpu-share (1000: none).
  Job SubmitAs(const Caller& who, int gpus, uint64_t gpu_memory_bytes, int gpu_milli = 1000) {
    Job j;
    j.command = {"train"};
    j.request.gpus = gpus;
    j.request.cpu_milli = 100;
    j.request.gpu_memory_bytes = gpu_memory_bytes;
    j.request.gpu_milli = gpu_milli;
    return c_->Submit(j, who).value();
  }
  Job Get(int64_t id) { return c_->Get(id, root_).value(); }
  Event Ev(const Job& j, protocol::EventKind kind) {
    Event e;
    e.job_id = j.id;
    e.attempt = j.attempt;
    e.kind = kind;
    e.time_us = clock_.NowMicros();
    if (kind == protocol::EventKind::kExited) e.exit_code = 0;
    return e;
  }
  void Apply(const Job& j, protocol::EventKind kind) {
    ASSERT_TRUE(c_->ApplyEvents("n1", EventBatch{"n1", {Ev(Get(j.id), kind)}, {}}).ok());
  }

  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  Caller alice_{"alice", 1000, 1000, false};
  Caller bob_{"bob", 1001, 1001, false};
  Caller carol_{"carol", 1002, 1002, false};
  Caller root_{"root", 0, 0, true};
};

// The charge rule (docs/sharing.md, "MIG instances"): a 1 MiB ask granted a 1g.10gb
// instance of an 80 GiB GPU holds an eighth of the GPU's memory and is charged that, 0.125
// GPU, not the 0.001 it asked for: on its placement (kept with the job), in its GPU-hours
// (usage) and in /metrics' allocated GPU-seconds.
TEST_F(ControllerMigTest, A1MibAskOnAnInstanceIsChargedTheInstance) {
  const Job tiny = Submit(1, uint64_t{1} << 20);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job got = Get(tiny.id);
  ASSERT_EQ(got.placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-s1"});
  EXPECT_EQ(got.placement[0].gpu_milli, 1);  // the share as asked, as the job sees it
  EXPECT_EQ(got.placement[0].charged_milli, 125);
  EXPECT_DOUBLE_EQ(jobs::PlacedGpus(got.placement[0]), 0.125);
  ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());
  Apply(tiny, protocol::EventKind::kStarted);
  clock_.AdvanceMicros(int64_t{3600} * 1'000'000);
  Apply(tiny, protocol::EventKind::kExited);
  got = Get(tiny.id);
  ASSERT_EQ(got.state, JobState::kSucceeded);
  const int64_t now = clock_.NowMicros();
  EXPECT_NEAR(JobGpuHours(got, 0, now + 1, now), 0.125, 1e-6);
  const std::vector<UsageRow> usage = ComputeUsage({got}, 0, now + 1, now, "user");
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_NEAR(usage[0].gpu_hours, 0.125, 1e-6);
  {  // GET /metrics: 450 GPU-seconds (0.125 x 3600), not 3.6
    TelemetryService telemetry(c_.get(), store_.get(), &clock_);
    PoolAccounting accounting(c_.get(), store_.get(), &clock_, &telemetry);
    const std::string text = accounting.Scrape().value();
    const std::string series = R"(gpupool_allocated_gpu_seconds_total{user="alice",)";
    const size_t at = text.find(series);
    ASSERT_NE(at, std::string::npos) << text;
    const size_t value = text.find("} ", at);
    EXPECT_NEAR(std::stod(text.substr(value + 2)), 450, 1e-3) << text.substr(at, 120);
  }
  // Stored and read back (a restarted controller, `show`): the charge stays with it.
  c_.reset();
  ControllerOptions o;
  o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
  c_ = Controller::Create(store_.get(), &clock_, o).value();
  EXPECT_EQ(Get(tiny.id).placement.at(0).charged_milli, 125);
}

// Fair share counts what a job holds: alice, holding both 1g.10gb instances with 1 MiB
// asks, has a quarter of GPU 0 (0.25 of the 1.75 GPUs the pool weighs), more than bob's
// 0.05 share of GPU 1 (carol holds the 3g.40gb); so when both wait for the 0.95 of GPU 1
// that is left, bob's job goes first although alice's waited longer. Charged their asks
// (0.002 against 0.05), alice went first.
TEST_F(ControllerMigTest, FairShareChargesTheInstancesAJobHolds) {
  const Job s1 = Submit(1, uint64_t{1} << 20);
  const Job s2 = Submit(1, uint64_t{1} << 20);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job big = SubmitAs(carol_, 1, 20 * kGiB);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job small = SubmitAs(bob_, 1, 0, 50);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(s1.id).placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-s1"});
  ASSERT_EQ(Get(s2.id).placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-s2"});
  ASSERT_EQ(Get(big.id).placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-big"});
  ASSERT_EQ(Get(small.id).placement.at(0).gpu_uuids, std::vector<std::string>{"GPU-1"});
  ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());
  for (const Job& j : {s1, s2, big, small}) Apply(j, protocol::EventKind::kStarted);
  clock_.AdvanceMicros(1'000'000);
  const Job alices = SubmitAs(alice_, 1, 0, 950);
  clock_.AdvanceMicros(1'000'000);
  const Job bobs = SubmitAs(bob_, 1, 0, 950);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(bobs.id).state, JobState::kAssigned) << Get(bobs.id).pending_reason;
  EXPECT_EQ(Get(alices.id).state, JobState::kPending);
}

TEST_F(ControllerMigTest, ASharesOrderReachesItsInstanceOnly) {
  const Job whole = Submit(1, 0);
  const Job share = Submit(1, 8 * kGiB);
  const Job second_whole = Submit(1, 0);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(whole.id).placement.at(0).gpu_uuids, std::vector<std::string>{"GPU-1"});
  EXPECT_EQ(Get(share.id).placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-s1"});
  EXPECT_EQ(Get(second_whole.id).state, JobState::kPending);  // GPU 0 takes shares only

  const AgentWork work = c_->WaitForWork("n1", 0).value();
  auto order = std::find_if(work.launch.begin(), work.launch.end(),
                            [&](const LaunchOrder& o) { return o.job.id == share.id; });
  ASSERT_NE(order, work.launch.end());
  ASSERT_EQ(order->gpus.size(), 1u);
  EXPECT_EQ(order->gpus[0].uuid, "MIG-s1");
  EXPECT_EQ(order->gpus[0].index, 0);
  EXPECT_EQ(order->gpus[0].device_nodes,
            (std::vector<std::string>{"/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap84"}));
  std::vector<std::string> denied = order->denied_device_nodes;
  std::sort(denied.begin(), denied.end());
  EXPECT_EQ(denied, (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap21",
                                              "/dev/nvidia-caps/nvidia-cap93", "/dev/nvidia1"}));
  // The whole GPU job may not reach GPU 0 nor any instance.
  auto w = std::find_if(work.launch.begin(), work.launch.end(),
                        [&](const LaunchOrder& o) { return o.job.id == whole.id; });
  ASSERT_NE(w, work.launch.end());
  denied = w->denied_device_nodes;
  std::sort(denied.begin(), denied.end());
  EXPECT_EQ(denied, (std::vector<std::string>{"/dev/nvidia-caps/nvidia-cap21",
                                              "/dev/nvidia-caps/nvidia-cap84",
                                              "/dev/nvidia-caps/nvidia-cap93", "/dev/nvidia0"}));

  // The view: MIG-s1 held by the share, its part of GPU 0 allocated.
  const NodeView v = c_->Nodes().at(0);
  EXPECT_EQ(v.mig_jobs, (std::map<std::string, int64_t>{{"MIG-s1", share.id}}));
  EXPECT_EQ(v.allocated_milli, (std::vector<int>{125, 1000}));
}

TEST_F(ControllerMigTest, AShareLargerThanAnyInstanceWaitsSayingSo) {
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job whole = Submit(1, 0);  // GPU 1
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job big = Submit(1, 50 * kGiB);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job got = Get(big.id);
  EXPECT_EQ(got.state, JobState::kPending);
  EXPECT_NE(got.pending_reason.find("no idle MIG instance has 50.0 GiB"), std::string::npos)
      << got.pending_reason;
  EXPECT_EQ(Get(whole.id).placement.at(0).gpu_uuids, std::vector<std::string>{"GPU-1"});
}

// The agent restarts, without a drain, with GPU 0's MIG layout changed under two running
// shares (s5e_mig_layout_change_live): MIG turned off, or its instances remade. The shares
// run on; GPU 0 takes nothing new, saying why, until both end, then it is free.
class ControllerMigLayoutTest : public ControllerMigTest,
                                public ::testing::WithParamInterface<bool> {};

TEST_P(ControllerMigLayoutTest, ALayoutChangedUnderRunningSharesHoldsItsGpuUntilTheyEnd) {
  const Job whole = Submit(1, 0);  // GPU 1
  const Job a = Submit(1, 8 * kGiB);
  const Job b = Submit(1, 8 * kGiB);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a.id).placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-s1"});
  ASSERT_EQ(Get(b.id).placement.at(0).gpu_uuids, std::vector<std::string>{"MIG-s2"});
  ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());
  std::vector<Event> started;
  for (const Job& j : {whole, a, b})
    started.push_back(Ev(Get(j.id), protocol::EventKind::kStarted));
  ASSERT_TRUE(c_->ApplyEvents("n1", EventBatch{"n1", started, {}}).ok());

  protocol::Registration r;
  r.node = "n1";
  r.info = MigNode();
  if (GetParam()) {  // MIG off
    r.info.gpus[0].mig_enabled = false;
    r.info.gpus[0].mig_devices.clear();
    r.info.gpus[0].enforcement = "none";
  } else {  // seven 1g.10gb instances of new UUIDs
    r.info.gpus[0].mig_devices.clear();
    for (int i = 0; i < 7; ++i) {
      r.info.gpus[0].mig_devices.push_back(
          {"MIG-new" + std::to_string(i), "1g.10gb", 7 + i, 0, 10 * kGiB, {}});
    }
  }
  r.cpu_milli = 64'000;
  r.memory_mib = 256'000;
  for (const Job& j : {whole, a, b}) r.running.push_back({j.id, 0, Get(j.id).attempt});
  ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_EQ(Get(b.id).state, JobState::kRunning);

  // A whole GPU may go to GPU 0 only with MIG off; a share to a new instance or the GPU.
  std::vector<Job> next;
  if (GetParam()) next.push_back(Submit(1, 0));
  next.push_back(Submit(1, 8 * kGiB));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  for (const Job& j : next) {
    const Job got = Get(j.id);
    EXPECT_EQ(got.state, JobState::kPending) << "job " << j.id << " on GPU 0 beside a and b";
    EXPECT_NE(got.pending_reason.find("layout changed under running jobs " + std::to_string(a.id) +
                                      ", " + std::to_string(b.id) + ": held until they end"),
              std::string::npos)
        << got.pending_reason;
    EXPECT_EQ(got.pending_reason.find("held until they end; node n1"), std::string::npos)
        << "said once per GPU, not per instance: " << got.pending_reason;
  }
  // A restarted controller finds them again from its store.
  c_.reset();
  ControllerOptions o;
  o.node_timeout_us = int64_t{3600} * 1'000'000 * 24;
  c_ = Controller::Create(store_.get(), &clock_, o).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  for (const Job& j : next) EXPECT_EQ(Get(j.id).state, JobState::kPending) << "after a restart";
  NodeView v = c_->Nodes().at(0);
  EXPECT_EQ(v.allocated_milli.at(0), 1000);
  ASSERT_EQ(v.layout_held.count(0), 1u);
  ASSERT_EQ(v.layout_held.at(0).size(), 2u);
  EXPECT_EQ(v.layout_held.at(0)[0].job_id, a.id);
  EXPECT_EQ(v.layout_held.at(0)[1].job_id, b.id);

  // One ends: the other still holds GPU 0.
  ASSERT_TRUE(
      c_->ApplyEvents("n1", EventBatch{"n1", {Ev(Get(a.id), protocol::EventKind::kExited)}, {}})
          .ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  for (const Job& j : next) EXPECT_EQ(Get(j.id).state, JobState::kPending);
  // Both ended: GPU 0 is free again, as the agent reported it.
  ASSERT_TRUE(
      c_->ApplyEvents("n1", EventBatch{"n1", {Ev(Get(b.id), protocol::EventKind::kExited)}, {}})
          .ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job first = Get(next.front().id);  // the whole GPU 0, or a new instance
  EXPECT_EQ(first.state, JobState::kAssigned) << first.pending_reason;
  ASSERT_EQ(first.placement.size(), 1u);
  EXPECT_EQ(first.placement[0].gpu_uuids.at(0), GetParam() ? "GPU-0" : "MIG-new0");
  v = c_->Nodes().at(0);
  EXPECT_TRUE(v.layout_held.empty());
}

INSTANTIATE_TEST_SUITE_P(MigOffOrRemade, ControllerMigLayoutTest, ::testing::Bool());

}  // namespace mig_test
}  // namespace gpupool::controller
