#include "controller/job_lifecycle_fences.h"

#include <algorithm>
#include <string>

namespace gpupool::controller::lifecycle {
namespace {

// The lost nodes first (in the order they were lost), then the ones up.
void LostFirst(std::vector<jobs::NodeFence>& fences) {
  std::stable_partition(fences.begin(), fences.end(),
                        [](const jobs::NodeFence& f) { return f.until_us != 0; });
}

}  // namespace

std::vector<jobs::NodeFence> FencesOnLoss(const jobs::Job& job, const NodeLost& e, int64_t now_us) {
  jobs::Job lost = job;
  NormalizeTasks(lost);
  std::vector<jobs::NodeFence> fences;
  for (size_t i = 0; i < lost.placement.size(); ++i) {
    const std::string& node = lost.placement[i].node;
    if (lost.tasks[i].ended) continue;
    const bool here = node == e.node;
    if (here && e.lease_until_us <= now_us) continue;
    auto f = std::find_if(fences.begin(), fences.end(),
                          [&](const jobs::NodeFence& x) { return x.node == node; });
    if (f == fences.end()) fences.push_back({node, here ? e.lease_until_us : 0});
  }
  LostFirst(fences);
  return fences;
}

Transition FencedNodeLost(const jobs::Job& job, const NodeLost& e, int64_t now_us) {
  Transition t;
  t.next = job;
  t.expected = job.state;
  const jobs::NodeFence* f = jobs::FenceOn(job, e.node);
  if (job.state != jobs::JobState::kPending || f == nullptr || f->until_us != 0) return t;
  t.changed = true;
  auto it = t.next.fences.begin() + (f - job.fences.data());
  if (e.lease_until_us <= now_us) {
    t.next.fences.erase(it);  // no lease (or one already over): nothing runs there
    return t;
  }
  it->until_us = e.lease_until_us;
  LostFirst(t.next.fences);
  t.effects.log = "job " + std::to_string(job.id) + ": node " + e.node + " of its lost attempt " +
                  std::to_string(job.attempt) +
                  " was lost too; it waits for that node's lease as well, until " +
                  std::to_string(e.lease_until_us / 1'000'000) + " (epoch s)";
  t.effects.log_warning = true;
  return t;
}

bool DropFence(jobs::Job& next, const std::string& node) {
  auto it = std::find_if(next.fences.begin(), next.fences.end(),
                         [&](const jobs::NodeFence& f) { return f.node == node; });
  if (it == next.fences.end()) return false;
  const bool lost = it->until_us != 0;
  next.fences.erase(it);
  return lost && jobs::FenceUntilUs(next) == 0;
}

}  // namespace gpupool::controller::lifecycle
