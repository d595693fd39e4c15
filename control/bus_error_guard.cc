#include "control/bus_error_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace rdmaplane::control {
namespace {

// A watch's state. Only Watch turns kFree into kWatched and only Unwatch
// turns anything into kFree; the handler turns kWatched into kReplacing and
// that into kLost.
enum State : uint32_t { kFree = 0, kWatched, kReplacing, kLost };

struct Watched {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> bytes{0};
  std::atomic<uint32_t> state{kFree};
};

Watched g_watched[BusErrorGuard::kMaxWatched];
// Watches at and past this index have never been used: the handler looks
// no further. Only grows.
std::atomic<int> g_used{0};
std::atomic<uint64_t> g_losses{0};
std::atomic<int> g_count{0};
struct sigaction g_previous;
std::once_flag g_installed;
bool g_install_ok = false;

// What was there before the guard: its handler, or the default action (the
// access is retried with it in place, and ends the process as ever).
void Previous(int sig, siginfo_t* info, void* context) {
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 &&
      g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &dfl, nullptr);
}

bool Inside(const Watched& w, uintptr_t at) {
  const uintptr_t begin = w.begin.load(std::memory_order_relaxed);
  return at >= begin && at - begin < w.bytes.load(std::memory_order_relaxed);
}

void OnBusError(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    Watched& w = g_watched[i];
    // Acquire pairs with the release store in Watch: begin and bytes are
    // those of the mapping watched.
    uint32_t state = w.state.load(std::memory_order_acquire);
    if (state == kFree || !Inside(w, at)) continue;
    bool elsewhere = false;
    while (state == kWatched) {
      if (!w.state.compare_exchange_weak(state, kReplacing,
                                         std::memory_order_acquire)) {
        continue;
      }
      // Ours now: Unwatch waits for kLost, so begin and bytes hold still.
      if (!Inside(w, at)) {  // freed and watched anew meanwhile
        w.state.store(kWatched, std::memory_order_release);
        elsewhere = true;
        break;
      }
      const uintptr_t begin = w.begin.load(std::memory_order_relaxed);
      const size_t bytes = w.bytes.load(std::memory_order_relaxed);
      // The kernel's mmap, not libc's (which a sanitizer intercepts).
      const long placed = syscall(
          SYS_mmap, begin, bytes, PROT_READ | PROT_WRITE,
          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0L);
      if (placed == -1) {
        w.state.store(kWatched, std::memory_order_release);
        Previous(sig, info, context);
        errno = saved_errno;
        return;
      }
      g_losses.fetch_add(1, std::memory_order_relaxed);
      // Release pairs with Lost's and Unwatch's acquire loads.
      w.state.store(kLost, std::memory_order_release);
      errno = saved_errno;
      return;
    }
    if (elsewhere || state == kFree) continue;
    // Another thread replaces it right now, or has: the access is retried
    // over the new pages.
    while (w.state.load(std::memory_order_acquire) == kReplacing) {
    }
    errno = saved_errno;
    return;
  }
  Previous(sig, info, context);
  errno = saved_errno;
}

}  // namespace

bool BusErrorGuard::Install() {
  std::call_once(g_installed, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = OnBusError;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    g_install_ok = sigaction(SIGBUS, &action, &g_previous) == 0;
  });
  return g_install_ok;
}

int BusErrorGuard::Watch(void* begin, size_t bytes) {
  if (!Install()) return -1;
  for (int i = 0; i < kMaxWatched; ++i) {
    Watched& w = g_watched[i];
    if (w.state.load(std::memory_order_acquire) != kFree) continue;
    w.begin.store(reinterpret_cast<uintptr_t>(begin),
                  std::memory_order_relaxed);
    w.bytes.store(bytes, std::memory_order_relaxed);
    // Release pairs with the handler's acquire load of the state.
    w.state.store(kWatched, std::memory_order_release);
    if (i >= g_used.load(std::memory_order_relaxed)) {
      g_used.store(i + 1, std::memory_order_release);
    }
    g_count.fetch_add(1, std::memory_order_relaxed);
    return i;
  }
  return -1;
}

void BusErrorGuard::Unwatch(const void* begin) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(begin);
  const int used = g_used.load(std::memory_order_acquire);
  for (int i = 0; i < used; ++i) {
    Watched& w = g_watched[i];
    uint32_t state = w.state.load(std::memory_order_acquire);
    if (state == kFree || w.begin.load(std::memory_order_relaxed) != at) {
      continue;
    }
    while (true) {
      if (state == kReplacing) {
        state = w.state.load(std::memory_order_acquire);
        continue;
      }
      if (w.state.compare_exchange_weak(state, kFree,
                                        std::memory_order_acq_rel)) {
        break;
      }
    }
    g_count.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

bool BusErrorGuard::Lost(int watch) {
  if (watch < 0 || watch >= kMaxWatched) return false;
  return g_watched[watch].state.load(std::memory_order_acquire) == kLost;
}

uint64_t BusErrorGuard::losses() {
  return g_losses.load(std::memory_order_relaxed);
}

int BusErrorGuard::watched() {
  return g_count.load(std::memory_order_relaxed);
}

}  // namespace rdmaplane::control
