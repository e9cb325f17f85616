// fair: dominant resource fairness (DRF, Ghodsi et al. NSDI'11) between users or
// projects, on GPU, CPU and memory.
//
// A group's dominant share is the largest of its GPU, CPU and memory use divided by the
// cluster's capacity of each, divided by the group's weight. A running job's use is what
// it is charged (ChargedUse: a MIG instance held whole by its weight, never less than the
// ask), and the GPU capacity counts each instance by its weight too. The order is built by
// progressive filling: repeatedly take the group with the lowest dominant share, emit
// its oldest pending job, and add that job's request to the group's use as if it had
// started. So within one pass a heavy and a light user alternate instead of the light
// user's jobs all going first, and a group never gets two jobs in a row while another
// group is further behind. Ties go to the group whose next job is older, then by name.
// With fair_starving_after_s (aging), the jobs that have waited that long come first,
// oldest first, ahead of that order. With fair_shortest_first a group's own jobs go
// shortest first (as sjf) instead of oldest first. Either way each user's jobs then go
// highest priority first in the places they hold (RankOwnJobsByPriority). Lazy: the
// filling goes as far as the pass reads the order (a pass capped at max_starts reads a
// few of 100,000 jobs).
// Two experiments of the simulator change the groups' key (QueuePolicyConfig): the
// groups' service ratio from fair_service (least served first), or fair_sjf_bound (one
// shortest-first order over every group, groups above the bound after the others);
// fair_sjf_penalty stretches that order's run times by how far a group is over an equal
// share.
#include <algorithm>
#include <queue>
#include <tuple>
#include <unordered_map>

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

// The fair order of one QueueContext, made as it is read (QueueOrder): the groups and
// their sorted jobs are set up at once, the progressive filling goes one job per Next.
class FairOrder final : public QueueOrder {
 public:
  FairOrder(const QueuePolicyConfig& config, const QueueContext& ctx) : config_(config), ctx_(ctx) {
    // A running job counts as charged (a MIG instance by its weight, never less than the
    // ask), against the GPU capacity charges are measured in (cluster_state.h).
    if (ctx.cluster != nullptr) {
      capacity_ = ctx.cluster->TotalCapacity();
      capacity_.gpu_milli = ctx.cluster->TotalGpuWeightMilli();
      for (const RunningJob& r : ctx.running) GroupOf(*r.job).used += ChargedUse(*ctx.cluster, r);
    } else {
      for (const RunningJob& r : ctx.running) GroupOf(*r.job).used += r.job->Total();
    }
    // Aging: jobs waiting past fair_starving_after_s go first, oldest first, and count
    // in their groups' use as if started.
    const int64_t starving = config.fair_starving_after_s;
    for (size_t i = 0; i < ctx.pending.size(); ++i) {
      if (starving > 0 && ctx.now_s - ctx.pending[i]->submit_s >= starving) {
        aged_.push_back(i);
      } else {
        GroupOf(*ctx.pending[i]).jobs.push_back(i);
      }
    }
    std::stable_sort(aged_.begin(), aged_.end(), [&](size_t a, size_t b) {
      return ctx.pending[a]->submit_s < ctx.pending[b]->submit_s;
    });
    for (size_t i : aged_) GroupOf(*ctx.pending[i]).used += ctx.pending[i]->Total();
    const bool shortest = config.fair_shortest_first || config.fair_sjf_bound > 0;
    auto before = [&](size_t a, size_t b) {
      const QueuedJob& ja = *ctx.pending[a];
      const QueuedJob& jb = *ctx.pending[b];
      if (shortest) {
        const int64_t ra = ja.SjfRuntime().value_or(kNoPlannedEnd);
        const int64_t rb = jb.SjfRuntime().value_or(kNoPlannedEnd);
        if (ra != rb) return ra < rb;
      }
      return ja.submit_s < jb.submit_s;
    };
    // fair_sjf_bound: the dominant share above which a group goes after the others.
    if (config.fair_sjf_bound > 0 && !groups_.empty()) {
      equal_share_ = 1 / static_cast<double>(groups_.size());
      bound_ = config.fair_sjf_bound * equal_share_;
    }
    for (auto& [name, g] : groups_) {
      auto w = config.fair_weights.find(name);
      if (w != config.fair_weights.end()) g.weight = w->second;
      if (config.fair_service != nullptr) {
        g.service = config.fair_service->ServiceRatio(name, ctx.now_s);
      }
      // Jobs come in arrival order, mostly already in this one: a stable sort of a sorted
      // list leaves it as it is.
      if (!std::is_sorted(g.jobs.begin(), g.jobs.end(), before)) {
        std::stable_sort(g.jobs.begin(), g.jobs.end(), before);
      }
      // A user's --priority reorders that user's own jobs in the group (by project, the
      // places they hold among the project's), never another user's.
      RankOwnJobsByPriority(ctx, g.jobs, config.priority_across_users);
    }
    for (const auto& [name, g] : groups_) Push(name, g);
  }

  std::optional<size_t> Next() override {
    if (aged_next_ < aged_.size()) return aged_[aged_next_++];
    if (heap_.empty()) return std::nullopt;
    const std::string_view name = std::get<4>(heap_.top());
    const size_t index = std::get<3>(heap_.top());
    heap_.pop();
    Group& g = groups_.find(name)->second;
    g.used += ctx_.pending[index]->Total();
    ++g.next;
    Push(name, g);
    return index;
  }

 private:
  struct Group {
    Resources used;
    double weight = 1;
    double service = 0;        // fair_service's ratio at ctx.now_s
    std::vector<size_t> jobs;  // pending indices, in the group's order
    size_t next = 0;
  };

  Group& GroupOf(const QueuedJob& job) {
    const std::string& name = FairShareGroupOf(job, config_.fair_group);
    if (last_ != nullptr && last_name_ == name) return *last_;
    last_name_ = name;
    last_ = &groups_[last_name_];
    return *last_;
  }

  // Min-heap on (key, second key, next job's submit time, next job's index, group name):
  // a total order, so the result does not depend on heap internals or on the groups'
  // order. The keys: (weighted dominant share, 0); with fair_service (service ratio,
  // weighted dominant share); with fair_sjf_bound (1 above the bound else 0, the next
  // job's run time, times 1 + fair_sjf_penalty x how far the share is over an equal one).
  void Push(std::string_view name, const Group& g) {
    if (g.next >= g.jobs.size()) return;
    const size_t j = g.jobs[g.next];
    const double share = DominantShare(g.used, capacity_) / g.weight;
    double key = share;
    double second = 0;
    if (bound_ > 0) {
      key = share > bound_ ? 1 : 0;
      second = static_cast<double>(ctx_.pending[j]->SjfRuntime().value_or(kNoPlannedEnd));
      if (config_.fair_sjf_penalty > 0) {
        second *= 1 + config_.fair_sjf_penalty * std::max(0.0, share / equal_share_ - 1);
      }
    } else if (config_.fair_service != nullptr) {
      key = g.service;
      second = share;
    }
    heap_.emplace(key, second, ctx_.pending[j]->submit_s, j, name);
  }

  const QueuePolicyConfig& config_;
  const QueueContext ctx_;
  Resources capacity_;
  std::unordered_map<std::string_view, Group> groups_;  // names borrowed from the jobs
  std::string_view last_name_;
  Group* last_ = nullptr;  // groups_[last_name_]: jobs of one group often come in a row
  std::vector<size_t> aged_;
  size_t aged_next_ = 0;
  double bound_ = 0;        // fair_sjf_bound / active groups; 0: off
  double equal_share_ = 0;  // 1 / active groups, with bound_
  using Key = std::tuple<double, double, int64_t, size_t, std::string_view>;
  std::priority_queue<Key, std::vector<Key>, std::greater<>> heap_;
};

class FairShareQueuePolicy final : public QueuePolicy {
 public:
  explicit FairShareQueuePolicy(QueuePolicyConfig config) : config_(std::move(config)) {}
  std::string_view name() const override { return "fair"; }

  std::vector<size_t> Order(const QueueContext& ctx) const override {
    FairOrder order(config_, ctx);
    std::vector<size_t> out;
    out.reserve(ctx.pending.size());
    while (std::optional<size_t> i = order.Next()) out.push_back(*i);
    return out;
  }
  std::unique_ptr<QueueOrder> Lazy(const QueueContext& ctx) const override {
    return std::make_unique<FairOrder>(config_, ctx);
  }

 private:
  QueuePolicyConfig config_;
};

}  // namespace

std::unique_ptr<QueuePolicy> MakeFairShareQueuePolicy(const QueuePolicyConfig& config) {
  return std::make_unique<FairShareQueuePolicy>(config);
}

}  // namespace gpupool::sched
