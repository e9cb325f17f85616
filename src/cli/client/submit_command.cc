// `gpupool submit [options] SCRIPT [ARGS...]` or `gpupool submit [options] -- COMMAND...`.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli/client/client_common.h"
#include "cli/client/json_view.h"
#include "cli/client/submit_flags.h"
#include "cli/client/submit_io.h"

namespace gpupool::cli {
namespace {

struct SubmitState {
  ConnectionFlags conn;
  SubmitFlags flags;
  std::vector<std::string> words;  // SCRIPT ARGS... or, after --, COMMAND ARGS...
  bool json = false;
};

// A script's #GPUPOOL and #SBATCH options (the #SBATCH options left out in *ignored), the
// command that runs it (its absolute path first), its content (the copy the job runs; at
// most kMaxScriptBytes + 1 bytes are read, so that a huge or binary "script" is not
// slurped) and its size.
Status ReadScript(const std::string& cwd, std::vector<std::string>* command,
                  SubmitFlags* script_flags, std::vector<std::string>* ignored,
                  std::string* content, uint64_t* file_bytes) {
  const std::string& script = (*command)[0];
  const std::string hint =
      "; to run a program that is not a file here, put it after --, e.g. gpupool submit "
      "--gpus 1 -- nvidia-smi";
  std::filesystem::path path(script);
  if (path.is_relative()) path = std::filesystem::path(cwd) / path;
  path = path.lexically_normal();
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return Status::InvalidArgument("script '" + script + "': no such file" + hint);
  }
  if (!std::filesystem::is_regular_file(st)) {
    return Status::InvalidArgument("script '" + script + "': not a regular file" + hint);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("script '" + script +
                                   "': cannot be read; check its permissions");
  }
  // One byte past the bound tells a script too large to copy (AddScript says so, with the
  // file's size).
  std::string head(kMaxScriptBytes + 1, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  *content = head;
  const auto size = std::filesystem::file_size(path, ec);
  *file_bytes = ec ? head.size() : size;
  // Saved on Windows: the kernel would look for the interpreter "/bin/bash\r" (the job
  // fails, saying its command is not found) and the shell would read every line with a
  // \r (as sbatch, refused).
  if (const size_t crlf = head.find("\r\n"); crlf != std::string::npos) {
    const auto line = std::count(head.begin(), head.begin() + static_cast<ptrdiff_t>(crlf), '\n');
    return Status::InvalidArgument("script '" + script + "' has DOS line breaks (\\r\\n, line " +
                                   std::to_string(line + 1) +
                                   ") where the shell expects Unix ones (\\n): convert it with "
                                   "dos2unix " +
                                   script);
  }
  GP_ASSIGN_OR_RETURN(auto directives, ReadScriptDirectives(head, script));
  GP_ASSIGN_OR_RETURN(*script_flags, ParseDirectives(directives, script, ignored));
  // The job runs the script itself, so it must be executable (as with ./script).
  if (access(path.c_str(), X_OK) != 0) {
    return Status::InvalidArgument("script '" + script + "' is not executable: run chmod +x " +
                                   script + ", or submit it as -- bash " + script);
  }
  (*command)[0] = path.string();
  return Status::Ok();
}

Status RunSubmit(const ClientRuntime& rt, const SubmitState& s, bool after_dashes) {
  std::vector<std::string> command = s.words;
  if (command.empty()) {
    return Status::InvalidArgument(
        "nothing to run: give a SCRIPT [ARGS...] or -- COMMAND [ARGS...]; a script is named "
        "as a file (gpupool submit job.sh), not read from standard input");
  }
  const std::string cwd = rt.env.cwd();
  const bool workdir_absolute =
      s.flags.workdir && !s.flags.workdir->empty() && (*s.flags.workdir)[0] == '/';
  if (cwd.empty() && !workdir_absolute) {
    return Status::InvalidArgument(
        "cannot determine the current directory; pass --workdir /absolute/path");
  }
  SubmitFlags script_flags;
  std::string script;
  uint64_t script_bytes = 0;
  if (!after_dashes) {
    std::vector<std::string> ignored;
    GP_RETURN_IF_ERROR(ReadScript(cwd, &command, &script_flags, &ignored, &script, &script_bytes));
    // Said before any refusal below, so that a Slurm script's user sees what was not read.
    for (const std::string& line : ignored) *rt.env.err << "gpupool: warning: " << line << "\n";
  }
  const SubmitFlags flags = MergeFlags(script_flags, s.flags);
  GP_RETURN_IF_ERROR(CheckPerJobGpus(flags));
  GP_ASSIGN_OR_RETURN(OrderedJson body,
                      BuildSubmission(flags, command, cwd, ElementIds(rt, s.conn)));
  if (!after_dashes) GP_RETURN_IF_ERROR(AddScript(s.words[0], script, script_bytes, &body));
  GP_RETURN_IF_ERROR(
      AddExport(flags, rt.env.environ ? rt.env.environ() : std::vector<std::string>{}, &body));
  const std::string workdir = body.value("workdir", std::string());
  GP_RETURN_IF_ERROR(AddOutputFlags(flags, ::access(workdir.c_str(), W_OK) == 0, &body));
  GP_ASSIGN_OR_RETURN(ApiClient api, Connect(rt, s.conn));
  GP_ASSIGN_OR_RETURN(ApiAnswer answer, PostSubmission(api, &body));
  PrintSubmitWarnings(answer.json, *rt.env.err);
  const Json& job = GetObject(answer.json, "job");
  const int64_t id = GetInt(job, "id");
  if (s.json) {
    PrintRaw(rt, answer.body);
  } else {
    if (id <= 0) {
      return Status::Internal("the server accepted the job but its answer has no job id");
    }
    if (GetInt(job, "array_id") == id) {
      Print(rt, "Submitted array job " + std::to_string(id) + " (" + GetString(job, "array") +
                    "; element N is " + std::to_string(id) + "_N)\n");
    } else {
      Print(rt, "Submitted job " + std::to_string(id) + "\n");
    }
  }
  if (flags.wait.value_or(false) && id > 0) {
    GP_ASSIGN_OR_RETURN(rt.ctx->exit_code, WaitForSubmitted(rt, api, job));
  }
  return Status::Ok();
}

}  // namespace

void RegisterSubmitCommand(CLI::App& app, const RuntimePtr& rt) {
  auto s = std::make_shared<SubmitState>();
  CLI::App* cmd = app.add_subcommand(
      "submit",
      "Submit a job: gpupool submit [options] SCRIPT [ARGS...] or gpupool submit [options] -- "
      "COMMAND [ARGS...]; a SCRIPT's leading '#GPUPOOL --option' lines are read as options");
  AddSubmitOptions(*cmd, &s->flags);
  cmd->add_flag("--json", s->json, "print the server's answer (the new job) as JSON");
  AddConnectionOptions(*cmd, &s->conn);
  cmd->add_option("command", s->words, "SCRIPT [ARGS...], or COMMAND [ARGS...] after --");
  // Everything after the script or command word is its own argument list, not ours.
  cmd->positionals_at_end();
  cmd->callback([rt, s, cmd] {
    // CLI11 leaves a "--" separator in remaining(); that is how the two forms differ.
    const auto rest = cmd->remaining();
    const bool after_dashes = !rest.empty() && rest.front() == "--";
    Report(*rt, RunSubmit(*rt, *s, after_dashes));
  });
}

}  // namespace gpupool::cli
