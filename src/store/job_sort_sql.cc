#include "store/job_sort_sql.h"

namespace gpupool::store::internal {
namespace {

using jobs::JobSortField;

class SortSql {
 public:
  SortSql(SqlDialect d, const std::string& now)
      : d_(d), now_(d == SqlDialect::kPostgres ? "(" + now + ")::bigint" : now) {}

  // A JSON value of `column` at `path` ("request.gpus") as an integer, NULL when absent.
  std::string Int(const char* column, const std::string& path) const {
    if (d_ == SqlDialect::kSqlite)
      return "json_extract(" + std::string(column) + ",'$." + path + "')";
    std::string pg_path = path;
    for (char& c : pg_path) c = c == '.' ? ',' : c;
    return "((" + std::string(column) + ")::json#>>'{" + pg_path + "}')::bigint";
  }
  std::string Text(const char* column, const std::string& path) const {
    if (d_ == SqlDialect::kSqlite)
      return "json_extract(" + std::string(column) + ",'$." + path + "')";
    return "((" + std::string(column) + ")::json->>'" + path + "')";
  }
  // A submission's field: from job_specs, else from a row written whole.
  std::string SpecInt(const std::string& path, const char* def) const {
    return "COALESCE(" + Int("job_specs.body", path) + "," + Int("jobs.body", path) + "," + def +
           ")";
  }
  std::string SpecText(const std::string& path) const {
    return "COALESCE(" + Text("job_specs.body", path) + "," + Text("jobs.body", path) + ",'')" +
           Collate();
  }
  std::string StateInt(const std::string& path) const {
    return "COALESCE(" + Int("jobs.body", path) + ",0)";
  }
  std::string Collate() const { return d_ == SqlDialect::kPostgres ? " COLLATE \"C\"" : ""; }

  std::string Expr(JobSortField f) const {
    // Not const: two of the cases return them, and const would block the automatic move.
    std::string start = StateInt("start_time_us");
    std::string submit = StateInt("submit_time_us");
    switch (f) {
      case JobSortField::kId:
        return "jobs.id";
      case JobSortField::kUser:
        return (d_ == SqlDialect::kSqlite ? "jobs.user" : "jobs.username") + Collate();
      case JobSortField::kName:
        return SpecText("name");
      case JobSortField::kProject:
        return SpecText("project");
      case JobSortField::kState: {
        std::string s = "CASE jobs.state";
        for (int i = 0; i <= static_cast<int>(jobs::JobState::kLost); ++i) {
          s += " WHEN '" + std::string(jobs::JobStateName(static_cast<jobs::JobState>(i))) +
               "' THEN " + std::to_string(i);
        }
        return s + " ELSE 99 END";
      }
      case JobSortField::kPriority:
        return SpecInt("priority", "0");
      case JobSortField::kGpus:
        return "(" + SpecInt("request.gpus", "0") + "*" + SpecInt("request.gpu_milli", "1000") +
               "*" + SpecInt("request.tasks", "1") + ")";
      case JobSortField::kNodes:
        return "jobs.node" + Collate();
      case JobSortField::kSubmitted:
        return submit;
      case JobSortField::kStart:
        return start;
      case JobSortField::kEnded:
        return "jobs.end_time_us";
      case JobSortField::kWait:
        return "((CASE WHEN " + start + ">0 THEN " + start +
               " WHEN jobs.end_time_us>0 THEN jobs.end_time_us ELSE " + now_ + " END)-" + submit +
               ")";
      case JobSortField::kRuntime:
        return "(CASE WHEN " + start + ">0 THEN (CASE WHEN jobs.end_time_us>0 THEN " +
               "jobs.end_time_us ELSE " + now_ + " END)-" + start + " ELSE 0 END)";
      case JobSortField::kTimeLimit:
        return SpecInt("time_limit_s", "0");
    }
    return "jobs.id";
  }

 private:
  SqlDialect d_;
  std::string now_;
};

}  // namespace

bool JobSortUsesNow(const std::vector<jobs::JobSortKey>& keys) {
  for (const jobs::JobSortKey& k : keys) {
    if (k.field == JobSortField::kWait || k.field == JobSortField::kRuntime) return true;
  }
  return false;
}

std::string JobOrderBySql(const std::vector<jobs::JobSortKey>& keys, SqlDialect dialect,
                          const std::string& now_param) {
  const SortSql sql(dialect, now_param);
  std::string out = " ORDER BY ";
  for (const jobs::JobSortKey& k : keys) {
    out += sql.Expr(k.field) + (k.descending ? " DESC, " : " ASC, ");
  }
  return out + "jobs.id" + (!keys.empty() && keys.front().descending ? " DESC" : " ASC");
}

}  // namespace gpupool::store::internal
