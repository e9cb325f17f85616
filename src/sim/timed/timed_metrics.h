// Metrics of a time-driven run: job completion time (JCT = end - submit) and queueing
// delay (start - submit) distributions, makespan, GPU allocation over time (a sampled
// series and its time-weighted mean), and fairness between groups (users, projects or
// Philly virtual clusters).
//
// Fairness: per group, the mean JCT and delay, GPU-hours received and their share of
// all GPU-hours, and the service ratio = sum of run times / sum of JCTs (1 = its jobs
// never waited). Jain's index over the groups' service ratios, (sum x)^2 / (n sum x^2),
// is 1 when every group waited in the same proportion and 1/n when one group got all
// the waiting-free service. Only jobs that ran count.
//
// Fair-share attainment (group_shares.h): per group, GPU-seconds received over the
// GPU-seconds its max-min fair share by demand entitled it to, Jain's index over those
// attainments, and Jain's index at each moment averaged over the run. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sched/queue/queue_policy.h"
#include "sim/timed/timed_experiment.h"

namespace gpupool::sim {

struct Distribution {
  size_t count = 0;
  double mean = 0;
  double median = 0;
  double p95 = 0;
  double p99 = 0;
  double max = 0;
};

// Nearest-rank percentiles (p in 0..100) of `values`, which are sorted in place.
Distribution Describe(std::vector<double> values);
// Jain's fairness index of non-negative values; 1 for an empty list or all zeros.
double JainIndex(const std::vector<double>& values);

struct GroupStats {
  std::string group;
  size_t jobs = 0;  // that ran
  double mean_jct_s = 0;
  double mean_delay_s = 0;
  double gpu_hours = 0;
  double gpu_hours_share = 0;   // of all GPU-hours, 0..1
  double service_ratio = 0;     // sum run time / sum JCT
  double share_attainment = 0;  // GPU-seconds received / entitled (group_shares.h)
};

struct AllocationSample {
  int64_t time_s = 0;
  double gpu_alloc_pct = 0;  // GPU milli allocated / capacity, in %
  int64_t running_jobs = 0;
  int64_t pending_jobs = 0;
};

struct TimedSummary {
  size_t jobs = 0;
  size_t finished = 0;
  size_t timed_out = 0;
  size_t never_fits = 0;
  size_t never_started = 0;
  size_t gpu_failed = 0;  // ended by a GPU failure; their JCT ends at the failure
  Distribution jct_s;
  Distribution delay_s;
  int64_t makespan_s = 0;         // last end - first submission
  double mean_gpu_alloc_pct = 0;  // time-weighted over [0, makespan]
  double peak_gpu_alloc_pct = 0;
  double gpu_hours = 0;
  std::vector<GroupStats> groups;  // by group name
  double jain_index = 1;           // over the service ratios
  double share_jain_index = 1;     // over the share attainments, whole run
  double share_jain_mean = 1;      // at each moment, averaged over the time with demand
  int64_t sample_interval_s = 0;
  std::vector<AllocationSample> samples;  // every sample_interval_s from 0 to makespan
};

// `sample_interval_s` 0 picks one giving about 1,000 samples.
TimedSummary Summarize(const TimedRun& run, sched::FairShareGroup grouping,
                       int64_t sample_interval_s = 0);

}  // namespace gpupool::sim
