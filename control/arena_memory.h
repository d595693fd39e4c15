// The daemon's mappings of client arenas, and the rule that makes zero-copy
// transmit safe: an arena is unmapped only once no frame points into it any
// more. Frames built from an arena can outlive the connection, and even the
// session, that sent them: they may still wait in the data port's transmit
// queue, in its fault-injection delay or in the device's ring. Each arena
// has an rc::MemoryOwner counting them; an arena released while its count
// is not zero waits in a list that Reap retries (every control-loop turn).
//
// Control thread only (thread-compatible). The engine and the port touch
// only the arenas' MemoryOwners.
#ifndef RDMAPLANE_CONTROL_ARENA_MEMORY_H_
#define RDMAPLANE_CONTROL_ARENA_MEMORY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "dataplane/rc/memory_owner.h"

namespace rdmaplane::port {
class EthPort;
}  // namespace rdmaplane::port

namespace rdmaplane::control {

// Client memory the daemon maps must never lose its pages under the daemon:
// a page that vanished (a hole punched in a hugetlb memfd whose freed page
// someone else took) would kill the daemon with SIGBUS on its next access.
// Called once the daemon mapped `fd` (shared, writable): seals the memfd
// against writes through new mappings (F_SEAL_FUTURE_WRITE), which also
// refuses hole punching (fallocate, MADV_REMOVE) from then on, for every
// process. The mappings that exist -- the client's and the daemon's -- keep
// writing. Fails (and the caller refuses the memory) when the memfd can take
// no more seals (F_SEAL_SEAL) and is not sealed so already. Hugetlb pages
// themselves are reserved by the daemon's mapping (no MAP_NORESERVE), so a
// page never touched is there when first touched.
absl::Status SealAgainstHoles(int fd);

// The size of the pages behind a memfd: a hugepage size for MFD_HUGETLB.
size_t PageSizeOf(int fd);

class ArenaMemory {
 public:
  ArenaMemory() = default;
  // Unmaps what nothing references; what frames still reference stays
  // mapped (the process is ending, and the device has stopped).
  ~ArenaMemory();
  ArenaMemory(const ArenaMemory&) = delete;
  ArenaMemory& operator=(const ArenaMemory&) = delete;

  // The data port arenas may be sent from in place, or null (none, or it is
  // about to close: arenas adopted from now on are copied).
  void AttachPort(port::EthPort* port) { port_ = port; }

  // An arena just mapped (`fd` is its memfd): registers it with the port
  // for zero-copy transmit where the port allows, and returns the owner its
  // registrations carry.
  std::unique_ptr<rc::MemoryOwner> Adopt(uint8_t* host, uint64_t bytes,
                                         int fd);
  // The same for a mapping of pages of `page_size` bytes that is no memfd's
  // own (a view of several arenas: Release it with fd -1).
  std::unique_ptr<rc::MemoryOwner> AdoptPages(uint8_t* host, uint64_t bytes,
                                              size_t page_size);
  // No connection uses the arena any more (its session closed, and the
  // engine let go of the session's connections): unmaps it and closes `fd`
  // (unless -1) now, or once frames stop referencing it (Reap).
  void Release(uint8_t* host, uint64_t bytes, int fd,
               std::unique_ptr<rc::MemoryOwner> owner);
  // Unmaps the released arenas nothing references any more; returns how
  // many still wait.
  size_t Reap();
  size_t waiting() const { return waiting_.size(); }

 private:
  struct Mapping {
    uint8_t* host;
    uint64_t bytes;
    int fd;
    std::unique_ptr<rc::MemoryOwner> owner;
  };
  void Unmap(Mapping& m);

  port::EthPort* port_ = nullptr;
  std::vector<Mapping> waiting_;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_ARENA_MEMORY_H_
