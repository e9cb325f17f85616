// The job lifecycle's part for the node lease (docs/health.md, "A node cut off from the
// controller"): the nodes a --requeue (or preemptible) job's lost attempt may still run
// a task on, which its next attempt waits for (Job::fences). A gang's tasks may run on
// several nodes, all cut off at once (a rack's switch): the next attempt waits for each
// lost one, until its lease runs out or it is heard from, whichever comes first for that
// node. Used by job_lifecycle.cc (NodeLost, FenceLifted) and job_lifecycle_late.cc (an
// end reported late); pure, as they are.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "controller/job_lifecycle.h"
#include "jobs/job.h"

namespace gpupool::controller::lifecycle {

// The fences `job`'s attempt leaves when `e.node` is lost and the job requeued for it:
// that node with its lease's end, if a task of the attempt there is not known to have
// ended and the lease is not over at `now_us`; and each other node of such a task (up:
// told to stop it) with until_us 0, so that its loss before the next attempt is placed
// fences it too (FencedNodeLost). The lost node first. Empty when every task of the
// attempt had ended.
std::vector<jobs::NodeFence> FencesOnLoss(const jobs::Job& job, const NodeLost& e, int64_t now_us);

// NodeLost for a PENDING job: a node of its lost attempt (Job::fences, until_us 0) is lost
// too before the next attempt is placed; its task may run on there, cut off, so the job
// waits for that node's lease as well (none, or one already over: the entry goes).
// Unchanged for any other node, and for one already lost.
Transition FencedNodeLost(const jobs::Job& job, const NodeLost& e, int64_t now_us);

// Removes `node` from next.fences (it registered again, its lease ran out, or it reported
// the end of every task of the attempt there). Whether that ended the job's wait: the
// node was lost, and no other lost node is left.
bool DropFence(jobs::Job& next, const std::string& node);

}  // namespace gpupool::controller::lifecycle
