// gpupool-exec: `gpupool exec` as a binary of its own, the rsh agent that mpirun runs once
// per remote host, all at once (docs/cli.md, "exec"). It links only the API client, so
// it starts in a fraction of gpupool's time (docs/benchmarks.md, "Gang start-up"):
// `gpupool-exec ARGS` is `gpupool exec ARGS`.
#include <string>
#include <vector>

#include "cli/client/client_commands.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"gpupool-exec: gpupool exec, for mpirun's rsh agent"};
  app.require_subcommand(1);
  gpupool::cli::CommandContext ctx;
  gpupool::cli::RegisterExecOnly(app, ctx);
  std::vector<std::string> args = {argc > 0 ? argv[0] : "gpupool-exec", "exec"};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  try {
    app.parse(static_cast<int>(cargs.size()), cargs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return ctx.exit_code;
}
