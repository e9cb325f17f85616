// PLACEHOLDER: replaced by the real `gpupool sim`.
#include "cli/commands.h"

namespace gpupool::cli {
void RegisterSimCommand(CLI::App& app, CommandContext& ctx) {
  CLI::App* sim = app.add_subcommand("sim", "trace-driven simulator");
  RegisterSimTimedCommand(*sim, ctx);
}
}  // namespace gpupool::cli
