#include "store/job_cas.h"

#include <set>
#include <string>
#include <string_view>

namespace gpupool::store {
namespace {

// Every conflict's message holds this; IsConflict looks for it.
constexpr std::string_view kChanged = " changed since it was read: ";

std::string StateAt(jobs::JobState state, int64_t version) {
  return std::string(jobs::JobStateName(state)) + " at version " + std::to_string(version);
}

}  // namespace

bool IsConflict(const Status& s) {
  return s.code() == StatusCode::kFailedPrecondition &&
         s.message().find(kChanged) != std::string::npos;
}

namespace internal {

Status ConflictError(const JobConflict& c, size_t more) {
  std::string msg = "job " + std::to_string(c.id) + std::string(kChanged) + "it is " +
                    StateAt(c.state, c.version) + ", not " +
                    StateAt(c.expected, c.expected_version);
  if (more > 0) {
    msg += " (and " + std::to_string(more) + " more job" + (more == 1 ? "" : "s") +
           " of this write changed too)";
  }
  return Status::FailedPrecondition(std::move(msg));
}

Status SettingConflictError(std::string_view key, int64_t found, int64_t expected) {
  return Status::FailedPrecondition("setting " + std::string(key) + std::string(kChanged) +
                                    "it is at revision " + std::to_string(found) + ", not " +
                                    std::to_string(expected));
}

Status CasFailure(const std::vector<Store::JobUpdate>& updates, size_t failed,
                  const std::map<int64_t, StoredVersion>& found,
                  std::vector<JobConflict>* conflicts) {
  std::vector<JobConflict> differ;
  int64_t missing = 0;
  std::set<int64_t> seen;
  for (const Store::JobUpdate& u : updates) {
    const int64_t id = u.job.id;
    if (!seen.insert(id).second) continue;  // a later update of a job: expects the earlier's
    auto f = found.find(id);
    if (f == found.end()) {
      if (missing == 0) missing = id;
      continue;
    }
    if (f->second.state != u.expected || f->second.version != u.expected_version) {
      differ.push_back({id, f->second.state, f->second.version, u.expected, u.expected_version});
    }
  }
  if (differ.empty() && missing == 0 && failed < updates.size()) {
    const Store::JobUpdate& u = updates[failed];
    auto f = found.find(u.job.id);
    if (f == found.end()) {
      missing = u.job.id;
    } else {
      differ.push_back(
          {u.job.id, f->second.state, f->second.version, u.expected, u.expected_version});
    }
  }
  if (conflicts != nullptr) *conflicts = differ;
  if (missing != 0) return Status::NotFound("no job " + std::to_string(missing));
  if (differ.empty()) return Status::Internal("a job compare-and-set failed for no reason found");
  return ConflictError(differ.front(), differ.size() - 1);
}

}  // namespace internal
}  // namespace gpupool::store
