// Leadership: several `gpupool server` processes on one PostgreSQL store, one leading.
//
// A controller starts as a standby: it says it is alive (LeaseStore::Heartbeat), learns
// who leads, and tries to take the lease as soon as it has expired. The one that takes it
// fences its store at the lease's epoch and from then on renews the lease every fifth of
// its time, while it loads the state (which may take longer than the lease) and serves.
// A leader that cannot renew in time, or finds the lease taken, has lost it: the daemon
// exits (systemd starts it again as a standby) rather than trust memory that another
// controller may have moved past. Standbys answer every request with 503 naming the
// leader (StandbyAnswer), which clients and agents follow. A leader serves only while it
// surely holds the lease (SurelyLeads, ServeWhileLeading): one that was paused past it
// answers as a standby does until its keeper finds the lease gone, rather than answer
// reads from memory another controller may have moved past.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/json.h"
#include "common/status.h"
#include "net/http.h"
#include "store/lease.h"

namespace gpupool::server {

struct LeadershipOptions {
  std::string id;           // this controller, unique per process start
  std::string address;      // its API, as clients and agents elsewhere should reach it
  int64_t lease_ms = 5000;  // --lease: how long a silent leader keeps the lease
};

class Leadership {
 public:
  // `leases` and `clock` must outlive this.
  Leadership(store::LeaseStore* leases, LeadershipOptions options, const Clock* clock);

  // As a standby until this controller holds the lease: returns its epoch, or nullopt
  // once `stop` is set (at once when Interrupt() follows the setting).
  std::optional<int64_t> WaitToLead(const std::atomic<bool>& stop);
  // One try (for `gpupool up`, which does not stand by): this controller's epoch when it
  // took the lease, else FailedPrecondition naming the controller that holds it.
  Result<int64_t> TryLead();

  // As the leader until `stop` (Ok) or until the lease is lost (why). Renews every fifth
  // of the lease; a renewal that fails for want of the database or of the lease row's
  // lock is retried every fiftieth of the lease (10-100 ms) until the lease would have
  // run out, and no renewal waits for the lock longer than the lease surely lasts; all
  // by boot time, so a keeper whose host slept past the lease gives it up when its wait
  // ends (the clock's monotonic deadline, at most a period after waking).
  // Unavailable when the lease ran out, FailedPrecondition when another took it.
  Status KeepLease(const std::atomic<bool>& stop);

  // Wakes WaitToLead and KeepLease to look at their `stop` at once: call it after
  // setting the flag. Any thread. Their waits are the clock's (Clock::WaitUntil), so
  // under a ManualClock they end only when a test advances time, or here.
  void Interrupt();

  // Gives the lease up (a clean stop), so that a standby takes over at once.
  void Release();
  // Stops trusting the lease without a word to the database (the leader lost it: a fenced
  // write found another epoch): SurelyLeads() is false from now on. Any thread.
  void Lapse();

  // Whether this controller surely holds the lease now: it took or last renewed it less
  // than nine tenths of lease_ms ago, by the clock's boot time (Clock::BootMicros, which
  // counts a suspended host's sleep, as the database's clock does) from when that request
  // was sent (the database set the lease's end after that moment). False before it leads,
  // once it released the lease, and after a pause (SIGSTOP, a frozen VM, a suspended
  // host) past that margin, until a renewal succeeds again. Any thread; lock-free.
  bool SurelyLeads() const;

  // The leader's address as last seen: "" when none is known, or when it is this
  // controller (still loading the state).
  std::string LeaderAddress() const;
  const LeadershipOptions& options() const { return options_; }

  // GET /v1/controllers: the lease and the controllers alive.
  Result<OrderedJson> Describe();

 private:
  void Remember(const store::Lease& lease);
  void Heartbeat();
  bool WaitUnlessStopped(int64_t ms, const std::atomic<bool>& stop);

  store::LeaseStore* leases_;
  const LeadershipOptions options_;
  const Clock* clock_;
  mutable std::mutex mu_;
  store::Lease last_;  // guarded by mu_
  // WaitUnlessStopped's wait; Interrupt notifies it under wait_mu_, so no wake-up is lost.
  std::mutex wait_mu_;
  std::condition_variable wait_cv_;
  int64_t epoch_ = 0;  // ours, once leading
  int64_t last_beat_us_ = 0;
  // Boot time until which the lease surely holds (see SurelyLeads); 0: not leading.
  std::atomic<int64_t> sure_until_us_ = 0;
};

// What a standby answers to `request`: /healthz 200 (it is alive); everything else 503
// with {"error": ..., "leader": ADDRESS} ("" while no leader is known), /readyz with
// "ok": false.
net::HttpResponse StandbyAnswer(const net::HttpRequest& request, const std::string& leader);

// What a leader answers when it no longer surely holds its lease (SurelyLeads): what a
// standby answers (/healthz 200, everything else 503 with {"error": ..., "leader":
// ADDRESS}, /readyz "ok": false), saying why, so that clients and agents move on.
net::HttpResponse LapsedLeaderAnswer(const net::HttpRequest& request, const std::string& leader);

// Serves `request` with `handler` only while `lead` surely holds the lease, else answers
// LapsedLeaderAnswer; a read (GET, HEAD) whose answer comes when the lease is no longer
// sure (a pause while it was under way) gets LapsedLeaderAnswer instead. Writes are
// fenced in the store, so their answers stand. `lead` must outlive the request.
void ServeWhileLeading(const Leadership& lead, const net::HttpRequest& request,
                       std::shared_ptr<net::HttpResponder> responder,
                       const net::HttpAsyncHandler& handler);

// A controller id: HOST:PORT:PID-RANDOM (unique per start).
std::string NewControllerId(const std::string& host, int port);

}  // namespace gpupool::server
