// api_load: the client half of bench/pool/api_latency.py in C++.
//
//   api_load --sock PATH --workdir DIR --threads N --seed S --ids 1,2,3 --stop-at EPOCH_S
//            [--cpu-milli M] [--mix steady|growing]
//
// Runs N closed-loop clients until --stop-at (seconds since the epoch), each sending the
// same mix as the Python clients: GET /v1/jobs/ID 40%, GET /v1/jobs?active=1&limit=50 20%,
// GET /v1/nodes 20%, and either (steady) POST /v1/jobs 10% + POST /v1/jobs/ID/cancel 10%
// of the client's oldest job not yet cancelled (a submission when it has none), which
// holds the queue at its length, or (growing) POST /v1/jobs 20%. One connection per
// request over the Unix socket (as the CLI does). Prints {"samples": {kind: [ms...]},
// "errors": {kind: n}, "error_examples": [...]} on stdout, the format of the Python
// worker.
//
// Why a second client: on a 2-CPU machine the Python clients use more CPU than the
// server they measure (57% of the machine against 42%), so their latencies mostly show
// the clients waiting for a CPU; this one spends a few microseconds per request.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kNumKinds = 5;
constexpr const char* kKinds[kNumKinds] = {"get_job", "list_active", "nodes", "submit", "cancel"};
constexpr int kSteady[kNumKinds] = {40, 20, 20, 10, 10};
constexpr int kGrowing[kNumKinds] = {40, 20, 20, 20, 0};

struct Options {
  std::string sock;
  std::string workdir;
  int threads = 10;
  int seed = 0;
  std::vector<long> ids;
  double stop_at = 0;
  int cpu_milli = 250;
  bool steady = true;
};

struct Shared {
  std::mutex mu;
  std::vector<double> samples[kNumKinds];
  long errors[kNumKinds] = {};
  std::vector<std::string> examples;
};

double NowEpoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// One request on a fresh connection; returns the HTTP status (0 on a transport error,
// with `why` set) and reads the whole answer into `answer`.
int Call(const std::string& sock, const std::string& request, std::string* why,
         std::string* answer_out) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return 0;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  (void)std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *why = std::string("connect: ") + std::strerror(errno);
    close(fd);
    return 0;
  }
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = write(fd, request.data() + sent, request.size() - sent);
    if (n <= 0) {
      *why = std::string("write: ") + std::strerror(errno);
      close(fd);
      return 0;
    }
    sent += static_cast<size_t>(n);
  }
  std::string answer;
  char buf[16384];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) {
      *why = std::string("read: ") + std::strerror(errno);
      close(fd);
      return 0;
    }
    if (n == 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // "HTTP/1.1 200 OK"
  if (answer.size() < 12 || answer.compare(0, 5, "HTTP/") != 0) {
    *why = "no HTTP status line in " + std::to_string(answer.size()) + " bytes";
    return 0;
  }
  const int status = std::atoi(answer.c_str() + 9);
  if (status >= 300) {
    const size_t body = answer.find("\r\n\r\n");
    *why = answer.substr(body == std::string::npos ? 0 : body + 4, 200);
  }
  *answer_out = std::move(answer);
  return status;
}

std::string Request(const char* method, const std::string& path, const std::string& body) {
  std::string r =
      std::string(method) + " " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n";
  if (!body.empty()) {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

void Client(const Options& o, int index, Shared* out) {
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed) * 1000 + static_cast<uint64_t>(index));
  std::uniform_int_distribution<int> pick_kind(0, 99);
  std::uniform_int_distribution<size_t> pick_id(0, o.ids.empty() ? 0 : o.ids.size() - 1);
  const std::string submit_body =
      "{\"command\":[\"true\"],\"workdir\":" + JsonString(o.workdir) +
      ",\"request\":{\"gpus\":1,\"cpu_milli\":" + std::to_string(o.cpu_milli) + "}}";
  const std::string list = Request("GET", "/v1/jobs?active=1&limit=50", "");
  const std::string nodes = Request("GET", "/v1/nodes", "");
  const std::string submit = Request("POST", "/v1/jobs", submit_body);
  const int* weights = o.steady ? kSteady : kGrowing;
  std::vector<double> local[kNumKinds];
  long errors[kNumKinds] = {};
  std::vector<std::string> examples;
  std::vector<long> mine;  // jobs this client submitted and has not cancelled, oldest first
  size_t next_cancel = 0;
  std::string answer;
  while (NowEpoch() < o.stop_at) {
    int roll = pick_kind(rng);
    int kind = 0;
    while (roll >= weights[kind]) roll -= weights[kind++];
    if (kind == 4 && next_cancel >= mine.size()) kind = 3;  // nothing to cancel yet
    std::string req;
    int want = 200;
    switch (kind) {
      case 0:
        req = Request("GET", "/v1/jobs/" + std::to_string(o.ids[pick_id(rng)]), "");
        break;
      case 1:
        req = list;
        break;
      case 2:
        req = nodes;
        break;
      case 3:
        req = submit;
        want = 201;
        break;
      default:
        req = Request("POST", "/v1/jobs/" + std::to_string(mine[next_cancel++]) + "/cancel", "");
    }
    std::string why;
    const auto t0 = std::chrono::steady_clock::now();
    const int status = Call(o.sock, req, &why, &answer);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (status == want) {
      local[kind].push_back(ms);
      if (kind == 3) {  // {"job":{"id":N,...}}
        const size_t at = answer.find("\"id\":");
        if (at != std::string::npos) mine.push_back(std::atol(answer.c_str() + at + 5));
      }
    } else {
      ++errors[kind];
      if (examples.size() < 5) {
        examples.push_back(std::string(kKinds[kind]) + " -> " + std::to_string(status) + " " + why);
      }
    }
  }
  std::lock_guard lock(out->mu);
  for (int k = 0; k < kNumKinds; ++k) {
    out->samples[k].insert(out->samples[k].end(), local[k].begin(), local[k].end());
    out->errors[k] += errors[k];
  }
  for (auto& e : examples) {
    if (out->examples.size() < 5) out->examples.push_back(std::move(e));
  }
}

int Usage(const char* why) {
  (void)std::fprintf(stderr,
                     "api_load: %s\nusage: api_load --sock PATH --workdir DIR --threads N --seed S "
                     "--ids 1,2,3 --stop-at EPOCH_S [--cpu-milli M] [--mix steady|growing]\n",
                     why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return Usage(("missing value after " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--sock") {
      o.sock = value;
    } else if (flag == "--workdir") {
      o.workdir = value;
    } else if (flag == "--threads") {
      o.threads = std::atoi(value.c_str());
    } else if (flag == "--seed") {
      o.seed = std::atoi(value.c_str());
    } else if (flag == "--stop-at") {
      o.stop_at = std::atof(value.c_str());
    } else if (flag == "--mix") {
      if (value != "steady" && value != "growing") return Usage("--mix: steady or growing");
      o.steady = value == "steady";
    } else if (flag == "--cpu-milli") {
      o.cpu_milli = std::atoi(value.c_str());
    } else if (flag == "--ids") {
      for (const char* p = value.c_str(); *p != '\0';) {
        char* end = nullptr;
        const long id = std::strtol(p, &end, 10);
        if (end == p) return Usage("--ids: a comma-separated list of job ids");
        o.ids.push_back(id);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      return Usage(("unknown flag " + flag).c_str());
    }
  }
  if (o.sock.empty() || o.workdir.empty()) return Usage("--sock and --workdir are required");
  if (o.ids.empty()) return Usage("--ids: at least one job id");
  if (o.threads < 1 || o.threads > 1000) return Usage("--threads: 1 to 1000");
  if (o.stop_at <= 0) return Usage("--stop-at: seconds since the epoch");

  Shared shared;
  std::vector<std::thread> ts;
  ts.reserve(static_cast<size_t>(o.threads));
  for (int i = 0; i < o.threads; ++i) ts.emplace_back(Client, std::cref(o), i, &shared);
  for (auto& t : ts) t.join();

  std::string out = "{\"samples\":{";
  for (int k = 0; k < kNumKinds; ++k) {
    out += std::string(k ? "," : "") + "\"" + kKinds[k] + "\":[";
    for (size_t i = 0; i < shared.samples[k].size(); ++i) {
      char buf[32];
      (void)std::snprintf(buf, sizeof buf, "%s%.3f", i ? "," : "", shared.samples[k][i]);
      out += buf;
    }
    out += "]";
  }
  out += "},\"errors\":{";
  for (int k = 0; k < kNumKinds; ++k) {
    out += std::string(k ? "," : "") + "\"" + kKinds[k] + "\":" + std::to_string(shared.errors[k]);
  }
  out += "},\"error_examples\":[";
  for (size_t i = 0; i < shared.examples.size(); ++i) {
    out += (i ? "," : "") + JsonString(shared.examples[i]);
  }
  out += "]}\n";
  const bool written = std::fwrite(out.data(), 1, out.size(), stdout) == out.size();
  return written && std::fflush(stdout) == 0 ? 0 : 1;
}
