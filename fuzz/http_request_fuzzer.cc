// Fuzz target: the API server's reading of requests (HttpServer: libmicrohttpd's parser
// and gpupool's callbacks around it: the head and its Content-Length / chunked body size
// for the connection table, the body limit, the headers and query handed to handlers).
// One server on a Unix socket in a scratch directory for the whole run; each input is
// written to a new connection, which is then half-closed, and the answer read to the end.
// Checks besides "no crash": the server answers or closes within 10 s (its deadlines are
// 0.3 s here); what it sends is HTTP; a request that reaches the handler has a method,
// lower-case header names, one framing of its body (Content-Length or chunked) and a body
// within the limit that matches its Content-Length.
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/strings.h"
#include "fuzz/fuzz_check.h"
#include "net/http_server.h"

namespace {

using namespace gpupool;

constexpr size_t kMaxBody = 4096;

net::HttpResponse Handle(const net::HttpRequest& r) {
  fuzz::Require(!r.method.empty(), "a request without a method");
  fuzz::Require(r.body.size() <= kMaxBody, "a body over the limit reached the handler");
  for (const auto& [name, value] : r.headers) {
    for (char c : name) {
      fuzz::Require(!std::isupper(static_cast<unsigned char>(c)), "header name not lower-cased");
    }
  }
  // A body framed two ways is refused at its head (net/request_framing.h).
  if (auto te = r.headers.find("transfer-encoding"); te != r.headers.end()) {
    fuzz::Require(ToLower(te->second) == "chunked", "a coding other than chunked was handled");
    fuzz::Require(r.headers.count("content-length") == 0, "a body framed two ways was handled");
  }
  if (auto cl = r.headers.find("content-length");
      cl != r.headers.end() && r.headers.count("transfer-encoding") == 0) {
    fuzz::Require(
        ParseInt64(cl->second) == static_cast<int64_t>(r.body.size()),
        "body of " + std::to_string(r.body.size()) + " bytes for Content-Length " + cl->second);
  }
  net::HttpResponse out;
  out.body = "{\"path\": " + std::to_string(r.path.size()) + "}";
  return out;
}

struct Server {
  std::string dir;
  std::string socket;
  std::unique_ptr<net::HttpServer> server;
};

Server* g_server = nullptr;

Server* StartOnce() {
  if (g_server != nullptr) return g_server;
  g_server = [] {
    auto* out = new Server();
    char tmpl[] = "/tmp/gpupool-http-fuzz.XXXXXX";
    fuzz::Require(::mkdtemp(tmpl) != nullptr, "mkdtemp");
    out->dir = tmpl;
    out->socket = out->dir + "/api.sock";
    net::HttpServerOptions o;
    o.unix_socket_path = out->socket;
    o.max_body_bytes = kMaxBody;
    o.pool_threads = 2;
    o.background_threads = 1;
    // A request cut short (the connection is half-closed after it) is closed at these
    // deadlines: short, so that such inputs cost a fraction of a second.
    o.head_timeout_ms = 300;
    o.transfer_timeout_ms = 300;
    o.idle_timeout_ms = 300;
    // Some paths take the other ways through the server: a thread of their own, the
    // background pool.
    o.may_block = [](const net::HttpRequest& r) { return r.path == "/v1/block"; };
    o.background = [](const net::HttpRequest& r) { return r.path.rfind("/v1/agent/", 0) == 0; };
    Result<std::unique_ptr<net::HttpServer>> started =
        net::StartHttpServer(o, net::HttpHandler(Handle));
    fuzz::Require(started.ok(), "server start: " + started.status().ToString());
    out->server = std::move(*started);
    // Leaves no socket or directory behind.
    std::atexit([] {
      g_server->server->Stop();
      ::unlink(g_server->socket.c_str());
      ::rmdir(g_server->dir.c_str());
    });
    return out;
  }();
  return g_server;
}

int Connect(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  fuzz::Require(fd >= 0, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  fuzz::Require(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0,
                std::string("connect: ") + std::strerror(errno));
  return fd;
}

// How long an answer (or the close) may take: 10 s, or GPUPOOL_FUZZ_ANSWER_WAIT_S.
int AnswerWaitMs() {
  static const int ms = [] {
    const char* v = std::getenv("GPUPOOL_FUZZ_ANSWER_WAIT_S");
    return v != nullptr ? std::atoi(v) * 1000 : 10'000;
  }();
  return ms;
}

// Waits up to `ms` for `fd` to be readable (bytes, or the server's close). A signal is
// no answer: libFuzzer's -timeout watchdog (a SIGALRM every timeout/2 + 1 s) interrupts
// poll with EINTR, which was once taken for "no answer in time" (fuzz/README.md); the
// wait goes on for the time left.
bool WaitReadable(int fd, int ms) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(ms);
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (n > 0) return true;
    if (n == 0) return false;
    fuzz::Require(errno == EINTR, std::string("poll: ") + std::strerror(errno));
  }
}

// Writes what it can (the server may close early, e.g. after a 413) and reads the answer
// until the server closes. Calls a signal interrupted are made again.
std::string Exchange(int fd, const uint8_t* data, size_t size) {
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[8192];
  while (true) {
    fuzz::Require(WaitReadable(fd, AnswerWaitMs()), "no answer and no close in time");
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed (or reset: also a close)
    answer.append(buf, static_cast<size_t>(n));
  }
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server* s = StartOnce();
  const int fd = Connect(s->socket);
  const std::string answer = Exchange(fd, data, size);
  ::close(fd);
  if (std::getenv("GPUPOOL_FUZZ_VERBOSE") != nullptr) {
    std::fprintf(stderr, "answer: %.60s\n", answer.c_str());
  }
  fuzz::Require(answer.empty() || answer.rfind("HTTP/1.", 0) == 0,
                "the answer is not HTTP: " + answer.substr(0, 80));
  return 0;
}
