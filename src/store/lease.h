// Leadership among several controllers that share one PostgreSQL database.
//
// One row holds the lease: who holds it, the address clients should use for it, an
// epoch that grows by one whenever the holder changes, and when it expires by the
// database's clock (so controllers' clocks never need to agree). A standby takes the
// lease only once it has expired; the leader renews it well before. Every write of the
// leader's store is fenced by its epoch (Store::SetFence): a leader that was paused or cut
// off past its lease, and was replaced, can write nothing when it wakes up.
//
// A LeaseStore has a connection of its own, so that renewals never queue behind the
// controller's store writes, and the lock that fenced writes take on the lease row (KEY
// SHARE) does not conflict with a renewal, only with a takeover. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::store {

struct Lease {
  std::string holder;         // the controller id; "" when never held
  std::string address;        // the holder's API address, as clients should use it
  int64_t epoch = 0;          // 0 when never held
  int64_t expires_in_ms = 0;  // by the database's clock; <= 0: expired
  bool Live() const { return !holder.empty() && expires_in_ms > 0; }
};

// A controller that said it is alive (leader or standby), for `gpupool status`.
struct ControllerRecord {
  std::string id;
  std::string address;
  int64_t seen_ms_ago = 0;     // since its last heartbeat, by the database's clock
  int64_t started_ms_ago = 0;  // since its first
};

class LeaseStore {
 public:
  virtual ~LeaseStore() = default;

  // Takes the lease for `holder` when it has expired (or was never held): the epoch grows
  // by one and the lease lasts `ttl_ms`. Returns the lease as it stands afterwards, which
  // names another holder when it was not free.
  virtual Result<Lease> TryAcquire(const std::string& holder, const std::string& address,
                                   int64_t ttl_ms) = 0;
  // Extends the lease of `holder` at `epoch` to `ttl_ms` from now, waiting at most
  // `wait_ms` (at least 1) for the lease row's lock (a takeover in progress holds it; the
  // holder's own fenced writes never do). FailedPrecondition when the lease has another
  // holder or epoch now (it was lost); Unavailable when the database cannot be reached;
  // another error (Internal) when the lock was not had in time: the caller may try again
  // while its lease lasts.
  virtual Result<Lease> Renew(const std::string& holder, int64_t epoch, int64_t ttl_ms,
                              int64_t wait_ms) = 0;
  virtual Result<Lease> Read() = 0;
  // Ends the lease of `holder` at `epoch` at once (a clean stop), so that a standby does
  // not wait out its time. Nothing when it was lost already.
  virtual Status Release(const std::string& holder, int64_t epoch) = 0;

  // Records that controller `id` is alive and reachable at `address`.
  virtual Status Heartbeat(const std::string& id, const std::string& address) = 0;
  // Controllers whose last heartbeat is at most `within_ms` old, by id.
  virtual Result<std::vector<ControllerRecord>> ListControllers(int64_t within_ms) = 0;
};

// A LeaseStore on the PostgreSQL database `conninfo` (its schema comes from
// OpenPostgresStore, which must have run first).
Result<std::unique_ptr<LeaseStore>> OpenPostgresLeaseStore(const std::string& conninfo);

}  // namespace gpupool::store
