// fifo and sjf: orders by a key of each job alone; priority: fifo, then each user's jobs
// by their priority in the places they hold (RankOwnJobsByPriority). Ties keep arrival
// order (the order of ctx.pending), so every order is total and deterministic.
#include <algorithm>
#include <numeric>
#include <string_view>
#include <tuple>
#include <unordered_map>

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

std::vector<size_t> FifoOrder(const QueueContext& ctx) {
  return StableOrder(
      ctx, [](const QueuedJob& a, const QueuedJob& b) { return a.submit_s < b.submit_s; });
}

class FifoQueuePolicy final : public QueuePolicy {
 public:
  std::string_view name() const override { return "fifo"; }
  std::vector<size_t> Order(const QueueContext& ctx) const override { return FifoOrder(ctx); }
};

// First come, first served across users; a user's --priority reorders only that user's
// own jobs (docs/cli.md), or, with priority_across_users (the simulator's site
// priorities), every job.
class PriorityQueuePolicy final : public QueuePolicy {
 public:
  explicit PriorityQueuePolicy(bool across_users) : across_users_(across_users) {}
  std::string_view name() const override { return "priority"; }
  std::vector<size_t> Order(const QueueContext& ctx) const override {
    std::vector<size_t> order = FifoOrder(ctx);
    RankOwnJobsByPriority(ctx, order, across_users_);
    return order;
  }

 private:
  bool across_users_;
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

void RankOwnJobsByPriority(const QueueContext& ctx, std::span<size_t> order, bool across_users) {
  auto higher = [&](size_t a, size_t b) {
    return ctx.pending[a]->priority > ctx.pending[b]->priority;
  };
  // Most queues have one priority throughout: nothing to do, and no map of 100,000 jobs.
  const bool uniform = std::all_of(order.begin(), order.end(), [&](size_t i) {
    return ctx.pending[i]->priority == ctx.pending[order.front()]->priority;
  });
  if (uniform) return;
  if (across_users) {
    std::stable_sort(order.begin(), order.end(), higher);
    return;
  }
  // Each user's positions in `order`, in order; their jobs sorted, then put back there.
  std::unordered_map<std::string_view, std::vector<size_t>> positions;
  for (size_t p = 0; p < order.size(); ++p) positions[ctx.pending[order[p]]->user].push_back(p);
  std::vector<size_t> jobs;
  for (const auto& [user, at] : positions) {
    jobs.clear();
    for (size_t p : at) jobs.push_back(order[p]);
    std::stable_sort(jobs.begin(), jobs.end(), higher);
    for (size_t k = 0; k < at.size(); ++k) order[at[k]] = jobs[k];
  }
}

std::unique_ptr<QueuePolicy> MakeFifoQueuePolicy() { return std::make_unique<FifoQueuePolicy>(); }
std::unique_ptr<QueuePolicy> MakePriorityQueuePolicy(const QueuePolicyConfig& config) {
  return std::make_unique<PriorityQueuePolicy>(config.priority_across_users);
}
std::unique_ptr<QueuePolicy> MakeShortestJobFirstQueuePolicy() {
  return std::make_unique<ShortestJobFirstQueuePolicy>();
}

}  // namespace gpupool::sched
