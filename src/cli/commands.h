// Each gpupool subcommand registers itself on the CLI11 app. A command's callback sets
// `exit_code` (0 success, 1 runtime failure, 2 usage error) for main() to return.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

namespace gpupool::cli {

struct CommandContext {
  int exit_code = 0;
};

// Writes `text` to standard error at once (progress lines, messages between results).
inline void WriteStderr(const std::string& text) {
  // Best effort: a failed write to standard error has nowhere left to be reported.
  (void)std::fwrite(text.data(), 1, text.size(), stderr);
  (void)std::fflush(stderr);
}

void RegisterGpusCommand(CLI::App& app, CommandContext& ctx);     // gpus_command.cc
void RegisterSimCommand(CLI::App& app, CommandContext& ctx);      // sim_command.cc
void RegisterEnvCommand(CLI::App& app, CommandContext& ctx);      // env_command.cc
void RegisterCdiHookCommand(CLI::App& app, CommandContext& ctx);  // cdi_hook_command.cc
// Adds `sim timed` under the `sim` subcommand; called by RegisterSimCommand.
void RegisterSimTimedCommand(CLI::App& sim, CommandContext& ctx);  // sim_timed_command.cc

}  // namespace gpupool::cli
