// The HTTP server's listening sockets (internal to gpupool_http_server): a Unix socket
// whose stale file a crashed server left is replaced, and a TCP port.
#pragma once

#include <string>

#include "common/status.h"

namespace gpupool::net {

// The backlog both listeners are made with. At most kListenBacklog + 1 connections wait
// on one (the kernel's bound, Unix and TCP alike): Drain takes no more than that, so a
// client connecting over and over while it drains cannot keep it taking for ever.
inline constexpr int kListenBacklog = 4096;

// A listening Unix socket at `path` (mode `mode`). AlreadyExists when another server
// answers there; InvalidArgument when the path is too long for a socket address.
Result<int> ListenUnix(const std::string& path, int mode);
// A listening TCP socket on IPv4 `host`:`port` (0: any free port).
Result<int> ListenTcp(const std::string& host, int port);

}  // namespace gpupool::net
