// The createContainer hook of gpupool's CDI specs (`gpupool cdi-hook`, docs/containers.md).
//
// The spec bind-mounts the driver's versioned libraries (libcuda.so.550.54.15), but
// programs load them by SONAME (libcuda.so.1) through the image's linker cache. The
// runtime runs this hook after the container's mounts are made and before it starts: it
// links each library's SONAME beside it and updates the container's linker cache with
// the host's ldconfig, chrooted into the container.
//
// The hook runs as root in the runtime's mount namespace, on a root file system the
// image's author controls: every path inside it is resolved inside it (openat2 with
// RESOLVE_IN_ROOT), so an image's symbolic link cannot point the hook at a host file;
// ldconfig runs with -r, which chroots before reading anything. The runtime's state
// (stdin) is read as untrusted input: errors, never crashes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::agent {

struct CdiHookOptions {
  // Paths inside the container of the libraries the spec mounted (absolute).
  std::vector<std::string> libraries;
  // The host's ldconfig; empty: the first of /sbin/ldconfig.real (Ubuntu's, under a
  // wrapper script), /sbin/ldconfig and /usr/sbin/ldconfig that exists.
  std::string ldconfig;
};

// The container's root file system, from the OCI state a runtime passes to a hook on its
// standard input: {"bundle": DIR, ...}, whose DIR/config.json names root.path (relative
// paths are relative to the bundle). Canonical and a directory. InvalidArgument for a
// malformed state or config; NotFound when a file or the root is missing;
// FailedPrecondition when the root is the host's own "/".
Result<std::string> ContainerRootFromState(std::string_view state_json);

// Links the SONAME of each library under `root` (libcuda.so.1 -> libcuda.so.550.54.15,
// replacing a link or file of that name the image has), records the libraries'
// directories in ROOT/etc/ld.so.conf.d/00-gpupool-cdi.conf and runs `ldconfig -r ROOT`.
// Returns notes on what was skipped (a library that is not ELF, an image without /etc:
// nothing dynamic to configure). InvalidArgument for a library path that is not absolute;
// Unavailable when no ldconfig exists or it fails; NotFound when the root is missing.
Result<std::vector<std::string>> UpdateContainerLinker(const std::string& root,
                                                       const CdiHookOptions& options);

}  // namespace gpupool::agent
