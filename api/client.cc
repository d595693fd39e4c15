#include "api/client.h"

#include <arpa/inet.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/shm/doorbell.h"
#include "api/shm/setup.h"
#include "api/status.h"

namespace rdmaplane {
namespace {

using shm::CompletionEntry;
using shm::ControlRequest;
using shm::ControlResponse;
using shm::SendEntry;

constexpr size_t kHugePage = 2ull << 20;
constexpr size_t kAllocAlign = 64;

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

// Wakes the daemon through one of this session's doorbell sockets. A full
// queue (EAGAIN) already holds a wake-up.
bool Ring(int fd) {
  const uint8_t byte = 1;
  const ssize_t n = send(fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == 1 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

// The daemon maps what we share only if its size can no longer change.
bool Seal(int fd) {
  return fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0;
}

const shm::RdmaDescriptor* ParseDescriptor(const void* p, uint32_t len) {
  if (p == nullptr || len < sizeof(shm::RdmaDescriptor)) return nullptr;
  auto* d = static_cast<const shm::RdmaDescriptor*>(p);
  return d->magic == shm::kDescriptorMagic ? d : nullptr;
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
  if (options_.socket_path.empty()) options_.socket_path = shm::DefaultSocketPath();
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
      !Seal(session_fd_)) {
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
  header_->header_bytes = sizeof(shm::SessionHeader);
  header_->region_bytes = region_bytes_;
  header_->max_connections = shm::kMaxConnections;
  uint64_t offset = sizeof(shm::SessionHeader);
  auto place = [&](shm::RingRef* ref, uint32_t capacity, uint32_t bytes) {
    ref->offset = offset;
    ref->capacity = capacity;
    ref->bytes = bytes;
    offset += RoundUp(bytes, shm::kCacheLine);
  };
  place(&header_->control_requests, shm::kControlRingEntries,
        shm::SpscRing<ControlRequest>::BytesFor(shm::kControlRingEntries));
  place(&header_->control_responses, shm::kControlRingEntries,
        shm::SpscRing<ControlResponse>::BytesFor(shm::kControlRingEntries));
  for (auto& slot : header_->connections) {
    place(&slot.send, shm::kSendRingEntries,
          shm::SpscRing<SendEntry>::BytesFor(shm::kSendRingEntries));
    place(&slot.completion, shm::kCompletionRingEntries,
          shm::SpscRing<CompletionEntry>::BytesFor(shm::kCompletionRingEntries));
  }
  {
    absl::MutexLock lock(&control_mu_);
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
  for (auto& slot : header_->connections) {
    auto s = shm::SpscRing<SendEntry>::Create(region_ + slot.send.offset,
                                              slot.send.bytes,
                                              shm::kSendRingEntries);
    auto c = shm::SpscRing<CompletionEntry>::Create(
        region_ + slot.completion.offset, slot.completion.bytes,
        shm::kCompletionRingEntries);
    if (!s.ok()) return s.status();
    if (!c.ok()) return c.status();
  }

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
    return MakeStatus(RDP_ERR_PERMISSION,
                      absl::StrCat("the socket ", options_.socket_path,
                                   " belongs to uid ", peer.uid,
                                   ", not to a trusted rdmaplaned"));
  }
  // A daemon that accepts but never answers must not hang us.
  const int64_t timeout_us = absl::ToInt64Microseconds(options_.control_timeout);
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
    return MakeStatus(RDP_ERR_NET_DOWN, "the daemon did not accept the session");
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
  return absl::OkStatus();
}

Client::~Client() {
  if (sock_ >= 0) close(sock_);  // the daemon reclaims everything we owned
  for (int fd : {control_eventfd_, engine_eventfd_, session_fd_}) {
    if (fd >= 0) close(fd);
  }
  absl::MutexLock lock(&arena_mu_);
  for (auto& a : arenas_) {
    munmap(a->base, a->bytes);
    close(a->fd);
  }
  if (region_ != nullptr) munmap(region_, region_bytes_);
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
  size_t bytes = RoundUp(std::max(min_bytes, options_.arena_bytes), kHugePage);
  void* mem = MAP_FAILED;
  int fd = -1;
  const bool try_huge = options_.hugepages != ClientOptions::Hugepages::kOff;
  if (try_huge) {
    // memfd_create(MFD_HUGETLB) succeeds without reserved hugepages; the
    // shortage shows at mmap, which MAP_POPULATE makes fail up front.
    fd = memfd_create("rdmaplane-arena",
                      MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
    if (fd >= 0 && ftruncate(fd, bytes) == 0 && Seal(fd)) {
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
    if (fd < 0 || ftruncate(fd, bytes) != 0 || !Seal(fd)) {
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

  shm::SetupMessage msg = shm::MakeSetup(shm::kSetupArena);
  msg.address = reinterpret_cast<uint64_t>(mem);
  msg.length = bytes;
  shm::SetupMessage reply;
  int fd0 = -1, fd1 = -1;
  absl::MutexLock lock(&control_mu_);  // the socket carries one exchange at a time
  const bool sent = shm::SendSetup(sock_, msg, fd) &&
                    shm::RecvSetup(sock_, &reply, &fd0, &fd1) &&
                    reply.type == shm::kSetupArenaReply;
  if (fd0 >= 0) close(fd0);
  if (fd1 >= 0) close(fd1);
  if (!sent || reply.status != RDP_OK) {
    munmap(mem, bytes);
    close(fd);
    return MakeStatus(sent ? reply.status : RDP_ERR_NET_DOWN,
                      sent ? reply.text : "the daemon is unreachable");
  }
  arena->id = reply.id;
  Arena* raw = arena.get();
  arenas_.push_back(std::move(arena));
  return raw;
}

void* Client::Alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  bytes = RoundUp(bytes, kAllocAlign);
  absl::MutexLock lock(&arena_mu_);
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
  absl::MutexLock lock(&arena_mu_);
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

// --- Control path --------------------------------------------------------------

ControlResponse Client::Call(ControlRequest request) {
  ControlResponse response{};
  absl::MutexLock lock(&control_mu_);
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
      return response;
    }
    shm::WaitDoorbell(&header_->control_response_bell, ready, 100'000'000);
  }
  response.message[sizeof(response.message) - 1] = '\0';
  return response;
}

absl::Status Client::CallStatus(ControlRequest request,
                                ControlResponse* response) {
  ControlResponse r = Call(request);
  if (response != nullptr) *response = r;
  return MakeStatus(r.status, r.message);
}

absl::StatusOr<uint32_t> Client::RegisterMemory(void* addr, uint64_t length,
                                                uint32_t flags) {
  ControlRequest req{};
  req.op = shm::kOpRegisterLocal;
  req.address = reinterpret_cast<uint64_t>(addr);
  req.length = length;
  req.flags = flags;
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

void Client::AttachConnection(rdp_conn conn) {
  Connection& c = connections_[conn];
  const shm::ConnectionSlotRef& slot = header_->connections[conn];
  c.send = *shm::SpscRing<SendEntry>::Attach(region_ + slot.send.offset,
                                             slot.send.bytes);
  c.completion = *shm::SpscRing<CompletionEntry>::Attach(
      region_ + slot.completion.offset, slot.completion.bytes);
  c.deferred.resize(shm::kSendRingEntries);
  c.deferred_count = 0;
  c.open = true;
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
      AttachConnection(resp.connection);
      return resp.connection;
    }
    if (resp.status != RDP_ERR_AGAIN) return MakeStatus(resp.status, resp.message);
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
  AttachConnection(resp.connection);
  return resp.connection;
}

absl::Status Client::Disconnect(rdp_conn conn) {
  if (conn >= shm::kMaxConnections || !connections_[conn].open) {
    return MakeStatus(RDP_ERR_NOT_CONNECTED, "no such connection");
  }
  ControlRequest req{};
  req.op = shm::kOpDisconnect;
  req.connection = conn;
  absl::Status s = CallStatus(req);
  // Outstanding work was completed as aborted before the daemon answered;
  // requests still deferred here never reached it and are aborted too.
  Connection& c = connections_[conn];
  Reap(conn, nullptr, 0);
  for (uint32_t i = 0; i < c.deferred_count; ++i) {
    auto* ov = reinterpret_cast<rdp_overlapped*>(c.deferred[i].wr_id);
    __atomic_store_n(&ov->status, RDP_ERR_ABORTED, __ATOMIC_RELEASE);
  }
  c.deferred_count = 0;
  c.open = false;
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
  if (int err = ConnectionError(conn); err != RDP_OK) return err;
  ControlRequest req{};
  req.op = shm::kOpRegisterRdma;
  req.connection = conn;
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
  if (conn >= shm::kMaxConnections) return RDP_ERR_INVALID;
  if (descriptor == nullptr ||
      descriptor_length > shm::kDescriptorBytes ||
      descriptor_length < sizeof(shm::RdmaDescriptor)) {
    return RDP_ERR_INVALID;
  }
  ControlRequest req{};
  req.op = shm::kOpDeregisterRdma;
  req.connection = conn;
  std::memcpy(req.descriptor, descriptor, descriptor_length);
  req.descriptor_length = descriptor_length;
  return Call(req).status;
}

// --- Data path -------------------------------------------------------------------

int Client::ConnectionError(rdp_conn conn) const {
  if (daemon_down_.load(std::memory_order_relaxed)) return RDP_ERR_NET_DOWN;
  if (conn >= shm::kMaxConnections || !connections_[conn].open) {
    return RDP_ERR_NOT_CONNECTED;
  }
  switch (header_->connection_state[conn].load(std::memory_order_acquire)) {
    case shm::kConnUp: return RDP_OK;
    case shm::kConnReset: return RDP_ERR_CONN_RESET;
    case shm::kConnAborted: return RDP_ERR_CONN_ABORTED;
    case shm::kConnDaemonGone: return RDP_ERR_NET_DOWN;
    default: return RDP_ERR_NOT_CONNECTED;
  }
}

void Client::KickEngine(rdp_conn conn) {
  // Orders our ring push before reading the engine's idle flag; pairs with
  // the fence in Engine::Sleep.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->engine_idle[conn].sleeping.load(std::memory_order_seq_cst)) {
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

int Client::Post(Connection& c, const SendEntry& entry, bool defer) {
  if (defer) {
    if (c.deferred_count == c.deferred.size()) return RDP_ERR_NO_BUFFERS;
    c.deferred[c.deferred_count++] = entry;
    return RDP_PENDING;
  }
  // Requests deferred earlier go first, in order.
  if (PushDeferred(c) != RDP_OK || !c.send.TryPush(entry)) {
    return RDP_ERR_NO_BUFFERS;  // the caller still rings for what went out
  }
  return RDP_PENDING;
}

namespace {

// Fills the SGL part of a send entry; returns an error code or RDP_OK.
int FillSgl(SendEntry* e, const rdp_sge* sgl, uint32_t count, uint64_t* total) {
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
  return *total > (1ull << 31) ? RDP_ERR_INVALID : RDP_OK;
}

}  // namespace

int Client::Write(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
                  const void* target_descriptor, uint32_t descriptor_length,
                  uint32_t target_offset, uint32_t flags, rdp_overlapped* ov) {
  if (ov == nullptr) return RDP_ERR_FAULT;
  constexpr uint32_t kWriteFlags =
      RDP_FLAG_SILENT_SUCCESS | RDP_FLAG_READ_FENCE | RDP_FLAG_DEFER;
  if ((flags & ~kWriteFlags) != 0) return RDP_ERR_INVALID;
  if (int err = ConnectionError(conn); err != RDP_OK) return err;
  const shm::RdmaDescriptor* d =
      ParseDescriptor(target_descriptor, descriptor_length);
  if (d == nullptr) return RDP_ERR_FAULT;
  SendEntry e{};
  uint64_t total = 0;
  if (int err = FillSgl(&e, sgl, sge_count, &total); err != RDP_OK) return err;
  // The target must lie inside the registered buffer.
  if (target_offset > d->length || total > d->length - target_offset) {
    return RDP_ERR_FAULT;
  }
  e.op = shm::kSendWrite;
  e.remote_address = d->address + target_offset;
  e.rkey = d->rkey;
  return Submit(conn, e, flags, ov);
}

int Client::Read(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
                 uint64_t remote_address, const void* remote_token,
                 uint32_t token_length, uint32_t flags, rdp_overlapped* ov) {
  if (ov == nullptr) return RDP_ERR_FAULT;
  if ((flags & ~shm::kKnownSendFlags) != 0) return RDP_ERR_INVALID;
  if (int err = ConnectionError(conn); err != RDP_OK) return err;
  const shm::RdmaDescriptor* d = ParseDescriptor(remote_token, token_length);
  if (d == nullptr) return RDP_ERR_FAULT;
  SendEntry e{};
  uint64_t total = 0;
  if (int err = FillSgl(&e, sgl, sge_count, &total); err != RDP_OK) return err;
  if ((flags & RDP_FLAG_READ_LOCAL_INVALIDATE) != 0 && sge_count == 0) {
    return RDP_ERR_INVALID;
  }
  // Reading beyond the remote memory is refused up front when the token
  // says so; the peer's daemon checks again.
  if (remote_address < d->address ||
      remote_address - d->address > d->length ||
      total > d->length - (remote_address - d->address)) {
    return RDP_ERR_REMOTE_RESOURCES;
  }
  e.op = shm::kSendRead;
  e.remote_address = remote_address;
  e.rkey = d->rkey;
  return Submit(conn, e, flags, ov);
}

int Client::Submit(rdp_conn conn, SendEntry& e, uint32_t flags,
                   rdp_overlapped* ov) {
  e.wr_id = reinterpret_cast<uint64_t>(ov);
  e.flags = flags;
  ov->status = RDP_PENDING;
  ov->bytes = 0;
  const bool defer = (flags & RDP_FLAG_DEFER) != 0;
  const int r = Post(connections_[conn], e, defer);
  if (!defer) KickEngine(conn);
  if (r != RDP_PENDING) ov->status = r;
  return r;
}

int Client::Flush(rdp_conn conn) {
  if (int err = ConnectionError(conn); err != RDP_OK) return err;
  const int r = PushDeferred(connections_[conn]);
  KickEngine(conn);
  return r;
}

int Client::Reap(rdp_conn conn, rdp_overlapped** done, int max) {
  Connection& c = connections_[conn];
  int n = 0;
  CompletionEntry e;
  while (c.completion.valid() && c.completion.TryPop(&e) == shm::PopResult::kOk) {
    auto* ov = reinterpret_cast<rdp_overlapped*>(e.wr_id);
    ov->bytes = e.byte_len;
    __atomic_store_n(&ov->status, e.status, __ATOMIC_RELEASE);
    if (done != nullptr && n < max) done[n] = ov;
    ++n;
    if (done != nullptr && n == max) break;
  }
  return n;
}

int Client::Poll(rdp_conn conn, rdp_overlapped** done, int max) {
  if (conn >= shm::kMaxConnections || !connections_[conn].open) {
    return RDP_ERR_NOT_CONNECTED;
  }
  if (done == nullptr || max <= 0) return RDP_ERR_INVALID;
  return Reap(conn, done, max);
}

int Client::GetOverlappedResult(rdp_conn conn, rdp_overlapped* ov, bool wait,
                                uint32_t* bytes) {
  if (ov == nullptr) return RDP_ERR_FAULT;
  if (conn >= shm::kMaxConnections || !connections_[conn].open) {
    return RDP_ERR_NOT_CONNECTED;
  }
  auto finished = [&] {
    if (__atomic_load_n(&ov->status, __ATOMIC_ACQUIRE) != RDP_PENDING) {
      return true;
    }
    Reap(conn, nullptr, 0);
    return __atomic_load_n(&ov->status, __ATOMIC_ACQUIRE) != RDP_PENDING;
  };
  if (!finished() && wait) {
    // Most completions arrive within microseconds: look for a moment before
    // sleeping, since a wake-up costs more than that.
    const absl::Time spin_until = absl::Now() + absl::Microseconds(20);
    while (absl::Now() < spin_until && !finished()) {
    }
  }
  if (!finished() && wait) {
    while (!shm::WaitDoorbell(&header_->completion_bell[conn], finished,
                              200'000'000)) {
      if (!DaemonAlive()) {
        ov->status = RDP_ERR_CONN_ABORTED;
        break;
      }
    }
  }
  const int status = __atomic_load_n(&ov->status, __ATOMIC_ACQUIRE);
  if (status != RDP_PENDING && bytes != nullptr) *bytes = ov->bytes;
  return status;
}

}  // namespace rdmaplane
