#include "cli/client/submit_io.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "common/strings.h"
#include "jobs/output_pattern.h"

namespace gpupool::cli {
namespace {

bool IsName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// The first text in `j` (a string value or an object's key) that is not UTF-8, and in
// *where the key or the 1-based index it is under (empty for `j` itself).
std::optional<std::string> FindNonUtf8(const OrderedJson& j, std::string* where) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    return IsUtf8(s) ? std::nullopt : std::optional<std::string>(s);
  }
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      if (auto bad = FindNonUtf8(j[i], where)) {
        if (where->empty()) *where = std::to_string(i + 1);
        return bad;
      }
    }
  } else if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      if (!IsUtf8(key)) return key;
      if (auto bad = FindNonUtf8(value, where)) {
        if (where->empty()) *where = key;
        return bad;
      }
    }
  }
  return std::nullopt;
}

std::string ToUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

Status ExportError(std::string_view value, const std::string& why) {
  return Status::InvalidArgument("--export " + std::string(value) + ": " + why);
}

bool IsContainerJob(const SubmitFlags& f) {
  if (f.image) return true;
  return std::any_of(f.env.begin(), f.env.end(), [](const std::string& kv) {
    return kv.find('=') == std::string::npos && kv.find(':') != std::string::npos;
  });
}

}  // namespace

bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8CharLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string EscapeNonUtf8(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (const size_t len = Utf8CharLength(s, i); len > 0) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      const auto c = static_cast<unsigned char>(s[i++]);
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Status CheckSubmissionText(const OrderedJson& body) {
  if (!body.is_object()) return Status::Ok();
  const std::string name_fix = "give a name in UTF-8 text";
  const std::string file_fix =
      "choose a file name in UTF-8 text (rename the file after the job if it must have those "
      "bytes)";
  for (const auto& [key, value] : body.items()) {
    std::string where;
    const std::optional<std::string> bad = FindNonUtf8(value, &where);
    if (!bad) continue;
    std::string option = key;
    std::string fix = "give UTF-8 text";
    if (key == "command") {
      option = "the command's word " + where;
      fix =
          "rename the file to a UTF-8 name, or have a script make those bytes when it runs "
          "(e.g. with printf '\\xe9')";
    } else if (key == "env") {
      option = where.empty() ? "--env" : "--env " + EscapeNonUtf8(where);
      fix = "set the variable in the job's script instead (e.g. with printf '\\xe9')";
    } else if (key == "workdir") {
      option = "--workdir (by default the current directory)";
      fix =
          "work in a directory whose path is UTF-8: rename it, or link to it from one "
          "(ln -s DIR ~/work) and give --workdir ~/work";
    } else if (key == "output" || key == "error") {
      option = "--" + key;
      fix = file_fix;
    } else if (key == "name") {
      option = "--job-name";
      fix = name_fix;
    } else if (key == "project") {
      option = "--project";
      fix = name_fix;
    } else if (key == "image" || key == "array") {
      option = "--" + key;
    } else if (key == "environment") {
      option = "--env NAME:VERSION";
    } else if (key == "mounts") {
      option = "--mount";
      fix = "mount a path whose name is UTF-8 (link to it from one: ln -s DIR ~/data)";
    } else if (key == "request") {
      option = "--gpu-model";
    }
    return Status::InvalidArgument(
        option + " '" + EscapeNonUtf8(*bad) +
        "' is not UTF-8 text, which a job cannot hold (the bytes would be replaced, and the "
        "job would use another value than this one): " +
        fix);
  }
  return Status::Ok();
}

bool AlwaysDenied(std::string_view name) {
  static constexpr std::string_view kNames[] = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
                                                "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                "GPU_DEVICE_ORDINAL",   "MASTER_ADDR",
                                                "MASTER_PORT",          "RANK",
                                                "WORLD_SIZE",           "LOCAL_RANK",
                                                "LOCAL_WORLD_SIZE"};
  if (StartsWith(name, "GPUPOOL_") || StartsWith(name, "CUDA_MPS_") || StartsWith(name, "PET_")) {
    return true;
  }
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool DeniedFromExport(std::string_view name) {
  static constexpr std::string_view kNames[] = {"LD_PRELOAD", "LD_AUDIT", "PWD",
                                                "OLDPWD",     "SHLVL",    "_"};
  return AlwaysDenied(name) ||
         std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

Result<ExportSpec> ParseExport(std::string_view text) {
  ExportSpec spec;
  const std::string value(Trim(text));
  if (value.empty()) {
    return ExportError("''", "give ALL, NONE or the variables, e.g. --export=PATH,HOME");
  }
  const std::string upper = ToUpper(value);
  if (upper == "ALL") return spec;
  if (upper == "NONE") {
    spec.all = false;
    return spec;
  }
  spec.all = false;
  const std::vector<std::string> parts = Split(value, ',');
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const std::string word = ToUpper(std::string(Trim(part)));
    if (word == "ALL" && i == 0) {
      spec.all = true;
      continue;
    }
    if (word == "NONE" || word == "ALL") {
      return ExportError(value, word +
                                    " comes alone (or ALL first, as in ALL,NAME=VALUE); "
                                    "NONE takes no variables: give the ones you want, e.g. "
                                    "--export=PATH,HOME");
    }
    const size_t eq = part.find('=');
    const std::string name = part.substr(0, eq);
    if (!IsName(name)) {
      return ExportError(value, "'" + part +
                                    "' is not NAME or NAME=VALUE (a value with a comma: pass "
                                    "it with --env NAME=VALUE)");
    }
    if (AlwaysDenied(name)) {
      return ExportError(value, name +
                                    " is set by gpupool in every job (GPUPOOL_*, the GPU "
                                    "visibility and rendezvous variables); leave it out");
    }
    std::optional<std::string> v;
    if (eq != std::string::npos) v = part.substr(eq + 1);
    spec.vars.emplace_back(name, std::move(v));
  }
  return spec;
}

Result<std::vector<std::pair<std::string, std::string>>> ExportedVariables(
    const ExportSpec& spec, const std::vector<std::string>& environ) {
  std::map<std::string, std::string> here;  // the submitting environment
  for (const std::string& kv : environ) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    here.emplace(kv.substr(0, eq), kv.substr(eq + 1));  // the first of a name, as getenv
  }
  std::map<std::string, std::string> out;
  std::map<std::string, bool> named;
  for (const auto& [name, value] : spec.vars) named[name] = true;
  if (spec.all) {
    for (const auto& [name, value] : here) {
      if (!DeniedFromExport(name) && IsName(name)) out[name] = value;
    }
  }
  for (const auto& [name, value] : spec.vars) {
    if (value) {
      out[name] = *value;
    } else if (auto it = here.find(name); it != here.end()) {
      out[name] = it->second;  // a name not set here is left out, as Slurm does
    }
  }
  size_t bytes = 0;
  std::vector<std::pair<size_t, std::string>> sizes;
  for (const auto& [name, value] : out) {
    if (!IsUtf8(value)) {
      return Status::InvalidArgument(
          "--export: the value of " + name +
          " is not UTF-8 text, which a job cannot store; unset it, or name the variables the "
          "job needs (--export=PATH,HOME)");
    }
    bytes += name.size() + value.size() + 2;
    sizes.emplace_back(name.size() + value.size() + 2, name);
  }
  if (bytes > kMaxExportBytes || out.size() > 1000) {
    std::sort(sizes.rbegin(), sizes.rend());
    std::string largest;
    for (size_t i = 0; i < sizes.size() && i < 3; ++i) {
      largest +=
          (i > 0 ? ", " : "") + sizes[i].second + " (" + std::to_string(sizes[i].first) + " bytes)";
    }
    return Status::InvalidArgument(
        "--export: the environment to export is " + std::to_string(bytes) + " bytes in " +
        std::to_string(out.size()) + " variables, more than a job stores (" +
        std::to_string(kMaxExportBytes) + " bytes, 1000 variables); the largest: " + largest +
        ". Name the variables the job needs (--export=PATH,HOME,...) or use --export=NONE");
  }
  return std::vector<std::pair<std::string, std::string>>(out.begin(), out.end());
}

Status AddExport(const SubmitFlags& flags, const std::vector<std::string>& environ,
                 OrderedJson* body) {
  // A container has its own PATH, libraries and home: the host's shell is no fit unless
  // asked for.
  if (!flags.export_env && IsContainerJob(flags)) return Status::Ok();
  GP_ASSIGN_OR_RETURN(ExportSpec spec, ParseExport(flags.export_env.value_or("ALL")));
  GP_ASSIGN_OR_RETURN(auto vars, ExportedVariables(spec, environ));
  if (vars.empty()) return Status::Ok();
  OrderedJson env = OrderedJson::object();
  for (auto& [name, value] : vars) env[name] = std::move(value);
  if (const auto it = body->find("env"); it != body->end()) {
    for (const auto& [name, value] : it->items()) env[name] = value;  // --env wins
  }
  (*body)["env"] = std::move(env);
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> TerminalVariables(
    const std::vector<std::string>& environ) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& kv : environ) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = kv.substr(0, eq);
    if (name == "TERM" || name == "COLORTERM" || name == "LANG" || name == "LANGUAGE" ||
        (StartsWith(name, "LC_") && IsName(name))) {
      if (IsUtf8(kv)) out.emplace_back(name, kv.substr(eq + 1));
    }
  }
  return out;
}

Status AddScript(const std::string& script_name, const std::string& content, uint64_t file_bytes,
                 OrderedJson* body) {
  const uint64_t bytes = std::max<uint64_t>(file_bytes, content.size());
  if (bytes > kMaxScriptBytes) {
    return Status::InvalidArgument(
        "script '" + script_name + "' is " + std::to_string(bytes) +
        " bytes; a job keeps a copy of at most " + std::to_string(kMaxScriptBytes) +
        " (1 MiB): make it smaller (move data into files it reads), or run it in place with "
        "-- " +
        script_name + " (later edits then change the job)");
  }
  if (content.find('\0') != std::string::npos || !IsUtf8(content)) {
    return Status::InvalidArgument(
        "script '" + script_name +
        "' is not UTF-8 text, so no copy of it can be stored; run it in place with -- " +
        script_name + " (later edits then change the job)");
  }
  // The job runs the script itself: the kernel reads its interpreter from a first line
  // "#!..." and nothing else (sbatch refuses the same).
  if (StartsWith(content, "\xEF\xBB\xBF")) {
    return Status::InvalidArgument(
        "script '" + script_name +
        "' starts with a byte-order mark (the bytes EF BB BF some Windows editors write) "
        "before its #! line, so it cannot run: remove it with sed -i '1s/^\\xEF\\xBB\\xBF//' " +
        script_name);
  }
  if (!StartsWith(content, "#!")) {
    return Status::InvalidArgument("script '" + script_name +
                                   "' has no #! line, so it cannot run as a program: make its "
                                   "first line name its interpreter, e.g. #!/bin/bash, or "
                                   "submit it as -- bash " +
                                   script_name);
  }
  (*body)["script"] = content;
  return Status::Ok();
}

Status AddOutputFlags(const SubmitFlags& flags, bool workdir_writable, OrderedJson* body) {
  const int tasks = body->contains("request") ? (*body)["request"].value("tasks", 1) : 1;
  const bool mpi = body->value("mpi", false);
  std::string output;
  if (flags.output) {
    output = *flags.output;
    GP_RETURN_IF_ERROR(jobs::CheckOutputPattern("--output", output));
  } else if (!workdir_writable) {
    if (flags.error) {
      return Status::InvalidArgument("--error " + *flags.error +
                                     ": give --output as well (the working directory is not "
                                     "writable, so there is no default output file)");
    }
    return Status::Ok();
  } else {
    // As Slurm's slurm-%j.out and slurm-%A_%a.out; a gang's tasks each have their own.
    output = flags.array ? "gpupool-%A_%a" : "gpupool-%j";
    output += tasks > 1 && !mpi ? ".%t.out" : ".out";
  }
  for (const auto& [option, pattern] : {std::pair<std::string, std::string>{"--output", output},
                                        {"--error", flags.error.value_or("")}}) {
    if (pattern.empty()) continue;
    GP_RETURN_IF_ERROR(jobs::CheckOutputPattern(option, pattern));
    if (tasks > 1 && !mpi && !jobs::PatternNamesTask(pattern) && pattern != "/dev/null") {
      return Status::InvalidArgument(option + " " + pattern + ": the job's " +
                                     std::to_string(tasks) +
                                     " tasks would write one file; put %t (the task index) in "
                                     "it, e.g. gpupool-%j.%t.out");
    }
  }
  (*body)["output"] = output;
  if (flags.error) (*body)["error"] = *flags.error;
  return Status::Ok();
}

}  // namespace gpupool::cli
