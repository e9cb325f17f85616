// The file names of a batch job's output (-o/--output, -e/--error), as Slurm's
// filename patterns: %j job id, %a array index, %A the array's id, %x job name, %u user,
// %N node, %t task index, %% a percent sign; a number between % and the letter pads a
// number with zeros (%4a -> 0007). A job that is no array element has %A = %j and %a = 0.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::jobs {

struct Job;

inline constexpr size_t kMaxOutputPatternBytes = 4096;

// What the letters stand for, for one task.
struct OutputFields {
  int64_t job_id = 0;
  int64_t array_id = 0;  // 0: no array
  int array_index = 0;
  std::string name;
  std::string user;
  std::string node;
  int task = 0;
};

OutputFields OutputFieldsOf(const Job& job, const std::string& node, int task);

// Checks a pattern: not empty, at most kMaxOutputPatternBytes, no NUL byte, not ending in
// '/', every % followed by [digits] and a known letter. Errors are kInvalidArgument
// naming `field` ("--output", "output") and what is wrong.
Status CheckOutputPattern(std::string_view field, std::string_view pattern);

// The most bytes of a job's script (Job::script); the server's max-submission-bytes
// bounds it as well.
inline constexpr size_t kMaxScriptBytes = 1 << 20;

// A submission's script, output and error (job.h): patterns checked, each for a batch job
// only (not gpupool run or alloc), a script with a command to run (its path first) and at
// most kMaxScriptBytes without NUL bytes, and a job of several tasks (not --mpi) giving
// each task its own file (%t). Errors name the field.
Status ValidateBatchIo(const Job& job);

// Whether the pattern names the task (%t): each task of a gang then has its own file.
bool PatternNamesTask(std::string_view pattern);

// The pattern with its letters replaced; the result of a checked pattern. A relative
// result is relative to the job's working directory (OutputPath).
Result<std::string> ExpandOutputPattern(std::string_view pattern, const OutputFields& fields);

// The absolute file a pattern names for this task: relative to `workdir`.
Result<std::string> OutputPath(std::string_view pattern, const OutputFields& fields,
                               const std::string& workdir);

}  // namespace gpupool::jobs
