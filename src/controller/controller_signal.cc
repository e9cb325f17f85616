// gpupool cancel --signal (Slurm's scancel --signal): a signal to a running job's tasks,
// which go on running. The controller changes nothing of the job; it queues one order per
// task for the task's agent (protocol::SignalOrder), sent with the agent's next poll answer
// and never again, as the signal is fire and forget.
#include <spdlog/spdlog.h>

#include <functional>
#include <string>
#include <vector>

#include "controller/controller.h"
#include "controller/controller_internal.h"
#include "controller/job_lifecycle.h"

namespace gpupool::controller {

using jobs::Job;
using jobs::JobState;

namespace {

// Why job `job` (owned by the caller) takes no signal now; empty when it does.
std::string WhyNotSignalled(const Job& job) {
  const std::string id = "job " + lifecycle::UserJobId(job);
  if (!job.interactive.empty()) {
    return id + " is a gpupool " + job.interactive +
           " session: its command runs as a session of its own (on your machine, for alloc), "
           "which a job's signal does not reach; signal the command itself (kill -s SIG PID)";
  }
  switch (job.state) {
    case JobState::kRunning:
      return "";
    case JobState::kPending:
      return id +
             " is pending and has no process to signal: only a running job can be "
             "signalled (cancel it without --signal to take it out of the queue)";
    case JobState::kAssigned:
      return id + " is starting: only a running job can be signalled; try again once it runs";
    default:
      return id + " has ended (" + std::string(jobs::JobStateName(job.state)) +
             "): only a running job can be signalled";
  }
}

// Where a task's order goes: its node's queue, or null and why not.
using QueueOf =
    std::function<std::vector<protocol::SignalOrder>*(const std::string& node, std::string* why)>;

// The orders for one running job's tasks, or why a task was missed.
void QueueSignal(const Job& job, int sig, bool main_only, const QueueOf& queue_of,
                 SignalSent* out) {
  int sent = 0;
  for (size_t t = 0; t < job.tasks.size() && t < job.placement.size(); ++t) {
    const jobs::TaskStatus& ts = job.tasks[t];
    if (ts.start_time_us == 0 || ts.ended) continue;
    // --batch: the batch script's shell, task 0's main process. An --mpi job's other
    // tasks run nothing of the user's but mpirun's daemons, which mpirun signals itself.
    if ((main_only || job.mpi) && t > 0) continue;
    const std::string& node = job.placement[t].node;
    std::string why;
    std::vector<protocol::SignalOrder>* queue = queue_of(node, &why);
    if (queue == nullptr) {
      out->missed.push_back("job " + lifecycle::UserJobId(job) + " task " + std::to_string(t) +
                            ": node " + node + why);
      continue;
    }
    queue->push_back({job.id, job.attempt, static_cast<int>(t), sig, main_only});
    ++sent;
  }
  out->tasks += sent;
  if (sent > 0) ++out->jobs;
}

}  // namespace

Result<SignalSent> Controller::SignalJob(int64_t id, const Caller& caller, int sig, bool main_only,
                                         bool whole_array) {
  if (sig < 1 || sig > 64) {
    return Status::InvalidArgument("signal: " + std::to_string(sig) +
                                   " is no signal; give 1..64 (10 is SIGUSR1)");
  }
  // The owner's check, and a job that is not active read from the store.
  GP_ASSIGN_OR_RETURN(Job head, Get(id, caller));
  const bool array = whole_array && head.array_id == id;
  SignalSent out;
  out.array = array;
  {
    MutexLock lock(mu_);
    const QueueOf queue_of = [this](const std::string& node, std::string* why) REQUIRES(mu_) {
      auto n = nodes_.find(node);
      if (n == nodes_.end() || !n->second.up) {
        *why = " is down";
        return static_cast<std::vector<protocol::SignalOrder>*>(nullptr);
      }
      if (!protocol::SupportsSignal(n->second.version)) {
        *why = "'s agent (agent protocol " + protocol::VersionString(n->second.version) +
               ") cannot signal jobs: upgrade it";
        return static_cast<std::vector<protocol::SignalOrder>*>(nullptr);
      }
      return &n->second.signals;
    };
    if (!array) {
      auto it = active_.find(id);
      const Job& job = it != active_.end() ? it->second : head;
      if (std::string why = WhyNotSignalled(job); !why.empty()) {
        return Status::FailedPrecondition(why);
      }
      QueueSignal(job, sig, main_only, queue_of, &out);
    } else {
      for (int64_t element : index_.ArrayElements(id)) {
        const Job& job = active_.at(element);
        GP_RETURN_IF_ERROR(internal::CheckOwner(job, caller));
        if (job.state == JobState::kRunning) QueueSignal(job, sig, main_only, queue_of, &out);
      }
      if (out.tasks == 0 && out.missed.empty()) {
        return Status::FailedPrecondition("array " + std::to_string(id) +
                                          " has no running element to signal");
      }
    }
  }
  if (out.tasks == 0) {
    std::string why;
    for (const std::string& m : out.missed) why += (why.empty() ? "" : "; ") + m;
    return Status::FailedPrecondition("signal " + std::to_string(sig) + " not sent: " + why);
  }
  work_cv_.notify_all();
  spdlog::info("signal {} to {} {} by {}: {} tasks of {} jobs{}{}", sig, array ? "array" : "job",
               id, caller.user, out.tasks, out.jobs, main_only ? " (main process only)" : "",
               out.missed.empty() ? "" : ", missed " + std::to_string(out.missed.size()));
  return out;
}

}  // namespace gpupool::controller
