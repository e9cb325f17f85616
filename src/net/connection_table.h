// ConnectionTable: the HTTP server's book of open connections, which decides which may
// stay open (docs/security.md, "Connection exhaustion"). Pure bookkeeping: no sockets, no
// locks (the server holds one around every call), time passed in (microseconds of a
// monotonic clock), so that its rules are tested without sockets or waits.
//
// Every connection belongs to a peer (a uid on the Unix socket, an address over TCP) and
// to one of three shares of `max_connections`:
//   - reserved: agents (a request head with a node token) and the reserved uids (root and
//     the server's own, which is the local agent of `gpupool up`): they may use every
//     connection, and `reserved` of them no one else may;
//   - pending: connections that have not shown who they are for the request at hand (no
//     head yet, between two requests, or a head without valid credentials). At most
//     `max_pending` in all and each peer's pending cap; a new one past either closes the
//     oldest (the peer's own first), so holding half-sent requests buys an attacker
//     nothing and a fresh connection, whose head arrives at once, always finds room;
//   - active: connections of known callers with a request under way, at most each peer's
//     active cap and the rest of the connections in all; a head past either is refused
//     (the server answers 503 saying which cap and closes).
// And every connection in a phase but that of its handler (which the server's own limits
// bound) has a deadline that bytes do not move: the whole head within head_timeout of
// accept, the body and the answer within transfer_floor plus their size at
// min_bytes_per_s, the next request's head within idle_timeout of the last answer.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gpupool::net {

// What a request head shows of its caller, for the shares above.
enum class ConnectionClass {
  kAnonymous,  // no valid credentials (yet): stays pending
  kUser,       // a known caller (a uid on the socket, a user or metrics token): active
  kReserved,   // an agent (a node token): reserved
};

struct PeerCaps {
  size_t pending = 64;         // connections of one peer that are pending (see above)
  size_t active = 256;         // connections of one peer with a known caller's request under way
  std::string active_setting;  // the setting that raises `active`, for the refusal
};

struct ConnectionLimits {
  size_t max_connections = 1000;  // every listener together
  size_t reserved = 250;          // of those, for reserved connections only
  size_t max_pending = 375;       // pending ones in all; active ones get the rest
  int64_t head_timeout_us = 10'000'000;
  int64_t idle_timeout_us = 5'000'000;
  int64_t transfer_floor_us = 10'000'000;
  int64_t min_bytes_per_s = int64_t{16} * 1024;
};

class ConnectionTable {
 public:
  using Id = uint64_t;
  enum class Phase { kHead, kBody, kHandler, kAnswer, kIdle, kClosing };

  // A connection the server must close now, and why (for the words it may send first).
  struct Close {
    Id id = 0;
    Phase phase = Phase::kHead;  // the phase it was in
    std::string why;             // "" when it timed out; else why it was chosen
  };

  explicit ConnectionTable(ConnectionLimits limits);

  // A connection accepted from `peer` (a label for messages, "uid 1000" or "10.0.0.7"),
  // reserved from the start when its peer is a reserved uid. Appends to `*close` those to
  // close to make room. False: no room at all (every connection is in use); close it.
  bool Open(Id id, const std::string& peer, const PeerCaps& caps, bool reserved, int64_t now,
            std::vector<Close>* close);

  // Its request's head arrived, with `body_bytes` to come. Returns "" to go on, or why the
  // request is refused (the peer's or the server's cap on active connections): the server
  // answers 503 with it and closes.
  std::string HeadArrived(Id id, ConnectionClass cls, uint64_t body_bytes, int64_t now);
  void HandlerRunning(Id id);                          // no deadline while it runs
  void Answering(Id id, uint64_t bytes, int64_t now);  // its answer is being sent
  // The request is over; the connection waits for the next one (pending again unless its
  // peer is a reserved uid).
  void RequestDone(Id id, int64_t now, std::vector<Close>* close);
  // Gone (the server closed it, or the peer did): forgotten.
  void Closed(Id id);

  // Those whose deadline is at or before `now`, now closing.
  std::vector<Close> Expire(int64_t now);
  // The earliest deadline, if any.
  std::optional<int64_t> NextDeadline() const;

  // For tests and the server's log.
  size_t open() const { return conns_.size(); }  // closing ones included
  size_t pending() const { return pending_.size(); }
  size_t active() const { return active_; }
  size_t reserved_in_use() const { return reserved_; }
  size_t pending_of(const std::string& peer) const;
  size_t active_of(const std::string& peer) const;
  std::optional<Phase> phase_of(Id id) const;
  // Those with a request under way: its head or body arriving (a new connection's
  // included), its handler running, its answer going out. Counts every connection.
  size_t busy() const;
  const ConnectionLimits& limits() const { return limits_; }

 private:
  enum class Share { kPending, kActive, kReserved, kNone };
  struct Conn {
    std::string peer;
    PeerCaps caps;
    bool reserved_peer = false;  // a reserved uid: reserved for its whole life
    Share share = Share::kNone;
    Phase phase = Phase::kHead;
    int64_t deadline = 0;  // 0: none
    std::list<Id>::iterator in_pending;
    std::list<Id>::iterator in_peer_pending;
  };
  struct Peer {
    std::list<Id> pending;  // oldest first
    size_t active = 0;
  };

  void SetDeadline(Conn& c, Id id, int64_t deadline);
  void Leave(Conn& c, Id id);  // out of its share
  void EnterPending(Conn& c, Id id, std::vector<Close>* close);
  void MarkClosing(Id id, const std::string& why, std::vector<Close>* close);
  int64_t TransferDeadline(uint64_t bytes, int64_t now) const;

  ConnectionLimits limits_;
  std::unordered_map<Id, Conn> conns_;
  std::map<std::string, Peer> peers_;
  std::list<Id> pending_;  // oldest first
  size_t active_ = 0;
  size_t reserved_ = 0;
  std::set<std::pair<int64_t, Id>> deadlines_;
};

}  // namespace gpupool::net
