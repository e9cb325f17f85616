#include "cli/client/table.h"

#include <algorithm>

#include "common/strings.h"

namespace gpupool::cli {

std::string CleanCell(const std::string& s) {
  std::string out = SanitizeUtf8(s);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
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
