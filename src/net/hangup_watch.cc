#include "net/hangup_watch.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace gpupool::net {

HangupWatch::HangupWatch(std::function<void(uint64_t id)> on_hangup)
    : on_hangup_(std::move(on_hangup)) {}

Status HangupWatch::Start() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || stop_fd_ < 0) {
    return Status::Unavailable(std::string("cannot watch connections for hang-ups: ") +
                               std::strerror(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // ids are never 0
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, stop_fd_, &ev) != 0) {
    return Status::Unavailable(std::string("epoll_ctl: ") + std::strerror(errno));
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

bool HangupWatch::Watch(int fd, uint64_t id) {
  if (epoll_fd_ < 0 || fd < 0 || id == 0) return false;
  epoll_event ev{};
  ev.events = EPOLLRDHUP | EPOLLONESHOT;  // EPOLLHUP and EPOLLERR come unasked
  ev.data.u64 = id;
  return epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void HangupWatch::Forget(int fd) {
  if (epoll_fd_ >= 0 && fd >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void HangupWatch::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  epoll_fd_ = stop_fd_ = -1;
}

void HangupWatch::Run() {
  epoll_event events[64];
  while (true) {
    const int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) return;  // Stop
      on_hangup_(events[i].data.u64);
    }
  }
}

}  // namespace gpupool::net
