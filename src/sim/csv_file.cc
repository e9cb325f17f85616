#include "sim/csv_file.h"

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::sim {
namespace {

// Splits one line; returns false on an unterminated quote.
bool SplitLine(std::string_view line, std::vector<std::string>* out) {
  out->clear();
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cur += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cur += c;
      }
    } else if (c == '"' && cur.empty()) {
      quoted = true;
    } else if (c == ',') {
      out->push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (quoted) return false;
  out->push_back(std::move(cur));
  return true;
}

}  // namespace

Result<CsvFile> CsvFile::Read(const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, size_t{512} << 20));
  return Parse(text, path);
}

Result<CsvFile> CsvFile::Parse(std::string_view text, std::string path) {
  CsvFile t;
  t.path_ = std::move(path);
  int64_t line_no = 0;
  size_t pos = 0;
  bool have_header = false;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty()) {
      if (end == text.size()) break;
      continue;
    }
    Row row;
    row.line = line_no;
    if (!SplitLine(line, &row.fields)) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: unterminated quoted field; close the quote", t.path_, line_no));
    }
    for (auto& f : row.fields) f = std::string(Trim(f));
    if (!have_header) {
      t.header_ = std::move(row.fields);
      have_header = true;
    } else {
      t.rows_.push_back(std::move(row));
    }
    if (end == text.size()) break;
  }
  if (!have_header) {
    return Status::InvalidArgument(
        fmt::format("{}: the file is empty; expected a header line", t.path_));
  }
  return t;
}

int32_t CsvFile::Column(std::string_view name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return static_cast<int32_t>(i);
  }
  return -1;
}

Result<int32_t> CsvFile::Required(std::string_view name) const {
  const int32_t c = Column(name);
  if (c < 0) {
    return Status::InvalidArgument(
        fmt::format("{}:1: missing column '{}' in the header; add it", path_, name));
  }
  return c;
}

std::string CsvFile::Where(const Row& row, int32_t col) const {
  const std::string name = col >= 0 && static_cast<size_t>(col) < header_.size()
                               ? header_[static_cast<size_t>(col)]
                               : "?";
  return fmt::format("{}:{}: field '{}'", path_, row.line, name);
}

Result<std::string_view> CsvFile::Field(const Row& row, int32_t col) const {
  if (col < 0) return std::string_view();
  if (static_cast<size_t>(col) >= row.fields.size()) {
    return Status::InvalidArgument(
        fmt::format("{} is missing (the line has {} fields, the header {})", Where(row, col),
                    row.fields.size(), header_.size()));
  }
  return std::string_view(row.fields[static_cast<size_t>(col)]);
}

Result<int64_t> CsvFile::NonNegativeInt(const Row& row, int32_t col) const {
  GP_ASSIGN_OR_RETURN(std::string_view text, Field(row, col));
  if (text.empty()) {
    return Status::InvalidArgument(fmt::format("{} is empty; expected a number", Where(row, col)));
  }
  if (text[0] == '-') {
    if (ParseInt64(text).has_value()) {
      return Status::InvalidArgument(
          fmt::format("{} is negative ({}); expected a value >= 0", Where(row, col), text));
    }
  }
  auto v = ParseInt64(text);
  if (!v) {
    return Status::InvalidArgument(
        fmt::format("{} is not an integer ('{}')", Where(row, col), SanitizeUtf8(text)));
  }
  if (*v < 0) {
    return Status::InvalidArgument(
        fmt::format("{} is negative ({}); expected a value >= 0", Where(row, col), *v));
  }
  return *v;
}

}  // namespace gpupool::sim
