// Compute-unit masks for shares of AMD GPUs (docs/sharing.md, "AMD"): which CUs of its one
// visible device a share is asked to use, through ROCr's HSA_CU_MASK. Advisory: the job's
// own process can change its environment before the runtime reads it, so this keeps
// well-behaved shares apart and holds nothing against a program that wants more.
//
// A CU list is HSA_CU_MASK's CU_list in its ID-list form: "0-37", "0-9,20-29".
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpupool::agent {

// How many of `total` CUs a share of `milli` thousandths gets: its part rounded down, at
// least 1 (0 when total is 0).
int CuCountForShare(int total, int milli);

// The CU numbers of `list` below `total`; malformed parts are skipped.
std::vector<int> ParseCuList(std::string_view list, int total);

// "0-9,20-29" for {0..9, 20..29} (sorted, without repeats).
std::string FormatCuList(const std::vector<int>& cus);

struct CuChoice {
  std::string list;          // empty when total is 0
  bool overlapping = false;  // too few free CUs: some are shared with `taken` shares
};

// A share's CUs: CuCountForShare(total, milli) of them, the lowest not in any list of
// `taken` (the other shares running on the GPU), topped up with the lowest taken ones
// when too few are free.
CuChoice ChooseCus(int total, int milli, const std::vector<std::string>& taken);

}  // namespace gpupool::agent
