// gpupool cancel --signal (Slurm's scancel --signal), Controller::SignalJob(id, caller, sig,
// main_only, array): `sig` (1..64) to the running job `id`, which goes on running (its
// state is unchanged), or with `array` and the id of an array to every running element of
// it. To every task that runs, or with main_only to task 0's main process only (scancel
// --batch); an --mpi job's to task 0 (its other tasks hold mpirun's daemons, and mpirun
// passes USR1 and USR2 on). Owners and admins only, as Cancel.
//
// Delivered at once or never (docs/cli.md, "Signalling a running job"): one
// protocol::SignalOrder per task is queued for the task's agent (NodeEntry::signals, only
// for agents of protocol 1.4 on), taken by its next poll answer, never resent, and
// SignalJob waits up to kSignalConfirmUs for each agent to confirm it (its next poll, sent
// once it carried the answer out). An order no poll took by then is withdrawn: the agent
// is not answering (stopped, killed, cut off) and never gets it, not even as it comes
// back. One taken and not confirmed is `unconfirmed`: its agent stopped answering as it
// was handed over, and it carries the order out only if it reads it within
// kSignalOrderMaxAgeMs of the controller's answer (held_ms), else drops it. An order names
// the job's attempt: a requeued job's next attempt never gets its earlier one's.
// FailedPrecondition: the job does not run (pending, held, starting, ended), is a gpupool
// run/alloc session, an array has no running element, or no task was confirmed (the
// message says why for each). Plain data; thread-compatible.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/agent_protocol.h"

namespace gpupool::controller {

// What a signal to a job, or to an array's running elements, did.
struct SignalSent {
  bool array = false;  // sent to an array's running elements
  int jobs = 0;        // running jobs it was sent to
  int tasks = 0;       // their tasks it was sent to (each task's agent gets it once)
  // Running tasks it was not sent to, and why ("job 12 task 1: node n2 is down").
  std::vector<std::string> missed;
  // Tasks whose agent took it and did not confirm it, and what becomes of it.
  std::vector<std::string> unconfirmed;
};

// How long SignalJob waits for the agents to take and confirm their orders.
inline constexpr int64_t kSignalConfirmUs = 5'000'000;

// A node's signal orders (Controller::NodeEntry::signals) and what its agent did with
// them; mutated under the controller's lock.
struct SignalQueue {
  std::vector<protocol::SignalOrder> orders;  // for its next poll answer, once
  uint64_t polls = 0;                         // polls of its agent that arrived
  uint64_t takes = 0;                         // poll answers that took orders
  uint64_t taken_at_poll = 0;  // `polls` as they last did (confirmed by a later poll)
  int64_t poll_mono_us = 0;    // when its latest poll arrived (0: none yet)
};

// A poll of the node's agent arrived at monotonic time `now_us`: it confirms the orders
// taken before it. Notifies `waiting` (SignalJob's).
void NotePollArrived(SignalQueue& q, int64_t now_us, std::condition_variable& waiting);
// The orders for the answer to the poll that arrived last, each with how long the
// controller held that poll (held_ms, for the agent's age check); empty when none.
// Notifies `waiting` when it takes some.
std::vector<protocol::SignalOrder> TakeSignalOrders(SignalQueue& q, int64_t now_us,
                                                    std::condition_variable& waiting);

}  // namespace gpupool::controller
