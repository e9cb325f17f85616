// Fuzz target: the #GPUPOOL directives of a submitted script (ReadScriptDirectives, then
// ParseDirectives, as `gpupool submit` reads them). Checks besides "no crash": errors
// are InvalidArgument naming the script; directives come from distinct lines in order.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cli/client/submit_flags.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpupool;
  const std::string name = "fuzz-script.sh";
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<std::vector<cli::Directive>> directives = cli::ReadScriptDirectives(text, name);
  if (!directives.ok()) {
    fuzz::RequireClearError(directives.status(), name);
    return 0;
  }
  int last = 0;
  for (const cli::Directive& d : *directives) {
    fuzz::Require(d.line > last, "directive lines out of order");
    fuzz::Require(!d.words.empty(), "a directive without words");
    last = d.line;
  }
  Result<cli::SubmitFlags> flags = cli::ParseDirectives(*directives, name);
  if (!flags.ok()) fuzz::RequireClearError(flags.status(), name);
  return 0;
}
