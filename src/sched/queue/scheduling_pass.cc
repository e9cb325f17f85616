#include "sched/queue/scheduling_pass.h"

#include <fmt/format.h>

#include <unordered_map>

#include "sched/queue/easy_backfill.h"
#include "sched/queue/gang_placement.h"

namespace gpupool::sched {
namespace {

// Remembers the task-shape lists of jobs that failed to place in this pass.
class FailedShapes {
 public:
  bool Contains(const QueuedJob& job) const {
    auto it = seen_.find(Hash(job));
    if (it == seen_.end()) return false;
    for (const auto& shapes : it->second) {
      if (Equal(shapes, job)) return true;
    }
    return false;
  }
  void Add(const QueuedJob& job) {
    std::vector<TaskShape> shapes;
    for (const Task& t : job.tasks) shapes.push_back(ShapeOf(t));
    seen_[Hash(job)].push_back(std::move(shapes));
  }

 private:
  static size_t Hash(const QueuedJob& job) {
    size_t h = job.tasks.size();
    for (const Task& t : job.tasks) h = h * 1000003u ^ HashShape(ShapeOf(t));
    return h;
  }
  static bool Equal(const std::vector<TaskShape>& shapes, const QueuedJob& job) {
    if (shapes.size() != job.tasks.size()) return false;
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (!(shapes[i] == ShapeOf(job.tasks[i]))) return false;
    }
    return true;
  }
  std::unordered_map<size_t, std::vector<std::vector<TaskShape>>> seen_;
};

int64_t PlannedEndIfStartedAt(const QueuedJob& job, int64_t now_s) {
  return RunningJob{&job, now_s, {}}.PlannedEnd();
}

}  // namespace

std::string_view StartRuleName(StartRule rule) {
  switch (rule) {
    case StartRule::kStrict:
      return "strict";
    case StartRule::kEasyBackfill:
      return "easy";
    case StartRule::kSkipBlocked:
      return "skip";
  }
  return "unknown";
}

Result<StartRule> ParseStartRule(std::string_view name) {
  if (name == "strict") return StartRule::kStrict;
  if (name == "easy") return StartRule::kEasyBackfill;
  if (name == "skip") return StartRule::kSkipBlocked;
  return Status::InvalidArgument(
      fmt::format("unknown start rule '{}'; use strict, easy or skip", name));
}

SchedulingPass::SchedulingPass(const QueuePolicy& queue_policy, PlacementPolicy& placement_policy,
                               PlanningPolicyMaker make_planning_policy, PassOptions options)
    : queue_policy_(queue_policy),
      placement_policy_(placement_policy),
      make_planning_policy_(std::move(make_planning_policy)),
      options_(options) {}

namespace {

// Whether `job`'s gang fits on `cluster` once every job of `running` has ended.
Result<bool> FitsOnceAllEnd(const ClusterState& cluster, std::span<const RunningJob> running,
                            const QueuedJob& job, PlacementPolicy& planner) {
  ClusterState idle = cluster;
  for (const RunningJob& r : running) {
    GP_RETURN_IF_ERROR(ReleaseGang(idle, r.job->tasks, r.placements));
  }
  GP_ASSIGN_OR_RETURN(GangPlacement g, PlaceGang(idle, job.tasks, planner));
  return g.placed;
}

// Allocates `tasks` on `placements`, all or none (the cluster is left as it was).
Result<bool> AllocateAll(ClusterState& cluster, const std::vector<Task>& tasks,
                         const std::vector<Placement>& placements) {
  if (tasks.size() != placements.size()) return false;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (cluster.Allocate(tasks[i], placements[i]).ok()) continue;
    for (size_t k = i; k-- > 0;) GP_RETURN_IF_ERROR(cluster.Release(tasks[k], placements[k]));
    return false;
  }
  return true;
}

// Allocates held resources again after they were released for their job.
Status TakeBack(ClusterState& cluster, const HeldResources& h) {
  GP_ASSIGN_OR_RETURN(bool back, AllocateAll(cluster, h.tasks, h.placements));
  if (!back)
    return Status::Internal(fmt::format("the held resources of job {} were taken", h.for_job));
  return Status::Ok();
}

}  // namespace

Status SchedulingPass::StartHeldFirst(ClusterState& cluster,
                                      std::span<const QueuedJob* const> pending,
                                      std::span<const HeldResources> held,
                                      std::vector<const HeldResources*>* hold_of,
                                      std::vector<bool>* started_first, PassResult* result) {
  hold_of->assign(pending.size(), nullptr);
  started_first->assign(pending.size(), false);
  for (size_t i = 0; i < pending.size(); ++i) {
    for (const HeldResources& h : held) {
      if (h.for_job == pending[i]->id) (*hold_of)[i] = &h;
    }
  }
  for (size_t i = 0; i < pending.size(); ++i) {
    const HeldResources* h = (*hold_of)[i];
    if (h == nullptr) continue;
    if (options_.max_starts > 0 && result->started.size() >= options_.max_starts) break;
    const QueuedJob& job = *pending[i];
    GP_RETURN_IF_ERROR(ReleaseGang(cluster, h->tasks, h->placements));
    GP_ASSIGN_OR_RETURN(bool placed, AllocateAll(cluster, job.tasks, h->planned));
    std::vector<Placement> placements = h->planned;
    if (!placed) {
      GP_ASSIGN_OR_RETURN(GangPlacement g, PlaceGang(cluster, job.tasks, placement_policy_));
      placed = g.placed;
      placements = std::move(g.placements);
    }
    if (!placed) {
      GP_RETURN_IF_ERROR(TakeBack(cluster, *h));
      continue;
    }
    (*started_first)[i] = true;
    result->started.push_back({i, std::move(placements)});
  }
  return Status::Ok();
}

Result<PassResult> SchedulingPass::Run(ClusterState& cluster, int64_t now_s,
                                       std::span<const QueuedJob* const> pending,
                                       std::span<const RunningJob> running,
                                       std::span<const HeldResources> held) {
  PassResult result;
  if (pending.empty()) return result;
  const std::vector<size_t> order =
      queue_policy_.Order(QueueContext{now_s, pending, running, &cluster});
  if (order.size() != pending.size()) {
    return Status::Internal(fmt::format("queue policy '{}' ordered {} of {} pending jobs",
                                        queue_policy_.name(), order.size(), pending.size()));
  }
  // Jobs that resources are held for are tried first (each may use only its own).
  std::vector<const HeldResources*> hold_of;  // by pending index; empty when none is held
  std::vector<bool> started_first;            // by pending index, with hold_of
  if (!held.empty()) {
    GP_RETURN_IF_ERROR(StartHeldFirst(cluster, pending, held, &hold_of, &started_first, &result));
  }
  auto first = [&](size_t index) { return index < started_first.size() && started_first[index]; };
  FailedShapes failed;
  std::optional<CarriedRefusals> carried = std::move(carried_);
  carried_.reset();
  bool same_reservation = false;            // as the capped pass before planned: `carried` holds
  std::unordered_set<std::string> refused;  // ids refused for the reservation in this pass
  std::unique_ptr<ReservationPlan> plan;
  bool blocked = false;
  size_t tries_after_block = 0;
  for (size_t pos = 0; pos < order.size(); ++pos) {
    const size_t index = order[pos];
    if (first(index)) continue;  // started on what was held for it
    if (options_.max_starts > 0 && result.started.size() >= options_.max_starts) {
      result.capped = true;
      result.not_reached.assign(order.begin() + static_cast<std::ptrdiff_t>(pos), order.end());
      std::erase_if(result.not_reached, first);
      if (plan) {
        carried_ = CarriedRefusals{pending[*result.reserved_index]->id, plan->start_s(),
                                   plan->head_placements(), std::move(refused)};
      }
      break;
    }
    if (index >= pending.size()) {
      return Status::Internal(fmt::format("queue policy '{}' returned index {} of {}",
                                          queue_policy_.name(), index, pending.size()));
    }
    const QueuedJob& job = *pending[index];
    if (blocked) {
      if (options_.max_backfill_tries > 0 && tries_after_block >= options_.max_backfill_tries) {
        break;
      }
      ++tries_after_block;
    }
    // A job with held resources was tried first, and did not fit then.
    const HeldResources* own = hold_of.empty() ? nullptr : hold_of[index];
    if (own == nullptr && failed.Contains(job)) continue;
    GangPlacement g;
    if (own == nullptr) {
      GP_ASSIGN_OR_RETURN(g, PlaceGang(cluster, job.tasks, placement_policy_));
    }
    if (g.placed) {
      if (plan) {
        bool keeps = !(same_reservation && carried->refused.count(job.id) != 0);
        if (keeps) {
          GP_ASSIGN_OR_RETURN(keeps,
                              plan->Admit(job, g.placements, PlannedEndIfStartedAt(job, now_s)));
        }
        if (!keeps) {
          refused.insert(job.id);
          GP_RETURN_IF_ERROR(ReleaseGang(cluster, job.tasks, g.placements));
          continue;
        }
      }
      result.started.push_back({index, std::move(g.placements)});
      continue;
    }
    failed.Add(job);
    if (blocked) continue;
    // The first job that cannot start.
    blocked = true;
    if (options_.rule == StartRule::kStrict) break;
    if (options_.rule == StartRule::kSkipBlocked) continue;
    std::vector<RunningJob> running_now(running.begin(), running.end());
    for (const PassResult::Started& s : result.started) {
      running_now.push_back(RunningJob{pending[s.pending_index], now_s, s.placements});
    }
    if (!make_planning_policy_) {
      return Status::FailedPrecondition("EASY backfill needs a planning placement policy");
    }
    GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> planner, make_planning_policy_());
    // What is held for the job is its own in its reservation.
    if (own != nullptr) GP_RETURN_IF_ERROR(ReleaseGang(cluster, own->tasks, own->placements));
    Result<std::unique_ptr<ReservationPlan>> made =
        ReservationPlan::Make(cluster, now_s, running_now, job, *planner);
    Result<bool> ever = true;
    if (made.ok() && *made == nullptr) {
      // A job that would not fit even with every running job gone (what is out of
      // service holds resources no job releases) can never start here: it holds nobody
      // back, and the next job that cannot start gets the reservation.
      GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> fresh, make_planning_policy_());
      ever = FitsOnceAllEnd(cluster, running_now, job, *fresh);
    }
    if (own != nullptr) GP_RETURN_IF_ERROR(TakeBack(cluster, *own));
    GP_ASSIGN_OR_RETURN(plan, std::move(made));
    if (!plan) {
      GP_RETURN_IF_ERROR(ever.status());
      if (!*ever) {
        blocked = false;
        continue;
      }
      result.reservation_unplannable = true;
      break;
    }
    result.reserved_index = index;
    result.reservation_start_s = plan->start_s();
    same_reservation = carried && carried->head == job.id && carried->start_s == plan->start_s() &&
                       carried->placements == plan->head_placements();
  }
  return result;
}

}  // namespace gpupool::sched
