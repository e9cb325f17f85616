// Faulty GPUs in the controller: Xid errors fail the job and cordon the GPU or drain the
// node, the health program cordons and returns GPUs, and the health breaker holds back
// cordons past its share of the pool.

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

// An agent's telemetry sample of one GPU with Xid `xid`, its `count`-th since the agent
// started.
protocol::GpuTelemetry XidSample(const std::string& uuid, int64_t xid, int64_t count) {
  protocol::GpuTelemetry s;
  s.index = 0;
  s.uuid = uuid;
  s.xid_errors = xid;
  s.xid_count = count;
  return s;
}

// Issue 29: a reset-class Xid (95) on the GPU a job holds ends the job FAILED with the
// reason, cordons that GPU (nothing new lands on it) and leaves the node's other GPU in
// service. The same count reported again changes nothing; another node's GPU is ignored.
TEST_F(ControllerTest, AResetClassXidFailsTheJobAndCordonsOnlyThatGpu) {
  Register(2);
  const Job a = StartOne(c_.get(), alice_, clock_);
  const std::string bad = a.placement[0].gpu_uuids.at(0);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-elsewhere", 95, 1)}).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample(bad, 95, 1)}).ok());
  const Job failed = Get(a.id);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_NE(failed.reason.find("Xid 95"), std::string::npos) << failed.reason;
  EXPECT_EQ(store_->GetJob(a.id)->state, JobState::kFailed);
  const NodeView n = c_->Nodes().at(0);
  ASSERT_EQ(n.gpu_health.count(bad), 1u);
  EXPECT_EQ(n.gpu_health.at(bad).state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(n.state, "up");  // the node's other GPU keeps working
  PoolSnapshot pool = c_->MetricsSnapshot();
  EXPECT_EQ(pool.gpus_by_health["cordoned"], 1);
  EXPECT_EQ(pool.gpus_by_health["healthy"], 1);
  // Reported again (the next telemetry batch): nothing more.
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample(bad, 95, 1)}).ok());
  // Two one-GPU jobs: one lands on the healthy GPU, the other waits.
  const Job b = c_->Submit(MakeJob(1), bob_).value();
  const Job d = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  int placed = 0;
  for (int64_t id : {b.id, d.id}) {
    const Job j = Get(id);
    if (j.state == JobState::kAssigned) {
      ++placed;
      EXPECT_NE(j.placement[0].gpu_uuids.at(0), bad);
    }
  }
  EXPECT_EQ(placed, 1);
  // Stored: a restarted controller (or the next leader) keeps the GPU out of service.
  Restart();
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at(bad).state, gpu::GpuHealthState::kCordoned);
  EXPECT_NE(c_->Nodes().at(0).gpu_health.at(bad).reason.find("Xid 95"), std::string::npos);
  Register(2);  // its agent registers again: still cordoned
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at(bad).state, gpu::GpuHealthState::kCordoned);
  const Job e = c_->Submit(MakeJob(2), bob_).value();  // needs both GPUs: never now
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(e.id).state, JobState::kPending);
  // An admin puts it back (by index or UUID); users may not.
  EXPECT_EQ(c_->ResumeGpu("n1", bad, alice_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->ResumeGpu("n1", "7", root_).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c_->ResumeGpu("n1", "GPU-1001", root_).status().code(),
            StatusCode::kFailedPrecondition);  // in service already
  Result<NodeView> resumed = c_->ResumeGpu("n1", bad, root_);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_TRUE(resumed->gpu_health.empty());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  bool lands = false;  // the 1-GPU job still waiting gets it
  for (int64_t id : {b.id, d.id}) {
    const Job j = Get(id);
    lands = lands || (j.state == JobState::kAssigned && j.placement[0].gpu_uuids.at(0) == bad);
  }
  EXPECT_TRUE(lands);
  Restart();  // stored healthy
  EXPECT_TRUE(c_->Nodes().at(0).gpu_health.empty());
}

// Issue 29 item 4: the health program's verdicts. A GPU it names is cordoned by it (jobs
// there go on; nothing new lands); a node it calls bad is drained; a pass returns exactly
// what it took out, and not a GPU the Xid policy cordoned.
TEST_F(ControllerTest, TheHealthProgramCordonsAndReturnsOnlyWhatItTookOut) {
  Register(2);
  protocol::HealthReport bad;
  bad.gpus = {{1, "fan at 0 rpm"}, {7, "no such GPU"}};
  bad.output = "gpu=1 bad fan at 0 rpm\n";
  ASSERT_TRUE(c_->ObserveHealthReport("n1", bad).ok());
  NodeView n = c_->Nodes().at(0);
  ASSERT_EQ(n.gpu_health.count("GPU-1001"), 1u);
  EXPECT_EQ(n.gpu_health.at("GPU-1001").state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(n.gpu_health.at("GPU-1001").reason, "health check: fan at 0 rpm");
  EXPECT_EQ(n.gpu_health.at("GPU-1001").by, "health-check");
  EXPECT_NE(n.gpu_health.at("GPU-1001").evidence.find("gpu=1 bad"), std::string::npos);
  const Job two = c_->Submit(MakeJob(2), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(two.id).state, JobState::kPending);
  // GPU 0 meets a reset-class Xid meanwhile: the policy's cordon is not the program's.
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 95, 1)}).ok());
  protocol::HealthReport pass;
  pass.passed = true;
  ASSERT_TRUE(c_->ObserveHealthReport("n1", pass).ok());
  n = c_->Nodes().at(0);
  EXPECT_TRUE(n.gpu_health.count("GPU-1001") == 0 ||
              gpu::TakesWork(n.gpu_health.at("GPU-1001").state));
  EXPECT_EQ(n.gpu_health.at("GPU-1000").state, gpu::GpuHealthState::kCordoned);
  // The node: drained with the program's words, undrained by a pass; an admin's drain is
  // not the program's to lift.
  protocol::HealthReport node_bad;
  node_bad.node_reason = "the health check exited 2: PSU degraded";
  ASSERT_TRUE(c_->ObserveHealthReport("n1", node_bad).ok());
  EXPECT_EQ(c_->Nodes().at(0).drain_reason,
            "health check: the health check exited 2: PSU degraded");
  ASSERT_TRUE(c_->ObserveHealthReport("n1", pass).ok());
  EXPECT_EQ(c_->Nodes().at(0).state, "up");
  ASSERT_TRUE(c_->DrainNode("n1", "maintenance", root_).ok());
  ASSERT_TRUE(c_->ObserveHealthReport("n1", pass).ok());
  EXPECT_EQ(c_->Nodes().at(0).drain_reason, "maintenance (root)");
  EXPECT_EQ(c_->ObserveHealthReport("nope", pass).code(), StatusCode::kNotFound);
  Restart();  // stored
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at("GPU-1000").state, gpu::GpuHealthState::kCordoned);
}

// Issue 29 item 6: the circuit breaker. With 10 nodes (10%: one node an hour), the first
// node's cordon goes through; the second's, within the hour, is recorded (suspect, the
// reason, the metric) but not acted on: its job goes on. An hour later cordons act again.
TEST_F(ControllerTest, TheHealthBreakerHoldsBackCordonsPastItsShareOfThePool) {
  Register(1);
  for (int k = 2; k <= 10; ++k) Register(1, {}, "n" + std::to_string(k));
  Job j = MakeJob(1);
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  const std::string node = j.placement[0].node;
  const std::string uuid = j.placement[0].gpu_uuids.at(0);
  const std::string first = node == "n1" ? "n2" : "n1";
  const std::string first_uuid = first == "n1" ? "GPU-1000" : "GPU-1000-" + first;
  ASSERT_TRUE(c_->ObserveGpuErrors(first, {XidSample(first_uuid, 95, 1)}).ok());
  auto health_of = [&](const std::string& n, const std::string& u) {
    for (const NodeView& v : c_->Nodes()) {
      if (v.name == n && v.gpu_health.count(u) != 0) return v.gpu_health.at(u);
    }
    return gpu::GpuHealth{};
  };
  EXPECT_EQ(health_of(first, first_uuid).state, gpu::GpuHealthState::kCordoned);
  // The job's node, within the hour: held back.
  ASSERT_TRUE(c_->ObserveGpuErrors(node, {XidSample(uuid, 95, 1)}).ok());
  const gpu::GpuHealth held = health_of(node, uuid);
  EXPECT_EQ(held.state, gpu::GpuHealthState::kSuspect);
  EXPECT_NE(held.reason.find("circuit breaker"), std::string::npos) << held.reason;
  EXPECT_EQ(Get(j.id).state, JobState::kAssigned);  // not ended
  EXPECT_EQ(c_->MetricsSnapshot().health_actions_held, 1);
  // An hour later the breaker lets the next one through.
  clock_.AdvanceMicros(int64_t{3601} * 1'000'000);
  ASSERT_TRUE(c_->ObserveGpuErrors(node, {XidSample(uuid, 95, 2)}).ok());
  EXPECT_EQ(health_of(node, uuid).state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(Get(j.id).state, JobState::kFailed);
  // A fraction outside (0, 1] is refused, naming the flag.
  ControllerOptions o;
  o.health_breaker_fraction = 0;
  Result<std::unique_ptr<Controller>> bad = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--health-breaker"), std::string::npos);
}

// A reboot-class Xid (79) drains the whole node with the reason; application Xids (13)
// leave the GPU in service until the third within an hour.
TEST_F(ControllerTest, AFallenOffTheBusXidDrainsTheNodeAndApplicationXidsCordonOnRepeats) {
  Register(2);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 13, 1)}).ok());
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 13, 2)}).ok());
  EXPECT_TRUE(c_->Nodes().at(0).gpu_health.empty());  // still healthy
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 13, 3)}).ok());
  EXPECT_EQ(c_->Nodes().at(0).gpu_health.at("GPU-1000").state, gpu::GpuHealthState::kCordoned);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1001", 79, 1)}).ok());
  const NodeView n = c_->Nodes().at(0);
  EXPECT_EQ(n.state, "drained");
  EXPECT_NE(n.drain_reason.find("Xid 79"), std::string::npos) << n.drain_reason;
  const Job j = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
  // The drain is stored: it outlives a restart of the controller.
  Restart();
  EXPECT_NE(c_->Nodes().at(0).drain_reason.find("Xid 79"), std::string::npos);
  // A bad override names the flag.
  ControllerOptions o;
  o.health_xid = "79:reboot";
  Result<std::unique_ptr<Controller>> bad = Controller::Create(store_.get(), &clock_, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--health-xid"), std::string::npos);
}

// The state of node n1's GPU `uuid` (healthy when Nodes does not list it).
gpu::GpuHealthState StateOf(Controller* c, const std::string& uuid) {
  const NodeView n = c->Nodes().at(0);
  auto h = n.gpu_health.find(uuid);
  return h == n.gpu_health.end() ? gpu::GpuHealthState::kHealthy : h->second.state;
}

// adv5 finding 7: a node's agent registers again without a GPU a running job holds (fallen
// off the bus, taken out): before, the job went on "running" there, charged, with the
// GPU nowhere in `nodes`. The node is drained, saying which GPU and job, so nothing new
// goes there until an admin has looked; a GPU gone with no job on it changes nothing.
TEST_F(ControllerTest, AGpuGoneUnderARunningJobDrainsTheNode) {
  Register(3);
  const Job a = StartOne(c_.get(), alice_, clock_);
  const std::string held = a.placement[0].gpu_uuids.at(0);
  protocol::Registration r;
  r.node = "n1";
  r.version = version_;
  r.cpu_milli = 64'000;
  r.memory_mib = 256'000;
  r.running.push_back({a.id, 0, a.attempt});
  r.info = MakeNode(3);
  // First an idle GPU goes: the node stays up.
  std::erase_if(r.info.gpus, [&](const gpu::GpuInfo& g) { return g.uuid != held && g.index == 2; });
  ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  EXPECT_EQ(c_->Nodes().at(0).state, "up");
  // Then the job's own.
  std::erase_if(r.info.gpus, [&](const gpu::GpuInfo& g) { return g.uuid == held; });
  ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  const NodeView n = c_->Nodes().at(0);
  EXPECT_EQ(n.state, "draining");
  EXPECT_NE(n.drain_reason.find("(" + held + ") is gone from its inventory under running job " +
                                std::to_string(a.id) + " (fallen off the bus?"),
            std::string::npos)
      << n.drain_reason;
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);           // its end is the node's to report
  EXPECT_TRUE(store_->ListNodes().value().at(0).draining);  // a drain outlives a restart
}

class XidAttributionTest : public ControllerTest {
 protected:
  // A 1-GPU job of `who` runs on n1's only GPU and fails; its Xid 43 reaches the
  // controller `xid_after_s` after its end (negative: before it, while it runs).
  void JobEndsWithXid(const Caller& who, int xid_after_s) {
    const Job j = StartOne(c_.get(), who, clock_);
    ASSERT_EQ(j.placement.at(0).gpu_uuids.at(0), "GPU-1000");
    clock_.AdvanceMicros(60'000'000);
    auto xid = [&] {
      ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 43, ++xids_)}).ok());
    };
    if (xid_after_s < 0) xid();
    ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 134)}).ok());  // its assert
    ASSERT_EQ(Get(j.id).state, JobState::kFailed);
    if (xid_after_s >= 0) {
      clock_.AdvanceMicros(int64_t{xid_after_s} * 1'000'000);
      xid();
    }
  }
  int64_t xids_ = 0;
};

// The hostile-testing defect: one user's jobs, each ending with a device-side assert
// (Xid 43) on the same GPU, three (here four) within the hour, cordoned the GPU (and three
// such cordons retired it). The Xids are pinned on that user, whether the Xid came while
// the job ran or a second after it ended: the GPU stays in service, across a restart of the
// controller (the attribution is stored with the GPU's health), and takes the next job.
TEST_F(XidAttributionTest, OneUsersJobsEndingWithXidsLeaveTheGpuInService) {
  Register(1);
  JobEndsWithXid(alice_, -1);  // the Xid before the job's end
  JobEndsWithXid(alice_, 1);   // the agent's Xid watch: a second after the end
  JobEndsWithXid(alice_, 5);
  EXPECT_EQ(StateOf(c_.get(), "GPU-1000"), gpu::GpuHealthState::kHealthy);
  Restart();
  Register(1);
  JobEndsWithXid(alice_, 1);
  EXPECT_EQ(StateOf(c_.get(), "GPU-1000"), gpu::GpuHealthState::kHealthy);
  const Job next = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(next.id).state, JobState::kAssigned);
}

// Two users' jobs ending with Xids on the same GPU within the hour: the GPU is the likelier
// cause, and the third cordons it (a strike), as does an Xid that came well after the last
// job let the GPU go (no one to pin it on).
TEST_F(XidAttributionTest, TwoUsersJobsEndingWithXidsCordonTheGpu) {
  Register(1);
  JobEndsWithXid(alice_, 1);
  JobEndsWithXid(bob_, 1);
  EXPECT_EQ(StateOf(c_.get(), "GPU-1000"), gpu::GpuHealthState::kHealthy);
  JobEndsWithXid(alice_, 1);
  const gpu::GpuHealth h = c_->Nodes().at(0).gpu_health.at("GPU-1000");
  EXPECT_EQ(h.state, gpu::GpuHealthState::kCordoned);
  EXPECT_EQ(h.strikes, 1);
  EXPECT_NE(h.reason.find("Xid 43"), std::string::npos) << h.reason;
  EXPECT_NE(h.reason.find("different users' jobs"), std::string::npos) << h.reason;
}

TEST_F(XidAttributionTest, AnXidLongAfterTheLastJobLetTheGpuGoCountsAgainstTheGpu) {
  Register(1);
  JobEndsWithXid(alice_, 1);
  JobEndsWithXid(alice_, 1);
  JobEndsWithXid(alice_, 30);  // 30 s after its end: past the holders' window
  const gpu::GpuHealth h = c_->Nodes().at(0).gpu_health.at("GPU-1000");
  EXPECT_EQ(h.state, gpu::GpuHealthState::kCordoned);
  EXPECT_NE(h.reason.find("no job on the GPU"), std::string::npos) << h.reason;
}

// A GPU shared by two users' jobs at each Xid (half a GPU each): the pair is one culprit,
// and so is the one of them still there when the other has gone; a third user's Xid makes
// it no one's, and the GPU is cordoned.
TEST_F(XidAttributionTest, AGpuSharedByTwoUsersAtEachXidIsStillOneCulprit) {
  Register(1);
  const Job a = c_->Submit(MakeJob(1, 500), alice_).value();
  const Job b = c_->Submit(MakeJob(1, 500), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a.id).state, JobState::kAssigned);
  ASSERT_EQ(Get(b.id).state, JobState::kAssigned);
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 43, ++xids_)}).ok());
  }
  EXPECT_EQ(StateOf(c_.get(), "GPU-1000"), gpu::GpuHealthState::kHealthy);
  ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());  // the launches
  ASSERT_TRUE(Apply({Ev(Get(a.id), protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(Get(b.id), protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(Get(a.id), protocol::EventKind::kExited, 134)}).ok());
  clock_.AdvanceMicros(60'000'000);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 43, ++xids_)}).ok());
  EXPECT_EQ(StateOf(c_.get(), "GPU-1000"), gpu::GpuHealthState::kHealthy);  // bob's, each time
  ASSERT_TRUE(Apply({Ev(Get(b.id), protocol::EventKind::kExited, 134)}).ok());
  clock_.AdvanceMicros(60'000'000);
  const Job carol = c_->Submit(MakeJob(1, 500), Caller{"carol", 1002, 1002, false}).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(carol.id).state, JobState::kAssigned);
  ASSERT_TRUE(c_->ObserveGpuErrors("n1", {XidSample("GPU-1000", 43, ++xids_)}).ok());
  EXPECT_EQ(StateOf(c_.get(), "GPU-1000"), gpu::GpuHealthState::kCordoned);
}

}  // namespace
}  // namespace gpupool::controller::controller_test
