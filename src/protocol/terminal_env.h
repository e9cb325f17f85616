// The variables of a client's terminal an interactive exec session takes along
// (`gpupool exec --pty`): TERM, COLORTERM, LANG, LANGUAGE and LC_*, so that clear, top and
// vi work and text is shown in the client's language. A closed set: they describe the
// terminal, nothing else of the client leaks into a job this way.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/status.h"

namespace gpupool::protocol {

inline constexpr size_t kMaxTerminalValueBytes = 256;
inline constexpr size_t kMaxTerminalVariables = 32;

bool IsTerminalVariable(std::string_view name);

// Reads `field` ("env") of an exec request or work item: an object of at most
// kMaxTerminalVariables terminal variables, each value at most kMaxTerminalValueBytes
// without NUL. Absent: empty. Errors name `where`.
Result<std::map<std::string, std::string>> TerminalEnvFromJson(const Json* field,
                                                               const std::string& where);

}  // namespace gpupool::protocol
