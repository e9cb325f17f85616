// An end reported late (docs/health.md, "An end reported late"; job_lifecycle_late.h):
// a node cut off past the node timeout comes back and reports the real end of a task the
// controller had declared lost. adv4 findings 1 and 2 (s15, s22, s14). Each test runs on
// SQLite in memory and on a real PostgreSQL (the test binary's server; skipped without
// postgresql-15): what is recorded must come back from either store.
#include <atomic>

#include "common/json.h"
#include "controller/api.h"
#include "controller/controller_internal.h"
#include "controller/controller_test.h"
#include "controller/pool_accounting.h"
#include "controller/telemetry_service.h"
#include "controller/usage.h"
#include "store/open_store.h"
#include "store/postgres_test_server.h"

namespace gpupool::controller::controller_test {
namespace {

constexpr int64_t kS = 1'000'000;

class LateEndTest : public ControllerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    if (GetParam() == "postgresql") {
      auto server = store::SharedPostgresTestServer();
      if (!server.ok() && server.status().code() == StatusCode::kUnavailable) {
        GTEST_SKIP() << server.status().message();
      }
      ASSERT_TRUE(server.ok()) << server.status().ToString();
      Result<std::string> db = (*server)->CreateDatabase();
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      c_.reset();  // before the store it uses goes
      auto opened = store::OpenStore(*db);
      ASSERT_TRUE(opened.ok()) << opened.status().ToString();
      store_ = std::move(opened).value();
    }
    ControllerOptions o;
    o.node_lease_us = 60 * kS;
    Restart(o);
    Register(2, {}, "n1");
  }
  // A 2-GPU job of alice placed on n1 and started there; its start time.
  Job Start(bool requeue) {
    Job job = MakeJob(2);
    job.requeue = requeue;
    job = c_->Submit(job, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kAssigned);
    EXPECT_TRUE(Apply({Ev(job, protocol::EventKind::kStarted)}).ok());
    return Get(job.id);
  }
  // n1 falls silent: time passes past the node timeout (10 s) in steps, swept after each.
  void Silence(int64_t micros) {
    while (micros > 0) {
      const int64_t step = std::min<int64_t>(micros, 4 * kS);
      clock_.AdvanceMicros(step);
      micros -= step;
      ASSERT_TRUE(c_->SweepNodes().ok());
    }
  }
  // n1's agent comes back: it registers listing `job`'s task as ended, then reports that
  // its process exited with `code` at `end_us`.
  void ComesBackReporting(const Job& job, int attempt, int code, int64_t end_us) {
    protocol::Registration r;
    r.node = "n1";
    r.info = MakeNode(2);
    r.version = version_;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    r.ended.push_back({job.id, 0, attempt});
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
    Event e = Ev(job, protocol::EventKind::kExited, code);
    e.attempt = attempt;
    e.time_us = end_us;
    ASSERT_TRUE(Apply({e}).ok());
  }
  // A --requeue gang of two 1-GPU tasks, both placed on n1 (its only node then) and
  // started there; n2 (2 GPUs) registers after, where its next attempt could go.
  Job StartGang() {
    Job job = MakeJob(1);
    job.requeue = true;
    job.request.tasks = 2;
    job = c_->Submit(job, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kAssigned);
    Event s0 = Ev(job, protocol::EventKind::kStarted, 0, 0);
    s0.master_port = 41000;
    EXPECT_TRUE(Apply({s0, Ev(job, protocol::EventKind::kStarted, 0, 1)}).ok());
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kRunning);
    EXPECT_EQ(job.placement.size(), 2u);
    for (const jobs::TaskPlacement& p : job.placement) EXPECT_EQ(p.node, "n1");
    Register(2, {}, "n2");
    return job;
  }
  // n1 falls silent while n2 is heard: swept each 4 s.
  void SilenceN1(int64_t micros) {
    while (micros > 0) {
      const int64_t step = std::min<int64_t>(micros, 4 * kS);
      clock_.AdvanceMicros(step);
      micros -= step;
      ASSERT_TRUE(c_->WaitForWork("n2", 0).ok());
      ASSERT_TRUE(c_->SweepNodes().ok());
    }
  }
  // n1's agent comes back listing both tasks of the gang's attempt as ended.
  void GangNodeComesBack(const Job& job, int attempt) {
    protocol::Registration r;
    r.node = "n1";
    r.info = MakeNode(2);
    r.version = version_;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    r.ended.push_back({job.id, 0, attempt});
    r.ended.push_back({job.id, 1, attempt});
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  }
  // ... and reports task `task`'s end.
  void ReportsEnd(const Job& job, int attempt, int task, int code, int64_t end_us) {
    Event e = Ev(job, protocol::EventKind::kExited, code, task);
    e.attempt = attempt;
    e.time_us = end_us;
    ASSERT_TRUE(Apply({e}).ok());
  }
  double UsageOf(const Job& job) {
    return JobGpuHours(Get(job.id), 0, INT64_MAX, clock_.NowMicros());
  }
  // GET /v1/usage over [since_us, until_us) as root: its rows.
  Json UsageRows(int64_t since_us, int64_t until_us) {
    Api api(c_.get(), store_.get(), &clock_, AuthOptions{});
    net::HttpRequest r;
    r.method = "GET";
    r.path = "/v1/usage";
    r.query = {{"since_us", std::to_string(since_us)}, {"until_us", std::to_string(until_us)}};
    r.peer = net::PeerCredentials{1, 0, 0};
    const net::HttpResponse got = api.Handle(r);
    EXPECT_EQ(got.status, 200) << got.body;
    Result<Json> body = ParseJson(got.body, "usage");
    EXPECT_TRUE(body.ok()) << body.status().ToString();
    return body.ok() ? (*body)["rows"] : Json::array();
  }
  // The one row of `rows`, alice's, with `gpu_hours`; nothing more.
  static void ExpectAlicesHours(const Json& rows, double gpu_hours) {
    ASSERT_EQ(rows.size(), 1u) << rows.dump();
    EXPECT_EQ(rows[0]["key"], "alice");
    EXPECT_NEAR(rows[0]["gpu_hours"].get<double>(), gpu_hours, 1e-9) << rows.dump();
    EXPECT_EQ(rows[0]["jobs"], 1);
    EXPECT_NEAR(rows[0]["norm_share"].get<double>(), 1.0, 1e-9);  // fair share counts her
  }
  // A --requeue gang of two 2-GPU tasks started on n1 and n2 (one each), both of which fall
  // silent past the node timeout, in one sweep (a rack cut off), while n3 (4 GPUs, where
  // its next attempt could go) is heard: PENDING for attempt 2, waiting for both leases.
  Job LoseGangOnTwoNodes() {
    Register(2, {}, "n2");
    Job job = MakeJob(2);
    job.requeue = true;
    job.request.tasks = 2;
    job = c_->Submit(job, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kAssigned);
    EXPECT_EQ(job.placement.size(), 2u);
    for (size_t i = 0; i < job.placement.size(); ++i) {
      const std::string& node = job.placement[i].node;
      Event e = Ev(job, protocol::EventKind::kStarted, 0, static_cast<int>(i));
      if (i == 0) e.master_port = 41000;
      EXPECT_TRUE(Apply({e}, node).ok());
    }
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kRunning);
    Register(4, {}, "n3");
    for (int i = 0; i < 3; ++i) {
      clock_.AdvanceMicros(4 * kS);
      EXPECT_TRUE(c_->WaitForWork("n3", 0).ok());
      EXPECT_TRUE(c_->SweepNodes().ok());
    }
    return job;
  }
  struct Run {
    Job job;
    int64_t started = 0;
    int64_t lost_at = 0;
  };
  Run LoseN2(bool requeue) {
    Register(2, {}, "n2");
    Job job = MakeJob(2);
    job.requeue = requeue;
    job.request.tasks = 2;
    job = c_->Submit(job, alice_).value();
    EXPECT_TRUE(c_->ScheduleOnce().ok());
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kAssigned);
    EXPECT_EQ(job.placement.size(), 2u);
    if (job.placement.size() != 2u) return {};
    EXPECT_EQ(job.placement[0].node, "n1");
    EXPECT_EQ(job.placement[1].node, "n2");
    Event s0 = Ev(job, protocol::EventKind::kStarted, 0, 0);
    s0.master_port = 41000;
    EXPECT_TRUE(Apply({s0}, "n1").ok());
    EXPECT_TRUE(Apply({Ev(job, protocol::EventKind::kStarted, 0, 1)}, "n2").ok());
    job = Get(job.id);
    EXPECT_EQ(job.state, JobState::kRunning);
    const int64_t started = job.start_time_us;
    for (int i = 0; i < 3; ++i) {  // n2 silent past the node timeout (10 s)
      clock_.AdvanceMicros(4 * kS);
      EXPECT_TRUE(c_->WaitForWork("n1", 0).ok());
      EXPECT_TRUE(c_->SweepNodes().ok());
    }
    const Job after = Get(job.id);
    EXPECT_EQ(after.state, requeue ? JobState::kPending : JobState::kLost);
    const int64_t lost_at =
        requeue ? (after.earlier_attempts.empty() ? 0 : after.earlier_attempts[0].end_time_us)
                : after.end_time_us;
    EXPECT_EQ(lost_at - started, 12 * kS);
    return {job, started, lost_at};
  }
  // n1 reports task 0's end (stopped) at lost_at + 1 s; n2 comes back 12 s after the loss
  // and reports task 1's (exit 9) at lost_at + 10 s.
  void BothReport(const Run& run) {
    clock_.AdvanceMicros(kS);
    Event stop = Ev(run.job, protocol::EventKind::kExited, 143, 0);
    stop.attempt = 1;
    stop.time_us = run.lost_at + kS;
    stop.cancelled = true;
    ASSERT_TRUE(Apply({stop}, "n1").ok());
    clock_.AdvanceMicros(11 * kS);
    protocol::Registration r;
    r.node = "n2";
    r.info = MakeNode(2);
    for (gpu::GpuInfo& g : r.info.gpus) g.uuid += "-n2";
    r.version = version_;
    r.cpu_milli = 64'000;
    r.memory_mib = 256'000;
    r.ended.push_back({run.job.id, 1, 1});
    ASSERT_TRUE(c_->RegisterNode(r, "").ok());
    Event e = Ev(run.job, protocol::EventKind::kExited, 9, 1);
    e.attempt = 1;
    e.time_us = run.lost_at + 10 * kS;
    ASSERT_TRUE(Apply({e}, "n2").ok());
  }
};

// s15 and s14: a job without --requeue is LOST when n1 falls silent; its process exits 0
// 30 s after its start and n1 reports it later. The job stays LOST (its dependants acted
// on that), its record says the process succeeded and when, and its 2 GPUs are charged
// up to that end, in usage and in /metrics' ended GPU-hours, after a restart too.
TEST_P(LateEndTest, ALostJobsLateSuccessIsRecordedAndChargedToItsRealEnd) {
  TelemetryService telemetry(c_.get(), store_.get(), &clock_);
  PoolAccounting accounting(c_.get(), store_.get(), &clock_, &telemetry);
  ASSERT_TRUE(accounting.Fold().ok());
  const Job job = Start(false);
  const int64_t started = job.start_time_us;
  Silence(12 * kS);
  Job lost = Get(job.id);
  ASSERT_EQ(lost.state, JobState::kLost);
  const int64_t lost_at = lost.end_time_us;
  ASSERT_TRUE(accounting.Fold().ok());
  const auto key = std::make_pair(std::string("alice"), std::string("(none)"));
  const double at_loss = 2.0 * static_cast<double>(lost_at - started) / 3.6e9;
  EXPECT_NEAR(accounting.ended_totals().gpu_hours[key], at_loss, 1e-9);
  clock_.AdvanceMicros(40 * kS);
  ComesBackReporting(job, 1, 0, started + 30 * kS);
  Job late = Get(job.id);
  EXPECT_EQ(late.state, JobState::kLost);
  EXPECT_EQ(late.end_time_us, lost_at);
  EXPECT_EQ(late.late_end_time_us, started + 30 * kS);
  EXPECT_EQ(late.late_exit_code, 0);
  EXPECT_NE(late.late_reason.find("exited with code 0, reported after the loss"),
            std::string::npos)
      << late.late_reason;
  ASSERT_EQ(late.tasks.size(), 1u);
  EXPECT_TRUE(late.tasks[0].reported_late);
  const double to_end = 2.0 * 30 / 3600;
  EXPECT_NEAR(UsageOf(job), to_end, 1e-9);
  ASSERT_TRUE(accounting.Fold().ok());
  EXPECT_NEAR(accounting.ended_totals().gpu_hours[key], to_end, 1e-9);
  // Reported again (the agent resends until acknowledged): nothing more.
  ComesBackReporting(job, 1, 0, started + 30 * kS);
  ASSERT_TRUE(accounting.Fold().ok());
  EXPECT_NEAR(accounting.ended_totals().gpu_hours[key], to_end, 1e-9);
  // The record is stored: a restarted controller (and a fresh accounting) read it.
  Restart();
  EXPECT_EQ(Get(job.id).late_end_time_us, started + 30 * kS);
  TelemetryService telemetry2(c_.get(), store_.get(), &clock_);
  PoolAccounting fresh(c_.get(), store_.get(), &clock_, &telemetry2);
  ASSERT_TRUE(fresh.Fold().ok());
  EXPECT_NEAR(fresh.ended_totals().gpu_hours[key], to_end, 1e-9);
}

// A usage window that starts after the loss (and so after the job's end_time_us) but
// before the late end: the job held its 2 GPUs inside it up to that end, and GET
// /v1/usage counts that part, its user among the fair-share groups; a window after the
// late end counts nothing.
TEST_P(LateEndTest, AWindowAfterTheLossCountsTheGpusHeldUpToTheLateEnd) {
  const Job job = Start(false);
  const int64_t started = job.start_time_us;
  Silence(12 * kS);
  const int64_t lost_at = Get(job.id).end_time_us;
  ASSERT_EQ(Get(job.id).state, JobState::kLost);
  ASSERT_LT(lost_at, started + 20 * kS);
  clock_.AdvanceMicros(40 * kS);
  ComesBackReporting(job, 1, 0, started + 30 * kS);
  ASSERT_EQ(Get(job.id).late_end_time_us, started + 30 * kS);
  const int64_t now = clock_.NowMicros();
  ExpectAlicesHours(UsageRows(started + 20 * kS, now), 2.0 * 10 / 3600);
  ExpectAlicesHours(UsageRows(started + 20 * kS, started + 25 * kS), 2.0 * 5 / 3600);
  EXPECT_TRUE(UsageRows(started + 31 * kS, now).empty());
}

// A --requeue job cancelled while it waited for its next attempt (its end_time_us the
// cancel), whose lost attempt's end comes after: the attempt held its GPUs up to that
// end, and a window from after the cancel counts them.
TEST_P(LateEndTest, AWindowAfterACancelCountsTheLostAttemptUpToItsLateEnd) {
  const Job job = Start(true);
  const int64_t started = job.start_time_us;
  Silence(12 * kS);
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  ASSERT_TRUE(c_->Cancel(job.id, alice_).ok());
  const Job cancelled = Get(job.id);
  ASSERT_EQ(cancelled.state, JobState::kCancelled);
  ASSERT_LT(cancelled.end_time_us, started + 20 * kS);
  clock_.AdvanceMicros(40 * kS);
  ComesBackReporting(job, 1, 1, started + 30 * kS);
  const Job after = Get(job.id);
  ASSERT_EQ(after.earlier_attempts.size(), 1u);
  ASSERT_EQ(after.earlier_attempts[0].end_time_us, started + 30 * kS);
  ExpectAlicesHours(UsageRows(started + 20 * kS, clock_.NowMicros()), 2.0 * 10 / 3600);
}

// s22: a --requeue job whose n1 falls silent is PENDING for attempt 2, waiting for n1's
// lease. n1 comes back listing attempt 1 as ended (exit 0): the job ends SUCCEEDED, it is
// not run again, and attempt 1 is charged to its real end.
TEST_P(LateEndTest, ARequeuedJobWhoseLostAttemptSucceededIsNotRunAgain) {
  const Job job = Start(true);
  const int64_t started = job.start_time_us;
  Silence(12 * kS);
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  ASSERT_EQ(Get(job.id).fences.at(0).node, "n1");
  clock_.AdvanceMicros(8 * kS);
  ComesBackReporting(job, 1, 0, started + 14 * kS);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job done = Get(job.id);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.reason << " / " << done.pending_reason;
  EXPECT_EQ(done.attempt, 1);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_NE(done.reason.find("attempt 1 on node n1 succeeded"), std::string::npos) << done.reason;
  EXPECT_NEAR(UsageOf(job), 2.0 * 14 / 3600, 1e-9);
}

// A node speaks only for itself: another node's report of attempt 1's end (a hostile
// node with a node token) neither ends the requeued job SUCCEEDED nor charges its user.
TEST_P(LateEndTest, AnotherNodesReportOfALostAttemptsEndChangesNothing) {
  Register(2, {}, "n2");
  const Job job = Start(true);
  const std::string other = job.placement.at(0).node == "n1" ? "n2" : "n1";
  const int64_t started = job.start_time_us;
  clock_.AdvanceMicros(12 * kS);
  ASSERT_TRUE(c_->WaitForWork(other, 0).ok());
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  const Job before = Get(job.id);
  ASSERT_EQ(before.earlier_attempts.size(), 1u);
  EXPECT_EQ(before.earlier_attempts[0].nodes, std::vector<std::string>{job.placement.at(0).node});
  Event e = Ev(job, protocol::EventKind::kExited, 0);
  e.attempt = 1;
  e.time_us = started + 11 * kS;
  ASSERT_TRUE(Apply({e}, other).ok());
  const Job after = Get(job.id);
  EXPECT_EQ(after.state, JobState::kPending) << after.reason;
  EXPECT_EQ(after.earlier_attempts, before.earlier_attempts);
  EXPECT_EQ(after.late_end_time_us, 0);
}

// The late end comes after attempt 2 was placed (here: n1's lease ran out first): attempt
// 2 goes on; attempt 1's GPU time is charged to its real end.
TEST_P(LateEndTest, AfterTheNextAttemptStartedItGoesOnAndTheLostOneIsCharged) {
  Register(2, {}, "n2");
  const Job job = Start(true);
  const std::string lost_node = job.placement.at(0).node;
  const std::string other = lost_node == "n1" ? "n2" : "n1";
  const int64_t started = job.start_time_us;
  // Past the node timeout and the lease, the other node alive.
  for (int i = 0; i < 20; ++i) {
    clock_.AdvanceMicros(4 * kS);
    ASSERT_TRUE(c_->WaitForWork(other, 0).ok());
    ASSERT_TRUE(c_->SweepNodes().ok());
  }
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job second = Get(job.id);
  ASSERT_EQ(second.attempt, 2) << second.pending_reason;
  ASSERT_EQ(second.placement.at(0).node, other);
  ASSERT_TRUE(Apply({Ev(second, protocol::EventKind::kStarted)}, other).ok());
  Event e = Ev(job, protocol::EventKind::kExited, 0);
  e.attempt = 1;
  e.time_us = started + 50 * kS;
  ASSERT_TRUE(Apply({e}, lost_node).ok());
  Job running = Get(job.id);
  EXPECT_EQ(running.state, JobState::kRunning);
  EXPECT_EQ(running.attempt, 2);
  ASSERT_EQ(running.earlier_attempts.size(), 1u);
  EXPECT_EQ(running.earlier_attempts[0].end_time_us, started + 50 * kS);
  EXPECT_NE(running.earlier_attempts[0].late_reason.find("exited with code 0"), std::string::npos);
  EXPECT_NEAR(running.earlier_attempts[0].gpu_hours, 2.0 * 50 / 3600, 1e-9);
}

// Counts the store's reads of one job.
class CountingStore final : public store::ForwardingStore {
 public:
  explicit CountingStore(std::unique_ptr<store::Store> inner) : ForwardingStore(std::move(inner)) {}
  Result<Job> GetJob(int64_t id) override {
    reads.fetch_add(1);
    return inner()->GetJob(id);
  }
  std::atomic<int> reads{0};
};

// A hostile node with a node token sends end reports for jobs it never ran (ids of ended
// jobs or of none): each would cost a store read. Past the node's budget a minute they are
// dropped unread; a minute later it has its budget again, and a real late end of a job lost
// there is still recorded then.
TEST_P(LateEndTest, EndReportsOfJobsNotRunningAreLookedUpAtMost600TimesAMinutePerNode) {
  c_.reset();  // before the store it uses goes
  auto counting = std::make_unique<CountingStore>(std::move(store_));
  CountingStore* store = counting.get();
  store_ = std::move(counting);
  ControllerOptions o;
  o.node_lease_us = 60 * kS;
  Restart(o);
  Register(2, {}, "n1");
  Register(2, {}, "n2");
  const Job job = Start(/*requeue=*/false);
  Silence(12 * kS);
  ASSERT_EQ(Get(job.id).state, JobState::kLost);
  // n2 floods: 2,000 reports of ids that are not running.
  std::vector<Event> flood;
  for (int64_t id = 1000; id < 3000; ++id) {
    Event e = Ev(job, protocol::EventKind::kExited, 0);
    e.job_id = id;
    flood.push_back(e);
  }
  const int before = store->reads.load();
  ASSERT_TRUE(Apply(flood, "n2").ok());
  EXPECT_EQ(store->reads.load() - before, internal::kMaxEndedLookupsPerMinute);
  // n1's budget is its own: its late end is looked up and recorded.
  ComesBackReporting(job, job.attempt, 0, clock_.NowMicros() - kS);
  EXPECT_TRUE(Get(job.id).late_end_time_us > 0);
  // n2's is spent for this minute; the next minute it is whole again.
  const int spent = store->reads.load();
  ASSERT_TRUE(Apply({flood[0]}, "n2").ok());
  EXPECT_EQ(store->reads.load(), spent);
  clock_.AdvanceMicros(61 * kS);
  ASSERT_TRUE(Apply({flood[0]}, "n2").ok());
  EXPECT_EQ(store->reads.load(), spent + 1);
}

// A --requeue gang whose two tasks ran on n1 when it fell silent: PENDING for attempt 2,
// waiting for n1's lease. n1 comes back: task 0 exited 0; the job waits for task 1's end
// (attempt 2 is not placed on n2, free), and once task 1's exit 0 comes it ends SUCCEEDED,
// not run twice, charged up to the later end. The record comes back after a restart.
TEST_P(LateEndTest, AGangWhoseLostTasksAllSucceededIsNotRunAgain) {
  const Job job = StartGang();
  const int64_t started = job.start_time_us;
  SilenceN1(12 * kS);
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  ASSERT_EQ(Get(job.id).fences.at(0).node, "n1");
  clock_.AdvanceMicros(8 * kS);
  GangNodeComesBack(job, 1);
  ReportsEnd(job, 1, 0, 0, started + 14 * kS);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job waiting = Get(job.id);
  EXPECT_EQ(waiting.state, JobState::kPending) << waiting.reason;
  EXPECT_EQ(waiting.attempt, 1);
  EXPECT_EQ(waiting.fences.at(0).node, "n1");
  ReportsEnd(job, 1, 1, 0, started + 12 * kS);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job done = Get(job.id);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.reason << " / " << done.pending_reason;
  EXPECT_EQ(done.attempt, 1);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_EQ(done.end_time_us, started + 14 * kS);
  EXPECT_NE(done.reason.find("attempt 1 on node n1 succeeded (all 2 tasks)"), std::string::npos)
      << done.reason;
  // Each task's GPU up to its own end (the GPUs up to the loss, then each task's).
  EXPECT_NEAR(UsageOf(job), (14.0 + 12) / 3600, 1e-9);
  Restart();
  const Job stored = Get(job.id);
  EXPECT_EQ(stored.state, JobState::kSucceeded);
  EXPECT_EQ(stored.reason, done.reason);
  ASSERT_EQ(stored.earlier_attempts.size(), 1u);
  EXPECT_EQ(stored.earlier_attempts[0], done.earlier_attempts[0]);
  EXPECT_EQ(stored.earlier_attempts[0].late_ends,
            (std::vector<jobs::LateTaskEnd>{jobs::LateTaskEnd::kSucceeded,
                                            jobs::LateTaskEnd::kSucceeded}));
}

// Only task 0's end comes: the job waits for task 1's as the one-task job waits for its
// report, until n1's lease runs out; then attempt 2 is placed.
TEST_P(LateEndTest, AGangWithATaskNotYetReportedWaitsForTheLease) {
  const Job job = StartGang();
  const int64_t started = job.start_time_us;
  SilenceN1(12 * kS);
  const int64_t lease_until = jobs::FenceUntilUs(Get(job.id));
  ASSERT_GT(lease_until, clock_.NowMicros());
  clock_.AdvanceMicros(8 * kS);
  GangNodeComesBack(job, 1);
  ReportsEnd(job, 1, 0, 0, started + 14 * kS);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  ASSERT_EQ(Get(job.id).attempt, 1);
  clock_.AdvanceMicros(lease_until - clock_.NowMicros() + kS);
  HearEveryNode();
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job second = Get(job.id);
  EXPECT_EQ(second.state, JobState::kAssigned) << second.pending_reason;
  EXPECT_EQ(second.attempt, 2);
}

// Task 1 of the lost attempt failed: the job runs again (attempt 2 is placed as soon as
// both ends came), the record saying which task failed.
TEST_P(LateEndTest, AGangWithAFailedTaskRunsAgain) {
  const Job job = StartGang();
  const int64_t started = job.start_time_us;
  SilenceN1(12 * kS);
  clock_.AdvanceMicros(8 * kS);
  GangNodeComesBack(job, 1);
  ReportsEnd(job, 1, 0, 0, started + 14 * kS);
  ReportsEnd(job, 1, 1, 1, started + 13 * kS);
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job second = Get(job.id);
  EXPECT_EQ(second.state, JobState::kAssigned) << second.pending_reason;
  EXPECT_EQ(second.attempt, 2);
  ASSERT_EQ(second.earlier_attempts.size(), 1u);
  EXPECT_EQ(second.earlier_attempts[0].late_reason,
            "task 0 (node n1) exited with code 0; task 1 (node n1) exited with code 1, reported "
            "after the loss");
}

// red team 7, finding 1: a gang of two 2-GPU tasks spread over n1 (task 0) and n2 (task
// 1), started; n2 falls silent while n1 is heard, 12 s: n2 is lost, the job requeued (or,
// without --requeue, LOST) and task 0 on n1 stopped. n1 reports task 0's end 1 s after
// the loss; n2 comes back and reports task 1's, 10 s after the loss. Each task's GPUs are
// charged up to its own end: 4 GPUs x 12 s, then 2 x 1 s and 2 x 10 s (70 GPU-seconds),
// not 4 GPUs up to the latest end (88).
TEST_P(LateEndTest, ARequeuedGangsLostAttemptIsChargedEachTasksGpusUpToItsOwnEnd) {
  const Run run = LoseN2(true);
  ASSERT_NE(run.lost_at, 0);
  BothReport(run);
  const Job job = Get(run.job.id);
  ASSERT_EQ(job.earlier_attempts.size(), 1u);
  const jobs::EarlierAttempt& a = job.earlier_attempts[0];
  EXPECT_EQ(a.lost_time_us, run.lost_at);
  EXPECT_EQ(a.end_time_us, run.lost_at + 10 * kS);
  EXPECT_EQ(a.late_end_times_us, (std::vector<int64_t>{run.lost_at + kS, run.lost_at + 10 * kS}));
  EXPECT_NEAR(a.gpu_hours, 70.0 / 3600, 1e-9);
  EXPECT_NEAR(UsageOf(run.job), 70.0 / 3600, 1e-9);
  EXPECT_EQ(a.late_reason,
            "task 0 (node n1) exited with code 143 (stopped by the controller, its job lost); "
            "task 1 (node n2) exited with code 9, reported after the loss");
  // A window past task 0's end: n2's 2 GPUs only; one across the loss: 4 GPUs x 2 s,
  // then n1's 2 x 1 s and n2's 2 x 4 s.
  ExpectAlicesHours(UsageRows(run.lost_at + 3 * kS, run.lost_at + 7 * kS), 8.0 / 3600);
  ExpectAlicesHours(UsageRows(run.lost_at - 2 * kS, run.lost_at + 4 * kS), 18.0 / 3600);
  // Stored so: a restarted controller reads the same.
  Restart();
  EXPECT_EQ(Get(run.job.id).earlier_attempts[0], a);
  ExpectAlicesHours(UsageRows(run.lost_at + 3 * kS, run.lost_at + 7 * kS), 8.0 / 3600);
}

TEST_P(LateEndTest, ALostGangIsChargedEachTasksGpusUpToItsOwnEndInUsageAndMetrics) {
  TelemetryService telemetry(c_.get(), store_.get(), &clock_);
  PoolAccounting accounting(c_.get(), store_.get(), &clock_, &telemetry);
  ASSERT_TRUE(accounting.Fold().ok());
  const Run run = LoseN2(false);
  ASSERT_NE(run.lost_at, 0);
  ASSERT_TRUE(accounting.Fold().ok());
  const auto key = std::make_pair(std::string("alice"), std::string("(none)"));
  EXPECT_NEAR(accounting.ended_totals().gpu_hours[key], 48.0 / 3600, 1e-9);
  BothReport(run);
  const Job job = Get(run.job.id);
  EXPECT_EQ(job.state, JobState::kLost);
  EXPECT_EQ(job.late_end_time_us, run.lost_at + 10 * kS);
  EXPECT_EQ(job.tasks[0].end_time_us, run.lost_at + kS);
  EXPECT_EQ(job.tasks[1].end_time_us, run.lost_at + 10 * kS);
  EXPECT_EQ(job.late_reason,
            "task 0 (node n1) exited with code 143 (stopped by the controller, its job lost); "
            "task 1 (node n2) exited with code 9, reported after the loss (the job "
            "stays LOST)");
  EXPECT_NEAR(UsageOf(run.job), 70.0 / 3600, 1e-9);
  ASSERT_TRUE(accounting.Fold().ok());
  EXPECT_NEAR(accounting.ended_totals().gpu_hours[key], 70.0 / 3600, 1e-9);
  ExpectAlicesHours(UsageRows(run.lost_at + 3 * kS, run.lost_at + 7 * kS), 8.0 / 3600);
  ExpectAlicesHours(UsageRows(run.lost_at - 2 * kS, run.lost_at + 4 * kS), 18.0 / 3600);
  // A fresh accounting reads the store: the same.
  Restart();
  TelemetryService telemetry2(c_.get(), store_.get(), &clock_);
  PoolAccounting fresh(c_.get(), store_.get(), &clock_, &telemetry2);
  ASSERT_TRUE(fresh.Fold().ok());
  EXPECT_NEAR(fresh.ended_totals().gpu_hours[key], 70.0 / 3600, 1e-9);
}

// n1 comes back early, listing task 0 as ended, and reports its end (exit 1): n2, still
// cut off, may run task 1 until its lease ends, so attempt 2 is not placed on n3 (before,
// the wait was for the first node lost only, and attempt 2 started beside attempt 1's
// task on n2). A restart keeps both waits. At n2's lease's end attempt 2 is placed.
TEST_P(LateEndTest, AGangLostOnTwoNodesWaitsForTheOtherNodesLease) {
  const Job job = LoseGangOnTwoNodes();
  const int64_t lease_until = job.start_time_us + 60 * kS;  // both last heard at its start
  Job waiting = Get(job.id);
  ASSERT_EQ(waiting.state, JobState::kPending) << waiting.reason;
  EXPECT_EQ(waiting.fences,
            (std::vector<jobs::NodeFence>{{"n1", lease_until}, {"n2", lease_until}}));
  // A restarted controller reads both from the store.
  ControllerOptions o;
  o.node_lease_us = 60 * kS;
  Restart(o);
  EXPECT_EQ(Get(job.id).fences, waiting.fences);
  Register(4, {}, "n3");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  waiting = Get(job.id);
  ASSERT_EQ(waiting.state, JobState::kPending);
  EXPECT_NE(waiting.pending_reason.find("waits for attempt 1 to stop on nodes n1 and n2 (the "
                                        "nodes were lost while it ran; their leases stop it by"),
            std::string::npos)
      << waiting.pending_reason;
  // n1 is back: its registration lists task 0 as ended, and its end follows.
  clock_.AdvanceMicros(4 * kS);
  protocol::Registration r;
  r.node = "n1";
  r.info = MakeNode(2);
  r.version = version_;
  r.cpu_milli = 64'000;
  r.memory_mib = 256'000;
  r.ended.push_back({job.id, 0, 1});
  ASSERT_TRUE(c_->RegisterNode(r, "").ok());
  ReportsEnd(job, 1, 0, 1, job.start_time_us + 10 * kS);
  ASSERT_TRUE(c_->WaitForWork("n3", 0).ok());
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  waiting = Get(job.id);
  EXPECT_EQ(waiting.state, JobState::kPending) << waiting.reason;
  EXPECT_EQ(waiting.attempt, 1);
  EXPECT_EQ(waiting.fences, (std::vector<jobs::NodeFence>{{"n2", lease_until}}));
  EXPECT_NE(waiting.pending_reason.find("waits for attempt 1 to stop on node n2 (the node was "
                                        "lost while it ran; its lease stops it by"),
            std::string::npos)
      << waiting.pending_reason;
  Restart(o);
  EXPECT_EQ(Get(job.id).fences, waiting.fences);
  // One second before n2's lease ends it still waits; at its end it is placed.
  while (clock_.NowMicros() < lease_until - kS) {
    clock_.AdvanceMicros(std::min<int64_t>(4 * kS, lease_until - kS - clock_.NowMicros()));
    HearEveryNode();
    Register(4, {}, "n3");
    ASSERT_TRUE(c_->SweepNodes().ok());
  }
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  clock_.AdvanceMicros(kS);
  ASSERT_TRUE(c_->WaitForWork("n3", 0).ok());
  ASSERT_TRUE(c_->SweepNodes().ok());
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job second = Get(job.id);
  EXPECT_EQ(second.state, JobState::kAssigned) << second.pending_reason;
  EXPECT_EQ(second.attempt, 2);
  EXPECT_TRUE(second.fences.empty());
}

// n1 and then n2 come back running nothing of the job: each ends the wait for itself, and
// attempt 2 is placed once both have.
TEST_P(LateEndTest, AGangLostOnTwoNodesStartsAgainOnceBothRegistered) {
  const Job job = LoseGangOnTwoNodes();
  ASSERT_EQ(Get(job.id).state, JobState::kPending);
  Register(2, {}, "n1");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  Job waiting = Get(job.id);
  EXPECT_EQ(waiting.state, JobState::kPending);
  EXPECT_NE(waiting.pending_reason.find("to stop on node n2"), std::string::npos)
      << waiting.pending_reason;
  Register(2, {}, "n2");
  ASSERT_TRUE(c_->ScheduleOnce().ok());
  const Job second = Get(job.id);
  EXPECT_EQ(second.state, JobState::kAssigned) << second.pending_reason;
  EXPECT_EQ(second.attempt, 2);
}

INSTANTIATE_TEST_SUITE_P(Stores, LateEndTest, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace gpupool::controller::controller_test
