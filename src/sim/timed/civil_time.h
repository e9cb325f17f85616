// Parses the calendar timestamps some traces use ("2017-09-04 10:30:41", UTC) into
// seconds since the Unix epoch. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpupool::sim {

// Days from 1970-01-01 to the given proleptic Gregorian date (month 1..12, day 1..31).
int64_t DaysFromCivil(int64_t year, int month, int day);

// Accepts "YYYY-MM-DD HH:MM:SS", "YYYY-MM-DDTHH:MM:SS" (optionally ending in 'Z'),
// "YYYY-MM-DD", or a plain number of seconds (decimals rounded down). Returns nothing
// for anything else, including impossible dates such as 2017-02-30.
std::optional<int64_t> ParseTimestampSeconds(std::string_view text);

}  // namespace gpupool::sim
