// PollWaiters: the agents' long polls waiting for work without a thread each
// (Controller::AwaitWork, issue 31): by ticket, by node, and by when each is next due
// (its deadline, or the time to resend orders not acknowledged) in one ordered set, so
// that one thread serves them all. Notifications mark nodes (or all of them) dirty; the
// serving thread takes the waiters of dirty nodes and those due, looks for their work,
// and answers or puts them back. Pure bookkeeping, not thread-safe: the controller's lock
// guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace gpupool::controller {

class PollWaiters {
 public:
  using Callback = std::function<void(Result<protocol::Work>)>;
  struct Waiter {
    std::string node;
    int64_t deadline_us = 0;  // monotonic: answered then, work or not
    int64_t due_us = 0;       // monotonic: looked at again then (<= deadline_us)
    Callback done;
  };

  // Files a waiter; returns its ticket (never 0).
  uint64_t Add(std::string node, int64_t deadline_us, int64_t due_us, Callback done);
  // Takes the waiter out (it will not be served); nullopt when it is gone already.
  std::optional<Waiter> Remove(uint64_t ticket);
  // Looks at it again at `due_us` (not after its deadline).
  void Reschedule(uint64_t ticket, int64_t due_us);

  // Something for `node`'s agent (or for any agent) may have come.
  void MarkDirty(const std::string& node);
  void MarkAllDirty() { all_dirty_ = true; }
  bool dirty() const { return all_dirty_ || !dirty_nodes_.empty(); }

  // The tickets to look at now: those of the dirty nodes (all, when all are dirty) and
  // those due by `now_us`, each once. Clears the dirty marks.
  std::vector<uint64_t> TakeDue(int64_t now_us);
  // Every ticket (the controller stops: each is answered).
  std::vector<uint64_t> All() const;
  const Waiter* Find(uint64_t ticket) const;

  // When the next waiter is due; nullopt when none waits.
  std::optional<int64_t> NextDue() const;
  size_t size() const { return waiters_.size(); }

 private:
  uint64_t next_ticket_ = 0;
  std::unordered_map<uint64_t, Waiter> waiters_;
  std::multimap<std::string, uint64_t> by_node_;
  std::set<std::pair<int64_t, uint64_t>> by_due_;  // (due_us, ticket): a min-heap
  std::set<std::string> dirty_nodes_;
  bool all_dirty_ = false;
};

}  // namespace gpupool::controller
