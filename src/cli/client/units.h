// Parsing and printing of the human units the client commands accept and show: sizes
// ("20G"), durations ("1:30:00", "90m", "1-00:00:00"), GPU shares ("0.25"), CPU counts
// ("0.5"), points in time ("2026-11-01", "7d" ago) and GPU amounts in thousandths.
//
// Parsers return kInvalidArgument with a message that says what is wrong and shows a
// valid example; callers prefix the option name ("--mem 16X: ..."). Dates and times are
// UTC, so output and scripts do not depend on the machine's time zone. Pure functions,
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool::cli {

// Bytes from "1024", "16G", "16GB", "16GiB", "512m", "1.5T": binary units (K = 1024).
Result<uint64_t> ParseSize(std::string_view text);

// A memory size for a job or node (--mem, --gpu-mem, --shm-size, --fake-mem): ParseSize's
// forms with their unit, at least 1M, or "0". A bare number is refused (Slurm reads
// "--mem 4000" as megabytes, Kubernetes as bytes; either guess is wrong for someone), and
// so is a size below 1 MiB (no job needs less; "10B" is a typo). The message shows what the
// number probably meant, with its unit ("10": "write 10G or 10240M").
inline constexpr uint64_t kMinMemorySize = uint64_t{1} << 20;
Result<uint64_t> ParseMemorySize(std::string_view text);

// Seconds from "90" (minutes, as Slurm reads it), "MM:SS", "HH:MM:SS", "D-HH",
// "D-HH:MM", "D-HH:MM:SS", or unit forms "45s", "90m", "2h", "1d", "1h30m".
Result<int64_t> ParseDuration(std::string_view text);
// ParseDuration's forms without a bare number, for durations that are not time limits
// (--grace, --min-runtime): "60" would be 60 minutes there, where Slurm's GraceTime and
// Kubernetes' grace periods count seconds. The message says to give a unit.
Result<int64_t> ParseDurationWithUnit(std::string_view text);

// Thousandths of one GPU from "0.25" or "25%"; must be in (0, 1] and at least 0.001.
Result<int> ParseGpuShare(std::string_view text);

// Thousandths of a CPU from "2" or "0.5"; must be >= 0 with at most 3 decimals' worth.
Result<int64_t> ParseCpus(std::string_view text);

// Microseconds since the epoch from "2026-11-01", "2026-11-01T08:30[:00][Z]",
// "2026-11-01 08:30[:00]" (UTC), "now", or a duration ago ("7d", "12h", "90m").
Result<int64_t> ParseTimePoint(std::string_view text, int64_t now_us);

// "0.25", "1", "2.5": an amount of GPUs given in thousandths, without trailing zeros.
std::string FormatMilli(int64_t milli);
// "512 B", "1.5 KiB", "20 GiB": binary units, at most one decimal.
std::string FormatBytes(uint64_t bytes);
// "45s", "3m12s", "1h02m", "2d03h": compact, two units at most.
std::string FormatDuration(int64_t seconds);
// "2026-11-21T12:06:39Z"; "-" for 0.
std::string FormatTimeUtc(int64_t micros);

}  // namespace gpupool::cli
