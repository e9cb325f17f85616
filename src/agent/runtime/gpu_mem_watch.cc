#include "agent/runtime/gpu_mem_watch.h"

#include <map>
#include <utility>

namespace gpupool::agent {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

std::string Mib(uint64_t bytes) { return std::to_string(bytes / kMiB) + " MiB"; }

}  // namespace

std::vector<MemOverrun> FindMemOverruns(const std::vector<protocol::GpuTelemetry>& round,
                                        const std::vector<WatchedShare>& shares,
                                        uint64_t slack_bytes) {
  // Each job's shares on each GPU, and the sum of their limits.
  struct Held {
    std::vector<RunId> runs;
    uint64_t limit_bytes = 0;
    std::string enforcement;
  };
  std::map<std::pair<int, int64_t>, Held> held;  // (GPU index, job)
  for (const WatchedShare& s : shares) {
    Held& h = held[{s.gpu_index, s.run.job}];
    h.runs.push_back(s.run);
    h.limit_bytes += s.limit_bytes;
    h.enforcement = s.enforcement;
  }
  std::vector<MemOverrun> over;
  for (const protocol::GpuTelemetry& g : round) {
    // What each job's processes use on this GPU, as far as it is reported.
    std::map<int64_t, uint64_t> used;
    for (const protocol::TelemetryProcess& p : g.processes) {
      if (p.job_id <= 0 || !p.used_mib || *p.used_mib < 0) continue;
      used[p.job_id] += static_cast<uint64_t>(*p.used_mib) * kMiB;
    }
    for (const auto& [job, bytes] : used) {
      auto h = held.find({g.index, job});
      if (h == held.end()) continue;
      const uint64_t limit = h->second.limit_bytes;
      if (bytes <= limit + slack_bytes) continue;
      MemOverrun o;
      o.runs = h->second.runs;
      o.gpu_index = g.index;
      o.reason = "its processes used " + Mib(bytes) + " of GPU " + std::to_string(g.index) +
                 (g.uuid.empty() ? "" : " (" + g.uuid + ")") + "'s memory, more than its share's " +
                 Mib(limit) + " and the node's slack of " + Mib(slack_bytes) +
                 ": stopped by the node's GPU memory watch (the GPU's enforcement: " +
                 h->second.enforcement + ")";
      over.push_back(std::move(o));
    }
  }
  return over;
}

}  // namespace gpupool::agent
