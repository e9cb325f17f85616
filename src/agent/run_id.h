// The identity of what runs on a node, as values: a task of a pool job is (job, task,
// attempt) (TaskId), and what one shim supervises is a task's attempt or a `gpupool exec`
// session inside it (RunId). Their directories under the agent's state directory read
// as users see them:
//
//   STATE/jobs/<job>/<task>.<attempt>/   a task's attempt: spec, shim record, status, logs
//   STATE/jobs/<job>/exec-<id>/           an exec session in one of the job's tasks
//
// (e.g. STATE/jobs/12/0.1/stdout.log). Agents before this layout keyed everything by a
// 64-bit number packed from the job and task (STATE/jobs/<key>/); LegacyRunId reads such
// a key back, so a running job started under the old layout is adopted where it is, and
// its logs stay readable (job_files.h, ReadJobLogSlice). Plain values and functions;
// thread-safe. Linked into the shim: nothing here may use spdlog or fmt.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpupool::agent {

// One attempt of one task of a pool job.
struct TaskId {
  int64_t job = 0;
  int task = 0;
  int attempt = 1;
  friend auto operator<=>(const TaskId&, const TaskId&) = default;
};

// What one shim supervises: one attempt of one task (exec = 0), or the exec session
// `exec` inside it (job, task and attempt are then its task's).
struct RunId {
  int64_t job = 0;
  int task = 0;
  int attempt = 1;
  int64_t exec = 0;

  static RunId Of(const TaskId& t) { return {t.job, t.task, t.attempt, 0}; }
  static RunId ExecIn(const TaskId& t, int64_t exec_id) {
    return {t.job, t.task, t.attempt, exec_id};
  }
  bool is_exec() const { return exec != 0; }
  TaskId task_id() const { return {job, task, attempt}; }
  friend auto operator<=>(const RunId&, const RunId&) = default;
};

// "job 12 task 0 attempt 1", "exec 7 in job 12 task 0 attempt 1": for messages.
std::string ToString(const RunId& id);

// The run's directory name inside STATE/jobs/<job>/: "<task>.<attempt>" or "exec-<id>".
std::string RunDirName(const RunId& id);
// STATE/jobs/<job>/<RunDirName>.
std::string JobDir(const std::string& state_dir, const RunId& id);
// Whether `name` is a RunDirName (digits, a dot, digits; or exec-digits).
bool IsRunDirName(std::string_view name);
// The run a directory STATE/jobs/<job>/<RunDirName> names (its exec session's task is not
// in the name: task 0, attempt 1); nullopt for any other path. For a shim that cannot
// read its spec and must still say whose status it writes.
std::optional<RunId> RunIdOfDir(std::string_view dir);

// The previous layout's launcher key (STATE/jobs/<key>/, cgroup leaves job-<key>-...):
// a single task's job id, a gang's task packed as 2^50 + job * 4096 + task, an exec
// session's 2^61 + id. `job`, `task` and `attempt` fill what the key does not say (an
// exec session's task; every attempt). Read-only: new runs never get such a key.
RunId LegacyRunId(int64_t key, int64_t job, int task, int attempt);
// The job a legacy key or a job id names (for cgroup leaves of either layout); 0 for an
// exec key.
int64_t JobOfLegacyKey(int64_t key);

}  // namespace gpupool::agent
