#include "sched/queue/start_plan.h"

#include <algorithm>

#include "sched/queue/gang_placement.h"

namespace gpupool::sched {
namespace {

// A planned end: when `job`'s resources come free in the plan.
struct PlannedEnd {
  int64_t at = 0;
  const std::vector<Task>* tasks = nullptr;  // a job's, or a hold's placeholders
  std::vector<Placement> placements;
};

// The hold of `job` with its times, if any.
const HeldResources* TimedHoldOf(const QueuedJob& job, std::span<const HeldResources> held) {
  for (const HeldResources& h : held) {
    if (h.for_job == job.id && h.ready_s > 0) return &h;
  }
  return nullptr;
}

}  // namespace

Result<std::vector<PlannedStart>> PlanStarts(const ClusterState& cluster, int64_t now_s,
                                             std::span<const RunningJob> running,
                                             std::span<const QueuedJob* const> queue,
                                             const PlanningPolicyMaker& make_policy,
                                             std::span<const HeldResources> held,
                                             std::span<const int32_t> closed) {
  // The plan: the cluster at time `t`, and the planned ends still to come (ends[next..],
  // in time order). Jobs without a planned end hold their resources forever.
  ClusterState at = cluster;
  int64_t t = now_s;
  std::vector<PlannedEnd> ends;
  for (const RunningJob& r : running) {
    if (r.PlannedEnd() != kNoPlannedEnd) {
      ends.push_back({r.PlannedEnd(), &r.job->tasks, r.placements});
    }
  }
  for (const HeldResources& h : held) {  // free for the others when the hold ends
    if (h.expires_s > 0) ends.push_back({std::max(now_s, h.expires_s), &h.tasks, h.placements});
  }
  std::stable_sort(ends.begin(), ends.end(),
                   [](const PlannedEnd& a, const PlannedEnd& b) { return a.at < b.at; });
  size_t next = 0;
  // One policy for the plan's one cluster, changed in place as a pass changes its own.
  GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> policy, make_policy());
  std::vector<PlannedStart> out;
  out.reserve(queue.size());
  for (const QueuedJob* job : queue) {
    if (const HeldResources* h = TimedHoldOf(*job, held)) {
      out.push_back({std::max(now_s, h->ready_s), ""});  // on its held placement
      continue;
    }
    size_t k = next;
    int64_t when = t;
    std::vector<Placement> placements;
    while (true) {
      if (at.TotalFree().Contains(job->Total())) {
        GP_ASSIGN_OR_RETURN(GangPlacement g, PlaceGang(at, job->tasks, *policy));
        if (g.placed) {
          placements = std::move(g.placements);
          break;
        }
      }
      if (k == ends.size()) break;
      // Jobs planned to end at the same moment are all gone before anything starts then.
      when = std::max(when, ends[k].at);
      for (const int64_t end = ends[k].at; k < ends.size() && ends[k].at == end; ++k) {
        GP_RETURN_IF_ERROR(ReleaseGangOutside(at, *ends[k].tasks, ends[k].placements, closed));
      }
    }
    if (placements.empty()) {
      // It fits only once jobs without a time limit end (running, or planned before it):
      // the plan goes on without it, as it was (what was released for it is taken again).
      for (size_t i = next; i < k; ++i) {
        for (size_t n = 0; n < ends[i].placements.size(); ++n) {
          if (IsClosed(closed, ends[i].placements[n])) continue;  // never released
          GP_RETURN_IF_ERROR(at.Allocate((*ends[i].tasks)[n], ends[i].placements[n]));
        }
      }
      out.push_back({0, "a job in its way has no time limit"});
      continue;
    }
    next = k;
    t = when;
    out.push_back({t, ""});
    const int64_t end = RunningJob{job, t, {}}.PlannedEnd();
    if (end == kNoPlannedEnd) continue;
    auto pos = std::upper_bound(ends.begin() + static_cast<std::ptrdiff_t>(next), ends.end(), end,
                                [](int64_t v, const PlannedEnd& e) { return v < e.at; });
    ends.insert(pos, PlannedEnd{end, &job->tasks, std::move(placements)});
  }
  return out;
}

}  // namespace gpupool::sched
