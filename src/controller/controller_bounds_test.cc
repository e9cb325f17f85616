// The controller's bounds on what is queued: the pool's and each user's and project's
// queue bounds, submission sizes (an array's elements share one copy) and the admin's
// limits, also against concurrent submitters.

#include "controller/controller_test.h"

namespace gpupool::controller::controller_test {
namespace {

// Issue 25 item 7: no bound applied by default, and one unprivileged user queued 107,000
// jobs in 25 s. The server's bounds (from its config file) refuse a submission that
// would pass one, whole, naming the bound and its key; admins' submissions too.
TEST_F(ControllerTest, QueueBoundsRefuseAFloodNamingTheBoundAndItsKey) {
  ControllerOptions o;
  o.max_queued_per_user = 5;
  o.max_queued_total = 8;
  o.max_array_size = 4;
  Restart(o);
  Register(2);
  Job arr = MakeJob(1);
  arr.array = "0-4";
  Result<Job> r = c_->Submit(arr, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "array '0-4': more than 4 elements (the server's max-array-size; an admin raises it "
            "in the [server] section of its config file); use e.g. 0-99, 0-99%10 (at most 10 at "
            "once), 1,3,5-7 or 0-30:10 (every 10th)");
  arr.array = "0-3";
  const Job first = c_->Submit(arr, alice_).value();
  ASSERT_TRUE(c_->Submit(MakeJob(1), alice_).ok());  // alice: 5 queued
  r = c_->Submit(MakeJob(1), alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "user alice has 5 jobs queued; 1 more would pass the limit (max-queued-per-user 5): "
            "wait for some to start, or ask an admin to raise it: [server] max-queued-per-user "
            "in the server's config file, or max_queued for one user with `gpupool limits`");
  // The pool's bound counts every user's, an admin's too.
  Job three = MakeJob(1);
  three.array = "0-2";
  ASSERT_TRUE(c_->Submit(three, bob_).ok());  // 8 in all
  r = c_->Submit(MakeJob(1), root_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "the pool has 8 jobs queued; 1 more would pass the limit (max-queued-total 8): wait "
            "for some to start, or ask an admin to raise it: [server] max-queued-total in the "
            "server's config file");
  EXPECT_EQ(store_->ListJobs({})->size(), 8u);  // nothing of a refused submission stored

  // Held jobs still count; started and cancelled ones no longer do.
  ASSERT_TRUE(c_->Hold(first.id, alice_, true).ok());
  EXPECT_EQ(c_->Submit(MakeJob(1), root_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->ScheduleOnce().ok());             // two of the others start on the node's 2 GPUs
  ASSERT_TRUE(c_->Submit(MakeJob(1), root_).ok());  // 7
  ASSERT_TRUE(c_->Cancel(first.id, alice_).ok());   // 6
  ASSERT_TRUE(c_->Submit(MakeJob(1), root_).ok());
  ASSERT_TRUE(c_->Submit(MakeJob(1), root_).ok());
  EXPECT_EQ(c_->Submit(MakeJob(1), root_).status().code(), StatusCode::kResourceExhausted);

  // A restarted controller counts the stored queue.
  Restart(o);
  EXPECT_EQ(c_->Submit(MakeJob(1), bob_).status().code(), StatusCode::kResourceExhausted);

  // `gpupool limits` max_queued for a user replaces the server's per-user bound, above
  // or below it (not the pool's).
  o.max_queued_total = 100;
  Restart(o);
  const Caller carol{"carol", 1002, 1002, false};
  Limits l;
  l.users["carol"].max_queued = 7;
  ASSERT_TRUE(c_->SetLimits(l, root_).ok());
  Job four = MakeJob(1);
  four.array = "0-3";
  ASSERT_TRUE(c_->Submit(four, carol).ok());
  ASSERT_TRUE(c_->Submit(three, carol).ok());  // 7, past max-queued-per-user 5
  r = c_->Submit(MakeJob(1), carol);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("carol has 7 jobs queued; 1 more would pass the limit "
                                      "(max_queued 7)"),
            std::string::npos)
      << r.status().message();
}

// While an array is being stored, its elements count once, as the submission's
// reservation, and once stored once, as queued jobs: a submission meanwhile sees the
// queue as it is (it was refused here while the array seemed twice its size).
TEST_F(GatedControllerTest, AnArrayBeingStoredCountsEachElementOnce) {
  GateStore* g = UseGateStore();
  ControllerOptions o;
  o.max_queued_total = 6;
  Restart(o);
  Register(2);
  Result<Job> during = Status::Internal("not submitted");
  g->on_insert = [&](const std::vector<Job>& jobs) {
    if (jobs.size() != 5 || jobs[0].user != "alice") return;
    // The five elements are reserved: 5 of 6.
    during = c_->Submit(MakeJob(1), bob_);
  };
  Job five = MakeJob(1);
  five.array = "0-4";
  ASSERT_TRUE(c_->Submit(five, alice_).ok());
  EXPECT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ(c_->Submit(MakeJob(1), bob_).status().code(), StatusCode::kResourceExhausted);
}

// The fourth red team: a task's reason and output paths come from its node, and the store
// reads back no string over 64 KiB nor one with a NUL byte. Task 0 of alice's gang, whose
// working directory was 65,530 bytes long (a submission takes strings up to 64 KiB),
// ended "cannot enter working directory '...'"; while task 1 was being stopped the row
// was unreadable, and a restart then failed (Controller::Create: "stored job 1.tasks[0]:
// longer than 65536 bytes") for good. A node's NUL byte made an ended job's row
// unreadable, and with it every listing of ended jobs.
TEST_F(ControllerTest, ANodesLongOrNulReasonsAndPathsLeaveTheStoreReadable) {
  Register(2);
  Job g = MakeJob(1);
  g.request.tasks = 2;
  g.workdir = "/" + std::string(65'529, 'w');
  g = c_->Submit(g, alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);  // task 1 waits for task 0's port
  g = Get(g.id);
  Event started = Ev(g, protocol::EventKind::kStarted);
  started.stdout_path = g.workdir + "/out.txt";
  started.master_port = 41000;
  ASSERT_TRUE(Apply({started}).ok());
  ASSERT_EQ(c_->WaitForWork("n1", 0)->launch.size(), 1u);
  ASSERT_TRUE(Apply({Ev(g, protocol::EventKind::kStarted, 0, 1)}).ok());
  Event exited = Ev(g, protocol::EventKind::kExited, 1);
  exited.reason = "cannot enter working directory '" + g.workdir + "': File name too long";
  exited.stdout_path = started.stdout_path;
  ASSERT_TRUE(Apply({exited}).ok());
  ASSERT_EQ(Get(g.id).state, JobState::kRunning);  // task 1 is being stopped

  ASSERT_NO_FATAL_FAILURE(Restart());
  Job a = Get(g.id);
  ASSERT_EQ(a.tasks.size(), 2u);
  EXPECT_EQ(a.tasks[0].reason.size(), 4096u + 3);  // cut, "..." after it
  EXPECT_TRUE(a.tasks[0].reason.starts_with("cannot enter working directory '/www"));
  EXPECT_EQ(a.tasks[0].stdout_path, "");  // no file system takes such a path
  ASSERT_TRUE(Apply({Ev(a, protocol::EventKind::kExited, 0, 1)}).ok());
  EXPECT_EQ(Get(g.id).state, JobState::kFailed);

  const Job k = StartOne(c_.get(), bob_, clock_);
  Event nul = Ev(k, protocol::EventKind::kExited, 1);
  nul.reason = std::string("exec failed:\0 bad", 18);
  nul.stderr_path = std::string("/tmp/e\0rr", 10);
  ASSERT_TRUE(Apply({nul}).ok());
  ASSERT_TRUE(store_->ListJobs({}).ok());
  const Job b = Get(k.id);
  EXPECT_EQ(b.state, JobState::kFailed);
  EXPECT_EQ(b.tasks[0].reason, "exec failed: bad");
  EXPECT_EQ(b.tasks[0].stderr_path, "");
}

// The same for a node's address, which becomes each task's host there: a node that
// registered with a 70,000-byte address (or one with a NUL byte) left every job placed on
// it unreadable, and the controller could not start again.
TEST_F(ControllerTest, ANodesAddressTheStoreCouldNotReadBackIsRefused) {
  for (const std::string& bad : {std::string(70'000, 'a'), std::string("10.0.0.1\0x", 10)}) {
    protocol::Registration r;
    r.node = "n1";
    r.info = MakeNode(1);
    r.version = version_;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    r.address = bad;
    Result<protocol::RegistrationReply> reply = c_->RegisterNode(r, "");
    EXPECT_EQ(reply.status().code(), StatusCode::kInvalidArgument);
    if (reply.ok()) {  // as before: a job placed there, and a restart
      const Job j = StartOne(c_.get(), alice_, clock_);
      ASSERT_NO_FATAL_FAILURE(Restart());
      ASSERT_TRUE(c_->Cancel(j.id, root_).ok());
    }
  }
  address_["n1"] = "gpu-node-7.example.org:7070";
  Register(1);  // a real one still registers
}

TEST_F(ControllerTest, ConcurrentSubmittersCannotPassThePoolsBoundTogether) {
  ControllerOptions o;
  o.max_queued_total = 30;
  Restart(o);
  Register(2);
  const Caller users[] = {alice_, bob_, {"carol", 1002, 1002, false}, root_};
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  // Half submit single jobs, half arrays of 2. The singles alone would pass the bound,
  // so it is reached exactly: a refused single means that there was no room left.
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Job job = MakeJob(0);
      if (t >= 4) job.array = "0-1";
      for (int i = 0; i < 10; ++i) {
        if (c_->Submit(job, users[t % 4]).ok()) accepted += t >= 4 ? 2 : 1;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 30);
  EXPECT_EQ(store_->ListJobs({})->size(), 30u);
}

// SizedJob's variables at most (a value may have 64 KiB). Without a digit separator:
// funclen.py would read one, with SizedJob's 'x', as a character literal.
constexpr int64_t kMaxPad = 50 * 1000;

// A job whose submission (jobs::SubmissionBytes) is `bytes`: MakeJob's, an --array
// spec, and variables PAD0, PAD1, ... of up to 50,000 bytes (a value may have 64 KiB).
Job SizedJob(int64_t bytes, const std::string& array = "") {
  Job j = MakeJob(1);
  j.array = array;
  j.name = "sized";  // its own: the name the server gives a job without one would add bytes
  for (int i = 0; jobs::SubmissionBytes(j) < bytes; ++i) {
    const std::string name = "PAD" + std::to_string(i);
    const int64_t left = bytes - jobs::SubmissionBytes(j) - static_cast<int64_t>(name.size()) - 2;
    j.env[name] = std::string(static_cast<size_t>(std::clamp<int64_t>(left, 0, kMaxPad)), 'x');
  }
  EXPECT_EQ(jobs::SubmissionBytes(j), bytes);
  return j;
}

// The map a job's environment is held in: the same one for jobs that share it.
const void* EnvHeldAt(const Job& j) {
  const std::map<std::string, std::string>& env = j.env;
  return &env;
}

// Issue 25 item 7: the job bounds counted jobs, not bytes, and a submission was bounded
// only by the HTTP body (1 MiB). Now the server's max-submission-bytes (default 1 MiB)
// refuses one whole, naming its size, the bound and the key.
TEST_F(ControllerTest, ASubmissionOverMaxSubmissionBytesIsRefusedNamingItsSizeAndTheKey) {
  Job big = SizedJob((int64_t{1} << 20) + 10);
  Result<Job> r = c_->Submit(big, alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "the job's submission is 1048586 bytes (its command, environment variables and "
            "paths, each string with its NUL), over the server's max-submission-bytes of "
            "1048576: pass fewer or shorter --env variables (or a long command as a script "
            "file), or ask an admin to raise max-submission-bytes in the [server] section of "
            "its config file");
  big.array = "0-9";
  EXPECT_EQ(c_->Submit(big, root_).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(store_->ListJobs({})->empty());                        // nothing of it stored
  EXPECT_TRUE(c_->Submit(SizedJob(int64_t{1} << 20), alice_).ok());  // at the bound

  ControllerOptions o;
  o.max_submission_bytes = 4096;
  Restart(o);
  EXPECT_TRUE(c_->Submit(SizedJob(4096), alice_).ok());
  r = c_->Submit(SizedJob(4097), alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("4097 bytes"), std::string::npos);
  EXPECT_NE(r.status().message().find("max-submission-bytes of 4096"), std::string::npos);
}

// Issue 25 item 7: each element of an array held its own copy of the submission in the
// controller (100 elements of a 0.9 MB environment: +96 MB of RSS). They share one now,
// as they come from the submission and as a restarted controller loads them, and the
// variables an element gets at launch (GPUPOOL_ARRAY_*) are not added to the shared one.
TEST_F(ControllerTest, AnArraysElementsShareOneCopyOfTheirSubmissionInMemory) {
  Register(1);
  const Job sweep = SizedJob(100'000, "0-99");
  const Job first = c_->Submit(sweep, alice_).value();
  auto held_at = [&] {
    store::JobFilter queued;
    queued.active_only = true;
    std::set<const void*> at;
    const std::vector<Job> jobs = c_->List(queued, root_).value();
    EXPECT_EQ(jobs.size(), 100u);
    for (const Job& j : jobs) at.insert(EnvHeldAt(j));
    return at;
  };
  EXPECT_EQ(held_at().size(), 1u);
  Restart();
  Register(1);
  EXPECT_EQ(held_at().size(), 1u);

  ASSERT_TRUE(c_->ScheduleOnce().ok());
  AgentWork work = c_->WaitForWork("n1", 0).value();
  ASSERT_EQ(work.launch.size(), 1u);
  EXPECT_EQ(work.launch[0].job.env.at("GPUPOOL_ARRAY_JOB_ID"), std::to_string(first.id));
  EXPECT_EQ(work.launch[0].job.env.at("PAD1"), sweep.env.at("PAD1"));
  EXPECT_EQ(Get(first.id + 1).env.count("GPUPOOL_ARRAY_JOB_ID"), 0u);
  EXPECT_EQ(held_at().size(), 1u);
}

// Issue 25 item 7: within the job bounds one user could hold 10,000 x 1 MiB of the
// controller. The bounds on queued bytes refuse a submission that would pass them,
// counting an array's shared submission once, and a submission's bytes count until its
// last queued job leaves the queue.
TEST_F(ControllerTest, QueuedBytesBoundsCountAnArraysSharedSubmissionOnce) {
  ControllerOptions o;
  o.max_submission_bytes = 65536;
  o.max_queued_bytes_per_user = 100'000;
  o.max_queued_bytes_total = 150'000;
  Restart(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c_->Submit(SizedJob(30'000), alice_).ok());
  // 500,000 bytes if each element counted its own.
  const Job sweep = SizedJob(10'000, "0-49");
  const Job first = c_->Submit(sweep, alice_).value();
  Result<Job> r = c_->Submit(SizedJob(1'000), alice_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(r.status().message(),
            "user alice has 100000 bytes of submissions queued (commands, environments, paths; "
            "an array's once); 1000 more would pass the limit (max-queued-bytes-per-user "
            "100000): wait for some to start, submit less (an array holds one copy for all its "
            "elements), or ask an admin to raise it: [server] max-queued-bytes-per-user in the "
            "server's config file");
  // The pool's bound counts every user's, an admin's too.
  ASSERT_TRUE(c_->Submit(SizedJob(30'000), bob_).ok());
  r = c_->Submit(SizedJob(30'000), root_);
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("the pool has 130000 bytes of submissions queued"),
            std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("(max-queued-bytes-total 150000)"), std::string::npos);
  EXPECT_EQ(store_->ListJobs({})->size(), 54u);  // nothing of the refused ones stored

  // The array's submission counts while any of its elements is queued.
  for (int i = 1; i < 50; ++i) ASSERT_TRUE(c_->Cancel(first.id + i, alice_).ok());
  EXPECT_EQ(c_->Submit(SizedJob(1'000), alice_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->Cancel(first.id, alice_).ok());
  ASSERT_TRUE(c_->Submit(SizedJob(10'000), alice_).ok());  // 100,000 again

  // A restarted controller counts the stored queue.
  Restart(o);
  EXPECT_EQ(c_->Submit(SizedJob(1'000), alice_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->Submit(SizedJob(20'000), bob_).ok());  // 150,000 in all
  EXPECT_EQ(c_->Submit(SizedJob(1'000), bob_).status().code(), StatusCode::kResourceExhausted);
}

// While an array is being stored (one transaction) its bytes count as the submission's
// reservation; once its elements land they count once for all of them, and go when the
// last element leaves the queue.
TEST_F(GatedControllerTest, AnArrayBeingStoredCountsItsBytesOnceThenWithItsElements) {
  GateStore* g = UseGateStore();
  ControllerOptions o;
  o.max_queued_bytes_total = 25'000;
  Restart(o);
  Result<Job> during = Status::Internal("not submitted");
  Result<Job> past = Status::Internal("not submitted");
  g->on_insert = [&](const std::vector<Job>& jobs) {
    if (jobs.empty() || jobs[0].user != "alice") return;
    during = c_->Submit(SizedJob(15'000), bob_);  // 25,000 with alice's reservation
    past = c_->Submit(SizedJob(1'000), bob_);
  };
  const Job first = c_->Submit(SizedJob(10'000, "0-4"), alice_).value();
  g->on_insert = nullptr;
  EXPECT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ(past.status().code(), StatusCode::kResourceExhausted);
  // Landed: five elements, 10,000 bytes once.
  EXPECT_EQ(c_->Submit(SizedJob(1'000), bob_).status().code(), StatusCode::kResourceExhausted);
  store::JobFilter alices;
  alices.user = "alice";
  alices.active_only = true;
  const std::vector<Job> landed = c_->List(alices, root_).value();
  ASSERT_EQ(landed.size(), 5u);
  for (size_t k = 0; k + 1 < landed.size(); ++k) ASSERT_TRUE(c_->Cancel(landed[k].id, root_).ok());
  EXPECT_EQ(c_->Submit(SizedJob(1'000), bob_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->Cancel(landed.back().id, root_).ok());
  EXPECT_TRUE(c_->Submit(SizedJob(1'000), bob_).ok());
  EXPECT_EQ(landed.front().array_id, first.id);
}

TEST_F(ControllerTest, ConcurrentSubmittersCannotPassTheQueuedBytesBoundTogether) {
  ControllerOptions o;
  o.max_queued_bytes_total = 300'000;
  Restart(o);
  const Caller users[] = {alice_, bob_, {"carol", 1002, 1002, false}, root_};
  std::atomic<int64_t> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      // An array's 10,000 bytes count once for its elements.
      const Job job = SizedJob(10'000, t >= 4 ? "0-9" : "");
      for (int i = 0; i < 10; ++i) {
        if (c_->Submit(job, users[t % 4]).ok()) accepted += 10'000;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 300'000);
}

// Issue 15 B.5: limits per user and project on GPUs in use, running and queued jobs.
TEST_F(ControllerTest, LimitsHoldJobsWithAReasonAndRefuseQueueingPastTheMax) {
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  Limits l;
  // alice's own row: her max_running above the default's; her max_queued the default's.
  l.users["alice"] = {/*max_gpus=*/3, /*max_running=*/10, /*max_queued=*/-1};
  l.user_default = {-1, /*max_running=*/1, /*max_queued=*/3};
  l.projects["vision"] = {-1, -1, -1};
  l.projects["vision"].max_gpus = 1;
  EXPECT_EQ(c_->SetLimits(l, alice_).status().code(), StatusCode::kPermissionDenied);
  ASSERT_TRUE(c_->SetLimits(l, root_).ok());

  // alice: at most 3 GPUs in use.
  Job a1 = c_->Submit(MakeJob(2), alice_).value();
  Job a2 = c_->Submit(MakeJob(2), alice_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a1.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(a2.id).state, JobState::kPending);  // 2 GPUs idle on n2, but 2 + 2 > 3
  EXPECT_EQ(Get(a2.id).pending_reason,
            "waits: user alice has 2 GPUs in use or next to start; this job's 2 more would pass "
            "the limit (max_gpus 3, `gpupool limits`)");
  // bob (the default): one job running at once, three queued at most.
  Job b1 = c_->Submit(MakeJob(0), bob_).value();
  Job b2 = c_->Submit(MakeJob(0), bob_).value();
  ASSERT_TRUE(c_->Submit(MakeJob(0), bob_).ok());
  Result<Job> b4 = c_->Submit(MakeJob(0), bob_);
  EXPECT_EQ(b4.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b4.status().message(),
            "user bob has 3 jobs queued; 1 more would pass the limit (max_queued 3): wait for "
            "some to start, or ask an admin (`gpupool limits`)");
  Job arr = MakeJob(0);
  arr.array = "0-9";
  EXPECT_EQ(c_->Submit(arr, bob_).status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(b1.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b2.id).state, JobState::kPending);
  EXPECT_EQ(Get(b2.id).pending_reason,
            "waits: user bob has 1 jobs running or next to start, the limit (max_running 1, "
            "`gpupool limits`)");
  // A project's limit applies to all its members' jobs.
  Job v = MakeJob(2);
  v.project = "vision";
  v = c_->Submit(v, root_).value();
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_NE(Get(v.id).pending_reason.find("this job alone asks for 2 GPUs, more than project "
                                          "vision's limit"),
            std::string::npos)
      << Get(v.id).pending_reason;

  Restart();  // the limits are stored
  HearEveryNode();
  EXPECT_EQ(c_->GetLimits().limits, l);
  ASSERT_TRUE(c_->Cancel(v.id, root_).ok());
  // Raising them lets the jobs start.
  ASSERT_TRUE(c_->SetLimits(Limits{}, root_).ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  EXPECT_EQ(Get(a2.id).state, JobState::kAssigned);
  EXPECT_EQ(Get(b2.id).state, JobState::kAssigned);
}

TEST_F(ControllerTest, ConcurrentSubmissionsCannotPassMaxQueuedTogether) {
  Register(2);
  Limits l;
  l.users["alice"].max_queued = 10;
  ASSERT_TRUE(c_->SetLimits(l, root_).ok());
  std::atomic<int> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        if (c_->Submit(MakeJob(0), alice_).ok()) ++accepted;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(accepted.load(), 10);
  EXPECT_EQ(store_->ListJobs({})->size(), 10u);
}

// The server's watch of its store's disk (server/store_disk_watch.h) refuses new jobs
// through ControllerOptions::submission_room; a retried submission that was taken before
// is still answered with its job (nothing new is written for it), and the room's return
// takes submissions again.
TEST_F(ControllerTest, SubmissionsAreRefusedWhileTheStoresDiskIsShortOfRoom) {
  Status room = Status::Ok();
  ControllerOptions o;
  o.submission_room = [&room] { return room; };
  Restart(o);
  Register(4);
  Job j = MakeJob(1);
  j.submit_key = "disk-1";
  Result<Job> first = c_->Submit(j, alice_, nullptr);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  room = Status::ResourceExhausted("the disk that holds the pool's database is short of room");
  Result<Job> refused = c_->Submit(MakeJob(1), alice_, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(), room.message());
  Job array = MakeJob(1);
  array.array = "0-3";
  EXPECT_EQ(c_->Submit(array, alice_, nullptr).status().code(), StatusCode::kResourceExhausted);
  bool duplicate = false;
  Result<Job> again = c_->Submit(j, alice_, &duplicate);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(store_->ListJobs({})->size(), 1u);
  room = Status::Ok();
  EXPECT_TRUE(c_->Submit(MakeJob(1), alice_, nullptr).ok());
}

}  // namespace
}  // namespace gpupool::controller::controller_test
