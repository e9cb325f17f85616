// Admission: the plugins that decide, before placement, which pending jobs may be tried
// in a scheduling pass and on which nodes (after the Kubernetes scheduler framework's
// PreEnqueue gates and PreFilter/Filter plugins).
//
//   Gate (GatePlugin)        - job level: may this job be tried in this pass at all?
//                              (holds, dependencies, array throttles, quotas). The first
//                              gate that says no gives the job's pending reason, and later
//                              gates do not see the job; a gate that says yes counts it as
//                              admitted (a quota adds its GPUs to what the user uses).
//   Filter (AdmissionFilter) - node level: can this node take the job's tasks?
//                              (drains, software environments). A filter enforces itself
//                              through state every part of the pass sees: PreFilter
//                              narrows the nodes a job's tasks may use (Task::allowed_nodes)
//                              or says the job can never run; PrepareCluster takes
//                              resources out of use (a draining node's free share). Filter
//                              states the same verdict per node, with its reason, for the
//                              explain step (explain.h), which adds the reasons up.
//
// Every plugin gets the pass's context in BeginPass first. Plugins are created by name
// from registries (BuiltinGates(), BuiltinAdmissionFilters()) and run in the order a
// profile (profile.h) lists them. Not thread-safe: one instance serves one pass at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/admission/limits.h"
#include "sched/admission/project_access.h"
#include "sched/cluster_state.h"
#include "sched/framework.h"
#include "sched/queue/queued_job.h"
#include "sched/registry.h"

namespace gpupool::sched {

// Which nodes can run one software environment. The host decides: the controller checks
// each node's driver and libraries against an image's needs.
struct EnvironmentNodes {
  std::vector<std::string> nodes;  // sorted; empty = every node can
  std::string none;                // non-empty: no node can; why
};
using EnvironmentLookup = std::function<EnvironmentNodes(std::string_view environment)>;

// What one scheduling pass is given. Spans and pointers are the caller's and stay valid
// for the pass.
struct PassContext {
  int64_t now_s = 0;
  std::span<const QueuedJob* const> pending;  // in arrival order: gates admit in this order
  std::span<const RunningJob> running;        // allocated on the cluster the pass is given
  // Every job that holds resources (placed or running), for the gates' counts; may hold
  // jobs `running` lacks (one whose node is gone still counts until it is written off).
  std::span<const QueuedJob* const> occupying;
  const Limits* limits = nullptr;  // QuotaLimit, ProjectGate; null = no limits
  // ProjectGate: who may charge which project (project_access.h); kNone: anyone.
  ProjectEnforcement project_enforcement = ProjectEnforcement::kNone;
  std::span<const int32_t> draining;  // DrainFilter: cluster indices of draining nodes
  // DrainFilter: why each draining[i] is closed when not by a drain ("unknown", "health
  // check pending"); empty, or "" for one: "drained", or "draining" while a job runs there.
  std::span<const std::string> draining_why;
  EnvironmentLookup environments;  // EnvCompatFilter; empty = no node is constrained
  // EnforceMemoryFilter: the nodes (names, sorted) whose GPUs all hold a share to its
  // memory (enforcement mps, mig or dmem).
  std::span<const std::string> memory_enforced_nodes;
  // Plan the starts of the first this many admitted jobs that do not start now, in queue
  // order (ProfileResult::planned_starts, queue/start_plan.h); 0: none.
  size_t plan_starts = 0;
  // Resources held for some pending jobs, allocated on the cluster the pass is given
  // (SchedulingPass::Run; the live pool's preemptors, docs/preemption.md).
  std::span<const HeldResources> held;
};

class GatePlugin : public Plugin {
 public:
  virtual void BeginPass(const PassContext& /*ctx*/) {}
  // True: `job` may be tried in this pass, and the gate counts it as admitted. False:
  // `*why` says why it waits (its pending reason).
  virtual bool Admit(const QueuedJob& job, std::string* why) = 0;
};

struct PreFilterResult {
  std::string never;                    // non-empty: the job cannot run on any node; why
  std::vector<std::string> only_nodes;  // non-empty: its GPU tasks may use only these (sorted)
};

class AdmissionFilter : public FilterPlugin {
 public:
  virtual void BeginPass(const PassContext& /*ctx*/) {}
  // False: nothing to say about `job`. True: `*result` (cleared by the caller) says it
  // cannot run or narrows its nodes.
  virtual bool PreFilter(const QueuedJob& /*job*/, PreFilterResult* /*result*/) { return false; }
  virtual void PrepareCluster(ClusterState& /*cluster*/) const {}
  // Adds the nodes that take no new work this pass at all (cluster indices): what runs
  // there never comes free in a plan of the future (EASY's reservation, start estimates).
  virtual void AddClosedNodes(std::vector<int32_t>* /*closed*/) const {}
};

// Gates and filters take no configuration (what they need comes with each pass).
struct PluginConfig {};

template <>
struct RegistryTraits<GatePlugin> : RegistryNaming<PluginConfig, "admission gate", "known gates"> {
};
template <>
struct RegistryTraits<AdmissionFilter>
    : RegistryNaming<PluginConfig, "admission filter", "known filters"> {};

using GateRegistry = Registry<GatePlugin>;
using AdmissionFilterRegistry = Registry<AdmissionFilter>;

// The built-in gates (hold, dependency, earlier-attempt, array-throttle, project, quota) and
// filters (drain, enforce-memory, env-compat); immutable after first use, safe to share between
// threads.
const GateRegistry& BuiltinGates();
const AdmissionFilterRegistry& BuiltinAdmissionFilters();

}  // namespace gpupool::sched
