// Gangs in the controller (GangTest, controller_test.h: two 2-GPU nodes): multi-task
// jobs start in order, end together, survive restarts and lost nodes; exec into a
// running task; agents' protocol versions; the shares of a gang (one GPU each, unless
// held for mpirun).

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

// Red team 7, finding 3: the shares of a gang each get a GPU of their own (NCCL refuses
// two ranks on one device), so a pool of one GPU refuses a gang of two shares, naming
// why; an --mpi gang, whose node's tasks are one launch, still packs onto the one GPU:
// the scheduler's copy of the job must say --mpi (it did not: its shares waited forever).
TEST_F(ControllerTest, AGangsSharesEachNeedAGpuUnlessHeldForMpirun) {
  Register(1);
  Job gang = MakeJob(1, 250);
  gang.request.tasks = 2;
  Result<Job> refused = c_->Submit(gang, alice_);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "its 2 tasks with a GPU share each need a GPU of their own (NCCL runs one rank "
                "per GPU); the nodes that could host them have 1 GPU in all"),
            std::string::npos)
      << refused.status().message();
  gang.mpi = true;
  Job mpi = c_->Submit(gang, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job placed = Get(mpi.id);
  ASSERT_EQ(placed.state, JobState::kAssigned) << placed.pending_reason;
  ASSERT_EQ(placed.placement.size(), 2u);
  EXPECT_EQ(placed.placement[0].gpu_uuids, placed.placement[1].gpu_uuids);
}

TEST_F(GangTest, TasksSpreadStartInOrderAndSucceedTogether) {
  Job j = SubmitGang();
  EXPECT_NE(NodeOf(j, 0), NodeOf(j, 1));
  j = StartBoth(j);
  EXPECT_EQ(j.master_port, 41000);
  ASSERT_TRUE(Apply({Exit(j, 1, 0)}, NodeOf(j, 1)).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kRunning);  // task 0 still runs
  ASSERT_TRUE(Apply({Exit(j, 0, 0)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_TRUE(done.tasks[0].ended && done.tasks[1].ended);
}

TEST_F(GangTest, OneFailedTaskStopsTheOthersAndNamesItself) {
  Job j = StartBoth(SubmitGang());
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  ASSERT_TRUE(Apply({Exit(j, 1, 3)}, NodeOf(j, 1)).ok());
  Job stopping = Get(j.id);
  EXPECT_TRUE(stopping.cancel_requested);
  // Task 0's node is told to stop it.
  AgentWork w = c_->WaitForWork(NodeOf(j, 0), 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  EXPECT_EQ(w.cancel[0].attempt, j.attempt);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, /*cancelled=*/true)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kFailed);
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_NE(done.reason.find("task 1 (node " + NodeOf(j, 1) + ") exited with code 3"),
            std::string::npos)
      << done.reason;
}

TEST_F(GangTest, TaskStateSurvivesAControllerRestartBetweenTwoExits) {
  Job j = StartBoth(SubmitGang());
  ASSERT_TRUE(Apply({Exit(j, 1, 0)}, NodeOf(j, 1)).ok());
  Restart();  // what kill -9 leaves: only the store
  Job reloaded = Get(j.id);
  ASSERT_EQ(reloaded.tasks.size(), 2u);
  EXPECT_TRUE(reloaded.tasks[1].ended);
  EXPECT_EQ(reloaded.tasks[1].exit_code, 0);
  EXPECT_FALSE(reloaded.tasks[0].ended);
  ASSERT_TRUE(Apply({Exit(j, 0, 0)}, NodeOf(j, 0)).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kSucceeded);
}

TEST_F(GangTest, CancelBeforeTheOthersStartEndsTheUnsentTasks) {
  Job j = SubmitGang();
  (void)c_->WaitForWork(NodeOf(j, 0), 0);  // task 0's order is out; task 1's is not
  ASSERT_TRUE(c_->Cancel(j.id, alice_).ok());
  Job stopping = Get(j.id);
  EXPECT_TRUE(stopping.tasks[1].ended);  // never sent, so it will never start
  Event e = Exit(j, 0, 0, true);
  ASSERT_TRUE(Apply({e}, NodeOf(j, 0)).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kCancelled);
}

TEST_F(GangTest, MpiJobEndsWithTaskZeroAndReleasesTheHeldTasks) {
  Job j = StartBoth(SubmitGang(/*mpi=*/true));
  (void)c_->WaitForWork(NodeOf(j, 1), 0);
  // mpirun's daemon on the held task gets the port the task was launched without.
  Result<int64_t> x = c_->StartExec(j.id, 1, {"orted"}, alice_);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  AgentWork daemon = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(daemon.exec.size(), 1u);
  EXPECT_EQ(daemon.exec[0].master_port, 41000);
  ASSERT_TRUE(Apply({Exit(j, 0, 0)}, NodeOf(j, 0)).ok());
  AgentWork w = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);  // the held task is released
  ASSERT_TRUE(Apply({Exit(j, 1, 0, /*cancelled=*/true)}, NodeOf(j, 1)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.reason;
  EXPECT_EQ(done.exit_code, 0);
}

// mpirun starts all of a node's ranks in one place: in a gang held for it (--mpi, run,
// alloc) the first task on each node holds every GPU (and the limits) of the job's tasks
// there. A gang whose every task runs the command (torchrun) keeps one GPU set per task.
TEST_F(GangTest, TheFirstTaskOnANodeOfAHeldGangHoldsAllTheGangsGpusThere) {
  for (const std::string kind : {"mpi", "alloc", "torchrun"}) {
    SCOPED_TRACE(kind);
    Job j = MakeJob(1);
    j.request.tasks = 4;  // 2 nodes of 2 GPUs: two tasks on each
    j.mpi = kind == "mpi";
    if (kind == "alloc") {
      j.interactive = "alloc";
      j.command.clear();
    }
    j = c_->Submit(j, alice_).value();
    ASSERT_TRUE(c_->ScheduleOnce().ok());
    j = Get(j.id);
    ASSERT_EQ(j.state, JobState::kAssigned);
    std::map<int, LaunchOrder> orders;
    auto collect = [&] {
      for (const std::string node : {"n1", "n2"}) {
        AgentWork w = c_->WaitForWork(node, 0).value();
        for (LaunchOrder& o : w.launch) {
          if (o.job.id == j.id) orders[o.task_index] = std::move(o);
        }
      }
    };
    collect();
    if (orders.size() < 4) {  // the others wait for task 0's port
      Event s0 = Ev(j, protocol::EventKind::kStarted, 0, 0);
      s0.master_port = 41000;
      ASSERT_TRUE(Apply({s0}, NodeOf(j, 0)).ok());
      collect();
    }
    ASSERT_EQ(orders.size(), 4u);
    const bool held = kind != "torchrun";
    for (int t = 0; t < 4; ++t) {
      SCOPED_TRACE(t);
      const LaunchOrder& o = orders[t];
      std::vector<int> on_node;
      for (int u = 0; u < 4; ++u) {
        if (NodeOf(j, u) == NodeOf(j, t)) on_node.push_back(u);
      }
      ASSERT_EQ(on_node.size(), 2u);
      std::vector<std::string> gpus;
      for (const protocol::GpuGrant& g : o.gpus) gpus.push_back(g.uuid);
      if (held && t == on_node[0]) {
        EXPECT_EQ(o.node_tasks, on_node);
        std::vector<std::string> both = j.placement[on_node[0]].gpu_uuids;
        both.push_back(j.placement[on_node[1]].gpu_uuids.at(0));
        std::sort(both.begin(), both.end());  // in the node's order
        EXPECT_EQ(gpus, both);
        EXPECT_TRUE(o.denied_device_nodes.empty());
      } else {
        EXPECT_TRUE(o.node_tasks.empty());
        EXPECT_EQ(gpus, j.placement[t].gpu_uuids);
        EXPECT_EQ(o.denied_device_nodes.size(), 1u);
      }
    }
    ASSERT_TRUE(c_->Cancel(j.id, alice_).ok());
    for (int t = 0; t < 4; ++t) {
      ASSERT_TRUE(Apply({Exit(j, t, 0, /*cancelled=*/true)}, NodeOf(j, t)).ok());
    }
    ASSERT_TRUE(Get(j.id).tasks[3].ended);
  }
}

TEST_F(GangTest, LosingOneNodeStopsTheTasksOnTheOthers) {
  Job j = StartBoth(SubmitGang());
  const std::string lost = NodeOf(j, 1);
  const std::string alive = NodeOf(j, 0);
  (void)c_->WaitForWork(alive, 0);
  clock_.AdvanceMicros(11'000'000);
  (void)c_->WaitForWork(alive, 0);  // the live node keeps polling
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(j.id).state, JobState::kLost);
  AgentWork w = c_->WaitForWork(alive, 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  EXPECT_EQ(w.cancel[0].attempt, j.attempt);
  // Resent until that node reports the task's end.
  clock_.AdvanceMicros(6'000'000);
  EXPECT_EQ(c_->WaitForWork(alive, 0)->cancel.size(), 1u);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, alive).ok());
  clock_.AdvanceMicros(6'000'000);
  EXPECT_TRUE(c_->WaitForWork(alive, 0)->cancel.empty());
}

TEST_F(GangTest, AnAgentRunningATaskNobodyExpectsIsToldToStopIt) {
  Register(2, {{424242, 3}}, "n2");
  AgentWork w = c_->WaitForWork("n2", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, 424242);
  EXPECT_EQ(w.cancel[0].attempt, 3);
  // Resent while unanswered, and given up once the node has shown for a minute that it
  // runs nothing of that job (no exit reported).
  clock_.AdvanceMicros(6'000'000);
  EXPECT_EQ(c_->WaitForWork("n2", 0)->cancel.size(), 1u);
  clock_.AdvanceMicros(60'000'000);
  (void)c_->WaitForWork("n2", 0);
  clock_.AdvanceMicros(6'000'000);
  EXPECT_TRUE(c_->WaitForWork("n2", 0)->cancel.empty());
}

TEST_F(GangTest, ExecRunsInARunningTaskForItsOwnerOnly) {
  Job j = SubmitGang();
  // Asked before task 1 has started (mpirun does): held until it runs.
  Result<int64_t> early = c_->StartExec(j.id, 1, {"true"}, alice_);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_TRUE(c_->WaitForWork(NodeOf(j, 1), 0)->exec.empty());
  j = StartBoth(j);
  EXPECT_EQ(c_->StartExec(j.id, 1, {"hostname"}, bob_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->StartExec(j.id, 5, {"hostname"}, alice_).status().code(),
            StatusCode::kInvalidArgument);
  Result<int64_t> x = c_->StartExec(j.id, 1, {"hostname"}, alice_);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  AgentWork w = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(w.exec.size(), 2u);
  EXPECT_EQ(w.exec[0].id, *early);
  w.exec.erase(w.exec.begin());
  EXPECT_EQ(w.exec[0].id, *x);
  EXPECT_EQ(w.exec[0].task_index, 1);
  EXPECT_EQ(w.exec[0].argv, std::vector<std::string>{"hostname"});
  EXPECT_EQ(c_->WaitExec(*x, bob_, false, false, 0).status().code(), StatusCode::kNotFound);
  EventBatch b{NodeOf(j, 1), {}, {{*x, true, false, {}, {}, "", "/o", "/e"}}};
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 1), b).ok());
  ExecSession s = c_->WaitExec(*x, alice_, false, false, 1000).value();
  EXPECT_TRUE(s.started);
  EXPECT_EQ(s.stdout_path, "/o");
  b.exec = {{*x, true, true, 7, {}, "", "", ""}};
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 1), b).ok());
  s = c_->WaitExec(*x, alice_, true, false, 1000).value();
  EXPECT_TRUE(s.ended);
  EXPECT_EQ(s.exit_code, 7);
  // A job that ended takes no more.
  ASSERT_TRUE(c_->Cancel(j.id, alice_).ok());
  EXPECT_EQ(c_->StartExec(j.id, 1, {"true"}, alice_).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(GangTest, AnExecsOutputThatCameWithItsEndIsKeptForItsClient) {
  Job j = StartBoth(SubmitGang());
  Result<int64_t> x = c_->StartExec(j.id, 1, {"hostname"}, alice_);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  Result<int64_t> y = c_->StartExec(j.id, 1, {"hostname"}, alice_);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  ASSERT_EQ(c_->WaitForWork(NodeOf(j, 1), 0)->exec.size(), 2u);
  protocol::ExecReport end{*x, true, true, 0, {}, "", "/o", "/e"};
  end.output_complete = true;
  end.stdout_data = "n1\n";
  end.stderr_data = "warning\n";
  protocol::ExecReport plain{*y, true, true, 0, {}, "", "/o2", "/e2"};  // an older agent's
  EventBatch b{NodeOf(j, 1), {}, {end, plain}};
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 1), b).ok());
  ExecSession s = c_->WaitExec(*x, alice_, false, false, 0).value();
  EXPECT_TRUE(s.ended);
  EXPECT_TRUE(s.output_complete);
  EXPECT_EQ(s.complete_output[0], "n1\n");
  EXPECT_EQ(s.complete_output[1], "warning\n");
  // Without the inline output, reads are relayed from the node's files as before.
  s = c_->WaitExec(*y, alice_, false, false, 0).value();
  EXPECT_TRUE(s.ended);
  EXPECT_FALSE(s.output_complete);
  EXPECT_EQ(s.stdout_path, "/o2");
}

TEST_F(GangTest, ProtocolVersionsOneMinorApartWorkAndFartherOnesAreRefused) {
  protocol::Registration r;
  r.node = "n3";
  r.info = MakeNode(1);
  r.info.gpus[0].uuid = "GPU-n3";
  const int minor = protocol::kVersion.minor;
  r.version = {1, minor + 2};
  Result<protocol::RegistrationReply> far = c_->RegisterNode(r, "");
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("upgrade gpupool"), std::string::npos);
  r.version = {1, minor - 2};
  EXPECT_FALSE(c_->RegisterNode(r, "").ok());
  r.version = {1, minor + 1};
  EXPECT_TRUE(c_->RegisterNode(r, "").ok());
  r.version = {1, minor - 1};
  Result<protocol::RegistrationReply> old = c_->RegisterNode(r, "192.0.2.7:5555");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->address, "192.0.2.7");  // no --address: where it connected from
  EXPECT_EQ(old->version, protocol::kVersion);
  // An agent one minor older runs jobs and plain execs (and interactive ones from 1.2 on).
  Job j = MakeJob(1);
  j.request.gpu_models = {"A100"};
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  const std::string node = j.placement[0].node;
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}, node).ok());
  if (node == "n3") {
    EXPECT_TRUE(c_->StartExec(j.id, 0, {"true"}, alice_).ok());
    Result<int64_t> x = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
    if (protocol::SupportsInteractiveExec(r.version)) {
      EXPECT_TRUE(x.ok()) << x.status().ToString();
    } else {
      ASSERT_FALSE(x.ok());
      EXPECT_NE(x.status().message().find("which has no interactive exec"), std::string::npos)
          << x.status().message();
    }
  }
}

}  // namespace
}  // namespace gpupool::controller::controller_test
