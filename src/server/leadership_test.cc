#include "server/leadership.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/json.h"

namespace gpupool::server {
namespace {

// What the fakes below leave alone: no lease to read, nothing to release, no other
// controller alive.
class QuietLeaseStore : public store::LeaseStore {
 public:
  Result<store::Lease> Read() override { return store::Lease{}; }
  Status Release(const std::string&, int64_t) override { return Status::Ok(); }
  Status Heartbeat(const std::string&, const std::string&) override { return Status::Ok(); }
  Result<std::vector<store::ControllerRecord>> ListControllers(int64_t) override {
    return std::vector<store::ControllerRecord>{};
  }
};

// A lease store whose renewals fail (as a lock timeout does) a given number of times in a
// row, then succeed; it records how long each renewal was allowed to wait.
class FlakyLeaseStore final : public QuietLeaseStore {
 public:
  explicit FlakyLeaseStore(int failures) : failures_left_(failures) {}

  Result<store::Lease> TryAcquire(const std::string& holder, const std::string& address,
                                  int64_t ttl_ms) override {
    return store::Lease{holder, address, 1, ttl_ms};
  }
  Result<store::Lease> Renew(const std::string& holder, int64_t epoch, int64_t ttl_ms,
                             int64_t wait_ms) override {
    std::lock_guard lock(mu_);
    waits_.push_back(wait_ms);
    if (failures_left_ > 0) {
      --failures_left_;
      return Status::Internal(
          "postgresql: renew the lease: ERROR:  canceling statement due to lock timeout");
    }
    ++renewed_;
    cv_.notify_all();
    return store::Lease{holder, "", epoch, ttl_ms};
  }

  // Waits (10 s at most) for `n` successful renewals, or until Done().
  bool WaitForRenewals(int n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return renewed_ >= n || done_; });
    return renewed_ >= n;
  }
  void Done() {
    std::lock_guard lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  std::vector<int64_t> waits() {
    std::lock_guard lock(mu_);
    return waits_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int failures_left_;
  int renewed_ = 0;
  bool done_ = false;  // KeepLease returned
  std::vector<int64_t> waits_;
};

// Renewals that fail transiently are tried again soon, several times within what is left
// of the lease, rather than once a period: five failures in a row cost a 2 s lease 5 x 40
// ms, not 5 x 400 ms (which would pass the 1.8 s the leader trusts its lease for).
TEST(LeadershipTest, TransientRenewalFailuresAreRetriedWithinTheLease) {
  FlakyLeaseStore leases(/*failures=*/5);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 2000},
                  SystemClock::Get());
  ASSERT_TRUE(lead.TryLead().ok());
  std::atomic<bool> stop = false;
  Status kept;
  std::thread keeper([&] {
    kept = lead.KeepLease(stop);
    leases.Done();
  });
  const bool renewed = leases.WaitForRenewals(1);
  stop = true;
  lead.Interrupt();
  keeper.join();
  EXPECT_TRUE(renewed);
  EXPECT_TRUE(kept.ok()) << kept.ToString();
  const std::vector<int64_t> waits = leases.waits();
  ASSERT_GE(waits.size(), 6u);
  // Every renewal may wait only for what is left of the lease (1.8 s of it trusted),
  // less each time as the failures eat into it.
  for (size_t i = 0; i < waits.size(); ++i) {
    EXPECT_GT(waits[i], 0) << i;
    EXPECT_LE(waits[i], 1800) << i;
    if (i > 0 && i < 6) {
      EXPECT_LT(waits[i], waits[i - 1]) << i;
    }
  }
}

// Renewals that keep failing: the leader gives the lease up once it could have run out,
// never later than its trusted part (plus one try).
TEST(LeadershipTest, ALeaderThatCannotRenewStopsWithinTheLease) {
  FlakyLeaseStore leases(/*failures=*/1'000'000);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 500},
                  SystemClock::Get());
  ASSERT_TRUE(lead.TryLead().ok());
  std::atomic<bool> stop = false;
  const int64_t started = SystemClock::Get()->MonotonicMicros();
  Status kept = lead.KeepLease(stop);
  const int64_t took_ms = (SystemClock::Get()->MonotonicMicros() - started) / 1000;
  EXPECT_EQ(kept.code(), StatusCode::kUnavailable) << kept.ToString();
  EXPECT_NE(kept.message().find("lock timeout"), std::string::npos) << kept.message();
  // 450 ms trusted; a try is not made with under a millisecond of it left (whole ms), so
  // the end may come up to 1 ms before it (449 ms was seen in CI).
  EXPECT_GE(took_ms, 449);
  EXPECT_LT(took_ms, 1500);              // a loaded machine's scheduling, not the lease, beyond 450
  EXPECT_GE(leases.waits().size(), 5u);  // retried, not given up at the first failure
}

// A lease store on a ManualClock whose renewals take `answer_us` of its time to come
// back: the first `successes` succeed, later ones fail as a lock timeout does. With
// `suspended`, the host sleeps through each renewal instead, successful or not: the
// clock's boot time moves by `answer_us`, its wall and monotonic time stand still.
class SlowLeaseStore final : public QuietLeaseStore {
 public:
  SlowLeaseStore(ManualClock* clock, int64_t answer_us, int successes, bool suspended = false)
      : clock_(clock), answer_us_(answer_us), successes_left_(successes), suspended_(suspended) {}

  Result<store::Lease> TryAcquire(const std::string& holder, const std::string& address,
                                  int64_t ttl_ms) override {
    return store::Lease{holder, address, 1, ttl_ms};
  }
  Result<store::Lease> Renew(const std::string& holder, int64_t epoch, int64_t ttl_ms,
                             int64_t) override {
    std::lock_guard lock(mu_);
    if (suspended_) clock_->SuspendMicros(answer_us_);
    if (successes_left_ == 0) {
      return Status::Internal(
          "postgresql: renew the lease: ERROR:  canceling statement due to lock timeout");
    }
    --successes_left_;
    if (!suspended_) clock_->AdvanceMicros(answer_us_);
    ++renewed_;
    cv_.notify_all();
    return store::Lease{holder, "", epoch, ttl_ms};
  }

  // Waits (10 s at most, real time) for `n` successful renewals.
  bool WaitForRenewals(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return renewed_ >= n; });
  }

 private:
  ManualClock* clock_;
  const int64_t answer_us_;
  std::mutex mu_;
  std::condition_variable cv_;
  int successes_left_;
  const bool suspended_;
  int renewed_ = 0;
};

constexpr int64_t kT0 = 1'000'000'000;

// The lease is sure for nine tenths of lease_ms after the request that took it; not
// before this controller leads.
TEST(LeadershipTest, ALeaderIsSureOfItsLeaseForNineTenthsOfItAfterTakingIt) {
  ManualClock clock(kT0);
  SlowLeaseStore leases(&clock, 0, 0);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  EXPECT_FALSE(lead.SurelyLeads());
  ASSERT_TRUE(lead.TryLead().ok());
  EXPECT_TRUE(lead.SurelyLeads());
  clock.AdvanceMicros(899'999);
  EXPECT_TRUE(lead.SurelyLeads());
  clock.AdvanceMicros(1);
  EXPECT_FALSE(lead.SurelyLeads());  // paused past the margin: no longer sure
}

// A renewal makes the lease sure for nine tenths of it from when the renewal was sent,
// not from when its answer came back (500 ms later here); a leader busy or paused for
// less than what is left keeps serving.
TEST(LeadershipTest, ARenewalMakesTheLeaseSureFromWhenItWasSent) {
  ManualClock clock(kT0);
  SlowLeaseStore leases(&clock, /*answer_us=*/500'000, /*successes=*/1);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  std::atomic<bool> stop = false;
  Status kept;
  std::thread keeper([&] { kept = lead.KeepLease(stop); });
  clock.AdvanceMicros(200'000);  // a fifth: the renewal is sent at T0 + 200 ms
  EXPECT_TRUE(leases.WaitForRenewals(1));
  // The keeper stops before it could renew again (the clock stands still): what it
  // made of the renewal stays.
  stop = true;
  lead.Interrupt();
  keeper.join();
  EXPECT_TRUE(kept.ok()) << kept.ToString();
  EXPECT_EQ(clock.MonotonicMicros(), kT0 + 700'000);  // its answer came back
  EXPECT_TRUE(lead.SurelyLeads());
  clock.AdvanceMicros(399'000);  // T0 + 1099 ms: busy or paused, but the lease is sure
  EXPECT_TRUE(lead.SurelyLeads());
  clock.AdvanceMicros(1'000);  // T0 + 200 + 900 ms
  EXPECT_FALSE(lead.SurelyLeads());
}

// KeepLease on a thread of its own, as a server runs it: Returned() waits (in real time, a
// bound only) for it to give up; Join() stops it (after `before_join`, which may unblock
// a store) and returns what it gave up with.
class Keeper {
 public:
  explicit Keeper(Leadership* lead) : lead_(lead) {
    thread_ = std::thread([this] { kept_.set_value(lead_->KeepLease(stop_)); });
  }
  bool Returned() { return done_.wait_for(std::chrono::seconds(10)) == std::future_status::ready; }
  Status Join(const std::function<void()>& before_join = [] {}) {
    stop_ = true;
    before_join();
    lead_->Interrupt();
    thread_.join();
    return done_.get();
  }

 private:
  Leadership* lead_;
  std::atomic<bool> stop_ = false;
  std::promise<Status> kept_;
  std::future<Status> done_ = kept_.get_future();
  std::thread thread_;
};

// A renewal under way when the host was suspended for longer than the lease fails on
// waking (its wait for the lock timed out): the keeper gives the lease up at once, as
// boot time says the lease has run out, rather than retry for the 700 ms that its
// monotonic clock, stopped while the host slept, says are left.
TEST(LeadershipTest, AKeeperWhoseHostSleptThroughTheLeaseGivesItUp) {
  ManualClock clock(kT0);
  SlowLeaseStore leases(&clock, /*answer_us=*/5'000'000, /*successes=*/0, /*suspended=*/true);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  Keeper keeper(&lead);
  clock.AdvanceMicros(200'000);  // a fifth: the renewal is due
  // The clock stands still from here: a keeper that retried would wait for ever.
  const bool returned = keeper.Returned();
  const Status why = keeper.Join();
  ASSERT_TRUE(returned) << "the keeper went on retrying after the lease ran out";
  EXPECT_EQ(why.code(), StatusCode::kUnavailable) << why.ToString();
  EXPECT_NE(why.message().find("lock timeout"), std::string::npos) << why.message();
  EXPECT_EQ(clock.MonotonicMicros(), kT0 + 200'000);
  EXPECT_FALSE(lead.SurelyLeads());
}

// Loading the state took most of the lease: the keeper renews at once rather than a
// period later, so that the new leader does not answer 503 meanwhile.
TEST(LeadershipTest, TheFirstRenewalComesAtOnceWhenLoadingAteTheSureTime) {
  ManualClock clock(kT0);
  SlowLeaseStore leases(&clock, 0, 1'000'000);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  clock.AdvanceMicros(950'000);
  EXPECT_FALSE(lead.SurelyLeads());
  std::atomic<bool> stop = false;
  std::thread keeper([&] { (void)lead.KeepLease(stop); });
  EXPECT_TRUE(leases.WaitForRenewals(1));  // the clock stands still: only an immediate try
  stop = true;
  lead.Interrupt();
  keeper.join();
  EXPECT_TRUE(lead.SurelyLeads());
  lead.Release();
  EXPECT_FALSE(lead.SurelyLeads());
}

// A lease store that counts the calls made to it; the lease is held by `holder` (the
// caller when empty), and renewals succeed.
class CountingLeaseStore final : public QuietLeaseStore {
 public:
  explicit CountingLeaseStore(std::string holder = "") : holder_(std::move(holder)) {}

  Result<store::Lease> TryAcquire(const std::string& holder, const std::string& address,
                                  int64_t ttl_ms) override {
    std::lock_guard lock(mu_);
    ++acquires_;
    cv_.notify_all();
    return store::Lease{holder_.empty() ? holder : holder_, address, 1, ttl_ms};
  }
  Result<store::Lease> Renew(const std::string& holder, int64_t epoch, int64_t ttl_ms,
                             int64_t) override {
    std::lock_guard lock(mu_);
    ++renewals_;
    return store::Lease{holder, "", epoch, ttl_ms};
  }
  Status Heartbeat(const std::string&, const std::string&) override {
    std::lock_guard lock(mu_);
    ++heartbeats_;
    return Status::Ok();
  }

  // Waits (10 s at most, real time) for `n` calls of TryAcquire.
  bool WaitForAcquires(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return acquires_ >= n; });
  }
  int acquires() {
    std::lock_guard lock(mu_);
    return acquires_;
  }
  int renewals() {
    std::lock_guard lock(mu_);
    return renewals_;
  }
  int heartbeats() {
    std::lock_guard lock(mu_);
    return heartbeats_;
  }

 private:
  const std::string holder_;
  std::mutex mu_;
  std::condition_variable cv_;
  int acquires_ = 0;
  int renewals_ = 0;
  int heartbeats_ = 0;
};

// A keeper whose host slept past the lease while it waited gives the lease up when its
// wait ends, without trying to renew it. Its wait is the clock's, so it ends when the
// monotonic clock passes the wait's deadline (the first renewal's, a fifth of the lease
// after taking it), not by real time; the boot-time check after it finds the lease gone.
TEST(LeadershipTest, AKeeperWokenPastItsLeaseGivesItUpWhenItsWaitEnds) {
  ManualClock clock(kT0);
  CountingLeaseStore leases;
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  ASSERT_EQ(leases.heartbeats(), 1);
  Keeper keeper(&lead);
  const bool waited = clock.WaitForWaiters(1);  // the keeper waits for its first renewal
  clock.SuspendMicros(5'000'000);               // five leases long
  clock.AdvanceMicros(200'000);                 // awake again: the renewal is due
  const bool returned = keeper.Returned();
  const Status why = keeper.Join();
  EXPECT_TRUE(waited) << "the keeper's wait is not the clock's";
  ASSERT_TRUE(returned) << "the keeper went on after the lease ran out";
  EXPECT_EQ(why.code(), StatusCode::kUnavailable) << why.ToString();
  EXPECT_NE(why.message().find("suspended"), std::string::npos) << why.message();
  EXPECT_EQ(leases.renewals(), 0);
  EXPECT_FALSE(lead.SurelyLeads());
}

// A lease store whose connection died while the controller was paused: once Kill()ed,
// every call (the heartbeat, a renewal) blocks until Revive(), as one on a dead
// connection waits for the kernel's timeouts. It counts the calls made.
class DeadConnectionLeaseStore final : public QuietLeaseStore {
 public:
  Result<store::Lease> TryAcquire(const std::string& holder, const std::string& address,
                                  int64_t ttl_ms) override {
    return store::Lease{holder, address, 1, ttl_ms};
  }
  Result<store::Lease> Renew(const std::string& holder, int64_t epoch, int64_t ttl_ms,
                             int64_t) override {
    Call();
    return store::Lease{holder, "", epoch, ttl_ms};
  }
  Status Heartbeat(const std::string&, const std::string&) override {
    Call();
    return Status::Ok();
  }

  void Kill() {
    std::lock_guard lock(mu_);
    dead_ = true;
  }
  void Revive() {
    std::lock_guard lock(mu_);
    dead_ = false;
    cv_.notify_all();
  }
  int calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  void Call() {
    std::unique_lock lock(mu_);
    ++calls_;
    cv_.wait(lock, [this] { return !dead_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool dead_ = false;
  int calls_ = 0;
};

// A keeper woken long past its lease (the process was stopped for five leases: every
// clock moved) gives the lease up before it calls the database: its heartbeat, due
// again by then, would first block on the connection the pause left dead.
TEST(LeadershipTest, AKeeperWokenPastItsLeaseCallsNoDatabaseFirst) {
  ManualClock clock(kT0);
  DeadConnectionLeaseStore leases;
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  const int calls = leases.calls();  // the heartbeat and the lease taken
  Keeper keeper(&lead);
  const bool waited = clock.WaitForWaiters(1);  // the keeper waits for its first renewal
  leases.Kill();
  clock.AdvanceMicros(5'000'000);  // SIGSTOP for five leases, then SIGCONT
  const bool returned = keeper.Returned();
  // Revive lets a keeper blocked on the dead connection go, to join it.
  const Status why = keeper.Join([&] { leases.Revive(); });
  EXPECT_TRUE(waited) << "the keeper's wait is not the clock's";
  ASSERT_TRUE(returned) << "the keeper called the database before it looked at its deadline";
  EXPECT_EQ(why.code(), StatusCode::kUnavailable) << why.ToString();
  EXPECT_EQ(leases.calls(), calls);
  EXPECT_FALSE(lead.SurelyLeads());
}

// A fenced write that found another epoch: the leader stops trusting its lease at once.
TEST(LeadershipTest, ALapsedLeaderIsNoLongerSureOfItsLease) {
  ManualClock clock(kT0);
  CountingLeaseStore leases;
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  EXPECT_TRUE(lead.SurelyLeads());
  lead.Lapse();
  EXPECT_FALSE(lead.SurelyLeads());
}

// A standby's wait between looks at the lease is the clock's: it moves only when the
// clock does (50 ms here), and a stop ends it at once, with the clock standing still.
TEST(LeadershipTest, AStandbysWaitMovesWithTheClockAndEndsAtAStop) {
  ManualClock clock(kT0);
  CountingLeaseStore leases(/*holder=*/"b");
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  std::atomic<bool> stop = false;
  std::promise<std::optional<int64_t>> led;
  std::future<std::optional<int64_t>> done = led.get_future();
  std::thread standby([&] { led.set_value(lead.WaitToLead(stop)); });
  EXPECT_TRUE(leases.WaitForAcquires(1));
  EXPECT_TRUE(clock.WaitForWaiters(1)) << "the standby's wait is not the clock's";
  EXPECT_EQ(leases.acquires(), 1);
  clock.AdvanceMicros(50'000);  // its next look is due
  EXPECT_TRUE(leases.WaitForAcquires(2));
  EXPECT_TRUE(clock.WaitForWaiters(1));
  stop = true;
  lead.Interrupt();
  const bool returned = done.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!returned) clock.AdvanceMicros(50'000);  // let a stuck standby go, to join it
  standby.join();
  EXPECT_TRUE(returned) << "a stop did not end the standby's wait";
  EXPECT_FALSE(done.get().has_value());
  EXPECT_EQ(clock.MonotonicMicros(), kT0 + 50'000);
}

// Records the answer it is given.
class RecordingResponder final : public net::HttpResponder {
 public:
  bool Complete(net::HttpResponse response) override {
    if (answered) return false;
    answered = std::move(response);
    return true;
  }
  void OnAbandoned(std::function<void()>) override {}
  std::optional<net::HttpResponse> answered;
};

net::HttpRequest Request(const std::string& method, const std::string& path) {
  net::HttpRequest r;
  r.method = method;
  r.path = path;
  return r;
}

// Requests through ServeWhileLeading to a handler that answers 200 at once, except for
// "/later", whose responders it keeps in `held` for the test to answer.
struct Served {
  explicit Served(const Leadership& leadership) : lead(leadership) {}
  std::shared_ptr<RecordingResponder> Serve(const std::string& method, const std::string& path) {
    auto out = std::make_shared<RecordingResponder>();
    ServeWhileLeading(lead, Request(method, path), out,
                      [this](const net::HttpRequest& r, std::shared_ptr<net::HttpResponder> o) {
                        if (r.path == "/later") {
                          held.push_back(std::move(o));
                          return;
                        }
                        o->Complete(net::HttpResponse{.status = 200, .body = "{}"});
                      });
    return out;
  }
  const Leadership& lead;
  std::vector<std::shared_ptr<net::HttpResponder>> held;  // answered later
};

// A leader whose lease is no longer sure answers as a standby does (503, no leader
// known, /healthz 200); a read answered after the lease stopped being sure is refused
// too, a write's answer (fenced in the store) stands.
TEST(LeadershipTest, ALeaderServesOnlyWhileItsLeaseIsSure) {
  ManualClock clock(kT0);
  SlowLeaseStore leases(&clock, 0, 0);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  Served served(lead);
  std::vector<std::shared_ptr<net::HttpResponder>>& held = served.held;
  auto serve = [&](const std::string& method, const std::string& path) {
    return served.Serve(method, path);
  };
  EXPECT_EQ(serve("GET", "/v1/jobs/1")->answered->status, 200);
  auto read = serve("GET", "/later");
  auto write = serve("POST", "/later");
  ASSERT_EQ(held.size(), 2u);
  clock.AdvanceMicros(900'000);  // paused past the margin
  held[0]->Complete(net::HttpResponse{.status = 200, .body = "{}"});
  held[1]->Complete(net::HttpResponse{.status = 200, .body = "{}"});
  EXPECT_EQ(read->answered->status, 503);
  EXPECT_EQ(write->answered->status, 200);
  for (const char* path : {"/v1/jobs/1", "/metrics", "/readyz"}) {
    auto out = serve("GET", path);
    ASSERT_TRUE(out->answered) << path;
    EXPECT_EQ(out->answered->status, 503) << path;
    Result<Json> body = ParseJson(out->answered->body, "answer", 1 << 20);
    ASSERT_TRUE(body.ok()) << out->answered->body;
    EXPECT_EQ((*body)["leader"], "") << path;  // clients move on to the next controller
  }
  EXPECT_EQ(serve("POST", "/v1/jobs/1/cancel")->answered->status, 503);
  EXPECT_EQ(held.size(), 2u);  // nothing more reached the handler
  EXPECT_EQ(serve("GET", "/healthz")->answered->status, 200);
}

// A host suspended past the lease (a laptop's lid shut, a VM paused) stops the monotonic
// clock but not the database's: on waking, the leader is no longer sure of its lease,
// although by its monotonic clock no time has passed, and answers 503, also to a read
// that was under way while it slept.
TEST(LeadershipTest, ALeaderWokenFromSuspendIsNoLongerSureOfItsLease) {
  ManualClock clock(kT0);
  SlowLeaseStore leases(&clock, 0, 0);
  Leadership lead(&leases, {.id = "a", .address = "http://a:8421", .lease_ms = 1000}, &clock);
  ASSERT_TRUE(lead.TryLead().ok());
  Served served(lead);
  std::vector<std::shared_ptr<net::HttpResponder>>& held = served.held;
  auto serve = [&](const std::string& path) { return served.Serve("GET", path); };
  EXPECT_EQ(serve("/v1/jobs/1")->answered->status, 200);
  auto read = serve("/later");
  ASSERT_EQ(held.size(), 1u);
  clock.SuspendMicros(5'000'000);  // five leases long
  EXPECT_EQ(clock.MonotonicMicros(), kT0);
  EXPECT_FALSE(lead.SurelyLeads());
  held[0]->Complete(net::HttpResponse{.status = 200, .body = "{}"});
  ASSERT_TRUE(read->answered);
  EXPECT_EQ(read->answered->status, 503);
  auto after = serve("/v1/jobs/1");
  ASSERT_TRUE(after->answered);
  EXPECT_EQ(after->answered->status, 503);
  EXPECT_NE(after->answered->body.find("cannot be sure"), std::string::npos)
      << after->answered->body;
}

}  // namespace
}  // namespace gpupool::server
