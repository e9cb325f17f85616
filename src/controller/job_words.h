// What the job lifecycle (job_lifecycle.h) says of tasks and signals in a job's reason.
#pragma once

#include <cstddef>
#include <string>

#include "jobs/job.h"

namespace gpupool::controller::lifecycle::words {

// "task 1 (node n2)".
std::string TaskName(const jobs::Job& job, size_t t);
// What an old agent's task end says beyond the signal that ended it: its words less their
// "ended by SIGKILL" part, as the node's GPU memory watch or the kernel's OOM killer gives
// them (empty when that part is all there is). Only for an agent that sends no kill
// cause (or one this controller does not know): a newer one sends the words apart.
std::string OldAgentBeyondTheSignal(const std::string& reason);
// What a task's end says beyond the signal that ended it: its kill cause's words.
std::string BeyondTheSignal(const jobs::TaskStatus& t);
// How a task ended, in words: "exited with code 3", "was killed by signal 9", ...
std::string TaskOutcome(const jobs::TaskStatus& t);
// "SIGTERM", or "signal 7" for one without a name here.
std::string SignalText(int sig);

}  // namespace gpupool::controller::lifecycle::words
