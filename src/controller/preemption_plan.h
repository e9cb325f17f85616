// Preemption in the live pool (issue 28, docs/preemption.md): after a scheduling pass,
// which running jobs to stop so that waiting jobs can start. The rule is the one the
// simulator uses (sched/queue/preemption.h: PreemptionCandidates, ChooseVictims); this
// adds what only the live pool knows:
//  - a job is a candidate only if it was submitted --preemptible, is not being stopped
//    already, and has run its own --min-runtime (else the server's default);
//  - jobs being stopped (preempted or cancelled) count as gone: a waiting job that fits
//    once they have ended preempts nothing more, and waits for them;
//  - the waiting jobs weighed are those that wait for resources (not held, not gated),
//    each group's first before any group's second, and within that highest priority
//    first, then the least-served group (GPUs held per weight), then queue order; at most
//    `max_waiting` per pass that have candidates (among at most 16 times as many looked at); each
//    one's victims and placement are taken out of the trial cluster before the next is weighed, so
//    two never count on the same GPUs;
//  - a higher priority preempts only its own user's jobs (users choose priorities);
//    between users only fair share does;
//  - a user the controller bars (a preemptor of theirs withdrawn after it preempted
//    another user's job) preempts no one until the bar ends.
// Pure; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "controller/limits.h"
#include "controller/preemption_holds.h"
#include "controller/sched_input.h"
#include "sched/placement_policy.h"

namespace gpupool::controller {

struct PreemptionSettings {
  int64_t default_min_runtime_s = 600;
  int64_t default_grace_s = 120;
  size_t max_waiting = 4;
  bool by_project = false;  // fair-share groups are projects, not users
  // The groups' fair-share weights (limits' fair_share, sched::FairShareWeights): a group's
  // fair share is the pool in proportion to its weight; groups not listed weigh 1.
  std::map<std::string, double, std::less<>> weights;
};

struct PlannedPreemption {
  int64_t victim = 0;
  int64_t by_job = 0;
  std::string by_name;  // by_job as its user names it (lifecycle::UserJobId)
  std::string why;      // "of higher priority (10 > 0)"
  int64_t grace_s = 0;
  // The waiting job's placement as planned: its victims' GPUs, held for it until it
  // starts (preemption_holds.h).
  std::vector<jobs::TaskPlacement> placement;
};

// `in` after the pass (its cluster holds the pass's starts and `holds`' placeholders);
// `reasons`: the pending reasons the pass gave, by index into in.pending, none for a job
// it started (a waiting job's gets a note of its victims). A job with a hold preempts
// nothing more: it waits for its victims, and the jobs weighed after it do not count on
// their GPUs. `barred`: users whose jobs preempt no one now (AdmissionFeed::preempt_barred),
// with why; a job of theirs that could have preempted gets the why in its reason.
Result<std::vector<PlannedPreemption>> PlanPreemptions(
    const SchedInput& in, int64_t now_s, const PreemptionSettings& settings,
    sched::PlacementPolicy& policy, std::vector<std::optional<std::string>>& reasons,
    const PassHolds& holds = {},
    const std::map<std::string, std::string, std::less<>>& barred = {});

// At submit: the admin's preemption defaults (limits.h) for the job's project, else its
// user, else every user (a project's entry comes first only for its members and for the
// project named after the user; another project's binds only where it is stricter than
// the user's: preemptible, a shorter minimum run time or grace): a batch job becomes
// preemptible where one says so, and a
// preemptible job without its own --min-runtime or --grace takes theirs. A job's own
// --grace may not be longer than that entry's (else the server's default), nor, when the
// entry made it preemptible, its --min-runtime: InvalidArgument naming the field.
Status ApplyPreemptionDefaults(const Limits& limits, const PreemptionSettings& server,
                               jobs::Job* job);

}  // namespace gpupool::controller
