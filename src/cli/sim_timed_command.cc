// `gpupool sim timed`: the time-driven experiment (docs/sim.md, "Time-driven
// experiment"). Jobs from a Philly job list, an openb pod list or our generic CSV/JSON
// format arrive at their submission times on a cluster given as a node CSV or a spec
// ("100x8:V100"); the production queue and placement policies schedule them on a
// simulated clock. Prints a summary (text or --json) and, with --out-dir, writes
// allocation.csv, groups.csv, jobs.csv and summary.json. Exit codes: 0 success,
// 1 runtime failure (including bad input files), 2 usage error.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cli/commands.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "sched/admission/limits.h"
#include "sched/policy_registry.h"
#include "sched/queue/queue_policy_registry.h"
#include "sim/csv_table.h"
#include "sim/openb_reader.h"
#include "sim/svg_plot.h"
#include "sim/timed/cluster_spec.h"
#include "sim/timed/generic_trace_reader.h"
#include "sim/timed/gpu_failures.h"
#include "sim/timed/openb_timed_reader.h"
#include "sim/timed/philly_reader.h"
#include "sim/timed/timed_experiment.h"
#include "sim/timed/timed_metrics.h"
#include "sim/timed/timed_report.h"

namespace gpupool::cli {
namespace {

struct TimedFlags {
  std::string trace;
  std::string format = "auto";
  std::string nodes;
  std::string cluster;
  std::string queue = "fifo";
  bool backfill = false;
  std::string start_rule;
  size_t backfill_depth = 1000;
  std::string policy = "default";
  uint64_t seed = 42;
  std::string fair_by = "user";
  bool preemption = false;
  int64_t min_runtime = 600;
  std::string preempt_shares = "equal";
  int64_t fair_starving_after = 0;
  bool fair_shortest_first = false;
  std::string fair_order = "share";
  double fair_sjf_bound = 0;
  double fair_sjf_penalty = 0;
  std::string preempt_by = "share";
  double preempt_service_gap = 0;
  int64_t preempt_wait_budget = 0;
  int32_t preempt_max_times = 0;
  std::string preempt_resume = "queue";
  int64_t starving_after = 0;
  int64_t checkpoint_interval = 0;
  double gpu_failure_rate = 0;
  std::string gpu_failure_events;
  std::string gpu_failure_mix;
  int64_t gpu_repair_time = 86400;
  bool requeue_on_failure = false;
  std::string health_xid;
  int64_t gpu_failure_seed = -1;  // -1: --seed
  std::vector<std::string> weights;
  std::string limits_file;
  int gpus_per_node = 0;
  int64_t cpu_per_gpu = 4000;
  int64_t mem_per_gpu = 16384;
  double time_limit_factor = 0;
  int64_t default_time_limit = 0;
  size_t limit = 0;
  int64_t sample_interval = 0;
  std::string out_dir;
  std::string plot;  // --plot FILE.svg
  bool json = false;
};

// The run over time: GPU allocation, running and pending jobs (the summary's samples),
// and the mean queueing delay of the jobs submitted in each sample interval.
std::vector<sim::PlotPanel> TimedPanels(const sim::TimedRun& run, const sim::TimedSummary& s) {
  const double step = static_cast<double>(std::max<int64_t>(s.sample_interval_s, 1));
  sim::PlotPanel alloc{"GPU allocation",
                       "hours since the first submission",
                       "GPUs allocated (% of the cluster)",
                       {},
                       0,
                       100};
  sim::PlotPanel jobs{"Jobs", "hours since the first submission", "jobs", {}, 0, std::nullopt};
  sim::PlotSeries a{"allocated", {}, {}, {}, {}};
  sim::PlotSeries running{"running", {}, {}, {}, {}};
  sim::PlotSeries pending{"pending", {}, {}, {}, {}};
  for (const sim::AllocationSample& x : s.samples) {
    const double h = static_cast<double>(x.time_s) / 3600.0;
    a.x.push_back(h);
    a.y.push_back(x.gpu_alloc_pct);
    running.x.push_back(h);
    running.y.push_back(static_cast<double>(x.running_jobs));
    pending.x.push_back(h);
    pending.y.push_back(static_cast<double>(x.pending_jobs));
  }
  alloc.series = {std::move(a)};
  jobs.series = {std::move(running), std::move(pending)};
  // Mean delay by submission interval; an interval with no start is a gap.
  const size_t bins = s.samples.empty() ? 1 : s.samples.size();
  std::vector<double> sum(bins, 0);
  std::vector<int64_t> count(bins, 0);
  for (const sim::JobRecord& j : run.jobs) {
    if (j.start_s < 0) continue;
    const auto b = static_cast<size_t>(static_cast<double>(j.submit_s) / step);
    if (b >= bins) continue;
    sum[b] += static_cast<double>(j.start_s - j.submit_s) / 60.0;
    ++count[b];
  }
  sim::PlotPanel delay{"Queueing delay",
                       "hours since the first submission (of the submission)",
                       "mean wait before start (minutes)",
                       {},
                       0,
                       std::nullopt};
  sim::PlotSeries d{"mean delay of the jobs submitted then", {}, {}, {}, {}};
  for (size_t b = 0; b < bins; ++b) {
    d.x.push_back(static_cast<double>(b) * step / 3600.0);
    d.y.push_back(count[b] > 0 ? sum[b] / static_cast<double>(count[b]) : std::nan(""));
  }
  delay.series = {std::move(d)};
  return {std::move(alloc), std::move(jobs), std::move(delay)};
}

// Picks the reader from the file's header when --format is auto.
Result<std::string> DetectFormat(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, size_t{1} << 30));
  std::string_view head = Trim(text);
  if (!head.empty() && (head.front() == '[' || head.front() == '{')) return std::string("generic");
  const size_t eol = head.find('\n');
  GP_ASSIGN_OR_RETURN(sim::CsvTable header, sim::CsvTable::Parse(head.substr(0, eol), path));
  if (header.HasColumn("num_gpus") && header.HasColumn("cluster")) return std::string("philly");
  if (header.HasColumn("creation_time") || header.HasColumn("gpu_spec")) {
    return std::string("openb");
  }
  return std::string("generic");
}

Result<std::vector<sim::TraceJob>> ReadTrace(const TimedFlags& f, const std::string& format,
                                             int gpus_per_node) {
  if (format == "philly") {
    sim::PhillyOptions o;
    o.gpus_per_node = gpus_per_node;
    o.cpu_milli_per_gpu = f.cpu_per_gpu;
    o.memory_mib_per_gpu = f.mem_per_gpu;
    o.time_limit_factor = f.time_limit_factor;
    o.max_jobs = f.limit;
    return sim::ReadPhillyFile(f.trace, o);
  }
  if (format == "openb") return sim::ReadOpenbTimedFile(f.trace, f.limit);
  GP_ASSIGN_OR_RETURN(std::vector<sim::TraceJob> jobs, sim::ReadGenericTraceFile(f.trace));
  if (f.limit > 0 && jobs.size() > f.limit) jobs.resize(f.limit);
  return jobs;
}

Status WriteOutputs(const std::string& dir, const std::string& summary_json,
                    const sim::TimedRun& run, const sim::TimedSummary& s) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Status::Unavailable(
        fmt::format("cannot create output directory '{}': {}", dir, ec.message()));
  }
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/allocation.csv", sim::AllocationCsv(s)));
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/groups.csv", sim::GroupsCsv(s)));
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/jobs.csv", sim::JobsCsv(run)));
  return WriteFileAtomically(dir + "/summary.json", summary_json + "\n");
}

// Redraws "[=====>    ] 41% 1234/5000 jobs" on stderr when the percentage changes.
class ProgressLine {
 public:
  void Update(size_t done, size_t total) {
    const int pct = total > 0 ? static_cast<int>(done * 100 / total) : 100;
    if (pct == last_) return;
    last_ = pct;
    constexpr int kWidth = 40;
    std::string bar(static_cast<size_t>(pct * kWidth / 100), '=');
    bar.resize(kWidth, ' ');
    WriteStderr(fmt::format("\r[{}] {:3d}% {}/{} jobs", bar, pct, done, total));
  }
  void Finish() {
    if (last_ >= 0) WriteStderr("\n");
  }

 private:
  int last_ = -1;
};

// The flags that need no file: the start rule, the policies and fair-share weights. An
// error is a usage error (exit 2) naming the flag.
Status CheckFlags(const TimedFlags& f, sched::StartRule* rule,
                  sched::QueuePolicyConfig* queue_config) {
  if (f.nodes.empty() == f.cluster.empty()) {
    return Status::InvalidArgument(
        "give the cluster as exactly one of --nodes FILE.csv or --cluster SPEC");
  }
  *rule = f.backfill ? sched::StartRule::kEasyBackfill : sched::StartRule::kStrict;
  if (!f.start_rule.empty()) {
    GP_ASSIGN_OR_RETURN(sched::StartRule parsed, sched::ParseStartRule(f.start_rule));
    if (f.backfill && parsed != sched::StartRule::kEasyBackfill) {
      return Status::InvalidArgument("--backfill means --start-rule easy; give one or the other");
    }
    *rule = parsed;
  }
  if (!sched::BuiltinQueuePolicies().Contains(f.queue)) {
    return sched::BuiltinQueuePolicies().Create(f.queue).status();
  }
  if (!sched::BuiltinPlacementPolicies().Contains(f.policy)) {
    return sched::BuiltinPlacementPolicies().Create(f.policy).status();
  }
  queue_config->fair_group =
      f.fair_by == "project" ? sched::FairShareGroup::kProject : sched::FairShareGroup::kUser;
  for (const std::string& w : f.weights) {
    const size_t eq = w.rfind('=');
    std::optional<double> weight =
        eq == std::string::npos ? std::nullopt : ParseDouble(std::string_view(w).substr(eq + 1));
    if (!weight || !(*weight > 0) || eq == 0) {
      return Status::InvalidArgument(
          fmt::format("--weight '{}': expected GROUP=WEIGHT with a positive weight", w));
    }
    queue_config->fair_weights[w.substr(0, eq)] = *weight;
  }
  if (f.queue != "fair") {
    const char* fair_only = f.fair_shortest_first       ? "--fair-shortest-first"
                            : f.fair_order != "share"   ? "--fair-order"
                            : f.fair_sjf_bound > 0      ? "--fair-sjf-bound"
                            : f.fair_sjf_penalty > 0    ? "--fair-sjf-penalty"
                            : f.fair_starving_after > 0 ? "--fair-starving-after"
                                                        : nullptr;
    if (fair_only != nullptr) {
      return Status::InvalidArgument(
          fmt::format("{} orders the fair-share queue: add --queue fair (the queue is {})",
                      fair_only, f.queue));
    }
  }
  if (f.preempt_service_gap > 0 && f.preempt_by == "share") {
    return Status::InvalidArgument(
        "--preempt-service-gap needs --preempt-by service or --preempt-by attainment");
  }
  if (f.fair_order != "share" && f.fair_sjf_bound > 0) {
    return Status::InvalidArgument(
        fmt::format("--fair-order {} and --fair-sjf-bound: give one or the other", f.fair_order));
  }
  if (f.fair_order != "share" && f.preempt_by != "share" && f.fair_order != f.preempt_by) {
    return Status::InvalidArgument(
        fmt::format("--fair-order {} and --preempt-by {}: both measure how served a group is; "
                    "give them the same measure (service or attainment)",
                    f.fair_order, f.preempt_by));
  }
  if (f.fair_sjf_penalty > 0 && !(f.fair_sjf_bound > 0)) {
    return Status::InvalidArgument(
        "--fair-sjf-penalty stretches the order of --fair-sjf-bound: add --fair-sjf-bound K "
        "(1000: no bound)");
  }
  queue_config->fair_sjf_bound = f.fair_sjf_bound;
  queue_config->fair_sjf_penalty = f.fair_sjf_penalty;
  return Status::Ok();
}

// --gpu-failure-*: what the flags say, less the events file (read with the inputs). An
// error is a usage error naming the flag.
Status CheckFailureFlags(const TimedFlags& f, sim::GpuFailureOptions* out) {
  out->rate_per_gpu_day = f.gpu_failure_rate;
  out->repair_s = f.gpu_repair_time;
  out->requeue = f.requeue_on_failure;
  out->seed = f.gpu_failure_seed >= 0 ? static_cast<uint64_t>(f.gpu_failure_seed) : f.seed;
  out->health_xid = f.health_xid;
  if (!f.gpu_failure_mix.empty()) {
    if (f.gpu_failure_rate <= 0) {
      return Status::InvalidArgument("--gpu-failure-mix needs --gpu-failure-rate");
    }
    Result<std::vector<sim::XidWeight>> mix = sim::ParseXidMix(f.gpu_failure_mix);
    if (!mix.ok()) return mix.status().WithContext("--gpu-failure-mix");
    out->mix = std::move(*mix);
  }
  Result<gpu::HealthPolicy> policy = gpu::HealthPolicy::Create(f.health_xid);
  if (!policy.ok()) return policy.status().WithContext("--health-xid");
  return Status::Ok();
}

// --limits-file: the JSON `gpupool limits --json` prints and PUT /v1/limits takes.
Result<sched::Limits> ReadLimitsFile(const std::string& path) {
  if (path.empty()) return sched::Limits{};
  auto fail = [&](const Status& s) { return s.WithContext("--limits-file " + path); };
  Result<std::string> text = ReadFileToString(path, size_t{16} << 20);
  if (!text.ok()) return fail(text.status());
  Result<Json> json = ParseJson(*text, path);
  if (!json.ok()) return fail(json.status());
  Result<sched::Limits> limits = sched::LimitsFromJson(*json);
  if (!limits.ok()) return fail(limits.status());
  return limits;
}

// Reads the cluster and the trace (its format detected unless --format names it).
Result<std::vector<sim::TraceJob>> ReadInputs(const TimedFlags& f, sched::ClusterState* cluster,
                                              std::string* format) {
  GP_ASSIGN_OR_RETURN(
      std::vector<sched::NodeSpec> node_specs,
      f.nodes.empty() ? sim::ParseClusterSpec(f.cluster) : sim::ReadOpenbNodes(f.nodes));
  GP_ASSIGN_OR_RETURN(*cluster, sim::BuildCluster(node_specs));
  int widest = 0;
  for (const auto& n : node_specs) widest = std::max(widest, static_cast<int>(n.num_gpus));
  *format = f.format;
  if (*format == "auto") {
    GP_ASSIGN_OR_RETURN(*format, DetectFormat(f.trace));
  }
  return ReadTrace(f, *format, f.gpus_per_node > 0 ? f.gpus_per_node : std::max(widest, 1));
}

// Prints the summary and writes --out-dir and --plot.
Status Report(const TimedFlags& f, const sim::TimedRunInfo& info, const sim::TimedRun& run,
              const sim::TimedSummary& summary) {
  const std::string json = DumpJson(sim::TimedReportJson(info, run, summary), 2);
  if (!f.out_dir.empty()) GP_RETURN_IF_ERROR(WriteOutputs(f.out_dir, json, run, summary));
  if (!f.plot.empty()) {
    const std::string title = "Timed run: " + f.trace + ", " + f.queue + " queue, " +
                              info.start_rule + " start, " + f.policy + " placement";
    GP_RETURN_IF_ERROR(
        WriteFileAtomically(f.plot, sim::RenderSvgPlot(title, TimedPanels(run, summary)))
            .WithContext("--plot"));
  }
  const std::string out = f.json ? json + "\n" : sim::TimedReportText(info, run, summary);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!f.json && !f.out_dir.empty()) {
    std::printf("\nwrote %s/{allocation,groups,jobs}.csv and summary.json\n", f.out_dir.c_str());
  }
  if (!f.json && !f.plot.empty()) std::printf("wrote %s\n", f.plot.c_str());
  return Status::Ok();
}

int RunTimed(const TimedFlags& f) {
  auto fail = [](const Status& s) {
    WriteStderr(fmt::format("gpupool sim timed: {}\n", s.message()));
    return 1;
  };
  sched::StartRule rule = sched::StartRule::kStrict;
  sched::QueuePolicyConfig queue_config = sim::TimedOptions{}.queue_config;  // site priorities
  if (Status s = CheckFlags(f, &rule, &queue_config); !s.ok()) {
    WriteStderr(fmt::format("gpupool sim timed: {}\n", s.message()));
    return 2;
  }
  sim::TimedOptions options;
  if (Status s = CheckFailureFlags(f, &options.gpu_failures); !s.ok()) {
    WriteStderr(fmt::format("gpupool sim timed: {}\n", s.message()));
    return 2;
  }
  if (!f.gpu_failure_events.empty()) {
    auto events = sim::ReadGpuFailureEventsFile(f.gpu_failure_events);
    if (!events.ok()) return fail(events.status().WithContext("--gpu-failure-events"));
    options.gpu_failures.events = std::move(*events);
  }
  Result<sched::Limits> limits = ReadLimitsFile(f.limits_file);
  if (!limits.ok()) return fail(limits.status());
  options.limits = std::move(*limits);
  sched::ClusterState cluster;
  std::string format;
  auto jobs = ReadInputs(f, &cluster, &format);
  if (!jobs.ok()) return fail(jobs.status());
  size_t unplannable = 0;
  for (sim::TraceJob& j : *jobs) {
    if (j.time_limit_s == 0) j.time_limit_s = f.default_time_limit;
    unplannable += j.time_limit_s == 0 && j.runtime_estimate_s == 0;
  }
  if (unplannable > 0 && (rule == sched::StartRule::kEasyBackfill || f.queue == "sjf")) {
    WriteStderr(fmt::format(
        "gpupool sim timed: warning: {} of {} jobs have no time limit or estimate, so {} "
        "cannot plan with them; give --time-limit-factor (Philly) or --default-time-limit\n",
        unplannable, jobs->size(), rule == sched::StartRule::kEasyBackfill ? "backfill" : "sjf"));
  }
  options.queue_policy = f.queue;
  options.queue_config = queue_config;
  options.queue_config.fair_starving_after_s = f.fair_starving_after;
  options.queue_config.fair_shortest_first = f.fair_shortest_first;
  options.start_rule = rule;
  options.max_backfill_tries = f.backfill_depth;
  options.placement_policy = f.policy;
  options.seed = f.seed;
  options.preemption = f.preemption;
  options.preempt.min_runtime_s = f.min_runtime;
  options.preempt.by_project = queue_config.fair_group == sched::FairShareGroup::kProject;
  options.preempt.weights = queue_config.fair_weights;  // --weight: the same shares
  options.preempt.shares_by_demand = f.preempt_shares == "demand";
  options.preempt.starving_after_s = f.starving_after;
  options.checkpoint_interval_s = f.checkpoint_interval;
  options.service_order = f.fair_order != "share";
  options.service_preemption = f.preempt_by != "share";
  options.service_by_attainment = f.fair_order == "attainment" || f.preempt_by == "attainment";
  options.service_gap = f.preempt_service_gap;
  options.victim_wait_budget_s = f.preempt_wait_budget;
  options.victim_max_preemptions = f.preempt_max_times;
  auto resume = sim::ParsePreemptResume(f.preempt_resume);  // IsMember checked the name
  if (!resume.ok()) return fail(resume.status());
  options.preempt_resume = *resume;
  ProgressLine progress;
  if (isatty(STDERR_FILENO) != 0) {
    options.progress = [&progress](size_t done, size_t total) { progress.Update(done, total); };
  }
  auto run = sim::RunTimedExperiment(cluster, *jobs, options);
  progress.Finish();
  if (!run.ok()) return fail(run.status());
  sim::TimedRunInfo info;
  info.workload = f.trace;
  info.trace_format = format;
  info.cluster = f.nodes.empty() ? f.cluster : f.nodes;
  info.nodes = cluster.num_nodes();
  info.queue_policy = f.queue;
  info.start_rule = std::string(sched::StartRuleName(rule));
  info.placement_policy = f.policy;
  info.fair_group = f.fair_by;
  info.seed = f.seed;
  const sim::GpuFailureOptions& gf = options.gpu_failures;
  if (gf.enabled()) {
    info.gpu_failures = fmt::format(
        "{}repair {} s, jobs {}{}",
        gf.rate_per_gpu_day > 0
            ? fmt::format("rate {} per GPU per day (seed {}), ", gf.rate_per_gpu_day, gf.seed)
            : "",
        gf.repair_s, gf.requeue ? "requeue" : "fail",
        f.gpu_failure_events.empty() ? "" : ", events " + f.gpu_failure_events);
  }
  const sim::TimedSummary summary =
      sim::Summarize(*run, queue_config.fair_group, f.sample_interval);
  if (Status s = Report(f, info, *run, summary); !s.ok()) return fail(s);
  return 0;
}

// The preemption, fair-share variant and GPU failure options of `sim timed`.
void AddPreemptionAndFailureOptions(CLI::App* cmd, TimedFlags& f) {
  TimedFlags* flags = &f;
  CLI::Option* preemption =
      cmd->add_flag("--preemption", flags->preemption,
                    "every job is preemptible: a waiting job of higher priority, or of a group "
                    "below its fair share of GPUs, stops the newest jobs of groups above theirs "
                    "(docs/sim.md); the report gains preemptions and GPU-hours lost");
  cmd->add_option("--min-runtime", flags->min_runtime,
                  "with --preemption: seconds a job runs before it may be preempted")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 86400))
      ->needs(preemption);
  cmd->add_flag("--fair-shortest-first", flags->fair_shortest_first,
                "with --queue fair: each group's own jobs go shortest run time first (its "
                "estimate, else its time limit) instead of oldest first");
  cmd->add_option("--fair-order", flags->fair_order,
                  "with --queue fair (an experiment): groups by dominant share (share), or "
                  "least served first by their service ratio so far (service) or by their "
                  "fair-share attainment so far (attainment; docs/sim.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"share", "service", "attainment"}));
  cmd->add_option("--fair-sjf-bound", flags->fair_sjf_bound,
                  "with --queue fair (an experiment): every job shortest first, except that a "
                  "group above K times an equal share goes after the others (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--fair-sjf-penalty", flags->fair_sjf_penalty,
                  "with --fair-sjf-bound (an experiment): a job's run time in that order is "
                  "multiplied by 1 + B x how far its group is over an equal share (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--preempt-by", flags->preempt_by,
                  "with --preemption (an experiment): a waiting job preempts groups over their "
                  "share while its own is under (share) or any better-served group over its "
                  "share (service, attainment: as --fair-order measures it; docs/sim.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"share", "service", "attainment"}))
      ->needs(preemption);
  cmd->add_option("--preempt-service-gap", flags->preempt_service_gap,
                  "with --preempt-by service or attainment: the victim's group must be better "
                  "served by more than this (service ratios or attainments, 0..1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->needs(preemption);
  cmd->add_option("--preempt-wait-budget", flags->preempt_wait_budget,
                  "with --preemption (an experiment): a job that has waited more than this "
                  "many seconds in all is never a victim (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 86400))
      ->needs(preemption);
  cmd->add_option("--preempt-max-times", flags->preempt_max_times,
                  "with --preemption (an experiment): a job already preempted this many times "
                  "is never a victim again (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000))
      ->needs(preemption);
  cmd->add_option("--preempt-resume", flags->preempt_resume,
                  "with --preemption (an experiment): where a victim re-enters the queue's "
                  "order: its place (queue), ahead of every job never preempted (first), "
                  "first only while its group is within an equal share (first-under-share), "
                  "or its place with a shortest-first key less the work it kept (remaining)")
      ->capture_default_str()
      ->check(CLI::IsMember({"queue", "first", "first-under-share", "remaining"}))
      ->needs(preemption);
  cmd->add_option("--fair-starving-after", flags->fair_starving_after,
                  "with --queue fair: a job waiting this many seconds goes before every job "
                  "by share, the oldest first (aging; 0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 86400));
  cmd->add_option("--preempt-shares", flags->preempt_shares,
                  "with --preemption: a group's fair share of GPUs is capacity / groups with "
                  "jobs (equal) or its max-min share by demand (demand)")
      ->capture_default_str()
      ->check(CLI::IsMember({"equal", "demand"}))
      ->needs(preemption);
  cmd->add_option("--preempt-starving-after", flags->starving_after,
                  "with --preemption: a job waiting this many seconds since submission counts "
                  "as under its group's share (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 86400))
      ->needs(preemption);
  cmd->add_option("--checkpoint-interval", flags->checkpoint_interval,
                  "a job stopped by preemption or a GPU failure keeps the work of its last "
                  "checkpoint, taken every this many seconds of run time (0: none, it starts "
                  "over)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 86400));
  cmd->add_option("--gpu-failure-rate", flags->gpu_failure_rate,
                  "GPU failures drawn at this rate per GPU per day (a Poisson process seeded by "
                  "--seed); each is an Xid of --gpu-failure-mix, handled by the health policy "
                  "(docs/health.md)")
      ->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--gpu-failure-events", flags->gpu_failure_events,
                  "GPU failures replayed from a CSV time_s,node,gpu,xid (time in seconds since "
                  "the first submission)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--gpu-failure-mix", flags->gpu_failure_mix,
                  "Xids of drawn failures with weights XID:W[,...] (default: the mix in "
                  "docs/sim.md)");
  cmd->add_option("--gpu-failure-seed", flags->gpu_failure_seed,
                  "seeds the drawn failures alone (default: --seed), so that failures can vary "
                  "while placement stays the same")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu-repair-time", flags->gpu_repair_time,
                  "seconds until a cordoned GPU or drained node is back in service")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{365} * 86400));
  cmd->add_flag("--requeue-on-failure", flags->requeue_on_failure,
                "jobs ended by a cordoning GPU failure go back to the queue (as --requeue); "
                "otherwise they fail, unless the trace job has requeue=1");
  cmd->add_option("--health-xid", flags->health_xid,
                  "override the Xid table as the server's --health-xid does, XID:ACTION[,...]");
}

}  // namespace

void RegisterSimTimedCommand(CLI::App& sim, CommandContext& ctx) {
  auto flags = std::make_shared<TimedFlags>();
  CLI::App* cmd = sim.add_subcommand(
      "timed", "time-driven experiment: arrivals and departures on a simulated clock");
  cmd->add_option("--trace", flags->trace,
                  "job trace: a Philly job list, an openb pod list, or the generic CSV/JSON "
                  "format (docs/sim.md)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--format", flags->format, "trace format: auto, philly, openb or generic")
      ->check(CLI::IsMember({"auto", "philly", "openb", "generic"}))
      ->capture_default_str();
  cmd->add_option("--nodes", flags->nodes,
                  "cluster as a node CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--cluster", flags->cluster,
                  "synthetic cluster COUNTxGPUS[:MODEL[:CPU_MILLI[:MEMORY_MIB]]][,...], e.g. "
                  "100x8:V100");
  cmd->add_option("--queue", flags->queue, "queue policy: fifo, priority, sjf or fair")
      ->capture_default_str();
  cmd->add_flag("--backfill", flags->backfill,
                "EASY backfill: later jobs may start if they do not delay the first blocked "
                "job's reservation (needs time limits)");
  cmd->add_option("--start-rule", flags->start_rule,
                  "strict (default), easy (= --backfill) or skip (start whatever fits)");
  cmd->add_option("--backfill-depth", flags->backfill_depth,
                  "jobs tried after the first blocked one per pass (0 = all)")
      ->capture_default_str();
  cmd->add_option("--policy", flags->policy, "placement policy (see `gpupool sim policies`)")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "seeds the placement policy and node order")
      ->capture_default_str();
  AddPreemptionAndFailureOptions(cmd, *flags);
  cmd->add_option("--fair-by", flags->fair_by, "fair-share and report groups: user or project")
      ->check(CLI::IsMember({"user", "project"}))
      ->capture_default_str();
  cmd->add_option("--weight", flags->weights, "fair-share weight GROUP=WEIGHT (repeatable)");
  cmd->add_option("--limits-file", flags->limits_file,
                  "per-user and per-project limits on GPUs and running jobs, as JSON in the "
                  "form `gpupool limits --json` prints")
      ->check(CLI::ExistingFile);
  cmd->add_option("--gpus-per-node", flags->gpus_per_node,
                  "Philly: split jobs wider than this into per-node tasks (default: the widest "
                  "node)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--cpu-per-gpu", flags->cpu_per_gpu, "Philly: CPU milli per GPU of a task")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--mem-per-gpu", flags->mem_per_gpu, "Philly: memory MiB per GPU of a task")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--time-limit-factor", flags->time_limit_factor,
                  "Philly: time limit = run time x this (0 = no limits)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--default-time-limit", flags->default_time_limit,
                  "seconds; the limit of jobs that have none (0 = none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--limit", flags->limit, "read only the first N jobs (0 = all)");
  cmd->add_option("--sample-interval", flags->sample_interval,
                  "seconds between allocation samples (0 = about 1,000 samples)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--out-dir", flags->out_dir,
                  "write allocation.csv, groups.csv, jobs.csv and summary.json here");
  cmd->add_option("--plot", flags->plot,
                  "draw GPU allocation, running and pending jobs and queueing delay over time "
                  "as SVG to this file");
  cmd->add_flag("--json", flags->json, "print the summary as JSON");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunTimed(*flags); });
}

}  // namespace gpupool::cli
