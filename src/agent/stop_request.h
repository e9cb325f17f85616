// A preemption's stop (issue 28, docs/preemption.md), from the launcher to a run's shim.
//
// The launcher writes DIR/stop.json ({"grace_s": G, "deadline_s": D}, atomically) and
// then signals the shim; the shim reads it on every SIGTERM or SIGINT: the job's SIGKILL
// comes at most G seconds later (a later, shorter grace, as after `gpupool
// checkpoint-done`, brings it forward; a longer one never delays it), and before its
// first SIGTERM the shim writes D (epoch seconds, one line) into the job's deadline file,
// DIR/preempt_deadline, which a preemptible job finds as GPUPOOL_PREEMPT_DEADLINE_FILE.
// Without stop.json a signal is a plain cancel with the spec's grace.
//
// A stop with a `reason` is the node's own (the agent's GPU memory watch, agent_loop.h):
// the job is killed at once (SIGKILL, no grace, no deadline file), is not cancelled (it
// fails), and its end carries the reason.
//
// A signal request (`gpupool cancel --signal`, Launcher::Signal) needs no file: the
// launcher queues the real-time signal SignalRequestSignal() to the shim with the signal
// to send in its value (EncodeSignalRequest), so that two requests in a row are both
// carried out, each once. The shim sends it to the job as its --signal warning goes: to
// every process of the job, or with main_only to the main process only; a container's by
// `podman kill --signal`. A shim takes them once its record says signal_requests
// (job_files.h): to an older shim the real-time signal would be fatal.
// Plain functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace gpupool::agent {

inline constexpr char kStopFile[] = "stop.json";
inline constexpr char kPreemptDeadlineFile[] = "preempt_deadline";

struct StopRequest {
  int64_t grace_s = -1;    // -1: the job's own (a plain stop)
  int64_t deadline_s = 0;  // epoch seconds; 0: none
  std::string reason;      // non-empty: the node's own stop, and why (see above)
  friend bool operator==(const StopRequest&, const StopRequest&) = default;
};

// SIGRTMIN + 2 (SIGRTMIN is the C library's, hence a function).
int SignalRequestSignal();
// The value carried with SignalRequestSignal(): `sig` (1..64) and whether to the main
// process only; DecodeSignalRequest gives false for a value that is none.
int EncodeSignalRequest(int sig, bool main_only);
bool DecodeSignalRequest(int value, int* sig, bool* main_only);

// Writes DIR/stop.json (mode 0600, root's).
Status WriteStopRequest(const std::string& dir, const StopRequest& stop);
// DIR/stop.json; nullopt when there is none or it cannot be read (a plain stop).
std::optional<StopRequest> ReadStopRequest(const std::string& dir);

}  // namespace gpupool::agent
