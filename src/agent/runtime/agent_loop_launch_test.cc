// The agent loop with a real launcher (real shims and processes) against an in-process
// controller: what a task's identity (job, task, attempt) guarantees on a node.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "agent/job_files.h"
#include "agent/launcher_test_util.h"
#include "agent/node_lease.h"
#include "agent/runtime/agent_loop.h"
#include "protocol/fake_controller_link.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using Kind = protocol::EventKind;

class AgentLoopLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    launcher_ = NewProcessLauncher(testing::TestOptions(dir_.path()));
  }
  void TearDown() override {
    if (loop_) {
      loop_->Stop();
      thread_.join();
    }
    launcher_.reset();
    testing::KillLeftoverJobs(dir_.path());
  }
  // `link`: the loop's link to the controller (null: link_).
  // `boot_clock`: the node lease's clock (null: the system's).
  void StartLoop(std::shared_ptr<protocol::ControllerLink> link = nullptr,
                 std::function<int64_t()> boot_clock = nullptr) {
    AgentLoopOptions ao;
    ao.boot_clock = std::move(boot_clock);
    ao.node_name = "n1";
    ao.state_dir = dir_.path();
    ao.fake_node = true;
    ao.telemetry_interval_s = 0;
    ao.cancel_grace_s = 1;
    loop_ = std::make_unique<AgentLoop>(ao, link ? link : link_, launcher_.get());
    thread_ = std::thread([this] { EXPECT_TRUE(loop_->Run().ok()); });
  }
  // A launch order of task 0 of single-task job `job`, attempt `attempt`.
  static protocol::Work Launch(int64_t job, int attempt, const std::string& script) {
    protocol::LaunchOrder o;
    o.job.id = job;
    o.job.attempt = attempt;
    o.job.user = "tester";
    o.job.uid = ::geteuid();
    o.job.gid = ::getegid();
    o.job.workdir = "/";
    o.job.command = std::vector<std::string>{"sh", "-c", script};
    o.rendezvous = {0, 1, {"h"}, {1}, 0};
    protocol::Work w;
    w.launch = {o};
    return w;
  }
  // Whether the controller has acknowledged an event of `kind` for (job, task, attempt).
  static bool Has(const protocol::FakeControllerLink::Recorded& r, Kind kind, int64_t job, int task,
                  int attempt) {
    const std::vector<protocol::Event> events = r.Events();
    return std::any_of(events.begin(), events.end(), [&](const protocol::Event& e) {
      return e.kind == kind && e.job_id == job && e.task_index == task && e.attempt == attempt;
    });
  }
  // How many event posts the controller refused carried an event of `kind` for (job,
  // task, attempt).
  static int Refused(const protocol::FakeControllerLink::Recorded& r, Kind kind, int64_t job,
                     int task, int attempt) {
    return static_cast<int>(std::count_if(
        r.refused_event_batches.begin(), r.refused_event_batches.end(),
        [&](const protocol::EventBatch& b) {
          return std::any_of(b.events.begin(), b.events.end(), [&](const protocol::Event& e) {
            return e.kind == kind && e.job_id == job && e.task_index == task &&
                   e.attempt == attempt;
          });
        }));
  }

  testing::ScratchDir dir_;
  std::unique_ptr<Launcher> launcher_;
  std::shared_ptr<protocol::FakeControllerLink> link_ =
      std::make_shared<protocol::FakeControllerLink>();
  std::unique_ptr<AgentLoop> loop_;
  std::thread thread_;
};

// Issue 25 item 2, kept with (job, task, attempt) identities: a launch order of a later
// attempt while an earlier one runs here stops the earlier one, and starts only once the
// controller has acknowledged the earlier one's end; each attempt in its own directory.
TEST_F(AgentLoopLaunchTest, ALaterAttemptStartsOnlyOnceTheEarliersEndIsAcknowledged) {
  link_->QueueWork(Launch(5, 1, "echo one; exec sleep 30"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 5, 0, 1); }));
  ASSERT_TRUE(testing::WaitForFileContaining(dir_.path() + "/jobs/5/0.1/stdout.log", "one", 5000));

  link_->RefuseEvents(true);
  link_->QueueWork(Launch(5, 2, "echo two"));
  // Attempt 1 is stopped for it; its end is not acknowledged yet, so attempt 2 waits: the
  // end has been offered twice (a round after the agent saw it) and still nothing runs.
  ASSERT_TRUE(
      link_->WaitFor([](const auto& r) { return Refused(r, Kind::kExited, 5, 0, 1) >= 2; }));
  EXPECT_TRUE(launcher_->Running().empty());
  EXPECT_FALSE(fs::exists(dir_.path() + "/jobs/5/0.2"));

  link_->RefuseEvents(false);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 5, 0, 2); }));
  const std::vector<protocol::Event> events = link_->recorded().Events();
  auto at = [&](Kind kind, int attempt) {
    return std::find_if(events.begin(), events.end(), [&](const protocol::Event& e) {
      return e.kind == kind && e.attempt == attempt;
    });
  };
  ASSERT_NE(at(Kind::kExited, 1), events.end());
  EXPECT_TRUE(at(Kind::kExited, 1)->cancelled);
  EXPECT_LT(at(Kind::kExited, 1), at(Kind::kStarted, 2));
  EXPECT_EQ(at(Kind::kExited, 1)->stdout_path, dir_.path() + "/jobs/5/0.1/stdout.log");
  EXPECT_EQ(at(Kind::kExited, 2)->stdout_path, dir_.path() + "/jobs/5/0.2/stdout.log");
  EXPECT_EQ(testing::ReadWholeFile(dir_.path() + "/jobs/5/0.1/stdout.log"), "one\n");
  EXPECT_EQ(testing::ReadWholeFile(dir_.path() + "/jobs/5/0.2/stdout.log"), "two\n");
}

// An agent upgraded while a task it started under the previous layout (STATE/jobs/<key>/)
// runs registers that task as running by its (job, task, attempt), cancels it when told,
// and reports its end with its logs where they are.
TEST_F(AgentLoopLaunchTest, ATaskOfThePreviousLayoutIsRegisteredAndStoppedByItsIdentity) {
  const int64_t key = (int64_t{1} << 50) + 77 * 4096 + 1;  // job 77, task 1 of 2
  const std::string legacy = dir_.path() + "/jobs/" + std::to_string(key);
  fs::create_directories(legacy);
  const std::string spec =
      R"({"job_id": )" + std::to_string(key) +
      R"(, "attempt": 2, "pool_job_id": 77, "task_index": 1, "num_tasks": 2, "user": "tester", )" +
      R"("uid": )" + std::to_string(::geteuid()) + R"(, "gid": )" + std::to_string(::getegid()) +
      R"(, "argv": ["sh", "-c", "echo old; exec sleep 30"], "workdir": "/", "grace_s": 1})";
  ASSERT_TRUE(WriteFileDurably(legacy + "/" + kSpecFile, spec, 0600).ok());
  ASSERT_TRUE(testing::StartShimIn(legacy).ok());

  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return r.polls > 0; }));
  const protocol::Registration reg = link_->recorded().registrations.at(0);
  EXPECT_EQ(reg.running, (std::vector<protocol::RunningTask>{{77, 1, 2}}));
  // Its command has printed (a cancel before that would leave the log empty).
  ASSERT_TRUE(testing::WaitForFileContaining(legacy + "/stdout.log", "old", 5000));

  protocol::Work cancel;
  cancel.cancel = {{77, 2, 0}};
  link_->QueueWork(cancel);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 77, 1, 2); }));
  for (const protocol::Event& e : link_->recorded().Events()) {
    if (e.kind != Kind::kExited) continue;
    EXPECT_TRUE(e.cancelled);
    EXPECT_EQ(e.stdout_path, legacy + "/stdout.log");
  }
  EXPECT_EQ(testing::ReadWholeFile(legacy + "/stdout.log"), "old\n");
}

// A launch this node cannot carry out by a fault of its own (here a file where the job's
// directory goes; a full disk fails the same writes) is reported lost with not_started,
// naming the node and the cause, so the controller requeues the job and drains the node
// instead of failing it; nothing of the job ran.
TEST_F(AgentLoopLaunchTest, ALaunchTheNodeCannotCarryOutIsTheNodesFault) {
  fs::create_directories(dir_.path() + "/jobs");
  { std::ofstream(dir_.path() + "/jobs/9") << "in the way"; }
  link_->QueueWork(Launch(9, 1, "touch " + dir_.path() + "/ran"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kLost, 9, 0, 1); }));
  for (const protocol::Event& e : link_->recorded().Events()) {
    if (e.job_id != 9) continue;
    EXPECT_EQ(e.kind, Kind::kLost);
    EXPECT_TRUE(e.not_started);
    EXPECT_NE(e.reason.find("node n1 could not start it: "), std::string::npos) << e.reason;
    EXPECT_NE(e.reason.find("is not a directory"), std::string::npos) << e.reason;
  }
  EXPECT_FALSE(fs::exists(dir_.path() + "/ran"));
  EXPECT_TRUE(launcher_->Running().empty());
}

// The controller's answer for a job cancelled before its agent had the launch: the
// cancel, then the launch again (controller_nodes.cc). The agent starts nothing and
// reports the task ended, cancelled; a task it already runs is stopped, its launch's
// resend ignored.
TEST_F(AgentLoopLaunchTest, ALaunchAfterItsJobsCancelIsRefusedAndReportedEnded) {
  link_->QueueWork(Launch(12, 1, "exec sleep 30"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 12, 0, 1); }));
  for (int64_t job : {11, 12}) {
    protocol::Work w = Launch(job, 1, "touch " + dir_.path() + "/ran" + std::to_string(job));
    w.cancel = {{job, 1, 0}};
    link_->QueueWork(w);
  }
  ASSERT_TRUE(link_->WaitFor([](const auto& r) {
    return Has(r, Kind::kExited, 11, 0, 1) && Has(r, Kind::kExited, 12, 0, 1);
  }));
  for (const protocol::Event& e : link_->recorded().Events()) {
    if (e.kind != Kind::kExited) continue;
    EXPECT_TRUE(e.cancelled) << e.job_id;
    if (e.job_id == 11) {
      EXPECT_EQ(e.reason, "cancelled before it started");
      EXPECT_FALSE(e.exit_code.has_value());
    }
  }
  EXPECT_FALSE(Has(link_->recorded(), Kind::kStarted, 11, 0, 1));
  EXPECT_FALSE(fs::exists(dir_.path() + "/ran11"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/ran12"));
}

// The controller as a slow network shows it to an agent: its second poll is answered
// only once `ran` says "ran" (the launch it got from the first poll ran) or after 1.5 s,
// whichever comes first; the rest goes straight to `inner`.
class LateSecondPoll final : public protocol::ControllerLink {
 public:
  LateSecondPoll(std::shared_ptr<protocol::FakeControllerLink> inner, std::string ran)
      : inner_(std::move(inner)), ran_(std::move(ran)) {}
  Result<protocol::RegistrationReply> Register(const protocol::Registration& r) override {
    return inner_->Register(r);
  }
  Result<protocol::Work> PollWork(const std::string& node, int wait_ms) override {
    if (++polls_ == 2) (void)testing::WaitForFileContaining(ran_, "ran", 1500);
    return inner_->PollWork(node, wait_ms);
  }
  Status PostEvents(const protocol::EventBatch& b) override { return inner_->PostEvents(b); }
  Status PostTelemetry(const protocol::TelemetryBatch& b) override {
    return inner_->PostTelemetry(b);
  }
  Status AnswerLogRead(const protocol::LogAnswer& a) override { return inner_->AnswerLogRead(a); }
  Result<protocol::ExecOutputAck> PostExecOutput(int64_t exec_id, const std::string& node,
                                                 const protocol::ExecOutput& output,
                                                 int wait_ms) override {
    return inner_->PostExecOutput(exec_id, node, output, wait_ms);
  }
  Result<protocol::ExecInput> TakeExecInput(int64_t exec_id, const std::string& node, int64_t after,
                                            int wait_ms) override {
    return inner_->TakeExecInput(exec_id, node, after, wait_ms);
  }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  const std::shared_ptr<protocol::FakeControllerLink> inner_;
  const std::string ran_;
  std::atomic<int> polls_{0};
};

// An agent frozen (SIGSTOP) while its poll was answered with a launch, and whose job was
// cancelled before it thawed: the cancel waits at the controller, behind the launch. The
// agent used to start the task on the launch and stop it on the cancel of its next poll
// (here answered once the task ran, as a network's delay let it run for real). It takes
// what the controller has before it starts anything now: nothing of the job runs, and
// the task is reported ended, cancelled, so the controller records the job CANCELLED.
TEST_F(AgentLoopLaunchTest, ALaunchWhoseCancelWaitsBehindItAtTheControllerNeverStarts) {
  const std::string ran = dir_.path() + "/ran21";
  link_->QueueWork(Launch(21, 1, "echo ran > " + ran + "; exec sleep 30"));
  protocol::Work cancel;
  cancel.cancel = {{21, 1, 0}};
  link_->QueueWork(cancel);
  StartLoop(std::make_shared<LateSecondPoll>(link_, ran));
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 21, 0, 1); }));
  EXPECT_FALSE(Has(link_->recorded(), Kind::kStarted, 21, 0, 1));
  for (const protocol::Event& e : link_->recorded().Events()) {
    if (e.job_id != 21) continue;
    EXPECT_TRUE(e.cancelled);
    EXPECT_EQ(e.reason, "cancelled before it started");
  }
  EXPECT_FALSE(fs::exists(ran));
  EXPECT_FALSE(fs::exists(dir_.path() + "/jobs/21/0.1/spec.json"));
  EXPECT_TRUE(launcher_->Running().empty());
}

// A preempted gang's task that said checkpoint-done gets a stop of its own beside the
// job's (CancelOrder::task, grace 0): that task is killed at once, and its sibling on the
// node keeps the job's grace (red team 7, finding 2: it was killed mid-checkpoint too).
TEST_F(AgentLoopLaunchTest, AStopForOneTaskOfAGangStopsThatTaskAlone) {
  // Both ignore SIGTERM (as a task saving its shard would go on): only SIGKILL ends them.
  protocol::Work w = Launch(16, 1, "trap '' TERM; while :; do sleep 0.2; done");
  w.launch[0].job.request.tasks = 2;
  w.launch[0].rendezvous = {0, 2, {"h", "h"}, {1, 1}, 29500};
  w.launch.push_back(w.launch[0]);
  w.launch[1].task_index = 1;
  w.launch[1].rendezvous.task_index = 1;
  link_->QueueWork(w);
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) {
    return Has(r, Kind::kStarted, 16, 0, 1) && Has(r, Kind::kStarted, 16, 1, 1);
  }));
  protocol::CancelOrder job{16, 1};
  job.grace_s = 60;
  job.deadline_s = 2'000'000'000;
  protocol::CancelOrder own = job;
  own.grace_s = 0;
  own.task = 1;
  protocol::Work stop;
  stop.cancel = {job, own};
  link_->QueueWork(stop);
  // Task 0's supervisor took the job's stop with its grace (one with none, the order for
  // task 1 read as the job's, would say "grace 0 s" here or "the grace now ends in 0 s").
  const std::string log0 = dir_.path() + "/jobs/16/0.1/shim.log";
  ASSERT_TRUE(testing::WaitForFileContaining(log0, "preempted: grace 60 s", 5000))
      << testing::ReadWholeFile(log0);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 16, 1, 1); }));
  // Two more rounds of polls (each answered at once): an end of task 0 would have been
  // reported by then.
  const int polls = link_->recorded().polls;
  link_->QueueWork(protocol::Work{});
  link_->QueueWork(protocol::Work{});
  ASSERT_TRUE(link_->WaitFor([polls](const auto& r) { return r.polls >= polls + 2; }));
  EXPECT_FALSE(Has(link_->recorded(), Kind::kExited, 16, 0, 1));
  EXPECT_EQ(testing::ReadWholeFile(log0).find("grace now ends"), std::string::npos)
      << testing::ReadWholeFile(log0);
  const std::vector<RunId> running = launcher_->Running();
  EXPECT_NE(std::find(running.begin(), running.end(), RunId{16, 0, 1, 0}), running.end());
  EXPECT_EQ(std::find(running.begin(), running.end(), RunId{16, 1, 1, 0}), running.end());
}

// gpupool cancel --signal: a work answer's signal order reaches the task named by its job,
// task and attempt (another attempt's order, none), and the task runs on to its own end.
TEST_F(AgentLoopLaunchTest, ASignalOrderReachesItsTaskWhichRunsOn) {
  const std::string go = dir_.path() + "/go";
  link_->QueueWork(Launch(31, 2,
                          "trap 'echo usr1' USR1; echo ready; while [ ! -e " + go +
                              " ]; do sleep 0.05; done; echo done"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 31, 0, 2); }));
  const std::string out = JobDir(dir_.path(), RunId{31, 0, 2, 0}) + "/" + kStdoutFile;
  ASSERT_TRUE(testing::WaitForFileContaining(out, "ready", 5000));
  protocol::Work w;
  w.signal = {{31, 1, 0, SIGUSR1, false}, {31, 2, 0, SIGUSR1, false}};
  link_->QueueWork(w);
  ASSERT_TRUE(testing::WaitForFileContaining(out, "usr1", 5000)) << testing::ReadWholeFile(out);
  { std::ofstream(go) << ""; }
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 31, 0, 2); }));
  for (const protocol::Event& e : link_->recorded().Events()) {
    if (e.kind != Kind::kExited) continue;
    EXPECT_EQ(e.exit_code, 0) << e.reason;
    EXPECT_FALSE(e.cancelled);
  }
  EXPECT_EQ(testing::ReadWholeFile(out), "ready\nusr1\ndone\n");
}

// An agent frozen (SIGSTOP, a paused VM) as its poll was answered: `frozen_ms` passes on
// the boot clock (`offset_us`) between the answer and the agent reading it, for an answer
// that carries signal orders.
class FrozenAtSignals final : public protocol::ControllerLink {
 public:
  FrozenAtSignals(std::shared_ptr<protocol::FakeControllerLink> inner,
                  std::atomic<int64_t>* offset_us, int64_t frozen_ms)
      : inner_(std::move(inner)), offset_us_(offset_us), frozen_ms_(frozen_ms) {}
  Result<protocol::RegistrationReply> Register(const protocol::Registration& r) override {
    return inner_->Register(r);
  }
  Result<protocol::Work> PollWork(const std::string& node, int wait_ms) override {
    Result<protocol::Work> w = inner_->PollWork(node, wait_ms);
    if (w.ok() && !w->signal.empty()) *offset_us_ += frozen_ms_ * 1000;
    return w;
  }
  Status PostEvents(const protocol::EventBatch& b) override { return inner_->PostEvents(b); }
  Status PostTelemetry(const protocol::TelemetryBatch& b) override {
    return inner_->PostTelemetry(b);
  }
  Status AnswerLogRead(const protocol::LogAnswer& a) override { return inner_->AnswerLogRead(a); }
  Result<protocol::ExecOutputAck> PostExecOutput(int64_t exec_id, const std::string& node,
                                                 const protocol::ExecOutput& output,
                                                 int wait_ms) override {
    return inner_->PostExecOutput(exec_id, node, output, wait_ms);
  }
  Result<protocol::ExecInput> TakeExecInput(int64_t exec_id, const std::string& node, int64_t after,
                                            int wait_ms) override {
    return inner_->TakeExecInput(exec_id, node, after, wait_ms);
  }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  const std::shared_ptr<protocol::FakeControllerLink> inner_;
  std::atomic<int64_t>* const offset_us_;
  const int64_t frozen_ms_;
};

// Delivered at once or never (controller/job_signal.h): an order the agent reads more than
// kSignalOrderMaxAgeMs after the controller answered with it is dropped, as the user was
// told it may never arrive. Its age is the poll's time less the time the controller held
// the poll (held_ms): the agent was frozen 10 s after an answer to a poll held 9.5 s, so
// the USR2 order (held 9.5 s) is 0.5 s old and carried out, the USR1 one (held 0 s, in an
// answer read 10 s after its poll) dropped.
TEST_F(AgentLoopLaunchTest, ASignalOrderReadLongAfterTheAnswerIsDropped) {
  const std::string go = dir_.path() + "/go";
  link_->QueueWork(
      Launch(32, 1,
             "trap 'echo usr1' USR1; trap 'echo usr2' USR2; echo ready; while [ ! -e " + go +
                 " ]; do sleep 0.05; done; echo done"));
  std::atomic<int64_t> offset_us{0};
  StartLoop(std::make_shared<FrozenAtSignals>(link_, &offset_us, 10'000),
            [&offset_us] { return BootMicros() + offset_us.load(); });
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 32, 0, 1); }));
  const std::string out = JobDir(dir_.path(), RunId{32, 0, 1, 0}) + "/" + kStdoutFile;
  ASSERT_TRUE(testing::WaitForFileContaining(out, "ready", 5000));
  protocol::Work w;
  w.signal = {{32, 1, 0, SIGUSR1, false, /*held_ms=*/0},
              {32, 1, 0, SIGUSR2, false, /*held_ms=*/9'500}};
  link_->QueueWork(w);
  // The orders are carried out in turn: USR1's was dropped before USR2 went.
  ASSERT_TRUE(testing::WaitForFileContaining(out, "usr2", 5000)) << testing::ReadWholeFile(out);
  { std::ofstream(go) << ""; }
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 32, 0, 1); }));
  EXPECT_EQ(testing::ReadWholeFile(out), "ready\nusr2\ndone\n");
}

}  // namespace
}  // namespace gpupool::agent
