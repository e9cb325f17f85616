// PLACEHOLDER: replaced by the real `gpupool gpus`.
#include "cli/commands.h"

namespace gpupool::cli {
void RegisterGpusCommand(CLI::App& app, CommandContext& ctx) {
  app.add_subcommand("gpus", "discover this node's GPUs")->callback([&ctx] { ctx.exit_code = 1; });
}
}  // namespace gpupool::cli
