#include "common/hostlist.h"

#include <charconv>
#include <unordered_set>

namespace gpupool {
namespace {

Status Bad(std::string_view part, std::string_view why) {
  return Status::InvalidArgument("'" + std::string(part) + "': " + std::string(why));
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The values of one bracket's body ("01-03,07"), each as text with its padding.
Result<std::vector<std::string>> BracketValues(std::string_view name, std::string_view body) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string_view::npos) comma = body.size();
    const std::string_view item = body.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string_view lo = item.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi) || lo.size() > 9 || hi.size() > 9) {
      return Bad(name,
                 "'" + std::string(item) + "' in brackets is not a number or a range like 01-04");
    }
    uint32_t a = 0, b = 0;
    std::from_chars(lo.data(), lo.data() + lo.size(), a);
    std::from_chars(hi.data(), hi.data() + hi.size(), b);
    if (b < a) return Bad(name, "the range " + std::string(item) + " ends below its start");
    if (b - a >= kMaxHostListNames) {
      return Bad(name, "the range " + std::string(item) + " has more than " +
                           std::to_string(kMaxHostListNames) + " names");
    }
    for (uint32_t v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(std::move(s));
    }
    start = comma + 1;
  }
  return out;
}

// One name with brackets, multiplied out into *out.
Status ExpandOne(std::string_view name, std::vector<std::string>* out) {
  std::vector<std::string> names{""};
  size_t i = 0;
  while (i < name.size()) {
    const size_t open = name.find_first_of("[]", i);
    const std::string_view plain =
        name.substr(i, open == std::string_view::npos ? name.npos : open - i);
    for (std::string& n : names) n += plain;
    if (open == std::string_view::npos) break;
    if (name[open] == ']') return Bad(name, "a ']' without its '['");
    const size_t close = name.find(']', open);
    if (close == std::string_view::npos) return Bad(name, "a '[' without its ']'");
    GP_ASSIGN_OR_RETURN(std::vector<std::string> values,
                        BracketValues(name, name.substr(open + 1, close - open - 1)));
    if (names.size() * values.size() > kMaxHostListNames) {
      return Bad(name, "expands to more than " + std::to_string(kMaxHostListNames) + " names");
    }
    std::vector<std::string> next;
    next.reserve(names.size() * values.size());
    for (const std::string& n : names) {
      for (const std::string& v : values) next.push_back(n + v);
    }
    names = std::move(next);
    i = close + 1;
  }
  out->insert(out->end(), names.begin(), names.end());
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ExpandHostList(std::string_view text) {
  std::vector<std::string> all;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    const std::string_view name = text.substr(start, i - start);
    start = i + 1;
    if (name.empty()) {
      return Status::InvalidArgument("an empty name in '" + std::string(text) +
                                     "'; write names separated by single commas");
    }
    for (char c : name) {
      if (c == ' ' || c == '\t' || c == '\n') {
        return Bad(name, "a node name has no spaces; separate names with commas");
      }
    }
    GP_RETURN_IF_ERROR(ExpandOne(name, &all));
    if (all.size() > kMaxHostListNames) {
      return Status::InvalidArgument("'" + std::string(text) + "' expands to more than " +
                                     std::to_string(kMaxHostListNames) + " names");
    }
  }
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (std::string& n : all) {
    if (seen.insert(n).second) out.push_back(std::move(n));
  }
  return out;
}

}  // namespace gpupool
