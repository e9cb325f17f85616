#include "agent/cu_mask.h"

#include <algorithm>
#include <charconv>

namespace gpupool::agent {
namespace {

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

}  // namespace

int CuCountForShare(int total, int milli) {
  if (total <= 0) return 0;
  const int64_t n = static_cast<int64_t>(total) * std::clamp(milli, 0, 1000) / 1000;
  return static_cast<int>(std::clamp<int64_t>(n, 1, total));
}

std::vector<int> ParseCuList(std::string_view list, int total) {
  std::vector<bool> in(static_cast<size_t>(std::max(total, 0)), false);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view part = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    const size_t dash = part.find('-');
    int lo = 0;
    int hi = 0;
    if (dash == std::string_view::npos) {
      if (!ParseInt(part, &lo)) continue;
      hi = lo;
    } else if (!ParseInt(part.substr(0, dash), &lo) || !ParseInt(part.substr(dash + 1), &hi)) {
      continue;
    }
    for (int c = lo; c <= hi && c < total; ++c) in[static_cast<size_t>(c)] = true;
  }
  std::vector<int> out;
  for (int c = 0; c < total; ++c) {
    if (in[static_cast<size_t>(c)]) out.push_back(c);
  }
  return out;
}

std::string FormatCuList(const std::vector<int>& cus) {
  std::vector<int> sorted = cus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

CuChoice ChooseCus(int total, int milli, const std::vector<std::string>& taken) {
  CuChoice choice;
  const int want = CuCountForShare(total, milli);
  if (want == 0) return choice;
  std::vector<bool> busy(static_cast<size_t>(total), false);
  for (const std::string& list : taken) {
    for (int c : ParseCuList(list, total)) busy[static_cast<size_t>(c)] = true;
  }
  std::vector<int> picked;
  for (int c = 0; c < total && static_cast<int>(picked.size()) < want; ++c) {
    if (!busy[static_cast<size_t>(c)]) picked.push_back(c);
  }
  for (int c = 0; c < total && static_cast<int>(picked.size()) < want; ++c) {
    if (busy[static_cast<size_t>(c)]) {
      picked.push_back(c);
      choice.overlapping = true;
    }
  }
  choice.list = FormatCuList(picked);
  return choice;
}

}  // namespace gpupool::agent
