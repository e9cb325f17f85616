#include "agent/cdi_spec.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>

#include "agent/job_files.h"
#include "common/file_util.h"
#include "common/json.h"
#include "common/strings.h"
#include "common/subprocess.h"
#include "gpu/fake/stand_in_library.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;

// What NVIDIA's own spec mounts besides libraries: the management tool, the core-dump
// tool, the persistence daemon (whose socket nvidia-smi looks for) and the MPS pair.
constexpr const char* kNvidiaTools[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server"};
constexpr const char* kToolDirs[] = {"/usr/bin", "/usr/sbin", "/bin", "/sbin"};

std::string Join(const std::string& root, const std::string& path) {
  std::string r = root;
  while (!r.empty() && r.back() == '/') r.pop_back();
  return r + path;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A driver version used in a path only if it cannot walk out of the directory.
bool IsPlainVersion(std::string_view v) {
  return !v.empty() && v.size() <= 32 &&
         std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit(c) || c == '.'; }) &&
         v != "." && v != "..";
}

std::optional<unsigned> UvmMajor(const std::string& host_root) {
  Result<std::string> devices = ReadFileToString(Join(host_root, "/proc/devices"), 1u << 20);
  if (!devices.ok()) return std::nullopt;
  bool character = false;
  for (const std::string& line : Split(*devices, '\n')) {
    const std::string_view l = Trim(line);
    if (l == "Character devices:") character = true;
    if (l == "Block devices:") character = false;
    const size_t space = l.find(' ');
    if (!character || space == std::string_view::npos || Trim(l.substr(space)) != "nvidia-uvm") {
      continue;
    }
    std::optional<int64_t> major = ParseInt64(l.substr(0, space));
    if (major && *major > 0 && *major < 4096) return static_cast<unsigned>(*major);
  }
  return std::nullopt;
}

bool IsNvidiaNode(const gpu::NodeInfo& node) {
  return node.nvidia && std::any_of(node.gpus.begin(), node.gpus.end(), [](const gpu::GpuInfo& g) {
           return g.vendor == gpu::Vendor::kNvidia;
         });
}

// Every hostPath of device nodes and mounts in a spec's edits.
void CollectHostPaths(const Json& edits, std::vector<std::string>* nodes,
                      std::vector<std::string>* mounts) {
  if (!edits.is_object()) return;
  for (const char* key : {"deviceNodes", "mounts"}) {
    if (!edits.contains(key) || !edits[key].is_array()) continue;
    for (const Json& n : edits[key]) {
      if (n.is_object() && n.contains("hostPath") && n["hostPath"].is_string()) {
        (std::string(key) == "mounts" ? mounts : nodes)->push_back(n["hostPath"]);
      }
    }
  }
}

}  // namespace

std::vector<std::string> FindNvidiaDriverFiles(const std::string& version,
                                               const std::string& host_root) {
  std::vector<std::string> out;
  for (const char* tool : kNvidiaTools) {
    for (const char* dir : kToolDirs) {
      const std::string path = std::string(dir) + "/" + tool;
      if (::access(Join(host_root, path).c_str(), X_OK) == 0) {
        out.push_back(path);
        break;
      }
    }
  }
  if (IsPlainVersion(version)) {
    const std::string dir = "/lib/firmware/nvidia/" + version;
    std::error_code ec;
    for (fs::directory_iterator it(Join(host_root, dir), ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code fec;
      if (StartsWith(name, "gsp") && name.size() > 7 &&
          name.compare(name.size() - 4, 4, ".bin") == 0 && it->is_regular_file(fec)) {
        out.push_back(dir + "/");
        out.back() += name;
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> EnsureNvidiaUvmNodes(const std::string& dev_root,
                                              const std::string& host_root) {
  const std::string uvm = dev_root + "/nvidia-uvm";
  const std::string tools = dev_root + "/nvidia-uvm-tools";
  if (Exists(uvm) && Exists(tools)) return {};
  std::vector<std::string> notes;
  std::optional<unsigned> major = UvmMajor(host_root);
  const std::string modprobe = Join(host_root, "/usr/bin/nvidia-modprobe");
  if (!major && ::access(modprobe.c_str(), X_OK) == 0) {
    // What CUDA itself runs on first use: loads nvidia-uvm and creates the nodes in /dev.
    const std::vector<std::string> argv = {modprobe, "-u", "-c=0"};
    SpawnOptions spawn;
    spawn.search_path = false;
    Result<CommandResult> r = RunCommandCapture(argv, 30'000, spawn, {});
    notes.push_back(!r.ok()          ? r.status().message()
                    : r->Succeeded() ? "ran nvidia-modprobe -u -c=0 to load nvidia-uvm"
                                     : r->Failure(argv, 30'000));
    if (Exists(uvm) && Exists(tools)) return notes;
    major = UvmMajor(host_root);
  }
  if (!major) {
    notes.push_back(uvm +
                    " is missing and the nvidia-uvm module is not loaded (modprobe nvidia-uvm, "
                    "or run a CUDA program once): CUDA in containers will find no device");
    return notes;
  }
  for (unsigned minor : {0u, 1u}) {
    const std::string& path = minor == 0 ? uvm : tools;
    if (Exists(path)) continue;
    if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(*major, minor)) != 0 ||
        ::chmod(path.c_str(), 0666) != 0) {
      notes.push_back("cannot create " + path + ": " + std::strerror(errno));
    } else {
      notes.push_back("created " + path + " (nvidia-uvm is loaded; CUDA had not used it yet)");
    }
  }
  return notes;
}

Result<gpu::CdiOptions> HostCdiOptions(gpu::NodeInfo* node, const CdiSpecOptions& options,
                                       std::vector<std::string>* notes) {
  std::vector<std::string> ignored;
  if (notes == nullptr) notes = &ignored;
  gpu::CdiOptions c;
  c.kind = options.kind;
  c.host_dev_root = options.dev_root.empty() ? "/dev" : options.dev_root;
  c.hook_path = options.hook_path;
  if (!IsNvidiaNode(*node)) return c;  // AMD specs mount nothing of the host's driver

  const std::vector<std::string>& libs = node->nvidia->libraries;
  if (options.fake_node) {
    const bool all_here =
        std::all_of(libs.begin(), libs.end(), [](const std::string& l) { return Exists(l); });
    if (all_here) return c;
    if (options.stand_in_root.empty()) {
      return Status::FailedPrecondition(
          "the fake node's driver libraries are not on this host and there is no directory "
          "for stand-ins");
    }
    for (const std::string& lib : libs) {
      if (lib.empty() || lib[0] != '/') continue;  // ExportCdi leaves these out
      GP_RETURN_IF_ERROR(gpu::WriteStandInLibrary(Join(options.stand_in_root, lib)));
    }
    c.host_file_root = options.stand_in_root;
    notes->push_back("stand-in driver libraries for the fake node under " + options.stand_in_root);
    return c;
  }

  if (options.host_root != "/") c.host_file_root = options.host_root;
  for (std::string& n : EnsureNvidiaUvmNodes(c.host_dev_root, options.host_root)) {
    notes->push_back(std::move(n));
  }
  std::vector<std::string>& control = node->nvidia->control_nodes;
  for (const char* name : {"nvidia-uvm", "nvidia-uvm-tools"}) {
    const std::string path = std::string("/dev/") + name;
    if (Exists(c.host_dev_root + "/" + name) &&
        std::find(control.begin(), control.end(), path) == control.end()) {
      control.push_back(path);
    }
  }
  c.driver_files = FindNvidiaDriverFiles(node->nvidia->version, options.host_root);
  return c;
}

std::string CdiSpecPath(const std::string& cdi_dir, const std::string& kind) {
  std::string name;
  for (char c : kind) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    name += ok ? c : '_';
  }
  return cdi_dir + "/gpupool-" + name + ".json";
}

Result<std::string> WriteNodeCdiSpec(const gpu::NodeInfo& node, const CdiSpecOptions& options,
                                     std::vector<std::string>* notes) {
  gpu::NodeInfo host_node = node;
  GP_ASSIGN_OR_RETURN(gpu::CdiOptions cdi, HostCdiOptions(&host_node, options, notes));
  GP_ASSIGN_OR_RETURN(std::string text, gpu::ExportCdi(host_node, cdi));
  GP_ASSIGN_OR_RETURN(Json spec, ParseJson(text, "CDI spec"));
  std::vector<std::string> nodes;
  std::vector<std::string> mounts;
  CollectHostPaths(spec.value("containerEdits", Json::object()), &nodes, &mounts);
  for (const Json& d : spec.value("devices", Json::array())) {
    CollectHostPaths(d.value("containerEdits", Json::object()), &nodes, &mounts);
  }
  for (const std::string& p : nodes) {
    if (!Exists(p)) {
      return Status::FailedPrecondition("device node '" + p +
                                        "' does not exist, and podman refuses a spec naming it; "
                                        "a fake node needs stand-in device nodes under --dev-root");
    }
  }
  for (const std::string& p : mounts) {
    if (!Exists(p)) {
      return Status::FailedPrecondition(
          "driver file '" + p +
          "' does not exist, so no container given a GPU could start (the runtime cannot mount "
          "it); rerun discovery, or fix the libraries of the node file");
    }
  }
  if (::mkdir(options.cdi_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Unavailable("cannot create '" + options.cdi_dir + "': " + std::strerror(errno) +
                               " (writing CDI specs needs root)");
  }
  const std::string path = CdiSpecPath(options.cdi_dir, options.kind);
  GP_RETURN_IF_ERROR(WriteFileDurably(path, text, 0644, /*sync=*/false));
  return path;
}

}  // namespace gpupool::agent
