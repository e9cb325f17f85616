// Environments: what a job's software needs from a node's GPU stack, worked out at
// submit time, and the registry of named environments (`gpupool env add NAME:VERSION`).
//
// A job names an image (`--image REF`) or a registered environment (`--env NAME:VERSION`,
// an image or a directory such as a conda env). Resolve() fills the job's EnvNeeds by
// inspecting the image (through the EnvInspector seam: podman on the controller's host
// in production, a table in tests); the scheduler then places the job only on nodes whose
// driver and GPUs can run it, and Submit refuses it when no node can. An image that is
// not in the controller host's local store cannot be inspected here: the job is accepted
// unchecked and the agent checks it just before launch.
//
// Named environments are immutable: a version, once added, always means the same image or
// directory and the same needs; new versions live beside old ones. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "jobs/job.h"
#include "store/store.h"

namespace gpupool::controller {

class EnvInspector {
 public:
  virtual ~EnvInspector() = default;
  // NotFound when the image is not available to inspect.
  virtual Result<jobs::EnvNeeds> InspectImage(const std::string& ref) = 0;
  virtual Result<jobs::EnvNeeds> InspectDir(const std::string& dir) = 0;
};

// Inspects images through podman (`podman [podman_args] image mount`), caching results by
// image id; a reference's id is looked up again after `ref_ttl_us`.
std::unique_ptr<EnvInspector> NewPodmanInspector(std::vector<std::string> podman_args,
                                                 const Clock* clock,
                                                 int64_t ref_ttl_us = 30'000'000);

// "torch:2.4" -> {"torch", "2.4"}; names and versions are 1-64 characters of letters,
// digits and . _ - (starting with a letter or digit). Errors name `field`.
Result<std::pair<std::string, std::string>> ParseEnvRef(const std::string& ref,
                                                        const std::string& field);

class Environments {
 public:
  // Reports the ids of active jobs that use environment "NAME:VERSION".
  using InUseFn = std::function<std::vector<int64_t>(const std::string& ref)>;

  // All pointers must outlive this object.
  Environments(store::Store* store, EnvInspector* inspector, const Clock* clock)
      : store_(store), inspector_(inspector), clock_(clock) {}

  // Inspects and registers NAME:VERSION as `kind` "image" (location = reference) or "dir"
  // (location = absolute directory).
  Result<store::EnvironmentRecord> Add(const std::string& ref, const std::string& kind,
                                       const std::string& location, const std::string& owner);
  Result<std::vector<store::EnvironmentRecord>> List();
  Result<store::EnvironmentRecord> Get(const std::string& ref);
  // Refused (FailedPrecondition, naming the jobs) while queued or running jobs use it;
  // PermissionDenied unless the caller registered it or is an admin.
  Status Remove(const std::string& ref, const std::string& user, bool admin, const InUseFn& in_use);

  // Before submit: checks the job's image / environment / mounts fields and fills
  // job->needs (and job->image or job->env_dir for a named environment).
  Status Resolve(jobs::Job* job);

  // The needs of an image, a directory or a named environment, for `env check`.
  Result<jobs::EnvNeeds> NeedsOf(const std::string& kind, const std::string& location);

 private:
  store::Store* store_;
  EnvInspector* inspector_;
  const Clock* clock_;
};

}  // namespace gpupool::controller
