// Resources: an aggregate amount of node resources, as a plain value type.
//
// Amounts are integers: CPU in thousandths of a core, memory in MiB, GPU in thousandths
// of one GPU summed over GPUs (two whole GPUs = 2000). Aggregates say how much, not
// where; which GPUs a task uses is a Placement (see cluster_state.h), and a task's
// per-GPU shape lives in Task (see task.h).
//
// Invariant: every field of a Resources is >= 0. Operations that would break it are
// not provided: `a - b` is only defined when a.Contains(b) (callers check first; the
// result is clamped at 0 in release builds and asserts in debug builds). Value type,
// thread-compatible.
#pragma once

#include <cstdint>
#include <string>

namespace gpupool::sched {

struct Resources {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t gpu_milli = 0;  // total over GPUs, in thousandths of one GPU

  // True when every amount of `other` fits within this one.
  bool Contains(const Resources& other) const {
    return cpu_milli >= other.cpu_milli && memory_mib >= other.memory_mib &&
           gpu_milli >= other.gpu_milli;
  }
  bool IsValid() const { return cpu_milli >= 0 && memory_mib >= 0 && gpu_milli >= 0; }
  bool IsZero() const { return cpu_milli == 0 && memory_mib == 0 && gpu_milli == 0; }

  Resources& operator+=(const Resources& o);
  Resources& operator-=(const Resources& o);  // requires Contains(o)
  friend Resources operator+(Resources a, const Resources& b) { return a += b; }
  friend Resources operator-(Resources a, const Resources& b) { return a -= b; }
  friend bool operator==(const Resources&, const Resources&) = default;

  // "cpu=1500m mem=2048Mi gpu=0.500" for messages.
  std::string ToString() const;
};

}  // namespace gpupool::sched
