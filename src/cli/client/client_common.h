// Shared plumbing of the client commands (internal to src/cli/client): the --server and
// --token options, connecting, and reporting a Status as `gpupool: message` plus its
// exit code.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/client/api_client.h"
#include "cli/client/client_commands.h"

namespace gpupool::cli {

// What every client command's callback shares. Owned by shared_ptr so the CLI11
// callbacks, which outlive RegisterClientCommands, can hold it.
struct ClientRuntime {
  ClientEnvironment env;
  CommandContext* ctx = nullptr;
};
using RuntimePtr = std::shared_ptr<ClientRuntime>;

struct ConnectionFlags {
  std::string server;
  std::string token;
};

// Adds --server and --token to a subcommand.
void AddConnectionOptions(CLI::App& cmd, ConnectionFlags* flags);

// An ApiClient for the flags (else GPUPOOL_SERVER / GPUPOOL_TOKEN, else the default).
Result<ApiClient> Connect(const ClientRuntime& rt, const ConnectionFlags& flags);

// Prints `gpupool: <message>` and sets the exit code for `status` (a no-op when OK).
void Report(const ClientRuntime& rt, const Status& status);
// Writes text to the output stream and flushes it.
void Print(const ClientRuntime& rt, const std::string& text);
// Writes the server's answer for --json, ending with a newline.
void PrintRaw(const ClientRuntime& rt, const std::string& body);

// A job id from the command line: a positive whole number, else kInvalidArgument.
Result<int64_t> ParseJobId(const std::string& text);

// The check of a --task N option (logs, exec, checkpoint-done), run on the text before
// CLI11 converts it: its refusal says what to write ("'1x' is no task index: use a whole
// number from 0 to 4095, e.g. --task 1"), where CLI11's own said "Could not convert".
CLI::Validator TaskIndexCheck();
// A job as commands name it: its id (17), or an element of an array as `gpupool queue`
// prints it, ARRAY_INDEX (17_3). Returns it as the API's job routes take it for {id},
// else kInvalidArgument saying what forms there are.
Result<std::string> ParseJobRef(const std::string& text);
// ParseJobRef's forms, and the one `gpupool queue` prints for an array's pending elements,
// ARRAY_[INDICES] (17_[4-9,12%2]): one reference per element. For commands that take
// several jobs (cancel, hold, release).
Result<std::vector<std::string>> ParseJobRefs(const std::string& text);
// The job id of a reference from ParseJobRef: an element's is asked of the server (once,
// for commands that then make many requests, such as logs -f).
Result<int64_t> ResolveJobId(const ApiClient& api, const std::string& ref);
// ResolveJobId against the server of `conn` (connected when first called), for a
// submission's dependencies on array elements (BuildSubmission's ElementResolver).
std::function<Result<int64_t>(const std::string&)> ElementIds(const ClientRuntime& rt,
                                                              const ConnectionFlags& conn);

// `submit --wait`: waits until the submitted `job` (every element of an array) has ended
// and returns the exit code the command exits with (sbatch --wait's: the job's, 1 where it
// did not exit by itself, an array's highest); says on stderr how a job that did not
// succeed ended (submit_wait.cc).
Result<int> WaitForSubmitted(const ClientRuntime& rt, const ApiClient& api, const Json& job);

void RegisterSubmitCommand(CLI::App& app, const RuntimePtr& rt);    // submit_command.cc
void RegisterJobCommands(CLI::App& app, const RuntimePtr& rt);      // job_commands.cc
void RegisterLogsCommand(CLI::App& app, const RuntimePtr& rt);      // logs_command.cc
void RegisterExecCommand(CLI::App& app, const RuntimePtr& rt);      // exec_command.cc
void RegisterRunCommands(CLI::App& app, const RuntimePtr& rt);      // run_command.cc
void RegisterClusterCommands(CLI::App& app, const RuntimePtr& rt);  // cluster_commands.cc
void RegisterEnvPoolCommands(CLI::App& app, const RuntimePtr& rt);  // env_commands.cc

}  // namespace gpupool::cli
