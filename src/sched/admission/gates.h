// The built-in gates (admission.h), in the order the default profile runs them:
//   hold            - a held job waits until released;
//   dependency      - a job waits for the jobs it depends on (the host resolves them);
//   earlier-attempt - a requeued job waits while a node still stops its earlier attempt;
//   array-throttle  - at most array_max_running elements of an array run at once, the
//                     earliest first;
//   project         - under the server's enforce-projects, a job whose user may not charge
//                     its project (any more: project_access.h) waits;
//   quota           - a job that would take its user or project past their Limits waits.
// Their pending reasons are what users read in `gpupool queue` and what metrics.cc
// classifies by prefix ("held by ", "waits for job", "waits for attempt ", "array ",
// "waits: "), so their wording is part of the contract.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "sched/admission/admission.h"

namespace gpupool::sched {

class HoldGate final : public GatePlugin {
 public:
  std::string_view name() const override { return "hold"; }
  bool Admit(const QueuedJob& job, std::string* why) override;
  // "held by alice: `gpupool release 12` lets it start"; an admin's hold, which only admins
  // release: "held by root (admin): `gpupool release 12` by an admin lets it start".
  static std::string Reason(std::string_view job_id, std::string_view held_by, bool by_admin);
};

class DependencyGate final : public GatePlugin {
 public:
  std::string_view name() const override { return "dependency"; }
  bool Admit(const QueuedJob& job, std::string* why) override;
};

class EarlierAttemptGate final : public GatePlugin {
 public:
  std::string_view name() const override { return "earlier-attempt"; }
  bool Admit(const QueuedJob& job, std::string* why) override;
};

class ArrayThrottle final : public GatePlugin {
 public:
  std::string_view name() const override { return "array-throttle"; }
  void BeginPass(const PassContext& ctx) override;
  bool Admit(const QueuedJob& job, std::string* why) override;

 private:
  std::map<std::string, int64_t, std::less<>> running_;   // array -> elements placed or running
  std::map<std::string, int64_t, std::less<>> admitted_;  // array -> elements admitted this pass
};

// The submission check (AdmitProject) again for queued jobs, which may predate it: jobs
// submitted before enforcement was turned on or before their user left the project.
class ProjectGate final : public GatePlugin {
 public:
  std::string_view name() const override { return "project"; }
  void BeginPass(const PassContext& ctx) override;
  bool Admit(const QueuedJob& job, std::string* why) override;

 private:
  const Limits* limits_ = nullptr;
  ProjectEnforcement mode_ = ProjectEnforcement::kNone;
};

class QuotaLimit final : public GatePlugin {
 public:
  std::string_view name() const override { return "quota"; }
  void BeginPass(const PassContext& ctx) override;
  bool Admit(const QueuedJob& job, std::string* why) override;

 private:
  struct Use {
    int64_t gpus = 0;
    int64_t running = 0;
  };
  const Limits* limits_ = nullptr;  // the pass's (PassContext::limits)
  bool active_ = false;             // some limit is set
  // What each user and project has placed or running, plus what this pass admitted.
  std::map<std::string, Use, std::less<>> users_;
  std::map<std::string, Use, std::less<>> projects_;
};

}  // namespace gpupool::sched
