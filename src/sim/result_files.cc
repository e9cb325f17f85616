#include "sim/result_files.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "common/file_util.h"

namespace gpupool::sim {
namespace {

std::string Header(bool with_total) {
  std::string h = "workload,sc_policy,tune,seed";
  if (with_total) h += ",total_gpus";
  for (int k = 0; k < kCurvePoints; ++k) h += fmt::format(",{}", k);
  return h + "\n";
}

void AppendRow(std::string* out, const std::string& prefix,
               const std::array<double, kCurvePoints>& values) {
  *out += prefix;
  for (double v : values) {
    out->push_back(',');
    out->append(FormatCurveValue(v));
  }
  *out += "\n";
}

}  // namespace

ResultFileContents FormatResultFiles(const std::string& workload, double tune, int64_t total_gpus,
                                     const std::vector<SaturationResult>& results) {
  ResultFileContents c{Header(true), Header(false), Header(false)};
  for (const auto& r : results) {
    const std::string prefix =
        fmt::format("{},{},{},{}", workload, PublishedPolicyLabel(r.policy), tune, r.seed);
    AppendRow(&c.allo, fmt::format("{},{}", prefix, total_gpus), r.curves.alloc);
    AppendRow(&c.frag, prefix, r.curves.frag);
    AppendRow(&c.frag_ratio, prefix, r.curves.frag_ratio);
  }
  return c;
}

Status WriteResultFiles(const std::string& dir, const ResultFileContents& c) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Status::Unavailable(
        fmt::format("cannot create output directory '{}': {}; check the path", dir, ec.message()));
  }
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/allo.csv", c.allo));
  GP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/frag.csv", c.frag));
  return WriteFileAtomically(dir + "/frag_ratio.csv", c.frag_ratio);
}

}  // namespace gpupool::sim
