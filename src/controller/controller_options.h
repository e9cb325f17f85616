// The controller's options (ControllerOptions: what `gpupool server` and `up` set from their
// flags) and the check of their values that needs no store.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/status.h"
#include "controller/limits.h"
#include "controller/sched_input.h"
#include "jobs/job.h"
#include "sched/queue/queue_policy.h"

namespace gpupool::controller {

struct ControllerOptions {
  std::string placement_policy = "default";  // a name from the placement registry
  std::string queue_policy = "fair";         // a name from the queue registry
  std::string start_rule = "easy";           // strict | easy | skip
  int64_t node_timeout_us = 30'000'000;      // no poll for this long: the node is down
  int64_t node_lease_us = 0;  // --node-lease (docs/health.md; RegistrationReply); 0: none
  int64_t scheduler_period_us = 1'000'000;  // a pass at least this often
  // While the last pass could start nothing, new submissions wait up to this long so
  // that one pass plans them together; freed resources still trigger a pass at once.
  int64_t arrival_batch_us = 100'000;
  // At most this many jobs start in one scheduling pass (Slurm's sched_max_job_start;
  // --max-starts-per-pass; 0 = no bound), so that the commit of one pass after a mass release
  // holds the lock and the loop for a bounded time; a capped pass is followed by the next at once.
  size_t max_starts_per_pass = 1000;
  // Server --kill-wait (Slurm's KillWait): the nodes' stop grace, SIGKILL this long after
  // the SIGTERM of a cancel or a time limit; sent to each agent at its registration
  // (RegistrationReply::kill_wait_s). Less than time_limit_grace_s.
  int64_t kill_wait_s = 10;
  // An interactive exec session whose client made no request for this long is hung up (its
  // terminal went away); a `gpupool run` job whose client is absent that long is cancelled.
  int64_t exec_client_timeout_us = 15'000'000;
  // A running job whose node has not ended it this long past its time limit (--time) is
  // stopped by the controller and ends TIMEOUT (lifecycle::TimeLimit). The node's shim
  // stops it at the limit (SIGTERM, kill_wait_s, SIGKILL); this covers an agent cut off
  // from the controller while the node still polls, or a supervisor that is gone.
  int64_t time_limit_grace_s = 60;
  // Overrides of the GPU health policy's Xid table, "XID:ACTION,..." (server option
  // --health-xid; gpu/health_policy.h, docs/health.md).
  std::string health_xid;
  // Overrides of its threshold rows, "ROW:SUSPECT:CORDON,..." (--health-threshold).
  std::string health_threshold;
  // The health circuit breaker: automatic cordons stop once this fraction of the pool's
  // nodes (at least 1) had a GPU or itself taken out of service within the hour; past it,
  // errors are recorded (suspect, a log line, gpupool_health_actions_held_total), not acted
  // on, so that a driver bug cannot drain the pool (--health-breaker).
  double health_breaker_fraction = 0.1;
  // Resume only when proven (docs/health.md): a GPU the policy cordoned returns at a passing
  // health run once no Xid worth acting on came for this long (--health-resume-after; 0:
  // only an admin returns it). Strikes count within --health-strike-window (0: all).
  int64_t health_resume_after_us = int64_t{24} * 3600 * 1'000'000;
  int64_t health_strike_window_us = int64_t{30} * 24 * 3600 * 1'000'000;
  // Which shares a GPU whose node states enforcement "mps" takes at once: one user's
  // (default), one user's of one size (--mps-one-size) or several users' (--mps-multi-user);
  // other shares wait (sched_input.h, docs/sharing.md).
  MpsSharing mps_sharing = MpsSharing::kOneUser;
  // Preemption (docs/preemption.md): whether --preemptible jobs are stopped for waiting
  // ones (--preemption), a preemptible job's default --min-runtime and --grace (--preempt-*).
  bool preemption = true;
  int64_t preempt_min_runtime_s = 600;
  int64_t preempt_grace_s = 120;
  // A preemptor its user withdrew (cancelled, held) before it started, after it had
  // preempted another user's job, bars that user's jobs from preempting for this long
  // (--preempt-withdraw-cooldown; 0: never barred).
  int64_t preempt_withdraw_cooldown_s = 3600;
  ProjectEnforcement enforce_projects = ProjectEnforcement::kNone;  // --enforce-projects
  sched::FairShareGroup fair_by = sched::FairShareGroup::kUser;     // --fair-by (fair share)
  // Bounds on the queue (issue 25 item 7: one user queued 107,000 jobs in 25 s), from the
  // server's config file ([server] max-queued-per-user, ...). A submission past one is
  // refused whole, naming it; admins' too. Queued = PENDING (held too), an array's each.
  // A user's queued jobs, unless `gpupool limits` gives them (or every user) a max_queued.
  int64_t max_queued_per_user = 10'000;
  int64_t max_queued_total = 100'000;               // every user's together
  int max_array_size = jobs::kDefaultMaxArraySize;  // elements of one array
  // Bounds on bytes (jobs::SubmissionBytes: command, environment, paths), since the job
  // bounds alone let one user hold 10,000 x 1 MiB of the controller's memory. One job's
  // submission (refused whole, naming max-submission-bytes; HTTP 413): 1 MiB, half of
  // what Linux allows argv and envp together (ARG_MAX, 2 MiB with an 8 MiB stack), so a
  // job that passes can be started. What queued jobs hold, an array's elements counting
  // their shared submission once (HTTP 429, as the job bounds): per user and in all.
  int64_t max_submission_bytes = int64_t{1} << 20;
  int64_t max_queued_bytes_per_user = int64_t{256} << 20;
  int64_t max_queued_bytes_total = int64_t{1} << 30;
  // The server's watch of its store's disk (server/store_disk_watch.h): a submission is
  // refused with its error while it gives one. Empty: nothing refused for that.
  std::function<Status()> submission_room;
  // Where exec session ids come from: 64 random bits a call (empty: getrandom(2)); ids
  // are unguessable so that they tell nobody how many sessions others start (issue 25).
  std::function<uint64_t()> random;
  // Tests: runs on the pass's thread once a pass has planned, before it applies the plan.
  std::function<void()> after_plan_for_test;
  // Tests: runs where List or Nodes let mu_ go between two chunks of its copy.
  std::function<void()> between_chunks_for_test;
};

// The options' values, as the flags of `gpupool server` that set them (--queue, --start-rule,
// --policy, --health-xid, --health-threshold, --health-breaker): InvalidArgument naming the
// flag and the fix. Controller::Create checks them too; the daemons check them before they
// start anything, so that a bad value is a configuration mistake (exit status 2).
Status ValidateControllerOptions(const ControllerOptions& options);

}  // namespace gpupool::controller
