#include "store/telemetry_query.h"

namespace gpupool::store {

Result<TelemetrySelect> BuildTelemetrySelect(const TelemetryQuery& q) {
  if (q.step_ms < 0 || (q.step_ms != kTelemetryWholeRange && q.step_ms % 60'000 != 0)) {
    return Status::InvalidArgument("telemetry step_ms: a multiple of 60000 (a minute)");
  }
  if (q.merge_keys && q.step_ms == 0) {
    return Status::InvalidArgument("telemetry merge_keys: give a step_ms too");
  }
  TelemetrySelect s;
  auto param = [&s](std::variant<int64_t, std::string> v) {
    s.params.push_back(std::move(v));
    return "$" + std::to_string(s.params.size());
  };
  if (q.step_ms == 0) {
    s.sql = "SELECT scope, key, t_ms, util_sum, samples, peak_pct, mem_max_mib, used_gpu_s, gpus";
  } else {
    // Parameters are numbered as they appear: the step comes first.
    const std::string step = param(q.step_ms);
    const char* over_keys = q.merge_keys ? "SUM" : "MAX";
    s.sql = std::string("SELECT scope, ") + (q.merge_keys ? "''" : "key") + ", t_ms - t_ms % " +
            step + ", SUM(util_sum), SUM(samples), MAX(peak_pct), " + over_keys +
            "(mem_max_mib), SUM(used_gpu_s), " + over_keys + "(gpus)";
  }
  s.sql += " FROM telemetry WHERE t_ms >= " + param(q.since_ms);
  if (q.until_ms != INT64_MAX) s.sql += " AND t_ms < " + param(q.until_ms);
  if (!q.scope.empty()) s.sql += " AND scope = " + param(q.scope);
  if (!q.key.empty()) s.sql += " AND key = " + param(q.key);
  if (!q.key_prefix.empty()) {
    // One parameter per statement: the operands of + are evaluated in no set order, and
    // SQLite numbers $n parameters by where they first appear.
    const std::string length = param(static_cast<int64_t>(q.key_prefix.size()));
    const std::string prefix = param(q.key_prefix);
    s.sql += " AND substr(key, 1, " + length + ") = " + prefix;
  }
  if (q.step_ms == 0) {
    s.sql += " ORDER BY scope, key, t_ms";
  } else {
    s.sql += " GROUP BY 1, 2, 3 ORDER BY 1, 2, 3";
  }
  return s;
}

}  // namespace gpupool::store
