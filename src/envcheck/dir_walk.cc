#include "envcheck/dir_walk.h"

#include <sys/prctl.h>
#include <sys/resource.h>

#include "common/json.h"
#include "envcheck/inspector.h"
#include "envcheck/needs.h"
#include "envcheck/tree_digest.h"
#include "jobs/job_json.h"

namespace gpupool::envcheck {
namespace {

StatusCode CodeNamed(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
    if (StatusCodeName(static_cast<StatusCode>(c)) == name) return static_cast<StatusCode>(c);
  }
  return StatusCode::kInternal;
}

std::string ErrorAnswer(const Status& s) {
  OrderedJson j;
  j["error"] = {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}};
  return DumpJson(j);
}

}  // namespace

std::vector<std::string> DirWalkArgs(const DirWalkRequest& r) {
  std::vector<std::string> a = {"env",
                                "walk",
                                r.dir,
                                "--who",
                                r.who,
                                "--max-files",
                                std::to_string(r.max_files),
                                "--max-file-bytes",
                                std::to_string(r.max_file_bytes),
                                "--max-total-bytes",
                                std::to_string(r.max_total_bytes),
                                "--timeout-ms",
                                std::to_string(r.timeout_ms)};
  if (r.digest_only) a.push_back("--digest-only");
  return a;
}

std::string RunDirWalk(const DirWalkRequest& r) {
  // Not traceable by the user it runs as (from here on; see docs/cli.md for the window),
  // and second in line for the CPU.
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  (void)::setpriority(PRIO_PROCESS, 0, 10);
  const int64_t deadline = SteadyMillis() + r.timeout_ms;
  WalkLimits limits;
  limits.max_entries = r.max_files;
  limits.deadline_ms = deadline;
  Result<TreeDigest> digest = DigestTree(r.dir, limits, r.who);
  if (!digest.ok()) return ErrorAnswer(digest.status());
  OrderedJson j;
  j["digest"] = digest->digest;
  j["entries"] = digest->entries;
  if (!r.digest_only) {
    InspectOptions o;
    o.max_files = r.max_files;
    o.max_file_bytes = r.max_file_bytes;
    o.max_total_bytes = r.max_total_bytes;
    o.deadline_ms = deadline;
    o.limits_are_errors = true;
    Result<EnvReport> report = InspectTree(r.dir, o);
    if (!report.ok()) return ErrorAnswer(report.status());
    j["needs"] = jobs::NeedsToJson(NeedsFromReport(*report, "directory " + r.dir));
  }
  return DumpJson(j);
}

Result<DirWalkAnswer> ParseDirWalkAnswer(const std::string& text) {
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, "the directory walk's answer", 1 << 20, 16));
  if (!j.is_object()) return Status::Internal("the directory walk's answer is not an object");
  if (auto e = j.find("error"); e != j.end() && e->is_object()) {
    const std::string code = e->value("code", "INTERNAL");
    const std::string message = e->value("message", "the directory walk failed");
    return Status(CodeNamed(code), message);
  }
  DirWalkAnswer a;
  a.digest = j.value("digest", "");
  a.entries = j.value("entries", uint64_t{0});
  if (a.digest.rfind("sha256:", 0) != 0) {
    return Status::Internal("the directory walk's answer has no digest");
  }
  if (auto n = j.find("needs"); n != j.end()) {
    GP_ASSIGN_OR_RETURN(a.needs, jobs::NeedsFromJson(*n, "needs"));
  }
  return a;
}

Result<DirWalkAnswer> WalkDirInChild(const std::string& self_exe, const DirWalkRequest& request,
                                     const std::optional<SpawnOptions::RunAs>& run_as,
                                     const std::function<bool()>& cancelled) {
  std::vector<std::string> argv = DirWalkArgs(request);
  argv.insert(argv.begin(), self_exe);
  SpawnOptions o;
  o.run_as = run_as;
  o.close_from = 3;
  // The child stops itself at its deadline; the kill is for one that does not.
  const int kill_after_ms = static_cast<int>(request.timeout_ms) + 2'000;
  GP_ASSIGN_OR_RETURN(CommandResult r, RunCommandCapture(argv, kill_after_ms, o, cancelled));
  if (r.cancelled) {
    return Status::Unavailable("the inspection of '" + request.dir +
                               "' was stopped (the server is shutting down or the client left)");
  }
  if (r.timed_out) {
    return Status::ResourceExhausted("inspecting '" + request.dir + "' took longer than " +
                                     std::to_string(request.timeout_ms / 1000) +
                                     " s, the limit: inspect a smaller directory");
  }
  if (!r.Succeeded() || r.out.empty()) {
    return Status::Unavailable("cannot inspect '" + request.dir +
                               "': " + r.Failure({"gpupool", "env walk"}, kill_after_ms));
  }
  return ParseDirWalkAnswer(r.out);
}

}  // namespace gpupool::envcheck
