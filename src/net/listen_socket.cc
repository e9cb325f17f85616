#include "net/listen_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "net/http_server.h"

namespace gpupool::net {
namespace {

std::string ListenErrno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

Result<uint64_t> RaiseOpenFilesLimit() {
  struct rlimit rl {};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return Status::Internal(ListenErrno("getrlimit(NOFILE)"));
  if (rl.rlim_cur != rl.rlim_max) {
    struct rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
      return Status::Unavailable(ListenErrno("setrlimit(NOFILE)"));
    }
    rl = raised;
  }
  return rl.rlim_cur == RLIM_INFINITY ? std::numeric_limits<uint64_t>::max()
                                      : static_cast<uint64_t>(rl.rlim_cur);
}

Result<int> ListenUnix(const std::string& path, int mode) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return Status::InvalidArgument("socket path '" + path + "' is longer than " +
                                   std::to_string(sizeof(addr.sun_path) - 1) +
                                   " bytes: choose a shorter --state-dir");
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(ListenErrno("socket(AF_UNIX)"));
  // A socket file left by a crashed server is stale only if nobody answers on it.
  {
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0) {
      const bool live = connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      close(probe);
      if (live) {
        close(fd);
        return Status::AlreadyExists("another gpupool server is listening on '" + path +
                                     "': stop it first or use another --state-dir");
      }
    }
    unlink(path.c_str());
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Status s = Status::Unavailable(ListenErrno(("bind '" + path + "'").c_str()));
    close(fd);
    return s;
  }
  chmod(path.c_str(), static_cast<mode_t>(mode));
  if (listen(fd, kListenBacklog) != 0) {  // room for a burst of connections beside a flood
    Status s = Status::Unavailable(ListenErrno("listen"));
    close(fd);
    return s;
  }
  return fd;
}

Result<int> ListenTcp(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return Status::InvalidArgument("listen address '" + host + "' is not an IPv4 address");
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(ListenErrno("socket(AF_INET)"));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    Status s =
        Status::Unavailable(ListenErrno(("bind " + host + ":" + std::to_string(port)).c_str()) +
                            ": pick another --port");
    close(fd);
    return s;
  }
  if (listen(fd, kListenBacklog) != 0) {  // room for a burst of connections beside a flood
    Status s = Status::Unavailable(ListenErrno("listen"));
    close(fd);
    return s;
  }
  return fd;
}
}  // namespace gpupool::net
