// What librdmaplane's client shares of its memory with the daemon, as the
// client's two parts see it: the arenas it allocates (client.cc) and the
// page mover that moves an application's pages onto shared memory in
// place for the verbs front end (page_mover.cc, Client::ShareMemory).
// Internal to librdmaplane and its verbs front end (shmdt).
#ifndef RDMAPLANE_API_CLIENT_MEMORY_H_
#define RDMAPLANE_API_CLIENT_MEMORY_H_

#include <cstddef>
#include <cstdint>

namespace rdmaplane::memory {

inline constexpr size_t kHugePage = 2ull << 20;

inline size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// Seals a memfd's size: the daemon maps what is shared only if its size can
// no longer change (F_SEAL_SHRINK, F_SEAL_GROW). Returns whether it took.
bool SealSize(int fd);

// Pages this process moved onto shared memfds (Client::ShareMemory),
// whichever Client moved them: [begin, end) is still that memfd (inode)
// while the mapping there is.
struct MovedPages {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t inode = 0;
  const void* client = nullptr;  // the Client that moved them
  uint64_t offset = 0;  // of the file (memfd, segment) the pages are at begin
};

// shmdt(addr) for the verbs front end, which stands in for libc's: a SysV
// segment attached at `addr` whose pages ShareMemory moved (in part or in
// whole) is no longer all a SysV attachment, so libc's shmdt fails (EINVAL)
// or leaves the moved pages mapped. This detaches what is still attached,
// unmaps the moved pages of that attachment, forgets them, and returns 0;
// for any other address it is libc's shmdt.
// Thread-safe.
int DetachSharedSegment(const void* addr);

// Forgets the pages `client` moved (its destructor): they stay where they
// are, and another client of the process may move them again.
// Thread-safe.
void ForgetMoves(const void* client);

}  // namespace rdmaplane::memory

#endif  // RDMAPLANE_API_CLIENT_MEMORY_H_
