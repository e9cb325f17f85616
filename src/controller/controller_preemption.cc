// Preemption in the live pool (docs/preemption.md): applying a pass's preemptions, and
// keeping a requeued victim from taking back the GPUs it was stopped for.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"
#include "controller/job_scheduler.h"
#include "controller/metrics.h"
#include "controller/preemption_holds.h"

namespace gpupool::controller {

using jobs::Job;
using jobs::JobState;

namespace {

// The end of a requeued victim's reason while it waits for its preemptor.
constexpr std::string_view kWaitsForPreemptor = ", which preempted it, to start first";

}  // namespace

Status Controller::ApplyPreemptions(const ScheduleResult& plan) {
  {
    MutexLock lock(mu_);
    // Forget the victims that started again or ended, and those whose preemptor did.
    for (auto it = preempted_for_.begin(); it != preempted_for_.end();) {
      auto v = active_.find(it->first);
      auto p = active_.find(it->second);
      const bool done = v == active_.end() || p == active_.end() ||
                        p->second.state != JobState::kPending ||
                        (v->second.state != JobState::kPending && v->second.preempted_by == 0);
      // A victim still queued whose preemptor this pass started (or that is gone): the
      // reason the pass gave it, waiting for that job, is no longer true. It is dropped,
      // and a pass at once gives the victim its own (else it stayed a whole period).
      if (auto r = pending_reasons_.find(it->first);
          done && r != pending_reasons_.end() && r->second.ends_with(kWaitsForPreemptor)) {
        pending_reasons_.erase(r);
        WakeScheduler();
      }
      it = done ? preempted_for_.erase(it) : std::next(it);
    }
  }
  if (plan.preemptions.empty()) return Status::Ok();
  std::vector<Change> changes;
  std::vector<const PlannedPreemption*> planned;  // changes[i] applies *planned[i]
  const int64_t now_s = clock_->NowMicros() / 1'000'000;
  {
    MutexLock lock(mu_);
    for (const PlannedPreemption& p : plan.preemptions) {
      auto victim = active_.find(p.victim);
      if (victim == active_.end()) continue;
      planned.push_back(&p);
      lifecycle::Preempt e{p.by_job, p.why, p.grace_s, now_s + p.grace_s, p.by_name};
      Change c{p.victim, e, {}, {}};
      // Stored with the preemption, in its transaction: a hold is stored iff it happened.
      c.hold = store::PreemptHoldRecord{p.victim, p.by_job, p.placement,
                                        (now_s + p.grace_s) * 1'000'000};
      // The victim must still run the attempt the plan saw, and its preemptor still wait.
      c.guard = [this, by = p.by_job, placement = victim->second.placement](const Job& job) {
        mu_.AssertHeld();  // guards run under mu_ (Commit)
        auto waiting = active_.find(by);
        if (waiting == active_.end() || waiting->second.state != JobState::kPending) {
          return Status::NotFound("its preemptor no longer waits");
        }
        if (job.placement != placement) return Status::NotFound("moved since the plan");
        return Status::Ok();
      };
      changes.push_back(std::move(c));
    }
  }
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers,
                      Commit(std::move(changes), OnConflict::kDrop));
  MutexLock lock(mu_);
  for (size_t i = 0; i < answers.size() && i < planned.size(); ++i) {
    const Result<Job>& a = answers[i];
    if (!a.ok() || a->preempted_by == 0) continue;
    preempted_for_[a->id] = a->preempted_by;
    // Its GPUs are held for its preemptor until the grace of the last of its victims
    // has run out, and a margin.
    PreemptorHold& hold = preempt_holds_[a->preempted_by];
    hold.placement = planned[i]->placement;
    hold.grace_end_us = std::max(hold.grace_end_us, (now_s + planned[i]->grace_s) * 1'000'000);
  }
  LogRefusals("preemption", answers);
  return Status::Ok();
}

PreemptorHolds Controller::HoldsForPass(int64_t now_us, std::vector<int64_t>* ended) {
  PreemptorHolds out;
  for (auto it = preempt_holds_.begin(); it != preempt_holds_.end();) {
    auto p = active_.find(it->first);
    bool ends = p == active_.end() || p->second.state != JobState::kPending ||
                !p->second.held_by.empty() || now_us >= it->second.ExpiresUs();
    for (const jobs::TaskPlacement& tp : it->second.placement) {
      auto n = nodes_.find(tp.node);
      ends = ends || n == nodes_.end() || !n->second.up || n->second.draining;
    }
    if (ends) {
      spdlog::debug("job {}: the GPUs held for it are released", it->first);
      ended->push_back(it->first);
      it = preempt_holds_.erase(it);
      continue;
    }
    out.emplace(it->first, it->second);
    ++it;
  }
  return out;
}

void Controller::ForgetHolds(const std::vector<int64_t>& ended) {
  for (int64_t id : ended) {
    if (Status s = store_->DeletePreemptHold(id); !s.ok()) {
      spdlog::warn("job {}: cannot delete the ended hold of its victims' GPUs: {}", id,
                   s.ToString());
    }
  }
}

void Controller::RestoreHolds(const std::vector<store::PreemptHoldRecord>& rows) {
  for (const store::PreemptHoldRecord& r : rows) {
    PreemptorHold& hold = preempt_holds_[r.preemptor];
    hold.placement = r.placement;  // one plan's: the same for every victim of a hold
    hold.grace_end_us = std::max(hold.grace_end_us, r.grace_end_us);
    preempted_for_[r.victim] = r.preemptor;
  }
  if (!rows.empty()) {
    spdlog::info("controller: restored the GPUs held for {} preemptors", preempt_holds_.size());
  }
}

Result<Job> Controller::CheckpointDone(int64_t id, const Caller& caller) {
  const lifecycle::Event event = lifecycle::CheckpointDone{caller.user};
  Result<Job> r = CommitOne(
      {id, event, [&caller](const Job& job) { return internal::CheckOwner(job, caller); }});
  if (r.ok() || r.status().code() != StatusCode::kNotFound) return r;
  return NotActiveAnswer(id, caller, event);
}

void Controller::BlockPreemptedWhilePreemptorsWait(std::map<int64_t, std::string>* waiting,
                                                   int64_t only) const {
  for (const auto& [victim, by] : preempted_for_) {
    if (only != 0 && victim != only) continue;
    auto v = active_.find(victim);
    auto p = active_.find(by);
    if (v == active_.end() || v->second.state != JobState::kPending) continue;
    if (p == active_.end() || p->second.state != JobState::kPending) continue;
    if (!p->second.held_by.empty()) continue;  // held: it would hold the victim too
    // While the victim's GPUs are held for it, or it waits for GPUs as any job does. One
    // kept from starting otherwise (its user's limit, a gate) must not keep its victims
    // waiting for ever (the red team: bob kept alice's requeued job out while the GPUs
    // sat free).
    if (auto r = pending_reasons_.find(by);
        !preempt_holds_.contains(by) && r != pending_reasons_.end()) {
      const std::string why = PendingReasonClass(r->second);
      if (why != "resources" && why != "queue") continue;
    }
    waiting->emplace(victim, "waits for job " + lifecycle::UserJobId(p->second) +
                                 std::string(kWaitsForPreemptor));
  }
}

}  // namespace gpupool::controller
