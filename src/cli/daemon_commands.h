// The long-running roles of the gpupool binary: `up` (controller + local agent),
// `server` (controller only), `agent` (node agent only) and the hidden `agent-shim`
// (the per-job supervisor the agent starts).
#pragma once

#include "cli/commands.h"

namespace gpupool::cli {

void RegisterDaemonCommands(CLI::App& app, cli::CommandContext& ctx);

// The default state directory: /var/lib/gpupool as root, else $XDG_STATE_HOME/gpupool or
// ~/.local/state/gpupool.
std::string DefaultStateDir();

}  // namespace gpupool::cli
