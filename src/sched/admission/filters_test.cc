// One test per admission filter: its verdict per node with the reason the explain step
// counts, and that its enforcement (PrepareCluster, PreFilter) agrees with the verdict.
#include "sched/admission/filters.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sched/queue/queue_test_util.h"

namespace gpupool::sched {
namespace {

using testing::GpuTask;
using testing::Job;
using testing::MakeCluster;

PreFilterResult Pre(AdmissionFilter& f, const QueuedJob& job) {
  PreFilterResult r;
  const bool said = f.PreFilter(job, &r);
  EXPECT_EQ(said, !r.never.empty() || !r.only_nodes.empty());
  return r;
}

TEST(DrainFilter, RefusesDrainingNodesAndTakesWhatIsFreeThere) {
  ClusterState c = MakeCluster(2, 2);
  ASSERT_TRUE(c.Allocate(GpuTask(1, 500), {1, {0}}).ok());  // runs on n1 and keeps running
  const std::vector<int32_t> draining = {1};
  const QueuedJob held = Job("j7", "alice", 0, {GpuTask(1, 500)});
  const std::vector<RunningJob> running = {{.job = &held, .placements = {{1, {0}}}}};
  PassContext ctx;
  ctx.draining = draining;
  ctx.running = running;
  DrainFilter f;
  f.BeginPass(ctx);
  EXPECT_TRUE(f.NamesNodes());
  std::string reason;
  EXPECT_TRUE(f.Filter(c, GpuTask(1), 0, &reason));
  EXPECT_FALSE(f.Filter(c, GpuTask(1), 1, &reason));
  EXPECT_EQ(reason, "draining");  // a job still runs there
  // Drained with nothing running there: "drained", as `gpupool nodes` says.
  const std::vector<int32_t> drained = {0};
  ctx.draining = drained;
  f.BeginPass(ctx);
  EXPECT_FALSE(f.Filter(c, GpuTask(1), 0, &reason));
  EXPECT_EQ(reason, "drained");
  // Closed without a drain: the host's reason.
  const std::vector<std::string> why = {"health check pending"};
  ctx.draining_why = why;
  f.BeginPass(ctx);
  EXPECT_FALSE(f.Filter(c, GpuTask(1), 0, &reason));
  EXPECT_EQ(reason, "health check pending");
  ctx.draining_why = {};
  ctx.draining = draining;
  f.BeginPass(ctx);
  f.PrepareCluster(c);
  for (const Task& t : {GpuTask(1), GpuTask(1, 100), GpuTask(0, 0, 1, 0), GpuTask(0, 0, 0, 1)}) {
    EXPECT_FALSE(c.Fits(1, t)) << t.num_gpu << " " << t.gpu_milli;  // enforced: nothing fits
    EXPECT_TRUE(c.Fits(0, t));
  }
  // What ran there keeps its share: releasing it works and frees exactly it.
  EXPECT_TRUE(c.Release(GpuTask(1, 500), {1, {0}}).ok());
  EXPECT_EQ(c.node(1).gpu_free_milli[0], 500);
  EXPECT_EQ(c.node(1).gpu_free_milli[1], 0);
  // A pass without drains refuses nothing.
  f.BeginPass(PassContext{});
  EXPECT_TRUE(f.Filter(c, GpuTask(1), 1, nullptr));
}

TEST(EnvCompatFilter, NarrowsGpuTasksToTheNodesThatCanRunTheEnvironment) {
  ClusterState c = MakeCluster(3, 1);
  int lookups = 0;
  PassContext ctx;
  ctx.environments = [&lookups](std::string_view env) {
    ++lookups;
    EnvironmentNodes out;
    if (env == "cuda-12.4") out.nodes = {"n1", "n2"};
    if (env == "cuda-13") out.none = "image cuda13 n0: driver 535 is too old; n1: ...";
    // any other: every node can
    return out;
  };
  EnvCompatFilter f;
  f.BeginPass(ctx);
  QueuedJob j = Job("1", "alice", 0, {GpuTask(1), GpuTask(1)});
  EXPECT_TRUE(Pre(f, j).only_nodes.empty());  // no environment: any node
  j.admission.environment = "cuda-12.4";
  PreFilterResult r = Pre(f, j);
  EXPECT_EQ(r.never, "");
  EXPECT_EQ(r.only_nodes, (std::vector<std::string>{"n1", "n2"}));
  EXPECT_EQ(Pre(f, j).only_nodes.size(), 2u);
  EXPECT_EQ(lookups, 1);  // once per environment and pass
  QueuedJob cpu = Job("2", "alice", 0, {GpuTask(0, 0)});
  cpu.admission.environment = "cuda-12.4";
  EXPECT_TRUE(Pre(f, cpu).only_nodes.empty());  // CPU-only tasks need no GPU driver
  j.admission.environment = "cuda-13";
  EXPECT_EQ(Pre(f, j).never, "image cuda13 n0: driver 535 is too old; n1: ...");
  j.admission.environment = "cuda-11";
  EXPECT_TRUE(Pre(f, j).only_nodes.empty());  // every node can

  Task t = GpuTask(1);
  t.allowed_nodes = {"n1", "n2"};
  std::string reason;
  EXPECT_FALSE(f.Filter(c, t, 0, &reason));
  EXPECT_EQ(reason, "cannot run its environment");
  EXPECT_FALSE(c.Fits(0, t));  // enforced by the task's node list
  EXPECT_TRUE(f.Filter(c, t, 1, &reason));
  EXPECT_TRUE(f.Filter(c, GpuTask(1), 0, &reason));
  f.BeginPass(ctx);
  j.admission.environment = "cuda-12.4";
  (void)Pre(f, j);
  EXPECT_EQ(lookups, 4);  // a new pass asks again: nodes change
  // Without a lookup (the simulator) environments constrain nothing.
  f.BeginPass(PassContext{});
  EXPECT_TRUE(Pre(f, j).only_nodes.empty());
}

TEST(EnforceMemoryFilter, SharesOfEnforcingJobsGoOnlyWhereMemoryIsHeld) {
  ClusterState c = MakeCluster(3, 1);  // n0, n1, n2; n1 and n2 enforce memory
  const std::vector<std::string> enforced = {"n2", "n1"};
  PassContext ctx;
  ctx.memory_enforced_nodes = enforced;
  EnforceMemoryFilter f;
  f.BeginPass(ctx);
  Task share = GpuTask(1, 500);
  QueuedJob j = Job("1", "alice", 0, {share});
  EXPECT_TRUE(Pre(f, j).only_nodes.empty());  // not asked for: any node
  j.tasks[0].enforce_memory = true;
  EXPECT_EQ(Pre(f, j).only_nodes, (std::vector<std::string>{"n1", "n2"}));
  QueuedJob whole = Job("2", "alice", 0, {GpuTask(1)});
  whole.tasks[0].enforce_memory = true;
  EXPECT_TRUE(Pre(f, whole).only_nodes.empty());  // a whole GPU is nobody else's

  share.enforce_memory = true;
  std::string reason;
  EXPECT_FALSE(f.Filter(c, share, 0, &reason));
  EXPECT_EQ(reason, "GPU memory not enforced");
  EXPECT_TRUE(f.Filter(c, share, 1, &reason));
  EXPECT_TRUE(f.Filter(c, whole.tasks[0], 0, &reason));
  EXPECT_TRUE(f.Filter(c, GpuTask(1, 500), 0, &reason));

  // No node enforces memory: the job cannot run, and says what would let it.
  f.BeginPass(PassContext{});
  EXPECT_NE(Pre(f, j).never.find("--enforce memory: no node holds a GPU share to its memory"),
            std::string::npos);
  // A node whose GPUs enforce in part (a MIG GPU beside one of enforcement none, as
  // examples/nodes/nvidia-a100-mig.json replayed) takes none: the reason said only "no
  // node holds a GPU share to its memory", which its MIG GPU does.
  EXPECT_NE(Pre(f, j).never.find("on every one of its GPUs (each GPU's enforcement is in "
                                 "`gpupool nodes`; mps, mig or dmem is needed on all of a "
                                 "node's GPUs: a node with a GPU of enforcement none takes no "
                                 "such share)"),
            std::string::npos)
      << Pre(f, j).never;
}

}  // namespace
}  // namespace gpupool::sched
