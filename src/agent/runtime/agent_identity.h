// One agent per state directory, and an identity that tells it from other agents.
//
// LockAgentStateDir takes an exclusive lock on STATE/agent/agent.lock
// (common/file_lock.h) for the agent's life: a second agent on the same directory would
// fight the first over its job files, so it refuses to start, naming the directory and
// the first one's pid. The lock goes with the process (kill -9 included), so a restart
// takes it again.
//
// AgentIdentity is what the agent registers with (protocol::Registration::agent_id): the
// same across restarts of one agent on one machine and state directory, different for
// another agent given the same --node-name (a cloned VM, a copied command line), so that
// the controller refuses the second instead of taking it for a restart of the first. It
// is a random id drawn once and kept in STATE/agent/agent-id, and a digest of the
// machine's id (/etc/machine-id), so that a state directory copied with its machine
// (a clone whose machine id was made anew) is another agent too.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/file_lock.h"
#include "common/status.h"

namespace gpupool::agent {

// `agent_dir` is STATE/agent (OpenAgentStateDir). Errors: another agent holds it
// (AlreadyExists: "another gpupool agent (pid N) uses the state directory 'STATE'
// ...: stop it first, or give this one another --state-dir"), the lock file cannot be
// made (Unavailable).
Result<FileLock> LockAgentStateDir(const std::string& state_dir, const std::string& agent_dir);

// Draws the random part of a new identity: 32 hex digits from getrandom(2).
Result<std::string> DrawAgentId();

// The agent's identity: AGENT_DIR/agent-id (created with `draw` when absent or unreadable
// as an id), then ":" and 16 hex digits of a digest of `machine_id_path`'s contents ("-"
// where that file is absent). Call with the state directory locked. Errors: the id file
// cannot be written (Unavailable), `draw`'s.
Result<std::string> AgentIdentity(const std::string& agent_dir,
                                  const std::string& machine_id_path = "/etc/machine-id",
                                  const std::function<Result<std::string>()>& draw = DrawAgentId);

// The node a state directory's agent runs: AGENT_DIR/node-name, written by RecordNodeName
// once the controller took the agent's registration (a failure to write it is logged). An
// agent started under another --node-name while jobs it started under the old one still
// run here (`running`: the ids of the jobs of the tasks it adopted) would report them for
// the new node: the controller would stop them as strays there and declare them lost on
// the old one. Refused (AlreadyExists: the agent exits 2 and is not restarted) naming
// both names and the jobs; with nothing running, a node may be renamed. Slurm refuses a
// slurmd whose NodeName is not its state's.
Status CheckNodeName(const std::string& agent_dir, const std::string& node_name,
                     const std::vector<int64_t>& running);
void RecordNodeName(const std::string& agent_dir, const std::string& node_name);

}  // namespace gpupool::agent
