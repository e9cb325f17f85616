// `--json` / `--format json`: the node JSON that the fake backend reads back.
#include "common/json.h"
#include "gpu/export/exporters.h"
#include "gpu/node_json.h"

namespace gpupool::gpu {

std::string ExportJson(const NodeInfo& node) { return DumpJson(NodeToJson(node), 2) + "\n"; }

}  // namespace gpupool::gpu
