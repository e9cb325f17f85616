// The built-in admission filters (admission.h):
//   drain      - nothing new is placed on a draining node. PrepareCluster takes what is
//                free there (what runs there keeps its share), so placement, EASY
//                planning and gang checks all see the node as full; it is closed
//                (AddClosedNodes), so that what runs there never comes free in EASY's
//                or the start estimates' plans; explanations name the node and why,
//                as `gpupool nodes` says it: "1 draining (gpu2)" while a job still
//                runs there, "drained" when none does, or the host's reason for a node
//                closed without a drain ("unknown", "health check pending").
//   env-compat - a job whose GPU tasks need a software environment (an image's CUDA and
//                driver needs) may only use the nodes that can run it; the host says
//                which (PassContext::environments), once per environment and pass. When
//                no node can, the job cannot run, with the host's reasons.
//   enforce-memory - a job submitted with --enforce memory places its shares (fractional
//                tasks) only on nodes whose GPUs hold a share to its memory
//                (PassContext::memory_enforced_nodes); whole GPUs are never shared and
//                go anywhere. When no node enforces memory the job waits, saying so.
// When two filters narrow a job's nodes, it may use only the nodes both allow
// (SchedulingProfile intersects them).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sched/admission/admission.h"

namespace gpupool::sched {

class DrainFilter final : public AdmissionFilter {
 public:
  std::string_view name() const override { return "drain"; }
  void BeginPass(const PassContext& ctx) override;
  void PrepareCluster(ClusterState& cluster) const override;
  void AddClosedNodes(std::vector<int32_t>* closed) const override {
    closed->insert(closed->end(), draining_.begin(), draining_.end());
  }
  bool Filter(const ClusterState& state, const Task& task, int32_t node,
              std::string* reason) const override;
  bool NamesNodes() const override { return true; }

 private:
  std::vector<int32_t> draining_;
  std::vector<int32_t> busy_;  // nodes where a running job holds something (sorted)
  std::vector<std::pair<int32_t, std::string>> why_;  // PassContext::draining_why, sorted
};

class EnvCompatFilter final : public AdmissionFilter {
 public:
  std::string_view name() const override { return "env-compat"; }
  void BeginPass(const PassContext& ctx) override;
  bool PreFilter(const QueuedJob& job, PreFilterResult* result) override;
  bool Filter(const ClusterState& state, const Task& task, int32_t node,
              std::string* reason) const override;

 private:
  EnvironmentLookup lookup_;
  std::map<std::string, EnvironmentNodes, std::less<>> seen_;  // this pass's answers
};

class EnforceMemoryFilter final : public AdmissionFilter {
 public:
  std::string_view name() const override { return "enforce-memory"; }
  void BeginPass(const PassContext& ctx) override;
  bool PreFilter(const QueuedJob& job, PreFilterResult* result) override;
  bool Filter(const ClusterState& state, const Task& task, int32_t node,
              std::string* reason) const override;

 private:
  std::vector<std::string> enforced_;  // sorted
};

}  // namespace gpupool::sched
