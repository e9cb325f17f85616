#include "sim/timed/trace_job.h"

#include <fmt/format.h>

namespace gpupool::sim {

Status ValidateTraceTask(const TraceTask& t, std::string_view where) {
  if (t.num_gpu < 0) {
    return Status::InvalidArgument(fmt::format("{}: negative GPU count {}", where, t.num_gpu));
  }
  if (t.gpu_milli < 0) {
    return Status::InvalidArgument(fmt::format("{}: negative GPU share {}", where, t.gpu_milli));
  }
  if (t.gpu_milli > 1000) {
    return Status::InvalidArgument(fmt::format(
        "{}: GPU share {} is above 1000 (shares are thousandths of one GPU; ask for more "
        "GPUs instead)",
        where, t.gpu_milli));
  }
  if (t.num_gpu == 0 && t.gpu_milli != 0) {
    return Status::InvalidArgument(
        fmt::format("{}: a GPU share of {} without GPUs; set the GPU count or a share of 0", where,
                    t.gpu_milli));
  }
  if (t.num_gpu > 0 && t.gpu_milli == 0) {
    return Status::InvalidArgument(
        fmt::format("{}: {} GPUs with a share of 0; use 1..1000", where, t.num_gpu));
  }
  if (t.num_gpu > 1 && t.gpu_milli < 1000) {
    return Status::InvalidArgument(
        fmt::format("{}: a share of {} on {} GPUs; fractional shares are for single-GPU tasks only",
                    where, t.gpu_milli, t.num_gpu));
  }
  if (t.gpu_memory_mib < 0) {
    return Status::InvalidArgument(fmt::format("{}: negative GPU memory", where));
  }
  if (t.gpu_memory_mib > 0 && (t.num_gpu != 1 || t.gpu_milli >= 1000)) {
    return Status::InvalidArgument(fmt::format(
        "{}: a GPU memory need of {} MiB on a task that is not a share; give it only with "
        "one GPU and a share below 1000",
        where, t.gpu_memory_mib));
  }
  if (t.cpu_milli < 0 || t.memory_mib < 0) {
    return Status::InvalidArgument(fmt::format("{}: negative CPU or memory", where));
  }
  return Status::Ok();
}

}  // namespace gpupool::sim
