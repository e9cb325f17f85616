// Registers the built-in gates and admission filters (gates.h, filters.h).
#include <cstdlib>

#include "sched/admission/admission.h"
#include "sched/admission/filters.h"
#include "sched/admission/gates.h"

namespace gpupool::sched {
namespace {

void Must(const Status& s) {
  if (!s.ok()) std::abort();  // duplicate built-in names are a programming error
}

template <typename T, typename Base>
typename Registry<Base>::Factory Make() {
  return [](const PluginConfig&) -> std::unique_ptr<Base> { return std::make_unique<T>(); };
}

}  // namespace

const GateRegistry& BuiltinGates() {
  static const GateRegistry kRegistry = [] {
    GateRegistry r;
    Must(r.Register("hold", "a held job waits until released", Make<HoldGate, GatePlugin>()));
    Must(r.Register("dependency", "a job waits for the jobs it depends on",
                    Make<DependencyGate, GatePlugin>()));
    Must(r.Register("earlier-attempt",
                    "a requeued job waits while a node still stops its earlier attempt",
                    Make<EarlierAttemptGate, GatePlugin>()));
    Must(r.Register("array-throttle", "at most N elements of an array run at once (--array ...%N)",
                    Make<ArrayThrottle, GatePlugin>()));
    Must(r.Register("project",
                    "under enforce-projects, a job waits while its user may not "
                    "charge its project",
                    Make<ProjectGate, GatePlugin>()));
    Must(r.Register("quota", "users and projects stay within their limits (`gpupool limits`)",
                    Make<QuotaLimit, GatePlugin>()));
    return r;
  }();
  return kRegistry;
}

const AdmissionFilterRegistry& BuiltinAdmissionFilters() {
  static const AdmissionFilterRegistry kRegistry = [] {
    AdmissionFilterRegistry r;
    Must(r.Register("drain", "nothing new is placed on a draining node",
                    Make<DrainFilter, AdmissionFilter>()));
    Must(r.Register("enforce-memory",
                    "shares of --enforce memory jobs go only to GPUs that enforce memory",
                    Make<EnforceMemoryFilter, AdmissionFilter>()));
    Must(r.Register("env-compat", "GPU tasks go only to nodes that can run their environment",
                    Make<EnvCompatFilter, AdmissionFilter>()));
    return r;
  }();
  return kRegistry;
}

}  // namespace gpupool::sched
