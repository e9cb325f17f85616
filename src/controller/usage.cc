#include "controller/usage.h"

#include <algorithm>
#include <map>

namespace gpupool::controller {

namespace {

// GPU-seconds as GPU-hours.
double Hours(double gpus, int64_t from_us, int64_t to_us) {
  return to_us > from_us ? gpus * static_cast<double>(to_us - from_us) / 3.6e9 : 0;
}

// `hours` held evenly over [start_us, end_us): its part inside [since_us, until_us) (all
// of it, at the start, for an empty span).
double SpreadInside(double hours, int64_t start_us, int64_t end_us, int64_t since_us,
                    int64_t until_us) {
  if (end_us <= start_us) return start_us >= since_us && start_us < until_us ? hours : 0;
  const int64_t from = std::max(start_us, since_us);
  const int64_t to = std::min(end_us, until_us);
  if (to <= from) return 0;
  return hours * static_cast<double>(to - from) / static_cast<double>(end_us - start_us);
}

// Whether attempt `a`'s late reports kept each task's end (EarlierAttempt::
// late_end_times_us): one record of one attempt, whose GPUs are known.
bool EachTaskEndKept(const jobs::EarlierAttempt& a) {
  return a.merged == 1 && a.lost_time_us != 0 && a.gpus > 0 && !a.nodes.empty() &&
         a.late_end_times_us.size() == a.nodes.size();
}

// The GPU-hours of an earlier attempt inside the window. Up to its loss (or its end), its
// share of the attempt's GPU-hours that the window's part of its run makes; past the loss,
// each task's GPUs up to the end its node reported late, where the record kept it.
double EarlierGpuHoursInside(const jobs::EarlierAttempt& a, int64_t since_us, int64_t until_us) {
  if (!EachTaskEndKept(a)) {
    return SpreadInside(a.gpu_hours, a.start_time_us, a.end_time_us, since_us, until_us);
  }
  const double task_gpus = a.gpus / static_cast<double>(a.nodes.size());
  double late = 0;
  double late_inside = 0;
  for (const int64_t end : a.late_end_times_us) {
    late += Hours(task_gpus, a.lost_time_us, end);
    late_inside += Hours(task_gpus, std::max(a.lost_time_us, since_us), std::min(end, until_us));
  }
  const double at_loss = std::max(0.0, a.gpu_hours - late);
  return SpreadInside(at_loss, a.start_time_us, a.lost_time_us, since_us, until_us) + late_inside;
}

double PlacedGpusOf(const jobs::Job& j) {
  double gpus = 0;
  for (const jobs::TaskPlacement& p : j.placement) gpus += jobs::PlacedGpus(p);
  return gpus;
}

// A LOST job's end as charged: the latest end its tasks reported late, if after the loss.
int64_t ChargedEnd(const jobs::Job& j) {
  return j.end_time_us > 0 ? std::max(j.end_time_us, j.late_end_time_us) : 0;
}

}  // namespace

double LateGpuHours(const jobs::Job& j, int64_t since_us, int64_t until_us) {
  if (j.start_time_us <= 0 || j.end_time_us <= 0 || j.late_end_time_us <= j.end_time_us) return 0;
  const int64_t from = std::max(j.end_time_us, since_us);
  // Each task's own end, where the record keeps it (its task statuses; the latest of
  // them is late_end_time_us): a task that never reported, or that ended by the loss,
  // adds nothing past it.
  bool kept = j.tasks.size() == j.placement.size();
  int64_t latest = 0;
  for (size_t t = 0; kept && t < j.tasks.size(); ++t) {
    if (j.tasks[t].reported_late) latest = std::max(latest, j.tasks[t].end_time_us);
  }
  if (!kept || latest < j.late_end_time_us) {
    // Stored in an older form: all its GPUs up to the latest end.
    return Hours(PlacedGpusOf(j), from, std::min(j.late_end_time_us, until_us));
  }
  double hours = 0;
  for (size_t t = 0; t < j.tasks.size(); ++t) {
    if (!j.tasks[t].reported_late) continue;
    hours +=
        Hours(jobs::PlacedGpus(j.placement[t]), from, std::min(j.tasks[t].end_time_us, until_us));
  }
  return hours;
}

double JobGpuHours(const jobs::Job& j, int64_t since_us, int64_t until_us, int64_t now_us) {
  double hours = 0;
  for (const jobs::EarlierAttempt& a : j.earlier_attempts) {
    hours += EarlierGpuHoursInside(a, since_us, until_us);
  }
  if (j.start_time_us <= 0) return hours;  // the current attempt never ran
  // All its GPUs up to its end; a LOST job's, past it, each task's up to its own end
  // when its node reported it late.
  const int64_t end = j.end_time_us > 0 ? j.end_time_us : now_us;
  hours += Hours(PlacedGpusOf(j), std::max(j.start_time_us, since_us), std::min(end, until_us));
  return hours + LateGpuHours(j, since_us, until_us);
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
  const int64_t end = j.end_time_us > 0 ? ChargedEnd(j) : now_us;
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
