#include "cli/config_file.h"

#include <ini.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gpupool::cli {
namespace {

// libinih reads through this: it counts lines (Debian builds libinih without
// INI_HANDLER_LINENO) and catches lines longer than libinih's buffer, which it would
// otherwise split silently.
struct ParseState {
  std::string_view text;
  size_t pos = 0;
  int line = 0;
  std::string path;
  std::vector<ConfigEntry> entries;
  Status error;
};

char* ReadLine(char* str, int num, void* stream) {
  auto* st = static_cast<ParseState*>(stream);
  if (!st->error.ok() || st->pos >= st->text.size()) return nullptr;
  const size_t end = st->text.find('\n', st->pos);
  const size_t stop = end == std::string_view::npos ? st->text.size() : end + 1;
  ++st->line;
  if (stop - st->pos > static_cast<size_t>(num - 1)) {
    st->error = Status::InvalidArgument(
        st->path + " line " + std::to_string(st->line) + ": the line is longer than " +
        std::to_string(num - 2) + " characters: shorten it (repeat a repeatable key instead)");
    return nullptr;
  }
  std::memcpy(str, st->text.data() + st->pos, stop - st->pos);
  str[stop - st->pos] = '\0';
  st->pos = stop;
  return str;
}

// libinih takes `#` as a comment at the start of a line only (inline, ` ;` only): in
// `state-dir = /srv/x  # keep jobs here` the comment would be part of the value, for a
// path a new empty state directory. No option takes a value with a ` #` (or starting with
// `#`), and libinih has no quoting, so such a value is refused rather than guessed at.
Status CheckNoTrailingComment(const ParseState& st, const char* section, const char* name,
                              std::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '#') continue;
    if (i > 0 && !std::isspace(static_cast<unsigned char>(value[i - 1]))) continue;
    return Status::InvalidArgument(
        st.path + " line " + std::to_string(st.line) + ": [" + section + "] " + name + " = '" +
        std::string(value) +
        "': a `#` after `=` is not a comment here but part of the value: put the comment on "
        "a line of its own (or after ` ;`)");
  }
  return Status::Ok();
}

int OnEntry(void* user, const char* section, const char* name, const char* value) {
  auto* st = static_cast<ParseState*>(user);
  if (!st->error.ok()) return 0;
  if (*section == '\0') {
    st->error =
        Status::InvalidArgument(st->path + " line " + std::to_string(st->line) + ": key '" + name +
                                "' is outside a section: put it under [server] or [agent]");
    return 0;
  }
  if (Status s = CheckNoTrailingComment(*st, section, name, value); !s.ok()) {
    st->error = std::move(s);
    return 0;
  }
  st->entries.push_back({section, name, value, st->line});
  return 1;
}

std::string Where(const ConfigFile& cfg, const ConfigEntry& e) {
  return cfg.path + " line " + std::to_string(e.line) + ": [" + e.section + "] " + e.key;
}

std::string Join(const std::map<std::string, bool>& keys) {
  std::string s;
  for (const auto& [k, repeatable] : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

Result<ConfigFile> ParseConfigText(std::string_view text, const std::string& path) {
  ParseState st;
  st.text = text;
  st.path = path;
  const int rc = ini_parse_stream(&ReadLine, &st, &OnEntry, &st);
  if (!st.error.ok()) return st.error;
  if (rc > 0) {
    return Status::InvalidArgument(path + " line " + std::to_string(rc) +
                                   ": not a [section], a `key = value` line or a comment: fix "
                                   "or remove the line (a value goes on one line)");
  }
  if (rc < 0)
    return Status::Internal("cannot parse " + path + " (libinih error " + std::to_string(rc) + ")");
  ConfigFile cfg;
  cfg.path = path;
  cfg.entries = std::move(st.entries);
  return cfg;
}

Result<ConfigFile> ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  struct stat sb {};
  if (!in || ::stat(path.c_str(), &sb) != 0) {
    return Status::NotFound("cannot read the config file '" + path + "': " + std::strerror(errno) +
                            ": pass an existing file to --config");
  }
  if (!S_ISREG(sb.st_mode)) {
    return Status::InvalidArgument("the config file '" + path +
                                   "' is not a regular file: pass a file to --config");
  }
  std::ostringstream text;
  text << in.rdbuf();
  GP_ASSIGN_OR_RETURN(ConfigFile cfg, ParseConfigText(text.str(), path));
  cfg.mode = sb.st_mode & 07777;
  return cfg;
}

std::map<std::string, bool> ConfigKeysOf(const CLI::App& command) {
  std::map<std::string, bool> keys;
  for (const CLI::Option* opt : command.get_options()) {
    for (const std::string& name : opt->get_lnames()) {
      if (name == "help" || name == "config") continue;
      keys[name] = opt->get_items_expected_max() > 1;
    }
  }
  return keys;
}

Status CheckConfigKeys(const ConfigFile& cfg, const ConfigSchema& schema) {
  std::map<std::pair<std::string, std::string>, int> first_line;
  for (const ConfigEntry& e : cfg.entries) {
    auto sec = schema.find(e.section);
    if (sec == schema.end()) {
      std::string names;
      for (const auto& [s, keys] : schema) names += (names.empty() ? "[" : ", [") + s + "]";
      return Status::InvalidArgument(cfg.path + " line " + std::to_string(e.line) +
                                     ": unknown section [" + e.section + "]: the sections are " +
                                     names);
    }
    auto key = sec->second.find(e.key);
    if (key == sec->second.end()) {
      return Status::InvalidArgument(Where(cfg, e) + ": unknown key: the keys of [" + e.section +
                                     "] are the long options of `gpupool " + e.section +
                                     "` without their dashes: " + Join(sec->second));
    }
    auto [it, inserted] = first_line.emplace(std::pair{e.section, e.key}, e.line);
    if (!inserted && !key->second) {
      return Status::InvalidArgument(Where(cfg, e) + ": given again (first at line " +
                                     std::to_string(it->second) + "): keep one");
    }
  }
  return Status::Ok();
}

Status ApplyConfig(const ConfigFile& cfg, const std::vector<std::string>& sections,
                   const std::set<std::string>& secret_keys, CLI::App* command,
                   ConfigOrigins* origins) {
  // Decide first which options the file sets: adding results changes count().
  std::map<std::string, std::vector<const ConfigEntry*>> by_key;
  std::map<std::string, std::string> key_section;
  for (const std::string& section : sections) {
    for (const ConfigEntry& e : cfg.entries) {
      if (e.section != section) continue;
      auto [it, inserted] = key_section.emplace(e.key, section);
      if (!inserted && it->second != section) continue;  // an earlier section set it
      by_key[e.key].push_back(&e);
    }
  }
  std::vector<std::pair<CLI::Option*, std::vector<const ConfigEntry*>>> todo;
  for (const auto& [key, entries] : by_key) {
    CLI::Option* opt = command->get_option_no_throw("--" + key);
    if (opt == nullptr || opt->count() > 0) continue;  // another command's, or on the command line
    if (secret_keys.count(key) > 0 && (cfg.mode & 0007) != 0) {
      char mode[16];
      // Cannot fail or truncate: cfg.mode is at most 07777, four octal digits.
      (void)std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(cfg.mode));
      return Status::PermissionDenied(
          Where(cfg, *entries.front()) + ": the file is readable by every user (mode " + mode +
          "): chmod 600 " + cfg.path + ", or pass it in the environment instead");
    }
    todo.emplace_back(opt, entries);
    if (origins != nullptr) {
      origins->path = cfg.path;
      origins->by_key[key] = *entries.front();
    }
  }
  for (auto& [opt, entries] : todo) {
    const ConfigEntry* current = entries.front();
    try {
      for (const ConfigEntry* e : entries) {
        current = e;
        if (opt->get_expected_min() == 0) {
          opt->add_result(opt->get_flag_value(e->key, e->value));
        } else {
          opt->add_result(e->value);
        }
      }
      opt->run_callback();
    } catch (const CLI::Error& err) {
      return Status::InvalidArgument(Where(cfg, *current) + " = '" + current->value +
                                     "': " + err.what() + ": fix the value (see `gpupool " +
                                     command->get_name() + " --help`) or remove the line");
    }
  }
  return Status::Ok();
}

Status WithConfigOrigin(const Status& s, const ConfigOrigins& origins, std::string_view command) {
  const std::string& m = s.message();
  const ConfigEntry* named = nullptr;
  size_t first = std::string::npos;
  for (const auto& [key, entry] : origins.by_key) {
    // `--KEY` as a whole name: not the start of a longer one (--health-xid, --health-xids).
    const std::string flag = "--" + key;
    for (size_t at = m.find(flag); at != std::string::npos; at = m.find(flag, at + 1)) {
      const size_t end = at + flag.size();
      const bool whole = end == m.size() || !(std::isalnum(static_cast<unsigned char>(m[end])) ||
                                              m[end] == '-' || m[end] == '_');
      if (!whole) continue;
      if (at < first) {
        first = at;
        named = &entry;
      }
      break;
    }
  }
  if (named == nullptr) return s;
  ConfigFile cfg;
  cfg.path = origins.path;
  return Status(s.code(), Where(cfg, *named) + " = '" + named->value + "': " + m +
                              ": fix the value (see `gpupool " + std::string(command) +
                              " --help`) or remove the line");
}

}  // namespace gpupool::cli
