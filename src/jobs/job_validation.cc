#include "jobs/job_validation.h"

#include <regex>

namespace gpupool::jobs {
namespace {

// The grammar of github.com/distribution/reference (reference.go), which podman and
// docker both use, written as one anchored expression.
const std::regex& ImageRefRegex() {
  static const std::regex re = [] {
    const std::string alnum = "[a-z0-9]+";
    const std::string separator = "(?:[._]|__|-+)";
    const std::string path_component = alnum + "(?:" + separator + alnum + ")*";
    const std::string domain_component = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
    const std::string domain = domain_component + "(?:\\." + domain_component + ")*(?::[0-9]+)?";
    const std::string name =
        "(?:" + domain + "/)?" + path_component + "(?:/" + path_component + ")*";
    const std::string tag = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}";
    const std::string digest =
        "[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}";
    return std::regex(name + "(?::" + tag + ")?(?:@" + digest + ")?", std::regex::ECMAScript);
  }();
  return re;
}

bool HasControl(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

Status CheckPath(const std::string& field, const std::string& path) {
  if (path.empty() || path.front() != '/') {
    return Status::InvalidArgument(field + ": '" + path + "' must be an absolute path");
  }
  if (HasControl(path)) {
    return Status::InvalidArgument(field + ": the path contains a control character; rename it");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateImageRef(const std::string& ref, const std::string& field) {
  const std::string fix =
      ": use a reference such as docker.io/library/ubuntu:22.04, "
      "localhost/myimage:1 or an image id";
  if (ref.empty()) return Status::InvalidArgument(field + ": empty" + fix);
  if (ref.size() > 512)
    return Status::InvalidArgument(field + ": longer than 512 characters" + fix);
  if (ref.front() == '-') {
    return Status::InvalidArgument(field + ": '" + ref +
                                   "' starts with '-', which a tool would read as an option; "
                                   "an image reference never does" +
                                   fix);
  }
  if (HasControl(ref) || !std::regex_match(ref, ImageRefRegex())) {
    return Status::InvalidArgument(field + ": '" + ref + "' is not an image reference" + fix);
  }
  return Status::Ok();
}

Status ValidateEnvName(const std::string& name, const std::string& field) {
  bool ok = !name.empty() && name.size() <= 255 &&
            (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') ok = false;
  }
  if (!ok) {
    return Status::InvalidArgument(
        field + ": '" + name +
        "' is not a variable name: use letters, digits and '_', starting with a letter or '_'");
  }
  return Status::Ok();
}

Status ValidateSubmission(const Job& job) {
  if (!job.image.empty()) GP_RETURN_IF_ERROR(ValidateImageRef(job.image));
  for (const auto& [k, v] : job.env) {
    GP_RETURN_IF_ERROR(ValidateEnvName(k, "env." + k));
    if (v.find('\0') != std::string::npos) {
      return Status::InvalidArgument("env." + k + ": the value contains a NUL character");
    }
  }
  for (const std::string& a : job.command) {
    if (a.find('\0') != std::string::npos) {
      return Status::InvalidArgument("command: an argument contains a NUL character");
    }
  }
  if (!job.workdir.empty()) GP_RETURN_IF_ERROR(CheckPath("workdir", job.workdir));
  for (size_t i = 0; i < job.mounts.size(); ++i) {
    const std::string at = "mounts[" + std::to_string(i) + "]";
    GP_RETURN_IF_ERROR(CheckPath(at + ".source", job.mounts[i].source));
    GP_RETURN_IF_ERROR(CheckPath(at + ".target", job.mounts[i].target));
  }
  return Status::Ok();
}

}  // namespace gpupool::jobs
