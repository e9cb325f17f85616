// pass_bench: the controller's scheduling pass (JobScheduler::Plan) at issue 31's size,
// without the server: N nodes of 8 H100s, R running one-GPU jobs, P pending one-GPU jobs
// of 4 users, fair share and EASY backfill (the server's defaults). Prints the wall time
// of each pass and its starts, so a pass's own cost can be profiled (perf record) and
// compared apart from the store, the HTTP threads and a loaded machine's run queue.
//
//   build/release/bench/pass_bench --nodes 10000 --running 79000 --pending 100000
//       --passes 5 [--max-starts 1000] [--churn 1]
//
// --churn 1: between passes the jobs a pass started run (RUNNING at their placements) and
// as many of the longest-running jobs end, as a loaded pool does; without it every pass
// sees the same jobs.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "controller/job_scheduler.h"

using namespace gpupool;

namespace {

// This thread's CPU time: on a loaded machine the wall time also counts the run queue.
double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t nodes = 10000, running = 79000, pending = 100000, passes = 5, max_starts = 1000,
          churn = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t v = std::atoll(argv[i + 1]);
    if (flag == "--nodes")
      nodes = v;
    else if (flag == "--running")
      running = v;
    else if (flag == "--pending")
      pending = v;
    else if (flag == "--passes")
      passes = v;
    else if (flag == "--max-starts")
      max_starts = v;
    else if (flag == "--churn")
      churn = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  std::vector<gpu::NodeInfo> infos(static_cast<size_t>(nodes));
  std::vector<controller::SchedNode> sched_nodes;
  for (int64_t n = 0; n < nodes; ++n) {
    gpu::NodeInfo& info = infos[static_cast<size_t>(n)];
    info.hostname = "sim" + std::to_string(n);
    for (int g = 0; g < 8; ++g) {
      gpu::GpuInfo gi;
      gi.vendor = gpu::Vendor::kNvidia;
      gi.index = g;
      gi.name = "NVIDIA H100 80GB HBM3";
      gi.uuid = "GPU-" + std::to_string(n) + "-" + std::to_string(g);
      gi.memory_total_bytes = uint64_t{80} << 30;
      info.gpus.push_back(gi);
    }
    sched_nodes.push_back({info.hostname, &info, 128000, 1 << 20, false, {}});
  }
  std::vector<jobs::Job> all(static_cast<size_t>(running + pending));
  for (size_t i = 0; i < all.size(); ++i) {
    jobs::Job& j = all[i];
    j.id = static_cast<int64_t>(i + 1);
    j.version = 1;
    j.uid = 1000 + static_cast<uint32_t>(i % 4);
    j.user = "user" + std::to_string(i % 4);
    j.request.gpus = 1;
    j.request.cpu_milli = 1000;
    j.submit_time_us = int64_t{1'700'000'000} * 1'000'000 + static_cast<int64_t>(i) * 1000;
    j.time_limit_s = 600;
    if (static_cast<int64_t>(i) < running) {
      const size_t node = i / 8, gpu = i % 8;
      j.state = jobs::JobState::kRunning;
      j.start_time_us = j.submit_time_us;
      j.placement = {jobs::TaskPlacement{
          sched_nodes[node].name, {static_cast<int>(gpu)}, {infos[node].gpus[gpu].uuid}, 1000}};
    }
  }
  std::vector<bool> ended(all.size(), false);
  size_t oldest = 0;  // the next running job to end (ids in start order)
  std::vector<int64_t> started_order;
  for (int64_t i = 0; i < running; ++i) started_order.push_back(i + 1);
  auto s = controller::JobScheduler::Create(
      "default", "fair", "easy", controller::MpsSharing::kOneUser, static_cast<size_t>(max_starts));
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    return 1;
  }
  const int64_t now_s = 1'700'000'100;
  for (int64_t p = 0; p < passes; ++p) {
    std::vector<const jobs::Job*> active;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!ended[i]) active.push_back(&all[i]);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ThreadCpuMs();
    auto r = (*s)->Plan(active, sched_nodes, now_s + p);
    const double cpu_ms = ThreadCpuMs() - cpu0;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      return 1;
    }
    const controller::KeptCluster& kept = (*s)->kept_cluster();
    std::printf(
        "pass %lld: %.1f ms (CPU %.1f ms), %zu starts, %zu reasons%s (cluster %s: %zu allocated, "
        "%zu released)\n",
        static_cast<long long>(p), ms, cpu_ms, r->starts.size(), r->pending_reasons.size(),
        r->capped ? ", capped" : "", kept.rebuilt ? "built" : "kept", kept.allocated,
        kept.released);
    if (churn == 0) continue;
    for (auto& [id, placement] : r->starts) {
      jobs::Job& j = all[static_cast<size_t>(id - 1)];
      j.state = jobs::JobState::kRunning;
      j.placement = placement;
      j.start_time_us = (now_s + p) * 1'000'000;
      ++j.version;
      started_order.push_back(id);
    }
    for (size_t e = 0; e < r->starts.size() && oldest < started_order.size(); ++e) {
      ended[static_cast<size_t>(started_order[oldest++] - 1)] = true;
    }
  }
  return 0;
}
