#include "net/local_peer.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace gpupool::net {

bool MaybeLocalPeer(const sockaddr_in& peer, const sockaddr_in& local) {
  const uint32_t a = ntohl(peer.sin_addr.s_addr);
  return (a >> 24) == 127 || peer.sin_addr.s_addr == local.sin_addr.s_addr;
}

namespace {

// One netlink socket per thread that asks, kept open: a flood of connections asks once
// for each.
class DiagSocket {
 public:
  DiagSocket() : fd_(::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG)) {}
  ~DiagSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  DiagSocket(const DiagSocket&) = delete;
  DiagSocket& operator=(const DiagSocket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::optional<uid_t> LocalTcpPeerUid(const sockaddr_in& peer, const sockaddr_in& local) {
  thread_local DiagSocket diag;
  const int nl = diag.fd();
  if (nl < 0) return std::nullopt;
  // An answer left over from an earlier exchange that timed out is dropped first.
  alignas(nlmsghdr) char buf[8192];
  while (::recv(nl, buf, sizeof buf, MSG_DONTWAIT) > 0) {
  }
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = AF_INET;
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0U;
  // The client's socket: its source is our peer, its destination us.
  msg.req.id.idiag_sport = peer.sin_port;
  msg.req.id.idiag_dport = local.sin_port;
  msg.req.id.idiag_src[0] = peer.sin_addr.s_addr;
  msg.req.id.idiag_dst[0] = local.sin_addr.s_addr;
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  std::optional<uid_t> uid;
  if (::sendto(nl, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof msg)) {
    pollfd p{nl, POLLIN, 0};
    // The kernel answers at once; the wait only bounds a kernel that does not.
    if (::poll(&p, 1, 100) > 0) {
      const ssize_t n = ::recv(nl, buf, sizeof buf, MSG_DONTWAIT);
      const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
      if (n > 0 && NLMSG_OK(h, static_cast<unsigned>(n)) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
          h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
        const auto* d = static_cast<const inet_diag_msg*>(NLMSG_DATA(h));
        uid = d->idiag_uid;
      }
    }
  }
  return uid;
}

}  // namespace gpupool::net
