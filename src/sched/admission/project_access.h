// Who may charge a job to which project: the admin's associations (Slurm's, with
// AccountingStorageEnforce=associations), kept in the limits (limits.h: a project's
// `members`, a user's `default_project`). A job's project picks the limits and the
// preemption QoS of the project's entry and, with fair share by project, its share; as
// free text, anyone could name another team's project or a new one. The controller
// checks every submission here (`gpupool submit`, arrays, `run`, `alloc`, a script's
// #GPUPOOL lines: all are one POST /v1/jobs); a job's project never changes after, and
// the `project` gate (gates.h) holds queued jobs that fail the check later.
// Pure functions of value types.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "sched/admission/limits.h"
#include "sched/admission/project_names.h"

namespace gpupool::sched {

// The server's enforce-projects option.
enum class ProjectEnforcement {
  kNone,     // any project (the default: as before associations)
  kKnown,    // only projects with an entry in the limits
  kMembers,  // only projects whose entry lists the user among its members
};

// "none", "known" or "members"; InvalidArgument naming `flag` otherwise.
Result<ProjectEnforcement> ParseProjectEnforcement(std::string_view name, std::string_view flag);
std::string_view ProjectEnforcementName(ProjectEnforcement e);

// Fills an empty `*project` with the user's default project (whatever `mode`), then
// checks that `user` may charge `*project` under `mode`. A job whose project is its
// user's own name (no --project and no default) is let through: it charges no one else;
// except, under "members", where a project entry of that name lists members and not the
// user (a team project named like an account made later), and, when `submitting` under
// enforcement, for a user with a default project, whose own name would be a project of
// their own outside it (a fresh fair share, none of its limits): allowed only where an
// entry of that name exists (and, under "members", lists them). The project gate passes
// `submitting` false: a job queued without --project before its user had a default
// project (it charges their name) is not held for ever. Admins are not exempt.
// PermissionDenied naming `project (--project)`, the project and the fix otherwise.
// When `submitting`, whatever `mode`: InvalidArgument for a project with no entry whose
// name mixes Latin, Greek or Cyrillic letters (MixesLookAlikeScripts), which lists like
// another's; and, but for the user's own name, for one that prints like another name
// (ConfusableSkeleton: all-Cyrillic "сосо" and "coco", "Vision" and "vision"): that of a
// project entry, or one of `listed`, the names the pool lists (the controller's: its
// jobs' projects and the entries' names). Without `listed`, the entries are walked.
Status AdmitProject(const Limits& limits, ProjectEnforcement mode, const std::string& user,
                    std::string* project, bool submitting = true,
                    const ProjectNames* listed = nullptr);

}  // namespace gpupool::sched
