// A campaign: several saturation runs (policies x seeds) of one workload, on threads.
//
// Each run builds its own ClusterState and policy from the shared immutable inputs, so
// runs are independent and the results do not depend on the number of threads; they
// come back in (policy, seed) order.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "sim/saturation.h"

namespace gpupool::sim {

struct CampaignSpec {
  std::vector<std::string> policies;
  std::vector<uint64_t> seeds;
  double tune = 1.3;
  int jobs = 1;                              // threads; <= 0 means 1
  std::atomic<int64_t>* progress = nullptr;  // arrivals so far, over all runs
};

Result<std::vector<SaturationResult>> RunCampaign(const SaturationInputs& inputs,
                                                  const CampaignSpec& spec);

// Parses "42-51", "42,43,50" or "7" (and mixes, "1-3,9") into a list of seeds.
Result<std::vector<uint64_t>> ParseSeedList(const std::string& text);

}  // namespace gpupool::sim
