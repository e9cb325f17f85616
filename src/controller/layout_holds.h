#pragma once

// Running jobs whose granted devices their node no longer offers: its MIG layout was
// changed (or MIG turned on or off) and its agent restarted without a drain, while they
// run on what they were granted. The physical GPUs that host them are held, nothing new
// placed on them, until those jobs end (docs/sharing.md, "MIG instances").

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_info.h"
#include "jobs/job.h"

namespace gpupool::controller {

// (node, UUID of a physical GPU there).
using NodeGpu = std::pair<std::string, std::string>;
using NodeInfoOf = std::function<const gpu::NodeInfo*(const std::string& node)>;

// The physical GPUs `job`'s placements hold, on every node of it, when one of its granted
// devices (a MIG instance, a GPU) is no longer offered as such by its node (`info_of`):
// an instance gone or its GPU out of MIG mode, a GPU granted whole or shared that is now
// in MIG mode. Empty when every granted device is still offered. A device's GPU is found
// by UUID, else by the vendor index the placement recorded.
std::vector<NodeGpu> LayoutChangedGpus(const jobs::Job& job, const NodeInfoOf& info_of);

// adv5 finding 7: the GPUs of `before` (a node's inventory) that `after` (its agent's new
// registration) lacks, by UUID, while jobs of `jobs` (those occupying the node) hold them
// or one of their MIG instances on `node`: a GPU fallen off the bus, or taken out, under
// running jobs. "" when none; else the words for the node's drain: "GPU 2 (GPU-...) is
// gone from its inventory under running job 5 (...): drained; ...".
std::string GoneUnderJobs(const std::string& node, const gpu::NodeInfo& before,
                          const gpu::NodeInfo& after, const std::vector<const jobs::Job*>& jobs);

// The words for a held GPU: "layout changed under running jobs 1, 2: held until they end".
std::string LayoutHeldWhy(const std::vector<std::string>& jobs);

class LayoutHolds {
 public:
  // Sets or drops the hold of `job` (LayoutChangedGpus). True when it is held.
  bool Update(const jobs::Job& job, const NodeInfoOf& info_of);
  // Drops the holds of the jobs whose held attempt no longer occupies its nodes.
  void Prune(const std::function<bool(int64_t id, int attempt)>& occupies);
  // The held GPUs of `node`: GPU UUID -> the ids of the jobs that hold it, in id order,
  // of those whose held attempt still occupies its nodes (`occupies`).
  std::map<std::string, std::vector<int64_t>> OnNode(
      const std::string& node, const std::function<bool(int64_t id, int attempt)>& occupies) const;
  bool empty() const { return holds_.empty(); }

 private:
  struct Hold {
    int attempt = 0;
    std::vector<NodeGpu> gpus;
  };
  std::map<int64_t, Hold> holds_;
};

}  // namespace gpupool::controller
