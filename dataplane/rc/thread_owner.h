// Debug check for "engine thread only" objects: the first thread that calls
// Check() owns the object; a call from another thread aborts in debug builds.
//
// Thread-safe by construction (an atomic); compiled out with NDEBUG.
#ifndef RDMAPLANE_DATAPLANE_RC_THREAD_OWNER_H_
#define RDMAPLANE_DATAPLANE_RC_THREAD_OWNER_H_

#include <atomic>
#include <cassert>
#include <functional>
#include <thread>

namespace rdmaplane::rc {

class ThreadOwner {
 public:
  void Check() {
#ifndef NDEBUG
    const size_t self = std::hash<std::thread::id>()(std::this_thread::get_id());
    // The usual case is a plain load; only the first call claims ownership.
    size_t owner = owner_.load(std::memory_order_relaxed);
    if (owner == self) return;
    if (owner == 0 && owner_.compare_exchange_strong(
                          owner, self, std::memory_order_relaxed)) {
      return;
    }
    assert(owner == self && "engine-thread-only object used elsewhere");
#endif
  }
  // Hands the object to another thread (e.g. after setup on the control
  // thread, before the engine starts polling it).
  void Release() { owner_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<size_t> owner_{0};
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_THREAD_OWNER_H_
