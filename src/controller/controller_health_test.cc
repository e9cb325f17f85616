// GPU health in the controller (issue 29, docs/health.md), beyond the cordons of
// controller_gpu_faults_test.cc: resume only when proven and strikes, the window before a
// node's first health verdict, the pending reason naming a GPU out of service, and the
// per-GPU metric. Under a ManualClock over a real (in-memory) SQLite store.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "store/forwarding_store.h"
#include "store/sqlite_store.h"
#include "store/store.h"

namespace gpupool::controller {
namespace health_test {

using jobs::Job;
using jobs::JobState;

constexpr int64_t kMinute = 60'000'000;

class ControllerHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    Restart();
  }
  void Restart() {
    c_.reset();
    ControllerOptions o = options_;
    o.node_timeout_us = int64_t{3600} * 1'000'000 * 24 * 30;  // no node times out here
    auto c = Controller::Create(store_.get(), &clock_, o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c).value();
  }
  static gpu::NodeInfo TwoGpus(const std::string& node) {
    gpu::NodeInfo n;
    n.hostname = node;
    for (int i = 0; i < 2; ++i) {
      gpu::GpuInfo g;
      g.vendor = gpu::Vendor::kNvidia;
      g.index = i;
      g.name = "NVIDIA A100-SXM4-80GB";
      g.uuid = "GPU-" + node + "-" + std::to_string(i);
      g.memory_total_bytes = uint64_t{80} << 30;
      g.compute_capability = gpu::ComputeCapability{8, 0};
      g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
      n.gpus.push_back(g);
    }
    return n;
  }
  void Register(const std::string& node = "n1", bool health_pending = false) {
    protocol::Registration r;
    r.node = node;
    r.info = TwoGpus(node);
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    r.health_pending = health_pending;
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  // The agent's Xid count for GPU 0 of n1 goes up by one: Xid `xid` again.
  void Xid(int64_t xid) {
    protocol::GpuTelemetry s;
    s.index = 0;
    s.uuid = "GPU-n1-0";
    s.xid_errors = xid;
    s.xid_count = ++xid_count_;
    ASSERT_TRUE(c_->ObserveGpuErrors("n1", {s}).ok());
  }
  void Pass(const std::string& node = "n1") {
    protocol::HealthReport pass;
    pass.passed = true;
    ASSERT_TRUE(c_->ObserveHealthReport(node, pass).ok());
  }
  gpu::GpuHealth HealthOf(const std::string& uuid = "GPU-n1-0") {
    for (const NodeView& v : c_->Nodes()) {
      if (auto it = v.gpu_health.find(uuid); it != v.gpu_health.end()) return it->second;
    }
    return gpu::GpuHealth{};  // healthy (Nodes lists only the others)
  }
  Job SubmitTwoGpus() {
    Job j;
    j.command = {"true"};
    j.request.gpus = 2;
    j.request.gpu_milli = 1000;
    j.request.cpu_milli = 100;
    return c_->Submit(j, alice_).value();
  }
  Job Get(int64_t id) { return c_->Get(id, root_).value(); }

  ControllerOptions options_;
  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  int64_t xid_count_ = 0;
  Caller alice_{"alice", 1000, 1000, false};
  Caller root_{"root", 0, 0, true};
};

// The GPU health record's JSON (the node's stored record): the users each recent Xid was
// pinned on round-trip; a record from before attribution (no recent_users) still loads, its
// Xids counting against the GPU as then; a malformed list is refused, naming the field.
TEST(GpuHealthJsonTest, AttributionRoundTripsAndARecordWithoutItLoads) {
  const gpu::HealthPolicy policy = gpu::HealthPolicy::Create().value();
  gpu::GpuHealth pinned = gpu::OnXid(gpu::GpuHealth{}, 43, 1, 1'000, policy, {"alice"}).next;
  pinned = gpu::OnXid(pinned, 43, 1, 2'000, policy, {"bob", "alice"}).next;
  const std::string text = GpuHealthToJson({{"GPU-1", pinned}});
  EXPECT_NE(text.find("recent_users"), std::string::npos) << text;
  Result<std::map<std::string, gpu::GpuHealth>> back = GpuHealthFromJson(text, "n1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->at("GPU-1"), pinned);
  EXPECT_EQ(back->at("GPU-1").recent_users.at(1), (std::vector<std::string>{"alice", "bob"}));

  const std::string before =
      R"({"GPU-1":{"state":"healthy","reason":"","evidence":"Xid 43 x1","since_us":0,)"
      R"("by":"policy","recent_us":[1000,2000]}})";
  Result<std::map<std::string, gpu::GpuHealth>> old = GpuHealthFromJson(before, "n1");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->at("GPU-1").recent_us.size(), 2u);
  EXPECT_TRUE(old->at("GPU-1").recent_users.empty());
  EXPECT_EQ(gpu::OnXid(old->at("GPU-1"), 43, 1, 3'000, policy, {"alice"}).next.state,
            gpu::GpuHealthState::kCordoned);

  const std::string bad =
      R"({"GPU-1":{"state":"healthy","recent_us":[1000],"recent_users":[["alice"],3]}})";
  Result<std::map<std::string, gpu::GpuHealth>> refused = GpuHealthFromJson(bad, "n1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("recent_users"), std::string::npos)
      << refused.status().ToString();
}

// Issue 29 item 5: a GPU the Xid policy cordoned returns by itself only at a passing
// health check once no Xid came for --health-resume-after (here 1 h); a recurrence starts
// the quiet period again; its strikes are stored; the third cordon fails it, and only an
// admin returns a failed GPU (its strikes then start again).
TEST_F(ControllerHealthTest, AnXidCordonReturnsOnlyWhenProvenAndTheThirdStrikeFailsTheGpu) {
  options_.health_resume_after_us = 60 * kMinute;
  Restart();
  Register();
  Xid(95);
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(HealthOf().strikes, 1);
  clock_.AdvanceMicros(30 * kMinute);
  Pass();  // too early: 30 min quiet
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  Xid(95);  // it recurs: the quiet period starts again, no new strike
  clock_.AdvanceMicros(45 * kMinute);
  Pass();  // 75 min since the cordon, but 45 since the last error
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  clock_.AdvanceMicros(20 * kMinute);
  protocol::HealthReport failing;
  failing.node_reason = "the health check exited 1: fan";
  ASSERT_TRUE(c_->ObserveHealthReport("n1", failing).ok());
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);  // not proven: it failed
  ASSERT_TRUE(c_->ResumeNode("n1", root_).ok());                // (the check's drain)
  Pass();
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kHealthy);
  // It takes work again: a two-GPU job runs on the node.
  const Job two = SubmitTwoGpus();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(two.id).state, JobState::kAssigned);
  ASSERT_TRUE(c_->Cancel(two.id, root_).ok());

  // The strike is stored with the GPU's health: a restarted controller still counts it.
  Restart();
  Xid(95);
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(HealthOf().strikes, 2);
  clock_.AdvanceMicros(61 * kMinute);
  Pass();
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kHealthy);
  Xid(95);  // the third
  gpu::GpuHealth failed = HealthOf();
  EXPECT_EQ(failed.state, gpu::GpuHealthState::kFailed);
  EXPECT_EQ(failed.strikes, 3);
  EXPECT_NE(failed.reason.find("needs service"), std::string::npos) << failed.reason;
  clock_.AdvanceMicros(int64_t{30} * 24 * 60 * kMinute);
  Pass();
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kFailed);  // never by itself
  Restart();
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kFailed);
  ASSERT_TRUE(c_->ResumeGpu("n1", "0", root_).ok());
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kHealthy);
  Xid(95);  // a serviced GPU starts again from its first strike
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(HealthOf().strikes, 1);
}

// Strikes count within --health-strike-window (30 days by default): their times are
// stored with the GPU's health, so a restarted controller forgets one a month old and
// counts one a day old.
TEST_F(ControllerHealthTest, AStrikeOlderThanTheWindowIsForgottenAcrossARestart) {
  options_.health_resume_after_us = 60 * kMinute;
  Restart();
  Register();
  Xid(95);
  clock_.AdvanceMicros(61 * kMinute);
  Pass();
  ASSERT_EQ(HealthOf().state, gpu::GpuHealthState::kHealthy);
  Restart();
  clock_.AdvanceMicros(int64_t{31} * 24 * 60 * kMinute);
  Xid(95);
  EXPECT_EQ(HealthOf().strikes, 1);
  EXPECT_EQ(HealthOf().strike_us.size(), 1u);
  clock_.AdvanceMicros(61 * kMinute);
  Pass();
  Restart();
  clock_.AdvanceMicros(int64_t{24} * 60 * kMinute);
  Xid(95);
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(HealthOf().strikes, 2);
  // What the node shows is what still counts: 29 days on, the first strike (30 days and a
  // day old) no longer does, though the record keeps it until the next strike.
  clock_.AdvanceMicros(int64_t{29} * 24 * 60 * kMinute);
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(HealthOf().strikes, 1);
  EXPECT_EQ(HealthOf().strike_us.size(), 2u);
}

// --health-resume-after 0: a policy cordon never returns by itself; an admin still
// returns it, and an admin's resume of a cordoned GPU keeps its strike (counted here
// however old: --health-strike-window 0).
TEST_F(ControllerHealthTest, ResumeAfterZeroLeavesItToTheAdmin) {
  options_.health_resume_after_us = 0;
  options_.health_strike_window_us = 0;
  Restart();
  Register();
  Xid(95);
  clock_.AdvanceMicros(int64_t{365} * 24 * 60 * kMinute);
  Pass();
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kCordoned);
  ASSERT_TRUE(c_->ResumeGpu("n1", "GPU-n1-0", root_).ok());
  EXPECT_EQ(HealthOf().state, gpu::GpuHealthState::kHealthy);
  Xid(95);
  EXPECT_EQ(HealthOf().strikes, 2);
}

// Issue 29 item 3: an agent that registers with its health verdict still to come gets no
// work until the verdict arrives; the node says so. An agent without a health program
// (the flag unset) takes work at once.
TEST_F(ControllerHealthTest, NoWorkLandsOnANodeBeforeItsFirstHealthVerdict) {
  Register("n1", /*health_pending=*/true);
  EXPECT_TRUE(c_->Nodes().at(0).health_pending);
  const Job j = SubmitTwoGpus();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
  EXPECT_NE(Get(j.id).pending_reason.find("1 health check pending (n1)"), std::string::npos)
      << Get(j.id).pending_reason;
  Pass();
  EXPECT_FALSE(c_->Nodes().at(0).health_pending);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kAssigned);
  // A verdict that names a GPU bad: the node takes work again, but not on that GPU.
  Register("n2", /*health_pending=*/true);
  protocol::HealthReport bad;
  bad.gpus = {{1, "fan at 0 rpm"}};
  ASSERT_TRUE(c_->ObserveHealthReport("n2", bad).ok());
  const Job other = SubmitTwoGpus();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(other.id).state, JobState::kPending);
  EXPECT_NE(Get(other.id).pending_reason.find("health check: fan at 0 rpm"), std::string::npos)
      << Get(other.id).pending_reason;
  Register("n3");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(other.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(other.id).placement.at(0).node, "n3");
}

// Issue 29: a job that waits because a GPU is out of service says which GPU and why; a
// job that waits for another reason (a hold) does not name it.
TEST_F(ControllerHealthTest, APendingReasonNamesTheCordonedGpuItWaitsFor) {
  Register();
  Xid(95);
  const Job two = SubmitTwoGpus();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const std::string why = Get(two.id).pending_reason;
  EXPECT_EQ(Get(two.id).state, JobState::kPending);
  EXPECT_NE(why.find("node n1: GPU 0 (GPU-n1-0) cordoned: Xid 95: uncontained ECC error"),
            std::string::npos)
      << why;
  EXPECT_TRUE(why.starts_with("needs 2 idle GPUs")) << why;  // the class stays "resources"
  // Held: the hold is why it waits, not the GPU.
  ASSERT_TRUE(c_->Hold(two.id, root_, true).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(two.id).pending_reason.find("cordoned"), std::string::npos)
      << Get(two.id).pending_reason;
}

// Issue 29: /metrics has a series per GPU that is not healthy, with its node, index, UUID
// and state, beside the count by state.
TEST_F(ControllerHealthTest, MetricsListEachGpuThatIsNotHealthy) {
  Register();
  Register("n2");
  Xid(95);
  PoolSnapshot pool = c_->MetricsSnapshot();
  EXPECT_EQ(pool.gpus_by_health["cordoned"], 1);
  EXPECT_EQ(pool.gpus_by_health["healthy"], 3);
  const std::string text = c_->metrics().Render(pool);
  EXPECT_NE(text.find("gpupool_gpu_health_state{Hostname=\"n1\",gpu=\"0\",UUID=\"GPU-n1-0\","
                      "state=\"cordoned\"} 1"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("gpupool_gpu_health_state{Hostname=\"n2\""), std::string::npos);
  EXPECT_NE(text.find("gpupool_gpu_health{state=\"cordoned\"} 1"), std::string::npos);
}

// The agent's disk watch (docs/health.md): a node under disk pressure is drained saying
// why, and returns to service when the pressure ends; that end lifts only the watch's own
// drain and one for a job the node could not start for want of room, never an admin's or
// the health check's. Jobs wait meanwhile and start once it is back.
TEST_F(ControllerHealthTest, DiskPressureDrainsTheNodeAndItsEndReturnsIt) {
  Register();
  auto state = [&] { return c_->Nodes().at(0).state; };
  auto reason = [&] { return c_->Nodes().at(0).drain_reason; };
  protocol::DiskReport full;
  full.path = "/var/lib/gpupool/agent";
  full.pressure = true;
  full.reason = "/var/lib/gpupool/agent has 12 MiB free of 50 GiB, below 1 GiB";
  protocol::DiskReport room;
  room.path = full.path;
  room.free_bytes = uint64_t{20} << 30;
  ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
  EXPECT_EQ(state(), "up");
  ASSERT_TRUE(c_->ObserveDiskReport("n1", full).ok());
  EXPECT_EQ(state(), "drained");
  EXPECT_EQ(reason(), "disk pressure: " + full.reason);
  ASSERT_TRUE(c_->Nodes().at(0).disk.has_value());  // GET /v1/nodes and `node show` have it
  EXPECT_EQ(*c_->Nodes().at(0).disk, full);
  const Job two = SubmitTwoGpus();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(two.id).state, JobState::kPending);
  ASSERT_TRUE(c_->ObserveDiskReport("n1", full).ok());  // every check while it lasts
  EXPECT_EQ(reason(), "disk pressure: " + full.reason);
  ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
  EXPECT_EQ(state(), "up");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(two.id).state, JobState::kAssigned);
  ASSERT_TRUE(c_->Cancel(two.id, root_).ok());

  // An admin's drain: the disk's room does not lift it, nor does its pressure replace it,
  // even in the disk watch's words.
  ASSERT_TRUE(c_->DrainNode("n1", "disk pressure: my own words", root_).ok());
  ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
  EXPECT_EQ(reason(), "disk pressure: my own words (root)");
  ASSERT_TRUE(c_->ResumeNode("n1", root_).ok());
  ASSERT_TRUE(c_->DrainNode("n1", "maintenance", root_).ok());
  ASSERT_TRUE(c_->ObserveDiskReport("n1", full).ok());
  EXPECT_EQ(reason(), "maintenance (root)");  // an admin's drain names the admin
  ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
  EXPECT_EQ(reason(), "maintenance (root)");
  ASSERT_TRUE(c_->ResumeNode("n1", root_).ok());
  // A health check's drain neither.
  protocol::HealthReport failing;
  failing.node_reason = "fan";
  ASSERT_TRUE(c_->ObserveHealthReport("n1", failing).ok());
  ASSERT_TRUE(c_->ObserveDiskReport("n1", room).ok());
  EXPECT_EQ(reason(), "health check: fan");
  Pass();
  EXPECT_EQ(state(), "up");

  EXPECT_EQ(c_->ObserveDiskReport("nope", full).code(), StatusCode::kNotFound);
}

// A store whose node writes wait at a gate while it is closed.
class GatedNodeStore final : public store::ForwardingStore {
 public:
  explicit GatedNodeStore(std::unique_ptr<store::Store> inner)
      : ForwardingStore(std::move(inner)) {}
  Status PutNode(const store::NodeRecord& n) override {
    {
      std::unique_lock l(m_);
      ++held_;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
    }
    return ForwardingStore::PutNode(n);
  }
  void Close() {
    std::lock_guard l(m_);
    open_ = false;
  }
  void Open() {
    std::lock_guard l(m_);
    open_ = true;
    cv_.notify_all();
  }
  void WaitUntilHeld(int n) {
    std::unique_lock l(m_);
    cv_.wait(l, [&] { return held_ >= n; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = true;
  int held_ = 0;
};

// An automatic drain decides under the controller's lock and drains after it. An admin's
// drain that lands in between stands: the disk watch's drain, decided on the node as it
// was (not drained), must not replace it. Here the admin's drain is held in its store
// write while the disk report is decided; it used to end "disk pressure: ...".
TEST_F(ControllerHealthTest, AnAdminsDrainLandingWhileADiskDrainIsDecidedStands) {
  auto gated = std::make_unique<GatedNodeStore>(std::move(store_));
  GatedNodeStore* gate = gated.get();
  store_ = std::move(gated);
  Restart();
  Register();
  gate->Close();
  std::thread admin([&] { EXPECT_TRUE(c_->DrainNode("n1", "maintenance", root_).ok()); });
  gate->WaitUntilHeld(1);  // its write waits; the controller still sees the node up
  protocol::DiskReport full;
  full.pressure = true;
  full.reason = "/s has 0 B free";
  std::thread watch([&] { EXPECT_TRUE(c_->ObserveDiskReport("n1", full).ok()); });
  // The report was read (its decision taken under the lock) once the node shows it; its
  // drain then waits for the admin's to end.
  for (int i = 0; i < 10'000 && !c_->Nodes().at(0).disk.has_value(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(c_->Nodes().at(0).disk.has_value());
  gate->Open();
  admin.join();
  watch.join();
  EXPECT_EQ(c_->Nodes().at(0).drain_reason, "maintenance (root)");
}

}  // namespace health_test
}  // namespace gpupool::controller
