// Controller: dependency resolution (--after-ok, --after-any, --after-not-ok) in each
// scheduling pass, with the store read only without mu_.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {

using jobs::Job;
using jobs::JobState;

Status Controller::EndUnmeetableDependencies(std::map<int64_t, std::string>* waiting) {
  // The states of ended jobs are read from the store between two locked sections.
  std::set<int64_t> unknown;
  std::set<int64_t> arrays;
  {
    MutexLock lock(mu_);
    unknown = UnknownDependencies(&arrays);
  }
  std::map<int64_t, std::string> names;
  const std::map<int64_t, Result<JobState>> read = ReadEndStates(unknown, &names);
  const std::map<int64_t, std::optional<ArrayFailure>> failures = ReadArrayFailures(arrays);
  std::vector<Change> ends;
  {
    MutexLock lock(mu_);
    for (const auto& [array, failure] : failures) {
      arrays_read_.insert(array);
      if (failure) array_failures_.emplace(array, *failure);
    }
    ends = ResolveDependencies(read, names, waiting);
  }
  if (ends.empty()) return Status::Ok();
  // A job cancelled or held meanwhile is that writer's; the next pass looks again.
  return Commit(std::move(ends), OnConflict::kDrop).status();
}

void Controller::NoteEnded(const Job& job) {
  // An array's id names all its elements together: ReadEndStates works out its state once
  // none is active; until then an element that did not succeed is enough for --after-ok.
  if (job.array_id == 0) {
    if (ended_states_.size() > 100'000) ended_states_.clear();
    ended_states_[job.id] = job.state;
  } else if (job.state != JobState::kSucceeded && array_failures_.count(job.array_id) == 0) {
    if (array_failures_.size() > 100'000) array_failures_.clear();
    array_failures_.emplace(job.array_id, ArrayFailure{job.state, lifecycle::UserJobId(job)});
  }
}

std::map<int64_t, std::optional<Controller::ArrayFailure>> Controller::ReadArrayFailures(
    const std::set<int64_t>& arrays) {
  std::map<int64_t, std::optional<ArrayFailure>> out;
  for (int64_t array : arrays) {
    store::JobFilter f;
    f.array_id = array;
    Result<std::vector<Job>> elements = store_->ListJobs(f);
    if (!elements.ok()) continue;  // the next pass tries again
    std::optional<ArrayFailure>& failure = out[array];
    for (const Job& e : *elements) {
      if (jobs::IsTerminal(e.state) && e.state != JobState::kSucceeded) {
        failure = ArrayFailure{e.state, lifecycle::UserJobId(e)};
        break;
      }
    }
  }
  return out;
}

std::set<int64_t> Controller::UnknownDependencies(std::set<int64_t>* arrays) const {
  std::set<int64_t> ids;
  // Only the pending jobs with dependencies (index_): none, no walk.
  for (int64_t id : index_.PendingWithDependencies()) {
    for (const jobs::Dependency& d : active_.at(id).dependencies) {
      const int64_t dep = d.job_id;
      if (d.kind == jobs::Dependency::Kind::kAfterOk && !index_.ArrayElements(dep).empty() &&
          array_failures_.count(dep) == 0 && arrays_read_.count(dep) == 0) {
        arrays->insert(dep);  // its elements that ended before this controller started
      }
      // An array is active while an element is.
      if (ended_states_.count(dep) != 0 || active_.count(dep) != 0 ||
          !index_.ArrayElements(dep).empty()) {
        continue;
      }
      ids.insert(dep);  // ended, or gone: the store says
    }
  }
  return ids;
}

std::map<int64_t, Result<JobState>> Controller::ReadEndStates(
    const std::set<int64_t>& ids, std::map<int64_t, std::string>* names) {
  std::map<int64_t, Result<JobState>> out;
  for (int64_t id : ids) {
    Result<Job> job = store_->GetJob(id);
    if (!job.ok()) {
      out.emplace(id, job.status());
      continue;
    }
    if (job->array_id != 0 && job->array_id != id) (*names)[id] = lifecycle::UserJobId(*job);
    JobState state = job->state;
    // An array (named by its id, its first element's) is as its elements together: active
    // while any is (the controller's memory says so), then SUCCEEDED if every one
    // succeeded, else the first other end state.
    if (job->array_id == id && jobs::IsTerminal(state)) {
      store::JobFilter f;
      f.user = job->user;
      Result<std::vector<Job>> mine = store_->ListJobs(f);
      if (!mine.ok()) {
        out.emplace(id, mine.status());
        continue;
      }
      for (const Job& e : *mine) {
        if (e.array_id == id && e.state != JobState::kSucceeded) {
          state = e.state;
          break;
        }
      }
    }
    out.emplace(id, state);
  }
  return out;
}

std::vector<Controller::Change> Controller::ResolveDependencies(
    const std::map<int64_t, Result<JobState>>& read, const std::map<int64_t, std::string>& names,
    std::map<int64_t, std::string>* blocked) {
  // What the store said of ended jobs is cached: an ended job's state never changes, nor
  // an element's name.
  for (const auto& [id, st] : read) {
    if (!st.ok() || !jobs::IsTerminal(*st)) continue;
    if (ended_states_.size() > 100'000) ended_states_.clear();
    ended_states_[id] = *st;
    if (auto n = names.find(id); n != names.end()) {
      if (ended_names_.size() > 100'000) ended_names_.clear();
      ended_names_[id] = n->second;
    }
  }
  // A job's state now: active ones from memory (an array is active while an element is).
  auto state_of = [&](int64_t id) -> std::optional<Result<JobState>> {
    mu_.AssertHeld();
    if (auto it = ended_states_.find(id); it != ended_states_.end()) return it->second;
    if (auto it = active_.find(id); it != active_.end()) return it->second.state;
    if (const std::set<int64_t>& elements = index_.ArrayElements(id); !elements.empty()) {
      return active_.at(*elements.begin()).state;  // an element of array `id`
    }
    if (auto r = read.find(id); r != read.end()) return r->second;
    return std::nullopt;  // ended since the store was read: the next pass reads it
  };
  // A dependency as its user named it: an array's element other than its first (whose id
  // is the array's, so names the array) as ARRAY_INDEX, as `gpupool queue` shows it.
  // An ended element is named as the store said (ended_names_).
  auto dependency_name = [&](int64_t id) {
    mu_.AssertHeld();
    auto it = active_.find(id);
    if (it == active_.end()) {
      auto n = ended_names_.find(id);
      if (n != ended_names_.end()) return n->second;
      if (auto r = names.find(id); r != names.end()) return r->second;
      return std::to_string(id);
    }
    if (it->second.array_id == 0 || it->second.array_id == id) return std::to_string(id);
    return lifecycle::UserJobId(it->second);
  };
  // In id order: a dependency is older than its dependant, so a chain of jobs that can
  // never run ends in one pass (a dependant later in the pass sees them as ended).
  std::map<int64_t, JobState> ending;
  std::vector<Change> ends;
  for (int64_t id : index_.PendingWithDependencies()) {
    const Job& job = active_.at(id);
    std::string waiting;
    std::string never;
    for (const jobs::Dependency& d : job.dependencies) {
      auto e = ending.find(d.job_id);
      std::optional<Result<JobState>> st =
          e != ending.end() ? std::optional<Result<JobState>>(e->second) : state_of(d.job_id);
      const std::string flag = "--" + std::string(jobs::DependencyKindName(d.kind));
      const std::string other = "job " + dependency_name(d.job_id);
      if (st && !st->ok()) {
        never = other + " is gone (" + st->status().message() + ")";
        break;
      }
      const char* wants = d.kind == jobs::Dependency::Kind::kAfterOk      ? "succeed"
                          : d.kind == jobs::Dependency::Kind::kAfterNotOk ? "fail"
                                                                          : "end";
      if (d.kind == jobs::Dependency::Kind::kAfterOk && (!st || !jobs::IsTerminal(**st)) &&
          !index_.ArrayElements(d.job_id).empty()) {
        // An array still running: one element that did not succeed is enough.
        if (auto f = array_failures_.find(d.job_id); f != array_failures_.end()) {
          never = fmt::format(
              "job {} ended {}, and {} {} needs every element of array {} to "
              "succeed",
              f->second.element, jobs::JobStateName(f->second.state), flag, d.job_id, d.job_id);
          break;
        }
      }
      if (!st || !jobs::IsTerminal(**st)) {
        if (waiting.empty()) {
          const std::string name = st ? std::string(jobs::JobStateName(**st)) : "ending";
          waiting = fmt::format("waits for {} ({}) to {} ({})", other, name, wants, flag);
        }
        continue;
      }
      const std::string name(jobs::JobStateName(**st));
      const bool ok = **st == JobState::kSucceeded;
      if ((d.kind == jobs::Dependency::Kind::kAfterOk && !ok) ||
          (d.kind == jobs::Dependency::Kind::kAfterNotOk && ok)) {
        never = fmt::format("{} ended {}, and {} needs it to {}", other, name, flag, wants);
        break;
      }
    }
    if (!never.empty()) {
      ending[id] = JobState::kCancelled;
      ends.push_back({id, lifecycle::DependencyFailed{never}, {}});
      (*blocked)[id] = never;  // should its end lose to another writer's change
      continue;
    }
    if (!waiting.empty()) (*blocked)[id] = waiting;
  }
  return ends;
}

}  // namespace gpupool::controller
