// Interactive sessions (exec_sessions.cc): exec input and output relayed in order,
// session ids, other users' sessions, silent clients, per-user bounds; `gpupool run` and
// `alloc` jobs (RunJobTest).

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

// --- interactive sessions (exec_sessions.cc) ---

protocol::ExecInputItem Data(int64_t seq, std::string bytes) {
  protocol::ExecInputItem i;
  i.seq = seq;
  i.data = std::move(bytes);
  return i;
}

TEST_F(GangTest, InteractiveExecRelaysInputAndOutputInOrderForItsOwnerAndNode) {
  Job j = StartBoth(SubmitGang());
  const std::string node = NodeOf(j, 1);
  (void)c_->WaitForWork(node, 0);
  Result<int64_t> x = c_->StartExec(j.id, 1, {"bash"}, alice_, {true, true, 30, 100});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  AgentWork w = c_->WaitForWork(node, 0).value();
  ASSERT_EQ(w.exec.size(), 1u);
  EXPECT_TRUE(w.exec[0].tty);
  EXPECT_TRUE(w.exec[0].stdin_open);
  EXPECT_EQ(w.exec[0].rows, 30);
  EXPECT_EQ(w.exec[0].cols, 100);

  // Input: in order, a resent item ignored, a gap refused naming seq.
  ASSERT_TRUE(c_->PushExecInput(*x, alice_, Data(1, "ls\n")).ok());
  ASSERT_TRUE(c_->PushExecInput(*x, alice_, Data(1, "ls\n")).ok());
  Status gap = c_->PushExecInput(*x, alice_, Data(3, "x"));
  ASSERT_FALSE(gap.ok());
  EXPECT_EQ(gap.message().rfind("seq: expected 2", 0), 0u) << gap.message();
  EXPECT_EQ(c_->PushExecInput(*x, bob_, Data(2, "rm -rf ~\n")).code(), StatusCode::kNotFound);
  protocol::ExecInputItem resize;
  resize.seq = 2;
  resize.rows = 50;
  resize.cols = 132;
  ASSERT_TRUE(c_->PushExecInput(*x, alice_, resize).ok());
  Result<protocol::ExecInput> in = c_->TakeExecInput(node, *x, 0, 0);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->items.size(), 2u);
  EXPECT_EQ(in->items[0].data, "ls\n");
  EXPECT_EQ(in->items[1].cols, 132);
  EXPECT_FALSE(in->hangup);
  EXPECT_TRUE(c_->TakeExecInput(node, *x, 2, 0)->items.empty());  // applied: dropped
  EXPECT_EQ(c_->TakeExecInput(NodeOf(j, 0), *x, 0, 0).status().code(), StatusCode::kNotFound);

  // Output: a resent, overlapping part is not doubled; the client's offset drops the rest.
  protocol::ExecOutput out;
  out.stdout_data = "hello";
  ASSERT_TRUE(c_->PutExecOutput(node, *x, out).ok());
  out.stdout_data = "hello world\r\n";
  Result<protocol::ExecOutputAck> ack = c_->PutExecOutput(node, *x, out);
  ASSERT_TRUE(ack.ok());
  EXPECT_EQ(ack->stdout_end, 13);
  EXPECT_FALSE(ack->full);
  out.stdout_offset = 20;
  EXPECT_EQ(c_->PutExecOutput(node, *x, out).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c_->PutExecOutput(NodeOf(j, 0), *x, out).status().code(), StatusCode::kNotFound);
  Result<ExecStreamRead> r = c_->ReadExecStream(*x, alice_, 0, 0, false, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stdout_data, "hello world\r\n");
  EXPECT_EQ(r->stdout_next, 13);
  EXPECT_FALSE(r->eof);
  EXPECT_TRUE(c_->ReadExecStream(*x, alice_, 13, 0, false, 0)->stdout_data.empty());
  EXPECT_EQ(c_->ReadExecStream(*x, alice_, 5, 0, false, 0).status().code(),
            StatusCode::kInvalidArgument);  // before what it still holds
  EXPECT_EQ(c_->ReadExecStream(*x, bob_, 13, 0, false, 0).status().code(), StatusCode::kNotFound);

  // The end: exit status, the agent's eof, and a hangup for the input side.
  protocol::ExecReport end;
  end.id = *x;
  end.started = true;
  end.ended = true;
  end.exit_code = 7;
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {end}}).ok());
  EXPECT_FALSE(c_->ReadExecStream(*x, alice_, 13, 0, true, 0)->eof);
  protocol::ExecOutput last;
  last.stdout_offset = 13;
  last.stdout_data = "bye\r\n";
  last.eof = true;
  ASSERT_TRUE(c_->PutExecOutput(node, *x, last).ok());
  r = c_->ReadExecStream(*x, alice_, 13, 0, true, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stdout_data, "bye\r\n");
  EXPECT_TRUE(r->ended);
  EXPECT_TRUE(r->eof);
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_TRUE(c_->TakeExecInput(node, *x, 2, 0)->hangup);
  EXPECT_EQ(c_->PushExecInput(*x, alice_, Data(3, "x")).code(), StatusCode::kFailedPrecondition);
}

// Issue 25: exec session ids were sequential, so a user could count the sessions others
// started and tell (403 against 404) whether an id existed. They come from the random
// source now, and are not handed out twice.
TEST_F(GangTest, ExecIdsComeFromTheRandomSourceAndAreNotReused) {
  std::vector<uint64_t> draws = {0,  // 0: drawn again
                                 uint64_t{0x12345678abcdef} << 11,
                                 uint64_t{0x12345678abcdef} << 11,  // in use: drawn again
                                 ~uint64_t{0}, uint64_t{7} << 11};
  size_t next = 0;
  ControllerOptions o;
  o.random = [&] { return draws.at(next++); };
  Restart(o);
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Job j = StartBoth(SubmitGang());
  std::vector<int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    Result<int64_t> x = c_->StartExec(j.id, 1, {"true"}, alice_);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    ids.push_back(*x);
  }
  // The top 53 bits of each draw: an exact number for every JSON reader.
  EXPECT_EQ(ids, (std::vector<int64_t>{0x12345678abcdef, (int64_t{1} << 53) - 1, 7}));
  EXPECT_EQ(next, draws.size());
  // Handed to the agent in the order they were started, whatever their ids.
  AgentWork w = c_->WaitForWork(NodeOf(j, 1), 0).value();
  ASSERT_EQ(w.exec.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(w.exec[i].id, ids[i]);
  // A source that only repeats itself is an error, not a loop.
  draws = std::vector<uint64_t>(16, uint64_t{7} << 11);
  next = 0;
  Result<int64_t> stuck = c_->StartExec(j.id, 1, {"true"}, alice_);
  EXPECT_EQ(stuck.status().code(), StatusCode::kUnavailable) << stuck.status().ToString();
}

TEST_F(GangTest, ExecIdsFromTheKernelAreNeitherSequentialNorRepeated) {
  Job j = StartBoth(SubmitGang());
  std::set<int64_t> ids;
  int64_t last = 0;
  int adjacent = 0;
  for (int i = 0; i < 200; ++i) {
    Result<int64_t> x = c_->StartExec(j.id, 1, {"true"}, alice_);
    ASSERT_TRUE(x.ok()) << x.status().ToString();
    EXPECT_GT(*x, 0);
    EXPECT_LT(*x, int64_t{1} << 53);
    if (last != 0 && (*x - last == 1 || last - *x == 1)) ++adjacent;
    last = *x;
    ids.insert(*x);
  }
  EXPECT_EQ(ids.size(), 200u);
  EXPECT_EQ(adjacent, 0);
  // Spread over the range, not counted up from somewhere: some in each half.
  EXPECT_GT(std::count_if(ids.begin(), ids.end(), [](int64_t v) { return v < (int64_t{1} << 52); }),
            20);
  EXPECT_GT(
      std::count_if(ids.begin(), ids.end(), [](int64_t v) { return v >= (int64_t{1} << 52); }), 20);
}

// Issue 25: another user's session and one that does not exist are answered alike, to
// the byte, by every call a user can make on a session; so are a node's calls for a
// session on another node and for none.
TEST_F(GangTest, AnotherUsersExecSessionLooksLikeNoSession) {
  Job j = StartBoth(SubmitGang());
  Result<int64_t> x = c_->StartExec(j.id, 1, {"bash"}, alice_, {true, true, 30, 100});
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  int64_t missing = *x + 1;
  while (c_->WaitExec(missing, root_, false, false, 0).ok()) ++missing;
  auto answers = [&](int64_t id, const Caller& who) {
    std::vector<Status> out;
    out.push_back(c_->WaitExec(id, who, false, false, 0).status());
    out.push_back(c_->CancelExec(id, who));
    out.push_back(c_->PushExecInput(id, who, Data(1, "x")));
    out.push_back(c_->ReadExecStream(id, who, 0, 0, false, 0).status());
    return out;
  };
  const std::vector<Status> theirs = answers(*x, bob_);
  const std::vector<Status> none = answers(missing, bob_);
  ASSERT_EQ(theirs.size(), none.size());
  for (size_t i = 0; i < theirs.size(); ++i) {
    EXPECT_EQ(theirs[i].code(), StatusCode::kNotFound) << i << ": " << theirs[i].ToString();
    EXPECT_EQ(theirs[i].ToString(), none[i].ToString()) << i;
    EXPECT_EQ(theirs[i].message().find(std::to_string(*x)), std::string::npos);
  }
  // Bob's probing changed nothing: the session is alice's and still runs.
  Result<ExecSession> s = c_->WaitExec(*x, alice_, false, false, 0);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_FALSE(s->ended);
  EXPECT_FALSE(s->hung_up);
  EXPECT_EQ(s->input_seq, 0);

  const std::string other = NodeOf(j, 0);  // the session runs on task 1's node
  Status a = c_->TakeExecInput(other, *x, 0, 0).status();
  Status b = c_->TakeExecInput(other, missing, 0, 0).status();
  EXPECT_EQ(a.code(), StatusCode::kNotFound);
  EXPECT_EQ(b.code(), StatusCode::kNotFound);
  std::string a_text = a.ToString();
  a_text.replace(a_text.find(std::to_string(*x)), std::to_string(*x).size(),
                 std::to_string(missing));
  EXPECT_EQ(a_text, b.ToString());
}

TEST_F(GangTest, AnInteractiveSessionWhoseClientGoesSilentIsHungUp) {
  Job j = StartBoth(SubmitGang());
  const std::string node = NodeOf(j, 0);
  (void)c_->WaitForWork(node, 0);
  Result<int64_t> x = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
  ASSERT_TRUE(x.ok());
  ASSERT_EQ(c_->WaitForWork(node, 0)->exec.size(), 1u);
  protocol::ExecReport started;
  started.id = *x;
  started.started = true;
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {started}}).ok());
  // A client that keeps asking keeps it.
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->ReadExecStream(*x, alice_, 0, 0, true, 0).ok());
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(c_->TakeExecInput(node, *x, 0, 0)->hangup);
  // Silent for longer than the timeout: its agent is told to stop it.
  clock_.AdvanceMicros(16'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_TRUE(c_->TakeExecInput(node, *x, 0, 0)->hangup);
  AgentWork w = c_->WaitForWork(node, 0).value();
  ASSERT_EQ(w.cancel.size(), 1u);
  EXPECT_EQ(w.cancel[0].exec_id, *x);
  protocol::ExecReport end = started;
  end.ended = true;
  end.signal = 1;
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {end}}).ok());
  Result<ExecStreamRead> r = c_->ReadExecStream(*x, alice_, 0, 0, true, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ended);
  EXPECT_EQ(r->signal, 1);
  // The job itself goes on: only `gpupool run`'s command is the job's.
  EXPECT_EQ(Get(j.id).state, JobState::kRunning);
}

TEST_F(GangTest, InteractiveSessionsAreBoundedPerUserAndInWhatTheyHold) {
  Job j = StartBoth(SubmitGang());
  const std::string node = NodeOf(j, 0);
  std::vector<int64_t> open;
  for (int i = 0; i < 12; ++i) {
    Result<int64_t> x = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
    ASSERT_TRUE(x.ok()) << i << ": " << x.status().ToString();
    open.push_back(*x);
  }
  Result<int64_t> more = c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80});
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("12 interactive sessions open"), std::string::npos)
      << more.status().message();
  EXPECT_TRUE(c_->StartExec(j.id, 0, {"hostname"}, alice_).ok());  // plain ones are not
  // An agent that does not pause is refused past 8 MiB held for the client.
  protocol::ExecOutput out;
  out.stdout_data = std::string(protocol::kMaxExecChunk, 'x');
  for (int i = 0; i < 40; ++i) {
    Result<protocol::ExecOutputAck> ack = c_->PutExecOutput(node, open[0], out);
    if (!ack.ok()) {
      EXPECT_EQ(ack.status().code(), StatusCode::kResourceExhausted);
      EXPECT_EQ(i, 32);  // 8 MiB in 256 KiB parts are held; the next part is not
      break;
    }
    EXPECT_EQ(ack->full, out.stdout_offset + out.stdout_data.size() > (1u << 20));
    out.stdout_offset += static_cast<int64_t>(out.stdout_data.size());
    ASSERT_LT(i, 39) << "never refused";
  }
  // Once one ends, another may open.
  protocol::ExecReport end;
  end.id = open[1];
  end.ended = true;
  end.error = "gone";
  ASSERT_TRUE(c_->ApplyEvents(node, EventBatch{node, {}, {end}}).ok());
  EXPECT_TRUE(c_->StartExec(j.id, 0, {"bash"}, alice_, {true, true, 24, 80}).ok());
}

class RunJobTest : public GangTest {
 protected:
  Job SubmitRun(int tasks = 2) {
    Job j = MakeJob(2);
    j.request.tasks = tasks;
    j.interactive = "run";
    j.pty = true;
    j.command = {"python3", "-i"};
    j = c_->Submit(j, alice_).value();
    return j;
  }
};

TEST_F(RunJobTest, TheJobEndsWithItsCommandAndTakesItsStatus) {
  Job j = SubmitRun();
  Job seen;
  // Pending: no session yet, and the answer says why it waits.
  Result<int64_t> early = c_->AttachRun(j.id, alice_, 40, 120, 0, &seen);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_EQ(*early, 0);
  EXPECT_EQ(seen.state, JobState::kPending);
  EXPECT_EQ(c_->AttachRun(j.id, bob_, 40, 120, 0, &seen).status().code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = StartBoth(Get(j.id));
  Result<int64_t> x = c_->AttachRun(j.id, alice_, 40, 120, 0, &seen);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  ASSERT_GT(*x, 0);
  EXPECT_EQ(*c_->AttachRun(j.id, alice_, 40, 120, 0, &seen), *x);  // attached once
  AgentWork w = c_->WaitForWork(NodeOf(j, 0), 0).value();
  ASSERT_EQ(w.exec.size(), 1u);
  EXPECT_EQ(w.exec[0].argv, (std::vector<std::string>{"python3", "-i"}));
  EXPECT_EQ(w.exec[0].task_index, 0);
  EXPECT_TRUE(w.exec[0].tty);
  EXPECT_EQ(w.exec[0].rows, 40);
  protocol::ExecReport end;
  end.id = *x;
  end.started = true;
  end.ended = true;
  end.exit_code = 3;
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 0), EventBatch{NodeOf(j, 0), {}, {end}}).ok());
  // The held tasks are released.
  EXPECT_EQ(c_->WaitForWork(NodeOf(j, 0), 0)->cancel.size(), 1u);
  EXPECT_EQ(c_->WaitForWork(NodeOf(j, 1), 0)->cancel.size(), 1u);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  ASSERT_TRUE(Apply({Exit(j, 1, 0, true)}, NodeOf(j, 1)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kFailed);
  EXPECT_EQ(done.exit_code, 3);
  EXPECT_EQ(done.reason, "the command exited with code 3");
  // A late attach finds the session and its end; then the job's end.
  EXPECT_EQ(*c_->AttachRun(j.id, alice_, 40, 120, 0, &seen), *x);
}

TEST_F(RunJobTest, ACommandThatSucceedsMakesTheJobSucceed) {
  Job j = SubmitRun(1);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}, NodeOf(j, 0)).ok());
  Job seen;
  Result<int64_t> x = c_->AttachRun(j.id, alice_, 0, 0, 0, &seen);
  ASSERT_TRUE(x.ok() && *x > 0);
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  protocol::ExecReport end;
  end.id = *x;
  end.started = true;
  end.ended = true;
  end.exit_code = 0;
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 0), EventBatch{NodeOf(j, 0), {}, {end}}).ok());
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.reason;
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_TRUE(done.command_ended);
}

TEST_F(RunJobTest, AJobNobodyAttachesToIsCancelledWithAReason) {
  Job j = SubmitRun();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = StartBoth(Get(j.id));
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(Get(j.id).cancel_requested);
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_TRUE(Get(j.id).cancel_requested);
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  ASSERT_TRUE(Apply({Exit(j, 1, 0, true)}, NodeOf(j, 1)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kCancelled);
  EXPECT_NE(done.reason.find("no terminal attached within 15 s"), std::string::npos) << done.reason;
}

TEST_F(RunJobTest, TheClientGoingAwayEndsTheJobWithTheReason) {
  Job j = SubmitRun(1);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  j = Get(j.id);
  ASSERT_TRUE(Apply({Ev(j, protocol::EventKind::kStarted)}, NodeOf(j, 0)).ok());
  Job seen;
  const int64_t x = c_->AttachRun(j.id, alice_, 0, 0, 0, &seen).value();
  (void)c_->WaitForWork(NodeOf(j, 0), 0);
  clock_.AdvanceMicros(16'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  protocol::ExecReport end;
  end.id = x;
  end.started = true;
  end.ended = true;
  end.signal = 1;
  ASSERT_TRUE(c_->ApplyEvents(NodeOf(j, 0), EventBatch{NodeOf(j, 0), {}, {end}}).ok());
  ASSERT_TRUE(Apply({Exit(j, 0, 0, true)}, NodeOf(j, 0)).ok());
  Job done = Get(j.id);
  EXPECT_EQ(done.state, JobState::kFailed);
  EXPECT_EQ(done.signal, 1);
  EXPECT_NE(done.reason.find("its terminal went away"), std::string::npos) << done.reason;
}

TEST_F(RunJobTest, AllocHoldsWithoutACommandAndBadCombinationsAreRefused) {
  Job a = MakeJob(1);
  a.interactive = "alloc";
  a.command.clear();
  a = c_->Submit(a, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  a = Get(a.id);
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kStarted)}, NodeOf(a, 0)).ok());
  Job seen;
  Result<int64_t> x = c_->AttachRun(a.id, alice_, 0, 0, 0, &seen);
  ASSERT_TRUE(x.ok()) << x.status().ToString();
  EXPECT_EQ(*x, 0);  // no command: gpupool exec enters it
  EXPECT_EQ(seen.state, JobState::kRunning);
  Job batch = c_->Submit(MakeJob(1), alice_).value();
  Result<int64_t> not_run = c_->AttachRun(batch.id, alice_, 0, 0, 0, &seen);
  ASSERT_FALSE(not_run.ok());
  EXPECT_NE(not_run.status().message().find("gpupool exec --job ID --pty"), std::string::npos);
  // Its tasks hold the allocation past the sweep (no command to attach).
  clock_.AdvanceMicros(60'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(Get(a.id).cancel_requested);

  // An allocation whose client said it is alive is released once it falls silent for
  // the client timeout (15 s here), and not before (a client killed outright).
  Result<int64_t> timeout = c_->AllocAlive(a.id, alice_);
  ASSERT_TRUE(timeout.ok()) << timeout.status().ToString();
  EXPECT_EQ(*timeout, 15);
  EXPECT_EQ(c_->AllocAlive(a.id, bob_).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c_->AllocAlive(batch.id, alice_).status().code(), StatusCode::kInvalidArgument);
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->AllocAlive(a.id, alice_).ok());
  clock_.AdvanceMicros(14'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_FALSE(Get(a.id).cancel_requested);
  clock_.AdvanceMicros(2'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  Job released = Get(a.id);
  EXPECT_TRUE(released.cancel_requested);
  EXPECT_EQ(released.reason,
            "its client went away (no word from gpupool alloc for 15 s): the allocation was "
            "released");
  ASSERT_TRUE(Apply({Exit(released, 0, 0, true)}, NodeOf(released, 0)).ok());
  EXPECT_EQ(Get(a.id).state, JobState::kCancelled);

  auto refused = [&](Job j, const std::string& field) {
    Result<Job> r = c_->Submit(j, alice_);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().message().rfind(field + ":", 0), 0u) << r.status().message();
  };
  Job bad = MakeJob(1);
  bad.interactive = "later";
  refused(bad, "interactive");
  bad = MakeJob(1);
  bad.pty = true;
  refused(bad, "pty");
  bad = MakeJob(1);
  bad.interactive = "alloc";
  refused(bad, "command");  // alloc runs no command
  bad = MakeJob(1);
  bad.interactive = "run";
  bad.mpi = true;
  refused(bad, "mpi");
}

// Issue: gpupool alloc killed while its job waited held the allocation for good once the
// job started (its keep-alive began with COMMAND). A job it marks client_keepalive is
// watched from its submission: withdrawn while it waits, released once it runs, and still
// watched after a restart of the controller (the mark is stored with the job).
TEST_F(RunJobTest, AnAllocWhoseClientWentAwayWhileItWaitedIsWithdrawnOrReleased) {
  Job hog = SubmitGang();  // every GPU of the pool
  auto submit_alloc = [&](bool keepalive) {
    Job a = MakeJob(1);
    a.interactive = "alloc";
    a.command.clear();
    a.client_keepalive = keepalive;
    a = c_->Submit(a, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    EXPECT_EQ(Get(a.id).state, JobState::kPending);
    return a;
  };
  const std::string withdrawn =
      "its client went away (no word from gpupool alloc for 15 s): the request was withdrawn";
  // Alive while it waits: kept; silent for the client timeout: withdrawn.
  Job a = submit_alloc(true);
  Job never = submit_alloc(true);  // killed before its first word
  Job old = submit_alloc(false);   // an older client: watched from its first word only
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->AllocAlive(a.id, alice_).ok());
  clock_.AdvanceMicros(6'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kPending);
  EXPECT_EQ(Get(never.id).state, JobState::kCancelled);
  EXPECT_EQ(Get(never.id).reason, withdrawn);
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_EQ(Get(a.id).state, JobState::kCancelled);
  EXPECT_EQ(Get(a.id).reason, withdrawn);
  EXPECT_EQ(Get(old.id).state, JobState::kPending);
  ASSERT_TRUE(c_->Cancel(old.id, alice_).ok());

  // A restart keeps the mark; the client has the restart grace to find the new
  // controller (kRestartGraceUs, 15 s, over a 5 s client timeout here).
  Job waiting = submit_alloc(true);
  ControllerOptions options;
  options.exec_client_timeout_us = 5'000'000;
  Restart(options);
  EXPECT_TRUE(Get(waiting.id).client_keepalive);
  clock_.AdvanceMicros(14'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_EQ(Get(waiting.id).state, JobState::kPending);
  clock_.AdvanceMicros(2'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  EXPECT_EQ(Get(waiting.id).state, JobState::kCancelled);
  EXPECT_EQ(Get(waiting.id).reason,
            "its client went away (no word from gpupool alloc for 5 s): the request was "
            "withdrawn");

  // Its client killed while it waited, the job starts later: released all the same.
  Job late = submit_alloc(true);
  clock_.AdvanceMicros(10'000'000);
  ASSERT_TRUE(c_->Cancel(hog.id, alice_).ok());
  hog = Get(hog.id);
  ASSERT_TRUE(Apply({Exit(hog, 0, 0, true)}, NodeOf(hog, 0)).ok());
  ASSERT_TRUE(Apply({Exit(hog, 1, 0, true)}, NodeOf(hog, 1)).ok());
  ASSERT_TRUE(jobs::IsTerminal(Get(hog.id).state));
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  late = Get(late.id);
  ASSERT_EQ(late.state, JobState::kAssigned);
  ASSERT_TRUE(Apply({Ev(late, protocol::EventKind::kStarted)}, NodeOf(late, 0)).ok());
  ASSERT_EQ(Get(late.id).state, JobState::kRunning);
  clock_.AdvanceMicros(6'000'000);
  ASSERT_TRUE(c_->SweepExecClients().ok());
  late = Get(late.id);
  EXPECT_TRUE(late.cancel_requested);
  EXPECT_EQ(late.reason,
            "its client went away (no word from gpupool alloc for 5 s): the allocation was "
            "released");
}

}  // namespace
}  // namespace gpupool::controller::controller_test
