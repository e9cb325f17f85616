// GroupCommit: group commit of items handed in from many threads (issue 31: the agents'
// event batches, Controller::ApplyEvents). At most one flush runs at a time; the items
// that arrive while it runs wait, and the next flush carries all of them together, in
// the order they arrived, on the thread of one of them (no thread of its own). Submit
// returns its own item's answer once the flush that carried it has returned: for a
// store write, once that item is durable.
//
// `flush` gets the items of one group and returns one answer per item, in order; it runs
// with no lock of this class held. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace gpupool::controller {

template <class Item, class Answer>
class GroupCommit {
 public:
  using Flush = std::function<std::vector<Answer>(std::vector<Item>)>;

  explicit GroupCommit(Flush flush) : flush_(std::move(flush)) {}

  Answer Submit(Item item) {
    Waiter self{std::move(item), std::nullopt};
    std::unique_lock lock(mu_);
    queue_.push_back(&self);
    cv_.notify_all();
    cv_.wait(lock, [&] { return self.answer.has_value() || !flushing_; });
    if (self.answer) return std::move(*self.answer);
    // No flush runs and this item waits: this thread flushes every waiting one.
    flushing_ = true;
    std::vector<Waiter*> group;
    group.swap(queue_);
    lock.unlock();
    std::vector<Item> items;
    items.reserve(group.size());
    for (Waiter* w : group) items.push_back(std::move(w->item));
    std::vector<Answer> answers = flush_(std::move(items));
    lock.lock();
    for (size_t i = 0; i < group.size(); ++i) group[i]->answer.emplace(std::move(answers[i]));
    flushing_ = false;
    ++flushes_;
    cv_.notify_all();
    return std::move(*self.answer);
  }

  // Tests: the items waiting for a flush (not the ones a running flush carries), a wait
  // until `n` of them wait, and the flushes so far.
  size_t waiting() {
    std::lock_guard lock(mu_);
    return queue_.size();
  }
  void WaitUntilWaiting(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return queue_.size() >= n; });
  }
  uint64_t flushes() {
    std::lock_guard lock(mu_);
    return flushes_;
  }

 private:
  struct Waiter {
    Item item;
    std::optional<Answer> answer;
  };

  const Flush flush_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Waiter*> queue_;  // on their threads' stacks, until answered
  bool flushing_ = false;
  uint64_t flushes_ = 0;
};

}  // namespace gpupool::controller
