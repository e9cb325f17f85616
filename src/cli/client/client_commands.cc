#include "cli/client/client_commands.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/client/client_common.h"
#include "common/clock.h"
#include "common/strings.h"

namespace gpupool::cli {

ClientEnvironment ClientEnvironment::Process() {
  ClientEnvironment e;
  e.out = &std::cout;
  e.err = &std::cerr;
  e.getenv = [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return std::string(v != nullptr ? v : "");
  };
  e.now_us = [] { return SystemClock::Get()->NowMicros(); };
  e.cwd = [] {
    std::error_code ec;
    auto p = std::filesystem::current_path(ec);
    return ec ? std::string() : p.string();
  };
  e.uid = getuid();
  return e;
}

void RegisterClientCommands(CLI::App& app, CommandContext& ctx) {
  RegisterClientCommands(app, ctx, ClientEnvironment::Process());
}

void RegisterClientCommands(CLI::App& app, CommandContext& ctx, ClientEnvironment env) {
  auto rt = std::make_shared<ClientRuntime>();
  rt->env = std::move(env);
  rt->ctx = &ctx;
  RegisterSubmitCommand(app, rt);
  RegisterJobCommands(app, rt);
  RegisterLogsCommand(app, rt);
  RegisterExecCommand(app, rt);
  RegisterRunCommands(app, rt);
  RegisterClusterCommands(app, rt);
  RegisterEnvPoolCommands(app, rt);
}

void RegisterExecOnly(CLI::App& app, CommandContext& ctx) {
  auto rt = std::make_shared<ClientRuntime>();
  rt->env = ClientEnvironment::Process();
  rt->ctx = &ctx;
  RegisterExecCommand(app, rt);
}

void AddConnectionOptions(CLI::App& cmd, ConnectionFlags* flags) {
  cmd.add_option("--server", flags->server,
                 "the server: unix:PATH or http://HOST:PORT, or a comma list of a pool's "
                 "controllers (default: $GPUPOOL_SERVER, else the local socket)");
  cmd.add_option("--token", flags->token,
                 "bearer token for a TCP server (default: $GPUPOOL_TOKEN)");
}

Result<ApiClient> Connect(const ClientRuntime& rt, const ConnectionFlags& flags) {
  const ClientEnvironment& e = rt.env;
  auto addresses = ResolveServerAddress(flags.server, e.getenv("GPUPOOL_SERVER"), e.uid,
                                        e.getenv("XDG_STATE_HOME"), e.getenv("HOME"));
  if (!addresses.ok()) return addresses.status();
  std::string token = flags.token.empty() ? e.getenv("GPUPOOL_TOKEN") : flags.token;
  return ApiClient(std::move(addresses).value(), std::string(Trim(token)));
}

void Report(const ClientRuntime& rt, const Status& status) {
  if (status.ok()) return;
  *rt.env.err << "gpupool: " << status.message() << "\n";
  rt.env.err->flush();
  rt.ctx->exit_code = ExitCodeFor(status);
}

void Print(const ClientRuntime& rt, const std::string& text) {
  rt.env.out->write(text.data(), static_cast<std::streamsize>(text.size()));
  rt.env.out->flush();
}

void PrintRaw(const ClientRuntime& rt, const std::string& body) {
  Print(rt, !body.empty() && body.back() == '\n' ? body : body + "\n");
}

Result<int64_t> ParseJobId(const std::string& text) {
  auto id = ParseInt64(Trim(text));
  if (!id || *id <= 0) {
    return Status::InvalidArgument("job id '" + text +
                                   "': a job id is a positive whole number, e.g. 17");
  }
  return *id;
}

}  // namespace gpupool::cli
