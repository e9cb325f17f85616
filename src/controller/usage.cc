#include "controller/usage.h"

#include <algorithm>
#include <map>

namespace gpupool::controller {

namespace {

// The GPU-hours of an earlier attempt inside the window: its share of the attempt's
// GPU-hours that the window's part of its run makes (all of them when the window covers
// it).
double EarlierGpuHoursInside(const jobs::EarlierAttempt& a, int64_t since_us, int64_t until_us) {
  if (a.end_time_us <= a.start_time_us) {
    return a.start_time_us >= since_us && a.start_time_us < until_us ? a.gpu_hours : 0;
  }
  const int64_t from = std::max(a.start_time_us, since_us);
  const int64_t to = std::min(a.end_time_us, until_us);
  if (to <= from) return 0;
  return a.gpu_hours * static_cast<double>(to - from) /
         static_cast<double>(a.end_time_us - a.start_time_us);
}

}  // namespace

double JobGpuHours(const jobs::Job& j, int64_t since_us, int64_t until_us, int64_t now_us) {
  double hours = 0;
  for (const jobs::EarlierAttempt& a : j.earlier_attempts) {
    hours += EarlierGpuHoursInside(a, since_us, until_us);
  }
  if (j.start_time_us <= 0) return hours;  // the current attempt never ran
  // A LOST job's GPUs were held up to its real end when its node reported it late.
  const int64_t end = j.end_time_us > 0 ? std::max(j.end_time_us, j.late_end_time_us) : now_us;
  const int64_t from = std::max(j.start_time_us, since_us);
  const int64_t to = std::min(end, until_us);
  if (to <= from) return hours;
  double gpus = 0;
  for (const jobs::TaskPlacement& p : j.placement) {
    gpus += jobs::PlacedGpus(p);
  }
  return hours + gpus * static_cast<double>(to - from) / 3.6e9;
}

std::pair<std::string, std::string> MetricsKey(const jobs::Job& j) {
  return {j.user, j.project.empty() ? "(none)" : j.project};
}

void AddWaitingGpuHours(const jobs::Job& j,
                        std::map<std::pair<std::string, std::string>, double>* gpu_hours) {
  if (j.state != jobs::JobState::kPending || j.earlier_attempts.empty()) return;
  double hours = 0;
  for (const jobs::EarlierAttempt& a : j.earlier_attempts) hours += a.gpu_hours;
  if (hours > 0) (*gpu_hours)[MetricsKey(j)] += hours;
}

namespace {

bool HeldGpusInside(const jobs::Job& j, int64_t since_us, int64_t until_us, int64_t now_us) {
  for (const jobs::EarlierAttempt& a : j.earlier_attempts) {
    if (EarlierGpuHoursInside(a, since_us, until_us) > 0) return true;
  }
  if (j.start_time_us <= 0) return false;  // never ran
  const int64_t end = j.end_time_us > 0 ? std::max(j.end_time_us, j.late_end_time_us) : now_us;
  return std::min(end, until_us) > std::max(j.start_time_us, since_us);
}

double WeightOf(const std::map<std::string, double, std::less<>>& weights,
                const std::string& group) {
  auto it = weights.find(group);
  return it == weights.end() ? 1.0 : it->second;
}

}  // namespace

std::set<std::string> UsageGroups(const std::vector<jobs::Job>& jobs, int64_t since_us,
                                  int64_t until_us, int64_t now_us, bool by_project) {
  std::set<std::string> out;
  for (const jobs::Job& j : jobs) {
    if (HeldGpusInside(j, since_us, until_us, now_us)) {
      out.insert(by_project ? jobs::AccountingProject(j) : j.user);
    }
  }
  return out;
}

GroupShare ShareOfGroup(const std::string& group, const std::set<std::string>& groups,
                        const std::map<std::string, double, std::less<>>& weights) {
  GroupShare share;
  share.weight = WeightOf(weights, group);
  double total = groups.contains(group) ? 0 : share.weight;
  for (const std::string& g : groups) total += WeightOf(weights, g);
  share.norm = total > 0 ? share.weight / total : 0;
  return share;
}

std::vector<UsageRow> ComputeUsage(const std::vector<jobs::Job>& jobs, int64_t since_us,
                                   int64_t until_us, int64_t now_us, const std::string& by,
                                   const std::map<int64_t, double>& used_hours) {
  std::map<std::string, UsageRow> rows;
  for (const jobs::Job& j : jobs) {
    if (!HeldGpusInside(j, since_us, until_us, now_us)) continue;
    const bool by_project = by == "project";
    const std::string& key = by_project ? jobs::AccountingProject(j) : j.user;
    UsageRow& r = rows[key];
    r.key = key;
    r.own_group = r.own_group || (by_project && j.project.empty());
    r.gpu_hours += JobGpuHours(j, since_us, until_us, now_us);
    if (auto u = used_hours.find(j.id); u != used_hours.end()) r.used_gpu_hours += u->second;
    r.jobs += 1;
  }
  std::vector<UsageRow> out;
  for (auto& [k, r] : rows) out.push_back(std::move(r));
  std::stable_sort(out.begin(), out.end(),
                   [](const UsageRow& a, const UsageRow& b) { return a.gpu_hours > b.gpu_hours; });
  return out;
}

}  // namespace gpupool::controller
