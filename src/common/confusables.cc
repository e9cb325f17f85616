#include "common/confusables.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace gpupool {
namespace {

struct LookAlike {
  uint32_t from;
  char to;  // the Latin letter it prints like
};

// Our own table, by code point (sorted: the lookup is a binary search). The facts are
// TR39's (confusables.txt), limited to the letters of the scripts a project name may
// mix up with Latin; where TR39 maps to another look-alike (к to ĸ, γ to ɣ), the Latin
// letter it prints like in the fonts terminals and browsers use.
constexpr LookAlike kLookAlikes[] = {
    {'0', 'O'},    {'1', 'l'},    {'I', 'l'},    {'|', 'l'},    {0x0131, 'i'},  // ı
    {0x01C0, 'l'},                                                              // ǀ
    {0x0261, 'g'}, {0x0269, 'i'},                                               // ɡ ɩ
    {0x037F, 'J'},                                                              // Ϳ
    {0x0391, 'A'}, {0x0392, 'B'}, {0x0395, 'E'}, {0x0396, 'Z'}, {0x0397, 'H'},  // Α Β Ε Ζ Η
    {0x0399, 'l'}, {0x039A, 'K'}, {0x039C, 'M'}, {0x039D, 'N'}, {0x039F, 'O'},  // Ι Κ Μ Ν Ο
    {0x03A1, 'P'}, {0x03A4, 'T'}, {0x03A5, 'Y'}, {0x03A7, 'X'},                 // Ρ Τ Υ Χ
    {0x03B1, 'a'}, {0x03B3, 'y'}, {0x03B9, 'i'}, {0x03BA, 'k'}, {0x03BD, 'v'},  // α γ ι κ ν
    {0x03BF, 'o'}, {0x03C1, 'p'}, {0x03F2, 'c'}, {0x03F3, 'j'}, {0x03F9, 'C'},  // ο ρ ϲ ϳ Ϲ
    {0x0405, 'S'}, {0x0406, 'l'}, {0x0408, 'J'},                                // Ѕ І Ј
    {0x0410, 'A'}, {0x0412, 'B'}, {0x0415, 'E'}, {0x041A, 'K'}, {0x041C, 'M'},  // А В Е К М
    {0x041D, 'H'}, {0x041E, 'O'}, {0x0420, 'P'}, {0x0421, 'C'}, {0x0422, 'T'},  // Н О Р С Т
    {0x0423, 'Y'}, {0x0425, 'X'},                                               // У Х
    {0x0430, 'a'}, {0x0435, 'e'}, {0x043A, 'k'}, {0x043E, 'o'}, {0x0440, 'p'},  // а е к о р
    {0x0441, 'c'}, {0x0443, 'y'}, {0x0445, 'x'},                                // с у х
    {0x0455, 's'}, {0x0456, 'i'}, {0x0458, 'j'},                                // ѕ і ј
    {0x04AE, 'Y'}, {0x04AF, 'y'}, {0x04BA, 'H'}, {0x04BB, 'h'},                 // Ү ү Һ һ
    {0x04C0, 'l'}, {0x04CF, 'l'},                                               // Ӏ ӏ
    {0x0501, 'd'}, {0x051A, 'Q'}, {0x051B, 'q'}, {0x051C, 'W'}, {0x051D, 'w'},  // ԁ Ԛ ԛ Ԝ ԝ
};
static_assert(std::is_sorted(std::begin(kLookAlikes), std::end(kLookAlikes),
                             [](const LookAlike& a, const LookAlike& b) {
                               return a.from < b.from;
                             }));

// Latin, Greek and Cyrillic capitals (of the basic blocks) in lower case.
uint32_t FoldCase(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 0x20;
  if (c >= 0x00C0 && c <= 0x00DE && c != 0x00D7) return c + 0x20;  // À..Þ but ×
  if (c >= 0x0391 && c <= 0x03AB && c != 0x03A2) return c + 0x20;  // Α..Ϋ
  if (c >= 0x0400 && c <= 0x040F) return c + 0x50;                 // Ѐ..Џ
  if (c >= 0x0410 && c <= 0x042F) return c + 0x20;                 // А..Я
  return c;
}

uint32_t LatinLookAlike(uint32_t c) {
  if (c >= 0xFF01 && c <= 0xFF5E) c -= 0xFEE0;  // fullwidth ASCII
  const auto* it = std::lower_bound(std::begin(kLookAlikes), std::end(kLookAlikes), c,
                                    [](const LookAlike& l, uint32_t v) { return l.from < v; });
  if (it != std::end(kLookAlikes) && it->from == c) c = static_cast<unsigned char>(it->to);
  return FoldCase(c);
}

void AppendUtf8(uint32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The length of the UTF-8 sequence at the start of `s`, 0 when it is not one.
size_t SequenceLength(std::string_view s) {
  const auto c = static_cast<unsigned char>(s[0]);
  const size_t len = c < 0x80             ? 1
                     : (c & 0xE0) == 0xC0 ? 2
                     : (c & 0xF0) == 0xE0 ? 3
                     : (c & 0xF8) == 0xF0 ? 4
                                          : 0;
  if (len == 0 || len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) return 0;
  }
  return len;
}

}  // namespace

std::string ConfusableSkeleton(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const size_t len = SequenceLength(s);
    if (len == 0) {  // malformed: kept as it is
      out.push_back(s[0]);
      s.remove_prefix(1);
      continue;
    }
    const auto lead = static_cast<unsigned char>(s[0]);
    uint32_t cp = len == 1 ? lead : lead & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[k]) & 0x3F);
    AppendUtf8(LatinLookAlike(cp), &out);
    s.remove_prefix(len);
  }
  return out;
}

}  // namespace gpupool
