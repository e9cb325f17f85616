// `gpupool gpus`: discover this node's GPUs (or replay a captured node with --fake) and
// print them as a table, JSON, HTCondor ClassAd, Slurm gres.conf or a CDI spec.
// Output goes to stdout; in the machine formats, diagnostics go to stderr so the output
// stays parseable. Exit codes: 0 success, 1 discovery or export failure, 2 usage error.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "agent/cdi_spec.h"
#include "cli/commands.h"
#include "common/file_util.h"
#include "gpu/export/exporters.h"
#include "gpu/gpu_backend.h"
#include "gpu/sysfs/cpu_topology_reader.h"

namespace gpupool::cli {
namespace {

struct GpusFlags {
  std::string backend = "auto";
  std::string fake_file;
  bool json = false;
  std::string format;
  bool classad_legacy = false;
  std::string cdi_vendor;
  std::string cdi_kind;
  std::string cdi_hook;
  std::string dev_root;
  std::string node_name;
};

// What to do on a machine without GPUs; the example nodes by their absolute path, so the
// hint works from any directory.
std::string FakeHint() {
  const std::string dir = FindGpupoolData("examples/nodes");
  if (dir.empty()) {
    return "To try gpupool without GPUs, replay a node captured elsewhere:\n"
           "  gpupool gpus --json > node.json        (on a GPU machine)\n"
           "  gpupool gpus --fake node.json\n";
  }
  return "To try gpupool without GPUs, replay one of the example nodes, e.g.\n"
         "  gpupool gpus --fake " +
         dir +
         "/nvidia-8xh100.json\n"
         "  gpupool gpus --fake " +
         dir + "/amd-8xmi250x.json --format gres\n";
}

void Print(std::FILE* to, const std::string& text) {
  // Nothing useful is left to do when stdout or stderr cannot be written.
  (void)std::fwrite(text.data(), 1, text.size(), to);
  (void)std::fflush(to);
}

// Resolves --json/--format/--classad-legacy into one format name, or a usage error.
std::string ResolveFormat(const GpusFlags& f) {
  std::string format = f.format;
  auto conflict = [&](const char* flag, const char* wants) {
    if (!format.empty() && format != wants) {
      throw CLI::ValidationError(flag, std::string("cannot be combined with --format ") + format);
    }
    format = wants;
  };
  if (f.json) conflict("--json", "json");
  if (f.classad_legacy) conflict("--classad-legacy", "classad");
  return format.empty() ? "table" : format;
}

int RunGpus(const GpusFlags& f) {
  const std::string format = ResolveFormat(f);

  gpu::DiscoveryOptions options = gpu::WithEnvironmentOverrides({});
  options.fake_node_file = f.fake_file;
  if (!f.dev_root.empty()) options.dev_root = f.dev_root;
  if (f.backend != "auto") {
    options.backends = {f.backend};
  } else if (!f.fake_file.empty()) {
    // A replayed node stands alone: probing the real machine too would mix its GPUs
    // and diagnostics into the capture.
    options.backends = {"fake"};
  }
  if (f.backend == "fake" && f.fake_file.empty()) {
    Print(stderr,
          "gpupool gpus: --backend fake needs --fake FILE (a `gpupool gpus --json` "
          "capture or one of examples/nodes/*.json)\n");
    return 2;
  }

  Result<gpu::NodeInfo> node = gpu::DiscoverNode(options);
  if (!node.ok()) {
    Print(stderr, "gpupool gpus: " + node.status().message() + "\n");
    return 1;
  }

  gpu::ExportOptions export_options;
  export_options.classad_legacy = f.classad_legacy;
  export_options.gres.node_name = f.node_name;
  if (format == "gres" && f.fake_file.empty() && !node->gpus.empty()) {
    // Slurm numbers cores, not the kernel's CPUs: gres.conf needs this machine's CPU
    // topology. A replayed node's topology is not this machine's, so it gets none.
    Result<gpu::CpuTopology> cpus = gpu::ReadCpuTopology(options.sysfs_root);
    if (cpus.ok()) {
      export_options.gres.cpu_topology = std::move(*cpus);
    } else {
      Print(stderr, "gpupool gpus: Cores= left out: " + cpus.status().message() + "\n");
    }
  }
  export_options.cdi.host_dev_root = options.dev_root;
  if (!f.cdi_vendor.empty()) export_options.cdi.vendor = gpu::ParseVendor(f.cdi_vendor);
  export_options.cdi.kind = f.cdi_kind;
  // The spec's hook is this binary unless told otherwise; a node replayed from a file has
  // no driver files on this machine to mount.
  std::error_code self_ec;
  export_options.cdi.hook_path = f.cdi_hook;
  if (f.cdi_hook.empty()) {
    export_options.cdi.hook_path =
        std::filesystem::read_symlink("/proc/self/exe", self_ec).string();
  }
  if (format == "cdi" && f.fake_file.empty() && node->nvidia) {
    export_options.cdi.driver_files = agent::FindNvidiaDriverFiles(node->nvidia->version);
  }

  Result<std::string> text = gpu::ExportNode(*node, format, export_options);
  const bool table = format == "table";
  if (!table) {
    for (const gpu::Diagnostic& d : node->diagnostics) {
      Print(stderr, "gpupool gpus: [" + d.backend + "] " + d.message + "\n");
    }
  }
  if (!text.ok()) {
    Print(stderr, "gpupool gpus: " + text.status().message() + "\n");
    if (node->gpus.empty()) Print(stderr, FakeHint());
    return 1;
  }
  Print(stdout, *text);
  if (node->gpus.empty()) Print(table ? stdout : stderr, "\n" + FakeHint());
  return 0;
}

}  // namespace

void RegisterGpusCommand(CLI::App& app, CommandContext& ctx) {
  auto flags = std::make_shared<GpusFlags>();
  CLI::App* cmd = app.add_subcommand(
      "gpus", "Discover this node's GPUs and print them (table, JSON, ClassAd, gres.conf, CDI)");
  cmd->add_option("--backend", flags->backend,
                  "Discovery backend: auto probes nvml, rocm-smi and sysfs and merges them")
      ->check(CLI::IsMember({"auto", "nvml", "rocm-smi", "sysfs", "fake"}))
      ->capture_default_str();
  cmd->add_option("--fake", flags->fake_file,
                  "Replay a node file (a `gpupool gpus --json` capture) instead of this machine");
  cmd->add_flag("--json", flags->json, "Print the node JSON (same as --format json)");
  cmd->add_option("--format", flags->format, "Output format (default table)")
      ->check(CLI::IsMember(gpu::ExportFormatNames()));
  cmd->add_flag("--classad-legacy", flags->classad_legacy,
                "ClassAd in the old flat CUDA0/CUDACapability form (implies --format classad)");
  cmd->add_option("--cdi-vendor", flags->cdi_vendor,
                  "Vendor of the CDI spec when the node has both NVIDIA and AMD GPUs")
      ->check(CLI::IsMember({"nvidia", "amd"}));
  cmd->add_option("--cdi-kind", flags->cdi_kind,
                  "Kind of the CDI spec, VENDOR/CLASS (default nvidia.com/gpu or amd.com/gpu; "
                  "the agent writes gpupool.local/gpu)");
  cmd->add_option("--cdi-hook", flags->cdi_hook,
                  "Absolute path of the gpupool binary the CDI spec's hook runs (default: this "
                  "one)");
  cmd->add_option("--node-name", flags->node_name,
                  "Slurm NodeName of the gres.conf lines (default: the node's short host name)");
  cmd->add_option("--dev-root", flags->dev_root,
                  "Where the host's device nodes live (default /dev, or $GPUPOOL_DEV_ROOT); "
                  "CDI host paths are written under it");
  cmd->callback([&ctx, flags] { ctx.exit_code = RunGpus(*flags); });
}

}  // namespace gpupool::cli
