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

// Slurm gres.conf lines: Name=gpu Type=<model> File=<node> [Cores=<cpus>] [Links=<counts>].
std::string ExportGres(const NodeInfo& node);

struct CdiOptions {
  // Which vendor's GPUs to describe; unset picks the one present (an error if both are).
  std::optional<Vendor> vendor;
  // Where the host's device nodes live: hostPath = host_dev_root + the path after "/dev".
  std::string host_dev_root = "/dev";
  // The spec's kind, "VENDOR/CLASS" (e.g. "gpupool.local/gpu"); empty = the vendor's
  // own (nvidia.com/gpu, amd.com/gpu). A kind of its own keeps gpupool's spec apart from
  // one the vendor's toolkit writes.
  std::string kind;
};

// A CDI spec (JSON, cdiVersion 0.5.0) of kind options.kind, by default nvidia.com/gpu or
// amd.com/gpu (InvalidArgument when options.kind is not a valid CDI kind): one device
// per GPU by index and by UUID, MIG devices as "<gpu>:<mig>" and by MIG UUID, and "all".
Result<std::string> ExportCdi(const NodeInfo& node, const CdiOptions& options);

// Options of every format, for callers that pick the format by name.
struct ExportOptions {
  bool classad_legacy = false;
  CdiOptions cdi;
};

// Runs the exporter named `format` ("table", "json", "classad", "gres", "cdi").
Result<std::string> ExportNode(const NodeInfo& node, std::string_view format,
                               const ExportOptions& options);
std::vector<std::string> ExportFormatNames();

// Slurm's GPU Type for a device name: "NVIDIA H100 80GB HBM3" -> "h100",
// "AMD Instinct MI250X" -> "mi250x". Empty when nothing usable is left.
std::string GresTypeName(std::string_view device_name);

}  // namespace gpupool::gpu
