// Stand-in driver libraries for fake nodes: tiny ELF shared objects that carry only a
// SONAME, so a container on a node described by a file (`--fake node.json`) finds the
// driver the way it would on a real node: the CDI hook links libcuda.so.1 to them,
// ldconfig lists them and dlopen("libcuda.so.1") loads one. They export no symbols, so a
// program that looks up cuInit finds none (as on a machine without a GPU).
//
// Made for the build's own architecture (x86_64 or aarch64, little-endian ELF64), since
// they are loaded by programs on this machine. Pure functions except WriteStandInLibrary.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::gpu {

// The bytes of an ELF shared object whose DT_SONAME is `soname`. InvalidArgument when
// the soname is empty, contains '/' or NUL, or is longer than 255 bytes; Unimplemented on
// an architecture other than x86_64 and aarch64.
Result<std::string> StandInLibrary(std::string_view soname);

// The SONAME a driver library named `file_name` would carry: NVIDIA's versioned
// libraries (libcuda.so.550.54.15) carry libX.so.1 (libnvidia-nvvm.so.4); any other
// libX.so.MAJOR[.MINOR...] carries libX.so.MAJOR. A name without ".so." is its own.
std::string StandInSoname(std::string_view file_name);

// Writes StandInLibrary(StandInSoname(basename)) to `path` (mode 0644), creating its
// parent directories. Errors name the path.
Status WriteStandInLibrary(const std::string& path);

}  // namespace gpupool::gpu
