#include "agent/runtime/health_check.h"

#include <sys/wait.h>

#include <cstdlib>

#include "common/strings.h"
#include "common/subprocess.h"

namespace gpupool::agent {
namespace {

constexpr size_t kKeptOutput = 4096;  // the end of the output the report carries
constexpr size_t kMaxBadGpus = 256;

std::string Tail(const std::string& text, size_t n) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

std::string LastLine(const std::string& text) {
  std::vector<std::string> lines = Split(std::string(Trim(text)), '\n');
  return lines.empty() ? std::string() : std::string(Trim(lines.back()));
}

}  // namespace

protocol::HealthReport ParseHealthOutput(const std::string& output, int exit_code, bool timed_out,
                                         int timeout_s) {
  protocol::HealthReport r;
  r.output = Tail(output, kKeptOutput);
  for (const std::string& raw : Split(output, '\n')) {
    const std::string line(Trim(raw));
    if (line.rfind("gpu=", 0) == 0) {
      // "gpu=INDEX bad REASON"
      const size_t space = line.find(' ');
      const std::string index =
          line.substr(4, space == std::string::npos ? std::string::npos : space - 4);
      const std::string rest =
          space == std::string::npos ? "" : std::string(Trim(line.substr(space)));
      if (rest.rfind("bad", 0) != 0 || index.empty() || index.size() > 4 ||
          index.find_first_not_of("0123456789") != std::string::npos) {
        continue;  // not a verdict line: just output
      }
      if (r.gpus.size() < kMaxBadGpus) {
        r.gpus.push_back(
            {std::atoi(index.c_str()), std::string(Trim(rest.substr(3))).substr(0, 512)});
      }
    } else if (line.rfind("node bad", 0) == 0) {
      const std::string why(Trim(line.substr(8)));
      r.node_reason = why.empty() ? "the health check said the node is bad" : why.substr(0, 512);
    }
  }
  if (timed_out) {
    r.node_reason = "the health check did not finish within " + std::to_string(timeout_s) + " s";
  } else if (exit_code != 0 && r.node_reason.empty()) {
    const std::string last = LastLine(output);
    r.node_reason = "the health check exited " + std::to_string(exit_code) +
                    (last.empty() ? "" : ": " + last.substr(0, 512));
  }
  r.passed = r.node_reason.empty() && r.gpus.empty();
  return r;
}

protocol::HealthReport RunHealthCheck(const std::string& program, int timeout_s, int64_t now_ms) {
  SpawnOptions o;
  o.search_path = false;
  o.env = std::vector<std::string>{
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  o.new_session = true;  // killed with its children when it overruns
  Result<CommandResult> r = RunCommandCapture({program}, timeout_s * 1000, o, {});
  protocol::HealthReport report;
  if (!r.ok()) {
    report.node_reason =
        "the health check " + program + " could not be run: " + r.status().message();
  } else {
    const int code = WIFEXITED(r->wait_status)     ? WEXITSTATUS(r->wait_status)
                     : WIFSIGNALED(r->wait_status) ? 128 + WTERMSIG(r->wait_status)
                                                   : -1;
    report = ParseHealthOutput(r->out + r->err, code, r->timed_out, timeout_s);
  }
  report.at_ms = now_ms;
  return report;
}

}  // namespace gpupool::agent
