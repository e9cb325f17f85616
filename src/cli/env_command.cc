// `gpupool env inspect|check`: what an environment needs from the GPU stack, and whether
// a node has it (src/envcheck).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "common/json.h"
#include "envcheck/inspector.h"
#include "gpu/gpu_backend.h"
#include "gpu/node_json.h"

namespace gpupool::cli {
namespace {

// Runs a command without a shell and returns its stdout, or an error with its output.
Result<std::string> Capture(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const std::string& a : argv) {
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += (cmd.empty() ? "" : " ") + q + "'";
  }
  cmd += " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return Status::Unavailable("cannot run " + argv[0]);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int rc = pclose(p);
  if (rc != 0) return Status::Unavailable(argv[0] + " failed: " + out);
  return out;
}

// An image is inspected through `podman image mount`, read-only, then unmounted.
class Target {
 public:
  static Result<Target> Open(const std::string& ref) {
    Target t;
    if (std::filesystem::exists(ref)) {
      t.path_ = ref;
      return t;
    }
    Result<std::string> mount = Capture({"podman", "image", "mount", ref});
    if (!mount.ok()) {
      return Status::NotFound("'" + ref +
                              "' is neither a path nor an image in podman's local "
                              "store (" +
                              mount.status().message() +
                              "): load it with podman "
                              "load/import first");
    }
    std::string path = *mount;
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    t.path_ = path;
    t.image_ = ref;
    return t;
  }
  Target(Target&& o) noexcept : path_(std::move(o.path_)), image_(std::move(o.image_)) {
    o.image_.clear();
  }
  ~Target() {
    if (!image_.empty()) (void)Capture({"podman", "image", "unmount", image_});
  }
  const std::string& path() const { return path_; }

 private:
  Target() = default;
  std::string path_;
  std::string image_;
};

envcheck::NodeOffer OfferOf(const gpu::NodeInfo& node) {
  envcheck::NodeOffer o;
  o.name = node.hostname;
  if (node.nvidia) {
    o.driver_version = node.nvidia->version;
    o.cuda_driver_version = node.nvidia->runtime_version;
  }
  for (const gpu::GpuInfo& g : node.gpus) {
    if (g.compute_capability)
      o.capabilities.emplace_back(g.compute_capability->major, g.compute_capability->minor);
    if (!g.gfx_target.empty()) o.gfx_targets.push_back(g.gfx_target);
  }
  return o;
}

void PrintReport(const envcheck::EnvReport& r) {
  std::cout << "environment: " << r.root << " (" << r.files_scanned << " files)\n";
  if (!r.cuda_version.empty()) {
    std::cout << "CUDA:        " << r.cuda_version << " (from " << r.needs_from << ")\n"
              << "min driver:  " << r.min_driver << " (" << r.min_driver_minor_compat
              << " with minor version compatibility, no PTX JIT)\n";
  }
  for (const auto& l : r.libraries)
    std::cout << "library:     " << l.name << " " << l.version << "  " << l.path << "\n";
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return s.empty() ? std::string("-") : s;
  };
  std::cout << "SASS:        " << list(r.sass) << "\nPTX:         " << list(r.ptx)
            << "\nAMD targets: " << list(r.gfx_targets) << "\n";
  for (const auto& w : r.warnings) std::cout << "warning:     " << w << "\n";
}

}  // namespace

void RegisterEnvCommand(CLI::App& app, CommandContext& ctx) {
  CLI::App* env = app.add_subcommand("env", "inspect and check GPU software environments");
  env->require_subcommand(1);
  struct Flags {
    std::string target;
    std::string node;
    bool json = false;
  };
  static Flags flags;  // the callbacks outlive this function; a static is never a leak
  Flags* f = &flags;
  CLI::App* inspect =
      env->add_subcommand("inspect", "what an image or directory needs from the GPU stack");
  inspect->add_option("target", f->target, "a directory, a file, or an image in podman's store")
      ->required();
  inspect->add_flag("--json", f->json, "print JSON");
  inspect->callback([&ctx, f] {
    Result<Target> t = Target::Open(f->target);
    Result<envcheck::EnvReport> r =
        t.ok() ? envcheck::InspectTree(t->path()) : Result<envcheck::EnvReport>(t.status());
    if (!r.ok()) {
      std::cerr << "gpupool: " << r.status().message() << "\n";
      ctx.exit_code = r.status().code() == StatusCode::kNotFound ? 3 : 1;
      return;
    }
    r->root = f->target;
    if (f->json) {
      std::cout << DumpJson(envcheck::ReportToJson(*r), 2) << "\n";
    } else {
      PrintReport(*r);
    }
  });
  CLI::App* check = env->add_subcommand("check", "whether a node can run an image or directory");
  check->add_option("target", f->target, "a directory, a file, or an image in podman's store")
      ->required();
  check->add_option("--node", f->node,
                    "node description (gpupool gpus --json); default: this node");
  check->callback([&ctx, f] {
    gpu::DiscoveryOptions opts = gpu::WithEnvironmentOverrides({});
    if (!f->node.empty()) {
      opts.backends = {"fake"};
      opts.fake_node_file = f->node;
    }
    Result<gpu::NodeInfo> node = gpu::DiscoverNode(opts);
    Result<Target> t = Target::Open(f->target);
    Result<envcheck::EnvReport> r =
        t.ok() ? envcheck::InspectTree(t->path()) : Result<envcheck::EnvReport>(t.status());
    for (const Status& s : {node.status(), r.status()}) {
      if (!s.ok()) {
        std::cerr << "gpupool: " << s.message() << "\n";
        ctx.exit_code = 1;
        return;
      }
    }
    Status verdict = envcheck::CheckNode(*r, OfferOf(*node));
    if (!verdict.ok()) {
      std::cout << "NO: " << f->target << " " << verdict.message() << "\n";
      ctx.exit_code = 1;
      return;
    }
    std::cout << "OK: node " << node->hostname << " can run " << f->target << "\n";
  });
}

}  // namespace gpupool::cli
