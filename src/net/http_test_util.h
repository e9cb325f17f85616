// Helpers for the HTTP server tests: a client of the server's Unix socket as plain as
// can be (one request as bytes, the raw answer), so that a test sees what the server
// wrote.
#pragma once

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace gpupool::net::testing {

// A connection to the Unix socket at `socket_path` that sent `request` as it is and
// reads its answer; -1 on failure. Receives time out after 20 s.
inline int SendRaw(const std::string& socket_path, const std::string& request) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", socket_path.c_str());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{20, 0};  // no test waits this long for an answer that comes
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The same with `GET path` (Connection: close).
inline int SendGet(const std::string& socket_path, const std::string& path) {
  return SendRaw(socket_path, "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

// Everything the server writes until it closes (or 20 s pass); closes `fd`.
inline std::string ReadAll(int fd) {
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return got;
}

// The answer's body: everything after the head ("" without one).
inline std::string BodyOf(const std::string& answer) {
  const size_t at = answer.find("\r\n\r\n");
  return at == std::string::npos ? "" : answer.substr(at + 4);
}

}  // namespace gpupool::net::testing
