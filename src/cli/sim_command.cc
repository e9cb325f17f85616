// `gpupool sim`: the trace-driven simulator.
//   sim saturation  the FGD saturation experiment (docs/sim.md), writes allo.csv,
//                   frag.csv and frag_ratio.csv in the published artifact's format
//   sim policies    lists the placement policies
//   sim timed       the time-driven experiment (sim_timed_command.cc)
// Results depend only on the inputs and seeds; the wall clock is read only to report
// how long a run took. Exit codes: 0 success, 1 runtime failure, 2 usage error.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "sched/policy_registry.h"
#include "sim/campaign.h"
#include "sim/openb_reader.h"
#include "sim/result_files.h"
#include "sim/saturation.h"
#include "sim/svg_plot.h"

namespace gpupool::cli {
namespace {

struct SaturationFlags {
  std::string nodes;
  std::string pods;
  std::string policy = "default";
  std::string seeds = "42";
  double tune = 1.3;
  std::string out_dir;
  std::string plot;  // --plot FILE.svg
  bool json = false;
  int jobs = 0;
};

// Draws "[=====>    ] 41% 123456/300000 arrivals" on stderr until stopped. Only used
// when stderr is a terminal, so logs and pipes stay clean.
class ProgressBar {
 public:
  ProgressBar(const std::atomic<int64_t>* done, int64_t total) : done_(done), total_(total) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ProgressBar() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    Draw();
    WriteStderr("\n");
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) Draw();
  }
  void Draw() const {
    const int64_t d = std::min(done_->load(std::memory_order_relaxed), total_);
    const int width = 40;
    const int filled = total_ > 0 ? static_cast<int>(d * width / total_) : width;
    std::string bar(static_cast<size_t>(filled), '=');
    bar.resize(static_cast<size_t>(width), ' ');
    WriteStderr(fmt::format("\r[{}] {:3d}% {}/{} arrivals", bar,
                            total_ > 0 ? d * 100 / total_ : 100, d, total_));
  }
  const std::atomic<int64_t>* done_;
  int64_t total_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// A percentage or a time for JSON: four decimals, so that 3.739999999999995 prints as
// 3.74 (the shortest form of the rounded double).
double Rounded(double x) { return std::round(x * 1e4) / 1e4; }

// The FGD paper's saturation figure: unallocated GPUs and fragmentation against the
// arrived GPU demand, one line per policy (the mean over seeds) in a band (their spread).
std::vector<sim::PlotPanel> SaturationPanels(const std::vector<sim::SaturationResult>& results,
                                             const std::string& workload) {
  std::vector<std::string> policies;
  for (const auto& r : results) {
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) {
      policies.push_back(r.policy);
    }
  }
  auto panel = [&](const std::string& title, const std::string& y_label,
                   double (*value)(const sim::SaturationResult&, int k)) {
    sim::PlotPanel p;
    p.title = title;
    p.x_label = "arrived GPU demand (% of the cluster's GPUs), " + workload;
    p.y_label = y_label;
    p.y_min = 0;
    for (const std::string& policy : policies) {
      sim::PlotSeries s;
      s.name = policy;
      for (int k = 0; k < sim::kCurvePoints; ++k) {
        double sum = 0;
        double lo = std::numeric_limits<double>::infinity();
        double hi = -lo;
        int n = 0;
        for (const auto& r : results) {
          const double v = r.policy == policy ? value(r, k) : std::nan("");
          if (!std::isfinite(v)) continue;
          sum += v;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          ++n;
        }
        const double none = std::nan("");
        s.x.push_back(k);
        s.y.push_back(n > 0 ? sum / n : none);
        s.low.push_back(n > 0 ? lo : none);
        s.high.push_back(n > 0 ? hi : none);
      }
      p.series.push_back(std::move(s));
    }
    return p;
  };
  return {panel("Unallocated GPUs", "unallocated GPUs (%)",
                [](const sim::SaturationResult& r, int k) { return 100.0 - r.curves.alloc[k]; }),
          panel("GPU fragmentation", "fragmented GPUs (% of the cluster)",
                [](const sim::SaturationResult& r, int k) { return r.curves.frag[k]; })};
}

// What `gpupool sim saturation` prints: the runs as JSON (--json) or as a table, and what
// it wrote.
void PrintSaturationReport(const SaturationFlags& f,
                           const std::vector<sim::SaturationResult>& results,
                           const std::string& workload, int64_t total_gpus, double wall_s) {
  if (f.json) {
    OrderedJson j;
    j["workload"] = workload;
    j["tune"] = f.tune;
    j["total_gpus"] = total_gpus;
    if (!f.out_dir.empty()) j["out_dir"] = f.out_dir;
    if (!f.plot.empty()) j["plot"] = f.plot;
    j["wall_seconds"] = Rounded(wall_s);
    j["runs"] = OrderedJson::array();
    for (const auto& r : results) {
      OrderedJson run;
      run["policy"] = r.policy;
      run["seed"] = r.seed;
      run["tasks"] = r.tasks;
      run["placed"] = r.placed;
      run["failed"] = r.failed;
      run["never_placeable"] = r.never_placeable;
      run["failed_shares"] = r.failed_shares;
      run["failed_whole_gpu"] = r.failed_whole;
      run["allocated_gpu_pct_at_end"] = Rounded(r.AllocatedPctAtEnd());
      run["asked_gpu_pct_at_end"] =
          Rounded(r.capacity_gpu_milli == 0 ? 0.0
                                            : 100.0 * static_cast<double>(r.placed_gpu_milli) /
                                                  static_cast<double>(r.capacity_gpu_milli));
      run["unallocated_gpu_pct_at_100"] = Rounded(r.UnallocatedAt100());
      run["frag_pct_at_100"] = Rounded(r.curves.frag[100]);
      run["frag_ratio_pct_at_100"] = Rounded(r.curves.frag_ratio[100]);
      j["runs"].push_back(std::move(run));
    }
    std::puts(DumpJson(j, 2).c_str());
  } else {
    std::printf("%-20s %6s %8s %8s %8s %14s %10s\n", "policy", "seed", "tasks", "placed", "failed",
                "unalloc@100 %", "frag@100 %");
    for (const auto& r : results) {
      std::printf("%-20s %6llu %8lld %8lld %8lld %14.2f %10.2f\n", r.policy.c_str(),
                  static_cast<unsigned long long>(r.seed), static_cast<long long>(r.tasks),
                  static_cast<long long>(r.placed), static_cast<long long>(r.failed),
                  r.UnallocatedAt100(), r.curves.frag[100]);
    }
    if (!f.plot.empty()) std::printf("wrote %s\n", f.plot.c_str());
    if (f.out_dir.empty()) {
      std::printf("done in %.2f s (no --out-dir: no CSV files written)\n", wall_s);
    } else {
      std::printf("wrote %s/{allo,frag,frag_ratio}.csv in %.2f s\n", f.out_dir.c_str(), wall_s);
    }
  }
}

int RunSaturationCommand(const SaturationFlags& f) {
  const int64_t start_us = SystemClock::Get()->MonotonicMicros();
  if (f.out_dir.empty() && !f.json && f.plot.empty()) {
    WriteStderr(
        "gpupool sim saturation: --out-dir: give a directory for the CSV files, --plot FILE.svg "
        "for the figure, or --json for a summary only\n");
    return 2;
  }
  auto seeds = sim::ParseSeedList(f.seeds);
  if (!seeds.ok()) {
    WriteStderr("gpupool sim saturation: " + seeds.status().message() + "\n");
    return 2;
  }
  std::vector<std::string> policies;
  for (const auto& p : Split(f.policy, ',')) {
    if (!Trim(p).empty()) policies.emplace_back(Trim(p));
  }
  for (const auto& p : policies) {
    if (auto c = sched::BuiltinPlacementPolicies().Create(p); !c.ok()) {
      WriteStderr("gpupool sim saturation: " + c.status().message() + "\n");
      return 2;
    }
  }
  if (policies.empty() || !(f.tune > 0)) {
    WriteStderr("gpupool sim saturation: give at least one --policy and a --tune above 0\n");
    return 2;
  }
  auto nodes = sim::ReadOpenbNodes(f.nodes);
  if (!nodes.ok()) {
    WriteStderr("gpupool sim saturation: " + nodes.status().message() + "\n");
    return 1;
  }
  auto pods = sim::ReadOpenbPods(f.pods);
  if (!pods.ok()) {
    WriteStderr("gpupool sim saturation: " + pods.status().message() + "\n");
    return 1;
  }
  auto inputs = sim::SaturationInputs::Prepare(std::move(nodes).value(), std::move(pods).value());
  if (!inputs.ok()) {
    WriteStderr("gpupool sim saturation: " + inputs.status().message() + "\n");
    return 1;
  }

  std::atomic<int64_t> progress{0};
  sim::CampaignSpec spec;
  spec.policies = policies;
  spec.seeds = *seeds;
  spec.tune = f.tune;
  const unsigned hw = std::thread::hardware_concurrency();
  spec.jobs = f.jobs > 0 ? f.jobs : static_cast<int>(hw == 0 ? 1 : hw);
  spec.progress = &progress;

  Result<std::vector<sim::SaturationResult>> results = Status::Internal("not run");
  {
    // Estimate the arrivals for the bar from the first run's tuned workload.
    const auto w = sim::BuildWorkload(*inputs, spec.seeds.front(), f.tune);
    const int64_t total =
        static_cast<int64_t>(w.order.size() * spec.seeds.size() * spec.policies.size());
    std::unique_ptr<ProgressBar> bar;
    if (isatty(STDERR_FILENO)) bar = std::make_unique<ProgressBar>(&progress, total);
    results = sim::RunCampaign(*inputs, spec);
  }
  if (!results.ok()) {
    WriteStderr("gpupool sim saturation: " + results.status().message() + "\n");
    return 1;
  }
  const std::string workload = sim::WorkloadName(f.pods);
  const int64_t total_gpus = inputs->capacity_gpu_milli / 1000;
  if (!f.out_dir.empty()) {
    if (Status s = sim::WriteResultFiles(
            f.out_dir, sim::FormatResultFiles(workload, f.tune, total_gpus, *results));
        !s.ok()) {
      WriteStderr("gpupool sim saturation: " + s.message() + "\n");
      return 1;
    }
  }
  if (!f.plot.empty()) {
    size_t seeds_run = spec.seeds.size();
    const std::string title =
        fmt::format("Saturation: {} x{} tuned, {} seed{} (lines: mean; bands: min to max)",
                    workload, f.tune, seeds_run, seeds_run == 1 ? "" : "s");
    if (Status s = WriteFileAtomically(
            f.plot, sim::RenderSvgPlot(title, SaturationPanels(*results, workload)));
        !s.ok()) {
      WriteStderr("gpupool sim saturation: --plot: " + s.message() + "\n");
      return 1;
    }
  }
  const double wall_s = static_cast<double>(SystemClock::Get()->MonotonicMicros() - start_us) / 1e6;

  int64_t never = 0;
  for (const auto& r : *results) never = std::max(never, r.never_placeable);
  if (never > 0) {
    WriteStderr(
        fmt::format("gpupool sim saturation: {} tasks can never be placed (no node could host "
                    "them even when idle); they count as failed\n",
                    never));
  }
  PrintSaturationReport(f, *results, workload, total_gpus, wall_s);
  return 0;
}

int RunPolicies(bool json) {
  const auto list = sched::BuiltinPlacementPolicies().List();
  if (json) {
    OrderedJson j = OrderedJson::array();
    for (const auto& e : list) {
      j.push_back({{"name", e.name}, {"description", e.description}, {"alias_of", e.alias_of}});
    }
    std::puts(DumpJson(j, 2).c_str());
    return 0;
  }
  // The widest name sets the column (some are longer than any fixed width would allow).
  size_t width = 0;
  for (const auto& e : list) width = std::max(width, e.name.size());
  for (const auto& e : list) {
    std::printf("%-*s  %s\n", static_cast<int>(width), e.name.c_str(), e.description.c_str());
  }
  return 0;
}

}  // namespace

void RegisterSimCommand(CLI::App& app, CommandContext& ctx) {
  CLI::App* sim = app.add_subcommand("sim", "trace-driven simulator");
  sim->require_subcommand(1);

  auto flags = std::make_shared<SaturationFlags>();
  CLI::App* sat =
      sim->add_subcommand("saturation",
                          "FGD saturation experiment: arrivals without departures, allocation and "
                          "fragmentation against arrived GPU demand");
  sat->add_option("--nodes", flags->nodes, "node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->required();
  sat->add_option("--pods", flags->pods,
                  "pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...])")
      ->required();
  sat->add_option("--policy", flags->policy,
                  "placement policy, or several separated by commas (see `gpupool sim policies`)")
      ->capture_default_str();
  sat->add_option("--seeds", flags->seeds, "seeds, e.g. 42-51 or 42,43")->capture_default_str();
  sat->add_option("--tune", flags->tune, "tune the workload up to this x cluster GPU capacity")
      ->capture_default_str();
  sat->add_option("--out-dir", flags->out_dir,
                  "directory for allo.csv, frag.csv, frag_ratio.csv (needed unless --json)");
  sat->add_option("--plot", flags->plot,
                  "draw the figure (unallocated GPUs and fragmentation against arrived demand, "
                  "a line per policy, a band over seeds) as SVG to this file");
  sat->add_flag("--json", flags->json, "print a JSON summary instead of a table");
  sat->add_option("--jobs", flags->jobs, "runs in parallel (default: number of cores)");
  sat->callback([flags, &ctx] { ctx.exit_code = RunSaturationCommand(*flags); });

  auto policies_json = std::make_shared<bool>(false);
  CLI::App* pol = sim->add_subcommand("policies", "list the placement policies");
  pol->add_flag("--json", *policies_json, "print JSON");
  pol->callback([policies_json, &ctx] { ctx.exit_code = RunPolicies(*policies_json); });

  RegisterSimTimedCommand(*sim, ctx);
}

}  // namespace gpupool::cli
