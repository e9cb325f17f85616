// The user-facing client commands of `gpupool`: submit, queue, show, cancel, logs, nodes,
// usage, token, whoami. Each is a thin client of the REST API (docs/api.md) through
// ApiClient; what they print and their exit codes are documented in docs/cli.md.
//
// A command's callback sets ctx.exit_code: 0 ok, 1 failure, 2 usage, 3 not found,
// 4 permission denied, 5 server unreachable (api_client.h). Errors are printed as
// `gpupool: <message>` on the error stream.
#pragma once

#include <sys/types.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace gpupool::cli {

// What the client commands take from the process, injectable so tests can capture
// output and fix the environment, clock and directory.
struct ClientEnvironment {
  std::ostream* out = nullptr;                            // command output
  std::ostream* err = nullptr;                            // `gpupool: ...` messages
  std::function<std::string(const std::string&)> getenv;  // "" when unset
  // Every variable, "NAME=value" (submit's --export=ALL); none when unset.
  std::function<std::vector<std::string>()> environ;
  std::function<int64_t()> now_us;   // wall clock, for ages
  std::function<std::string()> cwd;  // "" when unknown
  uid_t uid = 0;
  int log_wait_ms = 10'000;  // how long one `logs -f` long poll may wait on the server
  // `logs`: a read the server could not serve now (503: the node did not send the bytes)
  // is made again this long after, a few times, before the command fails.
  int log_retry_pause_ms = 1'000;
  // `submit --wait` looks at the job 100 ms after it was submitted, then twice as long
  // after each look, up to this.
  int wait_poll_max_ms = 2'000;

  // std::cout, std::cerr, the real environment, clock, directory and uid.
  static ClientEnvironment Process();
};

// `gpupool env check` against the pool's nodes (POST /v1/environments/check): `kind` is
// "image", "dir" or "environment". Prints a verdict per node; returns the exit code: 0 when
// some node (or `node`) can run it, 1 when none can, else the client error codes.
int PoolEnvCheck(const std::string& kind, const std::string& location, const std::string& node,
                 const std::string& server, const std::string& token, bool json,
                 ClientEnvironment env);

// Adds only `exec` (the gpupool-exec binary, exec_main.cc).
void RegisterExecOnly(CLI::App& app, CommandContext& ctx);

// Adds the client commands to `app`; their callbacks report through ctx.exit_code.
void RegisterClientCommands(CLI::App& app, CommandContext& ctx);
void RegisterClientCommands(CLI::App& app, CommandContext& ctx, ClientEnvironment env);

}  // namespace gpupool::cli
