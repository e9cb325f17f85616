#include "sim/timed/resume_order.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

namespace gpupool::sim {
namespace {

constexpr std::pair<PreemptResume, std::string_view> kNames[] = {
    {PreemptResume::kQueue, "queue"},
    {PreemptResume::kFirst, "first"},
    {PreemptResume::kFirstUnderShare, "first-under-share"},
    {PreemptResume::kRemaining, "remaining"},
};

// The jobs of the front that go first in one context, in their sequence order.
std::vector<size_t> FrontOf(const ResumeFront& front, const sched::QueueContext& ctx) {
  std::vector<std::pair<int64_t, size_t>> seqs;
  for (size_t i = 0; i < ctx.pending.size(); ++i) {
    const int64_t seq = front.SeqOf(ctx.pending[i]->id);
    if (seq >= 0) seqs.emplace_back(seq, i);
  }
  std::sort(seqs.begin(), seqs.end());
  std::vector<size_t> out;
  out.reserve(seqs.size());
  for (const auto& [seq, i] : seqs) out.push_back(i);
  return out;
}

// Keeps the front jobs whose group, with them started (and the front jobs kept before
// them), holds at most its share of the GPUs: capacity x its weight / the weights of the
// groups with jobs running or waiting. Running jobs count as charged (sched::ChargedUse:
// a MIG instance by its weight) against the weighed capacity, as the fair queue does.
void KeepUnderShare(const sched::QueuePolicyConfig& config, const sched::QueueContext& ctx,
                    std::vector<size_t>* front) {
  std::map<std::string_view, int64_t> used;
  for (const sched::RunningJob& r : ctx.running) {
    used[sched::FairShareGroupOf(*r.job, config.fair_group)] +=
        ctx.cluster != nullptr ? sched::ChargedUse(*ctx.cluster, r).gpu_milli
                               : r.job->Total().gpu_milli;
  }
  for (const sched::QueuedJob* q : ctx.pending)
    used[sched::FairShareGroupOf(*q, config.fair_group)];
  auto weight = [&](std::string_view g) {
    auto it = config.fair_weights.find(g);
    return it == config.fair_weights.end() ? 1.0 : it->second;
  };
  double weights = 0;
  for (const auto& [g, u] : used) weights += weight(g);
  const double capacity =
      ctx.cluster != nullptr ? static_cast<double>(ctx.cluster->TotalGpuWeightMilli()) : 0;
  std::erase_if(*front, [&](size_t i) {
    const sched::QueuedJob& q = *ctx.pending[i];
    const std::string_view g = sched::FairShareGroupOf(q, config.fair_group);
    const int64_t with = used[g] + q.Total().gpu_milli;
    if (static_cast<double>(with) > capacity * weight(g) / weights) return true;
    used[g] = with;
    return false;
  });
}

// The front's jobs, then the wrapped policy's order without them.
class FrontFirstOrder final : public sched::QueueOrder {
 public:
  FrontFirstOrder(std::vector<size_t> front, std::unique_ptr<sched::QueueOrder> rest)
      : front_(std::move(front)), sorted_(front_), rest_(std::move(rest)) {
    std::sort(sorted_.begin(), sorted_.end());
  }

  std::optional<size_t> Next() override {
    if (next_ < front_.size()) return front_[next_++];
    while (std::optional<size_t> i = rest_->Next()) {
      if (!std::binary_search(sorted_.begin(), sorted_.end(), *i)) return i;
    }
    return std::nullopt;
  }

 private:
  std::vector<size_t> front_;
  std::vector<size_t> sorted_;  // front_, sorted, to skip in rest_'s order
  std::unique_ptr<sched::QueueOrder> rest_;
  size_t next_ = 0;
};

class FrontFirstPolicy final : public sched::QueuePolicy {
 public:
  FrontFirstPolicy(std::unique_ptr<sched::QueuePolicy> inner, sched::QueuePolicyConfig config,
                   std::shared_ptr<const ResumeFront> front, bool under_share_only)
      : inner_(std::move(inner)),
        config_(std::move(config)),
        front_(std::move(front)),
        under_share_only_(under_share_only) {}

  std::string_view name() const override { return inner_->name(); }

  std::vector<size_t> Order(const sched::QueueContext& ctx) const override {
    std::unique_ptr<sched::QueueOrder> order = Lazy(ctx);
    std::vector<size_t> out;
    out.reserve(ctx.pending.size());
    while (std::optional<size_t> i = order->Next()) out.push_back(*i);
    return out;
  }

  std::unique_ptr<sched::QueueOrder> Lazy(const sched::QueueContext& ctx) const override {
    if (front_->empty()) return inner_->Lazy(ctx);
    std::vector<size_t> front = FrontOf(*front_, ctx);
    if (under_share_only_ && !front.empty()) KeepUnderShare(config_, ctx, &front);
    if (front.empty()) return inner_->Lazy(ctx);
    return std::make_unique<FrontFirstOrder>(std::move(front), inner_->Lazy(ctx));
  }

 private:
  std::unique_ptr<sched::QueuePolicy> inner_;
  sched::QueuePolicyConfig config_;
  std::shared_ptr<const ResumeFront> front_;
  bool under_share_only_;
};

}  // namespace

Result<PreemptResume> ParsePreemptResume(std::string_view name) {
  for (const auto& [value, n] : kNames) {
    if (n == name) return value;
  }
  return Status::InvalidArgument(
      fmt::format("--preempt-resume '{}': queue (a victim goes back to its place in the order), "
                  "first, first-under-share or remaining",
                  name));
}

std::string_view PreemptResumeName(PreemptResume resume) {
  for (const auto& [value, n] : kNames) {
    if (value == resume) return n;
  }
  return "unknown";
}

void ResumeFront::Add(const std::string& job_id) { seq_[job_id] = next_++; }

void ResumeFront::Remove(const std::string& job_id) { seq_.erase(job_id); }

int64_t ResumeFront::SeqOf(const std::string& job_id) const {
  auto it = seq_.find(job_id);
  return it == seq_.end() ? -1 : it->second;
}

std::unique_ptr<sched::QueuePolicyRegistry> ResumeFirstPolicies(
    const std::shared_ptr<const ResumeFront>& front, bool under_share_only) {
  auto registry = std::make_unique<sched::QueuePolicyRegistry>();
  const sched::QueuePolicyRegistry& builtin = sched::BuiltinQueuePolicies();
  for (const auto& entry : builtin.List()) {
    auto factory = [&builtin, name = entry.name, front,
                    under_share_only](const sched::QueuePolicyConfig& config) {
      Result<std::unique_ptr<sched::QueuePolicy>> inner = builtin.Create(name, config);
      if (!inner.ok()) return std::unique_ptr<sched::QueuePolicy>();
      return std::unique_ptr<sched::QueuePolicy>(
          std::make_unique<FrontFirstPolicy>(std::move(*inner), config, front, under_share_only));
    };
    // Names are the built-in registry's: unique and not empty.
    (void)registry->Register(entry.name, entry.description, std::move(factory));
  }
  return registry;
}

int64_t RemainingSjfKey(int64_t key_s, int64_t kept_s) {
  if (key_s <= 0) return key_s;
  return std::max<int64_t>(1, key_s - kept_s);
}

}  // namespace gpupool::sim
