// The controller's core (ControllerTest, controller_test.h): a job through its states,
// shared and MPS GPUs, refusals at submit, drains, cancels, node loss and restarts, fair
// share. The scheduler loop's passes: controller_loop_test.cc.

#include "controller/controller_test.h"

#include "controller/job_scheduler.h"

namespace gpupool::controller::controller_test {
namespace {

// Issue 27's TimeLimit event: a running job that its node lets run past --time by the
// grace (the node's shim would have stopped it) is stopped by the controller, and ends
// TIMEOUT when its task's end comes back. Within the grace, nothing happens.
TEST_F(ControllerTest, TheControllerStopsAJobItsNodeLetRunPastItsTimeLimit) {
  ControllerOptions o;
  o.time_limit_grace_s = 60;
  Restart(o);
  Register(2);
  Job j = MakeJob(1);
  j.time_limit_s = 30;
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  ASSERT_EQ(Get(j.id).state, JobState::kRunning);
  for (int s = 0; s < 85; s += 5) {  // to 85 s, within 30 + 60 s, the agent polling
    clock_.AdvanceMicros(5'000'000);
    ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());
    ASSERT_TRUE(c_->SweepTimeLimits().ok());
    ASSERT_FALSE(Get(j.id).cancel_requested) << "after " << s + 5 << " s";
  }
  clock_.AdvanceMicros(6'000'000);  // 91 s
  ASSERT_TRUE(c_->SweepTimeLimits().ok());
  const Job stopping = Get(j.id);
  EXPECT_TRUE(stopping.cancel_requested);
  EXPECT_TRUE(stopping.time_limit_hit);
  EXPECT_TRUE(store_->GetJob(j.id)->time_limit_hit);
  const AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].job_id, j.id);
  Event end = Ev(j, protocol::EventKind::kExited);
  end.exit_code.reset();
  end.signal = 15;
  end.cancelled = true;
  ASSERT_TRUE(Apply({end}).ok());
  const Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kTimeout);
  EXPECT_NE(done.reason.find("time limit of 30 s"), std::string::npos) << done.reason;
  EXPECT_EQ(store_->GetJob(j.id)->state, JobState::kTimeout);
}

TEST_F(ControllerTest, JobRunsThroughItsStates) {
  Register(2);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(j.state, JobState::kPending);
  EXPECT_EQ(j.user, "alice");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_EQ(j.state, JobState::kAssigned);
  ASSERT_EQ(j.placement.size(), 1u);
  EXPECT_EQ(j.placement[0].node, "n1");
  EXPECT_EQ(j.attempt, 1);

  AgentWork work = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(work.launch.size(), 1u);
  const LaunchOrder& o = work.launch[0];
  ASSERT_EQ(o.gpus.size(), 1u);
  EXPECT_EQ(o.gpus[0].uuid, j.placement[0].gpu_uuids[0]);
  ASSERT_EQ(o.denied_device_nodes.size(), 1u);  // the other GPU's node
  EXPECT_NE(o.denied_device_nodes[0], o.gpus[0].device_nodes[0]);
  // Not sent again right away.
  EXPECT_TRUE(c_->WaitForWork("n1", 0)->launch.empty());

  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kRunning);
  clock_.AdvanceMicros(5'000'000);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 0)}).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(done.exit_code, 0);
  // A resent event changes nothing.
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 3)}).ok());
  EXPECT_EQ(Get(j.id).state, JobState::kSucceeded);
}

TEST_F(ControllerTest, NonZeroExitFailsAndStoreHasEveryTransition) {
  Register(1);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kExited, 2)}).ok());
  Job stored = store_->GetJob(j.id).value();
  EXPECT_EQ(stored.state, JobState::kFailed);
  EXPECT_EQ(stored.exit_code, 2);
}

// An agent's kill cause reaches the stored task: an OOM kill is kept by name with its
// words, and a detail from the network that the store could not read back (a NUL byte,
// far too long) is kept bounded instead.
TEST_F(ControllerTest, AnAgentsKillCauseIsStoredWithTheTaskBounded) {
  Register(1);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}).ok());
  Event end = Ev(j, protocol::EventKind::kExited);
  end.exit_code.reset();
  end.signal = 9;
  end.reason = "killed by the kernel's OOM killer: node n1 ran out of memory; ended by SIGKILL";
  end.kill_cause = protocol::KillCause::kOomNode;
  end.kill_detail =
      std::string("killed by the kernel's OOM") + '\0' + " killer " + std::string(5000, 'x');
  ASSERT_TRUE(Apply({end}).ok());
  Result<Job> stored = store_->GetJob(j.id);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->state, JobState::kFailed);
  EXPECT_EQ(stored->reason, end.reason);  // one task: its node's words as they are
  ASSERT_EQ(stored->tasks.size(), 1u);
  EXPECT_EQ(stored->tasks[0].kill_cause, "oom_node");
  EXPECT_EQ(stored->tasks[0].kill_detail.size(), 1024u);
  EXPECT_TRUE(stored->tasks[0].kill_detail.starts_with("killed by the kernel's OOM killer x"));
}

TEST_F(ControllerTest, SharedGpuHoldsTwoHalfJobs) {
  Register(1);
  Job a = c_->Submit(MakeJob(1, 500), alice_).value();
  Job b = c_->Submit(MakeJob(1, 500), bob_).value();
  Job c = c_->Submit(MakeJob(1, 500), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  c = Get(c.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  ASSERT_EQ(b.state, JobState::kAssigned);
  EXPECT_EQ(a.placement[0].gpu_uuids, b.placement[0].gpu_uuids);
  EXPECT_EQ(a.placement[0].gpu_milli, 500);
  EXPECT_EQ(c.state, JobState::kPending);
  EXPECT_EQ(c.pending_reason,
            "needs 0.5 of one GPU; the most free on any GPU: 0; 0/1 nodes are available: 1 "
            "insufficient GPU share");
  auto nodes = c_->Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].allocated_milli[0], 1000);
}

// Issue 28: MPS serves one Unix user per GPU at a time, so a GPU whose node states MPS
// takes one user's shares at a time: bob's share waits, saying why, until alice's ends.
TEST_F(ControllerTest, MpsGpuTakesOneUsersSharesAtATime) {
  enforcement_ = "mps";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job b = c_->Submit(MakeJob(1, 300), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).state, JobState::kPending);
  EXPECT_EQ(Get(b.id).pending_reason,
            std::string("needs 0.3 of one GPU; ") + kMpsOneUserNote +
                "; 0/1 nodes are available: 1 single-owner GPUs held by another owner");
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);  // alice's share still runs
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  b = Get(b.id);
  ASSERT_EQ(b.state, JobState::kAssigned);
  EXPECT_EQ(b.placement[0].gpu_uuids, a.placement[0].gpu_uuids);
  // Now bob holds it: alice's next share waits for him.
  Job a2 = c_->Submit(MakeJob(1, 300), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a2.id).state, JobState::kPending);
  EXPECT_NE(Get(a2.id).pending_reason.find("held by another user's shares"), std::string::npos);
}

// The third red team: bob's share reached alice's MPS GPU by no other shape of request in
// the same pass: a memory size instead of a fraction, an array, a gang of shares, a
// higher priority.
TEST_F(ControllerTest, NoShapeOfRequestPutsAnotherUsersShareOnAnMpsGpu) {
  enforcement_ = "mps";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job by_memory = MakeJob(1);
  by_memory.request.gpu_memory_bytes = uint64_t{8} << 30;
  Job array = MakeJob(1, 100);
  array.array = "0-2";
  Job gang = MakeJob(1, 200);
  gang.request.tasks = 2;
  gang.mpi = true;  // its shares may pack onto the one GPU (gang_placement.h)
  Job urgent = MakeJob(1, 100);
  urgent.priority = 1000000;
  for (const Job& j : {by_memory, array, gang, urgent}) ASSERT_TRUE(c_->Submit(j, bob_).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);
  Result<std::vector<Job>> all = store_->ListJobs({});
  ASSERT_TRUE(all.ok());
  int bobs = 0;
  for (const Job& j : *all) {
    if (j.user != "bob") continue;
    ++bobs;
    EXPECT_EQ(j.state, JobState::kPending) << j.id;
  }
  EXPECT_EQ(bobs, 6);  // the array's three elements
}

// A share sized by more memory than any GPU has is refused at submit; the refusal names
// the flag the user gave and what to ask instead (it said only "needs 200.0 GiB of GPU
// memory").
TEST_F(ControllerTest, AShareLargerThanEveryGpuIsRefusedNamingItsFlag) {
  Register(1);  // 80 GiB GPUs
  Job big = MakeJob(1);
  big.request.gpu_memory_bytes = uint64_t{200} << 30;
  Result<Job> r = c_->Submit(big, alice_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("needs 200.0 GiB of GPU memory (--gpu-mem); the largest "
                                      "GPU here has 80.0 GiB: ask for at most that"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(store_->ListJobs({}).value().empty());  // nothing stored
}

// Where the admin lets MPS serve several users (--mps-multi-user), two users' shares
// share an MPS GPU at once.
TEST_F(ControllerTest, MpsMultiUserLetsSeveralUsersShareAnMpsGpu) {
  ControllerOptions options;
  options.mps_sharing = MpsSharing::kUsers;
  Restart(options);
  enforcement_ = "mps";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job b = c_->Submit(MakeJob(1, 300), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(a.id).state, JobState::kAssigned);
  ASSERT_EQ(Get(b.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(a.id).placement[0].gpu_uuids, Get(b.id).placement[0].gpu_uuids);
}

// MPS holds each client to the largest share among its server's, so under --mps-one-size an
// MPS GPU takes one size of a user's shares at a time: alice's two quarters share it, her
// half waits, saying why, until they end.
TEST_F(ControllerTest, UnderOneSizeAnMpsGpuTakesOneSizeOfAUsersSharesAtATime) {
  ControllerOptions options;
  options.mps_sharing = MpsSharing::kOneSize;
  Restart(options);
  enforcement_ = "mps";
  Register(1);
  Job q1 = c_->Submit(MakeJob(1, 250), alice_).value();
  Job q2 = c_->Submit(MakeJob(1, 250), alice_).value();
  Job half = c_->Submit(MakeJob(1, 500), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  q1 = Get(q1.id);
  q2 = Get(q2.id);
  ASSERT_EQ(q1.state, JobState::kAssigned);
  ASSERT_EQ(q2.state, JobState::kAssigned);
  EXPECT_EQ(q1.placement[0].gpu_uuids, q2.placement[0].gpu_uuids);
  EXPECT_EQ(Get(half.id).state, JobState::kPending);
  EXPECT_NE(Get(half.id).pending_reason.find(kMpsOneSizeNote), std::string::npos)
      << Get(half.id).pending_reason;
  for (const Job& q : {q1, q2}) {
    ASSERT_TRUE(Apply({Ev(q, protocol::EventKind::kStarted)}).ok());
    ASSERT_TRUE(Apply({Ev(Get(q.id), protocol::EventKind::kExited, 0)}).ok());
  }
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(half.id).state, JobState::kAssigned);
}

// By default a user's shares of any size share an MPS GPU (each held to the largest);
// another user's still wait.
TEST_F(ControllerTest, ByDefaultOneUsersSharesOfAnySizeShareAnMpsGpu) {
  enforcement_ = "mps";
  Register(1);
  Job q = c_->Submit(MakeJob(1, 250), alice_).value();
  Job half = c_->Submit(MakeJob(1, 500), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(q.id).state, JobState::kAssigned);
  ASSERT_EQ(Get(half.id).state, JobState::kAssigned) << Get(half.id).pending_reason;
  EXPECT_EQ(Get(q.id).placement[0].gpu_uuids, Get(half.id).placement[0].gpu_uuids);
  Job bobs = c_->Submit(MakeJob(1, 250), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(bobs.id).state, JobState::kPending);
  EXPECT_NE(Get(bobs.id).pending_reason.find(kMpsOneUserNote), std::string::npos)
      << Get(bobs.id).pending_reason;
}

// A GPU that is not an MPS GPU ("none": shares scheduled, not enforced) takes any user's.
TEST_F(ControllerTest, AGpuWithoutMpsTakesSeveralUsersShares) {
  enforcement_ = "none";
  Register(1);
  Job a = c_->Submit(MakeJob(1, 300), alice_).value();
  Job b = c_->Submit(MakeJob(1, 300), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
}

TEST_F(ControllerTest, PendingReasonNamesTheLargestIdleBlock) {
  Register(2);
  Job busy = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job want = MakeJob(2);
  want.request.gpu_models = {"a100"};
  want = c_->Submit(want, bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(busy.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(want.id).pending_reason,
            "needs 2 idle GPUs of model A100; largest idle block on any node: 1; 0/1 nodes are "
            "available: 1 insufficient GPUs");
}

TEST_F(ControllerTest, ImpossibleJobsAreRefusedAtSubmit) {
  Register(2);
  Job tooBig = MakeJob(4);
  Result<Job> r = c_->Submit(tooBig, alice_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  Job wrongModel = MakeJob(1);
  wrongModel.request.gpu_models = {"H100"};
  r = c_->Submit(wrongModel, alice_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no node has GPUs of model H100 (models here: A100)"),
            std::string::npos)
      << r.status().message();
  Job noCommand = MakeJob(1);
  noCommand.command.clear();
  EXPECT_EQ(c_->Submit(noCommand, alice_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListJobs({})->empty());
}

// Issue 15 A.2: a refusal named none of the constraints ("no node could ever host task 1
// (9 GPUs x 1000 thousandths ...)"); now it names the one that fails.
TEST_F(ControllerTest, ConstraintRefusalsNameTheConstraint) {
  Register(2);
  auto refusal = [&](Job j) {
    Result<Job> r = c_->Submit(j, alice_);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  Job cap = MakeJob(1);
  cap.request.min_capability = "9.5";
  EXPECT_NE(refusal(cap).find("compute capability 9.5 or newer (--min-capability): the newest of "
                              "the nodes that could otherwise host it is 8.0"),
            std::string::npos)
      << refusal(cap);
  Job amd = MakeJob(1);
  amd.request.vendor = "amd";
  EXPECT_NE(refusal(amd).find("no node has GPUs of vendor amd (models here: A100)"),
            std::string::npos);
  Job cpus = MakeJob(1);
  cpus.request.cpu_milli = 100'000;
  EXPECT_NE(refusal(cpus).find("it asks for 100 CPUs (--cpus); the most any node with the GPUs "
                               "has is 64 CPUs"),
            std::string::npos)
      << refusal(cpus);
  Job mem = MakeJob(0);
  mem.request.memory_bytes = uint64_t{300'000} << 20;
  EXPECT_NE(refusal(mem).find("300000 MiB of memory (--mem); the most any node has is 256000 MiB"),
            std::string::npos)
      << refusal(mem);
  Job gpus = MakeJob(9);
  EXPECT_NE(refusal(gpus).find("it asks for 9 GPUs on one node; the most any node has is 2"),
            std::string::npos)
      << refusal(gpus);
}

// Issue 15 B.4: an admin drains a node; what runs there finishes, nothing new starts,
// and the drain outlives agent re-registration and a controller restart.
TEST_F(ControllerTest, DrainedNodeFinishesItsJobsAndStartsNothingNew) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  ASSERT_EQ(a.state, JobState::kAssigned);
  EXPECT_EQ(c_->DrainNode("n1", "disk swap", alice_).status().code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->DrainNode("n1", "", root_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c_->DrainNode("n1", "bad\nline", root_).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c_->DrainNode("nosuch", "x", root_).status().code(), StatusCode::kNotFound);
  Result<NodeView> v = c_->DrainNode("n1", "disk swap", root_);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->state, "draining");  // a job still runs there
  EXPECT_EQ(v->drain_reason, "disk swap (root)");

  Job b = c_->Submit(MakeJob(1), bob_).value();  // a GPU is idle, but not for new jobs
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);
  EXPECT_EQ(Get(b.id).pending_reason,
            "needs 1 idle GPU; largest idle block on any node: 0; 0/1 nodes are available: 1 "
            "draining (n1)");
  EXPECT_EQ(Get(a.id).state, JobState::kAssigned);  // what ran goes on

  Register(2, {{a.id, a.attempt}});  // the agent restarts
  Restart();                         // and so does the controller
  EXPECT_EQ(c_->Nodes()[0].state, "draining");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);

  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}).ok());
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(c_->Nodes()[0].state, "drained");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kPending);

  EXPECT_EQ(c_->ResumeNode("n1", bob_).status().code(), StatusCode::kPermissionDenied);
  v = c_->ResumeNode("n1", root_);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->state, "up");
  EXPECT_EQ(v->drain_reason, "");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kAssigned);
}

TEST_F(ControllerTest, NodesShowCpuAndMemoryAllocatedAndTotal) {
  Register(2);
  Job j = MakeJob(1);
  j.request.cpu_milli = 2500;
  j.request.memory_bytes = (uint64_t{3} << 30) + 1;  // rounds up to whole MiB
  j = c_->Submit(j, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  NodeView v = c_->Nodes().at(0);
  EXPECT_EQ(v.cpu_milli, 64'000);
  EXPECT_EQ(v.cpu_allocated_milli, 2500);
  EXPECT_EQ(v.memory_mib, 256'000);
  EXPECT_EQ(v.memory_allocated_mib, 3 * 1024 + 1);
}

TEST_F(ControllerTest, ARetriedSubmissionIsCreatedOnce) {
  Register(4);
  Job j = MakeJob(1);
  j.submit_key = "c0ffee-1";
  bool duplicate = true;
  Result<Job> first = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_FALSE(duplicate);
  Result<Job> again = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(again->id, first->id);
  // After a restart (a failover reloads the store) and once it runs, still the same job.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Restart();
  again = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(again->state, JobState::kAssigned);
  // Keys are per user: bob's is his own job.
  Result<Job> bobs = c_->Submit(j, bob_, &duplicate);
  ASSERT_TRUE(bobs.ok());
  EXPECT_FALSE(duplicate);
  EXPECT_NE(bobs->id, first->id);
  // An array's key is its first element's: retried, no new elements.
  Job arr = MakeJob(1);
  arr.array = "0-3";
  arr.submit_key = "array-9";
  const int64_t head = c_->Submit(arr, alice_, &duplicate)->id;
  const size_t jobs_now = store_->ListJobs({})->size();
  EXPECT_EQ(c_->Submit(arr, alice_, &duplicate)->id, head);
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(store_->ListJobs({})->size(), jobs_now);
  Job bad = MakeJob(1);
  bad.submit_key = "no spaces please";
  Result<Job> refused = c_->Submit(bad, alice_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().rfind("submit_key:", 0), 0u) << refused.status().message();
}

TEST_F(ControllerTest, UsersOnlySeeAndCancelTheirOwnJobs) {
  Register(1);
  Job j = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(c_->Get(j.id, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->Cancel(j.id, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(c_->List({}, bob_)->empty());
  EXPECT_EQ(c_->List({}, root_)->size(), 1u);
  EXPECT_EQ(Get(j.id).state, JobState::kPending);
}

TEST_F(ControllerTest, CancelPendingAndRunning) {
  Register(1);
  Job run = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job wait = c_->Submit(MakeJob(1), alice_).value();
  EXPECT_EQ(c_->Cancel(wait.id, alice_)->state, JobState::kCancelled);
  EXPECT_EQ(c_->Cancel(wait.id, alice_).status().code(), StatusCode::kFailedPrecondition);

  run = Get(run.id);
  ASSERT_TRUE(Apply({Ev(run, protocol::EventKind::kStarted)}).ok());
  (void)c_->WaitForWork("n1", 0);
  ASSERT_TRUE(c_->Cancel(run.id, alice_).ok());
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel, (std::vector<protocol::CancelOrder>{{run.id, Get(run.id).attempt, 0}}));
  Event e = Ev(Get(run.id), protocol::EventKind::kExited);
  e.exit_code.reset();
  e.signal = 15;
  e.cancelled = true;
  ASSERT_TRUE(Apply({e}).ok());
  EXPECT_EQ(Get(run.id).state, JobState::kCancelled);
}

// A job cancelled while its launch order had not reached its agent (the agent was down,
// frozen, or lost the answer) stayed ASSIGNED "cancelling" for good, holding its GPUs:
// only a cancel went out, and the agent had nothing to stop. Its launch orders go out
// again after the cancel, which the agent refuses and reports as the task's end.
TEST_F(ControllerTest, AJobCancelledBeforeItsAgentHadItsLaunchEnds) {
  Register(2);
  Job job = c_->Submit(MakeJob(2), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(job.id).state, JobState::kAssigned);
  ASSERT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 1u);  // lost on the way
  ASSERT_TRUE(c_->Cancel(job.id, alice_).ok());
  // The cancel, and the launch again after it (each in the same answer).
  clock_.AdvanceMicros(6'000'000);
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.cancel, (std::vector<protocol::CancelOrder>{{job.id, 1, 0}}));
  ASSERT_EQ(w.launch.size(), 1u);
  EXPECT_EQ(w.launch[0].job.id, job.id);
  // Sent again only after the resend interval, and then with the cancel again.
  w = c_->WaitForWork("n1", 0).value();
  EXPECT_TRUE(w.launch.empty());
  EXPECT_TRUE(w.cancel.empty());
  clock_.AdvanceMicros(6'000'000);
  w = c_->WaitForWork("n1", 0).value();
  EXPECT_EQ(w.launch.size(), 1u);
  EXPECT_EQ(w.cancel.size(), 1u);
  // The agent refuses the launch (agent_loop.cc: "cancelled before it started").
  Event e = Ev(Get(job.id), protocol::EventKind::kExited);
  e.exit_code.reset();
  e.cancelled = true;
  e.reason = "cancelled before it started";
  ASSERT_TRUE(Apply({e}).ok());
  EXPECT_EQ(Get(job.id).state, JobState::kCancelled);
  Job other = c_->Submit(MakeJob(2), alice_).value();  // its GPUs are free again
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(other.id).state, JobState::kAssigned);
}

TEST_F(ControllerTest, SilentNodeLosesItsJobsAndRequeuesWhenAsked) {
  Register(2);
  Job plain = c_->Submit(MakeJob(1), alice_).value();
  Job again = MakeJob(1);
  again.requeue = true;
  again = c_->Submit(again, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  // Their launches are handed out (one that never was is queued again: never_launched_test).
  ASSERT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 2u);
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  Job lost = Get(plain.id);
  EXPECT_EQ(lost.state, JobState::kLost);
  EXPECT_EQ(lost.reason, "node n1 stopped responding (no heartbeat for 10 s)");
  Job requeued = Get(again.id);
  EXPECT_EQ(requeued.state, JobState::kPending);
  EXPECT_TRUE(requeued.placement.empty());
  // Nothing schedules onto the down node. It comes back by registering again (a poll
  // is told to: it lists what still runs there), not by polling.
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kPending);
  Result<AgentWork> poll = c_->WaitForWork("n1", 0);
  ASSERT_FALSE(poll.ok());
  EXPECT_EQ(poll.status().code(), StatusCode::kNotFound);
  EXPECT_NE(poll.status().message().find("register it again"), std::string::npos);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kPending);
  Register(2);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(again.id).attempt, 2);
}

TEST_F(ControllerTest, RestartKeepsJobsAndAgentReconciles) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(b, protocol::EventKind::kStarted)}).ok());
  Restart();  // the controller dies and comes back on the same store
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  // The agent re-registers knowing only job a: b is gone.
  Register(2, {{a.id, a.attempt}});
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_EQ(Get(b.id).state, JobState::kLost);
  EXPECT_NE(Get(b.id).reason.find("restarted"), std::string::npos);
  // a finishes after the restart and its state arrives.
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kSucceeded);
}

// A controller restarted with a node timeout shorter than an agent's back-off (up to 5 s
// between tries after its calls to the old controller failed) declared the nodes lost
// before their agents could poll again, and their running jobs LOST: a node unheard since
// the restart gets at least 15 s, one heard since then the node timeout.
TEST_F(ControllerTest, ARestartedControllerWaitsOutTheAgentsBackOffWhateverTheNodeTimeout) {
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Job a = c_->Submit(MakeJob(2), alice_).value();
  Job b = c_->Submit(MakeJob(2), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}, a.placement.at(0).node).ok());
  ASSERT_TRUE(Apply({Ev(b, protocol::EventKind::kStarted)}, b.placement.at(0).node).ok());
  c_.reset();
  ControllerOptions o;
  o.node_timeout_us = 2'000'000;
  c_ = Controller::Create(store_.get(), &clock_, o).value();
  clock_.AdvanceMicros(6'000'000);  // past the timeout, within the grace
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_EQ(Get(b.id).state, JobState::kRunning);
  // a's node polls again and is held to the node timeout from then; b's never does.
  const std::string heard = a.placement.at(0).node;
  Register(2, {{a.id, a.attempt}}, heard);
  clock_.AdvanceMicros(2'500'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kLost);
  EXPECT_EQ(Get(b.id).state, JobState::kRunning);
  clock_.AdvanceMicros(7'000'000);  // 15.5 s since the restart
  ASSERT_TRUE(c_->SweepNodes().ok());
  const Job lost = Get(b.id);
  EXPECT_EQ(lost.state, JobState::kLost);
  EXPECT_NE(lost.reason.find("no heartbeat for 15 s"), std::string::npos) << lost.reason;
}

// A restarted controller took every stored node for up, the dead ones too (their agents
// killed before the restart), and placed new jobs there, which ended LOST without running
// (or, with --requeue, waited out a node lease for an attempt that never started). A node
// takes new work once its agent is heard from again; until then it shows as "unknown".
TEST_F(ControllerTest, ARestartedControllerPlacesNothingOnANodeUntilItsAgentIsHeard) {
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Restart();
  std::vector<NodeView> views = c_->Nodes();
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].state, "unknown");
  EXPECT_EQ(views[1].state, "unknown");
  ASSERT_TRUE(c_->WaitForWork("n1", 0).ok());  // n1's agent polls; n2's is dead
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(c_->Submit(MakeJob(1), alice_).value().id);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  int placed = 0;
  for (int64_t id : ids) {
    const Job j = Get(id);
    if (j.state != JobState::kAssigned) continue;
    ++placed;
    EXPECT_EQ(j.placement.at(0).node, "n1") << id;
  }
  EXPECT_EQ(placed, 2);
  views = c_->Nodes();
  EXPECT_EQ(views[0].state, "up");
  EXPECT_EQ(views[1].state, "unknown");
  // The third job's reason names n2 as `gpupool nodes` does (it said "draining").
  EXPECT_NE(Get(ids[2]).pending_reason.find("1 unknown (n2)"), std::string::npos)
      << Get(ids[2]).pending_reason;
  // n2's agent comes back: it takes work again.
  Register(2, {}, "n2");
  EXPECT_EQ(c_->Nodes()[1].state, "up");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(ids[2]).state, JobState::kAssigned);
  EXPECT_EQ(Get(ids[2]).placement.at(0).node, "n2");
}

// Issue 25 item 1: jobs that ended while the agent was down (kill -9 of `gpupool up`)
// were recorded LOST when it registered again, before their ends arrived.
TEST_F(ControllerTest, ATaskThatEndedWhileTheAgentWasDownIsNotLostWhenItRegisters) {
  Register(2);
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  b = Get(b.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(b, protocol::EventKind::kStarted)}).ok());
  Restart();
  // The agent comes back: a ended meanwhile (its end is not reported yet), b vanished.
  protocol::Registration r;
  r.node = "n1";
  r.info = MakeNode(2);
  r.cpu_milli = 64'000;
  r.memory_mib = 256'000;
  r.ended = {{a.id, 0, a.attempt}};
  ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  EXPECT_EQ(Get(a.id).state, JobState::kRunning);
  EXPECT_EQ(Get(b.id).state, JobState::kLost);
  // No stop order for a: its task is over, not a stray (b's is sent, in case).
  const AgentWork work = c_->WaitForWork("n1", 0).value();
  for (const protocol::CancelOrder& o : work.cancel) EXPECT_NE(o.job_id, a.id);
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kSucceeded);
}

// Issue 25 item 2: a --requeue job whose node came back while its first attempt still
// ran there. The old attempt is stopped; the job is not placed again (on any node)
// until that attempt's end is reported, so two attempts never run at once.
TEST_F(ControllerTest, ARequeuedJobWaitsForItsEarlierAttemptToStopOnAReturningNode) {
  Register(2);
  Job again = MakeJob(1);
  again.requeue = true;
  again = c_->Submit(again, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  again = Get(again.id);
  ASSERT_TRUE(Apply({Ev(again, protocol::EventKind::kStarted)}).ok());
  clock_.AdvanceMicros(11'000'000);
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_EQ(Get(again.id).state, JobState::kPending);
  // The agent returns; attempt 1's supervisor kept the job running.
  Register(2, {{again.id, 1}});
  AgentWork w = c_->WaitForWork("n1", 0).value();
  EXPECT_EQ(w.cancel, (std::vector<protocol::CancelOrder>{{again.id, 1, 0}}));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job waiting = Get(again.id);
  EXPECT_EQ(waiting.state, JobState::kPending);
  EXPECT_NE(waiting.pending_reason.find("attempt 1"), std::string::npos) << waiting.pending_reason;
  EXPECT_NE(waiting.pending_reason.find("n1"), std::string::npos) << waiting.pending_reason;
  // Attempt 1 ends (stopped): attempt 2 may start.
  Event stopped = Ev(again, protocol::EventKind::kExited);
  stopped.attempt = 1;
  stopped.exit_code.reset();
  stopped.signal = 15;
  stopped.cancelled = true;
  ASSERT_TRUE(Apply({stopped}).ok());
  EXPECT_EQ(Get(again.id).state, JobState::kPending);  // a stale attempt's end changes nothing
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(again.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(again.id).attempt, 2);
  ASSERT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 1u);
}

TEST_F(ControllerTest, FairShareInterleavesUsers) {
  Register(2);
  std::vector<Job> alice;
  for (int i = 0; i < 3; ++i) alice.push_back(c_->Submit(MakeJob(1), alice_).value());
  Job bob = c_->Submit(MakeJob(1), bob_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  // Two GPUs: one for alice, one for bob, although alice queued first.
  EXPECT_EQ(Get(bob.id).state, JobState::kAssigned);
  int alice_running = 0;
  for (const Job& j : alice) alice_running += Get(j.id).state == JobState::kAssigned ? 1 : 0;
  EXPECT_EQ(alice_running, 1);
}

// The node view and the agent's work come from the index of jobs holding resources:
// it must follow every transition (assign, start, end, cancel, loss, requeue, restart).
TEST_F(ControllerTest, NodeViewFollowsEveryTransition) {
  Register(4);
  auto allocated = [&] {
    std::vector<NodeView> nodes = c_->Nodes();
    EXPECT_EQ(nodes.size(), 1u);
    int sum = 0;
    for (int m : nodes[0].allocated_milli) sum += m;
    return std::pair<int, int>{nodes[0].running_jobs, sum};
  };
  Job a = c_->Submit(MakeJob(1), alice_).value();
  Job b = c_->Submit(MakeJob(1, 250), alice_).value();
  Job again = MakeJob(2);
  again.requeue = true;
  again = c_->Submit(again, bob_).value();
  Job queued = c_->Submit(MakeJob(4), bob_).value();
  EXPECT_EQ(allocated(), (std::pair<int, int>{0, 0}));  // pending jobs hold nothing
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(queued.id).state, JobState::kPending);
  EXPECT_EQ(allocated(), (std::pair<int, int>{3, 3250}));
  EXPECT_EQ(c_->WaitForWork("n1", 0).value().launch.size(), 3u);
  a = Get(a.id);
  ASSERT_TRUE(
      Apply({Ev(a, protocol::EventKind::kStarted), Ev(a, protocol::EventKind::kExited, 0)}).ok());
  EXPECT_EQ(allocated(), (std::pair<int, int>{2, 2250}));
  ASSERT_TRUE(c_->Cancel(queued.id, bob_).ok());  // pending: never indexed
  EXPECT_EQ(allocated(), (std::pair<int, int>{2, 2250}));
  Restart();
  EXPECT_EQ(allocated(), (std::pair<int, int>{2, 2250}));  // rebuilt from the store
  clock_.AdvanceMicros(16'000'000);  // past the grace a restart gives (kRestartGraceUs)
  ASSERT_TRUE(c_->SweepNodes().ok());
  EXPECT_EQ(Get(b.id).state, JobState::kLost);
  EXPECT_EQ(Get(again.id).state, JobState::kPending);  // requeued: holds nothing
  EXPECT_EQ(allocated(), (std::pair<int, int>{0, 0}));
  EXPECT_FALSE(c_->WaitForWork("n1", 0).ok());  // declared lost: it registers again
  Register(4);
  EXPECT_TRUE(c_->WaitForWork("n1", 0).value().launch.empty());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(allocated(), (std::pair<int, int>{1, 2000}));
  AgentWork w = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(w.launch.size(), 1u);
  EXPECT_EQ(w.launch[0].job.id, again.id);
}

}  // namespace
}  // namespace gpupool::controller::controller_test
