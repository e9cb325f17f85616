// gpupool-agent-shim: the per-job supervisor as a binary of its own. It runs the same
// RunShim as `gpupool agent-shim`, but links only the agent library (a handful of shared
// libraries instead of the full binary's forty), so starting a job costs about 2 ms of
// exec instead of about 25. The agent uses it when it sits beside the gpupool binary, but
// for shares capped through NVML: static where it can be, it cannot load NVML
// (agent/nvml_memory.h), so it is given no way to.
#include "agent/shim.h"

int main(int argc, char** argv) { return gpupool::agent::RunShim(argc, argv); }
