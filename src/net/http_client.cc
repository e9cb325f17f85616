#include "net/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "common/json.h"
#include "common/strings.h"

namespace gpupool::net {
namespace {

// HTTP/1.1 to our own server, one request per connection ("Connection: close"), no TLS:
// written here rather than taken from libcurl, whose tree of 39 shared libraries cost
// every client start ~25 ms of CPU (docs/benchmarks.md, "Gang start-up"): a burst of
// `gpupool exec`s from mpirun is that many client starts at once.

constexpr size_t kMaxResponseBytes = size_t{256} << 20;
constexpr size_t kMaxHeaderBytes = size_t{64} << 10;
constexpr int kConnectTimeoutMs = 5000;
// How many standbys' answers naming a leader one call follows (controllers that name
// each other as the leader must not make a loop).
constexpr int kMaxLeaderHops = 3;

using SteadyClock = std::chrono::steady_clock;

int MillisLeft(SteadyClock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left, INT32_MAX));
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Waits for `events` on fd; false on timeout (errno ETIMEDOUT), on `cancel_fd` becoming
// readable (errno ECANCELED) or on error.
bool Wait(int fd, short events, SteadyClock::time_point deadline, int cancel_fd) {
  while (true) {
    pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int n = ::poll(p, cancel_fd >= 0 ? 2 : 1, MillisLeft(deadline));
    if (n > 0 && cancel_fd >= 0 && p[1].revents != 0) {
      errno = ECANCELED;
      return false;
    }
    if (n > 0) return true;
    if (n == 0) {
      errno = ETIMEDOUT;
      return false;
    }
    if (errno != EINTR) return false;
  }
}

// Whether `fd` is readable now (a cancel fd that was signalled).
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0;
}

// A non-blocking connect to a Unix socket within the deadline; errno says why not. EAGAIN
// there is a full listen backlog (a server busy accepting, or a flood of connections
// from others), not a connection in progress: it is tried again, after 1 ms, 2, 4 ... 32,
// as a blocking connect would wait for room.
bool ConnectUnix(int fd, const sockaddr_un& addr, SteadyClock::time_point deadline, int cancel_fd) {
  int pause_ms = 1;
  while (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return false;
    if (MillisLeft(deadline) == 0) return false;  // errno is still EAGAIN
    pollfd p{cancel_fd, POLLIN, 0};
    if (::poll(&p, 1, std::min(pause_ms, MillisLeft(deadline))) > 0 && cancel_fd >= 0) {
      errno = ECANCELED;
      return false;
    }
    pause_ms = std::min(pause_ms * 2, 32);
    errno = EAGAIN;
  }
  return true;
}

// A non-blocking connect finished within the deadline; errno says why not.
bool Connect(int fd, const sockaddr* addr, socklen_t len, SteadyClock::time_point deadline,
             int cancel_fd) {
  if (::connect(fd, addr, len) == 0) return true;
  if (errno != EINPROGRESS) return false;
  if (!Wait(fd, POLLOUT, deadline, cancel_fd)) return false;
  int err = 0;
  socklen_t n = sizeof(err);
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &n) != 0) return false;
  errno = err;
  return err == 0;
}

Result<Fd> Open(const ServerAddress& a, SteadyClock::time_point deadline, int cancel_fd) {
  const auto connect_by =
      std::min(deadline, SteadyClock::now() + std::chrono::milliseconds(kConnectTimeoutMs));
  if (a.kind == ServerAddress::Kind::kUnix) {
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    if (a.path.size() >= sizeof(sun.sun_path)) {
      return Status::InvalidArgument("socket path longer than " +
                                     std::to_string(sizeof(sun.sun_path) - 1) + " bytes");
    }
    std::memcpy(sun.sun_path, a.path.c_str(), a.path.size() + 1);
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) return Status::Unavailable(std::string("socket: ") + std::strerror(errno));
    if (!ConnectUnix(fd.get(), sun, connect_by, cancel_fd)) {
      return Status::Unavailable(std::string("cannot connect: ") + std::strerror(errno));
    }
    return fd;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(a.port);
  if (int rc = ::getaddrinfo(a.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable("cannot resolve host '" + a.host + "': " + ::gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (fd.get() < 0) continue;
    if (Connect(fd.get(), ai->ai_addr, ai->ai_addrlen, connect_by, cancel_fd)) {
      ::freeaddrinfo(found);
      return fd;
    }
    why = std::strerror(errno);
  }
  ::freeaddrinfo(found);
  return Status::Unavailable("cannot connect: " + why);
}

Status SendAll(int fd, std::string_view data, SteadyClock::time_point deadline, int cancel_fd) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!Wait(fd, POLLOUT, deadline, cancel_fd)) {
        return Status::Unavailable(std::string("sending the request: ") + std::strerror(errno));
      }
    } else {
      return Status::Unavailable(std::string("sending the request: ") + std::strerror(errno));
    }
  }
  return Status::Ok();
}

// Decodes a chunked body; false when it is malformed or incomplete.
bool Dechunk(std::string_view in, std::string* out) {
  while (true) {
    const size_t eol = in.find("\r\n");
    if (eol == std::string_view::npos) return false;
    std::string_view size_text = in.substr(0, eol);
    if (const size_t semi = size_text.find(';'); semi != std::string_view::npos)
      size_text = size_text.substr(0, semi);
    size_text = Trim(size_text);
    if (size_text.empty() || size_text.size() > 15) return false;
    size_t size = 0;
    for (char c : size_text) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
      size = size * 16 +
             static_cast<size_t>(std::isdigit(static_cast<unsigned char>(c))
                                     ? c - '0'
                                     : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
    }
    in.remove_prefix(eol + 2);
    if (size == 0) return true;  // trailers, if any, are ignored
    if (in.size() < size + 2) return false;
    out->append(in.substr(0, size));
    in.remove_prefix(size + 2);
  }
}

}  // namespace

Result<HttpResponse> ParseHttpResponse(std::string_view raw) {
  const size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return Status::Unavailable("the server sent no complete answer");
  const std::string_view head(raw.data(), end);
  const size_t first_eol = head.find("\r\n");
  const std::string_view status_line = head.substr(0, first_eol);
  // "HTTP/1.1 200 OK"
  if (status_line.size() < 12 || status_line.substr(0, 5) != "HTTP/") {
    return Status::Unavailable("the server's answer is not HTTP");
  }
  // Exactly three digits, then a space or the end of the line ("HTTP/1.1 2000" is no 200).
  const size_t sp = status_line.find(' ');
  const bool delimited =
      sp != std::string_view::npos && (status_line.size() == sp + 4 || status_line[sp + 4] == ' ');
  std::optional<int64_t> code =
      delimited ? ParseInt64(status_line.substr(sp + 1, 3)) : std::nullopt;
  if (!code || *code < 100 || *code > 599) {
    return Status::Unavailable("the server's answer has no status code");
  }
  HttpResponse resp;
  resp.status = static_cast<int>(*code);
  resp.content_type.clear();
  if (first_eol != std::string_view::npos) {
    for (std::string_view rest = head.substr(first_eol + 2); !rest.empty();) {
      const size_t eol = rest.find("\r\n");
      const std::string_view line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
      // Names lower-cased, like the server's.
      if (const size_t colon = line.find(':'); colon != std::string_view::npos) {
        resp.headers[ToLower(Trim(line.substr(0, colon)))] =
            std::string(Trim(line.substr(colon + 1)));
      }
    }
  }
  if (auto ct = resp.headers.find("content-type"); ct != resp.headers.end()) {
    resp.content_type = ct->second;
  }
  const std::string_view body(raw.data() + end + 4, raw.size() - end - 4);
  auto te = resp.headers.find("transfer-encoding");
  if (te != resp.headers.end() && ToLower(te->second).find("chunked") != std::string::npos) {
    if (!Dechunk(body, &resp.body)) return Status::Unavailable("the server's answer was cut short");
    return resp;
  }
  if (auto cl = resp.headers.find("content-length"); cl != resp.headers.end()) {
    std::optional<int64_t> n = ParseInt64(cl->second);
    if (!n || *n < 0 || static_cast<size_t>(*n) > body.size()) {
      return Status::Unavailable("the server's answer was cut short");
    }
    resp.body.assign(body.substr(0, static_cast<size_t>(*n)));
    return resp;
  }
  resp.body.assign(body);
  return resp;
}

namespace {

// Reads until the server closes the connection (the whole answer) or the deadline.
Result<std::string> ReadAll(int fd, SteadyClock::time_point deadline, int cancel_fd) {
  std::string raw;
  char buf[65536];
  while (true) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
      if (raw.size() > kMaxResponseBytes) return Status::Unavailable("the answer is too large");
      if (raw.find("\r\n\r\n") == std::string::npos && raw.size() > kMaxHeaderBytes) {
        return Status::Unavailable("the answer's header is too large");
      }
      continue;
    }
    if (n == 0) return raw;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!Wait(fd, POLLIN, deadline, cancel_fd)) {
        return Status::Unavailable(errno == ETIMEDOUT
                                       ? "no answer in time"
                                       : std::string("waiting: ") + std::strerror(errno));
      }
      continue;
    }
    return Status::Unavailable(std::string("reading the answer: ") + std::strerror(errno));
  }
}

// The request as sent to `a` (its Host header names it).
std::string BuildRequest(const std::string& method, const std::string& path,
                         const std::string& body, const std::string& bearer_token,
                         const ServerAddress& a) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " +
                    (a.kind == ServerAddress::Kind::kUnix ? std::string("localhost") : a.host) +
                    "\r\nConnection: close\r\nAccept: */*\r\nContent-Type: application/json\r\n";
  if (!bearer_token.empty()) req += "Authorization: Bearer " + bearer_token + "\r\n";
  if (method == "POST" || method == "PUT" || !body.empty()) {
    req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n";
  req += body;
  return req;
}

// One exchange with `a`. On failure, *sent says whether the request may have left (a
// connection was made): such a request must not be sent again anywhere.
Result<HttpResponse> Exchange(const ServerAddress& a, const std::string& request,
                              SteadyClock::time_point deadline, int cancel_fd, bool* sent) {
  *sent = false;
  GP_ASSIGN_OR_RETURN(Fd fd, Open(a, deadline, cancel_fd));
  *sent = true;
  GP_RETURN_IF_ERROR(SendAll(fd.get(), request, deadline, cancel_fd));
  // No half-close after the request: a server may take it for a client that went away.
  GP_ASSIGN_OR_RETURN(std::string raw, ReadAll(fd.get(), deadline, cancel_fd));
  return ParseHttpResponse(raw);
}

// A standby controller's answer: 503 with a JSON object whose `leader` is a string (the
// leader's address, or "" while none is known); *leader gets it.
bool IsStandbyAnswer(const HttpResponse& r, std::string* leader) {
  if (r.status != 503) return false;
  Result<Json> j = ParseJson(r.body, "the server's answer", size_t{1} << 20);
  if (!j.ok() || !j->is_object()) return false;
  auto it = j->find("leader");
  if (it == j->end() || !it->is_string()) return false;
  *leader = it->get<std::string>();
  return true;
}

struct Tried {
  ServerAddress address;
  std::string why;
};

// kUnavailable naming every address tried and why each gave no answer; `hint_for` picks
// the hint (the socket of `gpupool up`, or a server on the network).
Status Unreachable(const std::vector<Tried>& tried, const ServerAddress& hint_for) {
  // Only Unix sockets that do not exist: no pool runs there (a newcomer's first command
  // before `gpupool up`), which the hint says plainly.
  bool missing = !tried.empty();
  for (const Tried& t : tried) {
    struct stat st {};
    if (t.address.kind != ServerAddress::Kind::kUnix || ::stat(t.address.path.c_str(), &st) == 0 ||
        errno != ENOENT) {
      missing = false;
    }
  }
  const std::string hint =
      missing ? std::string(tried.size() == 1 ? ": the socket does not exist"
                                              : ": none of these sockets exists") +
                    ", so no gpupool server runs there: start a pool with `gpupool up`, or set "
                    "--server or GPUPOOL_SERVER to your pool's address"
      : hint_for.kind == ServerAddress::Kind::kUnix
          ? ": is `gpupool up` running? (set --server or GPUPOOL_SERVER)"
          : ": is the server running and reachable?";
  if (tried.size() == 1) {
    return Status::Unavailable("cannot reach the gpupool server at " + tried[0].address.ToString() +
                               ": " + tried[0].why + hint);
  }
  std::string all;
  for (const Tried& t : tried) {
    all += (all.empty() ? "" : ", ") + t.address.ToString() + " (" + t.why + ")";
  }
  return Status::Unavailable("cannot reach the gpupool server: tried " + all + hint);
}

}  // namespace

HttpClient::HttpClient(ServerAddress address, std::string bearer_token)
    : HttpClient(std::vector<ServerAddress>{std::move(address)}, std::move(bearer_token)) {}

HttpClient::HttpClient(std::vector<ServerAddress> addresses, std::string bearer_token)
    : addresses_(std::move(addresses)), bearer_token_(std::move(bearer_token)) {
  if (!addresses_.empty()) current_ = addresses_.front();
}

HttpClient::HttpClient(const HttpClient& other)
    : addresses_(other.addresses_),
      bearer_token_(other.bearer_token_),
      cancel_fd_(other.cancel_fd_),
      current_(other.address()) {}

HttpClient& HttpClient::operator=(const HttpClient& other) {
  if (this == &other) return *this;
  ServerAddress current = other.address();
  addresses_ = other.addresses_;
  bearer_token_ = other.bearer_token_;
  cancel_fd_ = other.cancel_fd_;
  std::lock_guard lock(mu_);
  current_ = std::move(current);
  return *this;
}

ServerAddress HttpClient::address() const {
  std::lock_guard lock(mu_);
  return current_;
}

void HttpClient::Remember(const ServerAddress& a) const {
  std::lock_guard lock(mu_);
  current_ = a;
}

std::string UrlEncode(const std::string& s) {
  static const char* const kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<HttpResponse> HttpClient::Send(const std::string& method, const std::string& path,
                                      const std::string& body, int timeout_ms) const {
  if (addresses_.empty()) {
    return Status::InvalidArgument("HTTP request: no server address to send it to");
  }
  // Nothing of the caller's may break the request line or inject a header.
  for (const std::string* s : {&method, &path, &bearer_token_}) {
    if (s->find_first_of("\r\n") != std::string::npos ||
        (s != &bearer_token_ && s->find(' ') != std::string::npos)) {
      return Status::InvalidArgument(
          "HTTP request: a method, path or token holds a space or line break");
    }
  }
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(std::max(timeout_ms, 1));
  auto index_of = [this](const ServerAddress& a) {
    const std::string name = a.ToString();
    for (size_t i = 0; i < addresses_.size(); ++i) {
      if (addresses_[i].ToString() == name) return i;
    }
    return addresses_.size();
  };
  ServerAddress target = address();
  // The list is walked in order from where this call started, each address once.
  const size_t first = index_of(target) % addresses_.size();
  std::vector<bool> list_tried(addresses_.size(), false);
  std::vector<Tried> tried;
  int hops = 0;
  while (true) {
    if (const size_t i = index_of(target); i < addresses_.size()) list_tried[i] = true;
    bool sent = false;
    Result<HttpResponse> r =
        Exchange(target, BuildRequest(method, path, body, bearer_token_, target), deadline,
                 cancel_fd_, &sent);
    std::string leader;
    if (r.ok() && !IsStandbyAnswer(*r, &leader)) {
      Remember(target);
      return r;
    }
    if (!r.ok() && cancel_fd_ >= 0 && Readable(cancel_fd_)) {
      return Status::Unavailable("HTTP request to " + target.ToString() + ": cancelled");
    }
    if (!r.ok()) {
      tried.push_back({target, r.status().message()});
      // The request may have been processed: sending it again is the caller's decision.
      // Its retry goes to the next address, though: a controller that takes connections
      // but answers nothing (frozen, or cut off from the database) must not hold a
      // client that has others to try.
      if (sent) {
        if (addresses_.size() > 1) {
          const size_t at = index_of(target);
          Remember(addresses_[(at < addresses_.size() ? at + 1 : first + 1) % addresses_.size()]);
        }
        return Unreachable(tried, addresses_.front());
      }
    } else if (leader.empty()) {
      tried.push_back({target, "a standby that knows no leader yet"});
    } else if (Result<ServerAddress> l = ParseServerAddress(leader); !l.ok()) {
      tried.push_back({target, "a standby naming a leader that is not an address: " + leader});
    } else if (hops >= kMaxLeaderHops) {
      tried.push_back({target, "a standby naming " + leader + " as the leader, after " +
                                   std::to_string(hops) + " leaders were followed"});
    } else {
      tried.push_back({target, "a standby; the leader is " + leader});
      ++hops;
      target = std::move(l).value();
      continue;
    }
    size_t next = addresses_.size();
    for (size_t k = 0; k < addresses_.size() && next == addresses_.size(); ++k) {
      const size_t i = (first + k) % addresses_.size();
      if (!list_tried[i]) next = i;
    }
    if (next == addresses_.size()) return Unreachable(tried, addresses_.front());
    target = addresses_[next];
  }
}

}  // namespace gpupool::net
