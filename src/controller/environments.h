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
// directory and the same needs; new versions live beside old ones. An image environment
// runs the image id recorded when it was added (re-tagging the reference changes
// nothing); a directory environment records a digest of its tree (envcheck/tree_digest.h)
// and is refused once the tree has changed. A NAME belongs to whoever added its first
// version; names with a '/' ("site/torch") are protected: only admins add them.
// Directories are read in a child process with the caller's permissions, bounded in
// files, bytes and time (envcheck/dir_walk.h). Thread-safe.
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
#include "controller/controller.h"
#include "jobs/job.h"
#include "store/store.h"

namespace gpupool::controller {

// Whose permissions a directory is read with: the API's caller.
struct DirReader {
  std::string user;  // names the reader in messages ("not readable by user bob")
  uint32_t uid = 0;
  uint32_t gid = 0;      // primary group; supplementary groups come from the group database
  bool as_root = false;  // root and admin callers read with the server's own permissions
  static DirReader For(const Caller& caller) {
    return {caller.user, caller.uid, caller.gid, caller.uid == 0 || caller.admin};
  }
};

struct DirInspection {
  jobs::EnvNeeds needs;
  std::string digest;  // of the tree's metadata, "sha256:..." (envcheck/tree_digest.h)
};

// How images and directories are inspected; production: NewPodmanInspector, tests: a table.
class EnvInspector {
 public:
  virtual ~EnvInspector() = default;
  // NotFound when the image is not available to inspect.
  virtual Result<jobs::EnvNeeds> InspectImage(const std::string& ref) = 0;
  // The image's full id in the local store; NotFound when it is not there.
  virtual Result<std::string> ImageId(const std::string& ref) = 0;
  // What `dir` needs, and its digest, read with `reader`'s permissions. NotFound when it
  // does not exist, PermissionDenied when the reader cannot read all of it,
  // ResourceExhausted past the file, byte or time limit, Unavailable when stopped.
  virtual Result<DirInspection> InspectDir(const std::string& dir, const DirReader& reader) = 0;
  // The digest of `dir` now, read with the server's permissions (metadata only, nothing
  // is reported but the digest); errors as InspectDir.
  virtual Result<std::string> DigestDir(const std::string& dir) = 0;
  // Stops the inspections under way (they fail with Unavailable) and refuses new ones;
  // for server shutdown. Idempotent.
  virtual void Stop() {}
};

// Bounds on one directory inspection (each runs as `self_exe env walk`).
struct DirInspectLimits {
  uint64_t max_files = 200'000;                   // entries of the tree
  uint64_t max_file_bytes = uint64_t{2} << 30;    // larger files are skipped with a warning
  uint64_t max_total_bytes = uint64_t{16} << 30;  // read in all
  int64_t timeout_ms = 20'000;
  std::string self_exe = "/proc/self/exe";  // a gpupool binary (`env walk`)
};

// Inspects images through podman (`podman [podman_args] image mount`), caching results by
// image id; a reference's id is looked up again after `ref_ttl_us`. Directories are read
// by a child process as the reader (the server must be root to switch users; one that is
// not reads with its own permissions), within `limits`.
std::unique_ptr<EnvInspector> NewPodmanInspector(std::vector<std::string> podman_args,
                                                 const Clock* clock,
                                                 int64_t ref_ttl_us = 30'000'000,
                                                 DirInspectLimits limits = {});

// "torch:2.4" -> {"torch", "2.4"}, "site/torch:2.4" -> {"site/torch", "2.4"}; names and
// versions are 1-64 characters of letters, digits and . _ - (starting with a letter or
// digit), and a name may carry one "PREFIX/" of the same kind: a protected name that only
// admins may register. Errors name `field`.
Result<std::pair<std::string, std::string>> ParseEnvRef(const std::string& ref,
                                                        const std::string& field);

class Environments {
 public:
  // Reports the ids of active jobs that use environment "NAME:VERSION".
  using InUseFn = std::function<std::vector<int64_t>(const std::string& ref)>;

  // All pointers must outlive this object.
  Environments(store::Store* store, EnvInspector* inspector, const Clock* clock)
      : store_(store), inspector_(inspector), clock_(clock) {}

  // Inspects and registers NAME:VERSION for `caller` as `kind` "image" (location =
  // reference; its id is recorded) or "dir" (location = absolute directory, read with the
  // caller's permissions; its digest is recorded). PermissionDenied when NAME belongs to
  // another user or is protected and the caller is no admin; AlreadyExists when the
  // version exists; the inspection's errors (NotFound, PermissionDenied, ...) otherwise.
  Result<store::EnvironmentRecord> Add(const std::string& ref, const std::string& kind,
                                       const std::string& location, const Caller& caller);
  Result<std::vector<store::EnvironmentRecord>> List();
  Result<store::EnvironmentRecord> Get(const std::string& ref);
  // Refused (FailedPrecondition, naming the jobs) while queued or running jobs use it;
  // PermissionDenied unless the caller registered it or is an admin.
  Status Remove(const std::string& ref, const std::string& user, bool admin, const InUseFn& in_use);

  // Before submit: checks the job's image / environment / mounts fields and fills
  // job->needs (and job->image, the recorded image id, or job->env_dir for a named
  // environment). FailedPrecondition when a directory environment changed since it was
  // added (or predates digests), naming its owner.
  Status Resolve(jobs::Job* job);

  // Stops the inspections under way and refuses new ones (EnvInspector::Stop).
  void Stop() { inspector_->Stop(); }

  // The needs of an image, a directory (read as `caller`) or a named environment, for
  // `env check`.
  Result<jobs::EnvNeeds> NeedsOf(const std::string& kind, const std::string& location,
                                 const Caller& caller);

 private:
  // PermissionDenied unless `caller` may add versions of `name`.
  Status CheckNameOwner(const std::string& name, const std::string& ref, const Caller& caller);

  store::Store* store_;
  EnvInspector* inspector_;
  const Clock* clock_;
  std::mutex add_mu_;  // the ownership check and the insert of one Add
};

}  // namespace gpupool::controller
