// The disk watch's report on the wire (agent_protocol.h, DiskReport).
#include <string>

#include "protocol/agent_protocol.h"

namespace gpupool::protocol {

namespace {

constexpr size_t kMaxDiskText = 4096;  // a path and a sentence for people

}  // namespace

OrderedJson EncodeDiskReport(const DiskReport& d) {
  return {{"at_ms", d.at_ms},
          {"path", d.path},
          {"pressure", d.pressure},
          {"reason", d.reason},
          {"free_bytes", d.free_bytes},
          {"total_bytes", d.total_bytes},
          {"free_inodes", d.free_inodes},
          {"total_inodes", d.total_inodes}};
}

Result<DiskReport> DecodeDiskReport(const Json& j) {
  if (!j.is_object()) {
    return Status::InvalidArgument("disk: expected an object, found " +
                                   std::string(JsonTypeName(j)));
  }
  DiskReport d;
  JsonFields f(j, "disk", /*reject_unknown=*/false);
  f.Optional("at_ms", &d.at_ms);
  f.Optional("path", &d.path);
  f.Required("pressure", &d.pressure);
  f.Optional("reason", &d.reason);
  f.Optional("free_bytes", &d.free_bytes);
  f.Optional("total_bytes", &d.total_bytes);
  f.Optional("free_inodes", &d.free_inodes);
  f.Optional("total_inodes", &d.total_inodes);
  GP_RETURN_IF_ERROR(f.Finish());
  if (d.path.size() > kMaxDiskText || d.reason.size() > kMaxDiskText) {
    return Status::InvalidArgument("disk: path and reason hold at most " +
                                   std::to_string(kMaxDiskText) + " bytes each");
  }
  if (d.pressure && d.reason.empty()) {
    return Status::InvalidArgument("disk.reason: a node under disk pressure says what is short");
  }
  return d;
}

}  // namespace gpupool::protocol
