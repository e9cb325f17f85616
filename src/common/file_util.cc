#include "common/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpupool {

Result<std::string> ReadFileToString(const std::string& path, size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound("cannot open '" + path + "': " + std::strerror(errno));
  }
  std::string out;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<size_t>(in.gcount()));
    if (out.size() > max_bytes) {
      return Status::ResourceExhausted("'" + path + "' is larger than the limit of " +
                                       std::to_string(max_bytes) + " bytes");
    }
  }
  if (in.bad()) return Status::Unavailable("error reading '" + path + "'");
  return out;
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::Unavailable("cannot write '" + tmp + "': " + std::strerror(errno));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) return Status::Unavailable("error writing '" + tmp + "'");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status::Unavailable("cannot rename '" + tmp + "' to '" + path +
                               "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace gpupool
