// CsvFile: a small header-driven CSV reader for the openb trace files (row-oriented
// access by column index, for speed on the saturation experiment's inputs).
//
// Fields are separated by commas; a field may be double-quoted ("a,b", "" for a quote).
// Lines end in \n or \r\n; blank lines are skipped. Every accessor error names the file,
// the 1-based line number and the column, so a bad trace is easy to fix.
// Value type; no I/O after Read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::sim {

class CsvFile {
 public:
  struct Row {
    int64_t line = 0;  // 1-based line number in the file
    std::vector<std::string> fields;
  };

  // Reads and splits a whole file. Fails when it cannot be read, is empty, or has a
  // malformed quoted field.
  static Result<CsvFile> Read(const std::string& path);
  // Same, from text already in memory; `path` is only used in messages.
  static Result<CsvFile> Parse(std::string_view text, std::string path);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& header() const { return header_; }
  const std::vector<Row>& rows() const { return rows_; }

  // Index of a column, or -1. Required(...) fails naming the file and the column.
  int32_t Column(std::string_view name) const;
  Result<int32_t> Required(std::string_view name) const;

  // The field of `row` in column `col` (-1 = absent column: empty string). Fails when the
  // row is shorter than the header needs.
  Result<std::string_view> Field(const Row& row, int32_t col) const;
  // A non-negative integer; fails on empty, non-numeric, negative or out-of-range text.
  Result<int64_t> NonNegativeInt(const Row& row, int32_t col) const;

  // "FILE:LINE: field 'NAME'" for messages.
  std::string Where(const Row& row, int32_t col) const;

 private:
  std::string path_;
  std::vector<std::string> header_;
  std::vector<Row> rows_;
};

}  // namespace gpupool::sim
