// Fuzz target: library versions read from file names. The input becomes the name of an
// empty file (bytes other than '/' and NUL, at most 255) in a scratch directory beside
// "libcudart.so.12.4.127", and InspectTree reads the directory, so the name's version
// is parsed, compared with another runtime's and turned into a driver need.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "envcheck/inspector.h"
#include "fuzz/fuzz_check.h"

namespace {

namespace fs = std::filesystem;

// The scratch directory, made on first use and removed at exit.
class ScratchDir {
 public:
  ScratchDir()
      : path_(fs::temp_directory_path() / ("gpupool-fuzz-names-" + std::to_string(getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
    std::ofstream(path_ / "libcudart.so.12.4.127").put('x');
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  std::string name;
  for (size_t i = 0; i < size && name.size() < 255; ++i) {
    if (data[i] != '/' && data[i] != 0) name.push_back(static_cast<char>(data[i]));
  }
  if (name.empty() || name == "." || name == ".." || name == "libcudart.so.12.4.127") return 0;
  static const ScratchDir scratch;
  const fs::path& dir = scratch.path();
  std::error_code ec;
  { std::ofstream(dir / name).put('x'); }
  if (!fs::exists(dir / name, ec)) return 0;
  Result<envcheck::EnvReport> report = envcheck::InspectTree(dir.string());
  fs::remove(dir / name, ec);
  fuzz::Require(report.ok(), "InspectTree failed: " + report.status().ToString());
  fuzz::Require(report->files_scanned == 2, "scanned " + std::to_string(report->files_scanned));
  fuzz::Require(!report->cuda_version.empty(), "lost the CUDA runtime's version");
  return 0;
}
