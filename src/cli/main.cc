// gpupool: one binary, several roles (see docs/architecture.md).
#include <cstdio>
#include <iostream>

#include "cli/client/client_commands.h"
#include "cli/commands.h"
#include "cli/daemon_commands.h"
#include "cli/man_page.h"
#include "cli/usage.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  CLI::App app{"gpupool: one shared, fair, well-used GPU pool"};
  app.require_subcommand(1);
  // Before the commands: they inherit its help formatter.
  gpupool::cli::SetUpUsage(app);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();

  gpupool::cli::CommandContext ctx;
  gpupool::cli::RegisterGpusCommand(app, ctx);
  gpupool::cli::RegisterSimCommand(app, ctx);
  gpupool::cli::RegisterEnvCommand(app, ctx);
  gpupool::cli::RegisterCdiHookCommand(app, ctx);
  gpupool::cli::RegisterClientCommands(app, ctx);
  gpupool::cli::RegisterDaemonCommands(app, ctx);
  // Last: its pages cover every command above.
  gpupool::cli::RegisterManPagesCommand(app, &ctx.exit_code);

  app.parse_complete_callback([&] {
    if (auto s = gpupool::InitLogging(log_level); !s.ok()) {
      throw CLI::ValidationError("--log-level", s.message());
    }
  });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return gpupool::cli::ReportParseError(app, e, std::cout, std::cerr);
  }
  return ctx.exit_code;
}
