// The explain step (Kubernetes PostFilter style): why a job that passed admission did
// not start in a pass, from the cluster as the pass left it.
//
// Each node is put to the profile's filters in order (the admission filters, then the
// fit filter), and the first that refuses gives the node's reason; the reasons are added
// up: "0/3 nodes are available: 2 insufficient GPUs, 1 draining (gpu2)". Before that
// tally stands a headline measured on the nodes whose GPUs suit the job:
//   cannot run on any node: ...         - not even on the idle cluster (gang_placement.h)
//   next in line; ...                   - it holds the EASY reservation
//   needs 0.5 of one GPU...; the most free on any GPU: 0.25
//   needs 0.5 of one GPU...; <single-owner note>  - only GPUs another owner holds
//                                       have the share (cluster_state.h, single-owner GPUs)
//   needs 2 idle GPUs...; largest idle block on any node: 1
//   needs 4 CPUs ... beside its GPUs; no node with the GPUs has them free
//   needs 2 CPUs; no node has them free  (a CPU-only job no node can take)
//   needs 3 tasks placed together; not all fit at once now
//   needs 3 tasks placed together, each share on a GPU of its own; not all fit at once now
//   waiting for its turn: jobs ahead of it in the queue (fifo order) come first
// The headlines' first words are what metrics.cc classifies by; keep them.
//
// Explanations are cached by the job's task shapes, so a long queue of alike jobs costs
// one explanation. Not thread-safe; one explainer serves one pass.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "sched/cluster_state.h"
#include "sched/framework.h"
#include "sched/queue/queued_job.h"
#include "sched/task.h"

namespace gpupool::sched {

class PendingExplainer {
 public:
  // `filters`: the admission filters in the order they refuse a node; `fit` comes after
  // them, and the headline measures the nodes only it may refuse. All are borrowed, like
  // the cluster, for the explainer's life. `queue_order` names the queue's order ("fifo",
  // "fair-by-project" for a fair queue between projects);
  // `single_owner_note` ends the headline of a share that only GPUs held by another owner
  // could take (the host names its mechanism and how to lift the rule).
  PendingExplainer(const ClusterState& cluster, std::vector<const FilterPlugin*> filters,
                   const FilterPlugin& fit, std::string queue_order,
                   std::string single_owner_note = kSingleOwnerNote);

  // The default single_owner_note.
  static constexpr const char* kSingleOwnerNote =
      "the single-owner GPUs that fit are held by another owner's tasks";

  // Under EASY backfill the job that holds the reservation, and when it starts.
  struct Reservation {
    bool unplannable = false;  // the jobs in its way have no time limit: told as unreserved
    int64_t starts_in_s = 0;
  };
  std::string Explain(const QueuedJob& job, const Reservation* reservation = nullptr);

 private:
  struct NodeCount;
  struct Survey;
  Survey SurveyNodes(const Task& task) const;
  std::string Headline(const QueuedJob& job, const Survey& s) const;
  static std::string Tally(const Survey& s);

  struct ShapesHash {
    size_t operator()(const std::vector<TaskShape>& shapes) const;
  };

  const ClusterState& cluster_;
  std::vector<const FilterPlugin*> filters_;
  const FilterPlugin& fit_;
  std::string queue_order_;
  std::string single_owner_note_;
  std::unordered_map<std::vector<TaskShape>, std::string, ShapesHash> cache_;
};

}  // namespace gpupool::sched
