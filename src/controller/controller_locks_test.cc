// What the controller keeps so that API calls and agents do not wait on its mutex for
// work over every node or job (docs/benchmarks.md, "Where a `queue` and a `submit` wait"):
// submissions' fit check kept between submissions, the nodes' NodeInfo shared with the
// scheduling pass, a pass's staleness check without a walk of every job.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/controller.h"
#include "store/sqlite_store.h"

namespace gpupool::controller {
namespace {

using jobs::Job;
using jobs::JobState;

gpu::NodeInfo Gpus(int n, const std::string& node) {
  gpu::NodeInfo info;
  info.hostname = node;
  for (int i = 0; i < n; ++i) {
    gpu::GpuInfo g;
    g.vendor = gpu::Vendor::kNvidia;
    g.index = i;
    g.name = "NVIDIA A100-SXM4-80GB";
    g.uuid = "GPU-" + node + "-" + std::to_string(i);
    g.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
    g.memory_total_bytes = uint64_t{80} << 30;
    g.compute_capability = gpu::ComputeCapability{8, 0};
    g.device_nodes = {"/dev/nvidia" + std::to_string(i)};
    info.gpus.push_back(g);
  }
  return info;
}

class ControllerLocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::OpenSqliteStore(":memory:").value();
    ControllerOptions o;
    o.node_timeout_us = 10'000'000;
    o.after_plan_for_test = [this] {
      if (after_plan_) after_plan_();
    };
    o.between_chunks_for_test = [this] {
      if (between_chunks_) between_chunks_();
    };
    c_ = Controller::Create(store_.get(), &clock_, o).value();
  }
  void Register(const std::string& node, int gpus) {
    protocol::Registration r;
    r.node = node;
    r.info = Gpus(gpus, node);
    r.version = protocol::kVersion;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  Result<Job> Submit(int gpus, bool requeue = false) {
    Job j;
    j.command = {"true"};
    j.request.gpus = gpus;
    j.request.cpu_milli = 100;
    j.requeue = requeue;
    return c_->Submit(j, alice_);
  }
  Job Get(int64_t id) { return c_->Get(id, root_).value(); }

  ManualClock clock_{1'700'000'000'000'000};
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
  std::function<void()> after_plan_;
  std::function<void()> between_chunks_;
  Caller alice_{"alice", 1000, 1000, false};
  Caller root_{"root", 0, 0, true};
};

// The check that some node could ever run a submission is built once for the nodes as
// they are, not per submission (at 10,000 nodes each build held the mutex for tens of
// ms), and built again when a node registers, so its answers stay those of the nodes now.
TEST_F(ControllerLocksTest, SubmissionsShareOneFitCheckUntilTheNodesChange) {
  Register("n1", 2);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Submit(1).ok());
  EXPECT_EQ(c_->FitChecksBuilt(), 1u);
  Result<Job> big = Submit(4);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kFailedPrecondition) << big.status().ToString();
  EXPECT_NE(big.status().message().find("no node of this pool can ever run this job"),
            std::string::npos)
      << big.status().ToString();
  EXPECT_EQ(c_->FitChecksBuilt(), 1u);

  Register("n2", 4);  // a node that can
  ASSERT_TRUE(Submit(4).ok());
  EXPECT_EQ(c_->FitChecksBuilt(), 2u);

  Register("n2", 1);  // the same node again, with fewer GPUs: no node has 4 now
  big = Submit(4);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kFailedPrecondition) << big.status().ToString();
  EXPECT_EQ(c_->FitChecksBuilt(), 3u);
}

// A pass plans on the nodes' NodeInfo as last registered: a node that registers again
// with more GPUs is seen with them by the next pass.
TEST_F(ControllerLocksTest, APassSeesANodesNewGpusAfterItRegistersAgain) {
  Register("n1", 2);
  Register("n2", 1);
  Result<Job> j = Submit(2);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  Register("n1", 1);  // n1 shrinks: nothing has 2 GPUs now
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(j->id).state, JobState::kPending);
  Register("n2", 2);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job placed = Get(j->id);
  EXPECT_EQ(placed.state, JobState::kAssigned);
  ASSERT_EQ(placed.placement.size(), 1u);
  EXPECT_EQ(placed.placement[0].node, "n2");
}

// A job that holds resources in a pass's snapshot and is requeued before the pass applies
// its plan makes the plan stale: the pass starts nothing and plans again, as when it
// walked every running job to find out.
TEST_F(ControllerLocksTest, APlacementChangedWhileAPassPlannedMakesItPlanAgain) {
  Register("n1", 1);
  Result<Job> a = Submit(1, /*requeue=*/true);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a->id).state, JobState::kAssigned);
  clock_.AdvanceMicros(6'000'000);
  Register("n2", 1);
  Result<Job> b = Submit(1);
  ASSERT_TRUE(b.ok());
  // While the pass that places b on n2 plans, n1 (registered 11 s ago, timeout 10 s) is
  // declared lost and a goes back to the queue.
  after_plan_ = [&] {
    after_plan_ = nullptr;
    clock_.AdvanceMicros(5'000'000);
    ASSERT_TRUE(c_->SweepNodes().ok());
  };
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a->id).state, JobState::kPending);
  EXPECT_EQ(Get(b->id).state, JobState::kPending) << "a stale plan was applied";
  ASSERT_TRUE(c_->ScheduleOnce().ok());  // planned again: a, the older, gets n2
  EXPECT_EQ(Get(a->id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b->id).state, JobState::kPending);
}

// A list of every active job (an admin's queue, the accounting fold's jobs holding GPUs)
// and of every node is copied 1,000 at a time with mu_ let go between (at 180,000 jobs one
// hold kept every other request waiting 0.2-0.5 s): what changes in a gap shows as it is
// when its chunk is copied, and each job or node is listed once, in order.
TEST_F(ControllerLocksTest, ListsOfEveryJobAndNodeLetTheLockGoBetweenChunks) {
  for (int i = 0; i < 1500; ++i) Register("n" + std::to_string(10000 + i), 1);
  std::vector<int64_t> ids;
  for (int i = 0; i < 2500; ++i) ids.push_back(Submit(1).value().id);
  int gaps = 0;
  int64_t added = 0;
  between_chunks_ = [&] {
    ++gaps;
    if (gaps > 1) return;
    // The lock is free here: a cancel and a submission go through.
    ASSERT_TRUE(c_->Cancel(ids.back(), root_).ok());
    added = Submit(1).value().id;
  };
  store::JobFilter f;
  f.active_only = true;
  std::vector<Job> all = c_->List(f, root_).value();
  EXPECT_EQ(gaps, 2);            // 2,500 jobs: three chunks
  ASSERT_EQ(all.size(), 2500u);  // the last one cancelled, a new one
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(all[i].id, ids[i]);
  EXPECT_EQ(all.back().id, added);

  gaps = 0;
  between_chunks_ = [&] {
    ++gaps;
    EXPECT_EQ(Get(ids.front()).id, ids.front());  // takes the lock
  };
  std::vector<NodeView> nodes = c_->Nodes();
  EXPECT_EQ(gaps, 1);
  ASSERT_EQ(nodes.size(), 1500u);
  for (int i = 0; i < 1500; ++i) EXPECT_EQ(nodes[i].name, "n" + std::to_string(10000 + i));

  gaps = 0;  // the metrics' count of the jobs by state: the nodes, then the jobs
  PoolSnapshot snapshot = c_->MetricsSnapshot(nullptr);
  EXPECT_EQ(gaps, 3);
  EXPECT_EQ(snapshot.jobs_by_state["PENDING"], 2500);
  EXPECT_EQ(snapshot.nodes_by_state["up"], 1500);
}

}  // namespace
}  // namespace gpupool::controller
