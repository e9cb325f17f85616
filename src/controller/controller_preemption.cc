// Preemption in the live pool (docs/preemption.md): applying a pass's preemptions, and
// keeping a requeued victim from taking back the GPUs it was stopped for.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
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

// "2026-11-29 19:03:20 UTC".
std::string FormatUtc(int64_t us) {
  const std::time_t t = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

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
    if (auto p = active_.find(a->preempted_by); p != active_.end()) {
      hold.user = p->second.user;
      hold.others = hold.others || a->user != p->second.user;
    }
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
      // Held by its user (an admin's hold on another's job is the admin's decision).
      std::string withdrawn = it->second.withdrawn;
      if (p != active_.end() && p->second.state == JobState::kPending &&
          !p->second.held_by.empty() && !p->second.held_by_admin) {
        withdrawn = lifecycle::UserJobId(p->second);
      }
      if (!withdrawn.empty() && it->second.others) BarPreemptor(it->second.user, withdrawn, now_us);
      ended->push_back(it->first);
      it = preempt_holds_.erase(it);
      continue;
    }
    out.emplace(it->first, it->second);
    ++it;
  }
  return out;
}

void Controller::BarPreemptor(const std::string& user, const std::string& job, int64_t now_us) {
  if (user.empty() || options_.preempt_withdraw_cooldown_s <= 0) return;
  const int64_t until_us = now_us + options_.preempt_withdraw_cooldown_s * 1'000'000;
  auto& bar = preempt_bars_[user];
  if (until_us > bar.first) bar = {until_us, job};
  preempt_bars_changed_ = true;
  metrics_.CountWithdrawnPreemptor();
  spdlog::warn(
      "preemption: user {} withdrew job {} before it started, after it had preempted another "
      "user's job; {}'s jobs preempt no other user's until {} (--preempt-withdraw-cooldown)",
      user, job, user, FormatUtc(until_us));
}

void Controller::NotePreemptorEnded(const Job& next) {
  auto h = preempt_holds_.find(next.id);
  auto was = active_.find(next.id);
  if (h == preempt_holds_.end() || was == active_.end() ||
      was->second.state != JobState::kPending) {
    return;  // no hold, or it had started
  }
  // Cancelled by another (an admin): the admin's decision, not its user's withdrawal.
  if (next.reason.starts_with("cancelled by ") &&
      !next.reason.starts_with("cancelled by " + next.user + " ")) {
    return;
  }
  h->second.withdrawn = lifecycle::UserJobId(next);
}

std::map<std::string, std::string, std::less<>> Controller::PreemptBarsForPass(int64_t now_us) {
  std::map<std::string, std::string, std::less<>> out;
  std::erase_if(preempt_bars_, [&](const auto& b) { return b.second.first <= now_us; });
  for (const auto& [user, bar] : preempt_bars_) {
    out.emplace(user, "user " + user + " preempts no other user's job until " +
                          FormatUtc(bar.first) + ": " + user + " withdrew job " + bar.second +
                          " before it started, after it had preempted one");
  }
  return out;
}

void Controller::ForgetHolds(const std::vector<int64_t>& ended) {
  std::optional<std::string> bars;  // first, so that a bar is stored before its hold goes
  {
    MutexLock lock(mu_);
    if (preempt_bars_changed_) {
      Json j = Json::object();
      for (const auto& [user, bar] : preempt_bars_) {
        j[user] = Json{{"until_us", bar.first}, {"job", bar.second}};
      }
      bars = j.dump();
      preempt_bars_changed_ = false;
    }
  }
  if (bars) {
    if (Status s = store_->PutSetting(kPreemptBarsKey, *bars); !s.ok()) {
      spdlog::warn("cannot store the users barred from preempting: {}", s.ToString());
      MutexLock lock(mu_);
      preempt_bars_changed_ = true;  // the next pass tries again
    }
  }
  for (int64_t id : ended) {
    if (Status s = store_->DeletePreemptHold(id); !s.ok()) {
      spdlog::warn("job {}: cannot delete the ended hold of its victims' GPUs: {}", id,
                   s.ToString());
    }
  }
}

void Controller::RestoreHolds(const std::vector<store::PreemptHoldRecord>& rows,
                              const std::optional<std::string>& bars) {
  for (const store::PreemptHoldRecord& r : rows) {
    PreemptorHold& hold = preempt_holds_[r.preemptor];
    hold.placement = r.placement;  // one plan's: the same for every victim of a hold
    hold.grace_end_us = std::max(hold.grace_end_us, r.grace_end_us);
    preempted_for_[r.victim] = r.preemptor;
    // Who preempted whom, from the jobs (a preemptor already ended is not known as withdrawn).
    auto p = active_.find(r.preemptor);
    auto v = active_.find(r.victim);
    if (p == active_.end()) continue;
    hold.user = p->second.user;
    hold.others = hold.others || (v != active_.end() && v->second.user != p->second.user);
  }
  RestoreBars(bars);
  if (!rows.empty()) {
    spdlog::info("controller: restored the GPUs held for {} preemptors", preempt_holds_.size());
  }
}

void Controller::RestoreBars(const std::optional<std::string>& bars) {
  if (!bars) return;
  Result<Json> j = ParseJson(*bars, std::string("stored setting ") + kPreemptBarsKey);
  if (!j.ok() || !j->is_object()) {
    spdlog::warn("ignoring the stored users barred from preempting: {}",
                 j.ok() ? "not an object" : j.status().message());
    return;
  }
  for (const auto& [user, bar] : j->items()) {
    if (!bar.is_object() || !bar.contains("until_us") || !bar["until_us"].is_number_integer()) {
      spdlog::warn("ignoring the stored bar from preempting of user {}: no until_us", user);
      continue;
    }
    const Json job = bar.value("job", Json(""));
    preempt_bars_[user] = {bar["until_us"].get<int64_t>(),
                           job.is_string() ? job.get<std::string>() : ""};
  }
}

Result<Job> Controller::CheckpointDone(int64_t id, const Caller& caller, std::optional<int> task) {
  const lifecycle::Event event = lifecycle::CheckpointDone{caller.user, task};
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
