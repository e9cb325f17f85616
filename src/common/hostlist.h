// Slurm hostlist expressions: "node[01-03,07],gpu5" is node01, node02, node03, node07 and
// gpu5. A bracket holds numbers and ranges; a range keeps the zero padding of its first
// number ("[08-10]" is 08, 09, 10). Several brackets in one name multiply out
// ("r[1-2]n[1-2]"), as in Slurm. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool {

// The most names one expression may expand to: what a job's --nodelist or --exclude may
// name (jobs::kMaxNodeNames, the server's bound). A pool has far fewer nodes, and a typo
// like [1-1000000] is refused before anything is expanded.
inline constexpr size_t kMaxHostListNames = 4096;

// How many names `text` writes, duplicates counted (saturating at kHostListSizeSaturated),
// found without expanding it: a huge range costs nothing. Errors as ExpandHostList's for
// a mistake in its form.
inline constexpr uint64_t kHostListSizeSaturated = uint64_t{1} << 60;
Result<uint64_t> HostListSize(std::string_view text);

// The names of `text`, in the order written, duplicates dropped (the first kept).
// Errors (kInvalidArgument) say what is wrong with which part: an empty name, an unclosed
// bracket, a range whose end is below its start, more than kMaxHostListNames names (counted
// before anything is expanded). A long expression is cut in the messages.
Result<std::vector<std::string>> ExpandHostList(std::string_view text);

}  // namespace gpupool
