#include "agent/run_id.h"

#include "common/strings.h"

namespace gpupool::agent {
namespace {

constexpr int64_t kLegacyGangKeyBase = int64_t{1} << 50;
constexpr int64_t kLegacyExecKeyBase = int64_t{1} << 61;
constexpr int64_t kLegacyTasksPerKey = 4096;
constexpr std::string_view kExecPrefix = "exec-";

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string ToString(const RunId& id) {
  std::string task = "job " + std::to_string(id.job) + " task " + std::to_string(id.task) +
                     " attempt " + std::to_string(id.attempt);
  return id.is_exec() ? "exec " + std::to_string(id.exec) + " in " + task : task;
}

std::string RunDirName(const RunId& id) {
  if (id.is_exec()) return std::string(kExecPrefix) + std::to_string(id.exec);
  return std::to_string(id.task) + "." + std::to_string(id.attempt);
}

std::string JobDir(const std::string& state_dir, const RunId& id) {
  return state_dir + "/jobs/" + std::to_string(id.job) + "/" + RunDirName(id);
}

bool IsRunDirName(std::string_view name) {
  if (name.substr(0, kExecPrefix.size()) == kExecPrefix) {
    return AllDigits(name.substr(kExecPrefix.size()));
  }
  const size_t dot = name.find('.');
  return dot != std::string_view::npos && AllDigits(name.substr(0, dot)) &&
         AllDigits(name.substr(dot + 1));
}

std::optional<RunId> RunIdOfDir(std::string_view dir) {
  while (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
  const size_t slash = dir.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return std::nullopt;
  const std::string_view name = dir.substr(slash + 1);
  const std::string_view parent = dir.substr(0, slash);
  const size_t up = parent.rfind('/');
  const std::string_view job_name = parent.substr(up == std::string_view::npos ? 0 : up + 1);
  if (!IsRunDirName(name) || !AllDigits(job_name)) return std::nullopt;
  RunId id;
  id.job = ParseInt64(job_name).value_or(0);
  if (name.substr(0, kExecPrefix.size()) == kExecPrefix) {
    id.exec = ParseInt64(name.substr(kExecPrefix.size())).value_or(0);
  } else {
    const size_t dot = name.find('.');
    id.task = static_cast<int>(ParseInt64(name.substr(0, dot)).value_or(0));
    id.attempt = static_cast<int>(ParseInt64(name.substr(dot + 1)).value_or(0));
  }
  if (id.job <= 0) return std::nullopt;
  return id;
}

RunId LegacyRunId(int64_t key, int64_t job, int task, int attempt) {
  RunId id{job, task, attempt, 0};
  if (key >= kLegacyExecKeyBase) {
    id.exec = key - kLegacyExecKeyBase;
  } else if (key >= kLegacyGangKeyBase) {
    id.job = (key - kLegacyGangKeyBase) / kLegacyTasksPerKey;
    id.task = static_cast<int>((key - kLegacyGangKeyBase) % kLegacyTasksPerKey);
  } else {
    id.job = key;
    id.task = 0;
  }
  return id;
}

int64_t JobOfLegacyKey(int64_t key) {
  if (key >= kLegacyExecKeyBase) return 0;
  return LegacyRunId(key, 0, 0, 0).job;
}

}  // namespace gpupool::agent
