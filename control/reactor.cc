#include "control/reactor.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdmaplane::control {
namespace {

// epoll_event.data carries the descriptor in the low 32 bits and the low
// 32 bits of its registration's generation above them.
uint64_t Tag(int fd, uint64_t generation) {
  return (generation << 32) | static_cast<uint32_t>(fd);
}

}  // namespace

Reactor::Reactor()
    : epoll_fd_(epoll_create1(EPOLL_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!ok()) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = Tag(wake_fd_, 0);
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
}

Reactor::~Reactor() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::Status Reactor::Add(int fd, Handler handler, bool writable) {
  if (fd < 0 || fd == wake_fd_ || handlers_.count(fd) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot watch descriptor ", fd));
  }
  const uint64_t generation = next_generation_++;
  epoll_event ev{};
  ev.events = (writable ? EPOLLOUT : EPOLLIN) | EPOLLRDHUP;
  ev.data.u64 = Tag(fd, generation);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  handlers_[fd] = Entry{std::move(handler), generation};
  return absl::OkStatus();
}

void Reactor::Remove(int fd) {
  auto it = handlers_.find(fd);
  if (it == handlers_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(it);
}

int Reactor::RunOnce(int timeout_ms) {
  epoll_event events[32];
  const int n = epoll_wait(epoll_fd_, events, 32, timeout_ms);
  int ran = 0;
  for (int i = 0; i < n; ++i) {
    const int fd = static_cast<int>(static_cast<uint32_t>(events[i].data.u64));
    const uint32_t generation = static_cast<uint32_t>(events[i].data.u64 >> 32);
    if (fd == wake_fd_) {
      uint64_t v;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &v, sizeof(v));
      continue;
    }
    auto it = handlers_.find(fd);
    // Removed by an earlier handler of this round, perhaps re-added since.
    if (it == handlers_.end() ||
        static_cast<uint32_t>(it->second.generation) != generation) {
      continue;
    }
    // A copy: the handler may remove itself.
    Handler handler = it->second.handler;
    handler();
    ++ran;
  }
  return ran;
}

void Reactor::Wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

}  // namespace rdmaplane::control
