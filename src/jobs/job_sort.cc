#include "jobs/job_sort.h"

#include <array>
#include <utility>

namespace gpupool::jobs {
namespace {

constexpr std::array<std::pair<JobSortField, std::string_view>, 14> kSortFieldNames = {{
    {JobSortField::kId, "id"},
    {JobSortField::kUser, "user"},
    {JobSortField::kName, "name"},
    {JobSortField::kProject, "project"},
    {JobSortField::kState, "state"},
    {JobSortField::kPriority, "priority"},
    {JobSortField::kGpus, "gpus"},
    {JobSortField::kNodes, "nodes"},
    {JobSortField::kSubmitted, "submitted"},
    {JobSortField::kStart, "start"},
    {JobSortField::kEnded, "ended"},
    {JobSortField::kWait, "wait"},
    {JobSortField::kRuntime, "runtime"},
    {JobSortField::kTimeLimit, "time_limit"},
}};

const std::string* SortTextOf(const Job& job, JobSortField f) {
  static const std::string kEmpty;
  switch (f) {
    case JobSortField::kUser:
      return &job.user;
    case JobSortField::kName:
      return &job.name;
    case JobSortField::kProject:
      return &job.project;
    case JobSortField::kNodes:
      return job.placement.empty() ? &kEmpty : &job.placement.front().node;
    default:
      return nullptr;
  }
}

// <0, 0, >0 as `a` sorts before, with, after `b` ascending by `f`.
int CompareBy(const Job& a, const Job& b, JobSortField f, int64_t now_us) {
  if (const std::string* ta = SortTextOf(a, f); ta != nullptr) {
    const int c = ta->compare(*SortTextOf(b, f));
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  const int64_t va = JobSortNumber(a, f, now_us);
  const int64_t vb = JobSortNumber(b, f, now_us);
  return va < vb ? -1 : va > vb ? 1 : 0;
}

}  // namespace

std::string_view JobSortFieldName(JobSortField f) {
  for (const auto& [field, name] : kSortFieldNames) {
    if (field == f) return name;
  }
  return "id";
}

std::string JobSortFieldList() {
  std::string out;
  for (const auto& [field, name] : kSortFieldNames)
    out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

Result<std::vector<JobSortKey>> ParseJobSort(std::string_view text, bool descending_default,
                                             std::string_view what) {
  std::vector<JobSortKey> keys;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    std::string_view item = text.substr(pos, comma - pos);
    pos = comma + 1;
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.empty()) continue;
    JobSortKey key;
    key.descending = descending_default;
    if (item.front() == '-' || item.front() == '+') {
      key.descending = item.front() == '-';
      item.remove_prefix(1);
    }
    bool found = false;
    for (const auto& [field, name] : kSortFieldNames) {
      if (item == name) {
        key.field = field;
        found = true;
      }
    }
    if (!found) {
      return Status::InvalidArgument(std::string(what) + ": unknown field '" + std::string(item) +
                                     "'; use " + JobSortFieldList() +
                                     " (-FIELD for descending), e.g. state,-priority");
    }
    if (keys.size() >= kSortFieldNames.size()) {
      return Status::InvalidArgument(std::string(what) + ": at most " +
                                     std::to_string(kSortFieldNames.size()) + " fields");
    }
    keys.push_back(key);
  }
  if (keys.empty()) {
    return Status::InvalidArgument(std::string(what) + ": give a field, one of " +
                                   JobSortFieldList());
  }
  return keys;
}

std::string JobSortText(const std::vector<JobSortKey>& keys) {
  std::string out;
  for (const JobSortKey& k : keys) {
    out += (out.empty() ? "" : ",") + std::string(k.descending ? "-" : "") +
           std::string(JobSortFieldName(k.field));
  }
  return out;
}

int64_t JobSortNumber(const Job& job, JobSortField f, int64_t now_us) {
  switch (f) {
    case JobSortField::kId:
      return job.id;
    case JobSortField::kState:
      return static_cast<int64_t>(job.state);
    case JobSortField::kPriority:
      return job.priority;
    case JobSortField::kGpus:
      return int64_t{job.request.gpus} * job.request.gpu_milli * job.request.tasks;
    case JobSortField::kSubmitted:
      return job.submit_time_us;
    case JobSortField::kStart:
      return job.start_time_us;
    case JobSortField::kEnded:
      return job.end_time_us;
    case JobSortField::kWait: {
      const int64_t until = job.start_time_us > 0 ? job.start_time_us
                            : job.end_time_us > 0 ? job.end_time_us
                                                  : now_us;
      return until - job.submit_time_us;
    }
    case JobSortField::kRuntime:
      if (job.start_time_us <= 0) return 0;
      return (job.end_time_us > 0 ? job.end_time_us : now_us) - job.start_time_us;
    case JobSortField::kTimeLimit:
      return job.time_limit_s;
    default:
      return 0;
  }
}

bool JobSortLess(const Job& a, const Job& b, const std::vector<JobSortKey>& keys, int64_t now_us) {
  for (const JobSortKey& k : keys) {
    const int c = CompareBy(a, b, k.field, now_us);
    if (c != 0) return k.descending ? c > 0 : c < 0;
  }
  const bool descending = !keys.empty() && keys.front().descending;
  return descending ? a.id > b.id : a.id < b.id;
}

}  // namespace gpupool::jobs
