#include "jobs/output_pattern.h"

#include <cctype>
#include <filesystem>
#include <utility>

#include "jobs/job.h"

namespace gpupool::jobs {
namespace {

constexpr std::string_view kLetters = "jaAxuNt%";

std::string Padded(int64_t value, int width) {
  std::string digits = std::to_string(value);
  if (width > static_cast<int>(digits.size())) {
    digits.insert(0, static_cast<size_t>(width) - digits.size(), '0');
  }
  return digits;
}

// A name put into a file name stays one path component.
std::string NoSlash(std::string s) {
  for (char& c : s) {
    if (c == '/') c = '_';
  }
  return s;
}

}  // namespace

OutputFields OutputFieldsOf(const Job& job, const std::string& node, int task) {
  OutputFields f;
  f.job_id = job.id;
  f.array_id = job.array_id;
  f.array_index = job.array_index;
  f.name = job.name;
  f.user = job.user;
  f.node = node;
  f.task = task;
  return f;
}

Status CheckOutputPattern(std::string_view field, std::string_view pattern) {
  const std::string where = std::string(field) + " '" + std::string(pattern) + "': ";
  if (pattern.empty()) return Status::InvalidArgument(std::string(field) + ": give a file name");
  if (pattern.size() > kMaxOutputPatternBytes) {
    return Status::InvalidArgument(std::string(field) + ": longer than " +
                                   std::to_string(kMaxOutputPatternBytes) + " bytes");
  }
  if (pattern.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(std::string(field) + ": a file name has no NUL byte");
  }
  if (pattern.back() == '/') {
    return Status::InvalidArgument(where + "names a directory; give a file, e.g. " +
                                   std::string(pattern) + "gpupool-%j.out");
  }
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    size_t k = i + 1;
    while (k < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[k]))) ++k;
    if (k - i - 1 > 2) {
      return Status::InvalidArgument(where + "pad with at most 99 digits (%4j)");
    }
    if (k == pattern.size() || kLetters.find(pattern[k]) == std::string_view::npos) {
      const std::string got =
          k == pattern.size() ? "nothing" : "'%" + std::string(1, pattern[k]) + "'";
      return Status::InvalidArgument(
          where + got +
          " after %: use %j (job id), %a (array index), %A (array id), %x (job name), %u "
          "(user), %N (node), %t (task) or %% (a percent sign)");
    }
    i = k;
  }
  return Status::Ok();
}

Status ValidateBatchIo(const Job& job) {
  const std::string& script = job.script.get();
  if (!script.empty()) {
    if (!job.interactive.empty() || job.command.empty()) {
      return Status::InvalidArgument("script: only a batch job (gpupool submit) runs a script");
    }
    if (script.size() > kMaxScriptBytes) {
      return Status::InvalidArgument("script: longer than " + std::to_string(kMaxScriptBytes) +
                                     " bytes");
    }
    if (script.find('\0') != std::string::npos) {
      return Status::InvalidArgument("script: contains a NUL byte (not a text script)");
    }
  }
  for (const auto& [field, pattern] :
       {std::pair<std::string, const std::string*>{"output", &job.output}, {"error", &job.error}}) {
    if (pattern->empty()) continue;
    if (!job.interactive.empty()) {
      return Status::InvalidArgument(field + ": gpupool " + job.interactive +
                                     " shows the output at the terminal; -o/-e are for gpupool "
                                     "submit");
    }
    GP_RETURN_IF_ERROR(CheckOutputPattern(field, *pattern));
    if (job.request.tasks > 1 && !job.mpi && !PatternNamesTask(*pattern) &&
        *pattern != "/dev/null") {
      return Status::InvalidArgument(
          field + " '" + *pattern + "': the job's " + std::to_string(job.request.tasks) +
          " tasks would write one file; put %t (the task index) in it, e.g. " +
          "gpupool-%j.%t.out");
    }
  }
  if (!job.error.empty() && job.output.empty()) {
    return Status::InvalidArgument("error: give output as well (stdout's file)");
  }
  return Status::Ok();
}

bool PatternNamesTask(std::string_view pattern) {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') continue;
    size_t k = i + 1;
    while (k < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[k]))) ++k;
    if (k < pattern.size() && pattern[k] == 't') return true;
    i = k;  // skips the letter (and a %% as one)
  }
  return false;
}

Result<std::string> ExpandOutputPattern(std::string_view pattern, const OutputFields& f) {
  GP_RETURN_IF_ERROR(CheckOutputPattern("output", pattern));
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%') {
      out += pattern[i];
      continue;
    }
    size_t k = i + 1;
    int width = 0;
    while (std::isdigit(static_cast<unsigned char>(pattern[k])))
      width = width * 10 + (pattern[k++] - '0');
    switch (pattern[k]) {
      case 'j':
        out += Padded(f.job_id, width);
        break;
      case 'a':
        out += Padded(f.array_id != 0 ? f.array_index : 0, width);
        break;
      case 'A':
        out += Padded(f.array_id != 0 ? f.array_id : f.job_id, width);
        break;
      case 't':
        out += Padded(f.task, width);
        break;
      case 'x':
        out += NoSlash(f.name.empty() ? std::string("job") : f.name);
        break;
      case 'u':
        out += NoSlash(f.user);
        break;
      case 'N':
        out += f.node;
        break;
      default:
        out += '%';
        break;  // %%
    }
    i = k;
  }
  return out;
}

Result<std::string> OutputPath(std::string_view pattern, const OutputFields& fields,
                               const std::string& workdir) {
  GP_ASSIGN_OR_RETURN(std::string name, ExpandOutputPattern(pattern, fields));
  std::filesystem::path p(name);
  if (p.is_relative()) p = std::filesystem::path(workdir.empty() ? "/" : workdir) / p;
  return p.lexically_normal().string();
}

}  // namespace gpupool::jobs
