#include "sim/timed/timed_report.h"

#include <fmt/format.h>

#include <cmath>

namespace gpupool::sim {
namespace {

// Rounds for output so reports diff well and do not show float noise.
double Round(double v, int digits = 3) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

OrderedJson DistributionJson(const Distribution& d) {
  OrderedJson j;
  j["count"] = d.count;
  j["mean"] = Round(d.mean);
  j["median"] = Round(d.median);
  j["p95"] = Round(d.p95);
  j["p99"] = Round(d.p99);
  j["max"] = Round(d.max);
  return j;
}

std::string Hours(double seconds) { return fmt::format("{:.2f} h", seconds / 3600.0); }

// CSV fields from traces may hold commas or quotes.
std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

// "GPU failures 12 Xids (application 7, cordon-gpu 4, cordon-node 1): ..." and the cost.
std::string GpuFailureText(const TimedRun& run) {
  size_t total = 0;
  std::string by;
  for (const auto& [action, count] : run.gpu_failure_events) {
    total += count;
    by += fmt::format("{}{} {}", by.empty() ? "" : ", ", action, count);
  }
  std::string out = fmt::format("GPU failures {} Xids{}: {} jobs failed, {} requeued\n", total,
                                by.empty() ? "" : " (" + by + ")", run.failed_jobs_by_gpu_failure,
                                run.requeues_by_gpu_failure);
  out +=
      fmt::format("             {:.1f} GPU-hours of work lost, {:.1f} GPU-hours out of service\n",
                  run.gpu_failure_lost_gpu_s / 3600.0, run.out_of_service_gpu_s / 3600.0);
  return out;
}

}  // namespace

OrderedJson TimedReportJson(const TimedRunInfo& info, const TimedRun& run, const TimedSummary& s) {
  OrderedJson j;
  OrderedJson setup;
  setup["workload"] = info.workload;
  setup["trace_format"] = info.trace_format;
  setup["cluster"] = info.cluster;
  setup["nodes"] = info.nodes;
  setup["gpus"] = run.capacity.gpu_milli / 1000;
  setup["queue_policy"] = info.queue_policy;
  setup["start_rule"] = info.start_rule;
  setup["placement_policy"] = info.placement_policy;
  setup["fair_group"] = info.fair_group;
  setup["seed"] = info.seed;
  if (!info.gpu_failures.empty()) setup["gpu_failures"] = info.gpu_failures;
  j["setup"] = setup;
  OrderedJson jobs;
  jobs["total"] = s.jobs;
  jobs["finished"] = s.finished;
  jobs["timed_out"] = s.timed_out;
  jobs["never_fits"] = s.never_fits;
  jobs["never_started"] = s.never_started;
  if (run.gpu_failures) jobs["gpu_failed"] = s.gpu_failed;
  j["jobs"] = jobs;
  j["jct_s"] = DistributionJson(s.jct_s);
  j["queueing_delay_s"] = DistributionJson(s.delay_s);
  j["makespan_s"] = s.makespan_s;
  j["gpu_hours"] = Round(s.gpu_hours);
  j["mean_gpu_alloc_pct"] = Round(s.mean_gpu_alloc_pct);
  j["peak_gpu_alloc_pct"] = Round(s.peak_gpu_alloc_pct);
  j["jain_index"] = Round(s.jain_index, 4);
  j["share_jain_index"] = Round(s.share_jain_index, 4);
  j["share_jain_mean"] = Round(s.share_jain_mean, 4);
  OrderedJson groups = OrderedJson::array();
  for (const GroupStats& g : s.groups) {
    OrderedJson gj;
    gj["group"] = g.group;
    gj["jobs"] = g.jobs;
    gj["mean_jct_s"] = Round(g.mean_jct_s);
    gj["mean_delay_s"] = Round(g.mean_delay_s);
    gj["gpu_hours"] = Round(g.gpu_hours);
    gj["gpu_hours_share"] = Round(g.gpu_hours_share, 4);
    gj["service_ratio"] = Round(g.service_ratio, 4);
    gj["share_attainment"] = Round(g.share_attainment, 4);
    groups.push_back(std::move(gj));
  }
  j["groups"] = std::move(groups);
  j["scheduling_passes"] = run.passes;
  j["reservations"] = run.reservations;
  if (run.preemption) {
    j["preemptions"] = run.preemptions;
    j["preempted_gpu_hours"] = Round(run.preempted_gpu_s / 3600.0);
    const double total = s.gpu_hours + run.preempted_gpu_s / 3600.0;
    j["preempted_gpu_hours_pct"] =
        Round(total > 0 ? 100.0 * run.preempted_gpu_s / 3600.0 / total : 0);
  }
  if (run.gpu_failures) {
    OrderedJson events;
    size_t total = 0;
    for (const auto& [action, count] : run.gpu_failure_events) {
      events[action] = count;
      total += count;
    }
    events["total"] = total;
    j["gpu_failures"] = std::move(events);
    j["failed_jobs_by_gpu_failure"] = run.failed_jobs_by_gpu_failure;
    j["requeues_by_gpu_failure"] = run.requeues_by_gpu_failure;
    j["gpu_hours_lost_to_failures"] = Round(run.gpu_failure_lost_gpu_s / 3600.0);
    j["gpu_hours_out_of_service"] = Round(run.out_of_service_gpu_s / 3600.0);
  }
  j["sample_interval_s"] = s.sample_interval_s;
  return j;
}

std::string TimedReportText(const TimedRunInfo& info, const TimedRun& run, const TimedSummary& s) {
  std::string out;
  out += fmt::format("workload     {} ({})\n", info.workload, info.trace_format);
  out += fmt::format("cluster      {} ({} nodes, {} GPUs)\n", info.cluster, info.nodes,
                     run.capacity.gpu_milli / 1000);
  out += fmt::format("scheduler    queue={} start={} placement={} fair-group={} seed={}\n",
                     info.queue_policy, info.start_rule, info.placement_policy, info.fair_group,
                     info.seed);
  if (!info.gpu_failures.empty()) out += fmt::format("failures     {}\n", info.gpu_failures);
  out += fmt::format("jobs         {} total: {} finished, {} timed out, {} never fit", s.jobs,
                     s.finished, s.timed_out, s.never_fits);
  if (s.never_started > 0) out += fmt::format(", {} never started", s.never_started);
  if (run.gpu_failures) out += fmt::format(", {} failed by a GPU", s.gpu_failed);
  out += "\n\n";
  out += fmt::format("{:<18}{:>12}{:>12}{:>12}{:>12}\n", "seconds", "mean", "median", "p95", "p99");
  auto row = [&](const char* name, const Distribution& d) {
    out += fmt::format("{:<18}{:>12.0f}{:>12.0f}{:>12.0f}{:>12.0f}\n", name, d.mean, d.median,
                       d.p95, d.p99);
  };
  row("JCT", s.jct_s);
  row("queueing delay", s.delay_s);
  out += fmt::format("\nmakespan     {} s ({})\n", s.makespan_s,
                     Hours(static_cast<double>(s.makespan_s)));
  out += fmt::format("GPU alloc    mean {:.2f}%, peak {:.2f}% ({:.0f} GPU-hours)\n",
                     s.mean_gpu_alloc_pct, s.peak_gpu_alloc_pct, s.gpu_hours);
  out += fmt::format("fairness     Jain's index {:.4f} over {} groups (service ratio)\n",
                     s.jain_index, s.groups.size());
  out += fmt::format(
      "             Jain's index {:.4f} over share attainment, {:.4f} moment by moment "
      "(fair share)\n",
      s.share_jain_index, s.share_jain_mean);
  if (run.preemption) {
    const double lost_h = run.preempted_gpu_s / 3600.0;
    out += fmt::format(
        "preemption   {} victims stopped, {:.0f} GPU-hours of work lost ({:.2f}% of "
        "GPU-hours used)\n",
        run.preemptions, lost_h,
        s.gpu_hours + lost_h > 0 ? 100.0 * lost_h / (s.gpu_hours + lost_h) : 0.0);
  }
  if (run.gpu_failures) out += GpuFailureText(run);
  out += "\n";
  out += fmt::format("{:<16}{:>8}{:>14}{:>14}{:>12}{:>9}{:>9}{:>9}\n", "group", "jobs",
                     "mean JCT s", "mean delay s", "GPU-hours", "share", "service", "attained");
  for (const GroupStats& g : s.groups) {
    out += fmt::format("{:<16}{:>8}{:>14.0f}{:>14.0f}{:>12.1f}{:>8.1f}%{:>9.3f}{:>9.3f}\n",
                       g.group.substr(0, 15), g.jobs, g.mean_jct_s, g.mean_delay_s, g.gpu_hours,
                       100.0 * g.gpu_hours_share, g.service_ratio, g.share_attainment);
  }
  size_t shown = 0;
  for (const JobRecord& j : run.jobs) {
    if (j.fate != JobFate::kNeverFits && j.fate != JobFate::kNeverStarted) continue;
    if (shown++ == 0) out += "\njobs that never ran:\n";
    if (shown > 10) continue;
    out += fmt::format("  {} ({}): {}\n", j.id, JobFateName(j.fate), j.reason);
  }
  if (shown > 10) out += fmt::format("  ... and {} more\n", shown - 10);
  return out;
}

std::string AllocationCsv(const TimedSummary& s) {
  std::string out = "time_s,gpu_alloc_pct,running_jobs,pending_jobs\n";
  for (const AllocationSample& a : s.samples) {
    out +=
        fmt::format("{},{:.3f},{},{}\n", a.time_s, a.gpu_alloc_pct, a.running_jobs, a.pending_jobs);
  }
  return out;
}

std::string GroupsCsv(const TimedSummary& s) {
  std::string out =
      "group,jobs,mean_jct_s,mean_delay_s,gpu_hours,gpu_hours_share,service_ratio,"
      "share_attainment\n";
  for (const GroupStats& g : s.groups) {
    out += fmt::format("{},{},{:.3f},{:.3f},{:.3f},{:.5f},{:.5f},{:.5f}\n", CsvField(g.group),
                       g.jobs, g.mean_jct_s, g.mean_delay_s, g.gpu_hours, g.gpu_hours_share,
                       g.service_ratio, g.share_attainment);
  }
  return out;
}

std::string JobsCsv(const TimedRun& run) {
  std::string out =
      "id,user,project,submit_s,start_s,end_s,duration_s,gpu_milli,tasks,fate,reason,"
      "waited_s,preemptions,lost_s,gpu_failures\n";
  for (const JobRecord& j : run.jobs) {
    // Its wait over every attempt (what the delay figures count), -1 when it never started.
    const int64_t waited = j.waited_s >= 0  ? j.waited_s
                           : j.start_s >= 0 ? j.start_s - j.submit_s
                                            : -1;
    out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", CsvField(j.id),
                       CsvField(j.user), CsvField(j.project), j.submit_s, j.start_s, j.end_s,
                       j.duration_s, j.gpu_milli, j.num_tasks, JobFateName(j.fate),
                       CsvField(j.reason), waited, j.preemptions, j.lost_s, j.gpu_failures);
  }
  return out;
}

}  // namespace gpupool::sim
