#include "jobs/job.h"

#include <algorithm>
#include <set>

#include "common/strings.h"

namespace gpupool::jobs {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kPending:
      return "PENDING";
    case JobState::kAssigned:
      return "ASSIGNED";
    case JobState::kRunning:
      return "RUNNING";
    case JobState::kSucceeded:
      return "SUCCEEDED";
    case JobState::kFailed:
      return "FAILED";
    case JobState::kCancelled:
      return "CANCELLED";
    case JobState::kTimeout:
      return "TIMEOUT";
    case JobState::kLost:
      return "LOST";
  }
  return "UNKNOWN";
}

std::optional<JobState> ParseJobState(std::string_view name) {
  for (JobState s :
       {JobState::kPending, JobState::kAssigned, JobState::kRunning, JobState::kSucceeded,
        JobState::kFailed, JobState::kCancelled, JobState::kTimeout, JobState::kLost}) {
    if (JobStateName(s) == name) return s;
  }
  return std::nullopt;
}

std::string_view DependencyKindName(Dependency::Kind k) {
  switch (k) {
    case Dependency::Kind::kAfterOk:
      return "after-ok";
    case Dependency::Kind::kAfterAny:
      return "after-any";
    case Dependency::Kind::kAfterNotOk:
      return "after-not-ok";
  }
  return "?";
}

std::optional<Dependency::Kind> ParseDependencyKind(std::string_view name) {
  for (auto k :
       {Dependency::Kind::kAfterOk, Dependency::Kind::kAfterAny, Dependency::Kind::kAfterNotOk}) {
    if (DependencyKindName(k) == name) return k;
  }
  return std::nullopt;
}

Result<ArraySpec> ParseArraySpec(std::string_view text, int max_elements,
                                 std::string_view limit_hint) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("array '" + std::string(text) + "': " + why +
                                   "; use e.g. 0-99, 0-99%10 (at most 10 at once), 1,3,5-7 or "
                                   "0-30:10 (every 10th)");
  };
  const std::string hint = limit_hint.empty() ? "" : " (" + std::string(limit_hint) + ")";
  ArraySpec spec;
  std::string_view list = text;
  if (const size_t pct = text.find('%'); pct != std::string_view::npos) {
    auto limit = ParseInt64(text.substr(pct + 1));
    if (!limit || *limit < 1 || *limit > max_elements) {
      return bad("the limit after % must be 1.." + std::to_string(max_elements) + hint);
    }
    spec.max_running = static_cast<int>(*limit);
    list = text.substr(0, pct);
  }
  if (list.empty()) return bad("no indices");
  std::set<int> seen;
  // Indices walked, repeats included: bounds the work a spec of many overlapping ranges
  // could make ("0-1000000,0-1000000,...") to max_elements, not parts x range.
  int64_t walked = 0;
  for (const std::string& part : Split(list, ',')) {
    std::string range = part;
    int64_t step = 1;
    if (const size_t colon = range.find(':'); colon != std::string::npos) {
      auto st = ParseInt64(range.substr(colon + 1));
      if (!st || *st < 1) return bad("a step must be a whole number of at least 1");
      step = *st;
      range.resize(colon);
    }
    const size_t dash = range.find('-', 1);
    auto lo = ParseInt64(range.substr(0, dash));
    auto hi = dash == std::string::npos ? lo : ParseInt64(range.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi > kMaxArrayIndex || *lo > *hi) {
      return bad("'" + part + "' is not an index or a range LOW-HIGH of 0.." +
                 std::to_string(kMaxArrayIndex));
    }
    walked += (*hi - *lo) / step + 1;
    if (walked > max_elements) {
      return bad("more than " + std::to_string(max_elements) + " elements" + hint);
    }
    for (int64_t i = *lo; i <= *hi; i += step) seen.insert(static_cast<int>(i));
  }
  spec.indices.assign(seen.begin(), seen.end());
  return spec;
}

std::string_view AttemptEndName(AttemptEnd e) {
  switch (e) {
    case AttemptEnd::kPreempted:
      return "preempted";
    case AttemptEnd::kLost:
      return "lost";
    case AttemptEnd::kGpuFailed:
      return "gpu_failed";
  }
  return "?";
}

std::optional<AttemptEnd> ParseAttemptEnd(std::string_view name) {
  for (AttemptEnd e : {AttemptEnd::kPreempted, AttemptEnd::kLost, AttemptEnd::kGpuFailed}) {
    if (AttemptEndName(e) == name) return e;
  }
  return std::nullopt;
}

std::string_view LateTaskEndName(LateTaskEnd e) {
  switch (e) {
    case LateTaskEnd::kUnreported:
      return "unreported";
    case LateTaskEnd::kSucceeded:
      return "succeeded";
    case LateTaskEnd::kFailedOrStopped:
      return "failed_or_stopped";
  }
  return "?";
}

std::optional<LateTaskEnd> ParseLateTaskEnd(std::string_view name) {
  for (LateTaskEnd e :
       {LateTaskEnd::kUnreported, LateTaskEnd::kSucceeded, LateTaskEnd::kFailedOrStopped}) {
    if (LateTaskEndName(e) == name) return e;
  }
  return std::nullopt;
}

void AddEarlierAttempt(Job& job, EarlierAttempt a) {
  if (a.reason.size() > kMaxAttemptReason) {
    // Cut on a UTF-8 character's first byte, not inside one.
    size_t n = kMaxAttemptReason;
    while (n > 0 && (static_cast<unsigned char>(a.reason[n]) & 0xc0) == 0x80) --n;
    a.reason.resize(n);
  }
  std::vector<EarlierAttempt>& v = job.earlier_attempts;
  v.push_back(std::move(a));
  if (v.size() <= kMaxEarlierAttempts) return;
  v[1].attempt = v[0].attempt;
  v[1].merged += v[0].merged;
  v[1].start_time_us = std::min(v[0].start_time_us, v[1].start_time_us);
  v[1].end_time_us = std::max(v[0].end_time_us, v[1].end_time_us);
  v[1].gpu_hours += v[0].gpu_hours;
  v.erase(v.begin());
}

std::map<std::string, std::string> ArrayEnvironment(const Job& job) {
  if (job.array_id == 0) return {};
  std::map<std::string, std::string> env{
      {"GPUPOOL_ARRAY_JOB_ID", std::to_string(job.array_id)},
      {"GPUPOOL_ARRAY_TASK_ID", std::to_string(job.array_index)},
  };
  // The spec was accepted at submit, under a bound the server may have lowered since.
  if (Result<ArraySpec> spec = ParseArraySpec(job.array); spec.ok()) {
    env["GPUPOOL_ARRAY_TASK_COUNT"] = std::to_string(spec->indices.size());
    env["GPUPOOL_ARRAY_TASK_MIN"] = std::to_string(spec->indices.front());
    env["GPUPOOL_ARRAY_TASK_MAX"] = std::to_string(spec->indices.back());
  }
  return env;
}

std::string DefaultJobName(const Job& job) {
  if (job.command.empty()) return job.interactive == "alloc" ? "alloc" : "";
  std::string_view path = job.command.front();
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  if (const size_t slash = path.rfind('/'); slash != path.npos && path.size() > 1) {
    path.remove_prefix(slash + 1);
  }
  std::string name(path.substr(0, 128));
  for (char& c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return name;
}

int64_t SubmissionBytes(const Job& job) {
  int64_t n = 0;
  auto add = [&n](const std::string& s) { n += static_cast<int64_t>(s.size()) + 1; };
  for (const std::string& a : job.command) add(a);
  for (const auto& [k, v] : job.env) n += static_cast<int64_t>(k.size() + 1 + v.size()) + 1;
  for (const Mount& m : job.mounts) {
    add(m.source);
    add(m.target);
  }
  for (const std::string& m : job.request.gpu_models) add(m);
  for (const std::string& m : job.request.nodelist) add(m);
  for (const std::string& m : job.request.exclude) add(m);
  for (const std::string* s :
       {&job.workdir, &job.name, &job.project, &job.image, &job.environment, &job.env_dir,
        &job.request.vendor, &job.request.min_capability, &job.interactive, &job.array,
        &job.submit_key, &job.output, &job.error, &job.script.get()}) {
    if (!s->empty()) add(*s);  // an empty one is no string given
  }
  return n;
}

bool IsTerminal(JobState s) {
  switch (s) {
    case JobState::kSucceeded:
    case JobState::kFailed:
    case JobState::kCancelled:
    case JobState::kTimeout:
    case JobState::kLost:
      return true;
    default:
      return false;
  }
}

bool IsValidTransition(JobState from, JobState to) {
  using S = JobState;
  switch (from) {
    case S::kPending:
      // SUCCEEDED: a requeued job whose lost attempt's node reported, late, that it had
      // succeeded (docs/health.md, "An end reported late"): it is not run again.
      return to == S::kPending || to == S::kAssigned || to == S::kCancelled || to == S::kSucceeded;
    case S::kAssigned:
    case S::kRunning:
      // ASSIGNED ends without running when its tasks fail to start or are stopped first;
      // PENDING again is a requeue (its node was lost, with --requeue). A task's start or
      // end that does not change the job's state is a transition to the same state.
      if (to == S::kAssigned) return from == S::kAssigned;
      return to == S::kRunning || to == S::kSucceeded || to == S::kFailed || to == S::kCancelled ||
             to == S::kTimeout || to == S::kLost || to == S::kPending;
    case S::kSucceeded:
    case S::kFailed:
    case S::kCancelled:
    case S::kTimeout:
    case S::kLost:
      // An ended job's state is final; its record may still take the late end of a lost
      // attempt (docs/health.md, "An end reported late"), in the same state.
      return to == from;
  }
  return false;
}

}  // namespace gpupool::jobs
