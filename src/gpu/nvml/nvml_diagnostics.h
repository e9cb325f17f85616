// DiagnosticSink: collects what the NVML backend wants the user to know, worded once.
//
// A node with eight GPUs that all fail the same call, or a driver that lacks an entry
// point every GPU would use, should say so in one line, not eight: failures of one call
// with one return code are merged into a line that lists the GPUs, and each missing
// symbol is reported once. Not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"
#include "gpu/nvml/nvml_library.h"

namespace gpupool::gpu::nvml {

class DiagnosticSink {
 public:
  explicit DiagnosticSink(const NvmlLibrary& library) : library_(library) {}

  // An optional entry point the driver lacks; `consequence` says what stays unknown.
  void MissingSymbol(std::string_view symbol, std::string_view consequence);
  // A call that returned `code`; gpu_index < 0 for calls not about one GPU.
  void CallFailed(std::string_view call, Return code, int gpu_index = -1);
  // Any other note, used as is.
  void Note(std::string message);

  std::vector<Diagnostic> Take();

 private:
  struct Entry {
    std::string message;  // notes and missing symbols
    std::string call;     // failures: merged by (call, code)
    Return code = kSuccess;
    std::vector<int> gpus;
    bool failure = false;
  };
  const NvmlLibrary& library_;
  std::vector<Entry> entries_;
  std::vector<std::string> missing_symbols_;
};

}  // namespace gpupool::gpu::nvml
