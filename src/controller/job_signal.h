// gpupool cancel --signal (Slurm's scancel --signal), Controller::SignalJob(id, caller, sig,
// main_only, array): `sig` (1..64) to the running job `id`, which goes on running (its
// state is unchanged), or with `array` and the id of an array to every running element of
// it. To every task that runs, or with main_only to task 0's main process only (scancel
// --batch); an --mpi job's to task 0 (its other tasks hold mpirun's daemons, and mpirun
// passes USR1 and USR2 on). Queued for the tasks' agents (NodeEntry::signals, one
// protocol::SignalOrder per task, only for agents of protocol 1.4 on) and sent with their
// next poll answer, once: never resent, and lost with an answer the agent never reads.
// Owners and admins only, as Cancel. FailedPrecondition: the job does not run (pending,
// starting, ended), is a gpupool run/alloc session, an array has no running element, or
// no task could be reached (the message says why). Plain data; thread-compatible.
#pragma once

#include <string>
#include <vector>

namespace gpupool::controller {

// What a signal to a job, or to an array's running elements, did.
struct SignalSent {
  bool array = false;  // sent to an array's running elements
  int jobs = 0;        // running jobs it was sent to
  int tasks = 0;       // their tasks it was sent to (each task's agent gets it once)
  // Running tasks it could not be sent to, and why ("job 12 task 1: node n2 is down").
  std::vector<std::string> missed;
};

}  // namespace gpupool::controller
