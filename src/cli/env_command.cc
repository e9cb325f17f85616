// `gpupool env inspect|check`: what an environment needs from the GPU stack, and whether
// a node has it (src/envcheck).
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/client/client_commands.h"
#include "cli/commands.h"
#include "common/json.h"
#include "envcheck/dir_walk.h"
#include "envcheck/inspector.h"
#include "envcheck/needs.h"
#include "gpu/gpu_backend.h"
#include "gpu/node_json.h"

namespace gpupool::cli {
namespace {

// A directory or file is read in place; an image through `podman image mount`,
// read-only, unmounted again when this object goes.
class Target {
 public:
  static Result<Target> Open(const std::string& ref) {
    Target t;
    if (std::filesystem::exists(ref)) {
      t.path_ = ref;
      return t;
    }
    Result<envcheck::MountedImage> m = envcheck::MountedImage::Mount(ref, {});
    if (!m.ok()) {
      return Status(m.status().code(), "'" + ref + "' is not a path; " + m.status().message());
    }
    t.path_ = m->path();
    t.image_.emplace(std::move(*m));
    return t;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::optional<envcheck::MountedImage> image_;
};

envcheck::NodeOffer OfferOf(const gpu::NodeInfo& node) {
  return envcheck::OfferFromNode(node, node.hostname);
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
    std::string env_ref;
    std::string server;
    std::string token;
    bool local = false;
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
  // The server's bounded, unprivileged inspection of a directory (envcheck/dir_walk.h):
  // run by the server as the caller, never by hand; hidden from --help.
  static envcheck::DirWalkRequest walk_request;
  envcheck::DirWalkRequest* w = &walk_request;
  CLI::App* walk = env->add_subcommand("walk", "")->group("");
  walk->add_option("dir", w->dir)->required();
  walk->add_option("--who", w->who);
  walk->add_option("--max-files", w->max_files);
  walk->add_option("--max-file-bytes", w->max_file_bytes);
  walk->add_option("--max-total-bytes", w->max_total_bytes);
  walk->add_option("--timeout-ms", w->timeout_ms);
  walk->add_flag("--digest-only", w->digest_only);
  walk->callback([w] { std::cout << envcheck::RunDirWalk(*w) << "\n"; });
  CLI::App* check = env->add_subcommand(
      "check",
      "whether the pool's nodes (or a node description, or this machine) can run an image, a "
      "directory or a named environment");
  check->add_option("target", f->target, "a directory, a file, or an image in podman's store");
  check->add_option("--env", f->env_ref, "a named environment NAME:VERSION instead of a target");
  check->add_option("--node", f->node,
                    "a node description file (gpupool gpus --json), or the name of a pool node");
  check->add_flag("--local", f->local, "check this machine (discovery), not the pool");
  check->add_flag("--json", f->json, "print the server's answer as JSON (pool checks)");
  check->add_option("--server", f->server,
                    "the pool server (default: $GPUPOOL_SERVER, else the local socket)");
  check->add_option("--token", f->token, "bearer token for a TCP server (default: $GPUPOOL_TOKEN)");
  check->callback([&ctx, f] {
    if (f->target.empty() == f->env_ref.empty()) {
      std::cerr << "gpupool: env check: give an image or directory, or --env NAME:VERSION\n";
      ctx.exit_code = 2;
      return;
    }
    std::error_code ec;
    const bool node_file = !f->node.empty() && std::filesystem::is_regular_file(f->node, ec);
    if (!f->local && !node_file) {
      // The pool's view: every node (or the named one), checked by the server.
      std::string kind = "environment";
      std::string location = f->env_ref;
      if (f->env_ref.empty()) {
        const bool is_path = std::filesystem::exists(f->target, ec);
        kind = is_path ? "dir" : "image";
        location = is_path ? std::filesystem::absolute(f->target, ec).lexically_normal().string()
                           : f->target;
      }
      ctx.exit_code = PoolEnvCheck(kind, location, f->node, f->server, f->token, f->json,
                                   ClientEnvironment::Process());
      return;
    }
    if (!f->env_ref.empty()) {
      std::cerr << "gpupool: env check --env: named environments live on the pool server; drop "
                   "--local / the node file\n";
      ctx.exit_code = 2;
      return;
    }
    gpu::DiscoveryOptions opts = gpu::WithEnvironmentOverrides({});
    if (node_file) {
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
