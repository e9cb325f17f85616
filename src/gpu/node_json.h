// The node JSON schema "gpupool.node/v1": what `gpupool gpus --json` prints and what the
// fake backend reads back, so a real node can be captured once and replayed anywhere
// (docs/node-schema.md describes every field).
//
// Contract: for every NodeInfo n that NodeFromJson accepts, NodeFromJson(NodeToJson(n))
// == n, and printing a re-read node gives byte-identical JSON. Unknown values (an index
// of -1, an empty string, an empty optional or list) are left out, never invented.
//
// NodeFromJson treats its input as hostile: wrong types, unknown fields, negative sizes,
// duplicate bus ids, indices, minor numbers or device nodes, dangling links, device paths
// outside /dev, oversized strings and more than kMaxGpusPerNode GPUs are errors that name
// the field's path ("gpus[3].pci_bus_id") and say what to fix. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

#include "common/json.h"
#include "common/status.h"
#include "gpu/gpu_info.h"

namespace gpupool::gpu {

inline constexpr std::string_view kNodeSchema = "gpupool.node/v1";

// Limits that keep a hostile file from exhausting memory or producing absurd output.
inline constexpr size_t kMaxGpusPerNode = 1024;
inline constexpr size_t kMaxStringBytes = 4096;                // names, ids, paths
inline constexpr size_t kMaxMessageBytes = size_t{64} * 1024;  // diagnostic messages
inline constexpr size_t kMaxListEntries = 1024;                // libraries, device nodes, ...

OrderedJson NodeToJson(const NodeInfo& node);

// `source` names the input in errors (a file name); errors read "source: path: problem".
// `reject_unknown` false ignores fields this version does not know (the agent protocol,
// where a newer agent may send more); files and user input keep it true.
Result<NodeInfo> NodeFromJson(const Json& json, std::string_view source,
                              bool reject_unknown = true);

// The rules across a node's GPUs that NodeFromJson applies: uuid, PCI bus id, index (per
// vendor), minor number (per vendor) and device nodes each belong to one GPU; links join
// two GPUs of the node, each pair once. The agent applies them to what discovery found,
// too: two GPUs on one device node would hand one device to two jobs.
Status CheckNode(const NodeInfo& node);

// What a node file says the machine offers jobs besides its GPUs, its optional
// `"host": {"cpus": 16, "memory_bytes": 68719476736}`: an agent replaying the file
// (--fake) offers these instead of the machine it runs on. 0 where the file says nothing.
// Not part of NodeInfo (discovery never fills it); NodeFromJson checks it the same way.
struct HostResources {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
};
Result<HostResources> HostResourcesFromJson(const Json& node, std::string_view source);

}  // namespace gpupool::gpu
