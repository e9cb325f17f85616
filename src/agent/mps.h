// MpsDaemons: one NVIDIA MPS control daemon per GPU that hosts shares (docs/sharing.md).
//
// A share job on a GPU in "mps" mode is a client of that GPU's daemon: the daemon starts
// an MPS server (as the client's user) that holds each client to the thread percentage
// and pinned device memory its environment names (agent/job_env.h). Those variables are
// the job's own to drop, so the daemon also gets a ceiling that no client can raise
// (NVIDIA's MPS: a client's variables only lower the daemon's limits): the largest
// MpsLimits among the GPU's current clients, as the defaults of new servers
// (set_default_active_thread_percentage, set_default_device_pinned_mem_limit) and on each
// running server (set_active_thread_percentage, set_device_pinned_mem_limit). A GPU whose
// clients are one share each is so held to that share whatever the job does with its
// environment; several shares of one user on one GPU are held to the largest of them
// (MPS has no per-client limit but the client's own). One daemon per GPU,
// started with CUDA_VISIBLE_DEVICES=<that GPU>, so each serves its GPU alone and the
// users of different GPUs never wait on one another's server.
//
// Files, under STATE/mps/<uuid>/: pipe/ and log/ (the daemon's CUDA_MPS_PIPE_DIRECTORY and
// CUDA_MPS_LOG_DIRECTORY), owned by the share's user with mode 0700 so that no other user's
// process can become a client; `owner`, that uid (or "shared" once the admin let a second
// user's share onto the GPU: the folders are then root's, mode 1777); `control`, the
// control program that started it.
//
// Acquire(gpu, run, uid, limits) starts the GPU's daemon unless it answers already, counts
// the run as its client and raises the ceiling to its limits; Release(run) drops it,
// lowers the ceiling to the clients left (a running client keeps the limit it started
// with) and quits the daemon after the GPU's last client. Whether a daemon runs is asked of the
// daemon (`get_server_list` answered), so an agent that restarts finds its predecessor's daemons:
// it Acquires again for the adopted runs, then StopUnused quits the daemons no run needs and
// removes their folders.
//
// Thread-safe: one mutex, held while a control command runs (each within timeout_ms).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/run_id.h"
#include "common/status.h"

namespace gpupool::agent {

// What one share may take of its GPU under MPS: a percentage of its threads (1-100) and
// pinned device memory in MiB (0: no memory cap).
struct MpsLimits {
  int thread_percentage = 100;
  uint64_t pinned_mib = 0;
  bool operator==(const MpsLimits&) const = default;
};

// A share of `gpu_milli` thousandths of a GPU with `memory_bytes` of its memory (0: not
// known): the thread percentage rounded up, the memory in whole MiB (at least 1).
MpsLimits MpsLimitsFor(int gpu_milli, uint64_t memory_bytes);

struct MpsOptions {
  std::string control;    // nvidia-cuda-mps-control, by path
  std::string state_dir;  // the agent's state directory; folders go under mps/
  int timeout_ms = 10'000;
  // Variables every control command gets besides the daemon's folders and
  // CUDA_VISIBLE_DEVICES (PATH, LD_LIBRARY_PATH of the agent by default).
  std::vector<std::string> base_env;
  // Acquire joins running daemons only and starts none: an agent whose GPUs are no longer
  // in mps mode, quitting the daemons its predecessor left (LeftoverMpsControl).
  bool adopt_only = false;
};

// The control program named by `configured` (a path; checked to be executable), else the
// first nvidia-cuda-mps-control on PATH or in /usr/local/nvidia/bin, /usr/bin; empty
// when there is none.
std::string FindMpsControl(const std::string& configured);

// Whether an earlier run of the agent left MPS daemon folders under `state_dir`/mps, and
// the control program to quit those daemons with: the one recorded in a folder (the
// program that started it, where it is still an executable), else `fallback`; "" when no
// folder was left. An agent that no longer runs MPS quits them with it (adopt_only), those
// of its adopted clients when they end, the rest at once: a daemon left running would let
// its user reach a GPU later granted whole to another user (docs/sharing.md).
std::string LeftoverMpsControl(const std::string& state_dir, const std::string& fallback);

class MpsDaemons {
 public:
  explicit MpsDaemons(MpsOptions options);
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // The pipe folder of `gpu`'s daemon (started here unless it answers), with `run`
  // counted as one of its clients and the daemon's ceiling at least `limits`. `uid`/`gid`
  // own the folders of a new daemon; a run of another user on a running daemon makes its
  // folders shared (the controller placed it so: gpupool controller --mps-multi-user).
  // kInvalidArgument for a GPU id unfit for a folder name; kUnavailable when the daemon
  // cannot be started (its log's tail said) or refuses the ceiling (then `run` is not
  // counted, and a daemon left without clients is quit).
  Result<std::string> Acquire(const std::string& gpu, const RunId& run, uid_t uid, gid_t gid,
                              const MpsLimits& limits);
  // Drops `run` wherever it is a client; quits a daemon left without clients, or lowers
  // its ceiling to the clients left. Idempotent.
  Status Release(const RunId& run);
  // Quits every daemon under STATE/mps that no run holds and removes its folders; the
  // GPUs whose daemon could not be stopped, each with why.
  std::vector<std::string> StopUnused();
  // GPUs whose daemon this object counts clients for, and how many.
  std::map<std::string, size_t> Clients() const;

 private:
  std::string Dir(const std::string& gpu) const;
  // The environment of `gpu`'s daemon and of its control commands.
  std::vector<std::string> Env(const std::string& gpu) const;
  // Runs `control` with `input` on stdin in the daemon's environment.
  Result<std::string> Control(const std::string& gpu, const std::string& input) const;
  bool Answers(const std::string& gpu) const;
  Status Start(const std::string& gpu, uid_t uid, gid_t gid);
  Status Stop(const std::string& gpu);
  // Sets `gpu`'s ceiling to the largest limits of its clients (unless it is so already).
  Status ApplyCeiling(const std::string& gpu);

  const MpsOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<RunId, MpsLimits>> clients_;  // GPU -> runs using its daemon
  std::map<std::string, MpsLimits> ceilings_;  // GPU -> the ceiling its daemon was given
};

}  // namespace gpupool::agent
