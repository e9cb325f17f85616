// Invariant checks shared by the fuzz targets: a violated one prints what broke and
// aborts, which libFuzzer (and the replay driver under ctest) reports as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/status.h"
#include "envcheck/device_code.h"

namespace gpupool::fuzz {

inline void Require(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

// A parse error must be a clear InvalidArgument that names its source.
inline void RequireClearError(const Status& s, const std::string& source) {
  Require(s.code() == StatusCode::kInvalidArgument, "error code of: " + s.ToString());
  Require(s.message().find(source) != std::string::npos,
          "error does not name '" + source + "': " + s.message());
}

// Every code a parser reports must survive the name round trip, because CheckNode works
// on the names (EnvReport::sass / ptx), not on the parsed values.
inline void RequireNameRoundTrip(const envcheck::CudaCode& c) {
  const std::string name = envcheck::CudaCodeName(c);
  const auto back = envcheck::ParseCudaCodeName(name);
  Require(back.has_value(), "reported code '" + name + "' does not parse back");
  Require(back->kind == c.kind && back->arch == c.arch && back->suffix == c.suffix,
          "reported code '" + name + "' parses back differently");
}

}  // namespace gpupool::fuzz
