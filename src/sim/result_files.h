// Result files of the saturation experiment, in the published artifact's format:
// allo.csv (`workload,sc_policy,tune,seed,total_gpus,0..130`), frag.csv and
// frag_ratio.csv (`workload,sc_policy,tune,seed,0..130`), one row per run, so ours and
// ../shared/traces/fgd-published can be compared row by row.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "sim/saturation.h"

namespace gpupool::sim {

struct ResultFileContents {
  std::string allo;
  std::string frag;
  std::string frag_ratio;
};

// Rows for `results` (in the given order) under one header each.
ResultFileContents FormatResultFiles(const std::string& workload, double tune, int64_t total_gpus,
                                     const std::vector<SaturationResult>& results);

// Creates `dir` if needed and writes the three files atomically.
Status WriteResultFiles(const std::string& dir, const ResultFileContents& contents);

}  // namespace gpupool::sim
