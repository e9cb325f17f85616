#include "common/file_util.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

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

std::string FindGpupoolData(const std::string& relative) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (!ec) {
    const fs::path dir = exe.parent_path();
    candidates = {dir / ".." / ".." / relative, dir / ".." / relative,
                  dir / ".." / "share" / "gpupool" / relative};
  }
  candidates.push_back(fs::path("/usr/share/gpupool") / relative);
  for (const fs::path& c : candidates) {
    if (fs::is_directory(c, ec)) return fs::weakly_canonical(c, ec).string();
  }
  return "";
}

}  // namespace gpupool
