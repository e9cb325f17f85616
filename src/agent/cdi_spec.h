// The node's CDI spec as the agent writes it (docs/containers.md, "The CDI spec"):
// gpu::ExportCdi's spec completed with what only this host can say: the driver's tools
// and firmware, the NVIDIA unified-memory nodes CUDA needs, the gpupool binary as the
// spec's hook, and for a fake node stand-in driver libraries so its container jobs start.
//
// These functions read and change the machine (files under the given roots); not
// thread-safe against each other on the same roots.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "gpu/export/exporters.h"
#include "gpu/gpu_info.h"

namespace gpupool::agent {

struct CdiSpecOptions {
  std::string kind = "gpupool.local/gpu";  // the spec's kind (VENDOR/CLASS)
  std::string dev_root = "/dev";           // where the host's device nodes are
  std::string cdi_dir = "/var/run/cdi";    // where podman reads specs
  std::string hook_path;  // the gpupool binary, run as the spec's hook; empty: no hook
  // The node comes from a file (--fake), not from this machine's driver: no tools or
  // firmware are looked for, and when the driver libraries it lists are not all on this
  // host, stand-ins with their SONAMEs (gpu/fake/stand_in_library.h) are written under
  // stand_in_root and mounted instead.
  bool fake_node = false;
  std::string stand_in_root;
  std::string host_root = "/";  // where tools, firmware and /proc are looked for (tests)
};

// The NVIDIA driver's files, besides its libraries, that containers need and NVIDIA's own
// spec mounts, as paths on a host whose root is `host_root`: nvidia-smi, nvidia-debugdump,
// nvidia-persistenced and the MPS control and server (the first of /usr/bin, /usr/sbin,
// /bin, /sbin that has each), and the GSP firmware of driver `version`
// (/lib/firmware/nvidia/<version>/gsp*.bin). Only files that exist; sorted.
std::vector<std::string> FindNvidiaDriverFiles(const std::string& version,
                                               const std::string& host_root = "/");

// /dev/nvidia-uvm and /dev/nvidia-uvm-tools appear only when the nvidia-uvm module is
// loaded, usually by the first CUDA program on the host. When they are missing under
// `dev_root` and HOST_ROOT/proc/devices has the module's major number, creates them
// (character devices, minors 0 and 1, mode 0666, as nvidia-modprobe does); otherwise
// runs nvidia-modprobe -u -c=0 when it is installed. Returns what was done or why not.
std::vector<std::string> EnsureNvidiaUvmNodes(const std::string& dev_root,
                                              const std::string& host_root = "/");

// ExportCdi's options for `node` on this host (see CdiSpecOptions): writes stand-in
// libraries for a fake node, creates missing unified-memory nodes for a real NVIDIA node
// (adding them to `node`'s control nodes), finds the driver's files. `notes` (may be
// null) gets what was done. Errors: writing a stand-in failed.
Result<gpu::CdiOptions> HostCdiOptions(gpu::NodeInfo* node, const CdiSpecOptions& options,
                                       std::vector<std::string>* notes = nullptr);

// Where the spec of `kind` is written: CDI_DIR/gpupool-<kind with '/' and other
// characters outside [A-Za-z0-9._-] as '_'>.json.
std::string CdiSpecPath(const std::string& cdi_dir, const std::string& kind);

// Writes the CDI spec of `node`'s GPUs (HostCdiOptions + gpu::ExportCdi) atomically to
// CdiSpecPath and returns that path. FailedPrecondition when a device node or a file the
// spec would mount does not exist (podman refuses such a spec, or the container fails to
// start with a misleading error); Unavailable when the directory cannot be written (the
// agent is not root); ExportCdi's errors.
Result<std::string> WriteNodeCdiSpec(const gpu::NodeInfo& node, const CdiSpecOptions& options,
                                     std::vector<std::string>* notes = nullptr);

}  // namespace gpupool::agent
