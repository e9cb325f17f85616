// The node's health program (issue 29 item 4, docs/health.md), as Slurm's
// HealthCheckProgram: `gpupool agent --health-check PROGRAM` runs it when the agent
// starts and every --health-check-interval seconds, as root, with only PATH and
// LC_ALL=C in its environment (no user data), its input /dev/null, killed past its time
// limit. Its verdict:
//   - each output line "gpu=INDEX bad REASON" names a bad GPU (cordoned by the controller);
//   - a line "node bad REASON", a non-zero exit, or a run past the limit makes the whole
//     node bad (drained);
//   - exit 0 with nothing named bad passes (what it cordoned returns to service).
// Pure but for running the program; thread-safe.
#pragma once

#include <string>

#include "protocol/agent_protocol.h"

namespace gpupool::agent {

// Reads a finished run: its output (both streams) and how it ended.
protocol::HealthReport ParseHealthOutput(const std::string& output, int exit_code, bool timed_out,
                                         int timeout_s);

// Runs `program` (an absolute path) and reads its verdict; `now_ms` stamps it. A program
// that cannot be started makes the node bad, saying why.
protocol::HealthReport RunHealthCheck(const std::string& program, int timeout_s, int64_t now_ms);

}  // namespace gpupool::agent
