// The control thread's event loop: one epoll instance, the file descriptors
// the control-plane parts watch (the listening socket, client sockets and
// doorbells, the engine's notification eventfd, the stop eventfd), and the
// handler each one runs when it becomes readable.
//
// A handler may add or remove descriptors, its own included. Events already
// returned by the current epoll_wait for a descriptor removed meanwhile are
// dropped, even if a new descriptor reused its number: a handler never runs
// for a descriptor it was not registered for.
//
// Thread-compatible: the control thread only, except Wake(), which is
// thread-safe.
#ifndef RDMAPLANE_CONTROL_REACTOR_H_
#define RDMAPLANE_CONTROL_REACTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/status/status.h"

namespace rdmaplane::control {

class Reactor {
 public:
  using Handler = std::function<void()>;

  Reactor();
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  // False when epoll or the wake-up eventfd could not be created.
  bool ok() const { return epoll_fd_ >= 0 && wake_fd_ >= 0; }

  // Runs `handler` whenever `fd` is readable (or hung up) until Remove(fd);
  // with `writable`, whenever it has room to write (or hung up) instead.
  // `fd` is not owned.
  absl::Status Add(int fd, Handler handler, bool writable = false);
  void Remove(int fd);
  bool Watches(int fd) const { return handlers_.count(fd) != 0; }

  // Waits up to `timeout_ms` (0: just looks) and runs the handlers of the
  // descriptors that became readable; returns how many ran.
  int RunOnce(int timeout_ms);

  // Makes a RunOnce in progress (or the next one) return at once; any
  // thread.
  void Wake();

 private:
  struct Entry {
    Handler handler;
    uint64_t generation = 0;
  };
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  // Bumped for every Add, so that an event carries which registration of
  // a descriptor it belongs to.
  uint64_t next_generation_ = 1;
  std::map<int, Entry> handlers_;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_REACTOR_H_
