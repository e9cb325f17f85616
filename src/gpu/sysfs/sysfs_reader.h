// Reading small kernel attribute files (sysfs) below an injectable root, and a bounded
// collector of Diagnostics. Shared by the sysfs/PCI backend and the ROCm sysfs/KFD
// fallback.
//
// sysfs files come from the kernel, but tests and odd drivers hand us empty, garbled or
// absurd values: an absent file is normal and silent, a present file that does not parse
// becomes a Diagnostic naming the path, never a crash. Not thread-safe; one per Discover().
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu_info.h"

namespace gpupool::gpu {

// Collects Diagnostics for one backend, keeping at most `limit` so a driver failing the
// same call for 1000 devices yields a short, readable list plus one summary line.
class DiagnosticSink {
 public:
  explicit DiagnosticSink(std::string backend, size_t limit = 32)
      : backend_(std::move(backend)), limit_(limit) {}

  void Add(std::string message);
  size_t size() const { return kept_.size() + dropped_; }
  // Returns the kept Diagnostics, followed by a summary of the dropped ones if any.
  std::vector<Diagnostic> Take();

 private:
  std::string backend_;
  size_t limit_;
  std::vector<Diagnostic> kept_;
  size_t dropped_ = 0;
};

// Parses hexadecimal text with or without "0x" ("0x10de", "030200", "6a3a5c0d").
std::optional<uint64_t> ParseHexUint64(std::string_view s);

class SysfsReader {
 public:
  explicit SysfsReader(std::string root);

  const std::string& root() const { return root_; }
  // Absolute path of `rel` below the root.
  std::string Path(std::string_view rel) const;
  bool Exists(std::string_view rel) const;

  // The file's text without surrounding white space; nullopt when absent or unreadable.
  std::optional<std::string> ReadText(std::string_view rel) const;

  // Numeric attributes. Absent files give nullopt silently; a file that is present but
  // empty, non-numeric or out of [min, max] gives nullopt and a Diagnostic in `sink`.
  std::optional<uint64_t> ReadUint(std::string_view rel, DiagnosticSink* sink,
                                   uint64_t max = UINT64_MAX) const;
  std::optional<int64_t> ReadInt(std::string_view rel, DiagnosticSink* sink, int64_t min,
                                 int64_t max) const;
  std::optional<uint64_t> ReadHex(std::string_view rel, DiagnosticSink* sink,
                                  uint64_t max = UINT64_MAX) const;

  // Names in a directory, sorted; empty when absent.
  std::vector<std::string> ListDir(std::string_view rel) const;

  // "key value" lines (KFD topology properties); later duplicates win, other lines are
  // ignored. nullopt when the file is absent.
  std::optional<std::map<std::string, std::string>> ReadKeyValues(std::string_view rel) const;

  // Last path component of the directory that `rel` resolves to (following symlinks),
  // for example the PCI bus id behind /sys/class/drm/card0/device. Empty on failure.
  std::string ResolvedName(std::string_view rel) const;

 private:
  std::string root_;
};

// 'text' shortened and made printable, for messages about garbled files.
std::string QuoteForMessage(std::string_view text, size_t max_len = 40);

}  // namespace gpupool::gpu
