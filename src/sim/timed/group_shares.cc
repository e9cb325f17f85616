#include "sim/timed/group_shares.h"

#include <algorithm>
#include <numeric>

namespace gpupool::sim {

std::vector<double> MaxMinShares(const std::vector<double>& demands, double capacity) {
  std::vector<size_t> order(demands.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return demands[a] < demands[b]; });
  std::vector<double> shares(demands.size(), 0);
  double left = std::max(0.0, capacity);
  for (size_t k = 0; k < order.size(); ++k) {
    const double equal = left / static_cast<double>(order.size() - k);
    const double share = std::min(demands[order[k]], equal);
    shares[order[k]] = share;
    left -= share;
  }
  return shares;
}

void GroupShares::AdvanceTo(int64_t now_s) {
  if (!started_) {
    started_ = true;
    last_s_ = now_s;
    return;
  }
  if (now_s <= last_s_) return;
  const double dt = static_cast<double>(now_s - last_s_);
  last_s_ = now_s;
  if (now_.empty()) return;
  std::vector<double> demands;
  demands.reserve(now_.size());
  for (const auto& [name, n] : now_) demands.push_back(static_cast<double>(n.demand));
  const std::vector<double> shares = MaxMinShares(demands, static_cast<double>(capacity_));
  double sum = 0, sum_sq = 0;
  size_t i = 0, counted = 0;
  for (const auto& [name, n] : now_) {
    const double share = shares[i++];
    Group& g = groups_[name];
    g.received_gpu_s += static_cast<double>(n.allocation) / 1000.0 * dt;
    g.entitled_gpu_s += share / 1000.0 * dt;
    if (share <= 0) continue;  // no capacity at all: nobody is treated unfairly
    const double x = static_cast<double>(n.allocation) / share;
    sum += x;
    sum_sq += x * x;
    ++counted;
  }
  if (counted == 0) return;
  // Nobody with demand running anything is equal treatment (JainIndex's convention).
  jain_area_ += (sum_sq > 0 ? sum * sum / (static_cast<double>(counted) * sum_sq) : 1) * dt;
  busy_s_ += dt;
}

void GroupShares::Change(const std::string& group, int64_t allocation_milli, int64_t demand_milli) {
  auto it = now_.find(group);
  if (it == now_.end()) it = now_.emplace(group, Now{}).first;
  it->second.allocation += allocation_milli;
  it->second.demand += demand_milli;
  if (it->second.demand <= 0 && it->second.allocation <= 0) now_.erase(it);
}

double GroupShares::ServiceRatio(std::string_view group, int64_t /*now_s*/) const {
  auto it = groups_.find(group);
  if (it == groups_.end() || it->second.entitled_gpu_s <= 0) return 1;
  return it->second.received_gpu_s / it->second.entitled_gpu_s;
}

double GroupShares::MeanInstantJain() const { return busy_s_ > 0 ? jain_area_ / busy_s_ : 1; }

}  // namespace gpupool::sim
