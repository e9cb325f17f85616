// GPU-hours accounting: how much GPU each user or project held in a time window.
// A job holds num_gpus x gpu_milli/1000 GPUs per task from its start to its end (or
// `now` while it runs); only the part inside the window counts. Its earlier attempts
// (jobs::Job::earlier_attempts: preempted, lost or on a failed GPU, and requeued) count
// too, each the GPU-hours its tasks ran, in proportion to the part of its run inside the
// window. Used GPU-hours weigh that
// by the measured utilisation (telemetry.h: share x utilisation x time, per job), and
// efficiency is used / allocated.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "jobs/job.h"

namespace gpupool::controller {

struct UsageRow {
  // User, or (by project) fair-share group: the job's project, else its user's name
  // (jobs::AccountingProject), as limits and fair share count it.
  std::string key;
  // By project: the row holds jobs without a project of user `key` (their own group; a
  // project named `key` is the same group, and its jobs are counted in the same row).
  bool own_group = false;
  double gpu_hours = 0;       // allocated
  double used_gpu_hours = 0;  // utilisation-weighted (jobs without samples add nothing)
  int jobs = 0;
  // used / allocated; 0 when nothing was allocated.
  double efficiency() const { return gpu_hours > 0 ? used_gpu_hours / gpu_hours : 0; }
};

// The GPU-hours job `j` held inside [since_us, until_us) (up to now_us while it runs),
// its earlier attempts' included. A LOST job's, or a lost attempt's, whose nodes reported
// its tasks' real ends late (docs/health.md, "An end reported late"): all its GPUs up to
// the loss, then each task's GPUs up to that task's own end (a task never reported, or
// ended by the loss, adds nothing past it); a record kept without each task's end (an
// older server's): all its GPUs up to the latest end.
double JobGpuHours(const jobs::Job& j, int64_t since_us, int64_t until_us, int64_t now_us);

// The part of JobGpuHours a LOST job's tasks held past its end_time_us (the loss), up to
// the ends their nodes reported late, inside [since_us, until_us); 0 without a late end.
double LateGpuHours(const jobs::Job& j, int64_t since_us, int64_t until_us);

// The (user, project) of /metrics' GPU-hours series (pool_accounting.h): project "(none)"
// for a job without one.
std::pair<std::string, std::string> MetricsKey(const jobs::Job& j);

// /metrics: the GPU-hours of a waiting job's earlier attempts (requeued: preempted, lost,
// its GPU failed), added to `gpu_hours` under MetricsKey; nothing for a job that is not
// pending. No other count of a scrape holds them: those are of the jobs that hold resources
// and of the ended ones (Controller::MetricsSnapshot calls it for each pending job).
void AddWaitingGpuHours(const jobs::Job& j,
                        std::map<std::pair<std::string, std::string>, double>* gpu_hours);

// `by` is "user" or "project" (a job without a project in its user's own group, named
// after the user: own_group). Rows sorted by GPU-hours, largest first. `used_hours`:
// each job's used GPU-hours inside the window (TelemetryHub::UsedGpuHours).
std::vector<UsageRow> ComputeUsage(const std::vector<jobs::Job>& jobs, int64_t since_us,
                                   int64_t until_us, int64_t now_us, const std::string& by,
                                   const std::map<int64_t, double>& used_hours = {});

// The fair-share groups of the jobs that held GPUs inside the window: their users, or
// (`by_project`) their jobs::AccountingProject, as the scheduler groups them.
std::set<std::string> UsageGroups(const std::vector<jobs::Job>& jobs, int64_t since_us,
                                  int64_t until_us, int64_t now_us, bool by_project);

// A fair-share group's weight (sshare's RawShares) and normalised share (NormShares): its
// weight over the sum of the weights of `groups` (it included).
struct GroupShare {
  double weight = 1;
  double norm = 0;
};
GroupShare ShareOfGroup(const std::string& group, const std::set<std::string>& groups,
                        const std::map<std::string, double, std::less<>>& weights);

}  // namespace gpupool::controller
