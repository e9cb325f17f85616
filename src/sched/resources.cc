#include "sched/resources.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace gpupool::sched {

Resources& Resources::operator+=(const Resources& o) {
  cpu_milli += o.cpu_milli;
  memory_mib += o.memory_mib;
  gpu_milli += o.gpu_milli;
  return *this;
}

Resources& Resources::operator-=(const Resources& o) {
  assert(Contains(o) && "Resources subtraction would go negative");
  // Clamp so that a broken caller cannot create negative amounts in release builds.
  cpu_milli = std::max<int64_t>(0, cpu_milli - o.cpu_milli);
  memory_mib = std::max<int64_t>(0, memory_mib - o.memory_mib);
  gpu_milli = std::max<int64_t>(0, gpu_milli - o.gpu_milli);
  return *this;
}

std::string Resources::ToString() const {
  return fmt::format("cpu={}m mem={}Mi gpu={}.{:03d}", cpu_milli, memory_mib, gpu_milli / 1000,
                     gpu_milli % 1000);
}

}  // namespace gpupool::sched
