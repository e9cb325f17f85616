// Fuzz target: ParseFatbinary on the bytes of one .nv_fatbin section.
#include <cstddef>
#include <cstdint>
#include <span>

#include "envcheck/device_code.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::string source = "fuzz-input .nv_fatbin";
  Result<std::vector<envcheck::CudaCode>> codes =
      envcheck::ParseFatbinary(std::span<const uint8_t>(data, size), source);
  if (!codes.ok()) {
    fuzz::RequireClearError(codes.status(), source);
    return 0;
  }
  // Each entry takes at least a 64-byte header.
  fuzz::Require(codes->size() <= size / 64, "more codes than entry headers fit");
  for (const envcheck::CudaCode& c : *codes) fuzz::RequireNameRoundTrip(c);
  return 0;
}
