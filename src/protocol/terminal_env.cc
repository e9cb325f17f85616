#include "protocol/terminal_env.h"

#include <cctype>

namespace gpupool::protocol {

bool IsTerminalVariable(std::string_view name) {
  if (name == "TERM" || name == "COLORTERM" || name == "LANG" || name == "LANGUAGE") return true;
  if (name.size() <= 3 || name.substr(0, 3) != "LC_") return false;
  for (char c : name) {
    if (!std::isupper(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

Result<std::map<std::string, std::string>> TerminalEnvFromJson(const Json* field,
                                                               const std::string& where) {
  std::map<std::string, std::string> out;
  if (field == nullptr || field->is_null()) return out;
  if (!field->is_object() || field->size() > kMaxTerminalVariables) {
    return Status::InvalidArgument(where + ": an object of at most " +
                                   std::to_string(kMaxTerminalVariables) +
                                   " terminal variables, e.g. {\"TERM\": \"xterm\"}");
  }
  for (auto it = field->begin(); it != field->end(); ++it) {
    if (!IsTerminalVariable(it.key())) {
      return Status::InvalidArgument(where + "." + it.key() +
                                     ": only a terminal's TERM, COLORTERM, LANG, LANGUAGE and "
                                     "LC_* are passed");
    }
    if (!it->is_string() || it->get_ref<const std::string&>().size() > kMaxTerminalValueBytes ||
        it->get_ref<const std::string&>().find('\0') != std::string::npos) {
      return Status::InvalidArgument(where + "." + it.key() + ": a string of at most " +
                                     std::to_string(kMaxTerminalValueBytes) + " bytes");
    }
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace gpupool::protocol
