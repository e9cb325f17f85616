#include "sim/curves.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace gpupool::sim {

int64_t RoundHalfEven(int64_t num, int64_t den) {
  if (den <= 0) return 0;
  int64_t q = num / den;
  const int64_t r = num % den;
  if (2 * r > den || (2 * r == den && (q % 2) == 1)) ++q;
  return q;
}

namespace {
double Round2(double x) { return std::nearbyint(x * 100.0) / 100.0; }
}  // namespace

void CurveAccumulator::Record(int64_t used, int64_t arrived, double frag_milli,
                              int64_t free_milli) {
  if (capacity_ <= 0) return;
  int64_t k = RoundHalfEven(100 * arrived, capacity_);
  if (k > kCurvePoints) k = kCurvePoints;
  Bin& b = bins_[static_cast<size_t>(k)];
  b.alloc += static_cast<double>(RoundHalfEven(10000 * used, capacity_)) / 100.0;
  b.frag += Round2(100.0 * frag_milli / static_cast<double>(capacity_));
  b.frag_ratio += free_milli > 0 ? 100.0 * frag_milli / static_cast<double>(free_milli) : 0.0;
  ++b.count;
}

CurveAccumulator::Curves CurveAccumulator::Finish() const {
  Curves c;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int k = 0; k < kCurvePoints; ++k) {
    Bin sum = bins_[static_cast<size_t>(k)];
    if (sum.count == 0) {
      for (int j : {k - 1, k + 1}) {
        if (j < 0 || j >= kCurvePoints) continue;
        const Bin& b = bins_[static_cast<size_t>(j)];
        sum.alloc += b.alloc;
        sum.frag += b.frag;
        sum.frag_ratio += b.frag_ratio;
        sum.count += b.count;
      }
    }
    const auto n = static_cast<double>(sum.count);
    c.alloc[static_cast<size_t>(k)] = sum.count ? Round2(sum.alloc / n) : nan;
    c.frag[static_cast<size_t>(k)] = sum.count ? Round2(sum.frag / n) : nan;
    c.frag_ratio[static_cast<size_t>(k)] = sum.count ? sum.frag_ratio / n : nan;
  }
  return c;
}

std::string FormatCurveValue(double v) {
  if (std::isnan(v)) return "";
  return fmt::format("{}", v);
}

}  // namespace gpupool::sim
