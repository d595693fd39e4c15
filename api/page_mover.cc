// The page mover of librdmaplane's client (Client::ShareMemory): for the
// verbs front end's ibv_reg_mr, it moves an application's pages onto a
// shared memfd in place (same addresses, same contents), holding other
// threads' writes to them through userfaultfd while they move, so that the
// daemon can reach them. docs/verbs.md section 4 says what it moves and
// what it refuses.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/client.h"
#include "api/client_memory.h"
#include "api/status.h"

namespace rdmaplane {
namespace memory {
namespace {

std::mutex moved_mu;
std::vector<MovedPages>& Moved() {
  static auto* moved = new std::vector<MovedPages>();
  return *moved;
}

// SysV attachments ShareMemory moved pages of, [begin, end) as the mapping
// was when it first moved pages of it, and the segment's id (the inode
// /proc/self/maps gives a SysV mapping) (moved_mu).
struct Attachment {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t shmid = 0;
};
std::vector<Attachment>& Attachments() {
  static auto* attachments = new std::vector<Attachment>();
  return *attachments;
}

}  // namespace

bool SealSize(int fd) {
  return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0;
}

void ForgetMoves(const void* client) {
  std::lock_guard<std::mutex> lock(moved_mu);
  std::erase_if(Moved(),
                [client](const MovedPages& m) { return m.client == client; });
}

}  // namespace memory

using memory::Moved;
using memory::moved_mu;
using memory::Attachment;
using memory::Attachments;
using memory::MovedPages;

namespace {

}  // namespace

namespace memory {
// A mapping of this process, as /proc/self/maps lists it.
struct MappedRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool readable = false, writable = false, shared = false;
  uint64_t inode = 0;
  uint64_t device = 0;  // of the file (makedev)
  uint64_t offset = 0;  // of the file (or SysV segment) at `begin`
  std::string path;
};
}  // namespace memory

namespace {

using Vma = memory::MappedRange;

std::vector<Vma> ReadMaps() {
  std::vector<Vma> out;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    Vma v;
    char perms[8] = {};
    unsigned long long begin = 0, end = 0, offset = 0, inode = 0;
    char dev[32] = {};
    int path_at = 0;
    if (std::sscanf(line, "%llx-%llx %7s %llx %31s %llu %n", &begin, &end,
                    perms, &offset, dev, &inode, &path_at) < 6) {
      continue;
    }
    v.begin = begin;
    v.end = end;
    v.readable = perms[0] == 'r';
    v.writable = perms[1] == 'w';
    v.shared = perms[3] == 's';
    v.inode = inode;
    unsigned major_id = 0, minor_id = 0;
    if (std::sscanf(dev, "%x:%x", &major_id, &minor_id) == 2) {
      v.device = makedev(major_id, minor_id);
    }
    v.offset = offset;
    if (path_at > 0) {
      v.path = line + path_at;
      while (!v.path.empty() && (v.path.back() == '\n' || v.path.back() == ' ')) {
        v.path.pop_back();
      }
    }
    out.push_back(std::move(v));
  }
  std::fclose(f);
  return out;
}

const Vma* VmaAt(const std::vector<Vma>& maps, uint64_t address) {
  for (const Vma& v : maps) {
    if (address >= v.begin && address < v.end) return &v;
  }
  return nullptr;
}

// Whether every page of [begin, end) is still mapped from the memfd.
bool StillInPlace(const std::vector<Vma>& maps, const MovedPages& m) {
  for (uint64_t at = m.begin; at < m.end;) {
    const Vma* v = VmaAt(maps, at);
    if (v == nullptr || v->inode != m.inode || !v->shared ||
        v->offset + (at - v->begin) != m.offset + (at - m.begin)) {
      return false;
    }
    at = v->end;
  }
  return true;
}

// Whether `fd` is the file `vma` maps.
bool IsFileOf(int fd, const Vma& vma) {
  struct stat st {};
  return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_ino) == vma.inode &&
         static_cast<uint64_t>(st.st_dev) == vma.device;
}

// A descriptor of the file that the shared mapping `vma` maps, open for
// reading and writing (a new open file description: the application may
// close its own), or -1. Found as a descriptor of the process's (how
// memfds, POSIX shared memory and most files stay reachable), else by the
// file's path, else as the mapping itself (/proc/self/map_files, which the
// kernel opens only for a privileged process: how shared anonymous memory
// is reached).
int OpenMappedFile(const Vma& vma) {
  if (DIR* dir = opendir("/proc/self/fd")) {
    int found = -1;
    while (const dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      struct stat st {};
      if (stat(link.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<uint64_t>(st.st_ino) != vma.inode ||
          static_cast<uint64_t>(st.st_dev) != vma.device) {
        continue;
      }
      found = open(link.c_str(), O_RDWR | O_CLOEXEC);
      if (IsFileOf(found, vma)) break;
      if (found >= 0) close(found);
      found = -1;
    }
    closedir(dir);
    if (found >= 0) return found;
  }
  constexpr char kDeleted[] = " (deleted)";
  const std::string& path = vma.path;
  const bool deleted =
      path.size() >= sizeof(kDeleted) - 1 &&
      path.compare(path.size() - (sizeof(kDeleted) - 1), std::string::npos,
                   kDeleted) == 0;
  if (!path.empty() && path[0] == '/' && !deleted) {
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (IsFileOf(fd, vma)) return fd;
    if (fd >= 0) close(fd);
  }
  char map_file[64];
  std::snprintf(map_file, sizeof(map_file), "/proc/self/map_files/%llx-%llx",
                static_cast<unsigned long long>(vma.begin),
                static_cast<unsigned long long>(vma.end));
  const int fd = open(map_file, O_RDWR | O_CLOEXEC);
  if (IsFileOf(fd, vma)) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

// The kernel's mmap and madvise, called directly rather than through
// libc's symbols: while pages move, another library's stand-in for those
// (UCX's memory hooks report every mmap to handlers that allocate from
// memory that may lie in the window) would write to pages the move holds,
// and wait for this very thread; and the pages keep their addresses and
// contents, so nobody needs to hear of the new mapping.
void* KernelMmap(void* addr, size_t bytes, int prot, int flags, int fd) {
  const long r = syscall(SYS_mmap, addr, bytes, prot, flags, fd, 0L);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}
int KernelMadvise(void* addr, size_t bytes, int advice) {
  return static_cast<int>(syscall(SYS_madvise, addr, bytes, advice));
}

// Linux 6.4's, where the headers are older: write protection of pages never
// touched too.
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif

// Holds writes to pages while ShareMemory moves them, so that none made by
// another thread between the copy and the remapping is lost: userfaultfd's
// write protection (UFFDIO_REGISTER_MODE_WP) makes such a write wait in the
// kernel until Release() closes the descriptor, which wakes it; it is then
// made again, into the pages mapped there by then. Reads go on meanwhile.
// Without root the descriptor is for user-mode faults only (as
// vm.unprivileged_userfaultfd=0 allows): a system call of another thread
// that writes into the pages then fails with EFAULT instead of waiting.
// Where userfaultfd cannot protect the pages (a private file mapping, such
// as an executable's .data; an old kernel; a seccomp filter) the pages are
// made read-only instead, and a write another thread makes to them takes
// SIGSEGV, which the hold's handler turns into the same wait (ProtectHold);
// a system call writing there fails with EFAULT, as above.
// Between the constructor and Release() the thread must not write to the
// pages itself, nor allocate (malloc's memory may be among them), and its
// TLS must lie elsewhere (MoveHoldingWrites).
class WriteHold;

// The SIGSEGV side of the read-only hold. One window at a time: moves are
// serialized (moved_mu). The handler is async-signal-safe: it reads
// atomics and yields.
std::atomic<uint64_t> protect_begin{0};
std::atomic<uint64_t> protect_end{0};
std::atomic<bool> protecting{false};
struct sigaction previous_segv;

void OnProtectedWrite(int sig, siginfo_t* info, void* context) {
  const uint64_t at = reinterpret_cast<uint64_t>(info->si_addr);
  if (protecting.load(std::memory_order_acquire) &&
      at >= protect_begin.load(std::memory_order_relaxed) &&
      at < protect_end.load(std::memory_order_relaxed)) {
    // A write to the window while it moves: it is made again once the
    // pages are replaced (returning re-executes it).
    while (protecting.load(std::memory_order_acquire)) sched_yield();
    return;
  }
  // Not ours: what the process had before.
  if ((previous_segv.sa_flags & SA_SIGINFO) != 0 &&
      previous_segv.sa_sigaction != nullptr) {
    previous_segv.sa_sigaction(sig, info, context);
  } else if (previous_segv.sa_handler != SIG_DFL &&
             previous_segv.sa_handler != SIG_IGN) {
    previous_segv.sa_handler(sig);
  } else {
    // The default: the fault, made again on return, ends the process.
    signal(SIGSEGV, SIG_DFL);
  }
}

class ProtectHold {
 public:
  // Makes [begin, begin + bytes) read-only with the handler in place;
  // false (nothing held) when either cannot be done.
  bool Start(uint64_t begin, uint64_t bytes) {
    struct sigaction sa {};
    sa.sa_sigaction = OnProtectedWrite;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    protect_begin.store(begin, std::memory_order_relaxed);
    protect_end.store(begin + bytes, std::memory_order_relaxed);
    protecting.store(true, std::memory_order_release);
    if (sigaction(SIGSEGV, &sa, &previous_segv) != 0) {
      protecting.store(false, std::memory_order_release);
      return false;
    }
    if (mprotect(reinterpret_cast<void*>(begin), bytes, PROT_READ) != 0) {
      protecting.store(false, std::memory_order_release);
      sigaction(SIGSEGV, &previous_segv, nullptr);
      return false;
    }
    begin_ = begin;
    bytes_ = bytes;
    held_ = true;
    return true;
  }
  // `moved`: the pages were replaced (read-write); otherwise they are made
  // writable again. Waiting writes then go on.
  void Release(bool moved) {
    if (!held_) return;
    held_ = false;
    if (!moved) {
      mprotect(reinterpret_cast<void*>(begin_), bytes_,
               PROT_READ | PROT_WRITE);
    }
    protecting.store(false, std::memory_order_release);
    sigaction(SIGSEGV, &previous_segv, nullptr);
  }

 private:
  uint64_t begin_ = 0, bytes_ = 0;
  bool held_ = false;
};

class WriteHold {
 public:
  WriteHold(uint64_t begin, uint64_t bytes) : begin_(begin), bytes_(bytes) {
    const uint64_t wanted = UFFD_FEATURE_WP_UNPOPULATED |
                            UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
    uint64_t supported = 0;
    // The supported features, from a descriptor of their own (UFFDIO_API
    // is taken once per descriptor).
    if (const int probe = Open(); probe >= 0) {
      uffdio_api api{};
      api.api = UFFD_API;
      if (ioctl(probe, UFFDIO_API, &api) == 0) supported = api.features;
      close(probe);
    }
    fd_ = Open();
    if (fd_ < 0) return;
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = wanted & supported;
    if (ioctl(fd_, UFFDIO_API, &api) != 0) {
      Drop();
      return;
    }
    // Without WP_UNPOPULATED a page never touched would take a write
    // unprotected: give every page of the window one first.
    if ((api.features & UFFD_FEATURE_WP_UNPOPULATED) == 0 &&
        KernelMadvise(reinterpret_cast<void*>(begin), bytes,
                      MADV_POPULATE_WRITE) != 0) {
      Drop();
      return;
    }
    uffdio_register reg{};
    reg.range = {begin, bytes};
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) {
      Drop();
      return;
    }
    if (!Protect(true)) {
      uffdio_range range{begin, bytes};
      ioctl(fd_, UFFDIO_UNREGISTER, &range);
      Drop();
    }
  }
  // The constructor's try, and the read-only hold where it failed (or
  // where RDMAPLANE_NO_USERFAULTFD=1 says to do without userfaultfd, as a
  // seccomp filter would: the read-only hold is then tested everywhere).
  static void Start(WriteHold* hold, ProtectHold* fallback) {
    const char* without = getenv("RDMAPLANE_NO_USERFAULTFD");
    if (without != nullptr && std::strcmp(without, "1") == 0) {
      hold->Release(/*moved=*/false);
    }
    if (hold->fd_ < 0) fallback->Start(hold->begin_, hold->bytes_);
  }
  WriteHold(const WriteHold&) = delete;
  WriteHold& operator=(const WriteHold&) = delete;
  ~WriteHold() { Release(/*moved=*/false); }

  // Lets writes go on. `moved`: the pages were replaced (their protection
  // went with them); otherwise it is lifted first.
  void Release(bool moved) {
    if (fd_ < 0) return;
    if (!moved) Protect(false);
    Drop();
  }

 private:
  static int Open() {
    int fd = static_cast<int>(
        syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (fd < 0 && errno == EPERM) {
      fd = static_cast<int>(syscall(SYS_userfaultfd,
                                    O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    }
    return fd;
  }
  bool Protect(bool on) {
    uffdio_writeprotect wp{};
    wp.range = {begin_, bytes_};
    wp.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
    return ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) == 0;
  }
  // Closing the descriptor unregisters its ranges and wakes every write
  // waiting on it.
  void Drop() {
    close(fd_);
    fd_ = -1;
  }

  uint64_t begin_, bytes_;
  int fd_ = -1;
};

// One move of ShareMemory's: the window's pages are copied into the memfd
// (mapped at `copy`), which then replaces them at their addresses.
struct Move {
  uint64_t begin, bytes;
  void* copy;
  int fd;
  ssize_t copied = -1;        // what process_vm_readv copied
  void* placed = MAP_FAILED;  // the memfd at `begin`, or MAP_FAILED
};

// Copies and remaps on a thread of its own, with writes to the window held
// (WriteHold): the calling thread's TLS may lie in the window (the main
// thread's is on the heap), and the kernel writes its rseq area there when
// it returns to user mode after being scheduled out or signalled, which
// would then wait for this very thread. The new thread's stack and TLS are
// a mapping of their own; it writes only those and `move` (on the caller's
// stack, which ShareMemory keeps out of windows) until the hold ends, and
// allocates nothing. False when the thread could not start.
bool MoveHoldingWrites(Move* move) {
  pthread_t mover;
  const auto run = [](void* arg) -> void* {
    Move* m = static_cast<Move*>(arg);
    WriteHold hold(m->begin, m->bytes);
    ProtectHold fallback;
    WriteHold::Start(&hold, &fallback);
    // Copied with process_vm_readv so that a hole in the range is an
    // error here rather than a crash.
    iovec local{m->copy, m->bytes};
    iovec remote{reinterpret_cast<void*>(m->begin), m->bytes};
    m->copied = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (m->copied == static_cast<ssize_t>(m->bytes)) {
      // Everything written to the range from here on lands in the memfd.
      m->placed = KernelMmap(reinterpret_cast<void*>(m->begin), m->bytes,
                             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                             m->fd);
    }
    hold.Release(/*moved=*/m->placed != MAP_FAILED);
    fallback.Release(/*moved=*/m->placed != MAP_FAILED);
    return nullptr;
  };
  // No signal may bring the calling thread back to user mode meanwhile
  // (the kernel would write its rseq area, maybe in the window: a wait,
  // or EFAULT and SIGSEGV where only user-mode faults are held). The mover
  // starts with every signal blocked too.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const bool started = pthread_create(&mover, nullptr, run, move) == 0;
  if (started) pthread_join(mover, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return started;
}

constexpr uint64_t kShareWindow = 2ull << 20;
constexpr uint64_t kWholeMapping = 16ull << 20;

}  // namespace

namespace memory {

int DetachSharedSegment(const void* addr) {
  using Shmdt = int (*)(const void*);
  static const Shmdt libc_shmdt = reinterpret_cast<Shmdt>(
      dlvsym(RTLD_NEXT, "shmdt", "GLIBC_2.2.5"));
  if (libc_shmdt == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  std::lock_guard<std::mutex> lock(moved_mu);
  const uint64_t at = reinterpret_cast<uint64_t>(addr);
  std::vector<Attachment>& attachments = Attachments();
  auto it = std::find_if(attachments.begin(), attachments.end(),
                         [at](const Attachment& a) { return a.begin == at; });
  const int r = libc_shmdt(addr);
  if (it == attachments.end()) return r;
  const int error = errno;
  const Attachment a = *it;
  attachments.erase(it);
  // What libc left of the attachment: its moved pages still in place and,
  // where its start moved (libc found no attachment there), the parts still
  // attached, which munmap detaches as shmdt would.
  const std::vector<Vma> maps = ReadMaps();
  bool unmapped = false;
  for (const Vma& v : maps) {
    if (v.begin < a.begin || v.end > a.end) continue;
    const bool moved = std::any_of(
        Moved().begin(), Moved().end(), [&v](const MovedPages& m) {
          return v.begin >= m.begin && v.end <= m.end && v.inode == m.inode &&
                 v.shared;
        });
    const bool attached = r != 0 && v.path.rfind("/SYSV", 0) == 0;
    if ((moved || attached) &&
        munmap(reinterpret_cast<void*>(v.begin), v.end - v.begin) == 0) {
      unmapped = true;
    }
  }
  std::erase_if(Moved(), [&a](const MovedPages& m) {
    return m.begin >= a.begin && m.end <= a.end;
  });
  if (r == 0 || unmapped) return 0;
  errno = error;
  return r;
}

}  // namespace memory


absl::Status Client::ShareMemory(void* addr, uint64_t length) {
  const uint64_t start = reinterpret_cast<uint64_t>(addr);
  if (length == 0 || start + length < start) {
    return MakeStatus(RDP_ERR_INVALID, "empty or wrapping range");
  }
  std::lock_guard<std::mutex> moved_lock(moved_mu);
  std::lock_guard<std::mutex> lock(arena_mu_);
  for (const auto& a : arenas_) {
    const uint64_t base = reinterpret_cast<uint64_t>(a->base);
    if (!a->shared_in_place && start >= base &&
        start + length <= base + a->bytes) {
      return absl::OkStatus();  // an arena of rdp_alloc's
    }
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t first = start / page * page;
  const uint64_t last = memory::RoundUp(start + length, page);
  const std::vector<Vma> maps = ReadMaps();
  // Moves whose pages the application unmapped since (munmap, or free
  // giving them back) are forgotten where they are gone: pages mapped
  // there now move again, onto a new arena that the daemon lets hold
  // those addresses; registrations made before keep the old pages. Those
  // anywhere in the mappings that hold the range, not only in the range:
  // a move or file share takes a window around it, which a forgotten move
  // must not cut short.
  uint64_t scan_first = first, scan_last = last;
  if (const Vma* v = VmaAt(maps, first)) scan_first = v->begin;
  if (const Vma* v = VmaAt(maps, last - 1)) scan_last = std::max(last, v->end);
  std::vector<MovedPages>& moved = Moved();
  std::vector<MovedPages> kept;
  for (const MovedPages& m : moved) {
    if (m.end <= scan_first || m.begin >= scan_last ||
        StillInPlace(maps, m)) {
      kept.push_back(m);
      continue;
    }
    for (uint64_t at = m.begin; at < m.end;) {
      const Vma* v = VmaAt(maps, at);
      const uint64_t next = v == nullptr ? at + page : std::min(v->end, m.end);
      if (v != nullptr && v->inode == m.inode && v->shared &&
          v->offset + (at - v->begin) == m.offset + (at - m.begin)) {
        if (!kept.empty() && kept.back().inode == m.inode &&
            kept.back().end == at) {
          kept.back().end = next;
        } else {
          kept.push_back(
              {at, next, m.inode, m.client, m.offset + (at - m.begin)});
        }
      }
      at = next;
    }
  }
  moved = std::move(kept);
  // The pages of the range no move of this client holds: each run of them
  // moves (with its window), after every one was found movable.
  struct Gap {
    uint64_t begin, end;
    Vma vma;
  };
  std::vector<Gap> gaps;
  for (uint64_t at = first; at < last;) {
    // This client's own move or share of the page, else another client's
    // (another context of this process, of this daemon or another).
    const MovedPages* holder = nullptr;
    const MovedPages* others = nullptr;
    for (const MovedPages& m : moved) {
      if (at < m.begin || at >= m.end) continue;
      if (m.client == this) holder = &m;
      if (m.client != this) others = &m;
    }
    if (holder != nullptr) {
      at = holder->end;
      continue;
    }
    if (others != nullptr) {
      // Pages moved (or a file shared) for another context: its memfd, or
      // the file, is shared here as it is, and the daemon maps the same
      // pages (for a memfd the daemon sealed, from the other session's
      // mapping: only a context of the same daemon can have it).
      const Vma* vma = VmaAt(maps, at);
      if (vma == nullptr || !vma->shared || vma->inode != others->inode ||
          vma->path.rfind("/SYSV", 0) == 0) {
        return MakeStatus(RDP_ERR_INVALID,
                          "the range was registered through another "
                          "rdmaplane device of this process");
      }
      const uint64_t end = std::min(others->end, last);
      if (absl::Status st = ShareFile(*vma, at, end, moved); !st.ok()) {
        return MakeStatus(
            RDP_ERR_INVALID,
            absl::StrCat("the range was registered through another "
                         "rdmaplane device of this process, and cannot be "
                         "shared with this one: ",
                         st.message()));
      }
      at = moved.back().end;
      continue;
    }
    const Vma* vma = VmaAt(maps, at);
    if (vma == nullptr) {
      return MakeStatus(RDP_ERR_FAULT,
                        "part of the range is not mapped memory");
    }
    uint64_t end = std::min(vma->end, last);
    for (const MovedPages& m : moved) {
      if (m.begin > at && m.begin < end) end = m.begin;
    }
    // Only the process's own anonymous memory can move: private, readable
    // and writable (heap, malloc, memalign, anonymous mmap). A SysV shared
    // memory segment (shmat, e.g. perftest's hugepages) is the process's
    // own memory too: it moves like anonymous memory, and so do pages
    // moved before for a client that has closed since.
    const bool sysv = vma->path.rfind("/SYSV", 0) == 0;
    const bool moved_before =
        vma->path.rfind("/memfd:rdmaplane-verbs", 0) == 0;
    // Nor this thread's stack (the main thread's is "[stack]"; another
    // thread's is anonymous memory): its own frames would move under it.
    const uint64_t here =
        reinterpret_cast<uint64_t>(__builtin_frame_address(0));
    if (here >= vma->begin && here < vma->end) {
      return MakeStatus(RDP_ERR_INVALID,
                        "the range is on the stack of the thread registering "
                        "it");
    }
    if (!vma->readable || !vma->writable || vma->path == "[stack]") {
      return MakeStatus(RDP_ERR_INVALID,
                        "only read-write memory can be registered");
    }
    // A file the process maps shared (a memfd, POSIX shared memory, a
    // hugetlbfs or disk file, shared anonymous memory): its pages are the
    // file's and stay where they are; the daemon maps the same file.
    if (!sysv && !moved_before && vma->shared) {
      if (absl::Status st = ShareFile(*vma, at, end, moved); !st.ok()) {
        return st;
      }
      at = moved.back().end;
      continue;
    }
    // A private file mapping (an executable's .data and .bss, a file
    // mapped MAP_PRIVATE) moves like anonymous memory: its pages are the
    // process's own copies, and what it reads there stays the same. But
    // not anonymous hugepage memory, which the kernel lists as a file:
    // its pages cannot be copied piecemeal.
    if (!sysv && !moved_before && vma->path.rfind("/anon_hugepage", 0) == 0) {
      return MakeStatus(RDP_ERR_INVALID,
                        "private hugepage memory cannot be registered");
    }
    // A SysV segment: the daemon attaches it itself where it can, and it
    // stays what it is (shared with the other processes attached to it,
    // detached by shmdt as ever); otherwise its pages move like anonymous
    // memory.
    if (sysv && ShareSegment(maps, *vma, moved)) continue;
    if (sysv) {
      // Remembered for shmdt (DetachSharedSegment); one the application
      // unmapped without it, where this one lies, is forgotten.
      std::vector<Attachment>& attachments = Attachments();
      const bool known = std::any_of(
          attachments.begin(), attachments.end(), [vma](const Attachment& a) {
            return a.shmid == vma->inode && vma->begin >= a.begin &&
                   vma->end <= a.end;
          });
      if (!known) {
        std::erase_if(attachments, [vma](const Attachment& a) {
          return a.begin < vma->end && vma->begin < a.end;
        });
        attachments.push_back({vma->begin, vma->end, vma->inode});
      }
    }
    gaps.push_back({at, end, *vma});
    at = end;
  }
  for (const Gap& gap : gaps) {
    if (absl::Status st = MoveWindow(gap.vma.begin, gap.vma.end, gap.begin,
                                     gap.end, moved);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

// ShareMemory's SysV segments: `vma` maps part of one; the whole
// attachment is handed to the daemon by the segment's id when it is all
// still mapped and none of it moved. True when the daemon took it (it is
// then in `moved`, held where it is).
bool Client::ShareSegment(const std::vector<memory::MappedRange>& maps,
                          const memory::MappedRange& vma,
                          std::vector<memory::MovedPages>& moved) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const int shmid = static_cast<int>(vma.inode);
  shmid_ds ds{};
  if (vma.inode > static_cast<uint64_t>(INT32_MAX) || vma.offset > vma.begin ||
      shmctl(shmid, IPC_STAT, &ds) != 0) {
    return false;
  }
  const uint64_t begin = vma.begin - vma.offset;
  const uint64_t end = begin + memory::RoundUp(ds.shm_segsz, page);
  for (uint64_t at = begin; at < end;) {
    const memory::MappedRange* v = nullptr;
    for (const memory::MappedRange& m : maps) {
      if (at >= m.begin && at < m.end) v = &m;
    }
    if (v == nullptr || v->inode != vma.inode || v->path != vma.path) {
      return false;
    }
    at = v->end;
  }
  for (const MovedPages& m : moved) {
    if (m.begin < end && begin < m.end) return false;
  }
  absl::StatusOr<uint32_t> id = HandOverSegment(
      static_cast<uint32_t>(shmid), begin, end - begin);
  if (!id.ok()) return false;
  auto arena = std::make_unique<Arena>();
  arena->base = reinterpret_cast<uint8_t*>(begin);
  arena->bytes = end - begin;
  arena->id = *id;
  arena->shared_in_place = true;
  arenas_.push_back(std::move(arena));
  moved.push_back({begin, end, vma.inode, this});
  return true;
}

// ShareMemory's shared file mappings: hands the daemon the file of `vma`
// for its pages that no move holds around [start, end): the whole mapping,
// but for what moves hold. Adds them to `moved` on success.
absl::Status Client::ShareFile(const memory::MappedRange& vma, uint64_t start,
                               uint64_t end,
                               std::vector<memory::MovedPages>& moved) {
  uint64_t begin = vma.begin, stop = vma.end;
  for (const MovedPages& m : moved) {
    if (m.end <= start && m.end > begin) begin = m.end;
    if (m.begin >= end && m.begin < stop) stop = m.begin;
  }
  const int fd = OpenMappedFile(vma);
  if (fd < 0) {
    return MakeStatus(RDP_ERR_INVALID,
                      absl::StrCat("the shared mapping of ", vma.path,
                                   " cannot be registered: no descriptor, "
                                   "path or map_files entry reaches its file"));
  }
  const uint64_t offset = vma.offset + (begin - vma.begin);
  absl::StatusOr<uint32_t> id = HandOverFile(fd, begin, stop - begin, offset);
  close(fd);  // the daemon has its own
  if (!id.ok()) return id.status();
  auto arena = std::make_unique<Arena>();
  arena->base = reinterpret_cast<uint8_t*>(begin);
  arena->bytes = stop - begin;
  arena->id = *id;
  arena->shared_in_place = true;
  arenas_.push_back(std::move(arena));
  moved.push_back({begin, stop, vma.inode, this, offset});
  return absl::OkStatus();
}

// Moves the pages under [start, end) (which no move holds; in the mapping
// [vma_begin, vma_end)) onto a new arena, widened to its whole mapping when
// that is at most 16 MiB (a buffer of its own: mmap, a large malloc), else
// to a 2 MiB window within it, so that neighbouring buffers (small malloc'd
// ones sharing a page, or a larger range registered later around this one)
// move with it and their registrations find them inside; never into pages
// moved before. 4 KiB pages or, for memory on hugepages (where a 4 KiB
// mapping cannot replace part of one), 2 MiB.
absl::Status Client::MoveWindow(uint64_t vma_begin, uint64_t vma_end,
                                uint64_t start, uint64_t end,
                                std::vector<memory::MovedPages>& moved) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const bool whole_mapping = vma_end - vma_begin <= kWholeMapping;
  for (const bool huge : {false, true}) {
    const uint64_t unit = huge ? memory::kHugePage : page;
    uint64_t begin = whole_mapping
                         ? vma_begin
                         : std::max(vma_begin, start / kShareWindow * kShareWindow);
    uint64_t stop = whole_mapping
                        ? vma_end
                        : std::min(vma_end, memory::RoundUp(end, kShareWindow));
    for (const MovedPages& m : moved) {
      if (m.end <= start && m.end > begin) begin = m.end;
      if (m.begin >= end && m.begin < stop) stop = m.begin;
    }
    begin = std::max(begin / unit * unit, vma_begin);
    stop = memory::RoundUp(stop, unit);
    bool onto_moved = false;
    for (const MovedPages& m : moved) {
      onto_moved |= m.begin < stop && begin < m.end;
    }
    if (begin > start || stop < end || stop > vma_end || onto_moved) {
      continue;
    }
    const uint64_t bytes = stop - begin;
    const int fd = memfd_create(
        "rdmaplane-verbs",
        MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0));
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        !memory::SealSize(fd)) {
      if (fd >= 0) close(fd);
      continue;
    }
    void* copy = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (copy == MAP_FAILED) {
      close(fd);
      continue;
    }
    Move move{begin, bytes, copy, fd};
    if (!MoveHoldingWrites(&move)) {
      munmap(copy, bytes);
      close(fd);
      return MakeStatus(RDP_ERR_NO_BUFFERS,
                        "cannot start a thread to move the range");
    }
    munmap(copy, bytes);
    if (move.copied != static_cast<ssize_t>(bytes)) {
      close(fd);
      return MakeStatus(RDP_ERR_FAULT, "the range is not all mapped memory");
    }
    if (move.placed == MAP_FAILED) {  // e.g. part of a hugepage mapping
      close(fd);
      continue;
    }
    auto arena = std::make_unique<Arena>();
    arena->base = reinterpret_cast<uint8_t*>(begin);
    arena->bytes = bytes;
    arena->fd = fd;
    arena->shared_in_place = true;
    absl::Status st2 = HandOver(arena.get());
    // Refused or not, the pages stay where they are, with their contents
    // (refused, they may move again later).
    if (!st2.ok()) {
      close(fd);
      return st2;
    }
    struct stat st {};
    fstat(fd, &st);
    moved.push_back({begin, stop, static_cast<uint64_t>(st.st_ino), this});
    arenas_.push_back(std::move(arena));
    return absl::OkStatus();
  }
  return MakeStatus(RDP_ERR_NO_BUFFERS,
                    "cannot move the range onto shared memory");
}

}  // namespace rdmaplane
