// Table: plain-text columns for the client commands' human output. Columns are padded
// to their widest cell (counted in characters, not bytes) and separated by two spaces;
// the last column is never padded, so lines carry no trailing blanks. Cells are
// sanitised: invalid UTF-8 becomes '?', control characters (newlines) become spaces,
// so a job name cannot break the layout. Not thread-safe; a plain value.
#pragma once

#include <string>
#include <vector>

namespace gpupool::cli {

class Table {
 public:
  // A header ending in '>' right-aligns its column (the '>' is not shown).
  explicit Table(std::vector<std::string> headers);

  void AddRow(std::vector<std::string> cells);  // missing cells are empty, extras dropped
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// Makes text safe to print in a terminal: control characters (C0, DEL, C1) become spaces,
// bidirectional embeddings, overrides and isolates U+FFFD, invalid UTF-8 "?".
std::string CleanCell(const std::string& s);

// Characters (UTF-8 code points) in s.
size_t DisplayWidth(const std::string& s);

}  // namespace gpupool::cli
