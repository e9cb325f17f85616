#include "sched/queue/easy_backfill.h"

#include <algorithm>
#include <numeric>

#include "sched/queue/gang_placement.h"

namespace gpupool::sched {

Result<std::unique_ptr<ReservationPlan>> ReservationPlan::Make(
    const ClusterState& cluster, int64_t now_s, std::span<const RunningJob> running,
    const QueuedJob& head, PlacementPolicy& policy, std::span<const int32_t> closed) {
  ClusterState future = cluster;
  const Resources need = head.Total();
  std::vector<Placement> head_placements;
  // Tries to place the head on `future`; on success its placements stay allocated there.
  auto try_place = [&]() -> Result<bool> {
    if (!future.TotalFree().Contains(need)) return false;
    GP_ASSIGN_OR_RETURN(GangPlacement g, PlaceGang(future, head.tasks, policy));
    if (!g.placed) return false;
    head_placements = std::move(g.placements);
    return true;
  };
  auto plan_at = [&](int64_t at) {
    return std::unique_ptr<ReservationPlan>(
        new ReservationPlan(std::max(at, now_s), std::move(future), std::move(head_placements)));
  };
  GP_ASSIGN_OR_RETURN(bool fits_now, try_place());
  if (fits_now) return plan_at(now_s);

  std::vector<size_t> by_end;
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i].PlannedEnd() != kNoPlannedEnd) by_end.push_back(i);
  }
  std::stable_sort(by_end.begin(), by_end.end(), [&](size_t a, size_t b) {
    return running[a].PlannedEnd() < running[b].PlannedEnd();
  });
  for (size_t k = 0; k < by_end.size(); ++k) {
    const RunningJob& r = running[by_end[k]];
    GP_RETURN_IF_ERROR(ReleaseGangOutside(future, r.job->tasks, r.placements, closed));
    // Jobs planned to end at the same moment are all gone before anything starts then.
    if (k + 1 < by_end.size() && running[by_end[k + 1]].PlannedEnd() == r.PlannedEnd()) continue;
    GP_ASSIGN_OR_RETURN(bool fits, try_place());
    if (fits) return plan_at(r.PlannedEnd());
  }
  // Only once jobs without a planned end are gone: a reservation of unknown start, on
  // what the head gets once they are (the oldest released first), which the head keeps.
  std::vector<size_t> endless;
  for (size_t i = 0; i < running.size(); ++i) {
    if (running[i].PlannedEnd() == kNoPlannedEnd) endless.push_back(i);
  }
  std::stable_sort(endless.begin(), endless.end(),
                   [&](size_t a, size_t b) { return running[a].start_s < running[b].start_s; });
  for (size_t i : endless) {
    GP_RETURN_IF_ERROR(
        ReleaseGangOutside(future, running[i].job->tasks, running[i].placements, closed));
    GP_ASSIGN_OR_RETURN(bool fits, try_place());
    if (fits) return plan_at(kNoPlannedEnd);
  }
  return std::unique_ptr<ReservationPlan>();
}

Result<bool> ReservationPlan::Admit(const QueuedJob& job, const std::vector<Placement>& placements,
                                    int64_t planned_end_s) {
  // A reservation of unknown start is kept only off its resources: no end comes first.
  if (start_s_ != kNoPlannedEnd && planned_end_s <= start_s_) return true;
  if (placements.size() != job.tasks.size()) {
    return Status::InvalidArgument("backfill: placements do not match the job's tasks");
  }
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    if (!future_.Allocate(job.tasks[i], placements[i]).ok()) {
      // Taken by the reservation (or by a job still running then): undo and refuse.
      for (size_t k = i; k-- > 0;) {
        GP_RETURN_IF_ERROR(future_.Release(job.tasks[k], placements[k]));
      }
      return false;
    }
  }
  return true;
}

}  // namespace gpupool::sched
