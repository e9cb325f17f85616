// A batch job's output file (-o/--output, -e/--error; jobs/output_pattern.h), created by
// the shim as the job's user: the kernel checks the path with the user's ids (the shim
// switches its file-system ids, setfsuid, around the open), so a job writes only where
// its user may, and the file is its user's. A symbolic link in the last component is
// refused (O_NOFOLLOW), as is anything but a regular file of the user's with one link
// (a FIFO, another user's file, a hard link another user planted); such a file is not
// truncated. "/dev/null" is opened as it is. The shim is single-threaded; these
// functions change its file-system ids for the duration of one open.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

struct OutputUser {
  std::string user;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary, the primary included
};

// Opens (creates, or empties) `path` (absolute) for writing, appending; `keep` (a later
// attempt of a requeued or preempted job) appends to what is there instead of emptying
// it, so that the earlier attempts' output is kept. Returns a close-on-exec descriptor the caller
// owns; FailedPrecondition naming the path, the user and what to do.
Result<int> OpenOutputFile(const std::string& path, const OutputUser& who, bool keep = false);

}  // namespace gpupool::agent
