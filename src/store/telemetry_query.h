// The one SELECT behind Store::ListTelemetry (store.h), for both backends: SQLite and
// PostgreSQL share the SQL text (`$n` parameters, numbered in the order they appear, which
// SQLite binds by that order too; substr and the % operator mean the same in both).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "store/store.h"

namespace gpupool::store {

struct TelemetrySelect {
  std::string sql;  // columns: scope, key, t_ms, util_sum, samples, peak_pct,
                    // mem_max_mib, used_gpu_s, gpus
  std::vector<std::variant<int64_t, std::string>> params;  // $1, $2, ... in order
};

// The migration that made each job's total ("job_total", at its first minute) and the
// pool's minutes ("pool") from the points stored before them: SQLite's 11th, PostgreSQL's
// 5th, the same SQL for both.
inline constexpr const char* kTelemetryTotalsFromPoints = R"sql(
INSERT INTO telemetry(scope, key, t_ms, util_sum, samples, peak_pct, mem_max_mib, used_gpu_s, gpus)
  SELECT 'job_total', key, MIN(t_ms), SUM(util_sum), SUM(samples), MAX(peak_pct), MAX(mem_max_mib),
         SUM(used_gpu_s), MAX(gpus)
  FROM telemetry WHERE scope = 'job' GROUP BY key;
INSERT INTO telemetry(scope, key, t_ms, util_sum, samples, peak_pct, mem_max_mib, used_gpu_s, gpus)
  SELECT 'pool', '', t_ms, SUM(util_sum), SUM(samples), MAX(peak_pct), SUM(mem_max_mib), 0, SUM(gpus)
  FROM telemetry WHERE scope = 'gpu' GROUP BY t_ms;
)sql";

// InvalidArgument for a step that is not a positive multiple of a minute (or 0, or
// kTelemetryWholeRange), or merge_keys without a step.
Result<TelemetrySelect> BuildTelemetrySelect(const TelemetryQuery& q);

}  // namespace gpupool::store
