#include "cli/client/client_commands.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "common/clock.h"
#include "common/strings.h"
#include "jobs/job.h"

namespace gpupool::cli {

ClientEnvironment ClientEnvironment::Process() {
  ClientEnvironment e;
  e.out = &std::cout;
  e.err = &std::cerr;
  e.getenv = [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return std::string(v != nullptr ? v : "");
  };
  e.environ = [] {
    std::vector<std::string> vars;
    for (char** v = ::environ; v != nullptr && *v != nullptr; ++v) vars.emplace_back(*v);
    return vars;
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

CLI::Validator TaskIndexCheck() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        const std::optional<int64_t> v = ParseInt64(Trim(text));
        if (v && *v >= 0 && *v < jobs::kMaxTasks) return "";
        return "'" + text + "' is no task index: use a whole number from 0 to " +
               std::to_string(jobs::kMaxTasks - 1) + ", e.g. --task 1 (task 0 is the first)";
      },
      // As CLI::Range described it in --help: "--task N in [0 - 4095]".
      "in [0 - " + std::to_string(jobs::kMaxTasks - 1) + "]");
}

Result<int64_t> ParseJobId(const std::string& text) {
  auto id = ParseInt64(Trim(text));
  if (!id || *id <= 0) {
    return Status::InvalidArgument("job id '" + text +
                                   "': a job id is a positive whole number, e.g. 17");
  }
  return *id;
}

namespace {

Status BadJobRef(const std::string& text) {
  return Status::InvalidArgument("job id '" + text +
                                 "': a job id is a positive whole number, e.g. 17, or "
                                 "ARRAY_INDEX for an element of an array, e.g. 17_3");
}

}  // namespace

Result<std::string> ParseJobRef(const std::string& text) {
  const std::string t(Trim(text));
  const size_t us = t.find('_');
  auto id = ParseInt64(t.substr(0, us));
  if (!id || *id <= 0) return BadJobRef(text);
  if (us == std::string::npos) return std::to_string(*id);
  if (t.find('[', us) != std::string::npos) {
    return Status::InvalidArgument("job id '" + text + "': name one element of array " +
                                   std::to_string(*id) + ", e.g. " + std::to_string(*id) +
                                   "_0 (cancel, hold and release take several)");
  }
  auto index = ParseInt64(t.substr(us + 1));
  if (!index || *index < 0 || *index > jobs::kMaxArrayIndex) return BadJobRef(text);
  return std::to_string(*id) + "_" + std::to_string(*index);
}

Result<std::vector<std::string>> ParseJobRefs(const std::string& text) {
  const std::string t(Trim(text));
  const size_t open = t.find("_[");
  if (open == std::string::npos) {
    GP_ASSIGN_OR_RETURN(std::string one, ParseJobRef(text));
    return std::vector<std::string>{std::move(one)};
  }
  GP_ASSIGN_OR_RETURN(std::string array, ParseJobRef(t.substr(0, open)));
  if (array.find('_') != std::string::npos) return BadJobRef(text);
  // The indices as queue prints them, and as --array takes them (a %N limit is ignored).
  Result<jobs::ArraySpec> spec =
      t.back() == ']' ? jobs::ParseArraySpec(t.substr(open + 2, t.size() - open - 3))
                      : Result<jobs::ArraySpec>(Status::InvalidArgument("no closing ]"));
  if (!spec.ok()) {
    return Status::InvalidArgument(
        "job id '" + text + "': the elements in brackets are indices as `gpupool queue` " +
        "prints them, e.g. " + array + "_[0-3,7] (" + spec.status().message() + ")");
  }
  std::vector<std::string> out;
  for (int i : spec->indices) out.push_back(array + "_" + std::to_string(i));
  return out;
}

Result<int64_t> ResolveJobId(const ApiClient& api, const std::string& ref) {
  if (ref.find('_') == std::string::npos) return ParseJobId(ref);
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, api.Get("/v1/jobs/" + ref));
  const int64_t id = GetInt(GetObject(answer.json, "job"), "id");
  if (id <= 0) return Status::Internal("the server's answer for job " + ref + " has no id");
  return id;
}

std::function<Result<int64_t>(const std::string&)> ElementIds(const ClientRuntime& rt,
                                                              const ConnectionFlags& conn) {
  return [rt = &rt, conn = &conn](const std::string& element) -> Result<int64_t> {
    GP_ASSIGN_OR_RETURN(ApiClient api, Connect(*rt, *conn));
    return ResolveJobId(api, element);
  };
}

}  // namespace gpupool::cli
