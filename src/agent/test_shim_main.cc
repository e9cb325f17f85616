// Test-only stand-in for `gpupool agent-shim`: the launcher tests pass this
// executable's path as the shim command.
#include "agent/nvml_memory.h"
#include "agent/shim.h"

int main(int argc, char** argv) {
  return gpupool::agent::RunShim(argc, argv, &gpupool::agent::ApplyNvmlMemoryLimit);
}
