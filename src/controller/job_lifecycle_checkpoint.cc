#include "controller/job_lifecycle_checkpoint.h"

#include <algorithm>
#include <string>

namespace gpupool::controller::lifecycle {
namespace {

using jobs::Job;

// The whole job's grace ends: one stop order without grace for all its tasks.
Transition WholeJobDone(const Job& job, Job next, const std::string& log) {
  next.checkpoint_done = true;
  Transition t = Changed(job, std::move(next));
  t.effects.resend_stop = true;  // a stop order without grace
  t.effects.notify_nodes = true;
  t.effects.log = log;
  return t;
}

}  // namespace

bool EveryTaskCheckpointedOrEnded(const jobs::Job& job) {
  const auto& tasks = job.tasks;
  return job.preempted_by != 0 && !tasks.empty() &&
         std::any_of(tasks.begin(), tasks.end(),
                     [](const jobs::TaskStatus& s) { return s.checkpoint_done; }) &&
         std::all_of(tasks.begin(), tasks.end(),
                     [](const jobs::TaskStatus& s) { return s.ended || s.checkpoint_done; });
}

Result<Transition> OnCheckpointDone(const jobs::Job& job, const CheckpointDone& e) {
  const std::string id = std::to_string(job.id);
  if (e.task && (*e.task < 0 || *e.task >= std::max(job.request.tasks, 1))) {
    // The range the user knows: the job's tasks as submitted (its placement has as many).
    return Status::InvalidArgument("task: job " + UserJobId(job) + " has tasks 0.." +
                                   std::to_string(std::max(job.request.tasks, 1) - 1) + ", not " +
                                   std::to_string(*e.task) +
                                   " (inside a task, GPUPOOL_TASK_INDEX is its index)");
  }
  if (!jobs::Occupies(job) || job.preempted_by == 0) {
    return Status::FailedPrecondition(
        "job " + UserJobId(job) + " is " + std::string(jobs::JobStateName(job.state)) +
        " and not being preempted; checkpoint-done ends the grace period of a preempted job");
  }
  if (job.checkpoint_done) return Unchanged(job);
  jobs::Job next = job;
  NormalizeTasks(next);
  // A job of one task, or one said from outside it: the whole job's grace, as ever.
  if (!e.task || next.tasks.size() <= 1) {
    return WholeJobDone(job, std::move(next),
                        "job " + id + ": " + e.by + " says it has checkpointed; its grace ends");
  }
  const auto t = static_cast<size_t>(*e.task);
  if (t >= next.tasks.size()) return Unchanged(job);  // cannot be: placed as submitted
  jobs::TaskStatus& task = next.tasks[t];
  // Ended, its grace is over already; said again, nothing new.
  if (task.ended || task.checkpoint_done) return Unchanged(job);
  task.checkpoint_done = true;
  const std::string said = "job " + id + " task " + std::to_string(t) + ": " + e.by +
                           " says it has checkpointed; its grace ends";
  if (EveryTaskCheckpointedOrEnded(next)) {
    return WholeJobDone(job, std::move(next),
                        said + ", and every task has ended or checkpointed: the job's grace ends");
  }
  Transition tr = Changed(job, std::move(next));
  tr.effects.stop_tasks.push_back(static_cast<int>(t));  // a stop order without grace, its own
  tr.effects.notify_nodes = true;
  tr.effects.log = said + " (the other tasks' goes on)";
  return tr;
}

}  // namespace gpupool::controller::lifecycle
