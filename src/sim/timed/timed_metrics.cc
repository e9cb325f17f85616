#include "sim/timed/timed_metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace gpupool::sim {
namespace {

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest value with at least p% of values at or below it.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

double Pct(int64_t used, int64_t capacity) {
  return capacity > 0 ? 100.0 * static_cast<double>(used) / static_cast<double>(capacity) : 0;
}

}  // namespace

Distribution Describe(std::vector<double> values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.median = Percentile(values, 50);
  d.p95 = Percentile(values, 95);
  d.p99 = Percentile(values, 99);
  d.max = values.back();
  return d;
}

double JainIndex(const std::vector<double>& values) {
  double sum = 0, sum_sq = 0;
  for (double v : values) {
    sum += v;
    sum_sq += v * v;
  }
  if (values.empty() || sum_sq == 0) return 1;
  return sum * sum / (static_cast<double>(values.size()) * sum_sq);
}

TimedSummary Summarize(const TimedRun& run, sched::FairShareGroup grouping,
                       int64_t sample_interval_s) {
  TimedSummary s;
  s.jobs = run.jobs.size();
  std::vector<double> jct, delay;
  struct Acc {
    size_t jobs = 0;
    double jct = 0, delay = 0, run = 0, gpu_s = 0;
  };
  std::map<std::string, Acc> groups;
  int64_t last_end = 0;
  double total_gpu_s = 0;
  for (const JobRecord& j : run.jobs) {
    switch (j.fate) {
      case JobFate::kFinished:
        ++s.finished;
        break;
      case JobFate::kTimedOut:
        ++s.timed_out;
        break;
      case JobFate::kGpuFailed:  // counts as a job that ran, up to its failure
        ++s.gpu_failed;
        break;
      case JobFate::kNeverFits:
        ++s.never_fits;
        continue;
      case JobFate::kNeverStarted:
        ++s.never_started;
        continue;
    }
    const double job_jct = static_cast<double>(j.end_s - j.submit_s);
    // Waits over every attempt; run time without the work preemptions threw away.
    const double job_delay =
        static_cast<double>(j.waited_s >= 0 ? j.waited_s : j.start_s - j.submit_s);
    const double ran = job_jct - job_delay - static_cast<double>(j.lost_s);
    jct.push_back(job_jct);
    delay.push_back(job_delay);
    last_end = std::max(last_end, j.end_s);
    Acc& a = groups[grouping == sched::FairShareGroup::kProject ? j.project : j.user];
    ++a.jobs;
    a.jct += job_jct;
    a.delay += job_delay;
    a.run += ran;
    a.gpu_s += ran * static_cast<double>(j.gpu_milli) / 1000.0;
    total_gpu_s += ran * static_cast<double>(j.gpu_milli) / 1000.0;
  }
  s.jct_s = Describe(std::move(jct));
  s.delay_s = Describe(std::move(delay));
  s.makespan_s = last_end;
  s.gpu_hours = total_gpu_s / 3600.0;
  std::vector<double> ratios, attainments;
  for (const auto& [name, a] : groups) {
    GroupStats g;
    g.group = name;
    g.jobs = a.jobs;
    g.mean_jct_s = a.jct / static_cast<double>(a.jobs);
    g.mean_delay_s = a.delay / static_cast<double>(a.jobs);
    g.gpu_hours = a.gpu_s / 3600.0;
    g.gpu_hours_share = total_gpu_s > 0 ? a.gpu_s / total_gpu_s : 0;
    // A group whose jobs all took zero time waited for nothing: ratio 1.
    g.service_ratio = a.jct > 0 ? a.run / a.jct : 1;
    ratios.push_back(g.service_ratio);
    if (auto it = run.group_shares.find(name);
        it != run.group_shares.end() && it->second.entitled_gpu_s > 0) {
      g.share_attainment = it->second.received_gpu_s / it->second.entitled_gpu_s;
      attainments.push_back(g.share_attainment);
    }
    s.groups.push_back(std::move(g));
  }
  s.jain_index = JainIndex(ratios);
  s.share_jain_index = JainIndex(attainments);
  s.share_jain_mean = run.share_jain_mean;

  // Allocation: integrate the step function over [0, makespan] and sample it.
  const int64_t cap = run.capacity.gpu_milli;
  const int64_t horizon = s.makespan_s;
  double area = 0;
  for (size_t i = 0; i < run.timeline.size(); ++i) {
    const AllocationPoint& p = run.timeline[i];
    s.peak_gpu_alloc_pct = std::max(s.peak_gpu_alloc_pct, Pct(p.gpu_milli_used, cap));
    const int64_t until = i + 1 < run.timeline.size() ? run.timeline[i + 1].time_s : horizon;
    const int64_t from = std::min(p.time_s, horizon);
    if (until > from) area += Pct(p.gpu_milli_used, cap) * static_cast<double>(until - from);
  }
  s.mean_gpu_alloc_pct = horizon > 0 ? area / static_cast<double>(horizon) : 0;
  s.sample_interval_s =
      sample_interval_s > 0 ? sample_interval_s : std::max<int64_t>(1, (horizon + 999) / 1000);
  size_t k = 0;
  AllocationPoint current{0, 0, 0, 0};
  for (int64_t t = 0; t <= horizon; t += s.sample_interval_s) {
    while (k < run.timeline.size() && run.timeline[k].time_s <= t) current = run.timeline[k++];
    s.samples.push_back(AllocationSample{t, Pct(current.gpu_milli_used, cap), current.running_jobs,
                                         current.pending_jobs});
  }
  return s;
}

}  // namespace gpupool::sim
