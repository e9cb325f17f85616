#include "cli/client/units.h"

#include <cctype>
#include <cmath>
#include <ctime>
#include <vector>

#include "common/strings.h"

namespace gpupool::cli {
namespace {

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// A small non-negative integer (at most 9 digits, so sums of them cannot overflow).
std::optional<int64_t> SmallNumber(std::string_view s) {
  if (!AllDigits(s) || s.size() > 9) return std::nullopt;
  return ParseInt64(s);
}

Status BadDuration(std::string_view text) {
  return Status::InvalidArgument("'" + std::string(text) +
                                 "' is not a duration; use e.g. 45s, 90m, 2h, 1h30m, 1:30:00 or "
                                 "1-00:00:00 (days-hours:minutes:seconds)");
}

// "1h30m", "45s", "2d": number-unit pairs, each unit once at most.
Result<int64_t> ParseUnitDuration(std::string_view t, std::string_view text) {
  int64_t total = 0;
  std::string seen;
  size_t i = 0;
  while (i < t.size()) {
    size_t start = i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i;
    auto n = SmallNumber(t.substr(start, i - start));
    if (!n || i >= t.size()) return BadDuration(text);
    const char unit = static_cast<char>(std::tolower(static_cast<unsigned char>(t[i++])));
    int64_t scale = 0;
    switch (unit) {
      case 's':
        scale = 1;
        break;
      case 'm':
        scale = 60;
        break;
      case 'h':
        scale = 3600;
        break;
      case 'd':
        scale = 86400;
        break;
      default:
        return BadDuration(text);
    }
    if (seen.find(unit) != std::string::npos) return BadDuration(text);
    seen += unit;
    total += *n * scale;
  }
  return total;
}

// Slurm's clock forms: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S".
Result<int64_t> ParseClockDuration(std::string_view t, std::string_view text) {
  int64_t days = 0;
  bool has_days = false;
  if (auto dash = t.find('-'); dash != std::string_view::npos) {
    auto d = SmallNumber(t.substr(0, dash));
    if (!d) return BadDuration(text);
    days = *d;
    has_days = true;
    t = t.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  for (const std::string& p : Split(t, ':')) {
    auto n = SmallNumber(p);
    if (!n) return BadDuration(text);
    parts.push_back(*n);
  }
  if (parts.empty() || parts.size() > 3) return BadDuration(text);
  // Every part after the first is a minute or second count below 60.
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] >= 60) {
      return Status::InvalidArgument("'" + std::string(text) +
                                     "': minutes and seconds must be below 60");
    }
  }
  int64_t h = 0, m = 0, s = 0;
  if (has_days) {
    if (parts[0] >= 24) {
      return Status::InvalidArgument("'" + std::string(text) +
                                     "': hours after the days must be below 24");
    }
    h = parts[0];
    if (parts.size() > 1) m = parts[1];
    if (parts.size() > 2) s = parts[2];
  } else if (parts.size() == 1) {
    m = parts[0];
  } else if (parts.size() == 2) {
    m = parts[0];
    s = parts[1];
  } else {
    h = parts[0];
    m = parts[1];
    s = parts[2];
  }
  return days * 86400 + h * 3600 + m * 60 + s;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text) {
  const std::string_view t = Trim(text);
  auto bad = [&] {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a size; use a number of bytes with an optional K, "
                                   "M, G or T suffix (binary units), e.g. 16G");
  };
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string_view number = t.substr(0, i);
  const std::string suffix = ToLower(Trim(t.substr(i)));
  if (number.empty()) return bad();
  int shift = 0;
  if (!suffix.empty()) {
    std::string_view rest = std::string_view(suffix).substr(1);
    switch (suffix[0]) {
      case 'b':
        shift = 0;
        break;
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      case 'p':
        shift = 50;
        break;
      default:
        return bad();
    }
    if (suffix[0] == 'b' ? !rest.empty()
                         : !(rest.empty() || rest == "b" || rest == "i" || rest == "ib")) {
      return bad();
    }
  }
  auto too_large = [&] {
    return Status::InvalidArgument("'" + std::string(text) + "' is too large for a size");
  };
  if (number.find('.') == std::string_view::npos) {
    auto v = ParseUint64(number);
    if (!v) return AllDigits(number) ? too_large() : bad();
    if (*v > (UINT64_MAX >> shift)) return too_large();
    return *v << shift;
  }
  auto v = ParseDouble(number);
  if (!v) return bad();
  const long double bytes = std::ldexp(static_cast<long double>(*v), shift);
  if (bytes >= 1.8e19L) return too_large();
  return static_cast<uint64_t>(std::llround(static_cast<double>(bytes)));
}

namespace {

// What a bare number `n` given as a memory size was probably meant as, with its unit:
// gibibytes when small ("10": 10G or 10240M), Slurm's megabytes when in the thousands
// ("4000": 4000M or 4000G), else bytes ("8589934592": 8G).
std::string SizeWithUnits(uint64_t n) {
  const std::string s = std::to_string(n);
  if (n < 1024) return s + "G or " + std::to_string(n * 1024) + "M";
  if (n < kMinMemorySize) return s + "M or " + s + "G";
  if (n % (uint64_t{1} << 30) == 0) return std::to_string(n >> 30) + "G";
  return std::to_string((n + kMinMemorySize - 1) >> 20) + "M";
}

}  // namespace

Result<uint64_t> ParseMemorySize(std::string_view text) {
  GP_ASSIGN_OR_RETURN(uint64_t bytes, ParseSize(text));
  if (bytes == 0) return bytes;  // 0 in any unit: callers say what none means
  const std::string_view t = Trim(text);
  if (AllDigits(t)) {
    return Status::InvalidArgument("a size needs a unit (a bare number would be " + std::string(t) +
                                   " bytes); write " + SizeWithUnits(bytes));
  }
  if (bytes < kMinMemorySize) {
    return Status::InvalidArgument("'" + std::string(t) +
                                   "' is below the smallest size, 1M; write e.g. 10G or 10240M");
  }
  return bytes;
}

Result<int64_t> ParseDuration(std::string_view text) {
  const std::string_view t = Trim(text);
  if (t.empty()) return BadDuration(text);
  if (std::isalpha(static_cast<unsigned char>(t.back()))) return ParseUnitDuration(t, text);
  return ParseClockDuration(t, text);
}

Result<int64_t> ParseDurationWithUnit(std::string_view text) {
  const std::string_view t = Trim(text);
  if (!t.empty() && t.find_first_not_of("0123456789") == std::string_view::npos &&
      t.find_first_not_of('0') != std::string_view::npos) {  // 0 is 0 in any unit
    return Status::InvalidArgument("give a unit: " + std::string(t) + "s or " + std::string(t) +
                                   "m (a bare number would be minutes, as --time reads it)");
  }
  return ParseDuration(text);
}

Result<int> ParseGpuShare(std::string_view text) {
  std::string_view t = Trim(text);
  const bool percent = !t.empty() && t.back() == '%';
  if (percent) t.remove_suffix(1);
  auto v = ParseDouble(t);
  if (!v) {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a share; use a fraction of one GPU such as 0.25 "
                                   "or 25%");
  }
  double share = percent ? *v / 100 : *v;
  if (!(share > 0 && share <= 1)) {
    return Status::InvalidArgument("a share must be in (0, 1]");
  }
  const auto milli = static_cast<int>(std::lround(share * 1000));
  if (milli < 1) {
    return Status::InvalidArgument("a share must be at least 0.001 (a thousandth of a GPU)");
  }
  return milli;
}

Result<int64_t> ParseCpus(std::string_view text) {
  auto v = ParseDouble(Trim(text));
  if (!v) {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a CPU count; use e.g. 2 or 0.5");
  }
  if (*v > 100'000) return Status::InvalidArgument("a CPU count must be at most 100000");
  const int64_t milli = std::llround(*v * 1000);
  if (milli <= 0) {
    // The scheduler counts what jobs ask for: none asked would be none counted.
    return Status::InvalidArgument("a job asks for at least 0.001 CPU; '" + std::string(text) +
                                   "' is less (leave --cpus out for one CPU)");
  }
  return milli;
}

Result<int64_t> ParseTimePoint(std::string_view text, int64_t now_us) {
  const std::string_view t = Trim(text);
  auto bad = [&] {
    return Status::InvalidArgument("'" + std::string(text) +
                                   "' is not a time; use a UTC date such as 2026-11-01 or "
                                   "2026-11-01T08:00, now, or a time ago such as 7d or 12h");
  };
  if (t == "now") return now_us;
  if (!t.empty() && std::isalpha(static_cast<unsigned char>(t.back())) && t.back() != 'Z') {
    auto d = ParseDuration(t);
    if (!d.ok()) return bad();
    return now_us - *d * 1'000'000;
  }
  // YYYY-MM-DD[(T| )HH:MM[:SS]][Z]
  std::string_view date = t.substr(0, 10);
  std::string_view rest = t.size() > 10 ? t.substr(10) : std::string_view();
  if (date.size() != 10 || date[4] != '-' || date[7] != '-') return bad();
  auto year = SmallNumber(date.substr(0, 4));
  auto month = SmallNumber(date.substr(5, 2));
  auto day = SmallNumber(date.substr(8, 2));
  if (!year || !month || !day) return bad();
  int64_t hour = 0, minute = 0, second = 0;
  if (!rest.empty() && rest.back() == 'Z') rest.remove_suffix(1);
  if (!rest.empty()) {
    if (rest[0] != 'T' && rest[0] != ' ') return bad();
    std::vector<std::string> parts = Split(rest.substr(1), ':');
    if (parts.size() < 2 || parts.size() > 3) return bad();
    auto h = SmallNumber(parts[0]);
    auto m = SmallNumber(parts[1]);
    auto s = parts.size() == 3 ? SmallNumber(parts[2]) : std::optional<int64_t>(0);
    if (!h || !m || !s || parts[0].size() != 2 || parts[1].size() != 2) return bad();
    hour = *h;
    minute = *m;
    second = *s;
  }
  std::tm tm{};
  tm.tm_year = static_cast<int>(*year) - 1900;
  tm.tm_mon = static_cast<int>(*month) - 1;
  tm.tm_mday = static_cast<int>(*day);
  tm.tm_hour = static_cast<int>(hour);
  tm.tm_min = static_cast<int>(minute);
  tm.tm_sec = static_cast<int>(second);
  const std::tm asked = tm;
  const time_t secs = timegm(&tm);
  // timegm normalises out-of-range fields (February 30 becomes March 2); a date that
  // does not survive the round trip did not exist.
  if (secs == static_cast<time_t>(-1) || tm.tm_mday != asked.tm_mday || tm.tm_mon != asked.tm_mon ||
      tm.tm_hour != asked.tm_hour || tm.tm_min != asked.tm_min || tm.tm_sec != asked.tm_sec) {
    return Status::InvalidArgument("'" + std::string(text) + "' is not a valid date and time");
  }
  return static_cast<int64_t>(secs) * 1'000'000;
}

std::string FormatMilli(int64_t milli) {
  std::string sign = milli < 0 ? "-" : "";
  const uint64_t m = milli < 0 ? -static_cast<uint64_t>(milli) : static_cast<uint64_t>(milli);
  std::string out = sign + std::to_string(m / 1000);
  if (uint64_t frac = m % 1000; frac != 0) {
    std::string digits = std::to_string(1000 + frac).substr(1);  // zero-padded to 3
    while (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  long double v = static_cast<long double>(bytes);
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  const long double tenths = std::round(v * 10);
  std::string number = std::to_string(static_cast<uint64_t>(tenths / 10));
  if (auto frac = static_cast<uint64_t>(tenths) % 10; frac != 0) {
    number += "." + std::to_string(frac);
  }
  return number + " " + kUnits[unit];
}

std::string FormatDuration(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  auto two = [](int64_t v) { return (v < 10 ? "0" : "") + std::to_string(v); };
  if (seconds < 60) return std::to_string(seconds) + "s";
  if (seconds < 3600) return std::to_string(seconds / 60) + "m" + two(seconds % 60) + "s";
  if (seconds < 86400) {
    return std::to_string(seconds / 3600) + "h" + two(seconds % 3600 / 60) + "m";
  }
  return std::to_string(seconds / 86400) + "d" + two(seconds % 86400 / 3600) + "h";
}

std::string FormatTimeUtc(int64_t micros) {
  if (micros <= 0) return "-";
  const auto secs = static_cast<time_t>(micros / 1'000'000);
  std::tm tm{};
  if (gmtime_r(&secs, &tm) == nullptr) return "-";
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace gpupool::cli
