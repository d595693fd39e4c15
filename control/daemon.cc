#include "control/daemon.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "api/shm/doorbell.h"
#include "api/shm/setup.h"
#include "control/admin.h"
#include "control/telemetry.h"
#include "dataplane/port/eth_port.h"

namespace rdmaplane::control {
namespace {

using shm::ControlRequest;
using shm::ControlResponse;

ControlResponse Reply(int32_t status, const char* message = "") {
  ControlResponse r{};
  r.status = status;
  std::snprintf(r.message, sizeof(r.message), "%s", message);
  return r;
}

// The answer to a deregistration (the seeds give WSAEINVAL for both
// failures).
ControlResponse ReleaseReply(RegistrationCache::Release result,
                             const char* unknown) {
  switch (result) {
    case RegistrationCache::Release::kOk:
      return Reply(shm::kStatusOk);
    case RegistrationCache::Release::kInUse:
      return Reply(shm::kStatusInvalid, "in use by an in-flight transfer");
    case RegistrationCache::Release::kUnknown:
      break;
  }
  return Reply(shm::kStatusInvalid, unknown);
}

bool ValidService(const ControlRequest& r) {
  const void* nul = std::memchr(r.service, '\0', sizeof(r.service));
  return nul != nullptr && r.service[0] != '\0';
}

// Registration access bits for the seed's MEM_READ / MEM_WRITE flags.
uint8_t RemoteAccessBits(uint32_t flags) {
  return ((flags & shm::kAccessRead) ? mr::kAccessRemoteRead : 0) |
         ((flags & shm::kAccessWrite) ? mr::kAccessRemoteWrite : 0);
}

bool MakeParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return true;
  const std::string dir = path.substr(0, slash);
  if (mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  return false;
}

}  // namespace

Daemon::Daemon(const DaemonOptions& options)
    : options_(options),
      table_(options.max_registrations, /*readers=*/EngineCount(options)),
      cache_(&table_) {
  if (options_.socket_path.empty()) {
    options_.socket_path = shm::DefaultSocketPath();
  }
  // Communication ids and first PSNs differ from one daemon run to the
  // next, so that a restarted daemon's messages are not taken for stale ones.
  const uint64_t seed = static_cast<uint64_t>(absl::GetCurrentTimeNanos()) ^
                        (static_cast<uint64_t>(getpid()) << 32);
  psn_seed_ ^= seed;
  next_comm_id_ = static_cast<uint32_t>(seed * 0x9E3779B97F4A7C15ull >> 33);
  options_.engines = EngineCount(options_);
  const bool pinned = EnginesPinned();
  // Pinned engines run on EAL lcores when there is an EAL (a data port),
  // else on plain threads with that CPU affinity.
  const bool eal = !options_.port.device.empty();
  std::vector<int> wake_fds;
  for (uint32_t i = 0; i < options_.engines; ++i) {
    engine::EngineOptions eo;
    eo.mode = options_.poll_mode;
    eo.reader_index = i;
    eo.max_endpoints = 2 * options_.max_connections;
    eo.max_sleep_ns = options_.engine_max_sleep_ns;
    eo.budget = options_.burst;
    if (pinned) (eal ? eo.lcore : eo.cpu) = options_.engine_cpus[i];
    engines_.push_back(std::make_unique<engine::Engine>(&table_, eo));
    wake_fds.push_back(engines_.back()->wake_fd());
  }
  for (auto& e : engines_) e->SetSiblings(wake_fds);
}

uint32_t Daemon::LeastLoadedEngine() const {
  uint32_t best = 0;
  for (uint32_t i = 1; i < engines_.size(); ++i) {
    if (engines_[i]->endpoint_count() < engines_[best]->endpoint_count()) {
      best = i;
    }
  }
  return best;
}

Daemon::~Daemon() { Stop(); }

bool Daemon::Allowed(uid_t uid, gid_t gid) const {
  if (uid == 0 || uid == geteuid()) return true;
  for (uid_t u : options_.allowed_uids) {
    if (u == uid) return true;
  }
  for (gid_t g : options_.allowed_gids) {
    if (g == gid) return true;
  }
  return false;
}

absl::Status Daemon::Start() {
  const std::string& path = options_.socket_path;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError("socket path too long: " + path);
  }
  if (!MakeParentDir(path)) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the folder of ", path, ": ",
                     std::strerror(errno)));
  }
  // A socket file left by a daemon that died is replaced; a live one is not.
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
      0) {
    close(listen_fd_);
    listen_fd_ = -1;
    return absl::AlreadyExistsError("another rdmaplaned serves " + path);
  }
  close(listen_fd_);
  // The socket appears at `path` only once the daemon serves (the data
  // port up, the engines and the control thread running): until then it
  // is bound under a temporary name in the same folder, then renamed, so
  // that whoever waits for the path -- a client, a script, a peer daemon's
  // start-up -- never finds a daemon still starting.
  const size_t slash = path.rfind('/');
  starting_path_ =
      absl::StrCat(slash == std::string::npos ? "" : path.substr(0, slash + 1),
                   ".rdmaplaned-", getpid(), ".starting");
  if (starting_path_.size() >= sizeof(addr.sun_path)) starting_path_ = path;
  unlink(path.c_str());
  unlink(starting_path_.c_str());
  std::memcpy(addr.sun_path, starting_path_.c_str(), starting_path_.size() + 1);
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 ||
      bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": ", std::strerror(errno)));
  }
  // Anyone may connect; SO_PEERCRED and the uid/gid policy decide.
  chmod(starting_path_.c_str(), 0666);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  control_eventfd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = control_eventfd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, control_eventfd_, &ev);
  if (absl::Status st = StartPort(); !st.ok()) {
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(starting_path_.c_str());
    return st;
  }
  arena_memory_.AttachPort(port_.get());
  ev.data.fd = port_engine().control_notify_fd();
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, ev.data.fd, &ev);
  started_ = absl::Now();
  if (dpdk_) {  // DPDK telemetry exists only with the EAL
    PublishStatus(/*force=*/true);
    RegisterTelemetry([this] { return Status(); });
    telemetry_ = true;
  }
  for (auto& e : engines_) e->Start();
  control_thread_ = std::thread([this] { ControlLoop(); });
  if (starting_path_ != path &&
      rename(starting_path_.c_str(), path.c_str()) != 0) {
    const int err = errno;
    Stop();
    unlink(starting_path_.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

void Daemon::Stop() {
  if (!control_thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(control_eventfd_, &one, sizeof(one));
  control_thread_.join();
  if (telemetry_) {
    UnregisterTelemetrySource();
    telemetry_ = false;
  }
  // Farewells to peer daemons leave before the engine stops.
  for (int i = 0; i < 100 && port_engine().control_backlog() > 0; ++i) {
    usleep(1000);
  }
  for (auto& e : engines_) e->Stop();
  // Closing the port frees the frames it still held; then the arenas they
  // pointed into can go.
  arena_memory_.AttachPort(nullptr);
  StopPort();
  arena_memory_.Reap();
  for (int fd : {listen_fd_, epoll_fd_, control_eventfd_}) {
    if (fd >= 0) close(fd);
  }
  unlink(options_.socket_path.c_str());
}

DaemonSnapshot Daemon::Snapshot() const {
  absl::MutexLock lock(&snapshot_mu_);
  return snapshot_;
}

void Daemon::ControlLoop() {
  epoll_event events[32];
  // Control requests come in bursts (register, then deregister, ...): after
  // one, keep polling for a short while instead of paying a wake-up.
  constexpr absl::Duration kLinger = absl::Microseconds(200);
  absl::Time active_until = absl::InfinitePast();
  while (!stop_.load(std::memory_order_acquire)) {
    const bool linger = absl::Now() < active_until;
    const int n = epoll_wait(epoll_fd_, events, 32, linger ? 0 : 100);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == listen_fd_) {
        AcceptClient();
      } else if (fd == port_engine().control_notify_fd()) {
        DrainControlFrames();
      } else if (fd == control_eventfd_) {
        uint64_t v;
        [[maybe_unused]] ssize_t r = read(control_eventfd_, &v, sizeof(v));
      } else if (control_wake_fds_.count(fd) != 0) {
        uint8_t sink[64];
        while (read(fd, sink, sizeof(sink)) > 0) {
        }
      } else if (auto it = sessions_.find(fd); it != sessions_.end()) {
        HandleSocket(it->second.get());
      }
    }
    if (ServeControlRings() || n > 0) active_until = absl::Now() + kLinger;
    // Closed connections whose client has not let go yet: complete what
    // it still queues, as its completion ring makes room.
    for (auto& [id, c] : connections_) {
      if (c->running || c->pending) continue;
      for (int side = 0; side < 2; ++side) {
        if (c->open[side]) AbortQueued(c.get(), side, c->abort_status[side]);
      }
    }
    CmTick();
    table_.Reclaim();
    arena_memory_.Reap();
    UpdateSnapshot();
    if (telemetry_) PublishStatus(/*force=*/false);
  }
  // Shutting down: every session goes, as if its client had exited, except
  // that clients see their connections aborted.
  while (!sessions_.empty()) CloseSession(sessions_.begin()->second.get());
}

void Daemon::UpdateSnapshot() {
  uint32_t arenas = 0;
  for (const auto& [fd, s] : sessions_) arenas += s->arenas.size();
  absl::MutexLock lock(&snapshot_mu_);
  snapshot_.sessions = static_cast<uint32_t>(sessions_.size());
  snapshot_.registrations = static_cast<uint32_t>(cache_.size());
  snapshot_.connections = static_cast<uint32_t>(connections_.size());
  snapshot_.arenas = arenas;
}

void Daemon::AcceptClient() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        !Allowed(cred.uid, cred.gid)) {
      shm::SetupMessage reply = shm::MakeSetup(shm::kSetupHelloReply);
      reply.status = shm::kStatusPermission;
      std::snprintf(reply.text, sizeof(reply.text),
                    "uid %u is not allowed by this daemon's policy", cred.uid);
      shm::SendSetup(fd, reply, -1, -1, /*dont_wait=*/true);
      close(fd);
      absl::MutexLock lock(&snapshot_mu_);
      ++snapshot_.rejected_clients;
      continue;
    }
    // Setup messages are read without waiting (SetupReader), so a client
    // that sends half a message stalls nobody; replies are small enough for
    // the socket buffer.
    auto s = std::make_unique<Session>();
    s->setup = std::make_unique<shm::SetupReader>();
    s->sock = fd;
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->id = next_session_id_++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    sessions_[fd] = std::move(s);
  }
}

void Daemon::HandleSocket(Session* s) {
  // One message per wake-up; epoll reports the socket again if more waits.
  shm::SetupMessage msg;
  int fd0 = -1, fd1 = -1;
  switch (s->setup->Read(s->sock, &msg, &fd0, &fd1)) {
    case shm::SetupReader::Result::kPartial:
      return;
    case shm::SetupReader::Result::kClosed:
      CloseSession(s);  // the client exited, crashed or spoke nonsense
      return;
    case shm::SetupReader::Result::kMessage:
      break;
  }
  if (fd1 >= 0) close(fd1);
  switch (msg.type) {
    case shm::kSetupHello:
      if (!s->ready) {
        HandleHello(s, msg, fd0);
        return;
      }
      break;
    case shm::kSetupArena:
      if (s->ready) {
        HandleArena(s, msg, fd0);
        return;
      }
      break;
    case shm::kSetupAdmin:
      // rdmaplanectl: one question, one answer, then the socket closes. The
      // uid policy already admitted the asker at accept.
      if (!s->ready) {
        if (fd0 >= 0) close(fd0);
        s->admin = true;
        AnswerAdminRequest(s->sock, msg, [this] { return BuildStatus(); });
        CloseSession(s);
        return;
      }
      break;
    default:
      break;
  }
  if (fd0 >= 0) close(fd0);
  {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.bad_requests;
  }
  CloseSession(s);
}

namespace {

// The region must stay the size it was when mapped: a client that could
// shrink it would make the daemon fault on access.
bool SealedAgainstShrinking(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
}

}  // namespace

void Daemon::HandleHello(Session* s, const shm::SetupMessage& msg, int fd) {
  shm::SetupMessage reply = shm::MakeSetup(shm::kSetupHelloReply);
  auto refuse = [&](const char* why) {
    reply.status = shm::kStatusInvalid;
    std::snprintf(reply.text, sizeof(reply.text), "%s", why);
    shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true);
    // Once mapped, the region's descriptor is the session's, and
    // CloseSession closes it: closing it here too would close whatever
    // another thread opened under that number in between.
    if (fd >= 0 && fd != s->region_fd) close(fd);
    CloseSession(s);
  };
  struct stat st{};
  if (fd < 0 || fstat(fd, &st) != 0) return refuse("no session region");
  if (msg.length != shm::SessionRegionBytes() ||
      static_cast<uint64_t>(st.st_size) < msg.length) {
    return refuse("session region has the wrong size (version mismatch?)");
  }
  if (!SealedAgainstShrinking(fd)) {
    return refuse("session region must be sealed against shrinking");
  }
  void* mem = mmap(nullptr, msg.length, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
  if (mem == MAP_FAILED) return refuse("cannot map the session region");
  s->region = static_cast<uint8_t*>(mem);
  s->region_bytes = msg.length;
  s->region_fd = fd;
  s->header = reinterpret_cast<shm::SessionHeader*>(s->region);
  // Copy the ring table once; later changes by the client are ignored.
  std::memcpy(static_cast<void*>(&s->refs), s->header, sizeof(s->refs));
  const shm::SessionHeader& h = s->refs;
  if (h.magic != shm::kSessionMagic || h.version != shm::kSessionVersion ||
      h.max_connections != shm::kMaxConnections) {
    return refuse("bad session header (magic, version or limits)");
  }
  auto in_region = [&](const shm::RingRef& r) {
    return r.offset % shm::kCacheLine == 0 && r.offset <= s->region_bytes &&
           r.bytes <= s->region_bytes - r.offset;
  };
  bool ok = in_region(h.control_requests) && in_region(h.control_responses);
  for (const auto& c : h.connections) {
    ok = ok && in_region(c.send) && in_region(c.completion);
  }
  if (!ok) return refuse("a ring lies outside the session region");
  auto req = shm::SpscRing<ControlRequest>::Attach(
      s->region + h.control_requests.offset, h.control_requests.bytes);
  auto resp = shm::SpscRing<ControlResponse>::Attach(
      s->region + h.control_responses.offset, h.control_responses.bytes);
  if (!req.ok() || !resp.ok()) return refuse("control rings are malformed");
  for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
    const auto& c = h.connections[i];
    auto send = shm::SpscRing<shm::SendEntry>::Attach(s->region + c.send.offset,
                                                     c.send.bytes);
    auto completion = shm::SpscRing<shm::CompletionEntry>::Attach(
        s->region + c.completion.offset, c.completion.bytes);
    if (!send.ok() || !completion.ok()) {
      return refuse("connection rings are malformed");
    }
    s->send[i] = *send;
    s->completion[i] = *completion;
  }
  for (auto& state : s->header->connection_state) {
    state.store(shm::kConnFree, std::memory_order_relaxed);
  }
  // Doorbells of this session only: the client gets one end of each pair,
  // from which it cannot take what it sent (so it cannot drain another
  // session's wake-ups, nor saturate them).
  // Datagram socket pairs rather than pipes: a client sending after the
  // daemon is gone gets EPIPE without a SIGPIPE.
  int control_pipe[2], engine_pipe[2];
  const int kind = SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK;
  if (socketpair(AF_UNIX, kind, 0, control_pipe) != 0) {
    return refuse("out of file descriptors");
  }
  if (socketpair(AF_UNIX, kind, 0, engine_pipe) != 0) {
    close(control_pipe[0]);
    close(control_pipe[1]);
    return refuse("out of file descriptors");
  }
  s->control_wake = control_pipe[0];
  s->engine_wake = std::make_unique<engine::WakeRoute>();
  s->engine_wake->fd = engine_pipe[0];
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = s->control_wake;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->control_wake, &ev);
  control_wake_fds_.insert(s->control_wake);
  // Engines watch engine_pipe[0] while they serve one of the session's
  // connections (Endpoint::info().wake).
  s->requests = *req;
  s->responses = *resp;
  s->ready = true;
  reply.status = shm::kStatusOk;
  reply.id = s->id;
  const bool sent = shm::SendSetup(s->sock, reply, control_pipe[1],
                                   engine_pipe[1], /*dont_wait=*/true);
  close(control_pipe[1]);
  close(engine_pipe[1]);
  if (!sent) CloseSession(s);
}

void Daemon::HandleArena(Session* s, const shm::SetupMessage& msg, int fd) {
  shm::SetupMessage reply = shm::MakeSetup(shm::kSetupArenaReply);
  if (s->arenas.size() >= options_.max_arenas_per_session) {
    if (fd >= 0) close(fd);
    reply.status = shm::kStatusNoBuffers;
    std::snprintf(reply.text, sizeof(reply.text),
                  "arena refused: the session holds %u arenas, the most "
                  "allowed",
                  options_.max_arenas_per_session);
    if (!shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true)) {
      CloseSession(s);
    }
    return;
  }
  struct stat st{};
  const bool sized = fd >= 0 && fstat(fd, &st) == 0 && msg.length > 0 &&
                     static_cast<uint64_t>(st.st_size) >= msg.length &&
                     msg.address + msg.length > msg.address;
  // Arenas of one client may not overlap in its address space.
  bool overlaps = false;
  for (const auto& [id, a] : s->arenas) {
    overlaps |= msg.address < a.client_address + a.bytes &&
                a.client_address < msg.address + msg.length;
  }
  void* mem = MAP_FAILED;
  if (sized && !overlaps && SealedAgainstShrinking(fd)) {
    mem = mmap(nullptr, msg.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (mem == MAP_FAILED) {
    if (fd >= 0) close(fd);
    reply.status = shm::kStatusInvalid;
    std::snprintf(reply.text, sizeof(reply.text), "%s",
                  "arena refused: not a sealed memfd of that size, or overlaps");
    // A client that does not read its answers is dropped, never waited for.
    if (!shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true)) {
      CloseSession(s);
    }
    return;
  }
  Arena a;
  a.client_address = msg.address;
  a.bytes = msg.length;
  a.host = static_cast<uint8_t*>(mem);
  a.fd = fd;
  a.owner = arena_memory_.Adopt(a.host, a.bytes, fd);
  const uint32_t id = next_arena_id_++;
  s->arenas[id] = std::move(a);
  reply.status = shm::kStatusOk;
  reply.id = id;
  if (!shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true)) {
    CloseSession(s);
  }
}

void Daemon::CloseSession(Session* s) {
  // Connections first: the engine completes their work and drops its pins.
  for (uint32_t slot = 0; slot < shm::kMaxConnections; ++slot) {
    if (Connection* c = s->connections[slot]) {
      const int side = c->side[0] == s && c->slot[0] == slot ? 0 : 1;
      CloseConnection(c, side,
                      stop_.load() ? shm::kStatusConnAborted
                                   : shm::kStatusAborted,
                      stop_.load() ? shm::kStatusConnAborted
                                   : shm::kStatusConnReset);
      c->open[side] = false;
      s->connections[slot] = nullptr;
      MaybeDeleteConnection(c);
    }
  }
  // Connections waiting in our accept queues are refused to their other end.
  for (const std::string& service : s->listening) {
    listeners_.erase(service);
    auto it = pending_.find(service);
    if (it == pending_.end()) continue;
    auto queue = std::move(it->second);
    pending_.erase(it);
    for (auto& [c, side] : queue) RefusePending(c);
  }
  cache_.DropOwner(s->id);
  // The engine no longer serves the session's connections, but frames they
  // sent may still point into its arenas: those stay mapped until freed.
  for (auto& [id, a] : s->arenas) {
    arena_memory_.Release(a.host, a.bytes, a.fd, std::move(a.owner));
  }
  if (s->control_wake >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->control_wake, nullptr);
    control_wake_fds_.erase(s->control_wake);
    close(s->control_wake);
  }
  // No engine serves a connection of the session any more, so none
  // watches its doorbell socket.
  if (s->engine_wake != nullptr) close(s->engine_wake->fd);
  if (s->region != nullptr) munmap(s->region, s->region_bytes);
  if (s->region_fd >= 0) close(s->region_fd);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->sock, nullptr);
  close(s->sock);
  if (!s->admin) {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.sessions_reclaimed;
  }
  sessions_.erase(s->sock);
}

bool Daemon::ServeControlRings() {
  std::vector<Session*> broken;
  std::vector<std::pair<Session*, ControlResponse>> answers;
  for (auto& [fd, sp] : sessions_) {
    Session* s = sp.get();
    if (!s->ready) continue;
    uint32_t taken = 0;
    // Do not take a request we could not answer.
    while (taken < 64 &&
           s->responses.Size() + taken < s->responses.capacity()) {
      ControlRequest req;
      const shm::PopResult pr = s->requests.TryPop(&req);
      if (pr == shm::PopResult::kEmpty) break;
      if (pr == shm::PopResult::kCorrupted) {
        broken.push_back(s);
        break;
      }
      current_request_id_ = req.request_id;
      ControlResponse resp = Handle(s, req);
      ++taken;
      if (defer_answer_) {  // answered when a peer daemon answers
        defer_answer_ = false;
        continue;
      }
      resp.request_id = req.request_id;
      answers.push_back({s, resp});
    }
  }
  for (Session* s : broken) {
    std::erase_if(answers, [s](const auto& a) { return a.first == s; });
    CloseSession(s);
  }
  if (answers.empty() && broken.empty()) return false;
  // Counters first, so that a client holding its answer sees them current.
  UpdateSnapshot();
  {
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_.control_requests += answers.size();
  }
  Session* last = nullptr;
  for (const auto& [s, resp] : answers) {
    s->responses.TryPush(resp);
    if (s != last && last != nullptr) {
      shm::RingDoorbell(&last->header->control_response_bell);
    }
    last = s;
  }
  if (last != nullptr) shm::RingDoorbell(&last->header->control_response_bell);
  return true;
}

uint32_t Daemon::ScopeOf(const Connection* c, int side) {
  return c->id * 2 + static_cast<uint32_t>(side);
}

uint32_t Daemon::ScopeOf(const Session* s, uint32_t slot) {
  const Connection* c = s->connections[slot];
  return ScopeOf(c, c->side[0] == s && c->slot[0] == slot ? 0 : 1);
}

ControlResponse Daemon::Handle(Session* s, const ControlRequest& req) {
  switch (req.op) {
    case shm::kOpRegisterLocal: return RegisterLocal(s, req);
    case shm::kOpDeregisterLocal: return DeregisterLocal(s, req);
    case shm::kOpRegisterRdma: return RegisterRdma(s, req);
    case shm::kOpDeregisterRdma: return DeregisterRdma(s, req);
    case shm::kOpListen: return Listen(s, req);
    case shm::kOpUnlisten: return Unlisten(s, req);
    case shm::kOpConnect: return Connect(s, req);
    case shm::kOpAccept: return Accept(s, req);
    case shm::kOpDisconnect: return Disconnect(s, req);
  }
  absl::MutexLock lock(&snapshot_mu_);
  ++snapshot_.bad_requests;
  return Reply(shm::kStatusInvalid, "unknown control operation");
}

uint8_t* Daemon::Translate(const Session* s, uint64_t address,
                           uint64_t length, rc::MemoryOwner** owner) const {
  for (const auto& [id, a] : s->arenas) {
    if (address >= a.client_address && address - a.client_address <= a.bytes &&
        length <= a.bytes - (address - a.client_address)) {
      if (owner != nullptr) *owner = a.owner.get();
      return a.host + (address - a.client_address);
    }
  }
  return nullptr;
}

ControlResponse Daemon::RegisterLocal(Session* s, const ControlRequest& r) {
  if (r.flags == 0 || (r.flags & ~shm::kAccessReadWrite) != 0) {
    return Reply(shm::kStatusInvalid, "flags must be read, write or both");
  }
  rc::MemoryOwner* owner = nullptr;
  uint8_t* host = Translate(s, r.address, r.length, &owner);
  if (host == nullptr || r.length == 0) {
    return Reply(shm::kStatusFault, "buffer is not inside the caller's arenas");
  }
  mr::Registration reg;
  reg.memory_owner = owner;
  reg.owner = s->id;
  reg.connection = mr::kAnyConnection;
  reg.address = r.address;
  reg.length = r.length;
  reg.host = host;
  // MEM_READ: the daemon may read it (a write's source); MEM_WRITE: it may
  // write it (a read's target).
  reg.access = ((r.flags & shm::kAccessRead) ? mr::kAccessLocal : 0) |
               ((r.flags & shm::kAccessWrite) ? mr::kAccessLocalWrite : 0);
  const std::optional<uint32_t> key =
      cache_.Register(reg, options_.max_registrations_per_session);
  if (!key) {
    return Reply(shm::kStatusNoBuffers,
                 "registration table or this session's share of it is full");
  }
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.key = *key;
  return resp;
}

ControlResponse Daemon::DeregisterLocal(Session* s, const ControlRequest& r) {
  return ReleaseReply(cache_.Deregister(s->id, mr::kAnyConnection, r.key),
                      "not a registration of this client");
}

ControlResponse Daemon::RegisterRdma(Session* s, const ControlRequest& r) {
  if (r.flags != shm::kAccessRead && r.flags != shm::kAccessWrite &&
      r.flags != shm::kAccessReadWrite) {
    return Reply(shm::kStatusInvalid,
                 "flags must be MEM_READ, MEM_WRITE or MEM_READWRITE");
  }
  if (r.connection >= shm::kMaxConnections ||
      s->connections[r.connection] == nullptr ||
      !(s->connections[r.connection]->running ||
        s->connections[r.connection]->pending)) {
    return Reply(shm::kStatusNotConnected, "connection is not established");
  }
  rc::MemoryOwner* owner = nullptr;
  uint8_t* host = Translate(s, r.address, r.length, &owner);
  if (host == nullptr || r.length == 0) {
    // descriptor_length 0: the caller's length stays as it was.
    return Reply(shm::kStatusFault, "buffer is not inside the caller's arenas");
  }
  if (r.descriptor_length < sizeof(shm::RdmaDescriptor)) {
    ControlResponse resp =
        Reply(shm::kStatusFault, "descriptor buffer too small");
    resp.descriptor_length = sizeof(shm::RdmaDescriptor);
    return resp;
  }
  mr::Registration reg;
  reg.owner = s->id;
  reg.connection = ScopeOf(s, r.connection);
  reg.address = r.address;
  reg.length = r.length;
  reg.host = host;
  reg.memory_owner = owner;
  reg.access = RemoteAccessBits(r.flags);
  const std::optional<uint32_t> key =
      cache_.Register(reg, options_.max_registrations_per_session);
  if (!key) {
    return Reply(shm::kStatusNoBuffers,
                 "registration table or this session's share of it is full");
  }
  shm::RdmaDescriptor d{};
  d.magic = shm::kDescriptorMagic;
  d.rkey = *key;
  d.address = r.address;
  d.length = r.length;
  d.access = r.flags;
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.key = *key;
  resp.descriptor_length = sizeof(d);
  std::memcpy(resp.descriptor, &d, sizeof(d));
  return resp;
}

ControlResponse Daemon::DeregisterRdma(Session* s, const ControlRequest& r) {
  shm::RdmaDescriptor d{};
  if (r.descriptor_length < sizeof(d) ||
      r.descriptor_length > sizeof(r.descriptor)) {
    return Reply(shm::kStatusInvalid, "not a descriptor");
  }
  std::memcpy(&d, r.descriptor, sizeof(d));
  if (d.magic != shm::kDescriptorMagic) {
    return Reply(shm::kStatusInvalid, "not a descriptor");
  }
  if (r.connection >= shm::kMaxConnections ||
      s->connections[r.connection] == nullptr) {
    return Reply(shm::kStatusInvalid, "not registered on this connection");
  }
  return ReleaseReply(
      cache_.Deregister(s->id, ScopeOf(s, r.connection), d.rkey),
      "not a registered RDMA buffer");
}

ControlResponse Daemon::Listen(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  const std::string service(r.service);
  if (auto it = listeners_.find(service); it != listeners_.end()) {
    return it->second == s ? Reply(shm::kStatusOk)
                           : Reply(shm::kStatusInvalid,
                                   "another client listens on this service");
  }
  listeners_[service] = s;
  s->listening.insert(service);
  return Reply(shm::kStatusOk);
}

ControlResponse Daemon::Unlisten(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  const std::string service(r.service);
  auto it = listeners_.find(service);
  if (it == listeners_.end() || it->second != s) {
    return Reply(shm::kStatusInvalid, "not listening on this service");
  }
  listeners_.erase(it);
  s->listening.erase(service);
  if (auto p = pending_.find(service); p != pending_.end()) {
    auto queue = std::move(p->second);
    pending_.erase(p);
    for (auto& [c, side] : queue) RefusePending(c);
  }
  return Reply(shm::kStatusOk);
}

std::unique_ptr<engine::Endpoint> Daemon::MakeEndpoint(
    Session* s, uint32_t slot, uint32_t connection_id, uint32_t local_qpn,
    uint32_t remote_qpn, uint32_t send_psn, uint32_t recv_psn,
    const Connection* remote) {
  engine::EndpointInfo info;
  info.connection_id = connection_id;
  info.session_id = s->id;
  info.header = s->header;
  info.slot = slot;
  info.wake = s->engine_wake.get();
  info.send = s->send[slot];
  info.completion = s->completion[slot];
  // An active connection to a peer daemon got its slot at connect time,
  // and the client may have posted since.
  if (remote == nullptr || remote->passive) ClearSendRing(s, slot);
  rc::QpConfig qp;
  qp.local_qpn = wire::Qpn(local_qpn);
  qp.remote_qpn = wire::Qpn(remote_qpn);
  qp.send_psn = wire::Psn(send_psn);
  qp.recv_psn = wire::Psn(recv_psn);
  if (remote != nullptr) {
    qp.path.src_mac = port_mac_;
    qp.path.dst_mac = remote->peer_mac;
    qp.path.src_ip = options_.port.ip;
    qp.path.dst_ip = remote->peer_ip;
    qp.pmtu = remote->pmtu;
  } else {
    qp.path.src_ip = 0x7F000001;  // in-process link: both ends are this host
    qp.path.dst_ip = 0x7F000001;
    qp.pmtu = options_.path_mtu;
  }
  qp.path.udp_src_port = wire::UdpSourcePortForQpn(qp.local_qpn);
  qp.max_inflight_packets = 256;
  qp.ack_req_every = 32;
  qp.retransmit_timeout_ns = remote != nullptr
                                 ? options_.remote_retransmit_timeout_ns
                                 : options_.retransmit_timeout_ns;
  qp.retry_count = 7;
  info.qp = qp;
  if (remote != nullptr) {
    return std::make_unique<engine::Endpoint>(
        info, &table_, port_engine().clock(), fault::FaultSpec{}, port_.get());
  }
  return std::make_unique<engine::Endpoint>(info, &table_,
                                            port_engine().clock(),
                                            options_.link_faults);
}

namespace {
constexpr size_t kAcceptBacklog = 16;
}  // namespace

void Daemon::ClearSendRing(Session* s, uint32_t slot) {
  // Anything a previous user of the slot left behind (bounded: the client
  // controls the indices).
  shm::SendEntry stale;
  for (uint32_t i = 0; i < s->send[slot].capacity() &&
                       s->send[slot].TryPop(&stale) == shm::PopResult::kOk;
       ++i) {
  }
}

int Daemon::FreeSlot(const Session* s) {
  for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
    if (s->connections[i] == nullptr) return static_cast<int>(i);
  }
  return -1;
}

ControlResponse Daemon::Connect(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  if (r.address != 0) return ConnectRemote(s, r);
  auto it = listeners_.find(r.service);
  if (it == listeners_.end()) {
    return Reply(shm::kStatusRefused, "no listener for this service");
  }
  auto& queue = pending_[r.service];
  // The listener's slots are taken only when it accepts, and the queue of
  // connections waiting for that is bounded.
  if (queue.size() >= kAcceptBacklog) {
    return Reply(shm::kStatusRefused, "the listener's accept queue is full");
  }
  const int cslot = FreeSlot(s);
  if (cslot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  auto c = std::make_unique<Connection>();
  c->id = next_connection_id_++;
  c->side[0] = s;
  c->slot[0] = cslot;
  c->side[1] = it->second;
  c->slot[1] = shm::kMaxConnections;  // none until accepted
  psn_seed_ = psn_seed_ * 6364136223846793005ull + 1442695040888963407ull;
  c->psn[0] = static_cast<uint32_t>(psn_seed_ >> 40);
  c->psn[1] = static_cast<uint32_t>(psn_seed_ >> 16) & 0xFFFFFF;
  c->qpn[0] = (c->id * 2) & 0xFFFFFF;
  c->qpn[1] = (c->id * 2 + 1) & 0xFFFFFF;
  c->endpoint[0] = MakeEndpoint(s, cslot, ScopeOf(c.get(), 0), c->qpn[0],
                                c->qpn[1], c->psn[0], c->psn[1]);
  c->open[0] = true;
  c->pending = true;
  s->connections[cslot] = c.get();
  s->header->connection_state[cslot].store(shm::kConnUp,
                                           std::memory_order_release);
  queue.push_back({c.get(), 1});
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = cslot;
  connections_[c->id] = std::move(c);
  return resp;
}

ControlResponse Daemon::Accept(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  auto it = listeners_.find(r.service);
  if (it == listeners_.end() || it->second != s) {
    return Reply(shm::kStatusInvalid, "not listening on this service");
  }
  auto& queue = pending_[r.service];
  if (queue.empty()) return Reply(shm::kStatusAgain, "no connection yet");
  const int sslot = FreeSlot(s);
  if (sslot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  if (running_connections_ >= options_.max_connections) {
    return Reply(shm::kStatusNoBuffers, "the engine serves all it can");
  }
  Connection* c = queue.front().first;
  queue.pop_front();
  if (c->remote) {
    AcceptRemote(c, s, sslot);
    ControlResponse resp = Reply(shm::kStatusOk);
    resp.connection = sslot;
    return resp;
  }
  c->slot[1] = sslot;
  c->endpoint[1] = MakeEndpoint(s, sslot, ScopeOf(c, 1), c->qpn[1], c->qpn[0],
                                c->psn[1], c->psn[0]);
  c->open[1] = true;
  c->pending = false;
  s->connections[sslot] = c;
  c->engine = LeastLoadedEngine();
  engines_[c->engine]->AddPair(c->endpoint[0].get(), c->endpoint[1].get());
  c->running = true;
  ++running_connections_;
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = sslot;
  return resp;
}

void Daemon::AbortQueued(Connection* c, int side, int32_t status) {
  if (engine::Endpoint* e = c->endpoint[side].get()) e->AbortQueued(status);
}

void Daemon::RefusePending(Connection* c) {
  if (c->remote) {  // a peer daemon's request our listener never accepted
    SendReject(c->peer_comm_id, c->peer_ip, c->peer_mac, wire::kRejConsumer,
               "the listener closed before accepting");
    connections_.erase(c->id);
    return;
  }
  Session* connector = c->side[0];
  // State first, so that nothing is posted after the queue is drained.
  if (c->open[0]) {
    connector->header->connection_state[c->slot[0]].store(
        shm::kConnReset, std::memory_order_release);
  }
  c->abort_status[0] = shm::kStatusConnReset;
  AbortQueued(c, 0, shm::kStatusConnReset);
  c->pending = false;
  c->side[1] = nullptr;
  cache_.DropConnection(ScopeOf(c, 0));
}

void Daemon::CloseConnection(Connection* c, int side, int32_t status,
                             int32_t peer_status) {
  if (!c->running) {
    // Never served by the engine (or no longer): requests still queued in
    // the ring complete here.
    c->abort_status[side] = status;
    AbortQueued(c, side, status);
    if (c->pending && side == 0) {
      c->pending = false;
      cache_.DropConnection(ScopeOf(c, 0));
    }
    if (c->remote) SayFarewell(c);
    return;
  }
  const bool stopping = stop_.load();
  engines_[c->engine]->RemovePair(c->endpoint[side].get(), status,
                      stopping ? shm::kConnDaemonGone : shm::kConnFree,
                      peer_status,
                      stopping ? shm::kConnDaemonGone : shm::kConnReset);
  c->running = false;
  --running_connections_;
  c->abort_status[side] = status;
  c->abort_status[1 - side] = peer_status;
  // Requests posted while the close was on its way complete too.
  AbortQueued(c, side, status);
  if (c->open[1 - side]) AbortQueued(c, 1 - side, peer_status);
  // Memory registered for the connection is unreachable from now on.
  cache_.DropConnection(ScopeOf(c, 0));
  cache_.DropConnection(ScopeOf(c, 1));
  if (c->remote) SayFarewell(c);
}

void Daemon::MaybeDeleteConnection(Connection* c) {
  if (c->open[0] || c->open[1]) return;
  for (auto& [service, queue] : pending_) {
    std::erase_if(queue, [c](const auto& p) { return p.first == c; });
  }
  connections_.erase(c->id);
}

ControlResponse Daemon::Disconnect(Session* s, const ControlRequest& r) {
  if (r.connection >= shm::kMaxConnections ||
      s->connections[r.connection] == nullptr) {
    return Reply(shm::kStatusNotConnected, "no such connection");
  }
  Connection* c = s->connections[r.connection];
  const int side = c->side[0] == s && c->slot[0] == r.connection ? 0 : 1;
  CloseConnection(c, side, shm::kStatusAborted, shm::kStatusConnReset);
  s->header->connection_state[r.connection].store(shm::kConnFree,
                                                  std::memory_order_release);
  c->open[side] = false;
  s->connections[r.connection] = nullptr;
  MaybeDeleteConnection(c);
  return Reply(shm::kStatusOk);
}

}  // namespace rdmaplane::control
