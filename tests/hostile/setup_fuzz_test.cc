// Seeded fuzzing of the daemon's Unix control socket: the setup messages
// (api/shm/setup.h) a client sends before and after its hello, with or
// without descriptors, and the operator's admin queries (control/admin.h).
//
// Each iteration opens one connection to the in-process daemon and sends a
// plan made from valid hellos, arenas and admin queries and then mutated:
// bit flips, wrong magic, version, type, length, address, id and text
// fields, zero and huge values, messages back to back, truncation at every
// length class, garbage after the messages, writes split anywhere, no
// descriptor where one is needed and one or many where none is, descriptors
// of the wrong kind (pipes, /dev/null, sockets, eventfds, files, folders,
// memfds unsealed, too short, write-sealed or read-only), and an end of
// stream, an abrupt close or a socket left open. A model of the protocol
// (setup.h: "each side validates magic, version and type, and closes the
// socket on anything malformed") predicts the daemon's answers from the
// bytes and descriptors it will read, and each iteration checks:
//   - the answers: every refusal is an error reply or a closed socket as the
//     protocol says, never a session half made (no doorbells with a refused
//     hello, nothing kept of a refused arena);
//   - once the connection is gone, the daemon holds what it held before: its
//     counters, this process's descriptors (the daemon's are among them),
//     no descriptor or mapping of a memfd that was sent, no pipe end kept;
//   - no descriptor is closed twice anywhere in the process (close(2) is
//     interposed below);
//   - the bad-request and reclaimed-session counters move as predicted.
// A well-behaved pair of clients (a session with registered buffers and a
// connection doing verified RDMA WRITEs and READs) opened before the fuzzing
// keeps moving verified bytes during it and after it.
//
// Each run takes a new seed (tests/testing/fuzz.h prints it);
// RDP_FUZZ_SEED=<n> replays a run: every failure names the seed and the
// iteration, and iteration i draws from its own seed, so a longer run
// repeats a shorter one first. RDP_FUZZ_ITERATIONS=<n> sets how many
// connections each loop makes (a few thousand by default, a few seconds in
// all); for a longer local run, give bazel test
// --test_env=RDP_FUZZ_ITERATIONS=200000 --test_timeout=3600.
#include <fcntl.h>
#include <linux/magic.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/shm/layout.h"
#include "api/shm/setup.h"
#include "control/daemon.h"
#include "tests/testing/counters.h"
#include "tests/testing/fuzz.h"
#include "tests/testing/hostile_client.h"

namespace {

// Descriptors closed while not open, anywhere in this process.
std::atomic<uint64_t> g_bad_closes{0};
std::atomic<int> g_last_bad_close{-1};

}  // namespace

// Every close(2) of this process, the daemon's included, comes through here
// (glibc's own internal closes do not). A descriptor closed twice shows here
// even when no other thread reused its number in between; when one did, the
// second close took that thread's descriptor, which the descriptor count of
// the checks notices.
extern "C" int close(int fd) {
  if (syscall(SYS_close, fd) == 0) return 0;
  if (errno == EBADF && fd >= 0) {
    g_last_bad_close.store(fd);
    g_bad_closes.fetch_add(1);
  }
  return -1;
}

namespace rdmaplane {
namespace {

using testing::CountOpenFds;
using testing::FuzzIterations;
using testing::FuzzSeed;
using testing::Held;
using testing::HeldOf;
using testing::IterationSeed;
using testing::kArenaMemfd;
using testing::kRefusedMemfd;
using testing::kSeals;
using testing::NoRawMemfdsLeft;
using testing::Pipe;
using testing::RawClient;
using testing::Rng;

// What a working daemon reaches in milliseconds; the bound only turns a
// hang into a failure (testing::kHangLimit).
bool WaitFor(const std::function<bool()>& done,
             absl::Duration timeout = testing::kHangLimit) {
  return testing::WaitFor(done, timeout);
}

constexpr uint64_t kRegionBytes = shm::SessionRegionBytes();
constexpr size_t kMsg = sizeof(shm::SetupMessage);
constexpr uint64_t kPage = 4096;
// Client addresses of the fuzzed arenas: a few dozen pages, so that they
// overlap now and then (a newer arena takes the addresses over).
constexpr uint64_t kArenaBase = 0x7e0000000000;
constexpr uint64_t kArenaSlots = 48;
constexpr uint64_t kArenaSizes[] = {kPage, 2 * kPage, 16 * kPage};
// The topics and formats the daemon answers (control/status.h
// kStatusTopics, control/admin.h kAdminFormatText and kAdminFormatJson).
constexpr std::array<std::string_view, 5> kTopics = {
    "status", "clients", "connections", "registrations", "counters"};
constexpr uint32_t kFormatText = 0;
constexpr uint32_t kFormatJson = 1;
constexpr uid_t kNobody = 65534;
// The bound on any one answer: only reached when something is wrong (a
// working daemon answers in milliseconds), so as generous as
// testing::kHangLimit, for ThreadSanitizer on two busy CPUs.
constexpr absl::Duration kAnswerLimit = testing::kHangLimit;

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// --- Descriptors -------------------------------------------------------------

// What may travel with a message.
enum class FdKind : uint8_t {
  kRegion,       // the plan's session memfd, formatted as librdmaplane does
  kArena,        // a fresh memfd of the wanted size, sealed as arenas are
  kBlank,        // a sealed memfd of a region's size without a session header
  kUnsealed,     // a memfd of the wanted size, no seals
  kShort,        // sealed, half the wanted size
  kWriteSealed,  // sealed against writes too: cannot be mapped writable
  kFutureWriteSealed,
  kReadOnly,  // a sealed memfd of the wanted size, opened again read-only
  kPipe,      // a pipe's write end
  kDevNull,
  kSocket,
  kEventfd,
  kFile,       // a regular file of the wanted size (files cannot be sealed)
  kDirectory,  // an O_PATH descriptor of a folder
  kCount,
};

const char* Name(FdKind k) {
  switch (k) {
    case FdKind::kRegion:
      return "region";
    case FdKind::kArena:
      return "arena";
    case FdKind::kBlank:
      return "blank";
    case FdKind::kUnsealed:
      return "unsealed";
    case FdKind::kShort:
      return "short";
    case FdKind::kWriteSealed:
      return "write-sealed";
    case FdKind::kFutureWriteSealed:
      return "future-write-sealed";
    case FdKind::kReadOnly:
      return "read-only";
    case FdKind::kPipe:
      return "pipe";
    case FdKind::kDevNull:
      return "/dev/null";
    case FdKind::kSocket:
      return "socket";
    case FdKind::kEventfd:
      return "eventfd";
    case FdKind::kFile:
      return "file";
    case FdKind::kDirectory:
      return "folder";
    case FdKind::kCount:
      break;
  }
  return "?";
}

// What the daemon can learn of a descriptor it is sent.
struct FdFacts {
  enum class Header { kNone, kValid, kBlank, kScribbled };
  uint64_t size = 0;      // fstat
  bool sealed = false;    // against shrinking
  bool writable = false;  // can be mapped shared and writable
  Header header = Header::kNone;
  // For kSetupFile: a regular file, open for reading and writing, on a
  // filesystem the daemon maps files of in place (memory, a local disk).
  bool file_in_place = false;
};

// One descriptor the test sends; the test's own copy closes with it.
// The plan's session region (formatted, perhaps scribbled on).
bool IsRegion(const FdFacts& f) {
  return f.header == FdFacts::Header::kValid ||
         f.header == FdFacts::Header::kScribbled;
}

struct SentFd {
  int fd = -1;
  FdFacts facts;
  std::shared_ptr<Pipe> pipe;  // kPipe: to see every copy of its end go
};

// Makes and keeps the descriptors of one iteration.
class FdPool {
 public:
  FdPool() = default;
  FdPool(const FdPool&) = delete;
  FdPool& operator=(const FdPool&) = delete;
  ~FdPool() { CloseAll(); }

  // A descriptor of `kind` for a message that wants `bytes`; nullptr if it
  // could not be made. `region` is the plan's session memfd.
  const SentFd* Make(FdKind kind, uint64_t bytes, int region, bool scribbled) {
    auto s = std::make_unique<SentFd>();
    bool writable = false;
    FdFacts::Header header = FdFacts::Header::kNone;
    switch (kind) {
      case FdKind::kRegion:
        s->fd = dup(region);
        writable = true;
        header =
            scribbled ? FdFacts::Header::kScribbled : FdFacts::Header::kValid;
        break;
      case FdKind::kArena:
        s->fd = Memfd(kArenaMemfd, bytes, kSeals);
        writable = true;
        header = FdFacts::Header::kBlank;
        break;
      case FdKind::kBlank:
        s->fd = Memfd(kRefusedMemfd, kRegionBytes, kSeals);
        writable = true;
        header = FdFacts::Header::kBlank;
        break;
      case FdKind::kUnsealed:
        s->fd = Memfd(kRefusedMemfd, bytes, 0);
        writable = true;
        break;
      case FdKind::kShort:
        s->fd = Memfd(kRefusedMemfd, bytes / 2, kSeals);
        writable = true;
        break;
      case FdKind::kWriteSealed:
        s->fd = Memfd(kRefusedMemfd, bytes, kSeals | F_SEAL_WRITE);
        break;
      case FdKind::kFutureWriteSealed:
        s->fd = Memfd(kRefusedMemfd, bytes, kSeals | F_SEAL_FUTURE_WRITE);
        break;
      case FdKind::kReadOnly: {
        const int rw = Memfd(kRefusedMemfd, bytes, kSeals);
        if (rw >= 0) {
          const std::string self = "/proc/self/fd/" + std::to_string(rw);
          s->fd = open(self.c_str(), O_RDONLY | O_CLOEXEC);
          close(rw);
        }
        break;
      }
      case FdKind::kPipe:
        s->pipe = std::make_shared<Pipe>();
        s->fd = dup(s->pipe->w);
        s->pipe->CloseWriteEnd();
        break;
      case FdKind::kDevNull:
        s->fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        break;
      case FdKind::kSocket: {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
          s->fd = sv[0];
          close(sv[1]);
        }
        break;
      }
      case FdKind::kEventfd:
        s->fd = eventfd(0, EFD_CLOEXEC);
        break;
      case FdKind::kFile: {
        const char* dir = std::getenv("TEST_TMPDIR");
        std::string path = std::string(dir ? dir : "/tmp") + "/fuzz-XXXXXX";
        s->fd = mkostemp(path.data(), O_CLOEXEC);
        if (s->fd >= 0) {
          unlink(path.c_str());
          if (ftruncate(s->fd, static_cast<off_t>(bytes)) != 0) {
            close(s->fd);
            s->fd = -1;
          }
        }
        // As the daemon would map it for kSetupFile.
        if (s->fd >= 0 && bytes > 0) {
          void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                         s->fd, 0);
          writable = m != MAP_FAILED;
          if (writable) munmap(m, bytes);
        }
        break;
      }
      case FdKind::kDirectory: {
        const char* dir = std::getenv("TEST_TMPDIR");
        s->fd = open(dir ? dir : "/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
        break;
      }
      case FdKind::kCount:
        break;
    }
    if (s->fd < 0) return nullptr;
    struct stat st {};
    if (fstat(s->fd, &st) != 0) {
      close(s->fd);
      return nullptr;
    }
    const int seals = fcntl(s->fd, F_GET_SEALS);
    s->facts.size = static_cast<uint64_t>(st.st_size);
    s->facts.sealed = seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
    s->facts.writable = writable;
    s->facts.header = header;
    const int mode = fcntl(s->fd, F_GETFL);
    struct statfs fs {};
    const bool in_place_fs =
        fstatfs(s->fd, &fs) == 0 &&
        (fs.f_type == TMPFS_MAGIC || fs.f_type == EXT4_SUPER_MAGIC ||
         fs.f_type == XFS_SUPER_MAGIC || fs.f_type == BTRFS_SUPER_MAGIC ||
         fs.f_type == OVERLAYFS_SUPER_MAGIC);
    s->facts.file_in_place = S_ISREG(st.st_mode) && mode >= 0 &&
                             (mode & O_ACCMODE) == O_RDWR && in_place_fs;
    fds_.push_back(std::move(s));
    return fds_.back().get();
  }

  // Closes the test's copies.
  void CloseAll() {
    for (auto& s : fds_) {
      if (s->fd >= 0) close(s->fd);
      s->fd = -1;
    }
  }

  // Nobody, the daemon included, holds an end of a pipe that was sent.
  // Then drops the pipes' read ends and every other descriptor.
  ::testing::AssertionResult PipesLetGo() {
    CloseAll();
    for (const auto& s : fds_) {
      if (s->pipe != nullptr && !s->pipe->WritersGone()) {
        return ::testing::AssertionFailure()
               << "the daemon kept a pipe end it was sent";
      }
    }
    fds_.clear();
    return ::testing::AssertionSuccess();
  }

 private:
  static int Memfd(const char* name, uint64_t bytes, int seals) {
    const int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
      close(fd);
      return -1;
    }
    return fd;
  }

  std::vector<std::unique_ptr<SentFd>> fds_;
};

// --- Plans -------------------------------------------------------------------

// One setup message of a plan, with the descriptors that go with the write
// that starts with it.
struct Msg {
  shm::SetupMessage m;
  std::vector<FdKind> fds;
  uint64_t fd_bytes = 0;  // what its memfds are sized for
  std::string what;       // its base and mutations, for failure messages
};

enum class Ending {
  kShutdown,  // end of stream, then read every answer
  kClose,     // close at once, nothing read
  kKeepOpen,  // read the answers; the session, if up, must serve
};

struct Plan {
  std::string kind;
  std::vector<Msg> msgs;
  std::string tail;  // garbage after the messages
  // Bytes sent of messages + tail, and where the writes start (0 first).
  size_t cut = 0;
  std::vector<size_t> writes;
  Ending ending = Ending::kShutdown;
  bool scribbled = false;  // the session header was scribbled on
  std::string scribble;
  bool nobody = false;  // connect as uid 65534, whom the daemon refuses

  std::string Stream() const {
    std::string s;
    for (const Msg& m : msgs) {
      s.append(reinterpret_cast<const char*>(&m.m), kMsg);
    }
    s += tail;
    s.resize(std::min(s.size(), cut));
    return s;
  }

  std::string Describe() const {
    std::string d = kind + ":";
    for (const Msg& m : msgs) {
      d += " [" + m.what;
      if (!m.fds.empty()) {
        d += " fds";
        for (FdKind k : m.fds) d += std::string(" ") + Name(k);
      }
      d += "]";
    }
    if (!tail.empty()) d += " +" + std::to_string(tail.size()) + " garbage";
    d += " cut " + std::to_string(cut) + " of " +
         std::to_string(msgs.size() * kMsg + tail.size()) + ", writes at";
    for (size_t w : writes) d += " " + std::to_string(w);
    d += ending == Ending::kShutdown ? ", end of stream"
         : ending == Ending::kClose  ? ", abrupt close"
                                     : ", kept open";
    if (scribbled) d += ", header scribbled: " + scribble;
    if (nobody) d += ", as uid 65534";
    return d;
  }
};

class PlanMaker {
 public:
  explicit PlanMaker(Rng& rng) : rng_(rng) {}

  // What the main loop sends: every kind of message, from a fresh
  // connection or after a valid hello.
  Plan Any() {
    Plan p;
    const uint64_t k = rng_.below(100);
    if (k < 30) {
      p.kind = "one message";
      p.msgs.push_back(Mutated(Base()));
    } else if (k < 60) {
      p.kind = "after a hello";
      p.msgs.push_back(Hello());
      const uint64_t n = 1 + rng_.below(4);
      for (uint64_t i = 0; i < n; ++i) {
        p.msgs.push_back(rng_.percent(75) ? Mutated(Arena()) : Mutated(Base()));
      }
    } else if (k < 72) {
      p.kind = "back to back";
      const uint64_t n = 2 + rng_.below(3);
      for (uint64_t i = 0; i < n; ++i) p.msgs.push_back(Mutated(Base()));
    } else if (k < 80) {
      return Scribbled();
    } else if (k < 84) {
      p.kind = "many arenas";
      p.msgs.push_back(Hello());
      const uint64_t n = 8 + rng_.below(32);
      for (uint64_t i = 0; i < n; ++i) {
        p.msgs.push_back(rng_.percent(60) ? Arena() : Mutated(Arena()));
      }
    } else if (k < 90) {
      p.kind = "garbage";
      p.tail = rng_.bytes(1 + rng_.below(3 * kMsg));
    } else {
      p.kind = "valid";
      p.msgs.push_back(Base());
      if (p.msgs[0].m.type == shm::kSetupHello) {
        for (uint64_t i = rng_.below(3); i > 0; --i) p.msgs.push_back(Arena());
      }
    }
    Finish(&p);
    return p;
  }

  // What the admin loop sends: admin queries, mutated or not.
  Plan Admin() {
    Plan p;
    p.kind = "admin";
    p.msgs.push_back(rng_.percent(80) ? Mutated(AdminQuery(), kAdminOps)
                                      : AdminQuery());
    if (rng_.percent(15)) p.msgs.push_back(Mutated(Base()));
    Finish(&p);
    return p;
  }

  // A valid hello whose session header or ring headers were scribbled on.
  Plan Scribbled() {
    Plan p;
    p.kind = "scribbled region";
    p.msgs.push_back(Hello());
    p.scribbled = true;
    p.cut = kMsg;
    p.writes = {0};
    p.ending = rng_.percent(70) ? Ending::kKeepOpen : Ending::kShutdown;
    return p;
  }

  // Scribbles on `raw`'s header as a scribbled plan says: bytes of the ring
  // table (not the doorbells) or of one ring's header (not its indices).
  void Scribble(RawClient& raw, Plan* p) {
    const int n = 1 + static_cast<int>(rng_.below(3));
    for (int i = 0; i < n; ++i) {
      uint8_t* at;
      size_t span;
      std::string where;
      if (rng_.percent(50)) {
        at = reinterpret_cast<uint8_t*>(raw.header());
        span = offsetof(shm::SessionHeader, control_response_bell);
        where = "header";
      } else {
        const uint64_t ring = rng_.below(2 + 2 * shm::kMaxConnections);
        at = ring == 0   ? raw.request_ring()
             : ring == 1 ? raw.response_ring()
             : ring % 2  ? raw.completion_ring((ring - 2) / 2)
                         : raw.send_ring((ring - 2) / 2);
        span = 16;
        where = "ring " + std::to_string(ring);
      }
      const size_t off = rng_.below(span);
      if (rng_.percent(60)) {
        const int bit = static_cast<int>(rng_.below(8));
        at[off] ^= static_cast<uint8_t>(1u << bit);
        where += " bit " + std::to_string(off) + "." + std::to_string(bit);
      } else {
        at[off] = static_cast<uint8_t>(rng_.below(256));
        where += " byte " + std::to_string(off) + "=" + std::to_string(at[off]);
      }
      p->scribble += (p->scribble.empty() ? "" : ", ") + where;
    }
  }

 private:
  enum Op {
    kFlipBit,
    kRandomByte,
    kMagic,
    kVersion,
    kType,
    kStatus,
    kId,
    kAddress,
    kLength,
    kText,
    kOtherType,
    kFds,
  };
  static constexpr Op kAdminOps[] = {
      kText,    kText,    kText,       kId,  kId,     kType,  kMagic,
      kVersion, kFlipBit, kRandomByte, kFds, kLength, kStatus};

  Msg Hello() {
    Msg m;
    m.m = shm::MakeSetup(shm::kSetupHello);
    m.m.length = kRegionBytes;
    m.fds = {FdKind::kRegion};
    m.fd_bytes = kRegionBytes;
    m.what = "hello";
    return m;
  }

  Msg Arena() {
    Msg m;
    m.m = shm::MakeSetup(shm::kSetupArena);
    m.fd_bytes = rng_.pick(kArenaSizes);
    m.m.address = kArenaBase + kPage * rng_.below(kArenaSlots);
    m.m.length = rng_.percent(80) ? m.fd_bytes : kPage * (1 + rng_.below(2));
    m.m.length = std::min(m.m.length, m.fd_bytes);
    m.fds = {FdKind::kArena};
    m.what = "arena " + Hex(m.m.address) + "+" + std::to_string(m.m.length);
    return m;
  }

  // A file mapped in place: a memfd or a file, some pages of it from some
  // page of it (sometimes past its end).
  Msg File() {
    Msg m;
    m.m = shm::MakeSetup(shm::kSetupFile);
    m.fd_bytes = rng_.pick(kArenaSizes);
    m.m.address = kArenaBase + kPage * rng_.below(kArenaSlots);
    const uint64_t pages = m.fd_bytes / kPage;
    m.m.id = static_cast<uint32_t>(rng_.percent(70) ? 0 : rng_.below(pages + 2));
    m.m.length = kPage * (1 + rng_.below(pages + 1));
    static constexpr FdKind kKinds[] = {FdKind::kArena, FdKind::kArena,
                                        FdKind::kUnsealed, FdKind::kFile,
                                        FdKind::kReadOnly, FdKind::kShort};
    m.fds = {rng_.pick(kKinds)};
    m.what = "file " + Hex(m.m.address) + "+" + std::to_string(m.m.length) +
             " from page " + std::to_string(m.m.id);
    return m;
  }

  Msg AdminQuery() {
    Msg m;
    m.m = shm::MakeSetup(shm::kSetupAdmin);
    const std::string_view topic = kTopics[rng_.below(kTopics.size())];
    std::memcpy(m.m.text, topic.data(), topic.size());
    m.m.id = rng_.percent(50) ? kFormatJson : kFormatText;
    m.fd_bytes = kPage;
    m.what = "admin " + std::string(topic) + "/" + std::to_string(m.m.id);
    return m;
  }

  // Another type, valid or not, with a descriptor or not.
  Msg OtherType() {
    Msg m;
    static constexpr uint16_t kTypes[] = {0,
                                          shm::kSetupHelloReply,
                                          shm::kSetupArenaReply,
                                          shm::kSetupArenaFree,
                                          shm::kSetupArenaFreeReply,
                                          shm::kSetupAdminReply,
                                          shm::kSetupSegment,
                                          shm::kSetupFile,
                                          11,
                                          0x0101,
                                          0xFFFF};
    m.m = shm::MakeSetup(static_cast<shm::SetupType>(rng_.pick(kTypes)));
    m.m.length = kPage;
    m.fd_bytes = kPage;
    if (rng_.percent(50)) m.fds = {FdKind::kArena};
    m.what = "type " + std::to_string(m.m.type);
    return m;
  }

  Msg Base() {
    const uint64_t k = rng_.below(100);
    if (k < 45) return Hello();
    if (k < 70) return AdminQuery();
    if (k < 80) return Arena();
    if (k < 88) return File();
    return OtherType();
  }

  Msg Mutated(Msg m) {
    static constexpr Op kAll[] = {kFlipBit,   kFlipBit, kRandomByte, kMagic,
                                  kVersion,   kType,    kStatus,     kId,
                                  kAddress,   kLength,  kLength,     kText,
                                  kOtherType, kFds,     kFds,        kFds};
    return Mutated(std::move(m), kAll);
  }

  template <size_t N>
  Msg Mutated(Msg m, const Op (&ops)[N]) {
    // One message in five stays as it is: valid ones must still work
    // between the bad ones.
    if (rng_.percent(20)) return m;
    const uint64_t n = 1 + rng_.below(3);
    for (uint64_t i = 0; i < n; ++i) Apply(rng_.pick(ops), &m);
    return m;
  }

  void Apply(Op op, Msg* msg) {
    shm::SetupMessage& m = msg->m;
    auto* bytes = reinterpret_cast<uint8_t*>(&m);
    std::string& what = msg->what;
    switch (op) {
      case kFlipBit: {
        const uint64_t bit = rng_.below(kMsg * 8);
        bytes[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
        what +=
            " flip " + std::to_string(bit / 8) + "." + std::to_string(bit % 8);
        break;
      }
      case kRandomByte: {
        const uint64_t at = rng_.below(kMsg);
        bytes[at] = static_cast<uint8_t>(rng_.below(256));
        what += " byte " + std::to_string(at) + "=" + std::to_string(bytes[at]);
        break;
      }
      case kMagic: {
        const uint32_t magics[] = {
            0, ~0u, shm::kSetupMagic ^ (1u << rng_.below(32)),
            __builtin_bswap32(shm::kSetupMagic), rng_.u32()};
        m.magic = rng_.pick(magics);
        what += " magic=" + Hex(m.magic);
        break;
      }
      case kVersion: {
        const uint16_t versions[] = {0, 2, 0xFFFF, 0x0101,
                                     static_cast<uint16_t>(rng_.u32())};
        m.version = rng_.pick(versions);
        what += " version=" + std::to_string(m.version);
        break;
      }
      case kType: {
        const uint16_t types[] = {static_cast<uint16_t>(rng_.below(10)),
                                  static_cast<uint16_t>(rng_.below(10)), 0xFFFF,
                                  0x0101, static_cast<uint16_t>(rng_.u32())};
        m.type = rng_.pick(types);
        what += " type=" + std::to_string(m.type);
        break;
      }
      case kStatus:
        m.status = static_cast<int32_t>(rng_.u32());
        what += " status=" + std::to_string(m.status);
        break;
      case kId: {
        const uint32_t ids[] = {0, 1, 2, ~0u, 0x100, rng_.u32()};
        m.id = rng_.pick(ids);
        what += " id=" + std::to_string(m.id);
        break;
      }
      case kAddress: {
        const uint64_t addresses[] = {
            0,
            ~uint64_t{0},
            ~uint64_t{0} - kPage + 1,
            uint64_t{1} << 63,
            rng_.u64(),
            kArenaBase + kPage * rng_.below(kArenaSlots),
            kArenaBase - kPage};
        m.address = rng_.pick(addresses);
        what += " address=" + Hex(m.address);
        break;
      }
      case kLength: {
        const uint64_t want = msg->fd_bytes;
        const uint64_t lengths[] = {0,
                                    1,
                                    want - 1,
                                    want + 1,
                                    want + kPage,
                                    want / 2,
                                    kRegionBytes,
                                    kRegionBytes - kPage,
                                    kPage,
                                    ~uint64_t{0},
                                    uint64_t{1} << 63,
                                    rng_.u64() >> rng_.below(64)};
        m.length = rng_.pick(lengths);
        what += " length=" + Hex(m.length);
        break;
      }
      case kText: {
        const std::string t = rng_.text_field(
            kTopics[rng_.below(kTopics.size())], sizeof(m.text));
        std::memcpy(m.text, t.data(), sizeof(m.text));
        what += " text(" + std::to_string(strnlen(m.text, sizeof(m.text))) +
                " bytes)";
        break;
      }
      case kOtherType: {
        const uint16_t types[] = {shm::kSetupHello, shm::kSetupArena,
                                  shm::kSetupAdmin, shm::kSetupArenaFree};
        m.type = rng_.pick(types);
        what += " as type " + std::to_string(m.type);
        break;
      }
      case kFds:
        msg->fds = RandomFds(msg->fds);
        what += " fds changed";
        break;
    }
  }

  // No descriptor where one is wanted, one or many where none is, or the
  // wrong kind.
  std::vector<FdKind> RandomFds(const std::vector<FdKind>& wanted) {
    auto wrong = [this] {
      return static_cast<FdKind>(
          1 + rng_.below(static_cast<uint64_t>(FdKind::kCount) - 1));
    };
    const uint64_t k = rng_.below(100);
    if (k < 20) return {};
    if (k < 50) return {wrong()};
    if (k < 65) {
      std::vector<FdKind> fds = wanted;
      fds.push_back(rng_.percent(50) ? FdKind::kPipe : wrong());
      return fds;
    }
    if (k < 75) return {wrong(), wrong()};
    if (k < 85) return {FdKind::kRegion};
    // More than the daemon takes with one message.
    std::vector<FdKind> fds = wanted;
    const uint64_t n = 3 + rng_.below(6);
    while (fds.size() < n) {
      fds.push_back(rng_.percent(70) ? FdKind::kPipe : wrong());
    }
    return fds;
  }

  // Garbage after the messages, a cut, where the writes start, the ending.
  void Finish(Plan* p) {
    if (rng_.percent(12)) {
      if (rng_.percent(30)) {
        // Looks like a message: right magic and version, anything else.
        shm::SetupMessage g = shm::MakeSetup(shm::kSetupHello);
        g.type = static_cast<uint16_t>(rng_.below(10));
        g.length = rng_.percent(50) ? kRegionBytes : rng_.u64();
        p->tail.append(reinterpret_cast<const char*>(&g), kMsg);
      } else {
        p->tail += rng_.bytes(1 + rng_.below(3 * kMsg));
      }
    }
    const size_t total = p->msgs.size() * kMsg + p->tail.size();
    p->cut = total;
    if (rng_.percent(15) && total > 0) {
      static constexpr size_t kInFirst[] = {0,  1,  2,  4,  7,  8,  12, 16,
                                            20, 24, 31, 32, 40, 63, 64, 95};
      const uint64_t c = rng_.below(4);
      if (c == 0) {
        p->cut = rng_.pick(kInFirst);
      } else if (c == 1 && p->msgs.size() > 1) {
        p->cut = kMsg * (1 + rng_.below(p->msgs.size() - 1));  // a boundary
      } else if (c == 2) {
        p->cut = total - 1;
      } else {
        p->cut = rng_.below(total);
      }
      p->cut = std::min(p->cut, total);
    }
    p->writes = {0};
    const uint64_t w = rng_.below(100);
    if (w < 60) {
      for (size_t i = 1; i * kMsg < p->cut; ++i) p->writes.push_back(i * kMsg);
    } else if (w < 85) {
      for (uint64_t n = 1 + rng_.below(4); n > 0 && p->cut > 1; --n) {
        p->writes.push_back(1 + rng_.below(p->cut - 1));
      }
    } else if (w < 95) {
      for (size_t i = 1; i < std::min(p->cut, kMsg); ++i) {
        p->writes.push_back(i);  // the first message a byte at a time
      }
    }
    std::sort(p->writes.begin(), p->writes.end());
    p->writes.erase(std::unique(p->writes.begin(), p->writes.end()),
                    p->writes.end());
    const uint64_t e = rng_.below(100);
    p->ending = e < 55   ? Ending::kShutdown
                : e < 75 ? Ending::kClose
                         : Ending::kKeepOpen;
  }

  Rng& rng_;
};

// --- The model ---------------------------------------------------------------

// One answer the daemon sends.
struct Reply {
  Reply(uint16_t t, int32_t s, std::string r = "")
      : type(t), status(s), reason(std::move(r)) {}
  uint16_t type = 0;
  int32_t status = 0;
  std::string reason;  // admin: the exact text; otherwise a part of it
  size_t fds = 0;
  bool json = false;    // admin: the answer's format
  // A scribbled hello, or a segment named by an arbitrary id (some segment
  // of this user may have it): accepted or refused.
  bool either = false;
};

// What the daemon does with one plan, as the protocol says.
struct Outcome {
  std::vector<Reply> replies;
  bool closes = true;  // the daemon closes the socket after the replies
  bool ready = false;  // a session is up and open at the end
  bool admin = false;  // the connection was an admin query
  uint32_t bad_requests = 0;
};

bool ValidTopic(std::string_view topic) {
  return std::find(kTopics.begin(), kTopics.end(), topic) != kTopics.end();
}

// `stream` as the daemon reads it, `fds[k]` the descriptors that arrive
// while it reads message k (all of a write's descriptors come with its
// first byte).
Outcome Predict(const std::string& stream,
                const std::vector<std::vector<const FdFacts*>>& fds,
                Ending ending) {
  Outcome o;
  bool ready = false;
  // The daemon seals a session region it mapped against new writable
  // mappings (control/arena_memory.h): sent again as an arena, it is
  // refused.
  bool region_sealed = false;
  const size_t whole = stream.size() / kMsg;
  for (size_t k = 0; k < fds.size(); ++k) {
    // The reader takes two descriptors with one message at the most.
    if (fds[k].size() > 2) return o;
    if (k >= whole) {  // part of a message, kept until the end of stream
      o.closes = ending != Ending::kKeepOpen;
      o.ready = ready && !o.closes;  // and the session serves meanwhile
      return o;
    }
    shm::SetupMessage m;
    std::memcpy(&m, stream.data() + k * kMsg, kMsg);
    if (m.magic != shm::kSetupMagic || m.version != shm::kSetupVersion) {
      return o;
    }
    m.text[sizeof(m.text) - 1] = '\0';
    const FdFacts* fd = fds[k].empty() ? nullptr : fds[k][0];
    switch (m.type) {
      case shm::kSetupHello: {
        if (ready) break;
        Reply r{shm::kSetupHelloReply, shm::kStatusInvalid};
        if (fd == nullptr) {
          r.reason = "no session region";
        } else if (m.length != kRegionBytes || fd->size < m.length) {
          r.reason = "wrong size";
        } else if (!fd->sealed) {
          r.reason = "sealed against shrinking";
        } else if (!fd->writable || (region_sealed && IsRegion(*fd))) {
          r.reason = "cannot map";
        } else if (fd->header == FdFacts::Header::kBlank) {
          r.reason = "bad session header";
        } else {
          r.status = shm::kStatusOk;
          r.fds = 2;  // the doorbells
          r.either = fd->header == FdFacts::Header::kScribbled;
        }
        // Mapped -- and sealed -- before its header was read.
        if (r.reason.empty() || r.reason == "bad session header") {
          region_sealed |= IsRegion(*fd);
        }
        o.replies.push_back(r);
        if (r.status != shm::kStatusOk) return o;
        ready = true;
        continue;
      }
      case shm::kSetupArena: {
        if (!ready) break;
        const bool sized = fd != nullptr && m.length > 0 &&
                           fd->size >= m.length &&
                           m.address + m.length > m.address;
        // An arena where older ones lie takes those addresses over.
        Reply r{shm::kSetupArenaReply, shm::kStatusInvalid, "arena refused"};
        const bool sealed_region =
            fd != nullptr && region_sealed && IsRegion(*fd);
        if (sized && fd->sealed && fd->writable && !sealed_region) {
          r.status = shm::kStatusOk;
          r.reason.clear();
        }
        o.replies.push_back(r);
        continue;
      }
      case shm::kSetupFile: {
        if (!ready) break;
        const uint64_t offset = uint64_t{m.id} * kPage;
        const bool pages = m.length > 0 && m.length % kPage == 0 &&
                           m.address % kPage == 0 &&
                           m.address + m.length > m.address;
        Reply r{shm::kSetupArenaReply, shm::kStatusInvalid, "file refused"};
        if (fd != nullptr && fd->file_in_place && pages &&
            m.length <= fd->size && offset <= fd->size - m.length &&
            fd->writable && !(region_sealed && IsRegion(*fd))) {
          r.status = shm::kStatusOk;
          r.reason.clear();
        }
        o.replies.push_back(r);
        continue;
      }
      case shm::kSetupSegment: {
        if (!ready) break;
        // Its descriptor, if any, is closed; the id names a segment of
        // this user or none.
        Reply r{shm::kSetupArenaReply, shm::kStatusOk};
        r.either = true;
        o.replies.push_back(r);
        continue;
      }
      case shm::kSetupAdmin: {
        if (ready) break;
        o.admin = true;
        Reply r{shm::kSetupAdminReply, shm::kStatusInvalid};
        r.json = m.id == kFormatJson;
        const std::string topic(m.text, strnlen(m.text, sizeof(m.text)));
        if (m.id != kFormatText && m.id != kFormatJson) {
          r.reason = "unknown format " + std::to_string(m.id);
        } else if (!ValidTopic(topic)) {
          r.reason = "unknown topic '" + topic.substr(0, 24) + "'";
        } else {
          r.status = shm::kStatusOk;
        }
        o.replies.push_back(r);
        return o;  // one question, one answer
      }
      default:
        break;
    }
    ++o.bad_requests;
    return o;
  }
  o.closes = ending != Ending::kKeepOpen;
  o.ready = ready && !o.closes;
  return o;
}

// --- Sending and reading -----------------------------------------------------

struct Received {
  std::string bytes;
  std::vector<int> fds;
  bool eof = false;
};

// Reads from `sock` until end of stream, `want` bytes, or the deadline.
Received ReadStream(int sock, size_t want, absl::Time deadline) {
  Received r;
  while (!r.eof && r.bytes.size() < want) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) break;
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(ms)) <= 0) continue;
    char buf[4096];
    const ssize_t got =
        testing::RecvWithFds(sock, buf, sizeof(buf), MSG_DONTWAIT, &r.fds);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      r.eof = true;  // end of stream, or reset by a daemon that closed
    } else {
      r.bytes.append(buf, static_cast<size_t>(got));
    }
  }
  return r;
}

// Sends `stream` in the plan's writes, each with the descriptors of the
// messages that start in it. Returns the descriptors the daemon reads with
// each message, and cuts `stream` to what went out: a write fails when the
// daemon closed the socket before the plan was out, and the rest is not
// sent.
std::vector<std::vector<const FdFacts*>> SendPlan(
    RawClient& raw, const Plan& plan, std::string* stream,
    const std::vector<std::vector<const SentFd*>>& msg_fds) {
  const size_t slots = (stream->size() + kMsg - 1) / kMsg;
  std::vector<std::vector<const FdFacts*>> read_with(slots);
  for (size_t w = 0; w < plan.writes.size(); ++w) {
    const size_t begin = plan.writes[w];
    const size_t end =
        w + 1 < plan.writes.size() ? plan.writes[w + 1] : stream->size();
    if (begin >= end) continue;
    std::vector<int> fds;
    std::vector<const FdFacts*> facts;
    for (size_t k = (begin + kMsg - 1) / kMsg; k * kMsg < end; ++k) {
      if (k >= msg_fds.size()) break;
      for (const SentFd* s : msg_fds[k]) {
        fds.push_back(s->fd);
        facts.push_back(&s->facts);
      }
    }
    if (!raw.Send(stream->data() + begin, end - begin, fds)) {
      stream->resize(begin);
      read_with.resize((begin + kMsg - 1) / kMsg);
      break;
    }
    auto& into = read_with[begin / kMsg];
    into.insert(into.end(), facts.begin(), facts.end());
  }
  return read_with;
}

// Whether a thread of this process may take uid 65534 (see
// ConnectAsNobody).
bool CanBecomeNobody() {
  bool can = false;
  std::thread t([&] { can = syscall(SYS_setresuid, -1, kNobody, -1) == 0; });
  t.join();
  return can;
}

// Connects as uid 65534 from a thread of its own: setresuid(2) called
// directly, not through glibc (which applies it to every thread), changes
// that thread's credentials only, and SO_PEERCRED gives the daemon the
// connecting thread's. Returns the socket, or -1.
int ConnectAsNobody(const std::string& path) {
  int sock = -1;
  std::thread t([&] {
    if (syscall(SYS_setresuid, -1, kNobody, -1) != 0) return;
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (fd >= 0 &&
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      sock = fd;
    } else if (fd >= 0) {
      close(fd);
    }
  });
  t.join();
  return sock;
}

// --- Fixture -----------------------------------------------------------------

class SetupFuzzTest : public testing::HostileClientTest {
 protected:
  struct Tally {
    int iterations = 0;
    int accepted_hellos = 0;
    int refused_hellos = 0;
    int arenas_accepted = 0;
    int arenas_refused = 0;
    int admin_answers = 0;
    int admin_errors = 0;
    int closed_silently = 0;
    int kept_open = 0;
    int nobody = 0;
  };

  // Runs `iterations` plans from `make`, stopping at the first failure,
  // with the good pair moving verified bytes all along.
  void Fuzz(const char* name, int default_iterations,
            const std::function<Plan(PlanMaker&)>& make) {
    const uint64_t seed = FuzzSeed();
    const int iterations = FuzzIterations(default_iterations);
    ASSERT_GT(iterations, 0);
    const uint64_t bad_closes = g_bad_closes.load();
    good_->Start();
    uint64_t rounds = good_->rounds();
    Tally tally;
    for (int i = 0; i < iterations; ++i) {
      Rng rng(IterationSeed(seed, static_cast<uint64_t>(i)));
      PlanMaker maker(rng);
      Plan plan = make(maker);
      const ::testing::AssertionResult ok = Run(maker, &plan, i, &tally);
      if (!ok) {
        ADD_FAILURE() << name << ": RDP_FUZZ_SEED=" << Hex(seed)
                      << ", iteration " << i << " (" << plan.Describe()
                      << "): " << ok.message();
        break;
      }
      if (g_bad_closes.load() != bad_closes) {
        ADD_FAILURE() << name << ": RDP_FUZZ_SEED=" << Hex(seed)
                      << ", iteration " << i << " (" << plan.Describe()
                      << "): descriptor " << g_last_bad_close.load()
                      << " was closed while not open";
        break;
      }
      if (i % 64 == 63 || i + 1 == iterations) {
        if (!NoRawMemfdsLeft()) {
          ADD_FAILURE() << name << ": RDP_FUZZ_SEED=" << Hex(seed)
                        << ", by iteration " << i
                        << ": a memfd that was sent is still held";
          break;
        }
        // The good pair moves on: a verified round since the last check,
        // while the fuzzed sockets came and went (the bound only turns a
        // stalled pair into a failure).
        const bool moved = WaitFor([&] { return good_->rounds() > rounds; },
                                   2 * testing::kRoundLimit);
        if (!moved || !good_->error().empty()) {
          ADD_FAILURE() << name << ": RDP_FUZZ_SEED=" << Hex(seed)
                        << ", by iteration " << i
                        << ": the good pair stopped: " << good_->error();
          break;
        }
        rounds = good_->rounds();
      }
    }
    good_->Stop();
    EXPECT_EQ(good_->error(), "");
    std::printf(
        "%s: seed %s, %d iterations: hellos accepted %d, refused %d; arenas "
        "accepted %d, refused %d; admin answers %d, errors %d; closed without "
        "answer %d; kept open %d; as uid 65534 %d; good pair rounds %llu\n",
        name, Hex(seed).c_str(), tally.iterations, tally.accepted_hellos,
        tally.refused_hellos, tally.arenas_accepted, tally.arenas_refused,
        tally.admin_answers, tally.admin_errors, tally.closed_silently,
        tally.kept_open, tally.nobody,
        static_cast<unsigned long long>(good_->rounds()));
  }

  // One plan on one connection, and its checks.
  ::testing::AssertionResult Run(PlanMaker& maker, Plan* plan, int iteration,
                                 Tally* tally) {
    const control::DaemonSnapshot before = Snap();
    FdPool pool;
    RawClient raw(path());
    if (!raw.Format()) return ::testing::AssertionFailure() << "format";
    if (plan->scribbled) maker.Scribble(raw, plan);
    std::string stream = plan->Stream();
    std::vector<std::vector<const SentFd*>> msg_fds;
    for (const Msg& m : plan->msgs) {
      msg_fds.emplace_back();
      for (FdKind k : m.fds) {
        const SentFd* s =
            pool.Make(k, m.fd_bytes, raw.session_fd(), plan->scribbled);
        if (s == nullptr) {
          return ::testing::AssertionFailure()
                 << "cannot make a " << Name(k) << " descriptor";
        }
        msg_fds.back().push_back(s);
      }
    }
    if (plan->nobody) {
      const int sock = ConnectAsNobody(path());
      if (sock < 0) return ::testing::AssertionFailure() << "connect as 65534";
      raw.AdoptSocket(sock);
    } else if (!raw.ConnectSocket()) {
      return ::testing::AssertionFailure() << "connect";
    }
    const auto read_with = SendPlan(raw, *plan, &stream, msg_fds);
    pool.CloseAll();
    ++tally->iterations;

    Outcome want = Predict(stream, read_with, plan->ending);
    if (plan->nobody) {
      // Refused at accept, whatever it sends: nothing of it is read.
      want = Outcome();
      Reply r{shm::kSetupHelloReply, shm::kStatusPermission,
              "uid 65534 is not allowed by this daemon's policy"};
      want.replies = {r};
      ++tally->nobody;
    }
    if (plan->ending == Ending::kShutdown) shutdown(raw.sock(), SHUT_WR);
    if (plan->ending == Ending::kClose) {
      raw.Close();
    } else {
      ::testing::AssertionResult answers =
          CheckAnswers(raw, *plan, want, iteration, tally);
      if (!answers) return answers;
      raw.Close();
    }

    // Once the connection is gone, nothing of it is left.
    const uint64_t reclaimed =
        before.sessions_reclaimed + (want.admin || plan->nobody ? 0 : 1);
    const uint64_t rejected = before.rejected_clients + (plan->nobody ? 1 : 0);
    if (!WaitFor([&] {
          const control::DaemonSnapshot now = Snap();
          return now.sessions_reclaimed >= reclaimed &&
                 now.rejected_clients >= rejected;
        })) {
      return ::testing::AssertionFailure()
             << "the connection was not reclaimed or refused";
    }
    if (!testing::CountersReach(*daemon_, baseline_)) {
      return ::testing::AssertionFailure()
             << "the daemon holds " << HeldOf(Snap()) << ", expected "
             << baseline_;
    }
    const control::DaemonSnapshot after = Snap();
    if (after.sessions_reclaimed != reclaimed) {
      return ::testing::AssertionFailure()
             << (after.sessions_reclaimed - before.sessions_reclaimed)
             << " sessions reclaimed, expected "
             << (reclaimed - before.sessions_reclaimed);
    }
    const uint64_t bad = after.bad_requests - before.bad_requests;
    // An abrupt close may end the session before the daemon read all.
    if (plan->ending == Ending::kClose ? bad > want.bad_requests
                                       : bad != want.bad_requests) {
      return ::testing::AssertionFailure()
             << bad << " bad requests counted, expected " << want.bad_requests;
    }
    if (after.rejected_clients != rejected) {
      return ::testing::AssertionFailure()
             << "rejected clients went from " << before.rejected_clients
             << " to " << after.rejected_clients;
    }
    if (::testing::AssertionResult pipes = pool.PipesLetGo(); !pipes) {
      return pipes;
    }
    if (!WaitFor([&] { return CountOpenFds() == baseline_fds_; })) {
      return ::testing::AssertionFailure()
             << CountOpenFds() << " descriptors open, " << baseline_fds_
             << " before";
    }
    return ::testing::AssertionSuccess();
  }

  // Reads the daemon's answers and compares them with `want`; a session
  // that is up at the end must serve a control request.
  ::testing::AssertionResult CheckAnswers(RawClient& raw, const Plan& plan,
                                          const Outcome& want, int iteration,
                                          Tally* tally) {
    const absl::Time deadline = absl::Now() + kAnswerLimit;
    const size_t min_bytes = want.replies.size() * kMsg;
    Received got =
        ReadStream(raw.sock(), want.closes ? SIZE_MAX : min_bytes, deadline);
    auto fail = [&got] {
      for (int fd : got.fds) close(fd);
      got.fds.clear();
      return ::testing::AssertionFailure();
    };
    size_t at = 0;
    size_t fds = 0;
    bool refused_scribbled = false;
    for (const Reply& r : want.replies) {
      if (got.bytes.size() - at < kMsg) {
        return fail() << "answer " << (&r - want.replies.data()) + 1 << " of "
                      << want.replies.size() << " missing (" << got.bytes.size()
                      << " bytes" << (got.eof ? ", then end of stream)" : ")");
      }
      shm::SetupMessage m;
      std::memcpy(&m, got.bytes.data() + at, kMsg);
      at += kMsg;
      const std::string text(m.text, strnlen(m.text, sizeof(m.text)));
      if (m.magic != shm::kSetupMagic || m.version != shm::kSetupVersion ||
          m.type != r.type) {
        return fail() << "answer of type " << m.type << ", expected " << r.type;
      }
      if (r.either && r.type == shm::kSetupArenaReply) {
        // A segment by an arbitrary id: taken, or refused with a reason;
        // the session goes on either way.
        if (m.status != shm::kStatusOk &&
            (m.status != shm::kStatusInvalid || text.empty())) {
          return fail() << "segment answered " << m.status << " " << text;
        }
        ++(m.status == shm::kStatusOk ? tally->arenas_accepted
                                      : tally->arenas_refused);
        continue;
      }
      if (r.either && m.status != shm::kStatusOk) {
        // A scribbled region may be refused, as a refusal.
        if (m.status != shm::kStatusInvalid || text.empty()) {
          return fail() << "scribbled region answered " << m.status << " "
                        << text;
        }
        refused_scribbled = true;
        ++tally->refused_hellos;
        continue;
      }
      if (m.status != r.status) {
        return fail() << "status " << m.status << " (" << text << "), expected "
                      << r.status << " (" << r.reason << ")";
      }
      const bool exact =
          r.type == shm::kSetupAdminReply || r.status == shm::kStatusPermission;
      if (exact ? text != r.reason : text.find(r.reason) == std::string::npos) {
        return fail() << "reason '" << text << "', expected '" << r.reason
                      << "'";
      }
      fds += r.fds;
      if (r.type == shm::kSetupHelloReply) {
        ++(r.status == shm::kStatusOk ? tally->accepted_hellos
                                      : tally->refused_hellos);
      } else if (r.type == shm::kSetupArenaReply) {
        ++(r.status == shm::kStatusOk ? tally->arenas_accepted
                                      : tally->arenas_refused);
      } else if (r.type == shm::kSetupAdminReply) {
        ++(r.status == shm::kStatusOk ? tally->admin_answers
                                      : tally->admin_errors);
        // The answer's body follows: something for a valid query, nothing
        // with an error.
        if (got.bytes.size() - at < m.length) {
          return fail() << "admin answer of " << m.length << " bytes, "
                        << got.bytes.size() - at << " came";
        }
        const std::string body = got.bytes.substr(at, m.length);
        at += m.length;
        if (r.status != shm::kStatusOk
                ? !body.empty()
                : body.empty() ||
                      (r.json && body[0] != '{' && body[0] != '[')) {
          return fail() << "admin body '" << body.substr(0, 40) << "'";
        }
      }
    }
    if (refused_scribbled) {
      // Refused: then closed, nothing more.
      if (!got.eof) {
        Received rest = ReadStream(raw.sock(), SIZE_MAX, deadline);
        got.bytes += rest.bytes;
        got.fds.insert(got.fds.end(), rest.fds.begin(), rest.fds.end());
        got.eof = rest.eof;
      }
    }
    if (at != got.bytes.size()) {
      return fail() << got.bytes.size() - at << " bytes after the answers";
    }
    if (want.closes || refused_scribbled) {
      if (!got.eof) return fail() << "the socket stayed open";
      if (want.replies.empty()) ++tally->closed_silently;
    } else if (got.eof) {
      return fail() << "the daemon closed a session it should keep";
    }
    if (got.fds.size() != (refused_scribbled ? 0 : fds)) {
      return fail() << got.fds.size() << " descriptors with the answers, "
                    << "expected " << fds;
    }
    if (want.ready && !refused_scribbled) {
      ++tally->kept_open;
      raw.AdoptDoorbells(got.fds[0], got.fds[1]);
      const int32_t listen = raw.Status(RawClient::Request(
          shm::kOpListen, "fz-" + std::to_string(iteration)));
      if (listen != shm::kStatusOk) {
        return ::testing::AssertionFailure()
               << "the session that was let in does not serve: " << listen;
      }
      return ::testing::AssertionSuccess();
    }
    for (int fd : got.fds) close(fd);
    return ::testing::AssertionSuccess();
  }

  // A valid admin query on a connection of its own gets its answer.
  ::testing::AssertionResult ValidQueryAnswers(std::string_view topic,
                                               bool json) {
    RawClient raw(path());
    if (!raw.ConnectSocket()) return ::testing::AssertionFailure() << "connect";
    shm::SetupMessage q = shm::MakeSetup(shm::kSetupAdmin);
    std::memcpy(q.text, topic.data(), topic.size());
    q.id = json ? kFormatJson : kFormatText;
    if (!raw.Send(&q, sizeof(q))) {
      return ::testing::AssertionFailure() << "send";
    }
    const Received got =
        ReadStream(raw.sock(), SIZE_MAX, absl::Now() + kAnswerLimit);
    shm::SetupMessage reply;
    if (got.bytes.size() < kMsg || !got.eof || !got.fds.empty()) {
      return ::testing::AssertionFailure()
             << "no whole answer: " << got.bytes.size() << " bytes";
    }
    std::memcpy(&reply, got.bytes.data(), kMsg);
    const std::string body = got.bytes.substr(kMsg);
    if (reply.type != shm::kSetupAdminReply || reply.status != 0 ||
        reply.length != body.size() || body.empty() ||
        (json && body[0] != '{' && body[0] != '[')) {
      return ::testing::AssertionFailure()
             << "answer type " << reply.type << " status " << reply.status
             << " length " << reply.length << " body '" << body.substr(0, 40)
             << "'";
    }
    return ::testing::AssertionSuccess();
  }
};

// A region the daemon maps and then refuses (its session header is bad) has
// its descriptor closed once (fixed; Daemon::HandleHello closed it, and then
// CloseSession closed it again: a descriptor another thread of the daemon
// had opened in between under the same number would have been closed).
TEST_F(SetupFuzzTest, RefusedRegionIsClosedOnce) {
  const uint64_t bad_closes = g_bad_closes.load();
  const std::pair<const char*, std::function<void(shm::SessionHeader&)>>
      cases[] = {
          {"no ring table",
           [](shm::SessionHeader& h) {
             std::memset(static_cast<void*>(&h), 0,
                         offsetof(shm::SessionHeader, control_response_bell));
           }},
          {"bad magic", [](shm::SessionHeader& h) { h.magic ^= 1; }},
          {"ring outside the region",
           [](shm::SessionHeader& h) {
             h.control_requests.offset = kRegionBytes;
           }},
      };
  for (const auto& [what, scribble] : cases) {
    SCOPED_TRACE(what);
    RawClient raw(path());
    ASSERT_TRUE(raw.Format());
    scribble(*raw.header());
    ASSERT_TRUE(raw.ConnectSocket());
    ASSERT_TRUE(raw.SendHello());
    const RawClient::Answer a = raw.ReadAnswer();
    ASSERT_EQ(a.got, RawClient::Got::kMessage);
    EXPECT_EQ(a.status, shm::kStatusInvalid) << a.text;
    EXPECT_TRUE(raw.WaitClosed());
    raw.Close();
    EXPECT_TRUE(testing::CountersReach(*daemon_, baseline_));
    EXPECT_EQ(g_bad_closes.load(), bad_closes)
        << "descriptor " << g_last_bad_close.load() << " closed twice";
  }
  ExpectBaseline();
}

// A read that fails takes no descriptor (fixed; found by fuzzing the control
// socket, with a client that closed in the middle of a message that carried
// a descriptor, an answer of the daemon's unread: SetupReader::Read looked
// through the control buffer of the recvmsg(2) that then failed with
// ECONNRESET, which the kernel leaves as it was, found there the descriptor
// its previous recvmsg had received, took it a second time and closed it
// twice).
TEST(SetupReaderTest, AFailedReadTakesNoDescriptor) {
  const uint64_t bad_closes = g_bad_closes.load();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  // The reader's peer closes with data of the reader's unread, so that the
  // reader's next recvmsg fails with ECONNRESET once it has read what the
  // peer sent: part of a message, with a descriptor.
  ASSERT_EQ(send(sv[0], "x", 1, MSG_NOSIGNAL), 1);
  RawClient peer("");
  peer.AdoptSocket(sv[1]);
  const int extra = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(extra, 0);
  const shm::SetupMessage m = shm::MakeSetup(shm::kSetupArena);
  ASSERT_TRUE(peer.Send(&m, kMsg / 2, {extra}));
  close(extra);
  peer.Close();
  shm::SetupReader reader;
  shm::SetupMessage got;
  int fd0 = -1, fd1 = -1;
  EXPECT_EQ(reader.Read(sv[0], &got, &fd0, &fd1),
            shm::SetupReader::Result::kClosed);
  close(sv[0]);
  EXPECT_EQ(g_bad_closes.load(), bad_closes)
      << "descriptor " << g_last_bad_close.load() << " closed twice";
}

// Likewise for the blocking RecvSetup of the client library (fixed: after a
// recvmsg that failed, with a time-out or a reset, it closed whatever
// descriptors the stale control buffer named -- those of an earlier answer
// the client was still using, its doorbells).
TEST(SetupReaderTest, AFailedRecvSetupClosesNothing) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const int bell = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(bell, 0);
  shm::SetupMessage m = shm::MakeSetup(shm::kSetupHelloReply);
  ASSERT_TRUE(shm::SendSetup(sv[1], m, bell));
  close(bell);
  // One answer, then nothing: the second receive fails at once. Back to
  // back, so that nothing else used the stack between them.
  ASSERT_EQ(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  int kept = -1, fd1 = -1, fd2 = -1, fd3 = -1;
  const bool first = shm::RecvSetup(sv[0], &m, &kept, &fd1);
  const bool second = shm::RecvSetup(sv[0], &m, &fd2, &fd3);
  ASSERT_TRUE(first);
  ASSERT_GE(kept, 0);
  EXPECT_FALSE(second);
  EXPECT_EQ(fd2, -1);
  EXPECT_NE(fcntl(kept, F_GETFD), -1)
      << "a failed receive closed the descriptor of an earlier answer";
  close(kept);
  close(sv[0]);
  close(sv[1]);
}

// Thousands of mutated hellos, arenas, admin queries and other messages,
// alone, after a valid hello and back to back, as described at the top.
TEST_F(SetupFuzzTest, MutatedSetupMessagesAreRefusedAndLeaveNothing) {
  Fuzz("setup messages", 3000, [](PlanMaker& maker) { return maker.Any(); });
  ExpectServing("after the fuzzed setup messages");
  ExpectBaseline();
}

// Mutated admin queries (rdmaplanectl's kSetupAdmin) get an error answer
// with the exact reason, or a closed socket when they are not admin queries
// any more; valid ones among them, and every topic in both formats
// afterwards, get their answer.
TEST_F(SetupFuzzTest, MutatedAdminQueriesGetErrorsAndValidOnesAnswers) {
  Fuzz("admin queries", 1500, [](PlanMaker& maker) { return maker.Admin(); });
  for (std::string_view topic : kTopics) {
    for (bool json : {false, true}) {
      EXPECT_TRUE(ValidQueryAnswers(topic, json)) << topic << " json " << json;
    }
  }
  ExpectServing("after the fuzzed admin queries");
  ExpectBaseline();
}

// A user the daemon's policy does not allow (SO_PEERCRED) is answered once,
// with "not allowed", and closed, whatever it sends and however: nothing it
// sends is read, no session is made; users that are allowed go on being
// served in between.
TEST_F(SetupFuzzTest, RefusedUserIsAnsweredOnceWhateverItSends) {
  if (!CanBecomeNobody()) {
    GTEST_SKIP() << "this process cannot take uid 65534 for a thread";
  }
  int n = 0;
  Fuzz("refused user", 400, [&n](PlanMaker& maker) {
    Plan p = maker.Any();
    // Every other plan from an allowed user, as a control.
    p.nobody = n++ % 2 == 0 && !p.scribbled;
    if (p.nobody && p.ending == Ending::kKeepOpen) p.ending = Ending::kShutdown;
    return p;
  });
  ExpectServing("after the refused user");
  ExpectBaseline();
}

}  // namespace
}  // namespace rdmaplane
