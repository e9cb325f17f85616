#include "sched/admission/limits.h"

#include <cmath>
#include <vector>

namespace gpupool::sched {
namespace {

constexpr int64_t kMaxValue = 1'000'000'000;

OrderedJson LimitToJson(const Limit& l) {
  OrderedJson j = OrderedJson::object();
  if (l.max_gpus >= 0) j["max_gpus"] = l.max_gpus;
  if (l.max_running >= 0) j["max_running"] = l.max_running;
  if (l.max_queued >= 0) j["max_queued"] = l.max_queued;
  if (l.preemptible) j["preemptible"] = *l.preemptible;
  if (l.min_runtime_s >= 0) j["min_runtime_s"] = l.min_runtime_s;
  if (l.preempt_grace_s >= 0) j["preempt_grace_s"] = l.preempt_grace_s;
  if (!l.members.empty()) j["members"] = l.members;
  if (!l.default_project.empty()) j["default_project"] = l.default_project;
  if (l.fair_share > 0) j["fair_share"] = l.fair_share;
  return j;
}

// "fair_share": a number above 0 and at most kMaxFairShare (JSON has no NaN or infinity,
// but a double past the bound reads as one).
void FairShareFromJson(JsonFields& f, double* out) {
  const Json* v = f.Member("fair_share");
  if (v == nullptr) return;
  const double d = v->is_number() ? v->get<double>() : 0;
  if (!v->is_number() || !std::isfinite(d) || !(d > 0) || d > kMaxFairShare) {
    f.Fail("fair_share", "must be a number above 0 and at most 1000000, got " + v->dump());
    return;
  }
  *out = d;
}

Result<Limit> LimitFromJson(const Json& j, const std::string& path) {
  Limit l;
  if (!j.is_object()) {
    return Status::InvalidArgument(path + ": an object, e.g. {\"max_gpus\": 8}");
  }
  JsonFields f(j, path);
  f.Optional("max_gpus", &l.max_gpus, -1, kMaxValue);
  f.Optional("max_running", &l.max_running, -1, kMaxValue);
  f.Optional("max_queued", &l.max_queued, -1, kMaxValue);
  f.Optional("preemptible", &l.preemptible);
  f.Optional("min_runtime_s", &l.min_runtime_s, -1, int64_t{365} * 24 * 3600);
  f.Optional("preempt_grace_s", &l.preempt_grace_s, -1, int64_t{24} * 3600);
  std::vector<std::string> members;
  f.Optional("members", &members);
  f.Optional("default_project", &l.default_project);
  FairShareFromJson(f, &l.fair_share);
  GP_RETURN_IF_ERROR(f.Finish());
  for (const std::string& m : members) {
    if (m.empty() || m.size() > 64) {
      return Status::InvalidArgument(path +
                                     ".members: login names of 1..64 characters, e.g. "
                                     "[\"alice\", \"bob\"]");
    }
  }
  l.members.insert(members.begin(), members.end());
  if (l.default_project.size() > 64) {
    return Status::InvalidArgument(path + ".default_project: a project name of 1..64 characters");
  }
  return l;
}

// Members belong to a project's entry, a default project to a user's.
Status CheckAssociationFields(const Limit& l, const std::string& path, bool user, bool project) {
  if (!project && !l.members.empty()) {
    return Status::InvalidArgument(path +
                                   ".members: only a project's entry has members (limits.projects."
                                   "NAME.members; `gpupool limits set --project NAME --members`)");
  }
  if (!user && !l.default_project.empty()) {
    return Status::InvalidArgument(path +
                                   ".default_project: only a user's entry has a default project "
                                   "(`gpupool limits set --user NAME --default-project PROJECT`)");
  }
  if (!user && !project && l.fair_share > 0) {
    return Status::InvalidArgument(path +
                                   ".fair_share: a weight belongs to a user's or a project's entry "
                                   "(`gpupool limits set --user NAME --fair-share N`); groups "
                                   "without one weigh 1");
  }
  return Status::Ok();
}

// A user's default project must be one they may charge: a project whose entry lists them.
Status CheckDefaultProjects(const Limits& l) {
  for (const auto& [user, limit] : l.users) {
    const std::string& p = limit.default_project;
    if (p.empty() || p == user) continue;
    const Limit* project = l.ForProject(p);
    if (project == nullptr || !project->members.contains(user)) {
      return Status::InvalidArgument(
          "limits.users." + user + ".default_project: project '" + p + "' does not list " + user +
          " among its members; add them first (`gpupool limits set --project " + p +
          " --add-member " + user + "`), or clear it (`--default-project none`)");
    }
  }
  return Status::Ok();
}

Status NamedLimits(const Json* obj, const std::string& path, std::map<std::string, Limit>* out) {
  if (obj == nullptr) return Status::Ok();
  for (auto it = obj->begin(); it != obj->end(); ++it) {
    if (it.key().empty() || it.key().size() > 64) {
      return Status::InvalidArgument(path + ": a name of 1..64 characters, e.g. \"alice\"");
    }
    const std::string at = path + "." + it.key();
    GP_ASSIGN_OR_RETURN(Limit l, LimitFromJson(*it, at));
    GP_RETURN_IF_ERROR(
        CheckAssociationFields(l, at, path == "limits.users", path == "limits.projects"));
    if (!l.empty()) (*out)[it.key()] = l;
  }
  return Status::Ok();
}

}  // namespace

Limit Limits::ForUser(const std::string& user) const {
  auto it = users.find(user);
  if (it == users.end()) return user_default;
  Limit l = it->second;
  for (auto field : {&Limit::max_gpus, &Limit::max_running, &Limit::max_queued}) {
    if (l.*field < 0) l.*field = user_default.*field;
  }
  return l;
}

const Limit* Limits::ForProject(const std::string& project) const {
  auto it = projects.find(project);
  return it != projects.end() ? &it->second : nullptr;
}

OrderedJson LimitsToJson(const Limits& l) {
  OrderedJson users = OrderedJson::object();
  for (const auto& [name, limit] : l.users) users[name] = LimitToJson(limit);
  OrderedJson projects = OrderedJson::object();
  for (const auto& [name, limit] : l.projects) projects[name] = LimitToJson(limit);
  return {{"default", LimitToJson(l.user_default)},
          {"users", std::move(users)},
          {"projects", std::move(projects)}};
}

Result<Limits> LimitsFromJson(const Json& j) {
  Limits l;
  if (!j.is_object()) return Status::InvalidArgument("limits: a JSON object, e.g. {\"users\": {}}");
  JsonFields f(j, "limits");
  const Json* def = f.Member("default");
  const Json* users = f.Member("users");
  const Json* projects = f.Member("projects");
  // GET /v1/limits answers the revision with them (docs/api.md); a copy read back is fine.
  int64_t revision = 0;
  f.Optional("revision", &revision, 0);
  for (const auto& [key, m] :
       {std::pair{"default", def}, {"users", users}, {"projects", projects}}) {
    if (m != nullptr && !m->is_object()) f.Fail(key, "an object, e.g. {\"max_gpus\": 8}");
  }
  GP_RETURN_IF_ERROR(f.Finish());
  if (def != nullptr) {
    GP_ASSIGN_OR_RETURN(l.user_default, LimitFromJson(*def, "limits.default"));
    GP_RETURN_IF_ERROR(CheckAssociationFields(l.user_default, "limits.default", false, false));
  }
  GP_RETURN_IF_ERROR(NamedLimits(users, "limits.users", &l.users));
  GP_RETURN_IF_ERROR(NamedLimits(projects, "limits.projects", &l.projects));
  GP_RETURN_IF_ERROR(CheckDefaultProjects(l));
  return l;
}

std::map<std::string, double, std::less<>> FairShareWeights(const Limits& l, bool by_project) {
  std::map<std::string, double, std::less<>> out;
  for (const auto& [name, limit] : by_project ? l.projects : l.users) {
    if (limit.fair_share > 0) out.emplace(name, limit.fair_share);
  }
  return out;
}

std::string LimitReason(const std::string& who, const Limit& l, int64_t used_gpus,
                        int64_t used_running, int64_t job_gpus) {
  if (l.max_running >= 0 && used_running >= l.max_running) {
    return who + " has " + std::to_string(used_running) +
           " jobs running or next to start, the limit (max_running " +
           std::to_string(l.max_running) + ", `gpupool limits`)";
  }
  if (l.max_gpus >= 0 && job_gpus > l.max_gpus) {
    // Nothing ending makes room for it: said so, not "GPUs in use" with none in use.
    return "this job alone asks for " + std::to_string(job_gpus) + " GPUs, more than " + who +
           "'s limit (max_gpus " + std::to_string(l.max_gpus) +
           "): it starts only if an admin raises the limit (`gpupool limits`)";
  }
  if (l.max_gpus >= 0 && job_gpus > 0 && used_gpus + job_gpus > l.max_gpus) {
    return who + " has " + std::to_string(used_gpus) +
           " GPUs in use or next to start; this job's " + std::to_string(job_gpus) +
           " more would pass the limit (max_gpus " + std::to_string(l.max_gpus) +
           ", `gpupool limits`)";
  }
  return "";
}

}  // namespace gpupool::sched
