// `gpupool cdi-hook --library PATH ...`: the createContainer hook of gpupool's CDI specs
// (agent/cdi_hook.h). A container runtime runs it, with the container's OCI state on
// standard input, after the spec's mounts are made and before the container starts.
// Exit codes: 0 done (notes on standard error), 1 failure (the container does not
// start, and the runtime shows the message), 2 usage error.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "agent/cdi_hook.h"
#include "cli/commands.h"

namespace gpupool::cli {
namespace {

struct CdiHookFlags {
  std::vector<std::string> libraries;
  std::string ldconfig;
};

// The runtime's state is a small JSON object; more than this is not a state.
constexpr size_t kMaxStateBytes = 1u << 20;

Result<std::string> ReadStdin() {
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable("cannot read the container state from standard input: " +
                                 std::string(std::strerror(errno)));
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxStateBytes) {
      return Status::InvalidArgument("the container state on standard input is over 1 MiB");
    }
  }
  return text;
}

int RunCdiHook(const CdiHookFlags& f) {
  auto fail = [](const Status& s) {
    WriteStderr("gpupool cdi-hook: " + s.message() + "\n");
    return 1;
  };
  Result<std::string> state = ReadStdin();
  if (!state.ok()) return fail(state.status());
  Result<std::string> root = agent::ContainerRootFromState(*state);
  if (!root.ok()) return fail(root.status());
  agent::CdiHookOptions options;
  options.libraries = f.libraries;
  options.ldconfig = f.ldconfig;
  Result<std::vector<std::string>> notes = agent::UpdateContainerLinker(*root, options);
  if (!notes.ok()) return fail(notes.status());
  for (const std::string& n : *notes) WriteStderr("gpupool cdi-hook: " + n + "\n");
  return 0;
}

}  // namespace

void RegisterCdiHookCommand(CLI::App& app, CommandContext& ctx) {
  auto flags = std::make_shared<CdiHookFlags>();
  CLI::App* cmd = app.add_subcommand(
      "cdi-hook",
      "CDI createContainer hook (run by the container runtime, state on stdin): links the "
      "mounted driver libraries' SONAMEs and updates the container's linker cache");
  cmd->add_option("--library", flags->libraries,
                  "a driver library the CDI spec mounts, as a path inside the container "
                  "(repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--ldconfig", flags->ldconfig,
                  "the host's ldconfig (default: /sbin/ldconfig.real, /sbin/ldconfig or "
                  "/usr/sbin/ldconfig)");
  cmd->callback([&ctx, flags] { ctx.exit_code = RunCdiHook(*flags); });
}

}  // namespace gpupool::cli
