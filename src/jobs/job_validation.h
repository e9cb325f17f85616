// Grammars of the job fields that reach a command line (podman's, the job's environment):
// checked when a job is submitted and again by the agent before it builds a command, so
// that no value can be read as an option of another tool; and the submit-time checks of
// its request that a stored job need not pass (ValidateGpuShare). Each check returns
// InvalidArgument naming the field and what a valid value looks like.
#pragma once

#include <string>

#include "common/status.h"
#include "jobs/job.h"

namespace gpupool::jobs {

// An OCI image reference as podman and docker accept it: [DOMAIN[:PORT]/]PATH[:TAG][@DIGEST]
// (lower-case path components separated by '/', a tag of at most 128 word characters, '.'
// and '-', a digest ALGORITHM:HEX), or a bare image id (hex). Never starts with '-'.
Status ValidateImageRef(const std::string& ref, const std::string& field = "image");

// An environment variable name: a letter or '_' followed by letters, digits and '_'
// (POSIX's portable names), at most 255 characters.
Status ValidateEnvName(const std::string& name, const std::string& field = "env");

// A job's project (free text where the server does not enforce projects): at most
// kMaxProjectName bytes without control characters, as the limits' names, since it is
// printed in every view and kept per project in accounting and /metrics. Empty: none.
inline constexpr size_t kMaxProjectName = 64;
Status ValidateProjectName(const std::string& project, const std::string& field = "project");

// A submitted job's share of one GPU: gpu_memory_bytes 0 or at least this (1 MiB), and
// not together with a gpu_milli below 1000 (each sizes the share; give one).
inline constexpr uint64_t kMinGpuMemoryBytes = uint64_t{1} << 20;
Status ValidateGpuShare(const ResourceRequest& r);

// A submitted job's --nodelist and --exclude: at most this many names each (the CLI's
// hostlist expansion stops at the same count, kMaxHostListNames). A pool has far fewer
// nodes; a job stored by an earlier server (up to 65536 names) still loads, as this is
// checked at submit only.
inline constexpr size_t kMaxNodeNames = 4096;
Status ValidateNodeChoice(const ResourceRequest& r);

// A submitted job's CPU memory (request.memory_bytes) and container /dev/shm (shm_bytes):
// each 0 (the default: no explicit request; podman's 64 MiB) or at least this (1 MiB), as
// gpu_memory_bytes: a smaller size is a unit mistake (the fields count bytes).
inline constexpr uint64_t kMinMemoryBytes = uint64_t{1} << 20;
Status ValidateMemorySizes(const Job& job);

// Every field of a submitted job that a tool will see: image, variable names and values,
// working directory and mount paths, and its project; and its GPU share
// (ValidateGpuShare), memory sizes (ValidateMemorySizes) and node lists
// (ValidateNodeChoice). Called by the controller at
// submit.
Status ValidateSubmission(const Job& job);

}  // namespace gpupool::jobs
