#include "sched/queue/queue_policy_registry.h"

#include <fmt/format.h>

#include <cmath>

namespace gpupool::sched {

namespace {

// Order's answer handed out one index at a time.
class WholeOrder final : public QueueOrder {
 public:
  explicit WholeOrder(std::vector<size_t> order) : order_(std::move(order)) {}
  std::optional<size_t> Next() override {
    if (next_ >= order_.size()) return std::nullopt;
    return order_[next_++];
  }

 private:
  std::vector<size_t> order_;
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<QueueOrder> QueuePolicy::Lazy(const QueueContext& ctx) const {
  return std::make_unique<WholeOrder>(Order(ctx));
}

const std::string& FairShareGroupOf(const QueuedJob& job, FairShareGroup group) {
  return group == FairShareGroup::kProject ? job.project : job.user;
}

Result<FairShareGroup> ParseFairShareGroup(std::string_view name, std::string_view flag) {
  for (FairShareGroup g : {FairShareGroup::kUser, FairShareGroup::kProject}) {
    if (name == FairShareGroupName(g)) return g;
  }
  return Status::InvalidArgument(
      fmt::format("{} '{}': user (fair share between users) or project (between projects, Slurm's "
                  "accounts)",
                  flag, name));
}

std::string_view FairShareGroupName(FairShareGroup group) {
  return group == FairShareGroup::kProject ? "project" : "user";
}

Status RegistryTraits<QueuePolicy>::CheckConfig(const QueuePolicyConfig& config) {
  for (const auto& [group, weight] : config.fair_weights) {
    if (!(weight > 0) || !std::isfinite(weight)) {
      return Status::InvalidArgument(fmt::format(
          "fair-share weight of '{}' is {}; weights must be positive numbers", group, weight));
    }
  }
  return Status::Ok();
}

const QueuePolicyRegistry& BuiltinQueuePolicies() {
  static const QueuePolicyRegistry* registry = [] {
    auto* r = new QueuePolicyRegistry();
    // Registration of distinct literal names cannot fail; a failure is a programming
    // error caught by the registry tests.
    (void)r->Register("fifo", "first come, first served (by submission time)",
                      [](const QueuePolicyConfig&) { return MakeFifoQueuePolicy(); });
    (void)r->Register("priority",
                      "first come, first served, except that each user's own jobs go in the "
                      "places they hold highest --priority first",
                      [](const QueuePolicyConfig& c) { return MakePriorityQueuePolicy(c); });
    (void)r->Register("sjf",
                      "shortest job first on the runtime estimate (else the time limit); "
                      "jobs without either go last, first come, first served",
                      [](const QueuePolicyConfig&) { return MakeShortestJobFirstQueuePolicy(); });
    (void)r->Register("fair",
                      "fair share between users or projects: dominant resource fairness on "
                      "GPU, CPU and memory, with optional weights",
                      [](const QueuePolicyConfig& c) { return MakeFairShareQueuePolicy(c); });
    return r;
  }();
  return *registry;
}

}  // namespace gpupool::sched
