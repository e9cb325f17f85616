// Dir walk: the bounded inspection of a directory that the server runs in a child process
// with the caller's permissions (`gpupool env walk`, hidden), never in its own. The child
// works out the tree's digest (tree_digest.h) and, unless only the digest is asked for,
// what the tree needs from the GPU stack; it is bounded in files, bytes and time and is
// killed when its time is up or the caller cancels. One codec for both sides: the
// request travels as flags, the answer as one JSON object on standard output.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/subprocess.h"
#include "jobs/job.h"

namespace gpupool::envcheck {

struct DirWalkRequest {
  std::string dir;                              // absolute
  std::string who = "root";                     // names the reader in messages: "user bob"
  uint64_t max_files = 200'000;                 // entries of the tree
  uint64_t max_file_bytes = uint64_t{2} << 30;  // larger files are skipped (a warning)
  uint64_t max_total_bytes = uint64_t{16} << 30;
  int64_t timeout_ms = 20'000;
  bool digest_only = false;
};

struct DirWalkAnswer {
  std::string digest;  // "sha256:..."
  uint64_t entries = 0;
  jobs::EnvNeeds needs;  // empty when digest_only
};

// The child's arguments after the program: {"env", "walk", DIR, --flags...}.
std::vector<std::string> DirWalkArgs(const DirWalkRequest& request);

// The child's work: the answer, or the error as an answer, as one line of JSON.
std::string RunDirWalk(const DirWalkRequest& request);

// The parent's side: runs `self_exe env walk ...` as `run_as` (nullopt: as this process)
// and returns its answer. The error the child found (PermissionDenied, NotFound,
// ResourceExhausted...) comes back as it was; ResourceExhausted when it outlasts its time
// (it is killed); Unavailable when `cancelled` stopped it or it could not run.
Result<DirWalkAnswer> WalkDirInChild(const std::string& self_exe, const DirWalkRequest& request,
                                     const std::optional<SpawnOptions::RunAs>& run_as,
                                     const std::function<bool()>& cancelled);

// Parses the child's answer (for tests and WalkDirInChild).
Result<DirWalkAnswer> ParseDirWalkAnswer(const std::string& text);

}  // namespace gpupool::envcheck
