// Who holds the other end of a TCP connection that comes from this very host: the kernel
// knows the uid that made the client's socket (sock_diag, as `ss -e` shows it). The HTTP
// server counts such connections against that uid's caps rather than against the shared
// address 127.0.0.1, so that one local user flooding the TCP port cannot crowd out the
// others (docs/security.md, "Connection exhaustion"). Never an identity for the API:
// requests over TCP authenticate with tokens whatever this says.
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <optional>

namespace gpupool::net {

// Whether `peer` may be a socket of this host: a loopback address, or the address the
// connection reached (`local`), which is what a client on this host connecting to that
// address gets as its source.
bool MaybeLocalPeer(const sockaddr_in& peer, const sockaddr_in& local);

// The uid owning the client socket of the TCP connection from `peer` to `local` when it
// is on this host (in this network namespace); nullopt when it is not, or sock_diag
// cannot say. One netlink exchange; thread-safe.
std::optional<uid_t> LocalTcpPeerUid(const sockaddr_in& peer, const sockaddr_in& local);

}  // namespace gpupool::net
