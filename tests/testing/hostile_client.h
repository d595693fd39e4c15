// Test helpers for attacking an in-process daemon from this process: a
// "raw" client that speaks the session ABI directly, without librdmaplane
// (it creates the session memfd, formats the header and the rings itself,
// says hello over the Unix socket with SCM_RIGHTS, and can then misbehave in
// any way), a well-behaved pair of real clients that moves verified bytes
// before, during and after an attack, the fixture that starts the daemon and
// checks that it still serves and holds what it held before.
//
// Thread-compatible: a RawClient, a GoodPair (but for the rounds it runs on
// its own thread between Start and Stop) and the fixture belong to the test's
// thread.
#ifndef RDMAPLANE_TESTS_TESTING_HOSTILE_CLIENT_H_
#define RDMAPLANE_TESTS_TESTING_HOSTILE_CLIENT_H_

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "control/status.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"
#include "control/daemon.h"
#include "tests/testing/counters.h"
#include "tests/testing/hang_limit.h"

namespace rdmaplane::testing {

// Names of the memfds the raw clients create: the test looks for them among
// this process's descriptors and mappings (the daemon's included).
inline constexpr char kSessionMemfd[] = "raw-session";
inline constexpr char kArenaMemfd[] = "raw-arena";
inline constexpr char kRefusedMemfd[] = "raw-refused";

inline constexpr int kSeals =
    F_SEAL_SHRINK | F_SEAL_GROW;  // as librdmaplane seals
inline constexpr int32_t kNoAnswer = INT32_MIN;
// The bound on one verified write + read-back of the good pair: not a
// latency claim but "never starved", generous as kHangLimit is. Tests show
// that the pair kept up by the rounds it completes while an attack runs.
inline constexpr absl::Duration kRoundLimit = absl::Seconds(60);
using Mono = std::chrono::steady_clock;

inline uint64_t RoundUp(uint64_t v, uint64_t to) {
  return (v + to - 1) / to * to;
}
inline uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Unix socket paths are limited to 108 bytes, which TEST_TMPDIR can exceed.
inline std::string SocketPath(const std::string& name) {
  return "/tmp/rdp-mal-" + name.substr(0, 48) + "-" + std::to_string(getpid()) +
         ".sock";
}

// Sets `stop` and joins `thread` on every way out of a scope (a failed
// ASSERT included), so that no test leaves a joinable thread behind.
class StopAndJoin {
 public:
  StopAndJoin(std::atomic<bool>& stop, std::thread& thread)
      : stop_(stop), thread_(thread) {}
  ~StopAndJoin() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  StopAndJoin(const StopAndJoin&) = delete;
  StopAndJoin& operator=(const StopAndJoin&) = delete;

 private:
  std::atomic<bool>& stop_;
  std::thread& thread_;
};

// --- What this process holds -------------------------------------------------

inline int CountOpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n - 1;  // the directory's own descriptor
}

// Descriptors of this process (the daemon's included) open on memfd `name`.
inline int CountMemfdFds(const std::string& name) {
  const std::string want = "/memfd:" + name + " ";
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    char target[512];
    const ssize_t len = readlink(link.c_str(), target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    n += std::string(target).rfind(want, 0) == 0;
  }
  closedir(dir);
  return n;
}

// Mappings of memfd `name` in this process.
inline int CountMemfdMaps(const std::string& name) {
  const std::string want = "/memfd:" + name + " ";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) n += line.find(want) != std::string::npos;
  return n;
}

// Neither a descriptor nor a mapping of the raw memfds `names` is left.
inline ::testing::AssertionResult NoRawMemfdsLeft(
    absl::Duration timeout = kHangLimit,
    const std::vector<const char*>& names = {kSessionMemfd, kArenaMemfd,
                                             kRefusedMemfd}) {
  auto held = [&names] {
    int n = 0;
    for (const char* name : names) {
      n += CountMemfdFds(name) + CountMemfdMaps(name);
    }
    return n;
  };
  if (WaitFor([&] { return held() == 0; }, timeout)) {
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  for (const char* name : names) {
    r << name << ": " << CountMemfdFds(name) << " fds, " << CountMemfdMaps(name)
      << " mappings; ";
  }
  return r;
}

// --- Descriptors -------------------------------------------------------------

struct Desc {
  alignas(8) uint8_t bytes[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t len = sizeof(bytes);
  shm::RdmaDescriptor* d() {
    return reinterpret_cast<shm::RdmaDescriptor*>(bytes);
  }
  const shm::RdmaDescriptor* d() const {
    return reinterpret_cast<const shm::RdmaDescriptor*>(bytes);
  }
};

// A pipe whose write end is handed to the daemon as an extra descriptor: once
// every copy of it is closed, the read end reports a hang-up.
struct Pipe {
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      r = fds[0];
      w = fds[1];
    }
  }
  ~Pipe() {
    if (r >= 0) close(r);
    CloseWriteEnd();
  }
  void CloseWriteEnd() {
    if (w >= 0) close(w);
    w = -1;
  }
  // Nobody (the daemon included) holds the write end any more.
  bool WritersGone(absl::Duration timeout = kHangLimit) const {
    pollfd p{r, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) ==
               1 &&
           (p.revents & POLLHUP) != 0;
  }
  int r = -1;
  int w = -1;
};

// One recvmsg(2) of up to `len` bytes into `data`, with MSG_CMSG_CLOEXEC
// and `flags`. The descriptors that come with the bytes are appended to
// `fds`, or closed when it is null; a recvmsg that fails brought none.
// Returns what recvmsg returned, errno as it left it.
inline ssize_t RecvWithFds(int sock, void* data, size_t len, int flags,
                           std::vector<int>* fds) {
  iovec iov{data, len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(16 * sizeof(int))];
  mh.msg_control = control;
  mh.msg_controllen = sizeof(control);
  const ssize_t got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
  if (got < 0) return got;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr;
       cm = CMSG_NXTHDR(&mh, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    const size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (fds != nullptr) {
        fds->push_back(fd);
      } else {
        close(fd);
      }
    }
  }
  return got;
}

// --- The raw client ----------------------------------------------------------

class RawClient {
 public:
  enum class Got { kMessage, kClosed, kTimeout };
  // The daemon's answer to one setup message.
  struct Answer {
    Got got = Got::kTimeout;
    uint16_t type = 0;
    int32_t status = 0;
    uint32_t id = 0;
    size_t fds = 0;  // descriptors that came with it
    std::string text;
  };
  struct Arena {
    uint8_t* base = nullptr;  // our mapping (nullptr: none)
    uint64_t bytes = 0;
    int fd = -1;
    uint32_t id = 0;
  };

  explicit RawClient(std::string socket_path) : path_(std::move(socket_path)) {}
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  static shm::SetupMessage Msg(uint16_t type) {
    shm::SetupMessage m;
    std::memset(&m, 0, sizeof(m));
    m.magic = shm::kSetupMagic;
    m.version = shm::kSetupVersion;
    m.type = type;
    return m;
  }
  static shm::SetupMessage HelloMsg(uint64_t length) {
    shm::SetupMessage m = Msg(shm::kSetupHello);
    m.length = length;
    return m;
  }

  // The session memfd, formatted as librdmaplane formats it, then resized to
  // `file_bytes` and sealed with `seals`.
  bool Format(uint64_t file_bytes = shm::SessionRegionBytes(),
              int seals = kSeals) {
    region_bytes_ = shm::SessionRegionBytes();
    session_fd_ = memfd_create(kSessionMemfd, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (session_fd_ < 0 || ftruncate(session_fd_, region_bytes_) != 0) {
      return false;
    }
    void* mem = mmap(nullptr, region_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED,
                     session_fd_, 0);
    if (mem == MAP_FAILED) return false;
    region_ = static_cast<uint8_t*>(mem);
    header_ = new (region_) shm::SessionHeader{};
    header_->magic = shm::kSessionMagic;
    header_->version = shm::kSessionVersion;
    header_->header_pages = sizeof(shm::SessionHeader) / 4096;
    header_->region_bytes = region_bytes_;
    header_->max_connections = shm::kMaxConnections;
    // The liveness word as a held mutex shows it (our thread id), without
    // the robust list librdmaplane registers it on: the daemon takes us
    // for alive until the socket closes.
    const uint32_t tid = static_cast<uint32_t>(syscall(SYS_gettid));
    std::memcpy(header_->liveness, &tid, sizeof(tid));
    const uint64_t offset = shm::PlanRings(header_);
    if (offset > region_bytes_) return false;
    request_ring_ = region_ + header_->control_requests.offset;
    response_ring_ = region_ + header_->control_responses.offset;
    auto req = shm::SpscRing<shm::ControlRequest>::Create(
        request_ring_, header_->control_requests.bytes,
        shm::kControlRingEntries);
    auto resp = shm::SpscRing<shm::ControlResponse>::Create(
        response_ring_, header_->control_responses.bytes,
        shm::kControlRingEntries);
    if (!req.ok() || !resp.ok()) return false;
    requests_ = *req;
    responses_ = *resp;
    // The connection slots' rings are formatted by the daemon when it hands
    // a slot out (as for librdmaplane); send() and completion() attach to
    // them on first use. Formatting all 1024 here would touch thousands of
    // pages of the sparse region for every raw client.
    for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
      const shm::ConnectionSlotRef& slot = header_->connections[i];
      send_ring_[i] = region_ + slot.send.offset;
      completion_ring_[i] = region_ + slot.completion.offset;
      send_bytes_[i] = slot.send.bytes;
      completion_bytes_[i] = slot.completion.bytes;
      slot_rings_[i] = false;
    }
    if (file_bytes != region_bytes_ &&
        ftruncate(session_fd_, static_cast<off_t>(file_bytes)) != 0) {
      return false;
    }
    if ((seals & F_SEAL_WRITE) != 0) {
      // A write seal needs every writable shared mapping gone.
      munmap(region_, region_bytes_);
      region_ = nullptr;
      header_ = nullptr;
    }
    return seals == 0 || fcntl(session_fd_, F_ADD_SEALS, seals) == 0;
  }

  bool ConnectSocket() {
    sock_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (sock_ < 0 || path_.size() >= sizeof(addr.sun_path)) return false;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    if (connect(sock_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return false;
    }
    timeval tv{3, 0};  // never hang on a daemon that stopped answering
    setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return true;
  }

  // Takes a socket the caller connected itself.
  void AdoptSocket(int sock) { sock_ = sock; }

  // The most descriptors one message may carry (the kernel's SCM_MAX_FD).
  static constexpr size_t kMaxSendFds = 253;

  // Sends `len` bytes with `fds` attached (up to kMaxSendFds, duplicates
  // allowed).
  bool Send(const void* data, size_t len, const std::vector<int>& fds = {},
            int flags = 0) {
    iovec iov{const_cast<void*>(data), len};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(kMaxSendFds * sizeof(int))];
    if (!fds.empty()) {
      if (fds.size() > kMaxSendFds) return false;
      std::memset(control, 0, sizeof(control));
      mh.msg_control = control;
      mh.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
      cmsghdr* cm = CMSG_FIRSTHDR(&mh);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
      std::memcpy(CMSG_DATA(cm), fds.data(), fds.size() * sizeof(int));
    }
    ssize_t sent;
    do {
      sent = sendmsg(sock_, &mh, MSG_NOSIGNAL | flags);
    } while (sent < 0 && errno == EINTR);
    return sent == static_cast<ssize_t>(len);
  }

  // A hello for the region (its own length unless told) with its memfd.
  bool SendHello(std::optional<uint64_t> length = std::nullopt) {
    return SendHelloWith({session_fd_}, length);
  }
  bool SendHelloWith(const std::vector<int>& fds,
                     std::optional<uint64_t> length = std::nullopt) {
    const shm::SetupMessage m = HelloMsg(length.value_or(region_bytes_));
    return Send(&m, sizeof(m), fds);
  }

  // One setup message from the daemon; descriptors that come with it are
  // kept when `fds` is given, else closed.
  Got Recv(shm::SetupMessage* msg, std::vector<int>* fds,
           absl::Duration timeout) {
    pollfd p{sock_, POLLIN, 0};
    int r;
    do {
      r = poll(&p, 1,
               static_cast<int>(
                   std::max<int64_t>(0, absl::ToInt64Milliseconds(timeout))));
    } while (r < 0 && errno == EINTR);
    if (r == 0) return Got::kTimeout;
    ssize_t got;
    do {
      got = RecvWithFds(sock_, msg, sizeof(*msg), MSG_WAITALL, fds);
    } while (got < 0 && errno == EINTR);
    const int err = errno;
    if (got == static_cast<ssize_t>(sizeof(*msg))) return Got::kMessage;
    if (got < 0 && (err == EAGAIN || err == EWOULDBLOCK)) return Got::kTimeout;
    return Got::kClosed;  // end of stream, reset, or a partial message
  }

  // The answer to the last message. A successful hello reply's doorbells
  // are kept.
  Answer ReadAnswer(absl::Duration timeout = kHangLimit) {
    Answer a;
    shm::SetupMessage reply;
    std::vector<int> fds;
    a.got = Recv(&reply, &fds, timeout);
    a.fds = fds.size();
    if (a.got == Got::kMessage) {
      a.type = reply.type;
      a.status = reply.status;
      a.id = reply.id;
      a.text.assign(reply.text, strnlen(reply.text, sizeof(reply.text)));
      if (reply.type == shm::kSetupHelloReply &&
          reply.status == shm::kStatusOk && fds.size() == 2 &&
          control_bell_ < 0) {
        control_bell_ = fds[0];
        engine_bell_ = fds[1];
        session_id_ = reply.id;
        return a;
      }
    }
    for (int fd : fds) close(fd);
    return a;
  }

  // Takes the doorbells of a hello reply the caller read itself.
  void AdoptDoorbells(int control, int engine) {
    control_bell_ = control;
    engine_bell_ = engine;
  }

  // Whether the daemon closes the socket within `timeout`; answers that
  // arrive first are dropped.
  bool WaitClosed(absl::Duration timeout = kHangLimit) {
    const absl::Time end = absl::Now() + timeout;
    while (true) {
      shm::SetupMessage m;
      const Got g = Recv(&m, nullptr, end - absl::Now());
      if (g == Got::kClosed) return true;
      if (g == Got::kTimeout) return false;
    }
  }

  // A well-formed session: format, connect, hello.
  bool Open() {
    if (!Format() || !ConnectSocket() || !SendHello()) return false;
    const Answer a = ReadAnswer();
    return a.got == Got::kMessage && a.type == shm::kSetupHelloReply &&
           a.status == shm::kStatusOk && control_bell_ >= 0;
  }

  // --- Control rings ---

  static shm::ControlRequest Request(uint32_t op,
                                     const std::string& service = "") {
    shm::ControlRequest r{};
    r.op = op;
    std::memcpy(r.service, service.data(),
                std::min(service.size(), sizeof(r.service) - 1));
    return r;
  }

  // Rings one of the session's doorbells (a datagram socket the daemon
  // reads): one byte, never blocking; a full queue already holds a wake-up.
  static void Ring(int bell) {
    const uint8_t byte = 1;
    [[maybe_unused]] ssize_t n =
        ::send(bell, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  void KickControl() { Ring(control_bell_); }

  // Pushes `req` under a fresh request id (returned); 0 when the ring is full.
  uint64_t Push(shm::ControlRequest req) {
    req.request_id = next_request_id_++;
    return requests_.TryPush(req) ? req.request_id : 0;
  }

  // The response to `id`; responses to other ids are skipped.
  std::optional<shm::ControlResponse> Await(
      uint64_t id, absl::Duration timeout = kHangLimit) {
    const absl::Time end = absl::Now() + timeout;
    while (true) {
      shm::ControlResponse r;
      while (responses_.TryPop(&r) == shm::PopResult::kOk) {
        if (r.request_id == id) return r;
      }
      if (absl::Now() > end) return std::nullopt;
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  std::optional<shm::ControlResponse> Call(
      const shm::ControlRequest& req, absl::Duration timeout = kHangLimit) {
    const uint64_t id = Push(req);
    if (id == 0) return std::nullopt;
    KickControl();
    return Await(id, timeout);
  }

  int32_t Status(const shm::ControlRequest& req) {
    const auto r = Call(req);
    return r ? r->status : kNoAnswer;
  }

  std::optional<uint32_t> RegisterLocal(const void* addr, uint64_t len,
                                        uint32_t flags) {
    shm::ControlRequest req = Request(shm::kOpRegisterLocal);
    req.address = Addr(addr);
    req.length = len;
    req.flags = flags;
    const auto r = Call(req);
    if (!r || r->status != shm::kStatusOk) return std::nullopt;
    return r->key;
  }

  // The connection slot, or nullopt.
  std::optional<uint32_t> ConnectTo(const std::string& service) {
    const auto r = Call(Request(shm::kOpConnect, service));
    if (!r || r->status != shm::kStatusOk) return std::nullopt;
    return r->connection;
  }

  int32_t Disconnect(uint32_t slot) {
    shm::ControlRequest req = Request(shm::kOpDisconnect);
    req.connection = slot;
    return Status(req);
  }

  // --- Arenas ---

  // A memfd of `file_bytes`, mapped (unless write-sealed) and sealed with
  // `seals`. The caller owns it (FreeArena).
  static Arena MakeArena(uint64_t file_bytes, int seals = kSeals,
                         const char* name = kArenaMemfd) {
    Arena a;
    a.fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (a.fd < 0 || ftruncate(a.fd, static_cast<off_t>(file_bytes)) != 0) {
      return a;
    }
    a.bytes = file_bytes;
    if ((seals & F_SEAL_WRITE) == 0 && file_bytes > 0) {
      void* mem = mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                       a.fd, 0);
      if (mem != MAP_FAILED) a.base = static_cast<uint8_t*>(mem);
    }
    if (seals != 0) fcntl(a.fd, F_ADD_SEALS, seals);
    return a;
  }
  static void FreeArena(Arena* a) {
    if (a->base != nullptr) munmap(a->base, a->bytes);
    if (a->fd >= 0) close(a->fd);
    *a = Arena();
  }

  Answer SendArena(uint64_t address, uint64_t length,
                   const std::vector<int>& fds) {
    shm::SetupMessage m = Msg(shm::kSetupArena);
    m.address = address;
    m.length = length;
    Send(&m, sizeof(m), fds);
    return ReadAnswer();
  }

  // kSetupSegment: SysV segment `shmid` as the arena at `address`.
  Answer SendSegment(uint32_t shmid, uint64_t address, uint64_t length) {
    shm::SetupMessage m = Msg(shm::kSetupSegment);
    m.id = shmid;
    m.address = address;
    m.length = length;
    Send(&m, sizeof(m), {});
    return ReadAnswer();
  }

  // kSetupFile: descriptor `fd` (or none: -1) as a file mapped at
  // `address`, length bytes from its page `page` (of 4096 bytes).
  Answer SendFile(int fd, uint64_t address, uint64_t length, uint32_t page) {
    shm::SetupMessage m = Msg(shm::kSetupFile);
    m.id = page;
    m.address = address;
    m.length = length;
    Send(&m, sizeof(m), fd >= 0 ? std::vector<int>{fd} : std::vector<int>{});
    return ReadAnswer();
  }

  // A proper arena of `bytes`, announced and kept; nullptr when refused.
  Arena* AddArena(uint64_t bytes) {
    Arena a = MakeArena(bytes);
    if (a.base == nullptr) {
      FreeArena(&a);
      return nullptr;
    }
    const Answer ans = SendArena(Addr(a.base), bytes, {a.fd});
    if (ans.got != Got::kMessage || ans.type != shm::kSetupArenaReply ||
        ans.status != shm::kStatusOk) {
      FreeArena(&a);
      return nullptr;
    }
    a.id = ans.id;
    arenas_.push_back(std::make_unique<Arena>(a));
    return arenas_.back().get();
  }

  // --- Data path ---

  void KickEngine(uint32_t slot) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (header_->engine_idle[slot].sleeping.load(std::memory_order_seq_cst)) {
      Ring(engine_bell_);
    }
  }

  uint32_t state(uint32_t slot) const {
    return header_->connection_state[slot].load(std::memory_order_acquire);
  }

  std::optional<shm::CompletionEntry> AwaitCompletion(
      uint32_t slot, absl::Duration timeout = kHangLimit) {
    const absl::Time end = absl::Now() + timeout;
    shm::CompletionEntry c;
    while (completion(slot).TryPop(&c) != shm::PopResult::kOk) {
      if (absl::Now() > end) return std::nullopt;
      absl::SleepFor(absl::Microseconds(20));
    }
    return c;
  }

  // --- Raw access ---

  static std::atomic<uint32_t>& Producer(uint8_t* ring) {
    return reinterpret_cast<shm::RingIndex*>(ring + shm::kRingProducerOffset)
        ->value;
  }
  static std::atomic<uint32_t>& Consumer(uint8_t* ring) {
    return reinterpret_cast<shm::RingIndex*>(ring + shm::kRingConsumerOffset)
        ->value;
  }
  static shm::RingHeader* RingHeaderOf(uint8_t* ring) {
    return reinterpret_cast<shm::RingHeader*>(ring);
  }

  shm::SessionHeader* header() { return header_; }
  uint8_t* request_ring() { return request_ring_; }
  uint8_t* response_ring() { return response_ring_; }
  uint8_t* send_ring(uint32_t slot) { return send_ring_[slot]; }
  uint8_t* completion_ring(uint32_t slot) { return completion_ring_[slot]; }
  shm::SpscRing<shm::SendEntry>& send(uint32_t slot) {
    SlotRings(slot);
    return send_[slot];
  }
  shm::SpscRing<shm::CompletionEntry>& completion(uint32_t slot) {
    SlotRings(slot);
    return completion_[slot];
  }
  shm::SpscRing<shm::ControlRequest>& requests() { return requests_; }
  shm::SpscRing<shm::ControlResponse>& responses() { return responses_; }
  uint64_t region_bytes() const { return region_bytes_; }
  int session_fd() const { return session_fd_; }
  int sock() const { return sock_; }
  int control_bell() const { return control_bell_; }
  int engine_bell() const { return engine_bell_; }

  void Close() {
    // The socket first: the daemon reclaims the session when it closes.
    for (int* fd : {&sock_, &control_bell_, &engine_bell_, &session_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    for (auto& a : arenas_) FreeArena(a.get());
    arenas_.clear();
    if (region_ != nullptr) munmap(region_, region_bytes_);
    region_ = nullptr;
    header_ = nullptr;
  }

 private:
  // The slot's rings as the daemon formatted them at hand-out, or, for a
  // slot it never handed out, formatted here at the default depths.
  void SlotRings(uint32_t slot) {
    if (slot_rings_[slot]) return;
    slot_rings_[slot] = true;
    auto s = shm::SpscRing<shm::SendEntry>::Attach(send_ring_[slot],
                                                   send_bytes_[slot]);
    if (!s.ok()) {
      s = shm::SpscRing<shm::SendEntry>::Create(
          send_ring_[slot], send_bytes_[slot], shm::kSendRingEntries);
    }
    auto c = shm::SpscRing<shm::CompletionEntry>::Attach(
        completion_ring_[slot], completion_bytes_[slot]);
    if (!c.ok()) {
      c = shm::SpscRing<shm::CompletionEntry>::Create(
          completion_ring_[slot], completion_bytes_[slot],
          shm::kCompletionRingEntries);
    }
    if (s.ok()) send_[slot] = *s;
    if (c.ok()) completion_[slot] = *c;
  }

  std::string path_;
  int sock_ = -1;
  int session_fd_ = -1;
  int control_bell_ = -1;
  int engine_bell_ = -1;
  uint32_t session_id_ = 0;
  uint8_t* region_ = nullptr;
  uint64_t region_bytes_ = 0;
  shm::SessionHeader* header_ = nullptr;
  uint8_t* request_ring_ = nullptr;
  uint8_t* response_ring_ = nullptr;
  uint8_t* send_ring_[shm::kMaxConnections] = {};
  uint8_t* completion_ring_[shm::kMaxConnections] = {};
  uint32_t send_bytes_[shm::kMaxConnections] = {};
  uint32_t completion_bytes_[shm::kMaxConnections] = {};
  bool slot_rings_[shm::kMaxConnections] = {};
  shm::SpscRing<shm::ControlRequest> requests_;
  shm::SpscRing<shm::ControlResponse> responses_;
  shm::SpscRing<shm::SendEntry> send_[shm::kMaxConnections];
  shm::SpscRing<shm::CompletionEntry> completion_[shm::kMaxConnections];
  uint64_t next_request_id_ = 1;
  std::vector<std::unique_ptr<Arena>> arenas_;
};

// --- The well-behaved pair ---------------------------------------------------

// A server and a client joined on service "good"; the server also listens on
// "target", where raw clients connect. Each round is a verified write and
// read-back that must finish within kRoundLimit; it runs on the caller's
// thread or, between Start and Stop, on a thread of its own.
class GoodPair {
 public:
  static constexpr uint32_t kBytes = 64u << 10;

  GoodPair(std::unique_ptr<Client> server, std::unique_ptr<Client> client)
      : server_(std::move(server)), client_(std::move(client)) {}
  ~GoodPair() { Stop(); }

  bool Setup() {
    if (!server_->Listen("good").ok()) return Fail("listen good");
    if (!server_->Listen("target").ok()) return Fail("listen target");
    auto cc = client_->Connect("good");
    if (!cc.ok()) return Fail("connect");
    auto sc = server_->Accept("good", kHangLimit);
    if (!sc.ok()) return Fail("accept");
    cconn_ = *cc;
    target_ = static_cast<uint8_t*>(server_->Alloc(kBytes));
    src_ = static_cast<uint8_t*>(client_->Alloc(kBytes));
    dst_ = static_cast<uint8_t*>(client_->Alloc(kBytes));
    if (target_ == nullptr || src_ == nullptr || dst_ == nullptr) {
      return Fail("alloc");
    }
    if (server_->RegisterRdmaMemory(*sc, target_, kBytes, RDP_MEM_READWRITE,
                                    desc_.bytes, &desc_.len) != RDP_OK) {
      return Fail("register rdma");
    }
    auto ls = client_->RegisterMemory(src_, kBytes, RDP_MEM_READWRITE);
    auto ld = client_->RegisterMemory(dst_, kBytes, RDP_MEM_READWRITE);
    if (!ls.ok() || !ld.ok()) return Fail("register");
    lsrc_ = *ls;
    ldst_ = *ld;
    return true;
  }

  // One verified write + read-back with a pattern that depends on `round`.
  bool Round(uint64_t round) {
    if (broken_) return Fail("a transfer of an earlier round never finished");
    // Monotonic: a step of the wall clock fails no round.
    const Mono::time_point start = Mono::now();
    const Mono::time_point deadline =
        start + absl::ToChronoNanoseconds(kRoundLimit);
    for (uint32_t i = 0; i < kBytes; ++i) {
      src_[i] = static_cast<uint8_t>(i * 31 + round * 7 + 1);
    }
    std::memset(dst_, 0, kBytes);
    rdp_sge ws{src_, kBytes, lsrc_};
    int w = client_->Write(cconn_, &ws, 1, desc_.bytes, desc_.len, 0, 0, &wov_);
    if (w == RDP_PENDING) w = Wait(&wov_, deadline);
    if (w != RDP_OK) return Fail("write: " + Name(w) + Where());
    if (std::memcmp(target_, src_, kBytes) != 0) return Fail("target bytes");
    rdp_sge rs{dst_, kBytes, ldst_};
    int r = client_->Read(cconn_, &rs, 1, desc_.d()->address, desc_.bytes,
                          desc_.len, 0, &rov_);
    if (r == RDP_PENDING) r = Wait(&rov_, deadline);
    if (r != RDP_OK) return Fail("read: " + Name(r) + Where());
    if (std::memcmp(dst_, src_, kBytes) != 0) return Fail("read-back bytes");
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Mono::now() -
                                                             start)
            .count();
    int64_t prev = slowest_ns_.load();
    while (ns > prev && !slowest_ns_.compare_exchange_weak(prev, ns)) {
    }
    return true;
  }

  void Start() {
    Stop();
    stop_.store(false);
    thread_ = std::thread([this] {
      for (uint64_t round = 1u << 20; !stop_.load(std::memory_order_relaxed);
           ++round) {
        if (!Round(round)) return;
        rounds_.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  uint64_t rounds() const { return rounds_.load(std::memory_order_relaxed); }
  absl::Duration slowest() const {
    return absl::Nanoseconds(slowest_ns_.load());
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  Client& server() { return *server_; }
  const Desc& desc() const { return desc_; }
  uint32_t lsrc() const { return lsrc_; }
  uint32_t ldst() const { return ldst_; }
  const uint8_t* target() const { return target_; }

 private:
  std::string Name(int status) const {
    return status == kTimedOut
               ? "no completion within " + absl::FormatDuration(kRoundLimit) +
                     late_
               : std::string(rdp_status_name(status));
  }
  static constexpr int kTimedOut = INT32_MIN;

  // The client's view of the connection when a request failed: its state
  // word (shm::ConnectionState) and whether the daemon ended it.
  std::string Where() const {
    return " (client: connection state " +
           std::to_string(client_->ConnectionStateOf(cconn_)) +
           (client_->ConnectionEnded(cconn_) ? ", ended" : ", not ended") +
           ")";
  }

  // Polls without blocking: the wait is bounded even if the daemon never
  // completes. A transfer that did not finish leaves the pair unusable (its
  // overlapped stays owned by the ring).
  // The request is polled once more after the deadline (the clock is read
  // before each poll), so that one that completed while this thread was
  // not scheduled is not late; a late one says how long it was waited for
  // on the monotonic and on the wall clock (a process or machine frozen for
  // that long shows as both).
  int Wait(rdp_overlapped* ov, Mono::time_point deadline) {
    const Mono::time_point mono_start = Mono::now();
    const absl::Time wall_start = absl::Now();
    while (true) {
      const bool late = Mono::now() > deadline;
      const int s = client_->GetOverlappedResult(cconn_, ov, false, nullptr);
      if (s != RDP_PENDING) return s;
      if (late) {
        broken_ = true;
        late_ = " (waited " +
                absl::FormatDuration(absl::FromChrono(Mono::now() - mono_start)) +
                " monotonic, " + absl::FormatDuration(absl::Now() - wall_start) +
                " by the wall clock)";
        return kTimedOut;
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  bool Fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = what;
    return false;
  }

  std::unique_ptr<Client> server_, client_;
  rdp_conn cconn_ = 0;
  uint8_t* target_ = nullptr;
  uint8_t* src_ = nullptr;
  uint8_t* dst_ = nullptr;
  uint32_t lsrc_ = 0, ldst_ = 0;
  Desc desc_;
  rdp_overlapped wov_{};
  rdp_overlapped rov_{};
  bool broken_ = false;
  std::string late_;  // how long a request that never completed was waited for
  std::atomic<int64_t> slowest_ns_{0};
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rounds_{0};
  std::thread thread_;
  std::mutex mu_;
  std::string error_ ABSL_GUARDED_BY(mu_);
};

// --- Fixture -----------------------------------------------------------------

class HostileClientTest : public ::testing::Test {
 protected:
  // A fixture that needs other daemon options changes them here.
  virtual void Configure(control::DaemonOptions* options) {}

  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    control::DaemonOptions options;
    options.socket_path = SocketPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    Configure(&options);
    daemon_ = std::make_unique<control::Daemon>(options);
    const absl::Status s = daemon_->Start();
    ASSERT_TRUE(s.ok()) << s;
    std::unique_ptr<Client> server = NewClient();
    std::unique_ptr<Client> client = NewClient();
    ASSERT_TRUE(server != nullptr && client != nullptr);
    good_ = std::make_unique<GoodPair>(std::move(server), std::move(client));
    ASSERT_TRUE(good_->Setup()) << good_->error();
    ASSERT_TRUE(good_->Round(++round_)) << good_->error();
    baseline_ = Settled();
    baseline_fds_ = CountOpenFds();
    before_ = Snap();
  }

  void TearDown() override {
    if (good_ != nullptr) good_->Stop();
    good_.reset();
    if (daemon_ != nullptr) daemon_->Stop();
  }

  const std::string& path() const { return daemon_->socket_path(); }

  std::unique_ptr<Client> NewClient(
      absl::Duration control_timeout = kHangLimit) {
    ClientOptions o;
    o.socket_path = daemon_->socket_path();
    o.arena_bytes = 4u << 20;
    o.hugepages = ClientOptions::Hugepages::kOff;
    o.control_timeout = control_timeout;
    auto c = Client::Open(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  control::DaemonSnapshot Snap() const { return daemon_->Snapshot(); }
  Held Counters() const { return HeldOf(Snap()); }

  Held Settled() const { return testing::Settled(*daemon_); }

  ::testing::AssertionResult CountersReach(const Held& want,
                                           absl::Duration timeout = kHangLimit) {
    return testing::CountersReach(*daemon_, want, timeout);
  }

  // Waits until the running good pair has completed two more verified
  // rounds. The daemon has one engine, so the engine has gone over every
  // connection's work (and every kick) since the call began. A pair that
  // stops fails here (after two rounds' starvation bound) rather than hangs.
  ::testing::AssertionResult EngineWentRound() {
    const uint64_t rounds = good_->rounds();
    if (WaitFor([&] { return good_->rounds() >= rounds + 2; },
                2 * kRoundLimit)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "the good pair stopped: " << good_->error() << "\n"
           << DaemonState();
  }

  // What the daemon says of its connections and counters (rdmaplanectl's
  // JSON), for a failure of the good pair: where its transfer stood.
  std::string DaemonState() const {
    const control::DaemonStatus status = daemon_->Status();
    return "connections: " + control::RenderJson(status, "connections") +
           "\ncounters: " + control::RenderJson(status, "counters");
  }

  // The daemon still serves: the good pair completes a verified transfer in
  // time, and a new client opens a session, listens, allocates and
  // registers.
  void ExpectServing(const std::string& when) {
    SCOPED_TRACE("serving " + when);
    good_->Stop();
    EXPECT_TRUE(good_->Round(++round_)) << good_->error() << "\n"
                                        << DaemonState();
    std::unique_ptr<Client> fresh = NewClient();
    ASSERT_NE(fresh, nullptr);
    EXPECT_TRUE(fresh->Listen("fresh-" + std::to_string(round_)).ok());
    void* p = fresh->Alloc(4096);
    ASSERT_NE(p, nullptr);
    auto key = fresh->RegisterMemory(p, 4096, RDP_MEM_READWRITE);
    EXPECT_TRUE(key.ok()) << key.status();
  }

  // The baseline plus one raw session holding `arenas` arenas.
  Held WithRawSession(uint32_t arenas) const {
    Held h = baseline_;
    h.sessions += 1;
    h.arenas += arenas;
    return h;
  }

  // Once the raw clients are gone: the counters, this process's descriptors
  // and the raw memfds are as before the attack.
  void ExpectBaseline() {
    EXPECT_TRUE(CountersReach(baseline_));
    EXPECT_TRUE(NoRawMemfdsLeft());
    EXPECT_TRUE(WaitFor([&] { return CountOpenFds() == baseline_fds_; }))
        << CountOpenFds() << " descriptors open, " << baseline_fds_
        << " before";
  }

  std::unique_ptr<control::Daemon> daemon_;
  std::unique_ptr<GoodPair> good_;
  uint64_t round_ = 0;
  Held baseline_;
  int baseline_fds_ = 0;
  control::DaemonSnapshot before_;
};

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_HOSTILE_CLIENT_H_
