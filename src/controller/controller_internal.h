// What the parts of Controller (controller.cc, controller_jobs.cc, controller_nodes.cc,
// exec_sessions.cc) share: a few constants and predicates. Not for use outside them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "controller/controller.h"
#include "controller/job_lifecycle.h"
#include "controller/usage.h"
#include "jobs/job.h"

namespace gpupool::controller::internal {

// How long a stop order (cancel or stray) waits for its answer before it is sent again.
inline constexpr int64_t kResendAfterUs = 5'000'000;
// A node that answers stop orders for a job this long without reporting any of its
// tasks' ends runs none of them.
inline constexpr int64_t kStrayGiveUpUs = 60'000'000;
// How many end reports for jobs not in memory (ended: a resent report, or a lost
// attempt's late end, job_lifecycle_late.h) a node may have looked up in the store per
// minute; each costs a store read. Past it, the rest of that minute's are dropped with a
// warning: a node that cut off ran far fewer jobs, while a hostile node holding a node
// token could otherwise make the controller read the store once per event it sends.
inline constexpr int kMaxEndedLookupsPerMinute = 600;
// One more such lookup for a node whose minute began at `*since_us` with `*count` lookups
// (NodeEntry::ended_lookups*); false when the minute's are spent.
inline bool TakeEndedLookup(int64_t* since_us, int* count, int64_t now_us) {
  if (now_us - *since_us >= 60'000'000 || now_us < *since_us) {
    *since_us = now_us;
    *count = 0;
  }
  if (*count >= kMaxEndedLookupsPerMinute) return false;
  ++*count;
  return true;
}
// The least time a node has to poll a controller that has just loaded the pool (a restart,
// a standby taking the lead) before it is lost, whatever --node-timeout: its agent tries
// a failed call again after at most 5 s (agent_loop.cc), twice, with room for the call.
inline constexpr int64_t kRestartGraceUs = 15'000'000;
// How long a Commit whose compare-and-set lost waits for the winning writer's transition
// to be installed. Every writer of the store is this controller (another one is fenced
// out), whose winner installs at once; the bound is for a store changed behind its back.
inline constexpr int64_t kConflictWaitUs = 10'000'000;
// How many jobs or nodes a list of all of them (Controller::List of every active job,
// Controller::Nodes) copies per hold of mu_: at 10,000 nodes and 180,000 active jobs one
// hold for all of them kept the lock 0.1-0.5 s from every other request (issue 31).
inline constexpr size_t kChunkUnderLock = 1000;
// The most output of ended exec sessions held for their clients (ExecReport's inline
// output, up to 16 KiB each); past it a session's output is relayed from its node.
inline constexpr size_t kMaxExecOutputHeld = 32 << 20;

// The stop orders for a job being stopped, for its tasks on `node`: the job's (a
// preempted one's carries what is left of its grace, none once it said it has
// checkpointed, and its deadline: protocol/cancel_order.h), then one without grace for
// each task there that said checkpoint-done itself (its grace alone ended; after the
// job's, so that an agent reading both keeps the shorter).
inline std::vector<protocol::CancelOrder> StopOrders(const jobs::Job& job, const std::string& node,
                                                     int64_t now_us) {
  protocol::CancelOrder order{job.id, job.attempt};
  if (job.preempted_by == 0) return {order};
  order.grace_s =
      job.checkpoint_done ? 0 : std::max<int64_t>(0, job.preempt_deadline_s - now_us / 1'000'000);
  order.deadline_s = job.preempt_deadline_s;
  std::vector<protocol::CancelOrder> orders{order};
  if (job.checkpoint_done) return orders;
  for (size_t t = 0; t < job.tasks.size() && t < job.placement.size(); ++t) {
    const jobs::TaskStatus& ts = job.tasks[t];
    if (!ts.checkpoint_done || ts.ended || job.placement[t].node != node) continue;
    protocol::CancelOrder own = order;
    own.grace_s = 0;
    own.task = static_cast<int>(t);
    orders.push_back(own);
  }
  return orders;
}

// The limits of the stored setting at its revision (none stored: none, at 0);
// InvalidArgument naming the setting when they do not parse.
Result<RevisedLimits> StoredLimits(const store::SettingRecord& stored);

// How long after a job let its GPU go an application Xid on that GPU is still pinned on
// the job's user as well (Controller::XidHolders): the agent's Xid watch reads every
// second and sends at once, while the job's end may reach the controller first.
inline constexpr int64_t kXidHolderWindowUs = 10'000'000;

// The GPUs of the earlier attempts a node still runs (`running`, strays being stopped):
// those `gpus` names count as used on `node`; with one of unknown GPUs the node takes no
// new work. Until their ends are reported (controller.h, NodeEntry::stray_gpus). The
// reasons name a job by `user_id` (as its user does: ARRAY_INDEX for an array's element).
void ReserveStrayGpus(const std::set<std::pair<int64_t, int>>& running,
                      const std::map<std::pair<int64_t, int>, std::vector<std::string>>& gpus,
                      const std::function<std::string(int64_t)>& user_id, SchedNode* node);

// The GPUs of `node` whose layout changed under jobs of `active` that still run there
// (layout_holds.h): GPU UUID -> those jobs' ids.
std::map<std::string, std::vector<int64_t>> LayoutHeld(const LayoutHolds& holds,
                                                       const std::string& node,
                                                       const std::map<int64_t, jobs::Job>& active);
// Those GPUs out of service on `node` (nothing new placed there), saying why.
void ReserveLayoutHolds(const LayoutHolds& holds, const std::string& name,
                        const std::map<int64_t, jobs::Job>& active, SchedNode* node);

using jobs::Occupies;  // jobs/job.h
using jobs::OnNode;

// PermissionDenied unless `caller` is an admin or owns `job`.
inline Status CheckOwner(const jobs::Job& job, const Caller& caller) {
  if (caller.admin || job.uid == caller.uid) return Status::Ok();
  return Status::PermissionDenied("job " + lifecycle::UserJobId(job) + " belongs to " + job.user +
                                  "; users may only see and act on their own jobs");
}

// NotFound for job `id`, not active (`job`: its ended job still in memory, or null), named
// as its user knows it where the job is at hand.
inline Status NoLongerActive(const jobs::Job* job, int64_t id) {
  return Status::NotFound("job " + (job ? lifecycle::UserJobId(*job) : std::to_string(id)) +
                          " is no longer active");
}

}  // namespace gpupool::controller::internal

namespace gpupool::controller {
// GPU health as stored in store::NodeRecord::gpu_health_json (controller_health.cc):
// the GPUs that are not healthy (or have recent errors), by UUID; "" when none.
std::string GpuHealthToJson(const std::map<std::string, gpu::GpuHealth>& health);
// InvalidArgument naming `where` and the field for what GpuHealthToJson did not write.
Result<std::map<std::string, gpu::GpuHealth>> GpuHealthFromJson(const std::string& text,
                                                                const std::string& where);
}  // namespace gpupool::controller
