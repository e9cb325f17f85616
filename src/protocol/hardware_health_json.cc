#include "protocol/hardware_health_json.h"

namespace gpupool::protocol {
namespace {

constexpr int64_t kMaxCount = int64_t{1} << 40;

void ReadCount(JsonFields& f, const Json& j, const char* key, std::optional<int64_t>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  int64_t v = 0;
  f.Optional(key, &v, 0, kMaxCount);
  if (f.ok()) *out = v;
}

}  // namespace

void EncodeHardwareHealth(const gpu::HardwareHealth& hw, OrderedJson* j) {
  auto put = [&](const char* key, const auto& v) {
    if (v) (*j)[key] = *v;
  };
  put("retired_pages", hw.retired_pages);
  put("retired_pages_pending", hw.retired_pages_pending);
  put("remapped_rows", hw.remapped_rows);
  put("remapped_rows_pending", hw.remapped_rows_pending);
  put("remapped_rows_failed", hw.remapped_rows_failed);
  put("hw_slowdown", hw.hw_slowdown);
}

Status DecodeHardwareHealth(const Json& j, const std::string& path, gpu::HardwareHealth* hw) {
  if (!j.is_object()) return Status::InvalidArgument(path + ": expected an object");
  gpu::HardwareHealth out;
  JsonFields f(j, path, /*reject_unknown=*/false);
  ReadCount(f, j, "retired_pages", &out.retired_pages);
  f.Optional("retired_pages_pending", &out.retired_pages_pending);
  ReadCount(f, j, "remapped_rows", &out.remapped_rows);
  f.Optional("remapped_rows_pending", &out.remapped_rows_pending);
  f.Optional("remapped_rows_failed", &out.remapped_rows_failed);
  f.Optional("hw_slowdown", &out.hw_slowdown);
  GP_RETURN_IF_ERROR(f.Finish());
  *hw = out;
  return Status::Ok();
}

}  // namespace gpupool::protocol
