#include "sim/timed/civil_time.h"

#include <cmath>

#include "common/strings.h"

namespace gpupool::sim {
namespace {

bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysInMonth(int64_t y, int m) {
  static constexpr int kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

// Reads exactly `width` decimal digits at `pos`.
std::optional<int> Digits(std::string_view s, size_t pos, size_t width) {
  if (pos + width > s.size()) return std::nullopt;
  int v = 0;
  for (size_t i = pos; i < pos + width; ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
  }
  return v;
}

}  // namespace

int64_t DaysFromCivil(int64_t year, int month, int day) {
  // Count days in whole years since 1970, then months, then days. Dates before 1970 are
  // not needed by any trace but come out negative and correct.
  int64_t days = 0;
  // Whole 400-year cycles keep the loop short for far-away years.
  const int64_t cycles = (year - 1970) / 400;
  days += cycles * 146097;
  int64_t y = 1970 + cycles * 400;
  for (; y < year; ++y) days += IsLeap(y) ? 366 : 365;
  for (; y > year; --y) days -= IsLeap(y - 1) ? 366 : 365;
  for (int m = 1; m < month; ++m) days += DaysInMonth(year, m);
  return days + (day - 1);
}

std::optional<int64_t> ParseTimestampSeconds(std::string_view text) {
  text = Trim(text);
  if (text.empty()) return std::nullopt;
  // A date has '-' after four digits; anything else must be a plain number.
  if (text.size() < 10 || text[4] != '-') {
    std::optional<double> v = ParseDouble(text);
    if (!v || *v > 9e18 || *v < -9e18) return std::nullopt;
    return static_cast<int64_t>(std::floor(*v));
  }
  auto year = Digits(text, 0, 4);
  auto month = Digits(text, 5, 2);
  auto day = Digits(text, 8, 2);
  if (!year || !month || !day || text[7] != '-') return std::nullopt;
  if (*month < 1 || *month > 12 || *day < 1 || *day > DaysInMonth(*year, *month)) {
    return std::nullopt;
  }
  int hour = 0, minute = 0, second = 0;
  if (text.size() > 10) {
    if (text.back() == 'Z') text.remove_suffix(1);
    if (text.size() != 19 || (text[10] != ' ' && text[10] != 'T') || text[13] != ':' ||
        text[16] != ':') {
      return std::nullopt;
    }
    auto h = Digits(text, 11, 2);
    auto mi = Digits(text, 14, 2);
    auto se = Digits(text, 17, 2);
    if (!h || !mi || !se || *h > 23 || *mi > 59 || *se > 60) return std::nullopt;
    hour = *h;
    minute = *mi;
    second = *se;
  }
  return DaysFromCivil(*year, *month, *day) * 86400 + int64_t{hour} * 3600 + int64_t{minute} * 60 +
         second;
}

}  // namespace gpupool::sim
