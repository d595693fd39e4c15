// Test-only helpers for the shared-memory ABI: page-aligned memory with
// inaccessible guard pages, so that a ring which reads or writes outside its
// region faults instead of passing silently, and a CPU-friendly spin/yield
// backoff for tests whose two sides poll each other.
//
// Thread-compatible.
#ifndef RDMAPLANE_API_SHM_TEST_UTIL_H_
#define RDMAPLANE_API_SHM_TEST_UTIL_H_

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace rdmaplane::shm::testing {

inline size_t PageSize() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

inline size_t RoundUp(size_t value, size_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// `bytes` of zeroed, page-aligned read/write memory between two PROT_NONE
// pages. `shared` maps it MAP_SHARED so that it survives fork() as shared
// memory. end() is the first byte of the trailing guard page: an object
// placed at end() - size touches the guard on any overrun.
class GuardedRegion {
 public:
  explicit GuardedRegion(size_t bytes, bool shared = false)
      : page_(PageSize()), usable_(RoundUp(bytes == 0 ? 1 : bytes, page_)) {
    const int flags = (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS;
    void* map = mmap(nullptr, usable_ + 2 * page_, PROT_READ | PROT_WRITE,
                     flags, -1, 0);
    if (map == MAP_FAILED) std::abort();
    map_ = static_cast<uint8_t*>(map);
    if (mprotect(map_, page_, PROT_NONE) != 0 ||
        mprotect(map_ + page_ + usable_, page_, PROT_NONE) != 0) {
      std::abort();
    }
  }
  ~GuardedRegion() { munmap(map_, usable_ + 2 * page_); }
  GuardedRegion(const GuardedRegion&) = delete;
  GuardedRegion& operator=(const GuardedRegion&) = delete;

  uint8_t* data() const { return map_ + page_; }
  uint8_t* end() const { return data() + usable_; }
  size_t size() const { return usable_; }

 private:
  size_t page_;
  size_t usable_;
  uint8_t* map_ = nullptr;
};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins briefly, then yields the CPU, so that two pollers sharing fewer
// cores than they need (or a loaded machine) still make progress.
class Backoff {
 public:
  void Reset() { spins_ = 0; }
  void Pause() {
    if (spins_ < kSpinsBeforeYield) {
      ++spins_;
      CpuRelax();
    } else {
      sched_yield();
    }
  }

 private:
  static constexpr uint32_t kSpinsBeforeYield = 256;
  uint32_t spins_ = 0;
};

}  // namespace rdmaplane::shm::testing

#endif  // RDMAPLANE_API_SHM_TEST_UTIL_H_
