// The controller's one commit path (Controller::Commit, controller.h): changes stepped on
// their jobs by the lifecycle, written in one compare-and-set transaction, installed.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <utility>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {

using jobs::Job;

Controller::Stepped Controller::StepChanges(const std::vector<Change>& changes,
                                            const std::vector<size_t>& todo,
                                            std::vector<Result<Job>>& answers,
                                            const std::map<int64_t, Job>& stored) {
  Stepped out;
  std::map<int64_t, Job> stepped;  // jobs changed earlier in this round, as they will be
  const int64_t now = clock_->NowMicros();
  for (size_t i : todo) {
    const Change& c = changes[i];
    const Job* job = nullptr;
    if (auto s = stepped.find(c.id); s != stepped.end()) {
      job = &s->second;
    } else if (auto a = active_.find(c.id); a != active_.end()) {
      job = &a->second;
    } else if (auto e = stored.find(c.id); e != stored.end() && c.may_have_ended) {
      job = &e->second;  // ended: a late end of a lost attempt of it is recorded
    }
    if (job == nullptr || (jobs::IsTerminal(job->state) && !c.may_have_ended)) {
      answers[i] = internal::NoLongerActive(job, c.id);
      continue;
    }
    if (c.guard) {
      if (Status s = c.guard(*job); !s.ok()) {
        answers[i] = std::move(s);
        continue;
      }
    }
    Result<lifecycle::Transition> t = lifecycle::Step(*job, c.event, now);
    if (!t.ok() || !t->changed) {
      answers[i] = t.ok() ? Result<Job>(std::move(t->next)) : Result<Job>(t.status());
      continue;
    }
    // next.version is the version read: what the compare-and-set expects.
    out.updates.push_back({t->next, t->expected, t->next.version, c.hold});
    Job after = t->next;
    ++after.version;
    stepped[c.id] = std::move(after);
    out.change.push_back(i);
    out.steps.push_back(std::move(*t));
  }
  return out;
}

void Controller::InstallSteps(Stepped& stepped, std::vector<Result<Job>>& answers) {
  for (size_t k = 0; k < stepped.steps.size(); ++k) {
    lifecycle::Transition& t = stepped.steps[k];
    const store::Store::JobUpdate& u = stepped.updates[k];
    // The compare-and-set held, so nothing else changed the job since it was stepped.
    auto it = active_.find(t.next.id);
    if (jobs::IsTerminal(t.expected)) {
      // An ended job's record (a late end): it is not in memory.
    } else if (it == active_.end() || it->second.version != u.expected_version) {
      spdlog::error("job {}: changed in memory while its version {} was written", t.next.id,
                    u.expected_version + 1);
    }
    t.next.version = u.expected_version + 1;  // as stored
    answers[stepped.change[k]] = t.next;
    Install(std::move(t));
  }
  install_cv_.notify_all();
}

Result<std::vector<Result<Job>>> Controller::Commit(std::vector<Change> changes,
                                                    OnConflict on_conflict) {
  std::vector<Result<Job>> answers(changes.size(), Status::Internal("not committed"));
  std::vector<size_t> todo(changes.size());
  for (size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  // Each round that loses a compare-and-set waits for the winner's transition, so rounds
  // are few; the bound only keeps a broken store from looping for ever.
  constexpr int kMaxRounds = 100;
  for (int round = 0; !todo.empty(); ++round) {
    // The ended jobs a change may be a late end for, as stored (read without mu_).
    std::map<int64_t, Job> stored;
    for (size_t i : todo) {
      if (!changes[i].may_have_ended || stored.count(changes[i].id) != 0) continue;
      Result<Job> job = store_->GetJob(changes[i].id);
      if (job.ok() && jobs::IsTerminal(job->state)) {
        stored.emplace(changes[i].id, std::move(*job));
      } else if (!job.ok() && job.status().code() != StatusCode::kNotFound) {
        return job.status();
      }
    }
    Stepped stepped;
    {
      Lock lock(mu_);
      stepped = StepChanges(changes, todo, answers, stored);
    }
    if (stepped.updates.empty()) break;
    std::vector<store::JobConflict> conflicts;
    Status written = store_->UpdateJobs(stepped.updates, &conflicts);
    Lock lock(mu_);
    if (written.ok()) {
      InstallSteps(stepped, answers);
      break;
    }
    if (!store::IsConflict(written)) return written;
    // Nothing was written. The jobs another writer changed are stepped again once that
    // writer's transition is in memory (or left out); the others at once.
    std::map<int64_t, int64_t> read;  // changed job -> the version this round read
    for (const store::JobConflict& c : conflicts) read.emplace(c.id, c.expected_version);
    if (read.empty()) {  // a store that names none: wait for all of them
      for (const auto& u : stepped.updates) read.emplace(u.job.id, u.expected_version);
    }
    todo.clear();
    for (size_t k = 0; k < stepped.change.size(); ++k) {
      const Job& job = stepped.updates[k].job;
      if (on_conflict == OnConflict::kDrop && read.count(job.id) != 0) {
        answers[stepped.change[k]] = Status::FailedPrecondition(
            "job " + lifecycle::UserJobId(job) + " changed while this change was written");
      } else {
        todo.push_back(stepped.change[k]);
      }
    }
    if (round + 1 == kMaxRounds) return written.WithContext("still in conflict after retries");
    const bool installed =
        clock_->WaitFor(install_cv_, lock.native(), internal::kConflictWaitUs, [&] {
          return std::all_of(read.begin(), read.end(), [&](const auto& r) {
            mu_.AssertHeld();  // the wait's predicate runs with mu_ held
            auto it = active_.find(r.first);
            return it == active_.end() || it->second.version != r.second;
          });
        });
    if (!installed) {
      // Another writer's change is in the store and not here: not one of ours.
      return written.WithContext("the job changed in the store outside this controller");
    }
  }
  return answers;
}

Result<Job> Controller::CommitOne(Change change) {
  std::vector<Change> one;
  one.push_back(std::move(change));
  GP_ASSIGN_OR_RETURN(std::vector<Result<Job>> answers, Commit(std::move(one), OnConflict::kRetry));
  return std::move(answers[0]);
}

}  // namespace gpupool::controller
