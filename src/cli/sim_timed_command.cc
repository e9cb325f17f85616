// PLACEHOLDER: replaced by the real `gpupool sim timed`.
#include "cli/commands.h"

namespace gpupool::cli {
void RegisterSimTimedCommand(CLI::App& sim, CommandContext& ctx) {
  sim.add_subcommand("timed", "time-driven experiment")->callback([&ctx] { ctx.exit_code = 1; });
}
}  // namespace gpupool::cli
