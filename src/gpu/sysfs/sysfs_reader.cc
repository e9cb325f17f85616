#include "gpu/sysfs/sysfs_reader.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>

#include "common/file_util.h"
#include "common/strings.h"

namespace gpupool::gpu {
namespace {

// sysfs attributes are at most a page; KFD properties a few KiB. Anything bigger is not
// an attribute file and is refused rather than read into memory.
constexpr size_t kMaxAttributeBytes = 256u << 10;

}  // namespace

void DiagnosticSink::Add(std::string message) {
  if (kept_.size() >= limit_) {
    ++dropped_;
    return;
  }
  kept_.push_back({backend_, std::move(message)});
}

std::vector<Diagnostic> DiagnosticSink::Take() {
  std::vector<Diagnostic> out = std::move(kept_);
  if (dropped_ > 0) {
    out.push_back(
        {backend_, std::to_string(dropped_) + " more problems of the same kind were not listed"});
  }
  kept_.clear();
  dropped_ = 0;
  return out;
}

std::optional<uint64_t> ParseHexUint64(std::string_view s) {
  s = Trim(s);
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string QuoteForMessage(std::string_view text, size_t max_len) {
  std::string t = SanitizeUtf8(text.substr(0, max_len));
  for (char& c : t) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return "'" + t + (text.size() > max_len ? "...'" : "'");
}

SysfsReader::SysfsReader(std::string root) : root_(std::move(root)) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::string SysfsReader::Path(std::string_view rel) const {
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  return root_ + "/" + std::string(rel);
}

bool SysfsReader::Exists(std::string_view rel) const {
  std::error_code ec;
  return std::filesystem::exists(Path(rel), ec);
}

std::optional<std::string> SysfsReader::ReadText(std::string_view rel) const {
  std::error_code ec;
  const std::string path = Path(rel);
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  Result<std::string> text = ReadFileToString(path, kMaxAttributeBytes);
  if (!text.ok()) return std::nullopt;
  return std::string(Trim(*text));
}

std::optional<uint64_t> SysfsReader::ReadUint(std::string_view rel, DiagnosticSink* sink,
                                              uint64_t max) const {
  std::optional<std::string> text = ReadText(rel);
  if (!text) return std::nullopt;
  std::optional<uint64_t> v = ParseUint64(*text);
  if (!v || *v > max) {
    if (sink != nullptr) {
      sink->Add("ignored " + Path(rel) + ": " + QuoteForMessage(*text) +
                " is not a number between 0 and " + std::to_string(max));
    }
    return std::nullopt;
  }
  return v;
}

std::optional<int64_t> SysfsReader::ReadInt(std::string_view rel, DiagnosticSink* sink, int64_t min,
                                            int64_t max) const {
  std::optional<std::string> text = ReadText(rel);
  if (!text) return std::nullopt;
  std::optional<int64_t> v = ParseInt64(*text);
  if (!v || *v < min || *v > max) {
    if (sink != nullptr) {
      sink->Add("ignored " + Path(rel) + ": " + QuoteForMessage(*text) +
                " is not a number between " + std::to_string(min) + " and " + std::to_string(max));
    }
    return std::nullopt;
  }
  return v;
}

std::optional<uint64_t> SysfsReader::ReadHex(std::string_view rel, DiagnosticSink* sink,
                                             uint64_t max) const {
  std::optional<std::string> text = ReadText(rel);
  if (!text) return std::nullopt;
  std::optional<uint64_t> v = ParseHexUint64(*text);
  if (!v || *v > max) {
    if (sink != nullptr) {
      sink->Add("ignored " + Path(rel) + ": " + QuoteForMessage(*text) +
                " is not a hexadecimal number up to " + std::to_string(max));
    }
    return std::nullopt;
  }
  return v;
}

std::vector<std::string> SysfsReader::ListDir(std::string_view rel) const {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(Path(rel), ec);
  if (ec) return out;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::map<std::string, std::string>> SysfsReader::ReadKeyValues(
    std::string_view rel) const {
  std::optional<std::string> text = ReadText(rel);
  if (!text) return std::nullopt;
  std::map<std::string, std::string> out;
  for (const std::string& line : Split(*text, '\n')) {
    std::string_view l = Trim(line);
    const size_t space = l.find_first_of(" \t");
    if (space == std::string_view::npos || space == 0) continue;
    out[std::string(l.substr(0, space))] = std::string(Trim(l.substr(space + 1)));
  }
  return out;
}

std::string SysfsReader::ResolvedName(std::string_view rel) const {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::canonical(Path(rel), ec);
  if (ec) return "";
  return p.filename().string();
}

}  // namespace gpupool::gpu
