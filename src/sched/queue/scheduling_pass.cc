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
  void Add(const QueuedJob& job) { Add(job.tasks); }
  void Add(std::span<const Task> tasks) {
    std::vector<TaskShape> shapes;
    for (const Task& t : tasks) shapes.push_back(ShapeOf(t));
    seen_[Hash(tasks)].push_back(std::move(shapes));
  }
  bool empty() const { return seen_.empty(); }

 private:
  static size_t Hash(const QueuedJob& job) { return Hash(job.tasks); }
  static size_t Hash(std::span<const Task> tasks) {
    size_t h = tasks.size();
    for (const Task& t : tasks) h = h * 1000003u ^ HashShape(ShapeOf(t));
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
                            const QueuedJob& job, PlacementPolicy& planner,
                            std::span<const int32_t> closed) {
  ClusterState idle = cluster;
  for (const RunningJob& r : running) {
    GP_RETURN_IF_ERROR(ReleaseGangOutside(idle, r.job->tasks, r.placements, closed));
  }
  GP_ASSIGN_OR_RETURN(GangPlacement g, PlaceGang(idle, job.tasks, planner));
  return g.placed;
}

// The queue policy's order, read as the pass goes (QueueOrder): each index checked.
class CheckedOrder {
 public:
  CheckedOrder(const QueuePolicy& policy, const QueueContext& ctx)
      : policy_(policy), order_(policy.Lazy(ctx)), seen_(ctx.pending.size(), false) {}

  // The next index, nullopt at the end; an error when the policy repeats an index, goes
  // past the queue or ends before every job was ordered.
  Result<std::optional<size_t>> Next() {
    const std::optional<size_t> i = order_->Next();
    if (!i) {
      if (given_ == seen_.size()) return i;
      return Status::Internal(fmt::format("queue policy '{}' ordered {} of {} pending jobs",
                                          policy_.name(), given_, seen_.size()));
    }
    if (*i >= seen_.size() || seen_[*i]) {
      return Status::Internal(fmt::format("queue policy '{}' returned index {} of {}{}",
                                          policy_.name(), *i, seen_.size(),
                                          *i < seen_.size() ? " twice" : ""));
    }
    seen_[*i] = true;
    ++given_;
    return i;
  }
  // The indices not returned yet, in index order.
  std::vector<size_t> Rest() const {
    std::vector<size_t> rest;
    rest.reserve(seen_.size() - given_);
    for (size_t i = 0; i < seen_.size(); ++i) {
      if (!seen_[i]) rest.push_back(i);
    }
    return rest;
  }

 private:
  const QueuePolicy& policy_;
  std::unique_ptr<QueueOrder> order_;
  std::vector<bool> seen_;
  size_t given_ = 0;
};

// Allocates held resources again after they were released for their job.
Status TakeBack(ClusterState& cluster, const HeldResources& h) {
  GP_ASSIGN_OR_RETURN(bool back, AllocateGang(cluster, h.tasks, h.placements));
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
    GP_ASSIGN_OR_RETURN(bool placed, AllocateGang(cluster, job.tasks, h->planned));
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

Result<std::unique_ptr<ReservationPlan>> SchedulingPass::PlanReservation(
    ClusterState& cluster, int64_t now_s, std::span<const QueuedJob* const> pending,
    std::span<const RunningJob> running, const PassResult& result, const QueuedJob& job,
    const HeldResources* own, std::span<const int32_t> closed, bool* ever) {
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
      ReservationPlan::Make(cluster, now_s, running_now, job, *planner, closed);
  Result<bool> fits = true;
  if (made.ok() && *made == nullptr) {
    // A job that would not fit even with every running job gone (what is out of
    // service holds resources no job releases) can never start here: it holds nobody
    // back, and the next job that cannot start gets the reservation.
    GP_ASSIGN_OR_RETURN(std::unique_ptr<PlacementPolicy> fresh, make_planning_policy_());
    fits = FitsOnceAllEnd(cluster, running_now, job, *fresh, closed);
  }
  if (own != nullptr) GP_RETURN_IF_ERROR(TakeBack(cluster, *own));
  GP_RETURN_IF_ERROR(fits.status());
  *ever = *fits;
  return made;
}

std::vector<Task> SchedulingPass::StillFailing(const ClusterState& cluster) const {
  const std::vector<NodeFree>& last = failures_.nodes;
  if (failures_.tasks.empty()) return {};
  if (static_cast<size_t>(cluster.num_nodes()) != last.size()) return {};
  std::vector<Task> out = failures_.tasks;
  for (int32_t i = 0; i < cluster.num_nodes() && !out.empty(); ++i) {
    const NodeState& n = cluster.node(i);
    const NodeFree& o = last[static_cast<size_t>(i)];
    bool more = n.name != o.name || n.cpu_free_milli > o.cpu_free ||
                n.memory_free_mib > o.memory_free || n.cpu_capacity_milli != o.cpu_capacity ||
                n.memory_capacity_mib != o.memory_capacity || n.model_id != o.model_id ||
                n.gpu_capability != o.capability || n.gpu_memory_mib != o.gpu_memory_mib ||
                n.single_owner_gpus != o.single_owner || n.whole_only_gpus != o.whole_only ||
                n.gpu_free_milli.size() != o.gpu_free.size();
    for (size_t g = 0; !more && g < o.gpu_free.size(); ++g) {
      more =
          n.gpu_free_milli[g] > o.gpu_free[g] ||
          (n.single_owner_gpus != 0 && cluster.OwnerOf(i, static_cast<int32_t>(g)) != o.owners[g]);
    }
    if (!more) continue;
    // Something was freed here (or the node is new or changed): the shapes that fit
    // here now are tried again.
    std::erase_if(out, [&](const Task& t) { return cluster.Fits(i, t); });
  }
  return out;
}

void SchedulingPass::Remember(const ClusterState& cluster, std::vector<Task> failed) {
  failures_.tasks = std::move(failed);
  failures_.nodes.clear();
  if (failures_.tasks.empty()) return;
  failures_.nodes.reserve(static_cast<size_t>(cluster.num_nodes()));
  for (int32_t i = 0; i < cluster.num_nodes(); ++i) {
    const NodeState& n = cluster.node(i);
    NodeFree& o = failures_.nodes.emplace_back();
    o.name = n.name;
    o.cpu_free = n.cpu_free_milli;
    o.memory_free = n.memory_free_mib;
    o.cpu_capacity = n.cpu_capacity_milli;
    o.memory_capacity = n.memory_capacity_mib;
    o.model_id = n.model_id;
    o.capability = n.gpu_capability;
    o.gpu_memory_mib = n.gpu_memory_mib;
    o.single_owner = n.single_owner_gpus;
    o.whole_only = n.whole_only_gpus;
    o.gpu_free = n.gpu_free_milli;
    if (n.single_owner_gpus != 0) {
      for (int32_t g = 0; g < n.num_gpus(); ++g) o.owners.push_back(cluster.OwnerOf(i, g));
    }
  }
}

Result<PassResult> SchedulingPass::Run(ClusterState& cluster, int64_t now_s,
                                       std::span<const QueuedJob* const> pending,
                                       std::span<const RunningJob> running,
                                       std::span<const HeldResources> held,
                                       std::span<const int32_t> closed) {
  // A job with held resources may start elsewhere and free them within the pass: no
  // shape is carried into such a pass (holds are rare: a preemption's few passes).
  std::vector<Task> carried = held.empty() ? StillFailing(cluster) : std::vector<Task>{};
  std::vector<Task> failed_now;
  Result<PassResult> result =
      Walk(cluster, now_s, pending, running, held, closed, &carried, &failed_now);
  // A carried shape no job of this pass reached still cannot fit: the pass only filled.
  for (Task& t : carried) failed_now.push_back(std::move(t));
  Remember(cluster, result.ok() ? std::move(failed_now) : std::vector<Task>{});
  return result;
}

Result<PassResult> SchedulingPass::Walk(ClusterState& cluster, int64_t now_s,
                                        std::span<const QueuedJob* const> pending,
                                        std::span<const RunningJob> running,
                                        std::span<const HeldResources> held,
                                        std::span<const int32_t> closed,
                                        std::vector<Task>* carried_shapes,
                                        std::vector<Task>* failed_now) {
  PassResult result;
  if (pending.empty()) return result;
  FailedShapes known_failing;  // carried from the last pass
  for (const Task& t : *carried_shapes) known_failing.Add(std::span<const Task>(&t, 1));
  CheckedOrder order(queue_policy_, QueueContext{now_s, pending, running, &cluster});
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
  while (true) {
    GP_ASSIGN_OR_RETURN(const std::optional<size_t> next, order.Next());
    if (!next) break;
    const size_t index = *next;
    if (first(index)) continue;  // started on what was held for it
    if (options_.max_starts > 0 && result.started.size() >= options_.max_starts) {
      // The rest of the order is not made: a capped pass reads only what it tried.
      result.capped = true;
      result.not_reached = order.Rest();
      result.not_reached.insert(result.not_reached.begin(), index);
      std::erase_if(result.not_reached, first);
      if (plan) {
        carried_ = CarriedRefusals{pending[*result.reserved_index]->id, plan->start_s(),
                                   plan->head_placements(), std::move(refused)};
      }
      break;
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
    GangPlacement g;  // not placed
    if (own != nullptr) {
      // Tried first (StartHeldFirst): not placed.
    } else if (job.tasks.size() != 1 || known_failing.empty() || !known_failing.Contains(job)) {
      GP_ASSIGN_OR_RETURN(g, PlaceGang(cluster, job.tasks, placement_policy_));
    } else {
      // Reached: it is this pass's failure now, carried on below.
      std::erase_if(*carried_shapes,
                    [&](const Task& t) { return ShapeOf(t) == ShapeOf(job.tasks[0]); });
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
    if (job.tasks.size() == 1) failed_now->push_back(job.tasks[0]);
    if (blocked) continue;
    // The first job that cannot start.
    blocked = true;
    if (options_.rule == StartRule::kStrict) break;
    if (options_.rule == StartRule::kSkipBlocked) continue;
    bool ever = true;
    GP_ASSIGN_OR_RETURN(
        plan, PlanReservation(cluster, now_s, pending, running, result, job, own, closed, &ever));
    if (!plan) {
      if (!ever) {
        blocked = false;
        continue;
      }
      // Fits once every running job is gone, yet not on any set of them (the planning
      // policy's placements differ from the check's): as strict, nothing passes it.
      result.reservation_unplannable = true;
      break;
    }
    result.reserved_index = index;
    if (plan->start_s() == kNoPlannedEnd) {
      result.reservation_unplannable = true;  // reserved, at an unknown start
    } else {
      result.reservation_start_s = plan->start_s();
    }
    same_reservation = carried && carried->head == job.id && carried->start_s == plan->start_s() &&
                       carried->placements == plan->head_placements();
  }
  return result;
}

}  // namespace gpupool::sched
