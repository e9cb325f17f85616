// Container mount sources, opened as the job's user and mounted as opened.
//
// The shim runs podman as root, and podman (runc) resolves a bind mount's source path
// itself, following symbolic links. Checking the path as the user first is not enough:
// between the check and the mount the user can swap a component for a link to a file
// of root's (issue 25: /etc/shadow was mounted in 4 of 8 containers). So the shim
//   1. opens each source as the user (the kernel resolves the path, links included, with
//      the user's ids) and checks the user's access on the descriptor it got
//      (OpenMountSource), then
//   2. bind-mounts that descriptor onto a private path under the job's directory, which
//      only root can change (StagedMounts), and gives podman that path.
// What the container gets is the object the user was checked against, whatever they
// rename later. (Giving podman /proc/<shim pid>/fd/N instead does not work: runc mounts
// from a new mount namespace, and the kernel refuses a bind mount of a descriptor from
// another one with EINVAL.)
//
// Functions are not thread-safe with respect to fork: the shim is single-threaded.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

// Whose access a mount source is checked with.
struct MountUser {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, the primary included
};

// Opens `path` (absolute) for a bind mount as `who`: in a forked child with the user's
// ids when the caller is root, in this process otherwise. Symbolic links are followed,
// with the user's ids, so a link leads only where the user may go. The object must then
// be readable by the user (and enterable, for a directory; and writable, with `write`).
// Returns a close-on-exec O_PATH descriptor the caller owns. FailedPrecondition naming
// the path, the user and what to do.
Result<int> OpenMountSource(const std::string& path, const MountUser& who, bool write);

// Bind mounts of opened sources onto `dir`/0, `dir`/1, ... (`dir` created 0700; it must
// lie in a directory only root can change). Needs CAP_SYS_ADMIN. Clear() lazily unmounts
// and removes what is there, leftovers of an earlier shim included; never recursively,
// so a path still mounted is left alone rather than emptied. The destructor clears.
class StagedMounts {
 public:
  explicit StagedMounts(std::string dir) : dir_(std::move(dir)) {}
  ~StagedMounts() { (void)Clear(); }
  StagedMounts(const StagedMounts&) = delete;
  StagedMounts& operator=(const StagedMounts&) = delete;

  // Mounts the object `fd` refers to (recursively, as podman's bind mounts are) and
  // returns the path to give podman.
  Result<std::string> Add(int fd);
  Status Clear();

 private:
  std::string dir_;
  int next_ = 0;
};

}  // namespace gpupool::agent
