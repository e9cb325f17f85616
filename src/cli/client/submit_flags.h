// The options of `gpupool submit`, where they come from, and the job submission they
// become.
//
// Options come from the command line and from `#GPUPOOL` lines in a script's leading
// comment block (read like Slurm's `#SBATCH` lines); the command line wins. Values stay
// text until BuildSubmission checks and converts them all, so that every error names
// the option and the value as the user wrote them ("--gpu-share 1.5: a share must be in
// (0, 1]"). Pure functions apart from AddSubmitOptions, which binds to a CLI11 app.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client/api_client.h"
#include "common/json.h"
#include "common/status.h"

namespace gpupool::cli {

struct SubmitFlags {
  std::optional<std::string> gpus;
  std::optional<std::string> gpu_share;
  std::optional<std::string> gpu_mem;
  std::vector<std::string> gpu_models;  // each --gpu-model, comma lists split
  std::optional<std::string> min_capability;
  std::optional<std::string> vendor;
  std::optional<std::string> cpus;
  std::optional<std::string> mem;
  std::optional<std::string> time;
  std::optional<std::string> signal;  // --signal [B:]SIG[@SECONDS] (Slurm's)
  std::optional<std::string> name;
  std::optional<std::string> project;
  std::optional<std::string> priority;
  std::vector<std::string> env;     // "K=V" variables or one "NAME:VERSION", in the order given
  std::vector<std::string> mounts;  // "SRC:DST[:ro]", in the order given
  std::optional<std::string> workdir;
  std::optional<std::string> tasks;
  std::optional<std::string> image;
  std::optional<bool> requeue;
  std::optional<bool> preemptible;         // --preemptible (docs/preemption.md)
  std::optional<std::string> min_runtime;  // --min-runtime DURATION
  std::optional<std::string> grace;        // --grace DURATION
  std::optional<std::string> enforce;      // --enforce memory
  std::optional<bool> mpi;
  std::optional<std::string> array;  // --array 0-99%10
  std::optional<std::string> shm_size;
  std::optional<bool> init;
  // "after-ok:12", "after-any:13", ... in the order given (--after-ok 12,14 gives two).
  std::vector<std::string> dependencies;
  // Slurm's -d/--dependency values as given ("afterok:12:14,afterany:13"), each checked
  // and turned into dependencies by BuildSubmission.
  std::vector<std::string> slurm_dependencies;
  std::optional<bool> hold;              // -H/--hold: the job is stored held
  std::optional<bool> wait;              // -W/--wait: submit stays until the job ended
  std::optional<std::string> nodes;      // -N/--nodes: only 1, for a one-task job
  std::optional<std::string> partition;  // -p/--partition: refused (no partitions)
  std::optional<std::string> nodelist;   // -w/--nodelist NODELIST (a Slurm hostlist)
  std::optional<std::string> exclude;    // -x/--exclude NODELIST
  // --export: ALL (the default), NONE, or [ALL,]NAME[=value],... (submit_io.h).
  std::optional<std::string> export_env;
  std::optional<std::string> output;  // -o/--output PATTERN (jobs/output_pattern.h)
  std::optional<std::string> error;   // -e/--error PATTERN
  // Where `gpus` is Slurm's -G/--gpus of an #SBATCH line, a count for the whole job
  // ("job.sh:3: #SBATCH line: --gpus=8"); empty when it came from elsewhere. Set by
  // ParseDirectives, cleared by MergeFlags when a --gpus over it replaces it, and read by
  // CheckPerJobGpus once every source is merged.
  std::string per_job_gpus;
};

// Adds every submit option to `app`, writing into *flags (which must outlive app).
void AddSubmitOptions(CLI::App& app, SubmitFlags* flags);

// One `#GPUPOOL` or `#SBATCH` line, split into words like a shell would (quotes,
// backslashes, and a `#` at the start of a word begins a comment).
struct Directive {
  int line = 0;  // 1-based
  std::vector<std::string> words;
  bool sbatch = false;  // an #SBATCH line
};

// The #GPUPOOL and #SBATCH lines of a script's leading comment block: after an optional
// `#!` line, up to the first line that is neither blank nor a comment (where sbatch stops
// reading #SBATCH lines too).
Result<std::vector<Directive>> ReadScriptDirectives(std::string_view script_text,
                                                    std::string_view script_name);

// Parses directives as submit options; #GPUPOOL lines win over #SBATCH lines. A #GPUPOOL
// line takes every submit option. An #SBATCH line takes the sbatch options gpupool
// spells the same way and means the same by (kSbatchOptions, docs/slurm.md); any other
// option on it is left out, and said in *ignored ("job.sh:4: #SBATCH --partition=gpu
// ignored: ..."). Errors name the script and line. Slurm's -G/--gpus (counted per job) on
// an #SBATCH line is marked (per_job_gpus) for CheckPerJobGpus.
Result<SubmitFlags> ParseDirectives(const std::vector<Directive>& directives,
                                    std::string_view script_name,
                                    std::vector<std::string>* ignored = nullptr);

// The sbatch options an #SBATCH line is read for: each the same option here as in Slurm.
inline constexpr std::string_view kSbatchOptions[] = {"-G",
                                                      "--gpus",
                                                      "--gpus-per-task",
                                                      "-c",
                                                      "--cpus-per-task",
                                                      "--mem",
                                                      "-t",
                                                      "--time",
                                                      "--signal",
                                                      "-J",
                                                      "--job-name",
                                                      "-n",
                                                      "--ntasks",
                                                      "-N",
                                                      "--nodes",
                                                      "-a",
                                                      "--array",
                                                      "-d",
                                                      "--dependency",
                                                      "-D",
                                                      "--chdir",
                                                      "-o",
                                                      "--output",
                                                      "-e",
                                                      "--error",
                                                      "--export",
                                                      "-H",
                                                      "--hold",
                                                      "--requeue",
                                                      "--no-requeue",
                                                      "-W",
                                                      "--wait",
                                                      "-w",
                                                      "--nodelist",
                                                      "-x",
                                                      "--exclude"};

// `cmdline` over `script`: each option given on the command line replaces the script's;
// --env lists are concatenated (later wins for the same name); --gpu-model lists replace.
SubmitFlags MergeFlags(const SubmitFlags& script, const SubmitFlags& cmdline);

// Slurm's --gpus counts for the whole job, gpupool's per task: the GPU count of an #SBATCH
// -G/--gpus line (per_job_gpus) with more than one task in the end (from any line or the
// command line) would ask each task for them all, so it is refused naming the line and
// --gpus-per-task. Run on the flags merged from every source.
Status CheckPerJobGpus(const SubmitFlags& merged);

// A signal as Slurm's options take it (--signal of submit, cancel --signal): a number 1-64
// or a name, with or without SIG, any case (USR1, SIGUSR1, usr1). kInvalidArgument naming
// `option` and `text`, with `example` (a value of the option) as the fix.
Result<int> ParseSignalName(std::string_view option, const std::string& text,
                            std::string_view example);

// The job id that an array element `ARRAY_INDEX` (e.g. "12_3") has, asked of the server.
using ElementResolver = std::function<Result<int64_t>(const std::string& element)>;

// The POST /v1/jobs body for these options and command. `cwd` (absolute) is the default
// working directory and the base of a relative --workdir. Every value is checked;
// errors are kInvalidArgument naming the option. A dependency on an array's element
// (`--after-ok 12_3`) is turned into that element's job id by `resolve` (without one it
// is refused); every other check comes first.
Result<OrderedJson> BuildSubmission(const SubmitFlags& flags,
                                    const std::vector<std::string>& command, const std::string& cwd,
                                    const ElementResolver& resolve = nullptr);

// The values of one script line (a #GPUPOOL or #SBATCH line's options alone) that can be
// checked without the others: the counts, sizes, durations and --signal, each with the
// check BuildSubmission makes, so that a bad one is refused naming its line
// (ParseDirectives). Options whose check needs others (a share and --gpus, --shm-size and
// --image) are left to BuildSubmission.
Status CheckLineValues(const SubmitFlags& line);

// A fresh idempotency key for one submission (128 random bits, hex): the same body with
// the same key, sent again after a timeout or a lost server, is created once.
std::string NewSubmitKey();

// POST /v1/jobs with `body`, after giving it a submit_key: sent again with the same key
// while the server is unreachable or busy (up to about a minute), so a submission lost in
// a server's failure or failover is created once. A 200 answer (the key was seen) is the
// job the first attempt made.
Result<ApiAnswer> PostSubmission(const ApiClient& api, OrderedJson* body);

// The server's warnings on an accepted submission (its answer's `warnings`: an --exclude
// name no node has), each as "gpupool: warning: ..." on `err`.
void PrintSubmitWarnings(const Json& answer, std::ostream& err);

}  // namespace gpupool::cli
