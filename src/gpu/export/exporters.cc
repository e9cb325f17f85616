// The exporters by name, for `gpupool gpus --format NAME` and the golden tests.
#include "gpu/export/exporters.h"

#include <functional>
#include <map>

namespace gpupool::gpu {
namespace {

using Exporter = std::function<Result<std::string>(const NodeInfo&, const ExportOptions&)>;

const std::map<std::string, Exporter, std::less<>>& Registry() {
  static const auto* const kRegistry = new std::map<std::string, Exporter, std::less<>>{
      {"table", [](const NodeInfo& n, const ExportOptions&) { return Result(ExportTable(n)); }},
      {"json", [](const NodeInfo& n, const ExportOptions&) { return Result(ExportJson(n)); }},
      {"classad",
       [](const NodeInfo& n, const ExportOptions& o) {
         return Result(ExportClassAd(n, o.classad_legacy));
       }},
      {"gres", [](const NodeInfo& n, const ExportOptions& o) { return ExportGres(n, o.gres); }},
      {"cdi", [](const NodeInfo& n, const ExportOptions& o) { return ExportCdi(n, o.cdi); }},
  };
  return *kRegistry;
}

}  // namespace

Result<std::string> ExportNode(const NodeInfo& node, std::string_view format,
                               const ExportOptions& options) {
  auto it = Registry().find(format);
  if (it == Registry().end()) {
    std::string known;
    for (const std::string& name : ExportFormatNames()) known += (known.empty() ? "" : ", ") + name;
    return Status::InvalidArgument("unknown output format '" + std::string(format) +
                                   "': use one of " + known);
  }
  return it->second(node, options);
}

std::vector<std::string> ExportFormatNames() { return {"table", "json", "classad", "gres", "cdi"}; }

}  // namespace gpupool::gpu
