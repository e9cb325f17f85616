// fifo, priority and sjf: orders by a key of each job alone. Ties keep arrival order
// (the order of ctx.pending), so every order is total and deterministic.
#include <algorithm>
#include <numeric>
#include <tuple>

#include "sched/queue/queue_policy_registry.h"

namespace gpupool::sched {
namespace {

template <typename Less>
std::vector<size_t> StableOrder(const QueueContext& ctx, Less less) {
  std::vector<size_t> order(ctx.pending.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return less(*ctx.pending[a], *ctx.pending[b]); });
  return order;
}

class FifoQueuePolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "fifo"; }
  std::vector<size_t> Order(const QueueContext& ctx) const override {
    return StableOrder(
        ctx, [](const QueuedJob& a, const QueuedJob& b) { return a.submit_s < b.submit_s; });
  }
};

class PriorityQueuePolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "priority"; }
  std::vector<size_t> Order(const QueueContext& ctx) const override {
    return StableOrder(ctx, [](const QueuedJob& a, const QueuedJob& b) {
      return std::tuple(-int64_t{a.priority}, a.submit_s) <
             std::tuple(-int64_t{b.priority}, b.submit_s);
    });
  }
};

class ShortestJobFirstQueuePolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "sjf"; }
  std::vector<size_t> Order(const QueueContext& ctx) const override {
    return StableOrder(ctx, [](const QueuedJob& a, const QueuedJob& b) {
      // Unknown run times sort after every known one.
      const int64_t ra = a.SjfRuntime().value_or(kNoPlannedEnd);
      const int64_t rb = b.SjfRuntime().value_or(kNoPlannedEnd);
      return std::tuple(ra, a.submit_s) < std::tuple(rb, b.submit_s);
    });
  }
};

}  // namespace

std::unique_ptr<QueuePolicy> MakeFifoQueuePolicy() { return std::make_unique<FifoQueuePolicy>(); }
std::unique_ptr<QueuePolicy> MakePriorityQueuePolicy() {
  return std::make_unique<PriorityQueuePolicy>();
}
std::unique_ptr<QueuePolicy> MakeShortestJobFirstQueuePolicy() {
  return std::make_unique<ShortestJobFirstQueuePolicy>();
}

}  // namespace gpupool::sched
