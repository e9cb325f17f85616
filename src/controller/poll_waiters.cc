#include "controller/poll_waiters.h"

#include <algorithm>

namespace gpupool::controller {

uint64_t PollWaiters::Add(std::string node, int64_t deadline_us, int64_t due_us, Callback done) {
  const uint64_t ticket = ++next_ticket_;
  due_us = std::min(due_us, deadline_us);
  by_node_.emplace(node, ticket);
  by_due_.insert({due_us, ticket});
  waiters_.emplace(ticket, Waiter{std::move(node), deadline_us, due_us, std::move(done)});
  return ticket;
}

std::optional<PollWaiters::Waiter> PollWaiters::Remove(uint64_t ticket) {
  auto it = waiters_.find(ticket);
  if (it == waiters_.end()) return std::nullopt;
  Waiter w = std::move(it->second);
  waiters_.erase(it);
  by_due_.erase({w.due_us, ticket});
  for (auto [b, e] = by_node_.equal_range(w.node); b != e; ++b) {
    if (b->second == ticket) {
      by_node_.erase(b);
      break;
    }
  }
  return w;
}

void PollWaiters::Reschedule(uint64_t ticket, int64_t due_us) {
  auto it = waiters_.find(ticket);
  if (it == waiters_.end()) return;
  by_due_.erase({it->second.due_us, ticket});
  it->second.due_us = std::min(due_us, it->second.deadline_us);
  by_due_.insert({it->second.due_us, ticket});
}

void PollWaiters::MarkDirty(const std::string& node) {
  if (!all_dirty_ && by_node_.count(node) > 0) dirty_nodes_.insert(node);
}

std::vector<uint64_t> PollWaiters::TakeDue(int64_t now_us) {
  std::vector<uint64_t> out;
  if (all_dirty_) {
    out = All();
  } else {
    for (const std::string& node : dirty_nodes_) {
      for (auto [b, e] = by_node_.equal_range(node); b != e; ++b) out.push_back(b->second);
    }
    for (auto it = by_due_.begin(); it != by_due_.end() && it->first <= now_us; ++it) {
      out.push_back(it->second);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  all_dirty_ = false;
  dirty_nodes_.clear();
  return out;
}

std::vector<uint64_t> PollWaiters::All() const {
  std::vector<uint64_t> out;
  out.reserve(waiters_.size());
  for (const auto& [ticket, w] : waiters_) out.push_back(ticket);
  std::sort(out.begin(), out.end());  // oldest first
  return out;
}

const PollWaiters::Waiter* PollWaiters::Find(uint64_t ticket) const {
  auto it = waiters_.find(ticket);
  return it == waiters_.end() ? nullptr : &it->second;
}

std::optional<int64_t> PollWaiters::NextDue() const {
  if (by_due_.empty()) return std::nullopt;
  return by_due_.begin()->first;
}

}  // namespace gpupool::controller
