// Fuzz target: ParseOffloadBundles on the bytes of one .hip_fatbin section, and
// GfxTargetOf on every target it reports.
#include <cstddef>
#include <cstdint>
#include <span>

#include "envcheck/device_code.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::string source = "fuzz-input .hip_fatbin";
  Result<std::vector<std::string>> targets =
      envcheck::ParseOffloadBundles(std::span<const uint8_t>(data, size), source);
  if (!targets.ok()) {
    fuzz::RequireClearError(targets.status(), source);
    return 0;
  }
  size_t name_bytes = 0;
  for (const std::string& t : *targets) {
    name_bytes += t.size();
    const std::string gfx = envcheck::GfxTargetOf(t);
    fuzz::Require(gfx.size() <= t.size(), "gfx target longer than the bundle target");
  }
  // Target names are copied out of the input, never invented.
  fuzz::Require(name_bytes <= size, "target names longer than the input");
  return 0;
}
