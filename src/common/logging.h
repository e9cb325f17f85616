// Logging: a thin setup layer over spdlog. Code logs with spdlog::info(...) and friends;
// this file only decides where logs go and how verbose they are. Thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "common/status.h"

namespace gpupool {

// Sends logs to stderr with a compact pattern. `level` is one of trace, debug, info,
// warn, error, off. An unknown level is an InvalidArgument naming the accepted ones.
Status InitLogging(std::string_view level);

}  // namespace gpupool
