// The stop orders of the agent protocol (Work::cancel), in their JSON form.
//
// {"job_id": J, "attempt": A} stops a job's tasks with the job's own grace period;
// {"exec_id": X} one exec session. A preemption's order (issue 28) adds "grace_s" (the
// seconds left of its grace, 0 once the job said it has checkpointed) and "deadline_s"
// (when the grace ends, epoch seconds): an agent that does not know them reads a plain
// stop, and an order without them reads as grace_s = -1 (the job's own). "task": T (added
// within 1.3) limits the order to task T of the job: a preempted gang's task that said
// checkpoint-done gets {"job_id", "attempt", "task", "grace_s": 0, "deadline_s"} while the
// job's own order keeps the other tasks' grace. An agent older than the field reads it as
// a stop without grace of all the job's tasks on the node, as every agent did before.
//
// A signal order (Work::signal, protocol 1.4): {"job_id": J, "attempt": A, "task_index":
// T, "signal": S} and, for the main process only, "main_only": true.
//
// Pure; thread-compatible.
#pragma once

#include "common/json.h"
#include "common/status.h"
#include "protocol/agent_protocol.h"

namespace gpupool::protocol {

OrderedJson EncodeCancelOrder(const CancelOrder& c);
// `path`: "cancel[3]", for errors.
Result<CancelOrder> DecodeCancelOrder(const Json& j, const std::string& path);

OrderedJson EncodeSignalOrder(const SignalOrder& s);
// `path`: "signal[0]", for errors.
Result<SignalOrder> DecodeSignalOrder(const Json& j, const std::string& path);

}  // namespace gpupool::protocol
