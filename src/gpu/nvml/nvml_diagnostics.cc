#include "gpu/nvml/nvml_diagnostics.h"

#include <algorithm>

namespace gpupool::gpu::nvml {

void DiagnosticSink::MissingSymbol(std::string_view symbol, std::string_view consequence) {
  if (std::find(missing_symbols_.begin(), missing_symbols_.end(), symbol) !=
      missing_symbols_.end()) {
    return;
  }
  missing_symbols_.emplace_back(symbol);
  Entry e;
  e.message = "libnvidia-ml lacks " + std::string(symbol) +
              " (a driver older than this feature): " + std::string(consequence);
  entries_.push_back(std::move(e));
}

void DiagnosticSink::CallFailed(std::string_view call, Return code, int gpu_index) {
  for (Entry& e : entries_) {
    if (e.failure && e.call == call && e.code == code) {
      if (gpu_index >= 0 && std::find(e.gpus.begin(), e.gpus.end(), gpu_index) == e.gpus.end()) {
        e.gpus.push_back(gpu_index);
      }
      return;
    }
  }
  Entry e;
  e.failure = true;
  e.call = call;
  e.code = code;
  if (gpu_index >= 0) e.gpus.push_back(gpu_index);
  entries_.push_back(std::move(e));
}

void DiagnosticSink::Note(std::string message) {
  Entry e;
  e.message = std::move(message);
  entries_.push_back(std::move(e));
}

std::vector<Diagnostic> DiagnosticSink::Take() {
  std::vector<Diagnostic> out;
  out.reserve(entries_.size());
  for (Entry& e : entries_) {
    if (!e.failure) {
      out.push_back({"nvml", std::move(e.message)});
      continue;
    }
    std::string msg = e.call + " failed";
    if (!e.gpus.empty()) {
      msg += e.gpus.size() == 1 ? " for GPU " : " for GPUs ";
      for (size_t i = 0; i < e.gpus.size(); ++i) {
        msg += (i == 0 ? "" : ", ") + std::to_string(e.gpus[i]);
      }
    }
    msg += ": " + library_.ErrorText(e.code) + "; the value is left unknown";
    out.push_back({"nvml", std::move(msg)});
  }
  entries_.clear();
  missing_symbols_.clear();
  return out;
}

}  // namespace gpupool::gpu::nvml
