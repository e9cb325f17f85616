#include "server/leadership.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <utility>

namespace gpupool::server {
namespace {

constexpr int64_t kHeartbeatUs = 1'000'000;    // controllers say they are alive this often
constexpr int64_t kControllerSeenMs = 15'000;  // listed while seen this recently

// The part of the lease a holder trusts, in µs after the request that took or renewed it
// was sent: nine tenths, a tenth kept back for the clocks' drift and the exit.
int64_t SureUs(int64_t lease_ms) { return lease_ms * 900; }

// Passes a read's answer on only while the lease is still sure (ServeWhileLeading).
class LeaseCheckedResponder final : public net::HttpResponder {
 public:
  LeaseCheckedResponder(const Leadership& lead, net::HttpRequest request,
                        std::shared_ptr<net::HttpResponder> out)
      : lead_(lead), request_(std::move(request)), out_(std::move(out)) {}
  bool Complete(net::HttpResponse response) override {
    if (!lead_.SurelyLeads()) {
      return out_->Complete(LapsedLeaderAnswer(request_, lead_.LeaderAddress()));
    }
    return out_->Complete(std::move(response));
  }
  void OnAbandoned(std::function<void()> fn) override { out_->OnAbandoned(std::move(fn)); }

 private:
  const Leadership& lead_;
  const net::HttpRequest request_;  // its method and path
  const std::shared_ptr<net::HttpResponder> out_;
};

}  // namespace

Leadership::Leadership(store::LeaseStore* leases, LeadershipOptions options, const Clock* clock)
    : leases_(leases), options_(std::move(options)), clock_(clock) {}

// The lease's time is boot time, a wait's deadline monotonic time (no clock waits on
// CLOCK_BOOTTIME): the two run together while the host is awake, so the wait ends when
// `ms` of boot time have passed; after a suspend it ends late (by at most what was left
// of it), and the caller's look at boot time finds the lease's times already past.
bool Leadership::WaitUnlessStopped(int64_t ms, const std::atomic<bool>& stop) {
  const int64_t until = clock_->BootMicros() + ms * 1000;
  std::unique_lock lock(wait_mu_);
  while (!stop) {
    const int64_t left_us = until - clock_->BootMicros();
    if (left_us <= 0) return true;
    clock_->WaitFor(wait_cv_, lock, left_us, [&stop] { return stop.load(); });
  }
  return false;
}

void Leadership::Interrupt() {
  std::lock_guard lock(wait_mu_);
  wait_cv_.notify_all();
}

void Leadership::Remember(const store::Lease& lease) {
  std::lock_guard lock(mu_);
  last_ = lease;
}

void Leadership::Heartbeat() {
  const int64_t now = clock_->MonotonicMicros();
  if (last_beat_us_ != 0 && now - last_beat_us_ < kHeartbeatUs) return;
  last_beat_us_ = now;
  if (Status s = leases_->Heartbeat(options_.id, options_.address); !s.ok()) {
    spdlog::warn("leadership: cannot record this controller as alive: {}", s.message());
  }
}

std::optional<int64_t> Leadership::WaitToLead(const std::atomic<bool>& stop) {
  // Standbys look often, so that a takeover follows the lease's end closely.
  const int64_t poll_ms = std::clamp<int64_t>(options_.lease_ms / 20, 50, 500);
  std::string shown;  // the leader last logged
  while (!stop) {
    Heartbeat();
    const int64_t sent = clock_->BootMicros();
    Result<store::Lease> lease =
        leases_->TryAcquire(options_.id, options_.address, options_.lease_ms);
    if (!lease.ok()) {
      spdlog::warn("leadership: cannot reach the lease: {}", lease.status().message());
    } else {
      Remember(*lease);
      if (lease->holder == options_.id) {
        epoch_ = lease->epoch;
        sure_until_us_ = sent + SureUs(options_.lease_ms);
        spdlog::info("leadership: this controller ({}) leads at epoch {}", options_.id, epoch_);
        return epoch_;
      }
      if (lease->holder != shown) {
        shown = lease->holder;
        spdlog::info("leadership: standby; controller {} at {} leads (epoch {})", lease->holder,
                     lease->address, lease->epoch);
      }
    }
    WaitUnlessStopped(poll_ms, stop);
  }
  return std::nullopt;
}

Result<int64_t> Leadership::TryLead() {
  Heartbeat();
  const int64_t sent = clock_->BootMicros();
  GP_ASSIGN_OR_RETURN(store::Lease lease,
                      leases_->TryAcquire(options_.id, options_.address, options_.lease_ms));
  Remember(lease);
  if (lease.holder != options_.id) {
    return Status::FailedPrecondition("controller " + lease.holder + " at " + lease.address +
                                      " leads this PostgreSQL store (epoch " +
                                      std::to_string(lease.epoch) + ")");
  }
  epoch_ = lease.epoch;
  sure_until_us_ = sent + SureUs(options_.lease_ms);
  spdlog::info("leadership: this controller ({}) leads at epoch {}", options_.id, epoch_);
  return epoch_;
}

Status Leadership::KeepLease(const std::atomic<bool>& stop) {
  const int64_t period_ms = std::max<int64_t>(options_.lease_ms / 5, 20);
  // After a failed renewal the next try comes sooner than a period, so that several fit in
  // what is left of the lease.
  const int64_t retry_ms = std::clamp<int64_t>(options_.lease_ms / 50, 10, 100);
  // The lease holds until lease_ms after the start of the last renewal that succeeded
  // (the database set its end after that moment). A tenth is kept back for the exit.
  // Every time here is boot time, which goes on while the host is suspended, as the
  // database's does.
  const int64_t now = clock_->BootMicros();
  int64_t good_until_us = now + SureUs(options_.lease_ms);
  // The first renewal comes when the lease is as sure as a period after a renewal, at
  // once when the time since it was taken ate that much of it, so that a leader serves on.
  const int64_t sure_left_ms = (sure_until_us_ - now) / 1000;
  int64_t wait_ms = std::clamp<int64_t>(
      sure_left_ms - (SureUs(options_.lease_ms) / 1000 - period_ms), 0, period_ms);
  std::string failed;  // why the last renewal failed, since the last that succeeded
  auto lost = [&] {
    return Status::Unavailable(
        "the lease could not be renewed for " + std::to_string(options_.lease_ms) +
        " ms, so a standby may lead now: " +
        (failed.empty() ? "this controller was paused or its host suspended past it" : failed));
  };
  while (WaitUnlessStopped(wait_ms, stop)) {
    // The deadline before any call to the database: a keeper woken past the lease (a
    // suspended host, SIGSTOP) gives it up at once, rather than first wait on a
    // connection the pause may have left dead (the heartbeat's, the renewal's).
    if (clock_->BootMicros() >= good_until_us) {
      sure_until_us_ = 0;
      return lost();
    }
    Heartbeat();
    const int64_t started = clock_->BootMicros();
    // A renewal waits for the lease row's lock no longer than the lease surely lasts, so
    // that a leader never goes on past it waiting for an answer (the heartbeat may have
    // taken some of it).
    const int64_t left_ms = (good_until_us - started) / 1000;
    if (left_ms <= 0) {
      sure_until_us_ = 0;
      return lost();
    }
    Result<store::Lease> lease = leases_->Renew(options_.id, epoch_, options_.lease_ms, left_ms);
    if (lease.ok()) {
      Remember(*lease);
      good_until_us = started + SureUs(options_.lease_ms);
      sure_until_us_ = good_until_us;
      wait_ms = period_ms;
      failed.clear();
      continue;
    }
    if (lease.status().code() == StatusCode::kFailedPrecondition) {
      sure_until_us_ = 0;
      return lease.status();
    }
    failed = lease.status().message();
    if (clock_->BootMicros() >= good_until_us) {
      sure_until_us_ = 0;
      return lost();
    }
    spdlog::warn("leadership: renewing the lease failed, retrying in {} ms: {}", retry_ms, failed);
    wait_ms = retry_ms;
  }
  return Status::Ok();
}

void Leadership::Release() {
  if (epoch_ == 0) return;
  sure_until_us_ = 0;
  if (Status s = leases_->Release(options_.id, epoch_); !s.ok()) {
    spdlog::warn(
        "leadership: could not give the lease up (a standby takes over when it "
        "expires): {}",
        s.message());
  }
}

void Leadership::Lapse() { sure_until_us_ = 0; }

bool Leadership::SurelyLeads() const {
  const int64_t until = sure_until_us_.load();
  return until != 0 && clock_->BootMicros() < until;
}

std::string Leadership::LeaderAddress() const {
  std::lock_guard lock(mu_);
  if (!last_.Live() || last_.holder == options_.id) return "";
  return last_.address;
}

Result<OrderedJson> Leadership::Describe() {
  GP_ASSIGN_OR_RETURN(store::Lease lease, leases_->Read());
  GP_ASSIGN_OR_RETURN(std::vector<store::ControllerRecord> alive,
                      leases_->ListControllers(kControllerSeenMs));
  OrderedJson out = OrderedJson::object();
  if (lease.Live()) {
    out["leader"] = {{"id", lease.holder},
                     {"address", lease.address},
                     {"epoch", lease.epoch},
                     {"expires_in_ms", lease.expires_in_ms}};
  } else {
    out["leader"] = nullptr;
  }
  out["lease_ms"] = options_.lease_ms;
  out["answered_by"] = options_.id;
  OrderedJson list = OrderedJson::array();
  for (const store::ControllerRecord& c : alive) {
    list.push_back({{"id", c.id},
                    {"address", c.address},
                    {"role", lease.Live() && c.id == lease.holder ? "leader" : "standby"},
                    {"seen_ms_ago", c.seen_ms_ago},
                    {"started_ms_ago", c.started_ms_ago}});
  }
  out["controllers"] = std::move(list);
  return out;
}

namespace {

// A controller that does not lead (now): /healthz 200, everything else 503 naming the
// leader, /readyz with "ok": false; `role` and `why` say which kind.
net::HttpResponse NotLeadingAnswer(const net::HttpRequest& request, const std::string& leader,
                                   const char* role, const std::string& why) {
  net::HttpResponse r;
  r.content_type = "application/json";
  const std::string where = leader.empty()
                                ? "no controller leads at the moment (a takeover is under way): "
                                  "try again in a few seconds"
                                : "the leader is " + leader;
  if (request.method == "GET" && request.path == "/healthz") {
    r.status = 200;
    r.body = DumpJson(OrderedJson{{"ok", true}, {"role", role}, {"leader", leader}});
    return r;
  }
  r.status = 503;
  OrderedJson body = {{"error", why + "; " + where}, {"leader", leader}};
  if (request.method == "GET" && request.path == "/readyz") {
    body = {{"ok", false}, {"role", role}, {"leader", leader}, {"problems", {why + "; " + where}}};
  }
  r.body = DumpJson(body);
  return r;
}

}  // namespace

net::HttpResponse StandbyAnswer(const net::HttpRequest& request, const std::string& leader) {
  return NotLeadingAnswer(request, leader, "standby", "this controller is a standby");
}

net::HttpResponse LapsedLeaderAnswer(const net::HttpRequest& request, const std::string& leader) {
  return NotLeadingAnswer(request, leader, "lapsed",
                          "this controller led but cannot be sure that it still holds the "
                          "lease (it was paused or cut off from the database)");
}

void ServeWhileLeading(const Leadership& lead, const net::HttpRequest& request,
                       std::shared_ptr<net::HttpResponder> responder,
                       const net::HttpAsyncHandler& handler) {
  if (!lead.SurelyLeads()) {
    responder->Complete(LapsedLeaderAnswer(request, lead.LeaderAddress()));
    return;
  }
  if (request.method != "GET" && request.method != "HEAD") return handler(request, responder);
  // Only the method and path are kept for the answer: not a large body.
  net::HttpRequest head;
  head.method = request.method;
  head.path = request.path;
  handler(request,
          std::make_shared<LeaseCheckedResponder>(lead, std::move(head), std::move(responder)));
}

std::string NewControllerId(const std::string& host, int port) {
  std::random_device rd;
  const unsigned suffix = rd() & 0xffffu;
  char tail[16];
  std::snprintf(tail, sizeof tail, "%04x", suffix);
  return host + ":" + std::to_string(port) + ":" + std::to_string(::getpid()) + "-" + tail;
}

}  // namespace gpupool::server
