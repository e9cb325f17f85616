#include "jobs/job.h"

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
      return to == S::kAssigned || to == S::kCancelled || to == S::kFailed;
    case S::kAssigned:
      return to == S::kRunning || to == S::kPending || to == S::kCancelled || to == S::kFailed ||
             to == S::kLost || to == S::kSucceeded || to == S::kTimeout;
    case S::kRunning:
      return to == S::kSucceeded || to == S::kFailed || to == S::kCancelled || to == S::kTimeout ||
             to == S::kLost;
    case S::kLost:
      return to == S::kPending;  // requeue
    case S::kSucceeded:
    case S::kFailed:
    case S::kCancelled:
    case S::kTimeout:
      return false;
  }
  return false;
}

}  // namespace gpupool::jobs
