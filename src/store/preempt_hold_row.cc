#include "store/preempt_hold_row.h"

#include "common/json.h"

namespace gpupool::store::internal {

std::string EncodeHoldPlacement(const std::vector<jobs::TaskPlacement>& placement) {
  Json out = Json::array();
  for (const jobs::TaskPlacement& p : placement) {
    out.push_back({{"node", p.node},
                   {"gpu_indices", p.gpu_indices},
                   {"gpu_uuids", p.gpu_uuids},
                   {"gpu_milli", p.gpu_milli}});
  }
  return DumpJson(out);
}

Result<std::vector<jobs::TaskPlacement>> DecodeHoldPlacement(std::string_view text,
                                                             int64_t preemptor) {
  const std::string what = "the stored hold of job " + std::to_string(preemptor);
  GP_ASSIGN_OR_RETURN(Json j, ParseJson(text, what));
  const Status bad = Status::InvalidArgument(what + ": not a placement: " + std::string(text));
  if (!j.is_array()) return bad;
  std::vector<jobs::TaskPlacement> out;
  for (const Json& e : j) {
    if (!e.is_object()) return bad;
    auto node = e.find("node");
    auto indices = e.find("gpu_indices");
    auto uuids = e.find("gpu_uuids");
    auto milli = e.find("gpu_milli");
    if (node == e.end() || !node->is_string() || indices == e.end() || !indices->is_array() ||
        uuids == e.end() || !uuids->is_array() || milli == e.end() || !milli->is_number_integer()) {
      return bad;
    }
    jobs::TaskPlacement p;
    p.node = node->get<std::string>();
    for (const Json& i : *indices) {
      if (!i.is_number_integer()) return bad;
      p.gpu_indices.push_back(i.get<int>());
    }
    for (const Json& u : *uuids) {
      if (!u.is_string()) return bad;
      p.gpu_uuids.push_back(u.get<std::string>());
    }
    p.gpu_milli = milli->get<int>();
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace gpupool::store::internal
