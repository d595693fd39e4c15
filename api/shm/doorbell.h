// Sleeping and waking across processes on a Doorbell word in shared memory
// (futex(2), shared). The waker pays a system call only when the waiter has
// said it is asleep.
//
// Thread-safety: one waiter per doorbell; any number of wakers.
#ifndef RDMAPLANE_API_SHM_DOORBELL_H_
#define RDMAPLANE_API_SHM_DOORBELL_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "api/shm/layout.h"

namespace rdmaplane::shm {

// Publishes "something happened" after the caller made its data visible.
inline void RingDoorbell(Doorbell* bell) {
  // seq_cst pairs with the waiter's seq_cst store of `sleeping`: either the
  // waiter sees our data on its re-check, or we see it asleep and wake it.
  bell->sequence.fetch_add(1, std::memory_order_seq_cst);
  if (bell->sleeping.load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, &bell->sequence, FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

// Sleeps until ready() is true or timeout_ns passes (negative: no limit).
// Returns ready()'s final value.
template <typename Ready>
bool WaitDoorbell(Doorbell* bell, Ready ready, int64_t timeout_ns) {
  timespec deadline{};
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  const int64_t end_ns = deadline.tv_sec * 1'000'000'000LL + deadline.tv_nsec +
                         (timeout_ns < 0 ? 0 : timeout_ns);
  while (true) {
    const uint32_t seen = bell->sequence.load(std::memory_order_acquire);
    if (ready()) return true;
    bell->sleeping.store(1, std::memory_order_seq_cst);
    if (ready()) {
      bell->sleeping.store(0, std::memory_order_relaxed);
      return true;
    }
    timespec rel{};
    timespec* rel_ptr = nullptr;
    if (timeout_ns >= 0) {
      timespec now{};
      clock_gettime(CLOCK_MONOTONIC, &now);
      const int64_t left =
          end_ns - (now.tv_sec * 1'000'000'000LL + now.tv_nsec);
      if (left <= 0) {
        bell->sleeping.store(0, std::memory_order_relaxed);
        return ready();
      }
      rel.tv_sec = left / 1'000'000'000LL;
      rel.tv_nsec = left % 1'000'000'000LL;
      rel_ptr = &rel;
    }
    syscall(SYS_futex, &bell->sequence, FUTEX_WAIT, seen, rel_ptr, nullptr, 0);
    bell->sleeping.store(0, std::memory_order_relaxed);
  }
}

}  // namespace rdmaplane::shm

#endif  // RDMAPLANE_API_SHM_DOORBELL_H_
