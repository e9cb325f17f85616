#include "common/hostlist.h"

#include <charconv>
#include <unordered_set>

namespace gpupool {
namespace {

// A long expression (thousands of names written out) is cut where a message quotes it.
std::string Shown(std::string_view text) {
  constexpr size_t kShown = 80;
  if (text.size() <= kShown) return std::string(text);
  return std::string(text.substr(0, kShown)) + "...";
}

Status Bad(std::string_view part, std::string_view why) {
  return Status::InvalidArgument("'" + Shown(part) + "': " + std::string(why));
}

bool AllDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// One item of a bracket: lo..hi, written with `width` digits at least (its padding).
struct ListRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
  size_t width = 0;
};

// "text[ranges]" of a name; a name is its parts, then `tail`.
struct ListPart {
  std::string_view text;
  std::vector<ListRange> ranges;
};
struct ListedName {
  std::vector<ListPart> parts;
  std::string_view tail;
};

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a + b >= kHostListSizeSaturated ? kHostListSizeSaturated : a + b;
}
uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return b >= kHostListSizeSaturated / a ? kHostListSizeSaturated : a * b;
}

// The ranges of one bracket's body ("01-03,07").
Result<std::vector<ListRange>> BracketRanges(std::string_view name, std::string_view body) {
  std::vector<ListRange> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    if (comma == std::string_view::npos) comma = body.size();
    const std::string_view item = body.substr(start, comma - start);
    const size_t dash = item.find('-');
    const std::string_view lo = item.substr(0, dash);
    const std::string_view hi = dash == std::string_view::npos ? lo : item.substr(dash + 1);
    if (!AllDigits(lo) || !AllDigits(hi) || lo.size() > 9 || hi.size() > 9) {
      return Bad(name, "'" + Shown(item) + "' in brackets is not a number or a range like 01-04");
    }
    ListRange r;
    std::from_chars(lo.data(), lo.data() + lo.size(), r.lo);
    std::from_chars(hi.data(), hi.data() + hi.size(), r.hi);
    r.width = lo.size();
    if (r.hi < r.lo) return Bad(name, "the range " + Shown(item) + " ends below its start");
    out.push_back(r);
    start = comma + 1;
  }
  return out;
}

Result<ListedName> ParseListedName(std::string_view name) {
  ListedName out;
  size_t i = 0;
  while (i < name.size()) {
    const size_t open = name.find_first_of("[]", i);
    const std::string_view plain =
        name.substr(i, open == std::string_view::npos ? name.npos : open - i);
    if (open == std::string_view::npos) {
      out.tail = plain;
      break;
    }
    if (name[open] == ']') return Bad(name, "a ']' without its '['");
    const size_t close = name.find(']', open);
    if (close == std::string_view::npos) return Bad(name, "a '[' without its ']'");
    GP_ASSIGN_OR_RETURN(std::vector<ListRange> ranges,
                        BracketRanges(name, name.substr(open + 1, close - open - 1)));
    out.parts.push_back({plain, std::move(ranges)});
    i = close + 1;
  }
  return out;
}

uint64_t NamesIn(const ListedName& name) {
  uint64_t n = 1;
  for (const ListPart& p : name.parts) {
    uint64_t values = 0;
    for (const ListRange& r : p.ranges) values = SaturatingAdd(values, uint64_t{r.hi} - r.lo + 1);
    n = SaturatingMul(n, values);
  }
  return n;
}

// One name multiplied out into *out (its size is known to be bounded).
void ExpandName(const ListedName& name, std::vector<std::string>* out) {
  std::vector<std::string> names{""};
  for (const ListPart& p : name.parts) {
    std::vector<std::string> next;
    for (const std::string& n : names) {
      for (const ListRange& r : p.ranges) {
        for (uint64_t v = r.lo; v <= r.hi; ++v) {
          std::string s = std::to_string(v);
          if (s.size() < r.width) s.insert(0, r.width - s.size(), '0');
          next.push_back(n + std::string(p.text) + s);
        }
      }
    }
    names = std::move(next);
  }
  for (std::string& n : names) out->push_back(std::move(n) + std::string(name.tail));
}

// The names of `text`, parsed, not expanded.
Result<std::vector<ListedName>> ParseHostList(std::string_view text) {
  std::vector<ListedName> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '[') ++depth;
    if (i < text.size() && text[i] == ']') --depth;
    if (i < text.size() && (text[i] != ',' || depth > 0)) continue;
    const std::string_view name = text.substr(start, i - start);
    start = i + 1;
    if (name.empty()) {
      return Status::InvalidArgument("an empty name in '" + Shown(text) +
                                     "'; write names separated by single commas");
    }
    for (char c : name) {
      if (c == ' ' || c == '\t' || c == '\n') {
        return Bad(name, "a node name has no spaces; separate names with commas");
      }
    }
    GP_ASSIGN_OR_RETURN(ListedName parsed, ParseListedName(name));
    out.push_back(std::move(parsed));
  }
  return out;
}

uint64_t NamesIn(const std::vector<ListedName>& names) {
  uint64_t n = 0;
  for (const ListedName& name : names) n = SaturatingAdd(n, NamesIn(name));
  return n;
}

}  // namespace

Result<uint64_t> HostListSize(std::string_view text) {
  GP_ASSIGN_OR_RETURN(std::vector<ListedName> names, ParseHostList(text));
  return NamesIn(names);
}

Result<std::vector<std::string>> ExpandHostList(std::string_view text) {
  GP_ASSIGN_OR_RETURN(std::vector<ListedName> names, ParseHostList(text));
  if (const uint64_t n = NamesIn(names); n > kMaxHostListNames) {
    return Status::InvalidArgument("'" + Shown(text) + "': names " +
                                   (n >= kHostListSizeSaturated ? "too many" : std::to_string(n)) +
                                   " nodes, more than the " + std::to_string(kMaxHostListNames) +
                                   " one list may name");
  }
  std::vector<std::string> all;
  for (const ListedName& name : names) ExpandName(name, &all);
  std::vector<std::string> out;
  std::unordered_set<std::string> seen;
  for (std::string& n : all) {
    if (seen.insert(n).second) out.push_back(std::move(n));
  }
  return out;
}

}  // namespace gpupool
