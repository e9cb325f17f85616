// The job lifecycle's part for an end reported late (docs/health.md, "An end reported
// late"): a node, cut off from the controller, reports the real end of a task of an
// attempt the controller had already declared lost. Used by job_lifecycle.cc (Step's
// TaskExited); pure, as it is.
#pragma once

#include <cstdint>
#include <optional>

#include "controller/job_lifecycle.h"
#include "jobs/job.h"

namespace gpupool::controller::lifecycle {

// What `e` does when it is the late end of a lost attempt of `job`; nullopt when it is not
// one (an end of the current attempt: OnExited steps it as usual).
//  - A LOST job (its current attempt lost): the task's record takes its real end and
//    outcome (TaskStatus::reported_late), the job its latest real end and how it ended
//    (Job::late_*, late_reason naming every task reported); that task's GPUs are charged
//    up to its own end (Effects::late_gpu_hours; usage.h's JobGpuHours). It stays LOST:
//    what depended on its outcome acted on it.
//  - An earlier attempt of a requeued job (EarlierAttempt lost or gpu_failed): the
//    record's end runs to the latest real end and its GPU-hours gain the task's GPUs up
//    to its own end (EarlierAttempt::lost_time_us, late_reason naming every task
//    reported), and the task's end is kept (EarlierAttempt::late_ends,
//    late_end_times_us). A batch job
//    still PENDING for its next attempt (none placed) every task of whose lost attempt
//    reported that it exited 0 untold ends SUCCEEDED instead of running again; once the
//    next attempt is placed, it goes on. A job waiting for the lost node's lease waits no
//    more once each of the attempt's tasks there reported.
// A resent report changes nothing (changed = false).
std::optional<Transition> LateEnd(const jobs::Job& job, const TaskExited& e, int64_t now_us);

}  // namespace gpupool::controller::lifecycle
