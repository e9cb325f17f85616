// What a submission takes from the submitting shell and where its output goes: Slurm's
// --export (the job's environment), the copy of a submitted script, and -o/-e output
// files (docs/slurm.md). Pure functions over text; the callers read the process's
// environment and the script file.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli/client/submit_flags.h"
#include "common/json.h"
#include "common/status.h"
#include "jobs/output_pattern.h"

namespace gpupool::cli {

// The most bytes of exported environment a job stores (each NAME=value with its NUL, as
// the kernel counts envp); past it the submission is refused naming --export.
inline constexpr size_t kMaxExportBytes = size_t{128} * 1024;
// The most bytes of a submitted script that are copied into the job: the server's bound
// (1 MiB, docs/api.md).
inline constexpr size_t kMaxScriptBytes = jobs::kMaxScriptBytes;

// --export's value, as Slurm reads it: ALL, NONE, or a comma list of NAME (its value
// here) and NAME=value, optionally with ALL first ("ALL,NAME=value").
struct ExportSpec {
  bool all = true;  // every variable of the submitting environment (less the deny-list)
  std::vector<std::pair<std::string, std::optional<std::string>>> vars;  // in order
};

// Errors are kInvalidArgument naming --export, the value and the part at fault.
Result<ExportSpec> ParseExport(std::string_view text);

// Whether gpupool keeps `name` out of an implicit export (ALL): GPUPOOL_* (the token and
// the server address, and what gpupool sets in every job), the GPU visibility variables
// (CUDA_VISIBLE_DEVICES, NVIDIA_/ROCR_/HIP_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL),
// CUDA_MPS_*, the gang's rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, PET_*), LD_PRELOAD and LD_AUDIT, and the shell's own PWD, OLDPWD,
// SHLVL and _.
bool DeniedFromExport(std::string_view name);
// The part of the deny-list a variable named explicitly (--export=NAME) cannot pass
// either: the above less LD_PRELOAD, LD_AUDIT and the shell's variables.
bool AlwaysDenied(std::string_view name);

// The variables `spec` exports from `environ` ("NAME=value" strings). Errors name
// --export: an explicitly named variable gpupool sets itself, or more than
// kMaxExportBytes (naming the largest variables).
Result<std::vector<std::pair<std::string, std::string>>> ExportedVariables(
    const ExportSpec& spec, const std::vector<std::string>& environ);

// Adds the exported environment to body.env, under the --env variables already there
// (--env wins). Without --export, jobs in a container (an image or a named environment)
// export nothing: the image has its own PATH and libraries.
Status AddExport(const SubmitFlags& flags, const std::vector<std::string>& environ,
                 OrderedJson* body);

// The variables a terminal session takes from the client's terminal whatever --export
// says: TERM, COLORTERM, LANG, LANGUAGE and LC_*, as set in `environ`.
std::vector<std::pair<std::string, std::string>> TerminalVariables(
    const std::vector<std::string>& environ);

// A script's content for body.script. `file_bytes` is the script file's size (`content`
// may hold only its first kMaxScriptBytes + 1). Refused, naming the script and the fix:
// past kMaxScriptBytes (saying its size and the bound), not UTF-8 text, or not runnable
// as a program: no `#!` line first, or a byte-order mark before it (as sbatch refuses).
Status AddScript(const std::string& script_name, const std::string& content, uint64_t file_bytes,
                 OrderedJson* body);

// Whether `s` is well-formed UTF-8 (no stray bytes, overlong forms or surrogates).
bool IsUtf8(std::string_view s);
// `s` with each byte that is no part of a UTF-8 character written as \xNN (the shell's
// $'...' spelling), for an error message.
std::string EscapeNonUtf8(std::string_view s);

// Refuses a job submission body (or an exec request) holding text that is not UTF-8: a
// job is stored as JSON, which holds nothing else, so those bytes would be replaced and
// the job would run another command, or write another file, than the one asked for.
// The error names the option (the command's word N, --env NAME, --workdir, --output,
// --error, --job-name, --project, ...), shows the value with its stray bytes as \xNN,
// and says what to do instead.
Status CheckSubmissionText(const OrderedJson& body);

// -o/-e into body.output/body.error for a batch job. The default output is
// gpupool-%j.out (gpupool-%A_%a.out for an array; gpupool-%j.%t.out with several tasks
// unless --mpi), given only when `workdir_writable` (the submitter may write the working
// directory): otherwise the output stays in the node's run directory, as without -o, so
// that a job submitted from a read-only directory still runs. Without -e, stderr goes
// into the output file too. Checks each pattern (ExpandOutputPattern's rules) and that a
// job of several tasks (not --mpi) gives each task its own file (%t).
Status AddOutputFlags(const SubmitFlags& flags, bool workdir_writable, OrderedJson* body);

}  // namespace gpupool::cli
