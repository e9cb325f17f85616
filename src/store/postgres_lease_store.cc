// The leader lease over PostgreSQL (lease.h): one row, its times taken from the
// database's clock, on a connection of its own whose statements give up rather than wait
// behind a stalled writer.
#include <libpq-fe.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include "store/lease.h"
#include "store/pg_session.h"
#include "store/postgres_store.h"

namespace gpupool::store {
namespace {

using internal::Connect;
using internal::Params;
using internal::PgResult;
using internal::PgSession;

// The lease's statements compute times with the database's clock (clock_timestamp(), not
// the transaction's now()); `ms_left` is what remains of the lease.
constexpr const char* kLeaseColumns =
    "holder, address, epoch, "
    "CEIL(EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000)::BIGINT";

class PostgresLeaseStore final : public LeaseStore, private PgSession {
 public:
  using PgSession::PgSession;

  Result<Lease> TryAcquire(const std::string& holder, const std::string& address,
                           int64_t ttl_ms) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    // One transaction, one round trip. The expired row is locked FOR UPDATE first: that
    // mode conflicts with the KEY SHARE lock every fenced write of the old leader holds
    // (postgres_store.cc, AddFenceCheck), so the takeover waits for those writes to end,
    // and writes after it find the new epoch. The UPDATE alone would take FOR NO KEY
    // UPDATE, which does not wait for them. A lease renewed while this waited is no longer
    // expired when the lock is granted (the row is read again), and nothing is taken.
    GP_ASSIGN_OR_RETURN(
        Batch b,
        Pipeline({{"SELECT 1 FROM leader_lease WHERE id=1 AND expires_at <= clock_timestamp() "
                   "FOR UPDATE",
                   {}},
                  {std::string("UPDATE leader_lease SET holder=$1, address=$2, epoch=epoch+1, "
                               "acquired_at=clock_timestamp(), expires_at=clock_timestamp() + "
                               "$3 * INTERVAL '1 millisecond' WHERE id=1 AND expires_at <= "
                               "clock_timestamp() RETURNING ") +
                       kLeaseColumns,
                   {holder, address, std::to_string(ttl_ms)}}},
                 "take the lease"));
    if (b.failed != Batch::kAllRan) return Error(b.results[b.failed], "take the lease");
    if (b.results[1].Rows() == 1) return LeaseOf(b.results[1]);
    return ReadLocked();
  }

  Result<Lease> Renew(const std::string& holder, int64_t epoch, int64_t ttl_ms,
                      int64_t wait_ms) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    // Only the lease's end changes (FOR NO KEY UPDATE): no conflict with the KEY SHARE
    // locks of the holder's fenced writes. The lock wait is this call's (set_config local
    // to the transaction: lock_timeout is read when a wait begins), so that a renewal
    // never waits past what is left of the lease.
    GP_ASSIGN_OR_RETURN(
        Batch b,
        Pipeline({{"SELECT set_config('lock_timeout', $1, true)",
                   {std::to_string(std::max<int64_t>(wait_ms, 1))}},
                  {std::string("UPDATE leader_lease SET expires_at=clock_timestamp() + $3 * "
                               "INTERVAL '1 millisecond' WHERE id=1 AND holder=$1 AND "
                               "epoch=$2 RETURNING ") +
                       kLeaseColumns,
                   {holder, std::to_string(epoch), std::to_string(ttl_ms)}}},
                 "renew the lease"));
    if (b.failed != Batch::kAllRan) return Error(b.results[b.failed], "renew the lease");
    if (const PgResult& r = b.results[1]; r.Rows() == 1) return LeaseOf(r);
    GP_ASSIGN_OR_RETURN(Lease now, ReadLocked());
    return Status::FailedPrecondition("the lease was lost: controller " + now.holder +
                                      " holds it at epoch " + std::to_string(now.epoch) +
                                      ", not this one at epoch " + std::to_string(epoch));
  }

  Result<Lease> Read() override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return ReadLocked();
  }

  Status Release(const std::string& holder, int64_t epoch) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    return Run("UPDATE leader_lease SET expires_at=clock_timestamp() WHERE id=1 AND holder=$1 "
               "AND epoch=$2",
               {holder, std::to_string(epoch)}, "release the lease")
        .status();
  }

  Status Heartbeat(const std::string& id, const std::string& address) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    // Controllers gone for a day are forgotten.
    GP_RETURN_IF_ERROR(Run("DELETE FROM controllers WHERE last_seen < clock_timestamp() - "
                           "INTERVAL '1 day'",
                           {}, "forget old controllers")
                           .status());
    return Run("INSERT INTO controllers(id, address, started_at, last_seen) VALUES($1,$2,"
               "clock_timestamp(),clock_timestamp()) ON CONFLICT(id) DO UPDATE SET "
               "address=EXCLUDED.address, last_seen=EXCLUDED.last_seen",
               {id, address}, "record this controller")
        .status();
  }

  Result<std::vector<ControllerRecord>> ListControllers(int64_t within_ms) override {
    std::lock_guard lock(mu_);
    GP_RETURN_IF_ERROR(Connected());
    GP_ASSIGN_OR_RETURN(
        PgResult r,
        Run("SELECT id, address, (EXTRACT(EPOCH FROM (clock_timestamp() - last_seen)) * "
            "1000)::BIGINT, (EXTRACT(EPOCH FROM (clock_timestamp() - started_at)) * 1000)::BIGINT "
            "FROM controllers WHERE last_seen >= clock_timestamp() - $1 * INTERVAL '1 "
            "millisecond' ORDER BY id",
            {std::to_string(within_ms)}, "list controllers"));
    std::vector<ControllerRecord> out;
    out.reserve(static_cast<size_t>(r.Rows()));
    for (int i = 0; i < r.Rows(); ++i) {
      out.push_back({r.Text(i, 0), r.Text(i, 1), r.Int(i, 2), r.Int(i, 3)});
    }
    return out;
  }

 private:
  static Lease LeaseOf(const PgResult& r) {
    return {r.Text(0, 0), r.Text(0, 1), r.Int(0, 2), r.Int(0, 3)};
  }
  Result<Lease> ReadLocked() {
    GP_ASSIGN_OR_RETURN(
        PgResult r, Run(std::string("SELECT ") + kLeaseColumns + " FROM leader_lease WHERE id=1",
                        {}, "read the lease"));
    if (r.Rows() == 0) {
      return Status::FailedPrecondition(
          "the store has no lease row: open it with a gpupool server of this version first");
    }
    return LeaseOf(r);
  }

  std::mutex mu_;
};

// The lease's statements give up rather than wait behind such a writer for long.
constexpr const char* kLeaseSessionOptions =
    "-c lock_timeout=2000 -c statement_timeout=4000 -c idle_in_transaction_session_timeout=3000";

}  // namespace

Result<std::unique_ptr<LeaseStore>> OpenPostgresLeaseStore(const std::string& conninfo) {
  const std::string target = RedactConninfo(conninfo);
  GP_ASSIGN_OR_RETURN(PGconn * conn, Connect(conninfo, target, kLeaseSessionOptions));
  return std::unique_ptr<LeaseStore>(std::make_unique<PostgresLeaseStore>(conn, target));
}

}  // namespace gpupool::store
