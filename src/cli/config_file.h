// The daemons' configuration file (/etc/gpupool/gpupool.conf, `--config PATH`).
//
// An INI file read with Debian's libinih: a [server] section for `gpupool server`, an
// [agent] section for `gpupool agent`, both for `gpupool up`. A key is a long option of
// that command without its dashes (`port = 8421` is `--port 8421`); a repeatable option
// is given by repeating its key; a flag takes true or false. Options given on the command
// line win over the file. Unknown sections and keys, a key given twice, a bad value and a
// syntax error are errors naming the file, the line, the key and the fix.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace CLI {
class App;
}

namespace gpupool::cli {

// Where the daemons look when --config is not given: used only when it exists.
inline constexpr const char* kDefaultConfigPath = "/etc/gpupool/gpupool.conf";

struct ConfigEntry {
  std::string section;
  std::string key;
  std::string value;
  int line = 0;
};

struct ConfigFile {
  std::string path;  // for messages
  mode_t mode = 0600;
  std::vector<ConfigEntry> entries;  // in file order
};

// Syntax only: sections, `key = value` lines, comments (# or ; at the start of a line,
// ` ;` after a value). Keys outside a section and over-long lines are errors.
Result<ConfigFile> ParseConfigText(std::string_view text, const std::string& path);
Result<ConfigFile> ReadConfigFile(const std::string& path);

// Section -> key -> whether the key may repeat (an option taking several values).
using ConfigSchema = std::map<std::string, std::map<std::string, bool>>;

// The keys a section accepts: the long options of `command` (less help and config).
std::map<std::string, bool> ConfigKeysOf(const CLI::App& command);

// Checks every section and key against `schema`, and that a key that takes one value
// appears once per section.
Status CheckConfigKeys(const ConfigFile& cfg, const ConfigSchema& schema);

// Where the file set the options ApplyConfig applied: key -> its (first) entry.
struct ConfigOrigins {
  std::string path;
  std::map<std::string, ConfigEntry> by_key;
};

// Sets the options of `command` from the entries of `sections` (in that order; a key
// already set by an earlier section is skipped). An option given on the command line is
// left alone. Keys that `command` lacks are skipped (they belong to the section's other
// command). A key in `secret_keys` is refused when the file is readable by others.
// `origins`, when given, gets the entries that set an option.
Status ApplyConfig(const ConfigFile& cfg, const std::vector<std::string>& sections,
                   const std::set<std::string>& secret_keys, CLI::App* command,
                   ConfigOrigins* origins = nullptr);

// A bad value found after parsing (checked against another option, or by the module that
// takes it) whose message names `--KEY`: when the file set that option, the message says
// so as for a bad value caught while parsing (file, line, key, value, fix). The first
// option the message names that the file set is the one named; otherwise `s` as it is.
Status WithConfigOrigin(const Status& s, const ConfigOrigins& origins, std::string_view command);

}  // namespace gpupool::cli
