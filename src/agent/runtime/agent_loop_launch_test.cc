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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/job_files.h"
#include "agent/launcher_test_util.h"
#include "agent/node_lease.h"
#include "agent/runtime/agent_loop.h"
#include "common/strings.h"
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
  // `link`: the loop's link to the controller (null: link_); `launcher`: its launcher
  // (null: launcher_); `boot_clock`: the node lease's clock (null: the system's).
  void StartLoop(std::shared_ptr<protocol::ControllerLink> link = nullptr,
                 Launcher* launcher = nullptr, std::function<int64_t()> boot_clock = nullptr) {
    AgentLoopOptions ao;
    ao.boot_clock = std::move(boot_clock);
    ao.node_name = "n1";
    ao.state_dir = dir_.path();
    ao.fake_node = true;
    ao.telemetry_interval_s = 0;
    ao.cancel_grace_s = 1;
    loop_ = std::make_unique<AgentLoop>(ao, link ? link : link_,
                                        launcher != nullptr ? launcher : launcher_.get());
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
  // An exec request for session `exec` in task 0 (attempt 1) of `job`, running `script`.
  static protocol::Work Exec(int64_t exec, int64_t job, const std::string& script) {
    protocol::ExecRequest x;
    x.id = exec;
    x.job_id = job;
    x.task_index = 0;
    x.attempt = 1;
    x.argv = {"sh", "-c", script};
    protocol::Work w;
    w.exec = {x};
    return w;
  }
  // The reports of exec session `exec` the controller acknowledged, in order.
  static std::vector<protocol::ExecReport> Reports(const protocol::FakeControllerLink::Recorded& r,
                                                   int64_t exec) {
    std::vector<protocol::ExecReport> out;
    for (const protocol::EventBatch& b : r.event_batches) {
      for (const protocol::ExecReport& x : b.exec) {
        if (x.id == exec) out.push_back(x);
      }
    }
    return out;
  }
  static bool ExecEnded(const protocol::FakeControllerLink::Recorded& r, int64_t exec) {
    const std::vector<protocol::ExecReport> reports = Reports(r, exec);
    return std::any_of(reports.begin(), reports.end(),
                       [](const protocol::ExecReport& x) { return x.ended; });
  }
  // The launcher makes no cgroups (a non-root agent, isolation off, cgroup v1 with nothing
  // to limit), whatever this machine has. Before StartLoop.
  void WithoutCgroups() {
    LauncherOptions o = testing::TestOptions(dir_.path());
    o.cgroup_root = "";
    launcher_ = NewProcessLauncher(o);
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
  // A launcher a test puts before launcher_ (StartLoop's `launcher`): it outlives the loop.
  std::unique_ptr<Launcher> wrapper_;
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

// The controller as a slow network shows it to an agent: the poll after the first answer
// that `late_after` picks is answered only once `ran` says "ran" (what that answer
// ordered ran) or after 1.5 s, whichever comes first; the rest goes straight to `inner`.
// Passes every call on to `inner`; tests override what they hold up or watch.
class ForwardingLink : public protocol::ControllerLink {
 public:
  explicit ForwardingLink(std::shared_ptr<protocol::FakeControllerLink> inner)
      : inner_(std::move(inner)) {}
  Result<protocol::RegistrationReply> Register(const protocol::Registration& r) override {
    return inner_->Register(r);
  }
  Result<protocol::Work> PollWork(const std::string& node, int wait_ms) override {
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
};

class LatePollAfter final : public ForwardingLink {
 public:
  LatePollAfter(std::shared_ptr<protocol::FakeControllerLink> inner, std::string ran,
                std::function<bool(const protocol::Work&)> late_after)
      : ForwardingLink(std::move(inner)),
        ran_(std::move(ran)),
        late_after_(std::move(late_after)) {}
  Result<protocol::Work> PollWork(const std::string& node, int wait_ms) override {
    if (armed_.exchange(false)) (void)testing::WaitForFileContaining(ran_, "ran", 1500);
    Result<protocol::Work> work = ForwardingLink::PollWork(node, wait_ms);
    if (work.ok() && !picked_ && late_after_(*work)) {
      picked_ = true;
      armed_ = true;
    }
    return work;
  }

 private:
  const std::string ran_;
  const std::function<bool(const protocol::Work&)> late_after_;
  bool picked_ = false;  // polls come from the loop's thread alone
  std::atomic<bool> armed_{false};
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
  StartLoop(std::make_shared<LatePollAfter>(
      link_, ran, [](const protocol::Work& w) { return !w.launch.empty(); }));
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
  protocol::Work w = Launch(16, 1, "trap '' TERM; echo ready; while :; do sleep 0.2; done");
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
  // Their traps are set (a SIGTERM before would end them: the test failed 2 runs in 30).
  for (const char* task : {"0.1", "1.1"}) {
    ASSERT_TRUE(testing::WaitForFileContaining(dir_.path() + "/jobs/16/" + task + "/" + kStdoutFile,
                                               "ready", 5000));
  }
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

// A task without cgroups ends (here by itself) while an exec session runs in it: the
// session is stopped with it, as the removal of the task's cgroups kills its processes
// elsewhere. It used to run on, its task gone, with nothing left to end it.
TEST_F(AgentLoopLaunchTest, AnExecSessionEndsWithItsTask) {
  WithoutCgroups();
  const std::string go = dir_.path() + "/go";
  const std::string pidfile = dir_.path() + "/exec.pid";
  link_->QueueWork(Launch(24, 1, "while [ ! -e " + go + " ]; do sleep 0.05; done"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 24, 0, 1); }));
  link_->QueueWork(Exec(
      41, 24,
      "echo $$ > " + pidfile + ".tmp; mv " + pidfile + ".tmp " + pidfile + "; exec sleep 300"));
  ASSERT_TRUE(testing::WaitForFileContaining(pidfile, "\n", 10'000));
  const std::optional<int64_t> session = ParseInt64(Trim(testing::ReadWholeFile(pidfile)));
  ASSERT_TRUE(session.has_value());
  { std::ofstream(go) << ""; }
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 24, 0, 1); }));
  EXPECT_TRUE(link_->WaitFor([](const auto& r) { return ExecEnded(r, 41); }))
      << "the exec session outlived its task";
  const bool ended = testing::WaitForExit(static_cast<int>(*session), 5000);
  if (!ended) ::kill(static_cast<pid_t>(*session), SIGKILL);
  EXPECT_TRUE(ended);
}

// A job's cancel reaches every process of its exec sessions, here on a node without cgroups
// a worker that an exec session started in a session of its own: it gets its SIGTERM (and
// its grace), as a task's own worker does, from the session's supervisor.
TEST_F(AgentLoopLaunchTest, AJobsCancelReachesEveryProcessOfItsExecSessions) {
  WithoutCgroups();
  const std::string mark = dir_.path() + "/worker-term";
  link_->QueueWork(Launch(25, 1, "exec sleep 30"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 25, 0, 1); }));
  const std::string worker =
      "trap \"echo worker-term >> " + mark + "; exit 0\" TERM; echo ready; sleep 30 & wait";
  link_->QueueWork(Exec(42, 25, "setsid sh -c '" + worker + "' & wait"));
  ASSERT_TRUE(
      testing::WaitForFileContaining(dir_.path() + "/jobs/25/exec-42/stdout.log", "ready", 10'000));
  protocol::Work cancel;
  cancel.cancel = {{25, 1, 0}};
  link_->QueueWork(cancel);
  ASSERT_TRUE(link_->WaitFor(
      [](const auto& r) { return Has(r, Kind::kExited, 25, 0, 1) && ExecEnded(r, 42); }));
  EXPECT_EQ(testing::ReadWholeFile(mark), "worker-term\n");
}

// An agent frozen while its poll was answered with an exec request, whose session was
// cancelled (its client went away) before the agent thawed: the cancel waits at the
// controller behind the request. As for a launch, what the controller has is taken before
// the session starts: it never runs, and is reported ended without starting.
TEST_F(AgentLoopLaunchTest, AnExecWhoseCancelWaitsBehindItAtTheControllerNeverStarts) {
  const std::string ran = dir_.path() + "/ran43";
  link_->QueueWork(Launch(26, 1, "exec sleep 30"));
  StartLoop(std::make_shared<LatePollAfter>(
      link_, ran, [](const protocol::Work& w) { return !w.exec.empty(); }));
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 26, 0, 1); }));
  link_->QueueWork(Exec(43, 26, "echo ran > " + ran + "; exec sleep 30"));
  protocol::Work cancel;
  cancel.cancel = {{0, 0, 43}};
  link_->QueueWork(cancel);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return ExecEnded(r, 43); }));
  for (const protocol::ExecReport& x : Reports(link_->recorded(), 43)) {
    EXPECT_FALSE(x.started);
    EXPECT_EQ(x.error, "cancelled before it started");
  }
  EXPECT_FALSE(fs::exists(ran));
  EXPECT_FALSE(fs::exists(dir_.path() + "/jobs/26/exec-43/spec.json"));
}

// An exec session's cancel read before its request (the request waited, or was lost with
// a poll's answer and is sent again after the cancel; the controller puts an answer's
// cancels before its exec requests) is remembered: the request is refused as cancelled,
// and nothing of it runs.
TEST_F(AgentLoopLaunchTest, AnExecCancelReadBeforeItsRequestRefusesIt) {
  link_->QueueWork(Launch(27, 1, "exec sleep 30"));
  StartLoop();
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 27, 0, 1); }));
  protocol::Work cancel;
  cancel.cancel = {{0, 0, 44}};
  link_->QueueWork(cancel);  // one answer, the request in the next
  link_->QueueWork(Exec(44, 27, "echo ran > " + dir_.path() + "/ran44"));
  protocol::Work both = Exec(45, 27, "echo ran > " + dir_.path() + "/ran45");
  both.cancel = {{0, 0, 45}};  // both in one answer
  link_->QueueWork(both);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return ExecEnded(r, 44) && ExecEnded(r, 45); }));
  for (int64_t exec : {44, 45}) {
    for (const protocol::ExecReport& x : Reports(link_->recorded(), exec)) {
      EXPECT_FALSE(x.started) << exec;
      EXPECT_EQ(x.error, "cancelled before it started") << exec;
    }
    EXPECT_FALSE(fs::exists(dir_.path() + "/ran" + std::to_string(exec)));
  }
}

// An exec request for a task that has ended here, its end not yet acknowledged (the agent
// still holds its spec), is refused: the session would run in no task, outside any cgroup
// and past the job's end.
TEST_F(AgentLoopLaunchTest, AnExecInATaskThatHasEndedIsRefused) {
  link_->RefuseEvents(true);
  link_->QueueWork(Launch(28, 1, "true"));
  StartLoop();
  ASSERT_TRUE(
      link_->WaitFor([](const auto& r) { return Refused(r, Kind::kExited, 28, 0, 1) >= 1; }));
  link_->QueueWork(Exec(46, 28, "echo ran > " + dir_.path() + "/ran46"));
  // Its answer was offered (and refused) with the task's end: the end is still unacknowledged.
  ASSERT_TRUE(link_->WaitFor([](const auto& r) {
    return std::any_of(r.refused_event_batches.begin(), r.refused_event_batches.end(),
                       [](const protocol::EventBatch& b) {
                         return std::any_of(
                             b.exec.begin(), b.exec.end(),
                             [](const protocol::ExecReport& x) { return x.id == 46; });
                       });
  }));
  link_->RefuseEvents(false);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return ExecEnded(r, 46); }));
  for (const protocol::ExecReport& x : Reports(link_->recorded(), 46)) {
    EXPECT_FALSE(x.started);
    EXPECT_EQ(x.error, "task 0 of job 28 has ended on node n1");
  }
  EXPECT_FALSE(fs::exists(dir_.path() + "/ran46"));
}

// The real launcher, except that an exec session's launch waits until `release`: the
// agent is busy starting the session (its supervisor not up yet) while orders come.
// Passes every call on to `inner`; tests override what they watch or hold up.
class ForwardingLauncher : public Launcher {
 public:
  explicit ForwardingLauncher(Launcher* inner) : inner_(inner) {}
  using Launcher::Launch;
  Status Launch(const LaunchSpec& spec, const JobStdio& stdio) override {
    return inner_->Launch(spec, stdio);
  }
  Status Cancel(const RunId& id) override { return inner_->Cancel(id); }
  Status Stop(const RunId& id, const StopRequest& stop) override { return inner_->Stop(id, stop); }
  Status SignalJob(const RunId& id, int sig, bool main_only) override {
    return inner_->SignalJob(id, sig, main_only);
  }
  std::vector<JobEvent> Poll() override { return inner_->Poll(); }
  std::vector<JobEvent> Wait(int timeout_ms) override { return inner_->Wait(timeout_ms); }
  Result<std::vector<JobEvent>> Adopt() override { return inner_->Adopt(); }
  Status Forget(const RunId& id) override { return inner_->Forget(id); }
  std::vector<RunId> Running() const override { return inner_->Running(); }

 private:
  Launcher* const inner_;
};

class SlowExecLauncher final : public ForwardingLauncher {
 public:
  using ForwardingLauncher::ForwardingLauncher;
  using Launcher::Launch;
  Status Launch(const LaunchSpec& spec, const JobStdio& stdio) override {
    if (spec.id.is_exec()) {
      launching = true;
      (void)testing::PollUntil([this] { return release.load(); }, 10'000);
    }
    return ForwardingLauncher::Launch(spec, stdio);
  }

  std::atomic<bool> launching{false};
  std::atomic<bool> release{false};
};

// An exec session whose cancel comes while the agent starts it finds nothing running to
// stop then; it is stopped once it has started, instead of running until the
// controller's next resend of the cancel.
TEST_F(AgentLoopLaunchTest, AnExecCancelledWhileItStartsIsStoppedOnceStarted) {
  auto owned = std::make_unique<SlowExecLauncher>(launcher_.get());
  SlowExecLauncher& slow = *owned;
  wrapper_ = std::move(owned);
  link_->QueueWork(Launch(29, 1, "exec sleep 30"));
  StartLoop(nullptr, &slow);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 29, 0, 1); }));
  link_->QueueWork(Exec(47, 29, "exec sleep 300"));
  ASSERT_TRUE(testing::PollUntil([&] { return slow.launching.load(); }, 10'000));
  const int polls = link_->recorded().polls;
  protocol::Work cancel;
  cancel.cancel = {{0, 0, 47}};
  link_->QueueWork(cancel);
  link_->QueueWork(protocol::Work{});
  // Two more polls: the cancel's answer was taken, and applied before the poll after it.
  ASSERT_TRUE(link_->WaitFor([polls](const auto& r) { return r.polls >= polls + 2; }));
  slow.release = true;
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return ExecEnded(r, 47); }))
      << "the exec session runs on";
}

// An agent frozen (SIGSTOP, a paused VM) as its poll was answered: `frozen_ms` passes on
// the boot clock (`offset_us`) between the answer and the agent reading it, for an answer
// that carries signal orders.
class FrozenAtSignals final : public ForwardingLink {
 public:
  FrozenAtSignals(std::shared_ptr<protocol::FakeControllerLink> inner,
                  std::atomic<int64_t>* offset_us, int64_t frozen_ms)
      : ForwardingLink(std::move(inner)), offset_us_(offset_us), frozen_ms_(frozen_ms) {}
  Result<protocol::Work> PollWork(const std::string& node, int wait_ms) override {
    Result<protocol::Work> w = ForwardingLink::PollWork(node, wait_ms);
    if (w.ok() && !w->signal.empty()) *offset_us_ += frozen_ms_ * 1000;
    return w;
  }

 private:
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
  StartLoop(std::make_shared<FrozenAtSignals>(link_, &offset_us, 10'000), nullptr,
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

// Records the order of the agent's stops and signals.
class OrderLauncher final : public ForwardingLauncher {
 public:
  using ForwardingLauncher::ForwardingLauncher;
  Status Cancel(const RunId& id) override {
    Note("stop");
    return ForwardingLauncher::Cancel(id);
  }
  Status Stop(const RunId& id, const StopRequest& stop) override {
    Note("stop");
    return ForwardingLauncher::Stop(id, stop);
  }
  Status SignalJob(const RunId& id, int sig, bool main_only) override {
    Note("signal");
    return ForwardingLauncher::SignalJob(id, sig, main_only);
  }

  std::mutex mu;
  std::vector<std::string> calls;

 private:
  void Note(const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    calls.emplace_back(what);
  }
};

// Red team 8, finding 4: a signal given just before a cancel comes in the same answer; it
// was applied after the cancel, so a USR1 (save a checkpoint) came after the SIGTERM and
// a STOP froze the job through its grace. Signals go first.
TEST_F(AgentLoopLaunchTest, ASignalInTheAnswerOfACancelReachesTheTaskBeforeTheStop) {
  link_->QueueWork(Launch(33, 1,
                          "trap 'echo usr1' USR1; trap 'echo term; exit 0' TERM; echo ready; "
                          "while :; do sleep 0.05; done"));
  auto owned = std::make_unique<OrderLauncher>(launcher_.get());
  OrderLauncher& order = *owned;
  wrapper_ = std::move(owned);
  StartLoop(nullptr, &order);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kStarted, 33, 0, 1); }));
  const std::string out = JobDir(dir_.path(), RunId{33, 0, 1, 0}) + "/" + kStdoutFile;
  ASSERT_TRUE(testing::WaitForFileContaining(out, "ready", 5000));
  protocol::Work w;
  w.cancel = {{33, 1, 0}};
  w.signal = {{33, 1, 0, SIGUSR1, false}};
  link_->QueueWork(w);
  ASSERT_TRUE(link_->WaitFor([](const auto& r) { return Has(r, Kind::kExited, 33, 0, 1); }));
  EXPECT_EQ(testing::ReadWholeFile(out), "ready\nusr1\nterm\n");
  // The shim's log says the order (signals pending together reach the traps by number).
  const std::string log =
      testing::ReadWholeFile(JobDir(dir_.path(), RunId{33, 0, 1, 0}) + "/" + kShimLogFile);
  const size_t usr1 = log.find("gpupool cancel --signal: SIGUSR1 to");
  ASSERT_NE(usr1, std::string::npos) << log;
  EXPECT_LT(usr1, log.find("cancel: SIGTERM to")) << log;
  // And the launcher was asked in that order (a shim that took the stop before the
  // signal came would have carried them out the other way round).
  std::lock_guard<std::mutex> lock(order.mu);
  EXPECT_EQ(order.calls, (std::vector<std::string>{"signal", "stop"}));
}

}  // namespace
}  // namespace gpupool::agent
