#include "net/connection_table.h"

#include <algorithm>

namespace gpupool::net {

ConnectionTable::ConnectionTable(ConnectionLimits limits) : limits_(limits) {}

int64_t ConnectionTable::TransferDeadline(uint64_t bytes, int64_t now) const {
  const uint64_t capped = std::min<uint64_t>(bytes, uint64_t{1} << 40);  // no overflow
  const int64_t rate = std::max<int64_t>(limits_.min_bytes_per_s, 1);
  return now + limits_.transfer_floor_us +
         static_cast<int64_t>(capped * 1'000'000 / static_cast<uint64_t>(rate));
}

void ConnectionTable::SetDeadline(Conn& c, Id id, int64_t deadline) {
  if (c.deadline != 0) deadlines_.erase({c.deadline, id});
  c.deadline = deadline;
  if (deadline != 0) deadlines_.insert({deadline, id});
}

void ConnectionTable::Leave(Conn& c, Id id) {
  switch (c.share) {
    case Share::kPending: {
      pending_.erase(c.in_pending);
      Peer& p = peers_[c.peer];
      p.pending.erase(c.in_peer_pending);
      if (p.pending.empty() && p.active == 0) peers_.erase(c.peer);
      break;
    }
    case Share::kActive: {
      --active_;
      Peer& p = peers_[c.peer];
      --p.active;
      if (p.pending.empty() && p.active == 0) peers_.erase(c.peer);
      break;
    }
    case Share::kReserved:
      --reserved_;
      break;
    case Share::kNone:
      break;
  }
  (void)id;
  c.share = Share::kNone;
}

void ConnectionTable::MarkClosing(Id id, const std::string& why, std::vector<Close>* close) {
  Conn& c = conns_.at(id);
  Leave(c, id);
  SetDeadline(c, id, 0);
  close->push_back({id, c.phase, why});
  c.phase = Phase::kClosing;
}

void ConnectionTable::EnterPending(Conn& c, Id id, std::vector<Close>* close) {
  // Room first: the peer's oldest pending connection, else the oldest of all. (Closing
  // one may drop the peer's entry: it is looked up again each time.)
  const size_t peer_cap = std::max<size_t>(c.caps.pending, 1);
  for (auto p = peers_.find(c.peer); p != peers_.end() && p->second.pending.size() >= peer_cap;
       p = peers_.find(c.peer)) {
    MarkClosing(p->second.pending.front(),
                "too many connections from " + c.peer + " were open without a request (" +
                    std::to_string(peer_cap) + " at most): the oldest was closed to make room",
                close);
  }
  const size_t cap = std::max<size_t>(limits_.max_pending, 1);
  while (!pending_.empty() && pending_.size() >= cap) {
    MarkClosing(pending_.front(),
                "the server had too many connections open without a request (" +
                    std::to_string(cap) + " at most): the oldest was closed to make room",
                close);
  }
  Peer& p = peers_[c.peer];
  c.in_pending = pending_.insert(pending_.end(), id);
  c.in_peer_pending = p.pending.insert(p.pending.end(), id);
  c.share = Share::kPending;
}

bool ConnectionTable::Open(Id id, const std::string& peer, const PeerCaps& caps, bool reserved,
                           int64_t now, std::vector<Close>* close) {
  // Connections being closed still hold their descriptors until the server has closed
  // them: past every connection there is, a new one waits for none of them.
  if (conns_.size() >= limits_.max_connections || conns_.count(id) > 0) return false;
  Conn& c = conns_[id];
  c.peer = peer;
  c.caps = caps;
  c.reserved_peer = reserved;
  if (reserved) {
    c.share = Share::kReserved;
    ++reserved_;
  } else {
    EnterPending(c, id, close);
  }
  SetDeadline(c, id, now + limits_.head_timeout_us);
  return true;
}

std::string ConnectionTable::HeadArrived(Id id, ConnectionClass cls, uint64_t body_bytes,
                                         int64_t now) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.phase == Phase::kClosing) return "";
  Conn& c = it->second;
  c.phase = Phase::kBody;
  SetDeadline(c, id, TransferDeadline(body_bytes, now));
  if (c.share != Share::kPending) return "";
  if (cls == ConnectionClass::kAnonymous) return "";
  if (cls == ConnectionClass::kReserved) {
    Leave(c, id);
    c.share = Share::kReserved;
    ++reserved_;
    return "";
  }
  const size_t max_active = limits_.max_connections > limits_.reserved + limits_.max_pending
                                ? limits_.max_connections - limits_.reserved - limits_.max_pending
                                : 1;
  const size_t peer_active = active_of(c.peer);
  if (peer_active >= c.caps.active) {
    return "too many connections at once from " + c.peer + ": " + std::to_string(peer_active) +
           " with a request under way, the most allowed; wait for some to end" +
           (c.caps.active_setting.empty()
                ? std::string()
                : " (an admin raises the limit with " + c.caps.active_setting + ")");
  }
  if (active_ >= max_active) {
    return "the server has too many connections with a request under way (" +
           std::to_string(active_) + "): try again shortly";
  }
  Leave(c, id);
  c.share = Share::kActive;
  ++active_;
  ++peers_[c.peer].active;
  return "";
}

void ConnectionTable::HandlerRunning(Id id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.phase == Phase::kClosing) return;
  it->second.phase = Phase::kHandler;
  SetDeadline(it->second, id, 0);
}

void ConnectionTable::Answering(Id id, uint64_t bytes, int64_t now) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.phase == Phase::kClosing) return;
  it->second.phase = Phase::kAnswer;
  SetDeadline(it->second, id, TransferDeadline(bytes, now));
}

void ConnectionTable::RequestDone(Id id, int64_t now, std::vector<Close>* close) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.phase == Phase::kClosing) return;
  Conn& c = it->second;
  c.phase = Phase::kIdle;
  if (!c.reserved_peer) {
    Leave(c, id);
    EnterPending(c, id, close);
  }
  SetDeadline(c, id, now + limits_.idle_timeout_us);
}

void ConnectionTable::Closed(Id id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Leave(it->second, id);
  SetDeadline(it->second, id, 0);
  conns_.erase(it);
}

std::vector<ConnectionTable::Close> ConnectionTable::Expire(int64_t now) {
  std::vector<Close> out;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    MarkClosing(deadlines_.begin()->second, "", &out);
  }
  return out;
}

std::optional<int64_t> ConnectionTable::NextDeadline() const {
  if (deadlines_.empty()) return std::nullopt;
  return deadlines_.begin()->first;
}

size_t ConnectionTable::pending_of(const std::string& peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.pending.size();
}

size_t ConnectionTable::active_of(const std::string& peer) const {
  auto it = peers_.find(peer);
  return it == peers_.end() ? 0 : it->second.active;
}

size_t ConnectionTable::busy() const {
  size_t n = 0;
  for (const auto& [id, c] : conns_) {
    if (c.phase != Phase::kIdle && c.phase != Phase::kClosing) ++n;
  }
  return n;
}

std::optional<ConnectionTable::Phase> ConnectionTable::phase_of(Id id) const {
  auto it = conns_.find(id);
  if (it == conns_.end()) return std::nullopt;
  return it->second.phase;
}

}  // namespace gpupool::net
