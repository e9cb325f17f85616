// Small string helpers that the standard library lacks. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpupool {

std::string_view Trim(std::string_view s);
std::vector<std::string> Split(std::string_view s, char sep);  // keeps empty fields
bool StartsWith(std::string_view s, std::string_view prefix);
std::string ToLower(std::string_view s);

// printf into a std::string of whatever length the text needs, for the numbers
// std::to_string cannot write ("%.1f", "%g", "%04x"). Not fmt: the binaries that never log
// (the shim, gpupool-exec) link this library without libfmt. An invalid format gives "".
std::string StrFormat(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Whole-string numeric parses: no sign games, no trailing junk, no overflow.
std::optional<int64_t> ParseInt64(std::string_view s);
std::optional<uint64_t> ParseUint64(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);

// The length of the UTF-8 character at s[i] (i < s.size()), or 0 where the bytes there
// are none (a stray continuation byte, a truncated sequence, an overlong form, a surrogate
// or a code point past U+10FFFF): what nlohmann::json would replace when dumping.
size_t Utf8CharLength(std::string_view s, size_t i);

// Replaces bytes that are not valid UTF-8 with '?', so text from drivers and files
// can be printed and put into JSON safely.
std::string SanitizeUtf8(std::string_view s);

// Whether `s` holds a control character: C0 (below 0x20), DEL, or C1 (U+0080..U+009F) as
// UTF-8, which terminals may take for the start of an escape sequence.
bool HasControlCharacter(std::string_view s);

// Whether `s` (UTF-8) holds a character that shows as nothing or changes how the text
// around it shows: the soft hyphen, zero-width spaces and joiners, bidirectional marks,
// embeddings, overrides and isolates, invisible operators, Hangul fillers, variation
// selectors, the byte-order mark and tag characters. A name with one prints like
// another ("vision" and "vision" + U+200B) or reversed (U+202E). Malformed UTF-8 is not
// looked into (SanitizeUtf8).
bool HasInvisibleCharacter(std::string_view s);

// Whether `s` (UTF-8) has letters of two or more of the Latin, Greek and Cyrillic
// scripts, whose letters print alike: "vіsion" with a Cyrillic і lists like "vision".
// Digits, punctuation and other scripts do not count. Malformed UTF-8 is not looked into.
bool MixesLookAlikeScripts(std::string_view s);

// Standard base64 (RFC 4648, with padding), for bytes carried in JSON. Decoding refuses
// anything else (other characters, bad padding, a wrong length): std::nullopt.
std::string Base64Encode(std::string_view bytes);
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace gpupool
