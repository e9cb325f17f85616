#include "sim/csv_table.h"

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::sim {
namespace {

// Splits one line into fields; understands double-quoted fields. Returns false on an
// unterminated quote.
bool SplitCsvLine(std::string_view line, std::vector<std::string>* out) {
  out->clear();
  std::string field;
  bool in_quotes = false;
  bool was_quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_quotes) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field.push_back('"');
          ++i;
        } else {
          in_quotes = false;
        }
      } else {
        field.push_back(c);
      }
    } else if (c == '"' && field.empty() && !was_quoted) {
      in_quotes = true;
      was_quoted = true;
    } else if (c == ',') {
      out->push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else {
      field.push_back(c);
    }
  }
  if (in_quotes) return false;
  out->push_back(std::move(field));
  return true;
}

// Values quoted in messages are cut short and made printable.
std::string Shown(std::string_view value) {
  constexpr size_t kMax = 40;
  std::string s = SanitizeUtf8(value.substr(0, kMax));
  if (value.size() > kMax) s += "...";
  return s;
}

}  // namespace

Result<CsvTable> CsvTable::Parse(std::string_view text, std::string source) {
  CsvTable table;
  table.source_ = std::move(source);
  int64_t line_no = 0;
  size_t pos = 0;
  bool have_header = false;
  std::vector<std::string> fields;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (Trim(line).empty()) continue;
    if (!SplitCsvLine(line, &fields)) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: unterminated quoted field; close the quote or remove it",
                      table.source_, line_no));
    }
    if (!have_header) {
      for (size_t i = 0; i < fields.size(); ++i) {
        std::string name(Trim(fields[i]));
        if (line_no == 1 && i == 0 && StartsWith(name, "\xEF\xBB\xBF")) name.erase(0, 3);
        if (name.empty()) {
          return Status::InvalidArgument(fmt::format(
              "{}:{}: header column {} has no name; the first line must name every column",
              table.source_, line_no, i + 1));
        }
        if (!table.column_index_.emplace(name, i).second) {
          return Status::InvalidArgument(fmt::format("{}:{}: header names column '{}' twice",
                                                     table.source_, line_no, Shown(name)));
        }
        table.header_.push_back(std::move(name));
      }
      have_header = true;
      continue;
    }
    if (fields.size() != table.header_.size()) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: {} fields where the header has {}; each line needs one value per column",
          table.source_, line_no, fields.size(), table.header_.size()));
    }
    table.rows_.push_back(Row{line_no, fields});
  }
  if (!have_header) {
    return Status::InvalidArgument(
        fmt::format("{}: empty file; expected a header line and job lines", table.source_));
  }
  return table;
}

Result<CsvTable> CsvTable::ReadFile(const std::string& path) {
  // Traces are a few MB; 1 GiB is far above any we read and still bounded.
  GP_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path, size_t{1} << 30));
  return Parse(text, path);
}

std::optional<size_t> CsvTable::ColumnIndex(std::string_view name) const {
  auto it = column_index_.find(std::string(name));
  if (it == column_index_.end()) return std::nullopt;
  return it->second;
}

bool CsvTable::HasColumn(std::string_view name) const { return ColumnIndex(name).has_value(); }

Status CsvTable::RequireColumns(std::initializer_list<std::string_view> names) const {
  for (std::string_view name : names) {
    if (!HasColumn(name)) {
      std::string have;
      for (const std::string& h : header_) {
        if (!have.empty()) have += ',';
        have += Shown(h);
      }
      return Status::InvalidArgument(fmt::format(
          "{}:1: missing column '{}' (the header has: {}); add the column", source_, name, have));
    }
  }
  return Status::Ok();
}

std::string_view CsvTable::Field(size_t row, std::string_view column) const {
  std::optional<size_t> i = ColumnIndex(column);
  if (!i) return {};
  return rows_[row].fields[*i];
}

std::string CsvTable::Where(size_t row, std::string_view column) const {
  return fmt::format("{}:{}: field '{}'", source_, rows_[row].line, column);
}

Result<int64_t> CsvTable::Int(size_t row, std::string_view column, int64_t min, int64_t max,
                              std::optional<int64_t> if_empty) const {
  std::string_view text = Trim(Field(row, column));
  if (text.empty()) {
    if (if_empty) return *if_empty;
    return Status::InvalidArgument(Where(row, column) + ": empty; expected a whole number");
  }
  std::optional<int64_t> v = ParseInt64(text);
  if (!v) {
    // "12.0" is a whole number written as a decimal, as some traces do.
    std::optional<double> d = ParseDouble(text);
    if (d && *d == static_cast<double>(static_cast<int64_t>(*d)) && *d > -9e18 && *d < 9e18) {
      v = static_cast<int64_t>(*d);
    }
  }
  if (!v) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a whole number", Where(row, column), Shown(text)));
  }
  if (*v < min) {
    return Status::InvalidArgument(
        *v < 0 && min >= 0
            ? fmt::format("{}: negative value {} is not allowed", Where(row, column), *v)
            : fmt::format("{}: {} is below the minimum {}", Where(row, column), *v, min));
  }
  if (*v > max) {
    return Status::InvalidArgument(
        fmt::format("{}: {} is above the maximum {}", Where(row, column), *v, max));
  }
  return *v;
}

Result<double> CsvTable::Number(size_t row, std::string_view column, double min,
                                std::optional<double> if_empty) const {
  std::string_view text = Trim(Field(row, column));
  if (text.empty()) {
    if (if_empty) return *if_empty;
    return Status::InvalidArgument(Where(row, column) + ": empty; expected a number");
  }
  std::optional<double> v = ParseDouble(text);
  if (!v) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a number", Where(row, column), Shown(text)));
  }
  if (*v < min) {
    return Status::InvalidArgument(
        *v < 0 && min >= 0
            ? fmt::format("{}: negative value {} is not allowed", Where(row, column), *v)
            : fmt::format("{}: {} is below the minimum {}", Where(row, column), *v, min));
  }
  return *v;
}

}  // namespace gpupool::sim
