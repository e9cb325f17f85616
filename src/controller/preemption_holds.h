// The victims' GPUs held for their preemptor (docs/preemption.md, "The victims' GPUs are
// held for the job that preempted them"): a pass's view of the controller's holds.
//
// When the controller stops running jobs so that a waiting job (the preemptor) can start,
// it keeps the placement planned for the preemptor (the victims' GPUs) as a hold until
// the preemptor starts, is held, cancelled or ends, or the hold expires. Each pass, what
// of a hold is free (the victims that have ended) is allocated on the pass's cluster to a
// placeholder (sched::HeldResources), so no other job is placed there, by any placement
// policy, EASY or backfill; the pass tries the preemptor first, on its planned placement,
// else anywhere it fits (SchedulingPass::Run). Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/sched_input.h"
#include "jobs/job.h"
#include "sched/queue/queued_job.h"

namespace gpupool::controller {

// A hold ends this long after its victims' grace has run out, started or not, so that
// no hold keeps GPUs idle for long (a victim's node may be slow to report its end).
inline constexpr int64_t kPreemptHoldMarginS = 60;

// Ends the pending reason of a preemptor whose victims' GPUs are held for it.
inline constexpr const char* kHeldNote = "the GPUs of the jobs it preempted are held for it";

// The setting (store::Store::PutSetting) that keeps the users barred from preempting
// others after withdrawing a preemptor: {"USER": {"until_us": N, "job": "ID"}, ...}.
inline constexpr const char* kPreemptBarsKey = "preempt_bars";

// What is held for one preemptor: the placement planned for it when it preempted, and
// when the grace of the last of its victims runs out (µs since the epoch). The controller
// keeps it in memory and in the store (store::PreemptHoldRecord, one row per victim).
struct PreemptorHold {
  std::vector<jobs::TaskPlacement> placement;
  int64_t grace_end_us = 0;
  // The preemptor's user; whether a victim is another user's job (its withdrawal then
  // costs that user: docs/preemption.md, "A preemptor withdrawn"); whether the preemptor
  // has ended before it started by its user's doing (not an admin's cancel): then
  // `withdrawn` names it as its user does.
  std::string user;
  bool others = false;
  std::string withdrawn;
  // The hold ends then at the latest, started or not.
  int64_t ExpiresUs() const { return grace_end_us + kPreemptHoldMarginS * 1'000'000; }
};

// Preemptor (job id) -> its hold.
using PreemptorHolds = std::map<int64_t, PreemptorHold>;

// The holds allocated on one pass's cluster: held[i] is for the pending job
// in.pending[pending[i]], whose id is preemptor[i].
struct PassHolds {
  std::vector<sched::HeldResources> held;
  std::vector<size_t> pending;
  std::vector<int64_t> preemptor;
  bool Holds(int64_t id) const;
};

// For each pending job of `in` that `holds` names, with a planned placement of its
// tasks on nodes and GPUs `in` has: allocates on in.cluster what of that placement is
// free now, each task's CPU and memory on its node and its share of each of its GPUs
// (where that is free), as placeholders, with the hold's times (HeldResources::ready_s,
// expires_s: the start plan's). Call after in.AddJobs.
PassHolds AllocateHolds(SchedInput& in, const PreemptorHolds& holds);

// On a trial copy of the cluster after the pass (PlanPreemptions, jobs being stopped
// released): each preemptor that did not start (it has a reason) takes its planned
// placement in place of its placeholders where that fits (`reasons` by index into
// in.pending, none for a job the pass started), so that the waiting jobs
// weighed next do not count on its victims' GPUs.
Status GiveHoldsToPreemptors(sched::ClusterState& trial, const SchedInput& in,
                             const PassHolds& holds,
                             const std::vector<std::optional<std::string>>& reasons);

}  // namespace gpupool::controller
