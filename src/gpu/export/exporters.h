// Exporters: pure functions that turn one node's NodeInfo into the text other tools read:
// a readable table, the node JSON, HTCondor ClassAd attributes (condor_gpu_discovery
// style), Slurm gres.conf lines and a Container Device Interface (CDI) spec.
//
// Each format lives in its own file (table_export.cc, classad_export.cc, ...); this
// header is the whole interface. The exporters read only NodeInfo, never the machine,
// so golden tests pin their output byte for byte. Thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "gpu/cpu_topology.h"
#include "gpu/gpu_info.h"

namespace gpupool::gpu {

// A table like nvidia-smi's: one row per GPU, driver lines, MIG devices, a topology
// matrix when links are known, and the diagnostics. Says so plainly when there are no GPUs.
std::string ExportTable(const NodeInfo& node);

// The node JSON (schema gpupool.node/v1), indented, with a trailing newline.
std::string ExportJson(const NodeInfo& node);

// HTCondor machine ClassAd attributes. Nested (default): DetectedGPUs="GPU-xxxxxxxx, ...",
// a Common=[ ... ] ad with what all GPUs share and one GPU_xxxxxxxx=[ id="GPU-xxxxxxxx"; ...
// ] ad per GPU. Legacy: the flat CUDA0/CUDACapability=... form of older HTCondor.
std::string ExportClassAd(const NodeInfo& node, bool legacy);

struct GresOptions {
  // NodeName= of every line and of the slurm.conf comment; empty means the node's short
  // host name (up to the first '.').
  std::string node_name;
  // The node's CPUs, to write Cores= in Slurm's core numbering (gpu/cpu_topology.h).
  // Unset: Cores= is left out, with a comment saying why, since kernel CPU ids are not
  // Slurm core ids.
  std::optional<CpuTopology> cpu_topology;
};

// Slurm gres.conf for one node, to paste as is: a comment with the slurm.conf lines it
// needs (GresTypes=gpu, NodeName=<node> [layout] Gres=gpu:<type>:<count>,...), then
// NodeName=<node> Name=gpu Type=<type> File=<node> [Cores=<slurm cores>] [Links=<counts>]
// per GPU, or per MIG device with MultipleFiles=. Types are what Slurm's AutoDetect
// names (GresTypeName). InvalidArgument when the node name is not a valid Slurm node
// name (or there is none).
Result<std::string> ExportGres(const NodeInfo& node, const GresOptions& options);

struct CdiOptions {
  // Which vendor's GPUs to describe; unset picks the one present (an error if both are).
  std::optional<Vendor> vendor;
  // Where the host's device nodes live: hostPath = host_dev_root + the path after "/dev".
  std::string host_dev_root = "/dev";
  // The spec's kind, "VENDOR/CLASS" (e.g. "gpupool.local/gpu"); empty = the vendor's
  // own (nvidia.com/gpu, amd.com/gpu). A kind of its own keeps gpupool's spec apart from
  // one the vendor's toolkit writes.
  std::string kind;
  // The driver's files beyond its libraries that containers need, found on the host by
  // the caller (agent/cdi_spec.h): nvidia-smi and the other tools, the GSP firmware.
  // Mounted read-only at the same path; paths that are not absolute are left out.
  std::vector<std::string> driver_files;
  // Where the driver's files are on the host: hostPath = host_file_root + path, for the
  // libraries and driver_files. Empty: at their own paths. A fake node's stand-in
  // libraries live under a root of their own.
  std::string host_file_root;
  // The gpupool binary (absolute), which the runtime runs as the spec's createContainer
  // hook `gpupool cdi-hook`: it links each mounted library's SONAME (libcuda.so.1) and
  // updates the container's linker cache. Empty: no hook, and stock images do not find
  // the mounted libraries by SONAME.
  std::string hook_path;
};

// A CDI spec (JSON, cdiVersion 0.5.0) of kind options.kind, by default nvidia.com/gpu or
// amd.com/gpu (InvalidArgument when options.kind is not a valid CDI kind, or hook_path is
// not absolute): one device per GPU by index and by UUID, MIG devices as "<gpu>:<mig>"
// and by MIG UUID, and "all". NVIDIA specs mount the driver's libraries and files and
// run the hook; AMD specs give device nodes only (ROCm's user space comes with the image).
Result<std::string> ExportCdi(const NodeInfo& node, const CdiOptions& options);

// Options of every format, for callers that pick the format by name.
struct ExportOptions {
  bool classad_legacy = false;
  GresOptions gres;
  CdiOptions cdi;
};

// Runs the exporter named `format` ("table", "json", "classad", "gres", "cdi").
Result<std::string> ExportNode(const NodeInfo& node, std::string_view format,
                               const ExportOptions& options);
std::vector<std::string> ExportFormatNames();

// Slurm's GPU Type for a GPU (for a MIG device: of its parent GPU, with `mig` set).
// An NVIDIA GPU that NVML named gets the Type Slurm's AutoDetect=nvml gives it: the
// name lower-cased with spaces as '_' ("NVIDIA H100 80GB HBM3" ->
// "nvidia_h100_80gb_hbm3"); a MIG device the parent's name up to its first '-' plus
// "_<profile>" ("NVIDIA A100-SXM4-40GB", 1g.5gb -> "nvidia_a100_1g.5gb"). Other GPUs
// get GresShortTypeName. Characters Slurm's files cannot carry are dropped.
std::string GresTypeName(const GpuInfo& gpu, const MigDevice* mig = nullptr);

// The short model name: "NVIDIA H100 80GB HBM3" -> "h100", "AMD Instinct MI250X" ->
// "mi250x". Empty when nothing usable is left.
std::string GresShortTypeName(std::string_view device_name);

}  // namespace gpupool::gpu
