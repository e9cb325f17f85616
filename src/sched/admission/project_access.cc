#include "sched/admission/project_access.h"

#include "common/confusables.h"
#include "common/strings.h"

namespace gpupool::sched {
namespace {

// "; your projects: a, b" or "; you are a member of no project".
std::string YourProjects(const Limits& limits, const std::string& user) {
  std::string out;
  for (const auto& [name, entry] : limits.projects) {
    if (entry.members.contains(user)) out += (out.empty() ? "" : ", ") + name;
  }
  return out.empty() ? "you are a member of no project" : "your projects: " + out;
}

// Whether a project entry other than `project` prints like it (the same skeleton).
bool AnEntryLooksLike(const Limits& limits, const std::string& project) {
  const std::string skeleton = ConfusableSkeleton(project);
  for (const auto& [name, entry] : limits.projects) {
    if (name != project && ConfusableSkeleton(name) == skeleton) return true;
  }
  return false;
}

bool HasDefaultProject(const Limits& limits, const std::string& user) {
  auto it = limits.users.find(user);
  return it != limits.users.end() && !it->second.default_project.empty();
}

}  // namespace

Result<ProjectEnforcement> ParseProjectEnforcement(std::string_view name, std::string_view flag) {
  for (ProjectEnforcement e :
       {ProjectEnforcement::kNone, ProjectEnforcement::kKnown, ProjectEnforcement::kMembers}) {
    if (name == ProjectEnforcementName(e)) return e;
  }
  return Status::InvalidArgument(std::string(flag) + " '" + std::string(name) +
                                 "': none, known (projects with an entry in `gpupool limits`) or "
                                 "members (only their members)");
}

std::string_view ProjectEnforcementName(ProjectEnforcement e) {
  switch (e) {
    case ProjectEnforcement::kNone:
      return "none";
    case ProjectEnforcement::kKnown:
      return "known";
    case ProjectEnforcement::kMembers:
      return "members";
  }
  return "none";
}

Status AdmitProject(const Limits& limits, ProjectEnforcement mode, const std::string& user,
                    std::string* project, bool submitting, const ProjectNames* listed) {
  if (project->empty()) {
    if (auto it = limits.users.find(user); it != limits.users.end()) {
      *project = it->second.default_project;
    }
  }
  // Whatever the enforcement: a name of look-alike letters of two scripts ("vіsion" with a
  // Cyrillic і) lists like another's. One an admin made an entry for is the admin's choice.
  if (submitting && !project->empty() && limits.ForProject(*project) == nullptr &&
      MixesLookAlikeScripts(*project)) {
    return Status::InvalidArgument(
        "project: a project name mixes Latin, Greek or Cyrillic letters, which print alike "
        "(a Cyrillic i lists like a Latin one); write it in one script");
  }
  // Nor a name in one script that prints like another's (all-Cyrillic "сосо" and "coco"),
  // nor another's in other capitals. One's own name charges one's own group anyway.
  if (submitting && !project->empty() && *project != user &&
      limits.ForProject(*project) == nullptr &&
      (listed != nullptr ? listed->HasLookAlikeOf(*project) : AnEntryLooksLike(limits, *project))) {
    return Status::InvalidArgument(
        "project: the project name prints like that of another project (look-alike letters "
        "of another script, as a Cyrillic c and a Latin one, or other capitals); name that "
        "project as `gpupool limits` or `gpupool queue` spells it, or ask an admin to make "
        "an entry for this one (`gpupool limits set --project`)");
  }
  if (mode == ProjectEnforcement::kNone) return Status::Ok();
  // A job without a project charges its user's name (jobs::AccountingProject).
  const std::string& p = project->empty() ? user : *project;
  const Limit* entry = limits.ForProject(p);
  if (p == user && submitting && HasDefaultProject(limits, user)) {
    // The admin put this user in a project: their own name would be a project of their
    // own (a fresh fair share, no project limits), unless an admin made it one for them.
    if (entry != nullptr &&
        (mode != ProjectEnforcement::kMembers || entry->members.contains(user))) {
      return Status::Ok();
    }
    return Status::PermissionDenied("project (--project): '" + user +
                                    "' is your own name, and your jobs charge your "
                                    "default project '" +
                                    limits.users.at(user).default_project + "' (enforce-projects " +
                                    std::string(ProjectEnforcementName(mode)) +
                                    "): leave --project out, or name one of yours (" +
                                    YourProjects(limits, user) + ")");
  }
  if (p == user) {
    // One's own name charges no one else, unless an admin made a team project of that
    // name without its namesake (under "members"; the limits' PUT refuses that for
    // accounts that exist then, not for one made later).
    if (mode != ProjectEnforcement::kMembers || entry == nullptr || entry->members.empty() ||
        entry->members.contains(user)) {
      return Status::Ok();
    }
    return Status::PermissionDenied(
        "project (--project): '" + user + "' is also a team project whose members (" +
        std::to_string(entry->members.size()) +
        ") do not include you, and a job without --project charges the project of your "
        "name (enforce-projects members); name one of yours with --project (" +
        YourProjects(limits, user) +
        "), or ask an admin to set your default project "
        "(`gpupool limits set --user " +
        user + " --default-project P`) or to rename project '" + user + "'");
  }
  auto fix = [&] {
    return "; name one of yours or leave --project out (" + YourProjects(limits, user) +
           "), or ask an admin: `gpupool limits set --project " + p + " --add-member " + user + "`";
  };
  if (entry == nullptr) {
    return Status::PermissionDenied("project (--project): there is no project '" + p +
                                    "' in `gpupool limits`, and this pool charges jobs only to "
                                    "projects an admin made (enforce-projects " +
                                    std::string(ProjectEnforcementName(mode)) + ")" + fix());
  }
  if (mode == ProjectEnforcement::kMembers && !entry->members.contains(user)) {
    return Status::PermissionDenied("project (--project): " + user +
                                    " is not a member of project '" + p +
                                    "', and this pool charges a project only to its members "
                                    "(enforce-projects members)" +
                                    fix());
  }
  return Status::Ok();
}

}  // namespace gpupool::sched
