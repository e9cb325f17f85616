// The job lifecycle's part for `gpupool checkpoint-done` (docs/preemption.md): a job being
// preempted says it has checkpointed. Said by one task of a job of several (the client run
// inside that task sends its index), it ends that task's grace alone, as that task's exit
// would: the others go on saving theirs. Said without a task (from outside the job, or by
// a client older than the field), or in a job of one task, it ends the whole job's grace.
// The job's grace as a whole is over once every task has ended or said it
// (Job::checkpoint_done). Used by job_lifecycle.cc (Step's CheckpointDone, Settle); pure,
// as it is.
#pragma once

#include "common/status.h"
#include "controller/job_lifecycle.h"
#include "jobs/job.h"

namespace gpupool::controller::lifecycle {

// What `e` does to `job`. InvalidArgument naming `task` for an index the job does not
// have; FailedPrecondition for a job not being preempted. Said again (or by a task that
// has ended, or after the whole job's grace ended) it changes nothing.
Result<Transition> OnCheckpointDone(const jobs::Job& job, const CheckpointDone& e);

// Whether `job`, being preempted, has some task that said checkpoint-done and every task
// ended or said it: its grace as a whole is over (Settle marks the job so).
bool EveryTaskCheckpointedOrEnded(const jobs::Job& job);

}  // namespace gpupool::controller::lifecycle
