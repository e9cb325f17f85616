// Whole-file reads and atomic writes. Errors name the path.
#pragma once

#include <string>

#include "common/status.h"

namespace gpupool {

// Reads a whole file; refuses files larger than `max_bytes`.
Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes = 64u << 20);

// Writes via a temporary file and rename, so readers never see half a file.
Status WriteFileAtomically(const std::string& path, const std::string& contents);

// The absolute path of `relative` (e.g. "examples/nodes") among gpupool's own files: beside
// the running binary's source tree (build/KIND/gpupool -> ../../), its prefix
// (../share/gpupool/) or /usr/share/gpupool/. "" when none has it.
std::string FindGpupoolData(const std::string& relative);

}  // namespace gpupool
