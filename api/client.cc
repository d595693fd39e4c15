#include "api/client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/client_memory.h"
#include "api/shm/doorbell.h"
#include "api/shm/setup.h"
#include "api/status.h"

namespace rdmaplane {
namespace {

using shm::CompletionEntry;
using shm::ControlRequest;
using shm::ControlResponse;
using shm::SendEntry;

constexpr size_t kAllocAlign = 64;

// Wakes the daemon through one of this session's doorbell sockets. A full
// queue (EAGAIN) already holds a wake-up.
bool Ring(int fd) {
  const uint8_t byte = 1;
  const ssize_t n = send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == 1 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

// The descriptor in a caller's buffer, copied out (the buffer may have any
// alignment); nullopt when it is not one.
std::optional<shm::RdmaDescriptor> ParseDescriptor(const void* p,
                                                   uint32_t len) {
  if (p == nullptr || len < sizeof(shm::RdmaDescriptor)) return std::nullopt;
  shm::RdmaDescriptor d;
  std::memcpy(&d, p, sizeof(d));
  if (d.magic != shm::kDescriptorMagic) return std::nullopt;
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Open(
    const ClientOptions& options) {
  std::unique_ptr<Client> client(new Client());
  absl::Status s = client->Init(options);
  if (!s.ok()) return s;
  return client;
}

absl::Status Client::Init(const ClientOptions& options) {
  options_ = options;
  if (options_.socket_path.empty())
    options_.socket_path = shm::DefaultSocketPath();
  // The environment overrides the program's choice: 0 never tries
  // hugepages, 1 insists on them (arenas fail without).
  if (const char* env = std::getenv("RDMAPLANE_HUGEPAGES")) {
    if (std::strcmp(env, "0") == 0) {
      options_.hugepages = ClientOptions::Hugepages::kOff;
    } else if (std::strcmp(env, "1") == 0) {
      options_.hugepages = ClientOptions::Hugepages::kOn;
    }
  }

  // Session region with every ring formatted.
  region_bytes_ = shm::SessionRegionBytes();
  session_fd_ =
      memfd_create("rdmaplane-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (session_fd_ < 0 || ftruncate(session_fd_, region_bytes_) != 0 ||
      !memory::SealSize(session_fd_)) {
    return MakeStatus(RDP_ERR_NO_BUFFERS, "cannot create the session region");
  }
  void* mem = mmap(nullptr, region_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED,
                   session_fd_, 0);
  if (mem == MAP_FAILED) {
    return MakeStatus(RDP_ERR_NO_BUFFERS, "cannot map the session region");
  }
  region_ = static_cast<uint8_t*>(mem);
  header_ = new (region_) shm::SessionHeader{};
  header_->magic = shm::kSessionMagic;
  header_->version = shm::kSessionVersion;
  header_->header_pages = sizeof(shm::SessionHeader) / 4096;
  header_->region_bytes = region_bytes_;
  header_->max_connections = shm::kMaxConnections;
  // Held by this thread for the session's life: when the thread dies, the
  // kernel marks it, and the daemon stops placing data for us at once.
  static_assert(sizeof(pthread_mutex_t) <= sizeof(header_->liveness));
  {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    auto* liveness = reinterpret_cast<pthread_mutex_t*>(header_->liveness);
    liveness_locked_ = pthread_mutex_init(liveness, &attr) == 0 &&
                       pthread_mutex_lock(liveness) == 0;
    liveness_owner_ = static_cast<pid_t>(syscall(SYS_gettid));
    pthread_mutexattr_destroy(&attr);
  }
  shm::PlanRings(header_);
  {
    std::lock_guard<std::mutex> lock(control_mu_);
    auto req = shm::SpscRing<ControlRequest>::Create(
        region_ + header_->control_requests.offset,
        header_->control_requests.bytes, shm::kControlRingEntries);
    auto resp = shm::SpscRing<ControlResponse>::Create(
        region_ + header_->control_responses.offset,
        header_->control_responses.bytes, shm::kControlRingEntries);
    if (!req.ok()) return req.status();
    if (!resp.ok()) return resp.status();
    requests_ = *req;
    responses_ = *resp;
  }
  // The rdma_cm event ring is the daemon's to format (at hello).
  // A slot's rings are the daemon's to format, when it hands the slot out.

  // Say hello.
  sock_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options_.socket_path.size() >= sizeof(addr.sun_path)) {
    return MakeStatus(RDP_ERR_INVALID, "socket path too long");
  }
  std::memcpy(addr.sun_path, options_.socket_path.c_str(),
              options_.socket_path.size() + 1);
  if (sock_ < 0 ||
      connect(sock_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return MakeStatus(RDP_ERR_NET_DOWN,
                      absl::StrCat("no rdmaplaned at ", options_.socket_path,
                                   ": ", std::strerror(errno)));
  }
  // Our memory goes only to a daemon we trust: root, ourselves, or the uid
  // named by RDMAPLANE_DAEMON_UID. Anyone could bind a socket in /tmp.
  ucred peer{};
  socklen_t peer_len = sizeof(peer);
  if (getsockopt(sock_, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0) {
    return MakeStatus(RDP_ERR_NET_DOWN, "cannot identify the daemon");
  }
  uid_t trusted = 0;
  if (const char* env = std::getenv("RDMAPLANE_DAEMON_UID")) {
    trusted = static_cast<uid_t>(std::strtoul(env, nullptr, 10));
  }
  if (peer.uid != 0 && peer.uid != geteuid() && peer.uid != trusted) {
    return MakeStatus(
        RDP_ERR_PERMISSION,
        absl::StrCat("the socket ", options_.socket_path, " belongs to uid ",
                     peer.uid, ", not to a trusted rdmaplaned"));
  }
  // A daemon that accepts but never answers must not hang us.
  const int64_t timeout_us =
      absl::ToInt64Microseconds(options_.control_timeout);
  timeval tv{static_cast<time_t>(timeout_us / 1'000'000),
             static_cast<suseconds_t>(timeout_us % 1'000'000)};
  setsockopt(sock_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  shm::SetupMessage hello = shm::MakeSetup(shm::kSetupHello);
  hello.length = region_bytes_;
  shm::SetupMessage reply;
  int fd0 = -1, fd1 = -1;
  // A daemon that refuses us may have answered and closed before our hello
  // went out: read its answer even when sending failed.
  const bool sent = shm::SendSetup(sock_, hello, session_fd_);
  const bool got = shm::RecvSetup(sock_, &reply, &fd0, &fd1);
  if (got && reply.type == shm::kSetupHelloReply && reply.status != RDP_OK) {
    if (fd0 >= 0) close(fd0);
    if (fd1 >= 0) close(fd1);
    return MakeStatus(reply.status, reply.text);
  }
  if (!sent || !got || reply.type != shm::kSetupHelloReply) {
    if (fd0 >= 0) close(fd0);
    if (fd1 >= 0) close(fd1);
    return MakeStatus(RDP_ERR_NET_DOWN,
                      "the daemon did not accept the session");
  }
  if (reply.status != RDP_OK) {
    if (fd0 >= 0) close(fd0);
    if (fd1 >= 0) close(fd1);
    return MakeStatus(reply.status, reply.text);
  }
  if (fd0 < 0 || fd1 < 0) {
    return MakeStatus(RDP_ERR_NET_DOWN, "the daemon sent no doorbells");
  }
  control_eventfd_ = fd0;
  engine_eventfd_ = fd1;
  session_id_ = reply.id;
  {
    auto events = shm::SpscRing<shm::CmEvent>::Attach(
        region_ + header_->cm_events.offset, header_->cm_events.bytes);
    if (!events.ok()) return events.status();
    std::lock_guard<std::mutex> lock(cm_mu_);
    cm_events_ = *events;
  }
  return absl::OkStatus();
}

Client::~Client() {
  CloseAll();
  // Pages this client moved stay where they are; another client of the
  // process may move them again.
  memory::ForgetMoves(this);
  if (sock_ >= 0) close(sock_);  // the daemon reclaims everything we owned
  for (int fd : {control_eventfd_, engine_eventfd_, session_fd_}) {
    if (fd >= 0) close(fd);
  }
  std::lock_guard<std::mutex> lock(arena_mu_);
  for (auto& a : arenas_) {
    if (!a->shared_in_place) munmap(a->base, a->bytes);
    close(a->fd);
  }
  if (region_ == nullptr) return;
  // The liveness mutex is on its owner thread's robust list until that
  // thread unlocks it (or dies): only then may its page go. Closed from
  // another thread while the owner lives, the header page stays mapped
  // (4 KiB) so that the owner's list never points into unmapped memory.
  auto* liveness = reinterpret_cast<pthread_mutex_t*>(header_->liveness);
  bool release = true;
  if (liveness_locked_) {
    const uint32_t word = __atomic_load_n(
        reinterpret_cast<const uint32_t*>(header_->liveness), __ATOMIC_RELAXED);
    if (static_cast<pid_t>(syscall(SYS_gettid)) == liveness_owner_) {
      pthread_mutex_unlock(liveness);
      pthread_mutex_destroy(liveness);
    } else {
      release = (word & shm::kFutexOwnerDied) != 0;  // on no list any more
    }
  }
  if (release) {
    munmap(region_, region_bytes_);
  } else {
    munmap(region_ + sizeof(shm::SessionHeader),
           region_bytes_ - sizeof(shm::SessionHeader));
  }
}

void Client::CloseAll() {
  if (header_ == nullptr || control_eventfd_ < 0) return;  // never opened
  // Each disconnect takes the connection back from its engine before the
  // daemon answers: from then on it moves none of our bytes, and every
  // request it did not complete ends with the connection's final status.
  // A daemon that does not answer one is not asked again.
  bool answering = true;
  for (uint32_t slot = 0; slot < shm::kMaxConnections; ++slot) {
    if (!connections_[slot].open) continue;
    if (answering) {
      ControlRequest req{};
      req.op = shm::kOpDisconnect;
      req.connection = slot;
      answering = Call(req).status != RDP_ERR_NET_DOWN;
    }
    EndConnection(slot, RDP_ERR_ABORTED);
  }
}

bool Client::DaemonAliveRateLimited() {
  if (daemon_down_.load(std::memory_order_relaxed)) return false;
  const int64_t now = absl::GetCurrentTimeNanos();
  if (now - daemon_checked_ns_.load(std::memory_order_relaxed) < 100'000'000) {
    return true;
  }
  daemon_checked_ns_.store(now, std::memory_order_relaxed);
  return DaemonAlive();
}

bool Client::DaemonAlive() {
  if (daemon_down_.load(std::memory_order_relaxed)) return false;
  pollfd p{sock_, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return true;
  // The daemon never writes to the socket after setup: readable means
  // closed.
  if ((p.revents & (POLLHUP | POLLERR | POLLIN)) == 0) return true;
  daemon_down_.store(true, std::memory_order_relaxed);
  return false;
}

// --- Arenas ----------------------------------------------------------------

absl::StatusOr<Client::Arena*> Client::NewArena(size_t min_bytes) {
  auto arena = std::make_unique<Arena>();
  size_t bytes = memory::RoundUp(std::max(min_bytes, options_.arena_bytes), memory::kHugePage);
  void* mem = MAP_FAILED;
  int fd = -1;
  const bool try_huge = options_.hugepages != ClientOptions::Hugepages::kOff;
  if (try_huge) {
    // memfd_create(MFD_HUGETLB) succeeds without reserved hugepages; the
    // shortage shows at mmap, which MAP_POPULATE makes fail up front.
    fd = memfd_create("rdmaplane-arena",
                      MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
    if (fd >= 0 && ftruncate(fd, bytes) == 0 && memory::SealSize(fd)) {
      mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_POPULATE, fd, 0);
    }
    if (mem == MAP_FAILED) {
      if (fd >= 0) close(fd);
      fd = -1;
      if (options_.hugepages == ClientOptions::Hugepages::kOn) {
        return MakeStatus(RDP_ERR_NO_BUFFERS, "no hugepages for an arena");
      }
      if (!warned_no_hugepages_) {
        warned_no_hugepages_ = true;
        std::fprintf(stderr,
                     "librdmaplane: no 2 MiB hugepages available; arenas use "
                     "regular pages\n");
      }
    } else {
      hugepages_ = true;
    }
  }
  if (mem == MAP_FAILED) {
    fd = memfd_create("rdmaplane-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, bytes) != 0 || !memory::SealSize(fd)) {
      if (fd >= 0) close(fd);
      return MakeStatus(RDP_ERR_NO_BUFFERS, "cannot create an arena");
    }
    mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mem == MAP_FAILED) {
      close(fd);
      return MakeStatus(RDP_ERR_NO_BUFFERS, "cannot map an arena");
    }
  }
  arena->base = static_cast<uint8_t*>(mem);
  arena->bytes = bytes;
  arena->fd = fd;
  arena->free_blocks[0] = bytes;
  if (absl::Status st = HandOver(arena.get()); !st.ok()) {
    munmap(mem, bytes);
    close(fd);
    return st;
  }
  Arena* raw = arena.get();
  arenas_.push_back(std::move(arena));
  return raw;
}

absl::Status Client::HandOver(Arena* arena) {
  shm::SetupMessage msg = shm::MakeSetup(shm::kSetupArena);
  msg.address = reinterpret_cast<uint64_t>(arena->base);
  msg.length = arena->bytes;
  absl::StatusOr<uint32_t> id = SendArena(msg, arena->fd);
  if (!id.ok()) return id.status();
  arena->id = *id;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Client::HandOverSegment(uint32_t shmid,
                                                  uint64_t address,
                                                  uint64_t length) {
  shm::SetupMessage msg = shm::MakeSetup(shm::kSetupSegment);
  msg.id = shmid;
  msg.address = address;
  msg.length = length;
  return SendArena(msg, -1);
}

absl::StatusOr<uint32_t> Client::HandOverFile(int fd, uint64_t address,
                                               uint64_t length,
                                               uint64_t offset) {
  if (offset % 4096 != 0 || offset / 4096 > UINT32_MAX) {
    return MakeStatus(RDP_ERR_INVALID,
                      "the mapping starts past 16 TiB into its file");
  }
  shm::SetupMessage msg = shm::MakeSetup(shm::kSetupFile);
  msg.id = static_cast<uint32_t>(offset / 4096);
  msg.address = address;
  msg.length = length;
  return SendArena(msg, fd);
}

absl::StatusOr<uint32_t> Client::SendArena(const shm::SetupMessage& msg,
                                           int fd) {
  shm::SetupMessage reply;
  int fd0 = -1, fd1 = -1;
  std::lock_guard<std::mutex> lock(
      control_mu_);  // the socket carries one exchange at a time
  const bool sent = shm::SendSetup(sock_, msg, fd) &&
                    shm::RecvSetup(sock_, &reply, &fd0, &fd1) &&
                    reply.type == shm::kSetupArenaReply;
  if (fd0 >= 0) close(fd0);
  if (fd1 >= 0) close(fd1);
  if (!sent || reply.status != RDP_OK) {
    return MakeStatus(sent ? reply.status : RDP_ERR_NET_DOWN,
                      sent ? reply.text : "the daemon is unreachable");
  }
  return reply.id;
}

void* Client::Alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  bytes = memory::RoundUp(bytes, kAllocAlign);
  std::lock_guard<std::mutex> lock(arena_mu_);
  auto take = [bytes](Arena& a) -> void* {
    for (auto it = a.free_blocks.begin(); it != a.free_blocks.end(); ++it) {
      if (it->second < bytes) continue;
      const size_t offset = it->first;
      const size_t left = it->second - bytes;
      a.free_blocks.erase(it);
      if (left > 0) a.free_blocks[offset + bytes] = left;
      a.used_blocks[offset] = bytes;
      return a.base + offset;
    }
    return nullptr;
  };
  for (auto& a : arenas_) {
    if (void* p = take(*a)) return p;
  }
  auto arena = NewArena(bytes);
  if (!arena.ok()) return nullptr;
  return take(**arena);
}

absl::Status Client::Free(void* ptr) {
  std::lock_guard<std::mutex> lock(arena_mu_);
  auto* p = static_cast<uint8_t*>(ptr);
  for (auto& a : arenas_) {
    if (p < a->base || p >= a->base + a->bytes) continue;
    const size_t offset = static_cast<size_t>(p - a->base);
    auto it = a->used_blocks.find(offset);
    if (it == a->used_blocks.end()) break;
    size_t start = offset, len = it->second;
    a->used_blocks.erase(it);
    // Coalesce with the neighbours.
    auto next = a->free_blocks.lower_bound(start);
    if (next != a->free_blocks.end() && next->first == start + len) {
      len += next->second;
      next = a->free_blocks.erase(next);
    }
    if (next != a->free_blocks.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == start) {
        start = prev->first;
        len += prev->second;
        a->free_blocks.erase(prev);
      }
    }
    a->free_blocks[start] = len;
    return absl::OkStatus();
  }
  return MakeStatus(RDP_ERR_INVALID, "not a block from rdp_alloc");
}

// --- Control path
// --------------------------------------------------------------

ControlResponse Client::Call(ControlRequest request) {
  ControlResponse response{};
  std::lock_guard<std::mutex> lock(control_mu_);
  request.request_id = next_request_id_++;
  const absl::Time deadline = absl::Now() + options_.control_timeout;
  while (!requests_.TryPush(request)) {
    if (absl::Now() > deadline || !DaemonAlive()) {
      response.status = RDP_ERR_NET_DOWN;
      return response;
    }
    absl::SleepFor(absl::Microseconds(50));
  }
  if (!Ring(control_eventfd_)) {
    response.status = RDP_ERR_NET_DOWN;
    return response;
  }
  bool got = false;
  auto ready = [&] {
    while (!got) {
      shm::PopResult r = responses_.TryPop(&response);
      if (r != shm::PopResult::kOk) return false;
      // A response to an earlier, abandoned request is skipped.
      got = response.request_id == request.request_id;
    }
    return true;
  };
  // Spin briefly (the daemon answers in microseconds), then sleep in slices
  // so that a dead daemon is noticed.
  for (int i = 0; i < 2000 && !ready(); ++i) {
  }
  while (!got) {
    if (absl::Now() > deadline || !DaemonAlive()) {
      response = ControlResponse{};
      response.status = RDP_ERR_NET_DOWN;
      std::snprintf(response.message, sizeof(response.message),
                    "the daemon did not answer");
      SetLastError(response.message);
      return response;
    }
    shm::WaitDoorbell(&header_->control_response_bell, ready, 100'000'000);
  }
  response.message[sizeof(response.message) - 1] = '\0';
  if (response.status < 0) SetLastError(response.message);
  return response;
}

absl::Status Client::CallStatus(ControlRequest request,
                                ControlResponse* response) {
  ControlResponse r = Call(request);
  if (response != nullptr) *response = r;
  return MakeStatus(r.status, r.message);
}

absl::StatusOr<uint32_t> Client::RegisterMemory(void* addr, uint64_t length,
                                                uint32_t flags,
                                                std::optional<uint32_t> pd) {
  ControlRequest req{};
  req.op = shm::kOpRegisterLocal;
  req.address = reinterpret_cast<uint64_t>(addr);
  req.length = length;
  req.flags = flags;
  if (pd) {
    req.connection = shm::kPdScopeSlot;
    req.key = *pd;
  }
  ControlResponse resp;
  absl::Status s = CallStatus(req, &resp);
  if (!s.ok()) return s;
  return resp.key;
}

absl::Status Client::DeregisterMemory(uint32_t lkey) {
  ControlRequest req{};
  req.op = shm::kOpDeregisterLocal;
  req.key = lkey;
  return CallStatus(req);
}

namespace {
bool FillService(ControlRequest* req, absl::string_view service) {
  if (service.empty() || service.size() >= shm::kServiceNameBytes) return false;
  std::memcpy(req->service, service.data(), service.size());
  req->service[service.size()] = '\0';
  return true;
}
}  // namespace

absl::Status Client::Listen(absl::string_view service) {
  ControlRequest req{};
  req.op = shm::kOpListen;
  if (!FillService(&req, service)) {
    return MakeStatus(RDP_ERR_INVALID, "service names are 1..63 bytes");
  }
  return CallStatus(req);
}

int Client::SlotOf(rdp_conn conn) const {
  const uint32_t slot = conn & kSlotMask;
  if (slot >= shm::kMaxConnections) return -1;
  const Connection& c = connections_[slot];
  return c.open && (conn >> kSlotBits) == c.generation ? static_cast<int>(slot)
                                                       : -1;
}

rdp_conn Client::HandleOf(uint32_t slot) const {
  return (connections_[slot].generation << kSlotBits) | slot;
}

rdp_conn Client::AttachConnection(uint32_t slot) {
  Connection& c = connections_[slot];
  const shm::ConnectionSlotRef& ref = header_->connections[slot];
  c.send = *shm::SpscRing<SendEntry>::Attach(region_ + ref.send.offset,
                                             ref.send.bytes);
  c.completion = *shm::SpscRing<CompletionEntry>::Attach(
      region_ + ref.completion.offset, ref.completion.bytes);
  // Completions of the slot's previous connection that arrived after we let
  // it go: the daemon finished with it before it answered for this one.
  CompletionEntry stale;
  while (c.completion.TryPop(&stale) == shm::PopResult::kOk) {
  }
  c.receive = *shm::SpscRing<shm::RecvEntry>::Attach(
      region_ + header_->receive[slot].offset, header_->receive[slot].bytes);
  // Sized by the depths the daemon formatted the rings with (powers of
  // two).
  const uint32_t received = 2 * c.receive.capacity();
  if (c.received_size != received) {
    c.received.reset(new CompletionEntry[received]);
    c.received_size = received;
  }
  c.received_head = c.received_tail = 0;
  c.deferred.resize(c.send.capacity());
  c.deferred_count = 0;
  const uint32_t ledger = kLedgerPerSendEntry * c.send.capacity();
  if (c.ledger_size != ledger) {
    c.ledger.reset(new Pending[ledger]);
    c.ledger_size = ledger;
  }
  c.posted = 0;
  c.head = 0;
  c.silent = 0;
  // Never 0, and 22 bits: handles are never 0 and always differ from the
  // slot's previous ones (until 2^22 connections later).
  c.generation = (c.generation + 1) & (~uint32_t{0} >> kSlotBits);
  if (c.generation == 0) c.generation = 1;
  c.open = true;
  return HandleOf(slot);
}

absl::StatusOr<rdp_conn> Client::Accept(absl::string_view service,
                                        absl::Duration timeout) {
  ControlRequest req{};
  req.op = shm::kOpAccept;
  if (!FillService(&req, service)) {
    return MakeStatus(RDP_ERR_INVALID, "service names are 1..63 bytes");
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    ControlResponse resp = Call(req);
    if (resp.status == RDP_OK) {
      if (resp.connection >= shm::kMaxConnections) {
        return MakeStatus(RDP_ERR_NET_DOWN, "the daemon named no slot");
      }
      return AttachConnection(resp.connection);
    }
    if (resp.status != RDP_ERR_AGAIN)
      return MakeStatus(resp.status, resp.message);
    if (absl::Now() >= deadline) {
      return MakeStatus(RDP_ERR_TIMEOUT, "no connection arrived in time");
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::StatusOr<rdp_conn> Client::Connect(absl::string_view service,
                                         absl::string_view peer) {
  ControlRequest req{};
  req.op = shm::kOpConnect;
  if (!FillService(&req, service)) {
    return MakeStatus(RDP_ERR_INVALID, "service names are 1..63 bytes");
  }
  if (!peer.empty()) {
    in_addr a{};
    const std::string text(peer);
    if (inet_pton(AF_INET, text.c_str(), &a) != 1 || a.s_addr == 0) {
      return MakeStatus(RDP_ERR_INVALID,
                        "the peer must be an IPv4 address like 10.0.0.2");
    }
    req.address = ntohl(a.s_addr);
  }
  ControlResponse resp;
  absl::Status s = CallStatus(req, &resp);
  if (!s.ok()) return s;
  if (resp.connection >= shm::kMaxConnections) {
    return MakeStatus(RDP_ERR_NET_DOWN, "the daemon named no slot");
  }
  return AttachConnection(resp.connection);
}

absl::StatusOr<rdp_conn> Client::CreateSharedReceiveQueue(uint32_t pd,
                                                          uint32_t depth) {
  ControlRequest req{};
  req.op = shm::kOpCreateSrq;
  req.key = pd;
  req.length = shm::SlotDepths::Encode(0, depth);
  ControlResponse resp;
  if (absl::Status s = CallStatus(req, &resp); !s.ok()) return s;
  if (resp.connection >= shm::kMaxConnections) {
    return MakeStatus(RDP_ERR_NET_DOWN, "the daemon named no slot");
  }
  return AttachConnection(resp.connection);
}

absl::Status Client::DestroySharedReceiveQueue(rdp_conn srq) {
  const int slot = SlotOf(srq);
  if (slot < 0) {
    return MakeStatus(RDP_ERR_INVALID, "no such shared receive queue");
  }
  ControlRequest req{};
  req.op = shm::kOpDestroySrq;
  req.connection = static_cast<uint32_t>(slot);
  absl::Status s = CallStatus(req);
  if (s.ok()) EndConnection(static_cast<uint32_t>(slot), RDP_ERR_ABORTED);
  return s;
}

absl::Status Client::Disconnect(rdp_conn conn) {
  const int slot = SlotOf(conn);
  if (slot < 0) return MakeStatus(RDP_ERR_NOT_CONNECTED, "no such connection");
  ControlRequest req{};
  req.op = shm::kOpDisconnect;
  req.connection = static_cast<uint32_t>(slot);
  // The daemon takes the connection back from its engine and publishes its
  // final status before it answers; without an answer (the daemon is gone
  // or does not answer within the control time-out) everything left ends
  // as aborted all the same.
  absl::Status s = CallStatus(req);
  EndConnection(static_cast<uint32_t>(slot), RDP_ERR_ABORTED);
  return s;
}

int Client::RegisterRdmaMemory(rdp_conn conn, void* buffer, uint32_t length,
                               uint32_t flags, void* descriptor,
                               uint32_t* descriptor_length) {
  if (descriptor_length == nullptr) return RDP_ERR_FAULT;
  if (flags != RDP_MEM_READ && flags != RDP_MEM_WRITE &&
      flags != RDP_MEM_READWRITE) {
    return RDP_ERR_INVALID;
  }
  const int slot = SlotOf(conn);
  if (int err = ConnectionError(slot); err != RDP_OK) return err;
  ControlRequest req{};
  req.op = shm::kOpRegisterRdma;
  req.connection = static_cast<uint32_t>(slot);
  req.address = reinterpret_cast<uint64_t>(buffer);
  req.length = length;
  req.flags = flags;
  req.descriptor_length = *descriptor_length;
  ControlResponse resp = Call(req);
  if (resp.status == RDP_OK) {
    if (descriptor == nullptr || *descriptor_length < resp.descriptor_length) {
      return RDP_ERR_FAULT;  // cannot happen: the daemon checked the size
    }
    std::memcpy(descriptor, resp.descriptor, resp.descriptor_length);
    *descriptor_length = resp.descriptor_length;
  } else if (resp.status == RDP_ERR_FAULT && resp.descriptor_length != 0) {
    *descriptor_length = resp.descriptor_length;  // the size needed
  }
  return resp.status;
}

int Client::DeregisterRdmaMemory(rdp_conn conn, const void* descriptor,
                                 uint32_t descriptor_length) {
  // The seed's only error here is WSAEINVAL: an unknown connection holds no
  // registration to release.
  const int slot = SlotOf(conn);
  if (slot < 0) return RDP_ERR_INVALID;
  if (descriptor == nullptr || descriptor_length > shm::kDescriptorBytes ||
      descriptor_length < sizeof(shm::RdmaDescriptor)) {
    return RDP_ERR_INVALID;
  }
  ControlRequest req{};
  req.op = shm::kOpDeregisterRdma;
  req.connection = static_cast<uint32_t>(slot);
  std::memcpy(req.descriptor, descriptor, descriptor_length);
  req.descriptor_length = descriptor_length;
  return Call(req).status;
}

// --- Data path
// -------------------------------------------------------------------

int Client::ConnectionError(int slot) const {
  if (daemon_down_.load(std::memory_order_relaxed)) return RDP_ERR_NET_DOWN;
  if (slot < 0) return RDP_ERR_NOT_CONNECTED;
  switch (header_->connection_state[slot].load(std::memory_order_acquire)) {
    case shm::kConnUp:
      return RDP_OK;
    case shm::kConnReset:
      return RDP_ERR_CONN_RESET;
    case shm::kConnAborted:
    case shm::kConnRequestRefused:
    case shm::kConnAccessRefused:
      return RDP_ERR_CONN_ABORTED;
    case shm::kConnDaemonGone:
      return RDP_ERR_NET_DOWN;
    default:
      return RDP_ERR_NOT_CONNECTED;
  }
}

void Client::KickEngine(uint32_t slot) {
  // Orders our ring push before reading the engine's idle flag; pairs with
  // the fence in Engine::Sleep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->engine_idle[slot].sleeping.load(std::memory_order_seq_cst)) {
    Ring(engine_eventfd_);
  }
}

int Client::PushDeferred(Connection& c) {
  uint32_t i = 0;
  for (; i < c.deferred_count; ++i) {
    if (!c.send.TryPush(c.deferred[i])) break;
  }
  if (i > 0) {
    std::memmove(c.deferred.data(), c.deferred.data() + i,
                 (c.deferred_count - i) * sizeof(SendEntry));
    c.deferred_count -= i;
  }
  return c.deferred_count == 0 ? RDP_OK : RDP_ERR_NO_BUFFERS;
}

namespace {

// Copies an SGL into an entry's (a send or a receive); its byte count in
// *total. Returns an error code or RDP_OK.
template <typename Entry>
int CopySgl(Entry* e, const rdp_sge* sgl, uint32_t count, uint64_t* total) {
  if (count > shm::kMaxSge) return RDP_ERR_INVALID;
  if (count > 0 && sgl == nullptr) return RDP_ERR_FAULT;
  *total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    e->sge[i].address = reinterpret_cast<uint64_t>(sgl[i].addr);
    e->sge[i].length = sgl[i].length;
    e->sge[i].lkey = sgl[i].lkey;
    *total += sgl[i].length;
  }
  e->num_sge = static_cast<uint8_t>(count);
  return RDP_OK;
}

// Fills the SGL part of a send entry; returns an error code or RDP_OK.
int FillSgl(SendEntry* e, const rdp_sge* sgl, uint32_t count, uint64_t* total) {
  if (int err = CopySgl(e, sgl, count, total); err != RDP_OK) return err;
  return *total > (1ull << 31) ? RDP_ERR_INVALID : RDP_OK;
}

void Finish(rdp_overlapped* ov, int32_t status, uint32_t bytes) {
  ov->bytes = bytes;
  __atomic_store_n(&ov->status, status, __ATOMIC_RELEASE);
}

// A request refused at post time leaves its error in the overlapped
// structure too, so that no stale status is ever read there.
int Refuse(rdp_overlapped* ov, int code) {
  Finish(ov, code, 0);
  return code;
}

}  // namespace

int Client::Post(uint32_t slot, SendEntry& entry, rdp_overlapped* ov,
                 bool defer, const Tag* tag) {
  Connection& c = connections_[slot];
  if (c.posted - c.head >= c.ledger_size) {
    RetireSilent(c, header_->retired[slot].load(std::memory_order_acquire));
    if (c.posted - c.head >= c.ledger_size) return RDP_ERR_NO_BUFFERS;
  }
  // The request's index, with the connection's generation so that a
  // completion of the slot's previous connection is never taken for it.
  entry.wr_id = (uint64_t{c.generation} << 32) | c.posted;
  if (defer) {
    if (c.deferred_count == c.deferred.size()) return RDP_ERR_NO_BUFFERS;
    c.deferred[c.deferred_count++] = entry;
  } else if (PushDeferred(c) != RDP_OK || !c.send.TryPush(entry)) {
    // Requests deferred earlier go first, in order; the caller still rings
    // for what went out.
    return RDP_ERR_NO_BUFFERS;
  }
  Pending& p = c.Ledger(c.posted);
  p.flags = entry.flags;
  p.done = false;
  if (ov == nullptr) {
    p.own = rdp_overlapped{};
    p.own.context = tag->context;
    p.own.internal[1] = tag->kind;
    p.own.status = RDP_PENDING;
    ov = &p.own;
  }
  p.ov = ov;
  ++c.posted;
  if ((entry.flags & RDP_FLAG_SILENT_SUCCESS) != 0) ++c.silent;
  return RDP_PENDING;
}

int Client::Write(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
                  const void* target_descriptor, uint32_t descriptor_length,
                  uint32_t target_offset, uint32_t flags, rdp_overlapped* ov) {
  if (ov == nullptr) return RDP_ERR_FAULT;
  auto refuse = [ov](int code) { return Refuse(ov, code); };
  constexpr uint32_t kWriteFlags =
      RDP_FLAG_SILENT_SUCCESS | RDP_FLAG_READ_FENCE | RDP_FLAG_DEFER;
  if ((flags & ~kWriteFlags) != 0) return refuse(RDP_ERR_INVALID);
  const int slot = SlotOf(conn);
  if (int err = ConnectionError(slot); err != RDP_OK) return refuse(err);
  const std::optional<shm::RdmaDescriptor> d =
      ParseDescriptor(target_descriptor, descriptor_length);
  if (!d) return refuse(RDP_ERR_FAULT);
  SendEntry e{};
  uint64_t total = 0;
  if (int err = FillSgl(&e, sgl, sge_count, &total); err != RDP_OK) {
    return refuse(err);
  }
  // The target must lie inside the registered buffer.
  if (target_offset > d->length || total > d->length - target_offset) {
    return refuse(RDP_ERR_FAULT);
  }
  e.op = shm::kSendWrite;
  e.remote_address = d->address + target_offset;
  e.rkey = d->rkey;
  return Submit(static_cast<uint32_t>(slot), e, flags, ov);
}

int Client::Read(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
                 uint64_t remote_address, const void* remote_token,
                 uint32_t token_length, uint32_t flags, rdp_overlapped* ov) {
  if (ov == nullptr) return RDP_ERR_FAULT;
  auto refuse = [ov](int code) { return Refuse(ov, code); };
  if ((flags & ~shm::kKnownSendFlags) != 0) return refuse(RDP_ERR_INVALID);
  const int slot = SlotOf(conn);
  if (int err = ConnectionError(slot); err != RDP_OK) return refuse(err);
  const std::optional<shm::RdmaDescriptor> d =
      ParseDescriptor(remote_token, token_length);
  if (!d) return refuse(RDP_ERR_FAULT);
  SendEntry e{};
  uint64_t total = 0;
  if (int err = FillSgl(&e, sgl, sge_count, &total); err != RDP_OK) {
    return refuse(err);
  }
  if ((flags & RDP_FLAG_READ_LOCAL_INVALIDATE) != 0 && sge_count == 0) {
    return refuse(RDP_ERR_INVALID);
  }
  // Reading beyond the remote memory is refused up front when the token
  // says so; the peer's daemon checks again.
  if (remote_address < d->address || remote_address - d->address > d->length ||
      total > d->length - (remote_address - d->address)) {
    return refuse(RDP_ERR_REMOTE_RESOURCES);
  }
  e.op = shm::kSendRead;
  e.remote_address = remote_address;
  e.rkey = d->rkey;
  return Submit(static_cast<uint32_t>(slot), e, flags, ov);
}

int Client::Submit(uint32_t slot, SendEntry& e, uint32_t flags,
                   rdp_overlapped* ov) {
  e.flags = flags;
  ov->status = RDP_PENDING;
  ov->bytes = 0;
  const bool defer = (flags & RDP_FLAG_DEFER) != 0;
  const int r = Post(slot, e, ov, defer);
  if (!defer) KickEngine(slot);
  if (r != RDP_PENDING) ov->status = r;
  return r;
}

int Client::SubmitTagged(uint32_t slot, SendEntry& e, uint32_t flags,
                         const Tag& tag) {
  e.flags = flags;
  const bool defer = (flags & RDP_FLAG_DEFER) != 0;
  const int r = Post(slot, e, nullptr, defer, &tag);
  if (!defer) KickEngine(slot);
  return r;
}

uint32_t Client::Outstanding(rdp_conn conn) const {
  const int slot = SlotOf(conn);
  if (slot < 0) return 0;
  const Connection& c = connections_[slot];
  return c.posted - c.head;
}

int Client::Abandon(rdp_conn conn, int32_t status, rdp_overlapped** done,
                    int max) {
  const int slot = SlotOf(conn);
  if (slot < 0 || done == nullptr || max <= 0) return 0;
  return EndRemaining(connections_[slot], status, done, max);
}

int Client::Flush(rdp_conn conn) {
  const int slot = SlotOf(conn);
  if (int err = ConnectionError(slot); err != RDP_OK) return err;
  const int r = PushDeferred(connections_[slot]);
  KickEngine(static_cast<uint32_t>(slot));
  return r;
}

// --- Completions
// ------------------------------------------------------------------

void Client::RetireSilent(Connection& c, uint32_t retired) {
  // A retired count outside what we posted is not the daemon's: ignored.
  if (retired - c.head > c.posted - c.head) return;
  for (uint32_t i = c.head; i != retired; ++i) {
    Pending& p = c.Ledger(i);
    // A silent success is never reported: its overlapped structure stays
    // as it was posted, and the library forgets it.
    if (!p.done && (p.flags & RDP_FLAG_SILENT_SUCCESS) != 0) {
      p.done = true;
      --c.silent;
    }
  }
  while (c.head != c.posted && c.Ledger(c.head).done) {
    ++c.head;
  }
}

rdp_overlapped* Client::Apply(Connection& c, const CompletionEntry& e) {
  const uint32_t index = static_cast<uint32_t>(e.wr_id);
  // Only our requests, of this connection, not ended yet.
  if ((e.wr_id >> 32) != c.generation || index - c.head >= c.posted - c.head) {
    return nullptr;
  }
  Pending& p = c.Ledger(index);
  if (p.done) return nullptr;
  p.done = true;
  if ((p.flags & RDP_FLAG_SILENT_SUCCESS) != 0) --c.silent;
  // The silent requests before it succeeded: forgotten before this one is
  // seen done, so a caller may free them once it sees it.
  RetireSilent(c, e.retired);
  p.ov->internal[0] = e.detail;
  Finish(p.ov, e.status, e.byte_len);
  while (c.head != c.posted && c.Ledger(c.head).done) {
    ++c.head;
  }
  return p.ov;
}

int Client::EndRemaining(Connection& c, int32_t status, rdp_overlapped** done,
                         int max) {
  int n = 0;
  for (uint32_t i = c.head; i != c.posted; ++i) {
    if (done != nullptr && n >= max) break;
    Pending& p = c.Ledger(i);
    if (p.done) continue;
    p.done = true;
    if ((p.flags & RDP_FLAG_SILENT_SUCCESS) != 0) --c.silent;
    Finish(p.ov, status, 0);
    if (done != nullptr) done[n] = p.ov;
    ++n;
  }
  while (c.head != c.posted && c.Ledger(c.head).done) {
    ++c.head;
  }
  // Deferred requests are in the ledger too: once ended, never sent.
  if (c.head == c.posted) c.deferred_count = 0;
  return n;
}

int32_t Client::FinalStatus(uint32_t slot) {
  // Pairs with the release store in shm::PublishFinal: the retired count and
  // every completion pushed before are visible.
  const int32_t status =
      header_->final_status[slot].load(std::memory_order_acquire);
  if (status != 0) return status < 0 ? status : RDP_ERR_CONN_ABORTED;
  return daemon_down_.load(std::memory_order_relaxed) ? RDP_ERR_CONN_ABORTED
                                                      : 0;
}

int Client::Reap(uint32_t slot, rdp_overlapped** done, int max) {
  Connection& c = connections_[slot];
  // Read before draining: whatever the daemon pushed before it let go of
  // the connection is then in the ring.
  const int32_t final_status = FinalStatus(slot);
  int n = 0;
  CompletionEntry e;
  while (done == nullptr || n < max) {
    // Receive completions are set aside for TakeReceived, while there is
    // room (else they wait in the ring).
    if (c.received_tail - c.received_head >= c.received_size) break;
    if (c.completion.TryPop(&e) != shm::PopResult::kOk) break;
    if (e.op == shm::kRecv || e.op == shm::kRecvWriteImm) {
      c.Received(c.received_tail++) = e;
      continue;
    }
    rdp_overlapped* ov = Apply(c, e);
    if (ov == nullptr) continue;
    if (done != nullptr) done[n] = ov;
    ++n;
  }
  if (done != nullptr && n >= max) return n;
  // The retired count is read only when it can retire something: the
  // engine writes it every turn, and reading it would pull its cache line.
  if (c.silent > 0 || final_status != 0) {
    RetireSilent(c, header_->retired[slot].load(std::memory_order_acquire));
  }
  if (final_status != 0) {
    n += EndRemaining(c, final_status, done == nullptr ? nullptr : done + n,
                      max - n);
  }
  return n;
}

void Client::EndConnection(uint32_t slot, int32_t fallback) {
  Connection& c = connections_[slot];
  Reap(slot, nullptr, 0);
  if (c.head != c.posted) {
    const int32_t status = FinalStatus(slot);
    EndRemaining(c, status != 0 ? status : fallback, nullptr, 0);
  }
  c.deferred_count = 0;
  c.open = false;
}

int Client::Poll(rdp_conn conn, rdp_overlapped** done, int max) {
  const int slot = SlotOf(conn);
  if (slot < 0) return RDP_ERR_NOT_CONNECTED;
  if (done == nullptr || max <= 0) return RDP_ERR_INVALID;
  const int n = Reap(static_cast<uint32_t>(slot), done, max);
  // Nothing came while requests are outstanding: a daemon that died ends
  // them (it is asked at most every 100 ms).
  Connection& c = connections_[slot];
  if (n == 0 && c.head != c.posted && !DaemonAliveRateLimited()) {
    return Reap(static_cast<uint32_t>(slot), done, max);
  }
  return n;
}

int Client::GetOverlappedResult(rdp_conn conn, rdp_overlapped* ov, bool wait,
                                uint32_t* bytes) {
  if (ov == nullptr) return RDP_ERR_FAULT;
  const int slot = SlotOf(conn);
  if (slot < 0) return RDP_ERR_NOT_CONNECTED;
  auto finished = [&] {
    if (__atomic_load_n(&ov->status, __ATOMIC_ACQUIRE) != RDP_PENDING) {
      return true;
    }
    Reap(static_cast<uint32_t>(slot), nullptr, 0);
    return __atomic_load_n(&ov->status, __ATOMIC_ACQUIRE) != RDP_PENDING;
  };
  if (!finished() && wait) {
    // Most completions arrive within microseconds: look for a moment before
    // sleeping, since a wake-up costs more than that.
    // Yield now and then: an engine sharing this CPU is what would finish
    // the request, and it cannot while this thread spins.
    const absl::Time spin_until = absl::Now() + absl::Microseconds(20);
    for (uint32_t polls = 1; absl::Now() < spin_until && !finished();
         ++polls) {
      if (polls % 64 == 0) sched_yield();
    }
  }
  if (!finished() && wait) {
    while (!shm::WaitDoorbell(&header_->completion_bell[slot], finished,
                              200'000'000)) {
      // A daemon that died ends every request (Reap, then finished()).
      if (!DaemonAlive() && finished()) break;
    }
  }
  const int status = __atomic_load_n(&ov->status, __ATOMIC_ACQUIRE);
  if (status != RDP_PENDING && bytes != nullptr) *bytes = ov->bytes;
  return status;
}

// --- For the verbs front end
// -------------------------------------------------------

int Client::PostVerbs(rdp_conn conn, uint8_t op, const rdp_sge* sgl,
                      uint32_t sge_count, uint64_t remote_address,
                      uint32_t rkey, uint32_t flags, uint32_t imm,
                      const Tag& tag) {
  if ((op != shm::kSendWrite && op != shm::kSendRead &&
       op != shm::kSendSend) ||
      (flags & ~shm::kVerbsSendFlags) != 0) {
    return RDP_ERR_INVALID;
  }
  SendEntry e{};
  e.op = op;
  e.remote_address = remote_address;
  e.rkey = rkey;
  e.imm = imm;
  return PostEntry(conn, &e, sgl, sge_count, flags, tag);
}

int Client::PostEntry(rdp_conn conn, SendEntry* e, const rdp_sge* sgl,
                      uint32_t sge_count, uint32_t flags, const Tag& tag) {
  const int slot = SlotOf(conn);
  if (int err = ConnectionError(slot); err != RDP_OK) return err;
  uint64_t total = 0;
  if (int err = FillSgl(e, sgl, sge_count, &total); err != RDP_OK) {
    return err;
  }
  return SubmitTagged(static_cast<uint32_t>(slot), *e, flags, tag);
}

int Client::PostAtomic(rdp_conn conn, uint8_t op, const rdp_sge& sge,
                       uint64_t remote_address, uint32_t rkey, uint64_t compare,
                       uint64_t swap_add, uint32_t flags, const Tag& tag) {
  constexpr uint32_t kAtomicFlags = shm::kVerbsSendFlags &
                                    ~shm::kFlagImmediate &
                                    ~shm::kFlagReadLocalInvalidate &
                                    ~shm::kFlagInvalidate;
  if ((op != shm::kSendCompareSwap && op != shm::kSendFetchAdd) ||
      (flags & ~kAtomicFlags) != 0 || sge.length != sizeof(uint64_t)) {
    return RDP_ERR_INVALID;
  }
  SendEntry e{};
  e.op = op;
  e.remote_address = remote_address;
  e.rkey = rkey;
  e.compare = op == shm::kSendCompareSwap ? compare : 0;
  e.swap_add = swap_add;
  return PostEntry(conn, &e, &sge, 1, flags, tag);
}

int Client::PostDatagram(rdp_conn conn, const rdp_sge* sgl,
                         uint32_t sge_count, uint32_t ah, uint32_t remote_qpn,
                         uint32_t remote_qkey, uint32_t flags, uint32_t imm,
                         const Tag& tag) {
  if ((flags & ~shm::kVerbsSendFlags) != 0) return RDP_ERR_INVALID;
  SendEntry e{};
  e.op = shm::kSendSend;
  e.imm = imm;
  e.ah = ah;
  e.remote_qpn = remote_qpn;
  e.remote_qkey = remote_qkey;
  return PostEntry(conn, &e, sgl, sge_count, flags, tag);
}

absl::StatusOr<uint32_t> Client::CallForKey(uint32_t op, uint32_t key) {
  ControlRequest req{};
  req.op = op;
  req.key = key;
  ControlResponse resp;
  if (absl::Status s = CallStatus(req, &resp); !s.ok()) return s;
  return resp.key;
}

absl::StatusOr<uint32_t> Client::CreateAddressHandle(uint32_t ip) {
  return CallForKey(shm::kOpCreateAh, ip);
}

absl::Status Client::DestroyAddressHandle(uint32_t ah) {
  return CallForKey(shm::kOpDestroyAh, ah).status();
}

int Client::PostRecv(rdp_conn conn, uint64_t wr_id, const rdp_sge* sgl,
                     uint32_t sge_count) {
  const int slot = SlotOf(conn);
  if (int err = ConnectionError(slot); err != RDP_OK) return err;
  shm::RecvEntry e{};
  e.wr_id = wr_id;
  uint64_t total = 0;
  if (int err = CopySgl(&e, sgl, sge_count, &total); err != RDP_OK) return err;
  if (!connections_[slot].receive.TryPush(e)) return RDP_ERR_NO_BUFFERS;
  KickEngine(static_cast<uint32_t>(slot));
  return RDP_OK;
}

bool Client::Established(rdp_conn conn) const {
  const int slot = SlotOf(conn);
  // Pairs with the engine's release store.
  return slot >= 0 &&
         header_->established[slot].load(std::memory_order_acquire) != 0;
}

ControlResponse Client::CmCall(uint32_t op, const shm::CmParams& params) {
  ControlRequest req{};
  req.op = op;
  req.cm = params;
  return Call(req);
}

bool Client::TakeCmEvent(shm::CmEvent* event, int64_t timeout_ns) {
  std::lock_guard<std::mutex> lock(cm_mu_);
  auto ready = [&] {
    return cm_events_.TryPop(event) == shm::PopResult::kOk;
  };
  if (ready()) return true;
  if (timeout_ns == 0) return false;
  // In slices, so that a dead daemon ends the wait.
  const absl::Time end = timeout_ns < 0
                             ? absl::InfiniteFuture()
                             : absl::Now() + absl::Nanoseconds(timeout_ns);
  while (absl::Now() < end) {
    if (!DaemonAliveRateLimited()) return false;
    const int64_t slice = std::min<int64_t>(
        100'000'000, absl::ToInt64Nanoseconds(end - absl::Now()));
    if (shm::WaitDoorbell(&header_->cm_event_bell, ready,
                          std::max<int64_t>(slice, 0))) {
      return true;
    }
  }
  return ready();
}

bool Client::ConnectionEnded(rdp_conn conn) {
  const int slot = SlotOf(conn);
  return slot < 0 || FinalStatus(static_cast<uint32_t>(slot)) != 0;
}

int Client::TakeReceived(rdp_conn conn, CompletionEntry* out, int max) {
  const int slot = SlotOf(conn);
  if (slot < 0) return 0;
  Connection& c = connections_[slot];
  int n = 0;
  while (n < max && c.received_head != c.received_tail) {
    out[n++] = c.Received(c.received_head++);
  }
  return n;
}

bool Client::WaitForCompletions(rdp_conn conn, int64_t timeout_ns) {
  const int slot = SlotOf(conn);
  if (slot < 0) return true;
  Connection& c = connections_[slot];
  auto ready = [&] {
    return c.completion.Size() > 0 ||
           FinalStatus(static_cast<uint32_t>(slot)) != 0;
  };
  return shm::WaitDoorbell(&header_->completion_bell[slot], ready, timeout_ns);
}

absl::StatusOr<uint32_t> Client::AllocMw(uint32_t pd, uint32_t type) {
  ControlRequest req{};
  req.op = shm::kOpAllocMw;
  req.key = pd;
  req.flags = type;
  ControlResponse resp;
  if (absl::Status s = CallStatus(req, &resp); !s.ok()) return s;
  return resp.key;
}

absl::Status Client::DeallocMw(uint32_t rkey) {
  return CallForKey(shm::kOpDeallocMw, rkey).status();
}

int Client::PostMemoryWindow(rdp_conn conn, uint8_t op, const rdp_sge* sge,
                             uint32_t rkey, uint32_t bound_rkey,
                             uint64_t bind_bits, uint32_t flags,
                             const Tag& tag) {
  constexpr uint32_t kWindowFlags =
      RDP_FLAG_SILENT_SUCCESS | RDP_FLAG_DEFER | RDP_FLAG_READ_FENCE;
  if ((op != shm::kSendBindMw && op != shm::kSendLocalInvalidate) ||
      (flags & ~kWindowFlags) != 0 || (bind_bits & ~shm::kBindKnownBits) != 0 ||
      (op == shm::kSendLocalInvalidate && sge != nullptr)) {
    return RDP_ERR_INVALID;
  }
  SendEntry e{};
  e.op = op;
  e.rkey = rkey;
  e.imm = bound_rkey;
  e.swap_add = bind_bits;
  return PostEntry(conn, &e, sge, sge != nullptr ? 1 : 0, flags, tag);
}

absl::StatusOr<uint32_t> Client::AllocPd() {
  return CallForKey(shm::kOpAllocPd, 0);
}

absl::Status Client::DeallocPd(uint32_t pd) {
  return CallForKey(shm::kOpDeallocPd, pd).status();
}

absl::StatusOr<uint32_t> Client::RegisterPdMemory(uint32_t pd, void* addr,
                                                  uint64_t length,
                                                  uint32_t flags) {
  ControlRequest req{};
  req.op = shm::kOpRegisterRdma;
  req.connection = shm::kPdScopeSlot;
  req.key = pd;
  req.address = reinterpret_cast<uint64_t>(addr);
  req.length = length;
  req.flags = flags;
  req.descriptor_length = sizeof(shm::RdmaDescriptor);
  ControlResponse resp;
  if (absl::Status s = CallStatus(req, &resp); !s.ok()) return s;
  return resp.key;
}

absl::Status Client::DeregisterPdMemory(uint32_t pd, uint32_t rkey,
                                        void* addr, uint64_t length,
                                        uint32_t flags) {
  ControlRequest req{};
  req.op = shm::kOpDeregisterRdma;
  req.connection = shm::kPdScopeSlot;
  req.key = pd;
  shm::RdmaDescriptor d{};
  d.magic = shm::kDescriptorMagic;
  d.rkey = rkey;
  d.address = reinterpret_cast<uint64_t>(addr);
  d.length = length;
  d.access = flags;
  std::memcpy(req.descriptor, &d, sizeof(d));
  req.descriptor_length = sizeof(d);
  return CallStatus(req);
}

absl::StatusOr<Client::QueuePair> Client::CreateQueuePair(
    uint32_t pd, shm::QpService service, rdp_conn srq, uint32_t send_depth,
    uint32_t recv_depth) {
  ControlRequest req{};
  req.op = shm::kOpCreateQp;
  req.key = pd;
  req.flags = service;
  req.length = shm::SlotDepths::Encode(send_depth, recv_depth);
  req.connection = shm::kNoSrq;
  if (srq != 0) {
    const int srq_slot = SlotOf(srq);
    if (srq_slot < 0) {
      return MakeStatus(RDP_ERR_INVALID, "no such shared receive queue");
    }
    req.connection = static_cast<uint32_t>(srq_slot);
  }
  ControlResponse resp;
  if (absl::Status s = CallStatus(req, &resp); !s.ok()) return s;
  if (resp.connection >= shm::kMaxConnections) {
    return MakeStatus(RDP_ERR_NET_DOWN, "the daemon named no slot");
  }
  QueuePair qp;
  qp.conn = AttachConnection(resp.connection);
  qp.qpn = resp.key;
  return qp;
}

absl::Status Client::ModifyQueuePair(rdp_conn conn, shm::QpTransition to,
                                     const shm::QpPeer& peer) {
  const int slot = SlotOf(conn);
  if (slot < 0) return MakeStatus(RDP_ERR_NOT_CONNECTED, "no such queue pair");
  ControlRequest req{};
  req.op = shm::kOpModifyQp;
  req.connection = static_cast<uint32_t>(slot);
  req.flags = to;
  std::memcpy(req.descriptor, &peer, sizeof(peer));
  req.descriptor_length = sizeof(peer);
  return CallStatus(req);
}

absl::StatusOr<rdp_conn> Client::ResetQueuePair(rdp_conn conn) {
  const int slot = SlotOf(conn);
  if (slot < 0) return MakeStatus(RDP_ERR_NOT_CONNECTED, "no such queue pair");
  if (absl::Status s = ModifyQueuePair(conn, shm::kQpToReset, shm::QpPeer{});
      !s.ok()) {
    return s;
  }
  // The daemon made the slot's rings new: attach them again.
  return AttachConnection(static_cast<uint32_t>(slot));
}

absl::StatusOr<shm::DeviceInfo> Client::QueryDevice() {
  ControlRequest req{};
  req.op = shm::kOpQueryDevice;
  ControlResponse resp;
  if (absl::Status s = CallStatus(req, &resp); !s.ok()) return s;
  shm::DeviceInfo d;
  std::memcpy(&d, resp.descriptor, sizeof(d));
  return d;
}

}  // namespace rdmaplane
