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

// InvalidArgument for a step that is not a positive multiple of a minute (or 0, or
// kTelemetryWholeRange), or merge_keys without a step.
Result<TelemetrySelect> BuildTelemetrySelect(const TelemetryQuery& q);

}  // namespace gpupool::store
