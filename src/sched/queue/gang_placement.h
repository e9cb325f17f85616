// Gang placement: every task of a job gets a node, or none does.
//
// Tasks are placed one after another through the placement policy, each applied with
// ClusterState::Allocate so later tasks see the earlier ones (a gang that fits only when
// spread over nodes gets spread). Bigger tasks go first because they are the hardest to
// fit. If any task cannot be placed, the tasks placed so far are released in reverse
// order and the cluster is left exactly as it was. A task never spans nodes: a
// multi-GPU task gets all its GPUs on one node, as ClusterState requires.
//
// The fractional tasks (GPU shares) of one gang never share a GPU with each other: each
// gets a GPU of its own, on one node or several, because the tasks are the ranks of one
// distributed job and NCCL refuses two ranks of a communicator on one device. MIG
// instances of one physical GPU (NodeState::physical_gpus) count as one GPU here. Shares of
// different jobs still pack onto one GPU, and so do the shares of a gang whose tasks
// say Task::pack_shares (held for mpirun: one launch per node holds them all). The tasks
// given to PlaceGang are one gang.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "sched/cluster_state.h"
#include "sched/placement_policy.h"
#include "sched/task.h"

namespace gpupool::sched {

struct GangPlacement {
  bool placed = false;
  std::vector<Placement> placements;  // one per task, in the tasks' order, when placed
  std::string reason;                 // why not, when !placed
};

// Places all of `tasks` on `cluster` or none. An error (not an unplaced gang) means the
// policy proposed a placement that the cluster refused, which is a bug in the policy;
// the cluster is restored in that case too.
Result<GangPlacement> PlaceGang(ClusterState& cluster, const std::vector<Task>& tasks,
                                PlacementPolicy& policy);

// Allocates `tasks` on the given `placements` (one per task), all or none: false, with the
// cluster as it was, when one does not fit or the counts differ.
Result<bool> AllocateGang(ClusterState& cluster, const std::vector<Task>& tasks,
                          const std::vector<Placement>& placements);

// Releases a placed gang (the inverse of a successful PlaceGang).
Status ReleaseGang(ClusterState& cluster, const std::vector<Task>& tasks,
                   const std::vector<Placement>& placements);

// ReleaseGang for a plan of the future: what lies on a `closed` node (sorted cluster
// indices of nodes that take no new work: draining) stays taken, so that the plan never
// counts it free. Whether a placement is on a closed node: IsClosed.
Status ReleaseGangOutside(ClusterState& cluster, const std::vector<Task>& tasks,
                          const std::vector<Placement>& placements,
                          std::span<const int32_t> closed);
bool IsClosed(std::span<const int32_t> closed, const Placement& placement);

// True when no placement of `tasks` could ever exist on `cluster`, even idle: a task no
// node can host, more GPUs, CPU or memory than the whole cluster has, or more GPU shares
// than the GPUs that could host them (each needs its own). A gang that
// passes may still never fit if its tasks cannot share the nodes that can host them;
// callers that need certainty try PlaceGang on an idle copy.
bool GangObviouslyUnplaceable(const ClusterState& cluster, const std::vector<Task>& tasks,
                              std::string* reason);

}  // namespace gpupool::sched
