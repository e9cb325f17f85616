#include "sched/admission/gates.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

namespace gpupool::sched {

std::string HoldGate::Reason(std::string_view job_id, std::string_view held_by, bool by_admin) {
  // An admin's hold is released by admins only: its owner is told so, not to release it.
  return fmt::format("held by {}{}: `gpupool release {}`{} lets it start", held_by,
                     by_admin ? " (admin)" : "", job_id, by_admin ? " by an admin" : "");
}

bool HoldGate::Admit(const QueuedJob& job, std::string* why) {
  if (job.admission.held_by.empty()) return true;
  const AdmissionFacts& a = job.admission;
  // As its user names it (an array's element 582_2), not by its id in the host's store.
  *why = Reason(a.user_id.empty() ? job.id : a.user_id, a.held_by, a.held_by_admin);
  return false;
}

bool DependencyGate::Admit(const QueuedJob& job, std::string* why) {
  if (job.admission.waits_for.empty()) return true;
  *why = job.admission.waits_for;
  return false;
}

bool EarlierAttemptGate::Admit(const QueuedJob& job, std::string* why) {
  if (job.admission.stopping_attempt <= 0) return true;
  if (job.admission.stopping_until_s > 0) {
    const bool one = job.admission.stopping_nodes <= 1;
    *why = fmt::format(
        "waits for attempt {} to stop on {} {} (the {} lost while it ran; {} stop{} it by "
        "{:%Y-%m-%d %H:%M:%S} UTC)",
        job.admission.stopping_attempt, one ? "node" : "nodes", job.admission.stopping_node,
        one ? "node was" : "nodes were", one ? "its lease" : "their leases", one ? "s" : "",
        fmt::gmtime(static_cast<std::time_t>(job.admission.stopping_until_s)));
    return false;
  }
  *why = fmt::format(
      "waits for attempt {} to stop on node {} (it still ran there when the node came back)",
      job.admission.stopping_attempt, job.admission.stopping_node);
  return false;
}

void ArrayThrottle::BeginPass(const PassContext& ctx) {
  running_.clear();
  admitted_.clear();
  for (const QueuedJob* job : ctx.occupying) {
    if (!job->admission.array_id.empty()) ++running_[job->admission.array_id];
  }
}

bool ArrayThrottle::Admit(const QueuedJob& job, std::string* why) {
  const AdmissionFacts& a = job.admission;
  if (a.array_id.empty() || a.array_max_running <= 0) return true;
  auto running = running_.find(a.array_id);
  int64_t& admitted = admitted_[a.array_id];
  if ((running == running_.end() ? 0 : running->second) + admitted >= a.array_max_running) {
    *why = fmt::format(
        "array {} runs at most {} elements at once (--array ...%{}); its earlier elements come "
        "first",
        a.array_id, a.array_max_running, a.array_max_running);
    return false;
  }
  ++admitted;
  return true;
}

void ProjectGate::BeginPass(const PassContext& ctx) {
  limits_ = ctx.limits;
  mode_ = ctx.project_enforcement;
}

bool ProjectGate::Admit(const QueuedJob& job, std::string* why) {
  if (limits_ == nullptr || mode_ == ProjectEnforcement::kNone) return true;
  std::string project = job.project;
  if (AdmitProject(*limits_, mode_, job.user, &project, /*submitting=*/false).ok()) return true;
  *why = "waits: " + job.user + " may not charge project '" + project + "' (enforce-projects " +
         std::string(ProjectEnforcementName(mode_)) +
         "): an admin adds them (`gpupool limits set --project " + project + " --add-member " +
         job.user + "`), or cancel it";
  return false;
}

void QuotaLimit::BeginPass(const PassContext& ctx) {
  users_.clear();
  projects_.clear();
  // Without any limit nothing can be refused, and nothing need be counted.
  active_ = ctx.limits != nullptr && !(ctx.limits->user_default.empty() &&
                                       ctx.limits->users.empty() && ctx.limits->projects.empty());
  limits_ = ctx.limits;
  if (!active_) return;
  for (const QueuedJob* job : ctx.occupying) {
    for (Use* u : {&users_[job->user], &projects_[job->project]}) {
      u->gpus += job->admission.gpus;
      ++u->running;
    }
  }
}

bool QuotaLimit::Admit(const QueuedJob& job, std::string* why_out) {
  if (!active_) return true;
  Use& u = users_[job.user];
  Use& p = projects_[job.project];
  const int64_t gpus = job.admission.gpus;
  std::string why;
  if (const Limit ul = limits_->ForUser(job.user); !ul.empty()) {
    why = LimitReason("user " + job.user, ul, u.gpus, u.running, gpus);
  }
  if (const Limit* pl = limits_->ForProject(job.project); why.empty() && pl != nullptr) {
    why = LimitReason("project " + job.project, *pl, p.gpus, p.running, gpus);
  }
  if (!why.empty()) {
    *why_out = "waits: " + why;
    return false;
  }
  // Admitted: counted as if it starts (it may not fit; then it only waits longer).
  for (Use* x : {&u, &p}) {
    x->gpus += gpus;
    ++x->running;
  }
  return true;
}

}  // namespace gpupool::sched
