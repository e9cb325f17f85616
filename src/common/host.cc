#include "common/host.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace gpupool {

std::string HostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

std::string SelfExePath() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("gpupool") : p.string();
}

}  // namespace gpupool
