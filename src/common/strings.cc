#include "common/strings.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace gpupool {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string StrFormat(const char* format, ...) {
  va_list ap;
  va_start(ap, format);
  va_list again;
  va_copy(again, ap);
  char small[128];
  const int n = std::vsnprintf(small, sizeof small, format, ap);
  va_end(ap);
  std::string out;
  if (n >= 0 && static_cast<size_t>(n) < sizeof small) {
    out.assign(small, static_cast<size_t>(n));
  } else if (n > 0) {
    out.resize(static_cast<size_t>(n));
    // Sized by the call above, with the same arguments: it cannot fail or truncate here.
    (void)std::vsnprintf(out.data(), out.size() + 1, format, again);
  }
  va_end(again);
  return out;
}

std::optional<int64_t> ParseInt64(std::string_view s) {
  int64_t v = 0;
  if (s.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<uint64_t> ParseUint64(std::string_view s) {
  uint64_t v = 0;
  if (s.empty() || s.front() == '-') return std::nullopt;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> ParseDouble(std::string_view s) {
  double v = 0;
  if (s.empty()) return std::nullopt;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

bool HasControlCharacter(std::string_view s) {
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return true;
    // U+0080..U+009F: 0xC2 then 0x80..0x9F.
    if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) <= 0x9F &&
        static_cast<unsigned char>(s[i + 1]) >= 0x80) {
      return true;
    }
  }
  return false;
}

namespace {

bool IsInvisible(uint32_t c) {
  static constexpr std::pair<uint32_t, uint32_t> kRanges[] = {
      {0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x061C, 0x061C}, {0x115F, 0x1160},   {0x17B4, 0x17B5},
      {0x180B, 0x180F}, {0x200B, 0x200F}, {0x202A, 0x202E}, {0x2060, 0x206F},   {0x3164, 0x3164},
      {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF}, {0xFFA0, 0xFFA0}, {0x1D173, 0x1D17A}, {0xE0000, 0xE0FFF}};
  for (const auto& [lo, hi] : kRanges) {
    if (c >= lo && c <= hi) return true;
  }
  return false;
}

// Whether `pred` holds for a code point of `s`: each ASCII byte and each sequence of a
// UTF-8 lead byte and its continuation bytes; a lead byte cut short is skipped alone.
template <typename Pred>
bool AnyCodePoint(std::string_view s, Pred pred) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80             ? 1
                       : (c & 0xE0) == 0xC0 ? 2
                       : (c & 0xF0) == 0xE0 ? 3
                       : (c & 0xF8) == 0xF0 ? 4
                                            : 0;
    if (len == 0 || i + len > s.size()) {
      ++i;
      continue;
    }
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (pred(cp)) return true;
    i += len;
  }
  return false;
}

enum Script : unsigned { kOtherScript = 0, kLatin = 1, kGreek = 2, kCyrillic = 4 };

// The script of a letter of the three whose letters print alike (Latin a, Greek α,
// Cyrillic а); kOtherScript for the rest (digits, punctuation, other scripts).
Script LookAlikeScriptOf(uint32_t c) {
  struct Range {
    uint32_t lo, hi;
    Script script;
  };
  static constexpr Range kRanges[] = {
      {'A', 'Z', kLatin},          {'a', 'z', kLatin},          {0x00C0, 0x00D6, kLatin},
      {0x00D8, 0x00F6, kLatin},    {0x00F8, 0x02AF, kLatin},    {0x1E00, 0x1EFF, kLatin},
      {0x2C60, 0x2C7F, kLatin},    {0xA720, 0xA7FF, kLatin},    {0xFF21, 0xFF3A, kLatin},
      {0xFF41, 0xFF5A, kLatin},    {0x0370, 0x03FF, kGreek},    {0x1F00, 0x1FFF, kGreek},
      {0x0400, 0x052F, kCyrillic}, {0x1C80, 0x1C8F, kCyrillic}, {0x2DE0, 0x2DFF, kCyrillic},
      {0xA640, 0xA69F, kCyrillic}};
  for (const Range& r : kRanges) {
    if (c >= r.lo && c <= r.hi) return r.script;
  }
  return kOtherScript;
}

}  // namespace

bool HasInvisibleCharacter(std::string_view s) { return AnyCodePoint(s, IsInvisible); }

bool MixesLookAlikeScripts(std::string_view s) {
  unsigned seen = 0;
  return AnyCodePoint(s, [&seen](uint32_t c) {
    seen |= LookAlikeScriptOf(c);
    return (seen & (seen - 1)) != 0;  // two of them
  });
}

size_t Utf8CharLength(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len = 0;
  if (c < 0x80) {
    len = 1;
  } else if ((c & 0xE0) == 0xC0 && c >= 0xC2) {
    len = 2;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
  } else if ((c & 0xF8) == 0xF0 && c <= 0xF4) {
    len = 4;
  }
  bool valid = len > 0 && i + len <= s.size();
  for (size_t k = 1; valid && k < len; ++k) {
    valid = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  }
  if (valid && len == 3) {
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    valid = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogate
  }
  if (valid && len == 4) {
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    valid = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
  }
  return valid ? len : 0;
}

std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (const size_t len = Utf8CharLength(s, i); len > 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.push_back('?');
      ++i;
    }
  }
  return out;
}

namespace {
constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int Base64Value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += kBase64[v & 63];
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (left == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += left == 2 ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && last && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int d = Base64Value(c);
      if (d < 0 || pad > 0) return std::nullopt;
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace gpupool
