#include "sim/campaign.h"

#include <fmt/format.h>

#include <mutex>
#include <thread>

#include "common/strings.h"

namespace gpupool::sim {

Result<std::vector<SaturationResult>> RunCampaign(const SaturationInputs& inputs,
                                                  const CampaignSpec& spec) {
  for (const auto& p : spec.policies) {
    if (!sched::BuiltinPlacementPolicies().Contains(p)) {
      // Create() builds the full message with the known names.
      auto created = sched::BuiltinPlacementPolicies().Create(p);
      return created.status();
    }
  }
  struct Job {
    std::string policy;
    uint64_t seed;
  };
  std::vector<Job> jobs;
  for (const auto& p : spec.policies) {
    for (uint64_t s : spec.seeds) jobs.push_back({p, s});
  }
  std::vector<Result<SaturationResult>> results(jobs.size(),
                                                Status::Internal("run did not complete"));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next.fetch_add(1); i < jobs.size(); i = next.fetch_add(1)) {
      SaturationRun run{jobs[i].policy, jobs[i].seed, spec.tune, spec.progress};
      results[i] = RunSaturation(inputs, run);
    }
  };
  const int threads = std::max(1, std::min<int>(spec.jobs, static_cast<int>(jobs.size())));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  std::vector<SaturationResult> out;
  out.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) {
      return results[i].status().WithContext(
          fmt::format("run {} seed {}", jobs[i].policy, jobs[i].seed));
    }
    out.push_back(std::move(results[i]).value());
  }
  return out;
}

Result<std::vector<uint64_t>> ParseSeedList(const std::string& text) {
  std::vector<uint64_t> seeds;
  auto bad = [&text] {
    return Status::InvalidArgument(fmt::format(
        "seed list '{}' is not valid; give seeds like 42-51, 42,43 or 7", SanitizeUtf8(text)));
  };
  if (Trim(text).empty()) return bad();
  for (const std::string& part : Split(text, ',')) {
    std::string_view p = Trim(part);
    const size_t dash = p.find('-');
    if (dash == std::string_view::npos) {
      auto v = ParseUint64(p);
      if (!v) return bad();
      seeds.push_back(*v);
      continue;
    }
    auto lo = ParseUint64(Trim(p.substr(0, dash)));
    auto hi = ParseUint64(Trim(p.substr(dash + 1)));
    if (!lo || !hi || *lo > *hi || *hi - *lo > 100000) return bad();
    for (uint64_t s = *lo; s <= *hi; ++s) seeds.push_back(s);
  }
  return seeds;
}

}  // namespace gpupool::sim
