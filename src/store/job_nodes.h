// Where a job's tasks run, as both stores index it (internal to src/store).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "jobs/job.h"

namespace gpupool::store::internal {

// The first task's node (the jobs.node column); "" while unplaced.
inline std::string PrimaryNode(const jobs::Job& job) {
  return job.placement.empty() ? std::string() : job.placement.front().node;
}

// Every distinct node of the job's tasks, in placement order (the job_nodes rows).
inline std::vector<std::string> JobNodes(const jobs::Job& job) {
  std::vector<std::string> out;
  for (const jobs::TaskPlacement& p : job.placement) {
    if (std::find(out.begin(), out.end(), p.node) == out.end()) out.push_back(p.node);
  }
  return out;
}

}  // namespace gpupool::store::internal
