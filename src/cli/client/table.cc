#include "cli/client/table.h"

#include <algorithm>

#include "common/strings.h"

namespace gpupool::cli {

std::string CleanCell(const std::string& s) {
  const std::string text = SanitizeUtf8(s);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::max<size_t>(Utf8CharLength(text, i), 1);
    const auto b0 = static_cast<unsigned char>(text[i]);
    const auto b1 = len > 1 ? static_cast<unsigned char>(text[i + 1]) : 0;
    const auto b2 = len > 2 ? static_cast<unsigned char>(text[i + 2]) : 0;
    if (b0 < 0x20 || b0 == 0x7f || (b0 == 0xC2 && b1 < 0xA0)) {
      // C0, DEL and C1 (U+0080..U+009F: xterm takes U+009B for CSI in UTF-8 mode).
      out += ' ';
    } else if (b0 == 0xE2 && ((b1 == 0x80 && b2 >= 0xAA && b2 <= 0xAE) ||
                              (b1 == 0x81 && b2 >= 0xA6 && b2 <= 0xA9))) {
      // Bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069)
      // reorder the rest of the line: another user's row could read as something else.
      out += "\uFFFD";
    } else {
      out.append(text, i, len);
    }
    i += len;
  }
  return out;
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (char c : s) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;  // skip continuation bytes
  }
  return n;
}

Table::Table(std::vector<std::string> headers) {
  for (std::string& h : headers) {
    const bool right = !h.empty() && h.back() == '>';
    if (right) h.pop_back();
    right_.push_back(right);
    headers_.push_back(std::move(h));
  }
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  for (std::string& c : cells) c = CleanCell(c);
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = DisplayWidth(headers_[c]);
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], DisplayWidth(row[c]));
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - DisplayWidth(row[c]), ' ');
      const bool last = c + 1 == row.size();
      if (c > 0) line += "  ";
      if (right_[c]) {
        line += pad + row[c];
      } else {
        line += row[c];
        if (!last) line += pad;
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(headers_);
  for (const auto& row : rows_) emit(row);
  return out;
}

}  // namespace gpupool::cli
