// fair: dominant resource fairness (DRF, Ghodsi et al. NSDI'11) between users or
// projects, on GPU, CPU and memory.
//
// A group's dominant share is the largest of its GPU, CPU and memory use divided by the
// cluster's capacity of each, divided by the group's weight. The order is built by
// progressive filling: repeatedly take the group with the lowest dominant share, emit
// its oldest pending job, and add that job's request to the group's use as if it had
// started. So within one pass a heavy and a light user alternate instead of the light
// user's jobs all going first, and a group never gets two jobs in a row while another
// group is further behind. Ties go to the group whose next job is older, then by name.
// With fair_starving_after_s (aging), the jobs that have waited that long come first,
// oldest first, ahead of that order. With fair_shortest_first a group's own jobs go
// shortest first (as sjf) instead of oldest first.
#include <algorithm>
#include <queue>
#include <tuple>

#include "sched/queue/queue_policy_registry.h"

namespace gpupool::sched {
namespace {

double Ratio(int64_t used, int64_t capacity) {
  return capacity > 0 ? static_cast<double>(used) / static_cast<double>(capacity) : 0.0;
}

double DominantShare(const Resources& used, const Resources& capacity) {
  return std::max({Ratio(used.gpu_milli, capacity.gpu_milli),
                   Ratio(used.cpu_milli, capacity.cpu_milli),
                   Ratio(used.memory_mib, capacity.memory_mib)});
}

class FairShareQueuePolicy final : public QueuePolicy {
 public:
  explicit FairShareQueuePolicy(QueuePolicyConfig config) : config_(std::move(config)) {}
  std::string_view name() const override { return "fair"; }

  std::vector<size_t> Order(const QueueContext& ctx) const override {
    const Resources capacity = ctx.cluster != nullptr ? ctx.cluster->TotalCapacity() : Resources{};
    struct Group {
      Resources used;
      double weight = 1;
      std::vector<size_t> jobs;  // pending indices, oldest first
      size_t next = 0;
    };
    std::map<std::string_view, Group> groups;
    for (const RunningJob& r : ctx.running) {
      groups[FairShareGroupOf(*r.job, config_.fair_group)].used += r.job->Total();
    }
    // Aging: jobs waiting past fair_starving_after_s go first, oldest first, and count
    // in their groups' use as if started.
    std::vector<size_t> order;
    order.reserve(ctx.pending.size());
    const int64_t starving = config_.fair_starving_after_s;
    for (size_t i = 0; i < ctx.pending.size(); ++i) {
      if (starving > 0 && ctx.now_s - ctx.pending[i]->submit_s >= starving) {
        order.push_back(i);
      } else {
        groups[FairShareGroupOf(*ctx.pending[i], config_.fair_group)].jobs.push_back(i);
      }
    }
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return ctx.pending[a]->submit_s < ctx.pending[b]->submit_s;
    });
    for (size_t i : order) {
      groups[FairShareGroupOf(*ctx.pending[i], config_.fair_group)].used += ctx.pending[i]->Total();
    }
    for (auto& [name, g] : groups) {
      auto w = config_.fair_weights.find(name);
      if (w != config_.fair_weights.end()) g.weight = w->second;
      std::stable_sort(g.jobs.begin(), g.jobs.end(), [&](size_t a, size_t b) {
        const QueuedJob& ja = *ctx.pending[a];
        const QueuedJob& jb = *ctx.pending[b];
        if (config_.fair_shortest_first) {
          const int64_t ra = ja.SjfRuntime().value_or(kNoPlannedEnd);
          const int64_t rb = jb.SjfRuntime().value_or(kNoPlannedEnd);
          if (ra != rb) return ra < rb;
        }
        return ja.submit_s < jb.submit_s;
      });
    }
    // Min-heap on (weighted dominant share, next job's submit time, next job's index,
    // group name): a total order, so the result does not depend on heap internals.
    using Key = std::tuple<double, int64_t, size_t, std::string_view>;
    std::priority_queue<Key, std::vector<Key>, std::greater<>> heap;
    auto push = [&](std::string_view name, const Group& g) {
      if (g.next >= g.jobs.size()) return;
      const size_t j = g.jobs[g.next];
      heap.emplace(DominantShare(g.used, capacity) / g.weight, ctx.pending[j]->submit_s, j, name);
    };
    for (const auto& [name, g] : groups) push(name, g);
    while (!heap.empty()) {
      auto [share, submit, index, name] = heap.top();
      heap.pop();
      Group& g = groups.find(name)->second;
      order.push_back(index);
      g.used += ctx.pending[index]->Total();
      ++g.next;
      push(name, g);
    }
    return order;
  }

 private:
  QueuePolicyConfig config_;
};

}  // namespace

std::unique_ptr<QueuePolicy> MakeFairShareQueuePolicy(const QueuePolicyConfig& config) {
  return std::make_unique<FairShareQueuePolicy>(config);
}

}  // namespace gpupool::sched
