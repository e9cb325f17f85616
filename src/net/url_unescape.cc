#include "net/url_unescape.h"

namespace gpupool::net {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

size_t UnescapeUrlPart(char* s, bool* control) {
  size_t out = 0;
  for (size_t in = 0; s[in] != '\0';) {
    if (s[in] == '%' && s[in + 1] != '\0' && s[in + 2] != '\0') {
      const int hi = HexValue(s[in + 1]);
      const int lo = HexValue(s[in + 2]);
      if (hi >= 0 && lo >= 0) {
        const int byte = hi * 16 + lo;
        if (byte < 0x20 || byte == 0x7f) {
          *control = true;
          for (int k = 0; k < 3; ++k) s[out++] = s[in++];
        } else {
          s[out++] = static_cast<char>(byte);
          in += 3;
        }
        continue;
      }
    }
    s[out++] = s[in++];
  }
  s[out] = '\0';
  return out;
}

}  // namespace gpupool::net
