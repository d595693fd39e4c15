// Keeps the daemon alive when a client's file loses pages under a mapping of
// it. The daemon maps files that clients register in place (memfds, POSIX
// shared memory, hugetlbfs and disk files: kSetupFile). Anyone who may write
// such a file may also shrink it (ftruncate), punch a hole in a hugetlbfs
// file when no hugepage is free to fill it again, or the disk may fail a
// read: the next access to those pages through the daemon's mapping raises
// SIGBUS, on an engine thread or in the data port, which would end the
// daemon and every other client's work with it.
//
// A watched mapping that raises SIGBUS is replaced, in the signal handler,
// by zero-filled private memory of the same size at the same address, and
// marked lost: the faulting access then goes on over those pages, and so
// does every later one, touching nothing of the file (whose pages there are
// gone). The control thread sees the mark (Lost) and stops serving the
// mapping for new registrations. A SIGBUS at any other address is handled
// as before the guard was installed.
//
// Thread-safe. The handler is async-signal-safe: it takes no lock, allocates
// nothing and calls only mmap. Watch and Unwatch are for one thread at a time
// (the control thread); Lost may be called from any thread.
#ifndef RDMAPLANE_CONTROL_BUS_ERROR_GUARD_H_
#define RDMAPLANE_CONTROL_BUS_ERROR_GUARD_H_

#include <cstddef>
#include <cstdint>

namespace rdmaplane::control {

class BusErrorGuard {
 public:
  // Most mappings watched at once.
  static constexpr int kMaxWatched = 4096;

  // Installs the process's SIGBUS handler (once; later calls do nothing).
  // False when sigaction failed.
  static bool Install();

  // Watches [begin, begin + bytes), a shared mapping of a file (page
  // aligned). Returns its watch, or -1 when kMaxWatched are watched (the
  // caller refuses the mapping). Installs the handler if need be.
  static int Watch(void* begin, size_t bytes);

  // Stops watching the mapping that starts at `begin` (nothing when none
  // does); after it returns, the handler no longer touches those addresses,
  // so the caller may unmap them. Waits for a handler that is replacing them
  // right now.
  static void Unwatch(const void* begin);

  // True once the handler replaced the mapping of `watch`.
  static bool Lost(int watch);

  // Mappings replaced since the process started.
  static uint64_t losses();

  // Mappings watched now.
  static int watched();
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_BUS_ERROR_GUARD_H_
