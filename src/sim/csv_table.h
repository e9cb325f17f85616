// CsvTable: a header-driven CSV file in memory, with errors that name the file, the line
// and the field; the one CSV reader of the simulator (openb node and pod lists, Philly,
// our generic format). Columns are found by name, so traces with extra or reordered
// columns read the same; every line has one field per column. Quoted fields ("a,b" and "" for a
// quote) are understood on one line; embedded newlines are not, and none of our traces uses them.
//
// A value type; not thread-safe to mutate, safe to read from several threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace gpupool::sim {

class CsvTable {
 public:
  // Parses `text`; `source` names the input in errors (usually the file path). The first
  // non-blank line is the header; blank lines are skipped.
  static Result<CsvTable> Parse(std::string_view text, std::string source);
  // Reads and parses the file at `path`.
  static Result<CsvTable> ReadFile(const std::string& path);

  const std::string& source() const { return source_; }
  size_t num_rows() const { return rows_.size(); }
  const std::vector<std::string>& header() const { return header_; }
  bool HasColumn(std::string_view name) const;
  // Fails naming the first missing column and the header that was found.
  Status RequireColumns(std::initializer_list<std::string_view> names) const;

  // The raw (unquoted, untrimmed) text of a field; empty when the column is absent.
  std::string_view Field(size_t row, std::string_view column) const;
  // The 1-based line of the row in the file, for messages.
  int64_t Line(size_t row) const { return rows_[row].line; }
  // "file:line: field 'column'" for messages about a value.
  std::string Where(size_t row, std::string_view column) const;

  // Typed reads. Empty fields are an error unless a default is given; values outside
  // [min, max] are an error whose message names the bound.
  Result<int64_t> Int(size_t row, std::string_view column, int64_t min = 0, int64_t max = INT64_MAX,
                      std::optional<int64_t> if_empty = {}) const;
  // Accepts integers and decimals ("2240194.0"); NaN and infinity are rejected.
  Result<double> Number(size_t row, std::string_view column, double min = 0,
                        std::optional<double> if_empty = {}) const;

 private:
  struct Row {
    int64_t line = 0;
    std::vector<std::string> fields;
  };
  std::optional<size_t> ColumnIndex(std::string_view name) const;

  std::string source_;
  std::vector<std::string> header_;
  std::unordered_map<std::string, size_t> column_index_;
  std::vector<Row> rows_;
};

}  // namespace gpupool::sim
