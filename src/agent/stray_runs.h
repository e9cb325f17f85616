// Stray runs: job cgroups (cgroup.h: ROOT/gpupool/job-J-T.A-INSTANCE, or the same leaf
// under each v1 hierarchy) of runs this agent does not own, left on the node by a
// previous agent of the same node whose state directory is not this one's (another
// --state-dir, or a wiped one). Their shims never appear in this agent's Adopt(), so
// the node would register with their GPUs free while their processes run on
// (docs/deploy.md, "Taking over a node"). The agent finds them before it registers and
// stops them (StopStrayRun): SIGTERM to every process of the run, SIGKILL after the
// grace, the cgroups removed.
//
// Whose a leaf is: INSTANCE is its shim's pid, and the shim's command line names its run
// directory (`agent-shim --job-dir STATE/jobs/J/T.A`); STATE/node-name (agent_identity.h)
// names the node of the agent that launched it. A leaf is a stray when
//   - its run directory is in this agent's state directory but this agent does not
//     supervise the run (the directory was wiped and made again), or
//   - its state directory is another one, no agent holds that directory's lock
//     (agent.lock), and it recorded this node's name and a controller list sharing an
//     address with this agent's (`controller`, RecordController; not compared when
//     either is unknown), or it is gone (wiped).
// Leaves of another node's agent on the same host (tests run several), of another
// pool's (two `gpupool up` on one host share the host's name) and of a live agent are
// left alone; so are leaves whose shim is gone (nothing names their owner:
// they are listed in `unknown` for a warning). Without cgroups (an agent not root, a
// host without a cgroup file system) jobs have no leaf and nothing is found.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/run_id.h"
#include "common/status.h"

namespace gpupool::agent {

struct StrayRun {
  int64_t job = 0;
  std::string run;                // "T.A" (or an older leaf's KEY-ATTEMPT)
  std::string leaf;               // job-J-T.A-INSTANCE
  std::vector<std::string> dirs;  // the leaf in each hierarchy it is in
  int shim_pid = 0;               // its supervisor, still running
  std::string job_dir;            // the run directory its supervisor names
  std::string why;                // why it is not this agent's, for the log
};

struct StrayScan {
  std::string cgroup_root;  // the launcher's (LauncherOptions::cgroup_root); empty: none
  std::string proc_root = "/proc";
  std::string agent_dir;  // this agent's state directory (the launcher's)
  std::string node_name;
  std::vector<RunId> running;  // the runs this agent supervises (Launcher::Running())
  // This agent's controllers as it hands them to its jobs ("unix:/x.sock" or
  // "http://c1:8421,http://c2:8421"); empty: not compared.
  std::string controllers;
};

// Records `controllers` in AGENT_DIR/controller, for a later agent's FindStrayRuns.
void RecordController(const std::string& agent_dir, const std::string& controllers);

// The stray leaves under scan.cgroup_root. `unknown` (may be null) gets the leaves
// with processes whose owner cannot be told (their shim is gone).
std::vector<StrayRun> FindStrayRuns(const StrayScan& scan, std::vector<std::string>* unknown);

// Stops `run`: SIGTERM to every process in its cgroups (and those below them, a
// container's), up to `grace_ms` for them to end, then SIGKILL and the cgroups removed
// (waiting up to `timeout_ms`), a container job's container removed (podman rm, when its
// run directory still names it), and its shim, once its job is gone, given a second to
// record the end and then killed. An error when a cgroup could not be emptied or the
// container not removed.
Status StopStrayRun(const StrayRun& run, const std::string& proc_root, int grace_ms,
                    int timeout_ms);

}  // namespace gpupool::agent
