// gpupool cancel --signal (Slurm's scancel --signal): a signal to a running job's tasks,
// which go on running. The controller changes nothing of the job; it queues one order per
// task for the task's agent (protocol::SignalOrder), taken by the agent's next poll answer
// and never again, and waits for the agents to confirm them: a signal is delivered at once
// or never (job_signal.h).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/strings.h"
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
      if (!job.held_by.empty()) {
        return id + " is held (by " + job.held_by +
               ") and has no process to signal: only a running job can be signalled "
               "(gpupool release it; it can be signalled once it runs)";
      }
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
using QueueOf = std::function<SignalQueue*(const std::string& node, std::string* why)>;

// The orders queued on one node by one SignalJob, and the tasks they are for.
struct HandedOver {
  uint64_t takes_before = 0;  // SignalQueue::takes as they were queued
  std::vector<protocol::SignalOrder> orders;
  std::vector<std::string> tasks;  // "job 12 task 1"
};

// The orders for one running job's tasks (in `handed`, by node), or why a task was missed.
void QueueSignal(const Job& job, int sig, bool main_only, const QueueOf& queue_of,
                 std::map<std::string, HandedOver>* handed, SignalSent* out) {
  bool queued = false;
  for (size_t t = 0; t < job.tasks.size() && t < job.placement.size(); ++t) {
    const jobs::TaskStatus& ts = job.tasks[t];
    if (ts.start_time_us == 0 || ts.ended) continue;
    // --batch: the batch script's shell, task 0's main process. An --mpi job's other
    // tasks run nothing of the user's but mpirun's daemons, which mpirun signals itself.
    if ((main_only || job.mpi) && t > 0) continue;
    const std::string& node = job.placement[t].node;
    const std::string task = "job " + lifecycle::UserJobId(job) + " task " + std::to_string(t);
    std::string why;
    SignalQueue* queue = queue_of(node, &why);
    if (queue == nullptr) {
      out->missed.push_back(task + ": node " + node + why);
      continue;
    }
    const protocol::SignalOrder order{job.id, job.attempt, static_cast<int>(t), sig, main_only};
    queue->orders.push_back(order);
    auto [h, first] = handed->try_emplace(node);
    if (first) h->second.takes_before = queue->takes;
    h->second.orders.push_back(order);
    h->second.tasks.push_back(task);
    queued = true;
  }
  if (queued) ++out->jobs;
}

// Takes `gone` (one of each) out of `orders`: orders no poll took, withdrawn.
void Withdraw(const std::vector<protocol::SignalOrder>& gone,
              std::vector<protocol::SignalOrder>* orders) {
  for (const protocol::SignalOrder& o : gone) {
    auto it = std::find(orders->begin(), orders->end(), o);
    if (it != orders->end()) orders->erase(it);
  }
}

// "for 7 s" since a poll arrived at `since_us` (0: never).
std::string NoPollFor(int64_t since_us, int64_t now_us) {
  if (since_us == 0) return "has not polled since the controller started";
  return "has not polled for " + std::to_string((now_us - since_us) / 1'000'000) + " s";
}

// "array 40 has no running element to signal (3 pending, 1 held)".
std::string NoneRuns(int64_t array, const std::map<std::string, int>& others) {
  std::string states;
  for (const auto& [state, n] : others) {
    states += (states.empty() ? "" : ", ") + std::to_string(n) + " " + state;
  }
  return "array " + std::to_string(array) + " has no running element to signal (" +
         (states.empty() ? std::string("all have ended") : states) +
         "): only running jobs can be signalled";
}

// Waits (up to kSignalConfirmUs of `clock`, on `cv` with `lock`) for each node's agent to
// take its orders and poll again after; then withdraws the orders no poll took, so that
// an agent that comes back later never gets them, and says which were not confirmed.
// `queue`: a node's queue (called under the lock).
void AwaitConfirmations(const Clock& clock, std::condition_variable& cv,
                        std::unique_lock<std::mutex>& lock,
                        const std::function<SignalQueue&(const std::string&)>& queue,
                        const std::map<std::string, HandedOver>& handed, SignalSent* out) {
  const auto confirmed = [&](const std::string& node, const HandedOver& h) {
    const SignalQueue& q = queue(node);
    return q.takes != h.takes_before && q.polls > q.taken_at_poll;
  };
  clock.WaitUntil(cv, lock, clock.MonotonicMicros() + kSignalConfirmUs, [&] {
    return std::all_of(handed.begin(), handed.end(),
                       [&](const auto& h) { return confirmed(h.first, h.second); });
  });
  const int64_t now = clock.MonotonicMicros();
  for (const auto& [node, h] : handed) {
    SignalQueue& q = queue(node);
    if (confirmed(node, h)) {
      out->tasks += static_cast<int>(h.tasks.size());
      continue;
    }
    const bool taken = q.takes != h.takes_before;
    std::string why;
    if (!taken) {
      Withdraw(h.orders, &q.orders);
      why = ": node " + node + " is not answering (its agent " + NoPollFor(q.poll_mono_us, now) +
            "): withdrawn, its agent never gets it";
    } else {
      why = ": node " + node +
            " stopped answering as its agent was handed it (no poll since): its agent "
            "carries it out only if it reads it within " +
            std::to_string(protocol::kSignalOrderMaxAgeMs / 1000) + " s, else drops it";
    }
    for (const std::string& task : h.tasks) {
      (taken ? out->unconfirmed : out->missed).push_back(task + why);
    }
  }
}

}  // namespace

void NotePollArrived(SignalQueue& q, int64_t now_us, std::condition_variable& waiting) {
  ++q.polls;
  q.poll_mono_us = now_us;
  waiting.notify_all();
}

std::vector<protocol::SignalOrder> TakeSignalOrders(SignalQueue& q, int64_t now_us,
                                                    std::condition_variable& waiting) {
  std::vector<protocol::SignalOrder> out = std::move(q.orders);
  q.orders.clear();
  if (out.empty()) return out;
  ++q.takes;
  q.taken_at_poll = q.polls;
  const int64_t held_ms =
      q.poll_mono_us == 0 ? 0 : std::max<int64_t>(0, now_us - q.poll_mono_us) / 1000;
  for (protocol::SignalOrder& o : out) o.held_ms = held_ms;
  waiting.notify_all();
  return out;
}

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
  std::map<std::string, HandedOver> handed;
  Lock lock(mu_);
  const QueueOf queue_of = [this](const std::string& node, std::string* why) REQUIRES(mu_) {
    auto n = nodes_.find(node);
    if (n == nodes_.end() || !n->second.up) {
      *why = " is down";
      return static_cast<SignalQueue*>(nullptr);
    }
    if (!protocol::SupportsSignal(n->second.version)) {
      *why = "'s agent (agent protocol " + protocol::VersionString(n->second.version) +
             ") cannot signal jobs: upgrade it";
      return static_cast<SignalQueue*>(nullptr);
    }
    return &n->second.signals;
  };
  if (!array) {
    auto it = active_.find(id);
    const Job& job = it != active_.end() ? it->second : head;
    if (std::string why = WhyNotSignalled(job); !why.empty()) {
      return Status::FailedPrecondition(why);
    }
    QueueSignal(job, sig, main_only, queue_of, &handed, &out);
  } else {
    std::map<std::string, int> others;  // elements that do not run, by state
    for (int64_t element : index_.ArrayElements(id)) {
      const Job& job = active_.at(element);
      GP_RETURN_IF_ERROR(internal::CheckOwner(job, caller));
      if (job.state == JobState::kRunning) {
        QueueSignal(job, sig, main_only, queue_of, &handed, &out);
      } else {
        ++others[job.state == JobState::kPending && !job.held_by.empty()
                     ? "held"
                     : ToLower(jobs::JobStateName(job.state))];
      }
    }
    if (handed.empty() && out.missed.empty())
      return Status::FailedPrecondition(NoneRuns(id, others));
  }
  for (const auto& [node, h] : handed) WakeAgent(node);
  const auto queue = [this](const std::string& node) -> SignalQueue& {
    mu_.AssertHeld();  // called by AwaitConfirmations under it
    return nodes_.at(node).signals;
  };
  AwaitConfirmations(*clock_, signal_cv_, lock.native(), queue, handed, &out);
  lock.Unlock();
  if (out.tasks == 0) {
    std::string why;
    for (const std::string& m : out.missed) why += (why.empty() ? "" : "; ") + m;
    for (const std::string& m : out.unconfirmed) why += (why.empty() ? "" : "; ") + m;
    return Status::FailedPrecondition("signal " + std::to_string(sig) + " " +
                                      (out.unconfirmed.empty() ? "not sent" : "not confirmed") +
                                      ": " + why);
  }
  spdlog::info(
      "signal {} to {} {} by {}: {} tasks of {} jobs{}{}{}", sig, array ? "array" : "job", id,
      caller.user, out.tasks, out.jobs, main_only ? " (main process only)" : "",
      out.missed.empty() ? "" : ", missed " + std::to_string(out.missed.size()),
      out.unconfirmed.empty() ? "" : ", unconfirmed " + std::to_string(out.unconfirmed.size()));
  return out;
}

}  // namespace gpupool::controller
