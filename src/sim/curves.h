// Curves of the FGD saturation experiment: metrics sampled against arrived GPU demand.
//
// After every arrival the experiment records `used` and `arrived` GPU milli and the
// cluster fragmentation. Each record falls into bin k = round_half_even(100 * arrived /
// capacity); the curve value at k (0..130) is the mean over the records of bin k, or, if
// bin k is empty, over bins k-1 and k+1 (NaN when those are empty too). Allocation and
// fragmentation are rounded to 2 decimals per record before averaging, like the
// artifact's analysis scripts; the fragmentation ratio is not.
// Only per-bin sums are kept, so memory does not grow with the trace.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace gpupool::sim {

inline constexpr int kCurvePoints = 131;  // k = 0..130

// round(numerator / denominator) with ties to even, for non-negative integers.
int64_t RoundHalfEven(int64_t numerator, int64_t denominator);

class CurveAccumulator {
 public:
  explicit CurveAccumulator(int64_t capacity_gpu_milli) : capacity_(capacity_gpu_milli) {}

  // `frag_milli`: cluster fragmentation in GPU milli; `free_milli`: total free GPU milli.
  void Record(int64_t used_milli, int64_t arrived_milli, double frag_milli, int64_t free_milli);

  struct Curves {
    std::array<double, kCurvePoints> alloc;       // % of cluster GPUs allocated
    std::array<double, kCurvePoints> frag;        // fragmentation, % of cluster GPUs
    std::array<double, kCurvePoints> frag_ratio;  // fragmentation / free GPU, %
  };
  Curves Finish() const;

 private:
  struct Bin {
    double alloc = 0, frag = 0, frag_ratio = 0;
    int64_t count = 0;
  };
  int64_t capacity_;
  std::array<Bin, kCurvePoints + 1> bins_{};  // the last bin collects k > 130
};

// A curve value as the published CSVs write it ("" for NaN, otherwise the shortest
// round-trip decimal).
std::string FormatCurveValue(double v);

}  // namespace gpupool::sim
