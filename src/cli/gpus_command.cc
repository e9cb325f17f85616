// `gpupool gpus`: discover this node's GPUs (or replay a captured node with --fake) and
// print them as a table, JSON, HTCondor ClassAd, Slurm gres.conf or a CDI spec.
// Output goes to stdout; in the machine formats, diagnostics go to stderr so the output
// stays parseable. Exit codes: 0 success, 1 discovery or export failure, 2 usage error.
// With --sample N it samples the GPUs' telemetry as the agent does instead (JSON lines).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "agent/cdi_spec.h"
#include "agent/runtime/agent_loop.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/file_util.h"
#include "common/json.h"
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
  int samples = 0;                 // --sample N: telemetry instead of the node
  double sample_interval_s = 1.0;  // --sample-interval
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

// --sample: what the agent's telemetry sends, one JSON line per round: each GPU's
// figures and the processes on it with the pool job whose cgroup each runs in
// (agent/runtime/agent_loop.h), plus how long the round took (a sampler must never block).
int PrintSamples(const gpu::DiscoveryOptions& options, const gpu::NodeInfo& node,
                 const GpusFlags& f) {
  Result<std::unique_ptr<gpu::TelemetrySampler>> sampler =
      gpu::CreateTelemetrySampler(options, node);
  if (!sampler.ok()) {
    Print(stderr, "gpupool gpus: no telemetry: " + sampler.status().message() + "\n");
    return 1;
  }
  const std::string note = (*sampler)->note();
  bool failed = false;
  const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(f.sample_interval_s));
  auto next = std::chrono::steady_clock::now();
  for (int round = 0; round < f.samples; ++round) {
    if (round > 0) {
      next += period;
      std::this_thread::sleep_until(next);
    }
    const int64_t now_us = SystemClock::Get()->NowMicros();
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<gpu::GpuSample>> s = (*sampler)->Sample(now_us);
    const double took_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    protocol::TelemetryBatch batch;
    if (s.ok()) {
      for (const gpu::GpuSample& g : *s) {
        batch.samples.push_back(agent::TelemetryOfSample(g, now_us / 1000, options.proc_root));
      }
    }
    OrderedJson line = {{"round", round},
                        {"at_ms", now_us / 1000},
                        {"took_ms", took_ms},
                        {"sampler", std::string((*sampler)->name())}};
    if (!note.empty()) line["note"] = note;
    if (!s.ok()) {
      line["error"] = s.status().message();
      failed = true;
    }
    line["samples"] = std::move(protocol::EncodeTelemetryBatch(batch)["samples"]);
    Print(stdout, DumpJson(line) + "\n");
  }
  return failed ? 1 : 0;
}

int RunGpus(const GpusFlags& f) {
  const std::string format = ResolveFormat(f);
  if (f.samples > 0 && format != "table" && format != "json") {
    Print(stderr, "gpupool gpus: --sample prints JSON lines and cannot be combined with --format " +
                      format + "\n");
    return 2;
  }

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
  if (f.samples > 0) return PrintSamples(options, *node, f);

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
  cmd->add_option("--sample", flags->samples,
                  "Sample the GPUs' telemetry N times as the agent does and print one JSON line "
                  "per round (utilisation, memory, power, Xid errors, processes and their pool "
                  "jobs) instead of the node")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--sample-interval", flags->sample_interval_s,
                  "Seconds between --sample rounds (default 1)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->callback([&ctx, flags] { ctx.exit_code = RunGpus(*flags); });
}

}  // namespace gpupool::cli
