// What a process knows about its host and itself: the host's name and the path of the
// running executable. Plain functions; thread-safe.
#pragma once

#include <string>

namespace gpupool {

// gethostname(2), or "localhost" when it fails.
std::string HostName();

// The running executable's path (/proc/self/exe), or "gpupool" when it cannot be read.
std::string SelfExePath();

}  // namespace gpupool
