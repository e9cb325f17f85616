// Tree digest: a tamper-evident fingerprint of a directory tree's metadata, so that a
// registered directory environment can be refused once it has changed under its users.
//
// The digest is SHA-256 over every entry's relative path, type, mode, owner, group, size,
// inode and change time (st_ctim), plus each symlink's target. The change time is set by
// the kernel on every write, chmod, chown, rename and link and cannot be set back by a
// non-root owner (unlike the modification time), so an owner cannot edit a file and make
// the digest match again. Contents are not read: the walk costs one stat per entry.
//
// The walk never follows symlinks below the root, is bounded in entries, depth and time,
// and fails (never skips) when part of the tree cannot be read, so two digests of one
// tree taken by users who can both read all of it agree.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpupool::envcheck {

struct WalkLimits {
  uint64_t max_entries = 200'000;
  int max_depth = 128;
  int64_t deadline_ms = 0;  // on the steady clock (SteadyMillis); 0 = none
};

// Now on the steady clock, in ms since its epoch: the clock of deadline_ms.
int64_t SteadyMillis();

struct TreeDigest {
  std::string digest;    // "sha256:" + 64 hex digits
  uint64_t entries = 0;  // entries below the root
};

// NotFound when `root` does not exist; PermissionDenied ("... is not readable by `who`")
// when it or a directory below it cannot be read; ResourceExhausted past a limit;
// InvalidArgument when `root` is not a directory. `who` names the reader in messages,
// e.g. "user bob".
Result<TreeDigest> DigestTree(const std::string& root, const WalkLimits& limits,
                              const std::string& who);

}  // namespace gpupool::envcheck
