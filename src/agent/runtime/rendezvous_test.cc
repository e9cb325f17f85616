#include "agent/runtime/rendezvous.h"

#include <gtest/gtest.h>

namespace gpupool::agent {
namespace {

TEST(Rendezvous, EveryTaskGetsTheSameHostsAndItsOwnRank) {
  protocol::Rendezvous r{1, 3, {"127.0.0.2", "127.0.0.3", "127.0.0.4"}, {2, 0, 8}, 41234};
  auto env = RendezvousEnv(r, {"/s/jobs/9/hostfile", "/usr/bin/gpupool exec", "unix:/s/gp.sock"});
  EXPECT_EQ(env["GPUPOOL_TASK_INDEX"], "1");
  EXPECT_EQ(env["GPUPOOL_NUM_TASKS"], "3");
  EXPECT_EQ(env["GPUPOOL_NODES"], "127.0.0.2,127.0.0.3,127.0.0.4");
  EXPECT_EQ(env["GPUPOOL_HOSTFILE"], "/s/jobs/9/hostfile");
  EXPECT_EQ(env["PET_NNODES"], "3");
  EXPECT_EQ(env["PET_NODE_RANK"], "1");
  EXPECT_EQ(env["PET_NPROC_PER_NODE"], "1");  // a CPU task still runs one process
  EXPECT_EQ(env["PET_MASTER_ADDR"], "127.0.0.2");
  EXPECT_EQ(env["PET_MASTER_PORT"], "41234");
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.2");
  EXPECT_EQ(env["MASTER_PORT"], "41234");
  EXPECT_EQ(env["WORLD_SIZE"], "3");
  EXPECT_EQ(env["RANK"], "1");
  // One process per task, seeing only the task's GPUs: local rank 0 of 1.
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(env["OMPI_MCA_plm_rsh_agent"], "/usr/bin/gpupool exec");
  EXPECT_EQ(env["GPUPOOL_SERVER"], "unix:/s/gp.sock");
  EXPECT_EQ(HostfileText(r), "127.0.0.2 slots=2\n127.0.0.3 slots=1\n127.0.0.4 slots=8\n");
}

TEST(Rendezvous, NoPortYetMeansNoPortVariables) {
  protocol::Rendezvous r{0, 1, {"n1"}, {4}, 0};
  auto env = RendezvousEnv(r, {});
  EXPECT_EQ(env.count("MASTER_PORT"), 0u);
  EXPECT_EQ(env.count("GPUPOOL_HOSTFILE"), 0u);
  EXPECT_EQ(env.count("GPUPOOL_SERVER"), 0u);
  EXPECT_EQ(env["PET_NPROC_PER_NODE"], "4");
}

// mpirun's ranks have their own (OMPI_COMM_WORLD_LOCAL_RANK): none that all would inherit.
TEST(Rendezvous, AnMpiJobGetsNoLocalRank) {
  protocol::Rendezvous r{0, 2, {"n1", "n1"}, {1, 1}, 41234};
  auto env = RendezvousEnv(r, {"", "", "", /*mpi=*/true});
  EXPECT_EQ(env.count("LOCAL_RANK"), 0u);
  EXPECT_EQ(env.count("LOCAL_WORLD_SIZE"), 0u);
  EXPECT_EQ(env["RANK"], "0");
}

TEST(Rendezvous, PicksADifferentFreePortEachTime) {
  Result<int> a = PickFreePort();
  Result<int> b = PickFreePort();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(*a, 0);
  EXPECT_LT(*a, 65536);
  EXPECT_NE(*a, 29500);
}

TEST(Rendezvous, TasksSharingAHostShareItsHostfileLine) {
  protocol::Rendezvous r{0, 3, {"a", "b", "a"}, {1, 2, 3}, 1};
  EXPECT_EQ(HostfileText(r), "a slots=4\nb slots=2\n");
}

}  // namespace
}  // namespace gpupool::agent
