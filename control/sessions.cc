#include "control/sessions.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/shm/doorbell.h"
#include "control/admin.h"
#include "control/bus_error_guard.h"
#include "control/log.h"

namespace rdmaplane::control {
namespace {

bool MakeParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return true;
  const std::string dir = path.substr(0, slash);
  return mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST;
}

// The region must stay the size it was when mapped: a client that could
// shrink it would make the daemon fault on access.
bool SealedAgainstShrinking(int fd) {
  const int seals = fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size() + 1);
  return true;
}

}  // namespace

// --- Session -----------------------------------------------------------------

bool Arena::lost() const { return watch >= 0 && BusErrorGuard::Lost(watch); }

std::vector<ArenaPiece> Session::PiecesOf(uint64_t address,
                                          uint64_t length) const {
  std::vector<ArenaPiece> pieces;
  const uint64_t end = address + length;
  if (length == 0 || end < address) return pieces;
  for (uint64_t at = address; at < end;) {
    // The newest arena that holds `at` (the map is in id order).
    const Arena* holder = nullptr;
    uint32_t holder_id = 0;
    for (const auto& [id, a] : arenas) {
      if (at >= a.client_address && at - a.client_address < a.bytes) {
        holder = &a;
        holder_id = id;
      }
    }
    // A file that lost pages under its mapping holds nothing (Arena::watch).
    if (holder == nullptr || holder->lost()) return {};
    // It holds them from where newer arenas end, before `at`, to where
    // newer ones begin, after it.
    ArenaPiece piece{holder->client_address,
                     holder->client_address + holder->bytes, holder_id};
    for (auto it = arenas.upper_bound(holder_id); it != arenas.end(); ++it) {
      const Arena& newer = it->second;
      const uint64_t newer_end = newer.client_address + newer.bytes;
      if (newer_end <= at && newer_end > piece.begin) piece.begin = newer_end;
      if (newer.client_address > at && newer.client_address < piece.end) {
        piece.end = newer.client_address;
      }
    }
    pieces.push_back(piece);
    at = piece.end;
  }
  return pieces;
}

uint8_t* Session::Translate(uint64_t address, uint64_t length,
                            rc::MemoryOwner** owner) const {
  const std::vector<ArenaPiece> pieces = PiecesOf(address, length);
  if (pieces.size() == 1) {
    const Arena& a = arenas.at(pieces[0].arena);
    if (owner != nullptr) *owner = a.owner.get();
    return a.host + (address - a.client_address);
  }
  for (const ArenaView& v : views) {
    if (!pieces.empty() && v.pieces == pieces) {
      if (owner != nullptr) *owner = v.owner.get();
      return v.host + (address - v.client_address);
    }
  }
  return nullptr;
}

absl::Status Session::MapView(uint64_t address, uint64_t length,
                              ArenaMemory* memory) {
  const std::vector<ArenaPiece> pieces = PiecesOf(address, length);
  if (pieces.size() < 2) {
    return absl::InvalidArgumentError("the range is not across arenas");
  }
  if (views.size() >= kMaxViews) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the session maps ", kMaxViews,
        " registrations across arenas already"));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (const ArenaPiece& p : pieces) {
    const Arena& a = arenas.at(p.arena);
    // A view of a file would need watching of its own (BusErrorGuard).
    if (a.watch >= 0) {
      return absl::InvalidArgumentError(
          "the range lies across a file mapped in place and other memory");
    }
    if (PageSizeOf(a.fd) != page) {
      return absl::InvalidArgumentError(
          "the range lies across arenas of which one is on hugepages");
    }
    if ((p.begin - a.client_address) % page != 0 || (p.end - p.begin) % page != 0) {
      return absl::InvalidArgumentError(
          "the arenas under the range do not meet at page boundaries");
    }
  }
  const uint64_t bytes = pieces.back().end - pieces.front().begin;
  void* reserved = mmap(nullptr, bytes, PROT_NONE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) {
    return absl::ResourceExhaustedError("no address space for the view");
  }
  auto* host = static_cast<uint8_t*>(reserved);
  for (const ArenaPiece& p : pieces) {
    // A second mapping of the arena's pages: mremap from the daemon's own
    // mapping, since the arena's seal (SealAgainstHoles) refuses new
    // writable mappings of the memfd itself.
    const Arena& a = arenas.at(p.arena);
    void* at = host + (p.begin - pieces.front().begin);
    void* mapped = mremap(a.host + (p.begin - a.client_address), 0,
                          p.end - p.begin, MREMAP_MAYMOVE | MREMAP_FIXED, at);
    if (mapped != at) {
      const int error = errno;
      munmap(reserved, bytes);
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot map the view: ", std::strerror(error)));
    }
  }
  ArenaView v;
  v.client_address = pieces.front().begin;
  v.bytes = bytes;
  v.host = host;
  v.pieces = pieces;
  v.owner = memory->AdoptPages(host, bytes, page);
  views.push_back(std::move(v));
  return absl::OkStatus();
}

engine::AddressHandles* Session::EnsureAddressHandles() {
  if (address_handles == nullptr) {
    address_handles = std::make_unique<engine::AddressHandles>();
    address_handle_taken.assign(engine::AddressHandles::kCount, false);
  }
  return address_handles.get();
}

int Session::FreeSlot(const shm::SlotDepths& depths) const {
  for (uint32_t i = depths.Deep() ? shm::kDeepSlotsAt : 0;
       i < shm::kMaxConnections; ++i) {
    if (connections[i] == nullptr && !IsSrq(i)) return static_cast<int>(i);
  }
  return -1;
}

uint64_t Session::arena_bytes() const {
  uint64_t total = 0;
  for (const auto& [id, a] : arenas) total += a.bytes;
  return total;
}

void Session::PublishState(uint32_t slot, shm::ConnectionState state) {
  header->connection_state[slot].store(state, std::memory_order_release);
}

void Session::Answer(const shm::ControlResponse& response) {
  // Behind held answers a new one waits its turn: the client reads its
  // answers in the order the daemon gave them.
  if (!held.empty() || !responses.TryPush(response)) {
    held.push_back(response);
    return;
  }
  shm::RingDoorbell(&header->control_response_bell);
}

bool Session::FlushHeldAnswers() {
  bool sent = false;
  while (!held.empty() && responses.TryPush(held.front())) {
    held.pop_front();
    sent = true;
  }
  if (sent) shm::RingDoorbell(&header->control_response_bell);
  return sent;
}

void Session::PushCmEvent(const shm::CmEvent& event) {
  if (!held_events.empty() || !cm_events.TryPush(event)) {
    held_events.push_back(event);
    return;
  }
  shm::RingDoorbell(&header->cm_event_bell);
}

bool Session::FlushHeldCmEvents() {
  bool sent = false;
  while (!held_events.empty() && cm_events.TryPush(held_events.front())) {
    held_events.pop_front();
    sent = true;
  }
  if (sent) shm::RingDoorbell(&header->cm_event_bell);
  return sent;
}

void Session::ResetSlot(uint32_t slot, const shm::SlotDepths& depths) {
  if (slot >= slots.size()) slots.resize(slot + 1);
  SlotRings& rings = slots[slot];
  // Formatted where the layout puts them (the region was checked at hello
  // to be this layout's size), each within its room: the depths are at
  // most what the slot holds (FreeSlot).
  using shm::SessionRings;
  if (!SessionRings::Holds(slot, depths)) {
    RDP_LOG(kError, "slot %u cannot hold rings of %u, %u and %u entries",
            slot, depths.send, depths.receive, depths.completion);
    std::abort();
  }
  const shm::RingRef s = SessionRings::Send(slot);
  const shm::RingRef c = SessionRings::Completion(slot);
  const shm::RingRef r = SessionRings::Receive(slot);
  rings.send = *shm::SpscRing<shm::SendEntry>::Create(region + s.offset,
                                                     s.bytes, depths.send);
  rings.completion = *shm::SpscRing<shm::CompletionEntry>::Create(
      region + c.offset, c.bytes, depths.completion);
  rings.receive = *shm::SpscRing<shm::RecvEntry>::Create(
      region + r.offset, r.bytes, depths.receive);
  shm::ResetSlot(header, slot);
}

// --- SessionServer -------------------------------------------------------------

SessionServer::SessionServer(const SessionPolicy& policy, Reactor* reactor,
                             ArenaMemory* arena_memory, UserAccounts* accounts,
                             ControlCounters* counters, SessionHooks hooks)
    : policy_(policy),
      reactor_(reactor),
      arena_memory_(arena_memory),
      accounts_(accounts),
      counters_(counters),
      hooks_(std::move(hooks)),
      spare_fd_(open("/dev/null", O_RDONLY | O_CLOEXEC)) {}

SessionServer::~SessionServer() {
  Shutdown();
  if (spare_fd_ >= 0) close(spare_fd_);
}

absl::Status SessionServer::Listen(const std::string& path) {
  path_ = path;
  sockaddr_un addr;
  if (!FillAddress(path, &addr)) {
    return absl::InvalidArgumentError("socket path too long: " + path);
  }
  if (!MakeParentDir(path)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create the folder of ", path, ": ", std::strerror(errno)));
  }
  // A socket file left by a daemon that died is replaced; a live one is not.
  const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0 &&
      connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    close(probe);
    return absl::AlreadyExistsError("another rdmaplaned serves " + path);
  }
  if (probe >= 0) close(probe);
  const size_t slash = path.rfind('/');
  starting_path_ =
      absl::StrCat(slash == std::string::npos ? "" : path.substr(0, slash + 1),
                   ".rdmaplaned-", getpid(), ".starting");
  if (!FillAddress(starting_path_, &addr)) {
    starting_path_ = path;
    FillAddress(path, &addr);
  }
  unlink(path.c_str());
  unlink(starting_path_.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 ||
      bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0) {
    const int err = errno;
    if (listen_fd_ >= 0) close(listen_fd_);
    listen_fd_ = -1;
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", path, ": ", std::strerror(err)));
  }
  // Anyone may connect; SO_PEERCRED and the uid/gid policy decide.
  chmod(starting_path_.c_str(), 0666);
  return reactor_->Add(listen_fd_, [this] { AcceptClients(); });
}

absl::Status SessionServer::Publish() {
  if (starting_path_ == path_) return absl::OkStatus();
  if (rename(starting_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    unlink(starting_path_.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot create ", path_, ": ", std::strerror(err)));
  }
  starting_path_ = path_;
  return absl::OkStatus();
}

void SessionServer::Shutdown() {
  while (!sessions_.empty()) Close(sessions_.begin()->second.get());
  if (listen_fd_ >= 0) {
    reactor_->Remove(listen_fd_);
    close(listen_fd_);
    listen_fd_ = -1;
    unlink(starting_path_.c_str());
    unlink(path_.c_str());
  }
}

uint32_t SessionServer::size() const {
  uint32_t n = 0;
  for (const auto& [fd, s] : sessions_) n += s->admin ? 0 : 1;
  return n;
}

uint32_t SessionServer::arena_count() const {
  uint32_t n = 0;
  for (const auto& [fd, s] : sessions_) n += s->arenas.size();
  return n;
}

namespace {

bool Contains(const std::vector<gid_t>& gids, gid_t gid) {
  return std::find(gids.begin(), gids.end(), gid) != gids.end();
}

// The supplementary groups of the peer of `sock` as they were when it
// connected (SO_PEERGROUPS); nullopt, with errno, when the kernel will not
// say.
std::optional<std::vector<gid_t>> PeerGroups(int sock) {
  std::vector<gid_t> groups(64);
  socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int rc = getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  if (rc != 0 && errno == ERANGE) {
    groups.resize(len / sizeof(gid_t) + 1);
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    rc = getsockopt(sock, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len);
  }
  if (rc != 0) return std::nullopt;
  groups.resize(len / sizeof(gid_t));
  return groups;
}

// Whether the peer of `sock`, of primary group `gid`, is a member of one of
// `gids`; `what` names the list in the log when its groups cannot be read.
bool PeerInGroups(int sock, pid_t pid, gid_t gid,
                  const std::vector<gid_t>& gids, const char* what) {
  if (gids.empty()) return false;
  if (Contains(gids, gid)) return true;
  const std::optional<std::vector<gid_t>> groups = PeerGroups(sock);
  if (!groups) {
    RDP_LOG_EVERY(kWarning, 10,
                  "cannot read the groups of pid %d (SO_PEERGROUPS: %s): "
                  "only its primary group is matched against %s",
                  static_cast<int>(pid), std::strerror(errno), what);
    return false;
  }
  return std::any_of(groups->begin(), groups->end(),
                     [&gids](gid_t g) { return Contains(gids, g); });
}

}  // namespace

bool SessionServer::Allowed(int sock, const ucred& cred) const {
  if (cred.uid == 0 || cred.uid == geteuid()) return true;
  for (uid_t u : policy_.allowed_uids) {
    if (u == cred.uid) return true;
  }
  return PeerInGroups(sock, cred.pid, cred.gid, policy_.allowed_gids,
                      "--allow_gids");
}

bool SessionServer::SeesAll(const Session& s) const {
  if (s.uid == 0 || s.uid == geteuid()) return true;
  return PeerInGroups(s.sock, s.pid, s.gid, policy_.admin_gids,
                      "--admin_gids");
}

namespace {

// Answers a client's hello (sent or to come) with a refusal, not waiting.
void SendRefusal(int fd, int32_t status, const std::string& why) {
  shm::SetupMessage reply = shm::MakeSetup(shm::kSetupHelloReply);
  reply.status = status;
  std::snprintf(reply.text, sizeof(reply.text), "%s", why.c_str());
  shm::SendSetup(fd, reply, -1, -1, /*dont_wait=*/true);
}

// Answers a client we will not serve, and hangs up.
void Refuse(int fd, int32_t status, const std::string& why) {
  SendRefusal(fd, status, why);
  close(fd);
}

}  // namespace

void SessionServer::RefuseForLackOfDescriptors() {
  RDP_LOG_EVERY(kError, 10,
                "out of file descriptors: refusing new clients (raise the "
                "open-file limit, LimitNOFILE)");
  if (spare_fd_ < 0) return;
  close(spare_fd_);
  const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    // Counted before the answer: a client that saw it sees the count.
    counters_->Count(&ControlCounters::rejected_clients);
    Refuse(fd, shm::kStatusLimit,
           "the daemon is out of file descriptors (LimitNOFILE)");
  }
  spare_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void SessionServer::AcceptClients() {
  while (true) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) RefuseForLackOfDescriptors();
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        !Allowed(fd, cred)) {
      counters_->Count(&ControlCounters::rejected_clients);
      Refuse(fd, shm::kStatusPermission,
             absl::StrCat("uid ", cred.uid,
                          " is not allowed by this daemon's policy"));
      continue;
    }
    absl::StatusOr<UserAccounts::Charge> charge =
        accounts_->Take(cred.uid, Resource::kSessions);
    // A user at the session limit may still ask rdmaplanectl's questions,
    // which open no session: the connection waits for its first message,
    // and a hello gets the refusal then. A few such connections per user
    // at a time, so that they cannot take the daemon's descriptors.
    std::string over_limit;
    if (!charge.ok()) {
      over_limit = std::string(charge.status().message());
      if (over_limit_[cred.uid] >= kOverLimitPerUser) {
        RDP_LOG_EVERY(kWarning, 10, "session of pid %d refused: %s",
                      static_cast<int>(cred.pid), over_limit.c_str());
        counters_->Count(&ControlCounters::rejected_clients);
        Refuse(fd, shm::kStatusLimit, over_limit);
        continue;
      }
      ++over_limit_[cred.uid];
    }
    // Setup messages are read without waiting (SetupReader), so a client
    // that sends half a message stalls nobody; replies are small enough for
    // the socket buffer.
    auto s = std::make_unique<Session>();
    s->setup = std::make_unique<shm::SetupReader>();
    s->sock = fd;
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
    if (charge.ok()) s->charge = std::move(*charge);
    s->over_limit = std::move(over_limit);
    // Without a pidfd (an old kernel) only the socket tells of its exit.
    s->pidfd = static_cast<int>(syscall(SYS_pidfd_open, cred.pid, 0));
    s->id = next_session_id_++;
    Session* raw = s.get();
    if (!reactor_->Add(fd, [this, raw] { OnReadable(raw); }).ok()) {
      close(fd);
      continue;
    }
    sessions_[fd] = std::move(s);
  }
}

void SessionServer::OnReadable(Session* s) {
  // One message per wake-up; epoll reports the socket again if more waits.
  shm::SetupMessage msg;
  int fd0 = -1, fd1 = -1;
  switch (s->setup->Read(s->sock, &msg, &fd0, &fd1)) {
    case shm::SetupReader::Result::kPartial:
      return;
    case shm::SetupReader::Result::kClosed:
      // Descriptors the kernel could not give us, because we have run out:
      // tell the client why, rather than hang up on it.
      if (s->setup->descriptors_lost() && !s->ready) {
        const int probe = dup(s->sock);
        if (probe >= 0) {
          close(probe);
        } else if (errno == EMFILE || errno == ENFILE) {
          RDP_LOG_EVERY(kError, 10,
                        "out of file descriptors: session of pid %d refused",
                        static_cast<int>(s->pid));
          SendRefusal(s->sock, shm::kStatusLimit,
                      "the daemon is out of file descriptors (LimitNOFILE)");
        }
      }
      Close(s);  // the client exited, crashed or spoke nonsense
      return;
    case shm::SetupReader::Result::kMessage:
      break;
  }
  if (fd1 >= 0) close(fd1);
  switch (msg.type) {
    case shm::kSetupHello:
      if (!s->ready && !s->over_limit.empty()) {
        if (fd0 >= 0) close(fd0);
        RDP_LOG_EVERY(kWarning, 10, "session of pid %d refused: %s",
                      static_cast<int>(s->pid), s->over_limit.c_str());
        counters_->Count(&ControlCounters::rejected_clients);
        SendRefusal(s->sock, shm::kStatusLimit, s->over_limit);
        s->admin = true;  // no session was made: none is reclaimed
        Close(s);
        return;
      }
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
    case shm::kSetupFile:
      if (s->ready) {
        HandleFile(s, msg, fd0);
        return;
      }
      break;
    case shm::kSetupSegment:
      if (s->ready) {
        if (fd0 >= 0) close(fd0);
        HandleSegment(s, msg);
        return;
      }
      break;
    case shm::kSetupAdmin:
      // rdmaplanectl: one question, one answer, then the socket closes. The
      // uid policy already admitted the asker at accept.
      if (!s->ready) {
        if (fd0 >= 0) close(fd0);
        s->admin = true;
        // A question is not one of the user's sessions.
        s->charge.Release();
        const bool sees_all = SeesAll(*s);
        s->admin_answer = AdminAnswerFor(msg, [this, s, sees_all] {
          DaemonStatus status = hooks_.status();
          if (!sees_all) KeepOnlyOwn(&status, s->uid);
          return status;
        });
        s->admin_sent = 0;
        s->admin_progress = absl::Now();
        ContinueAdminAnswer(s);
        return;
      }
      break;
    default:
      break;
  }
  if (fd0 >= 0) close(fd0);
  counters_->Count(&ControlCounters::bad_requests);
  Close(s);
}

void SessionServer::HandleHello(Session* s, const shm::SetupMessage& msg,
                                int fd) {
  shm::SetupMessage reply = shm::MakeSetup(shm::kSetupHelloReply);
  auto refuse = [&](const char* why) {
    reply.status = shm::kStatusInvalid;
    std::snprintf(reply.text, sizeof(reply.text), "%s", why);
    shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true);
    // Once mapped, the region's descriptor is the session's, and Close
    // closes it: closing it here too would close whatever another thread
    // opened under that number in between.
    if (fd >= 0 && fd != s->region_fd) close(fd);
    Close(s);
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
  void* mem =
      mmap(nullptr, msg.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) return refuse("cannot map the session region");
  s->region = static_cast<uint8_t*>(mem);
  s->region_bytes = msg.length;
  s->region_fd = fd;
  // Its pages may not vanish under us (arena_memory.h).
  if (absl::Status sealed = SealAgainstHoles(fd); !sealed.ok()) {
    RDP_LOG_EVERY(kWarning, 10, "session of pid %d refused: %s",
                  static_cast<int>(s->pid),
                  std::string(sealed.message()).c_str());
    return refuse("session region: holes could be punched in it");
  }
  s->header = reinterpret_cast<shm::SessionHeader*>(s->region);
  // The header must name this version's limits and ring layout; from then
  // on the daemon uses that layout, never what the header says.
  shm::SessionHeader* h = s->header;
  if (h->magic != shm::kSessionMagic || h->version != shm::kSessionVersion ||
      h->max_connections != shm::kMaxConnections) {
    return refuse("bad session header (magic, version or limits)");
  }
  if (!shm::HasSessionRings(*h)) {
    return refuse("the ring table is not this version's layout");
  }
  using shm::SessionRings;
  auto req = shm::SpscRing<shm::ControlRequest>::Attach(
      s->region + SessionRings::ControlRequests().offset,
      SessionRings::ControlRequests().bytes);
  auto resp = shm::SpscRing<shm::ControlResponse>::Attach(
      s->region + SessionRings::ControlResponses().offset,
      SessionRings::ControlResponses().bytes);
  if (!req.ok() || !resp.ok()) return refuse("control rings are malformed");
  // The rdma_cm event ring is the daemon's to format: it writes the events.
  auto events = shm::SpscRing<shm::CmEvent>::Create(
      s->region + SessionRings::CmEvents().offset,
      SessionRings::CmEvents().bytes, SessionRings::CmEvents().capacity);
  if (!events.ok()) return refuse("the rdma_cm event ring cannot be formatted");
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
  const bool made = socketpair(AF_UNIX, kind, 0, control_pipe) == 0;
  if (!made || socketpair(AF_UNIX, kind, 0, engine_pipe) != 0) {
    if (made) {
      close(control_pipe[0]);
      close(control_pipe[1]);
    }
    RDP_LOG_EVERY(kError, 10,
                  "out of file descriptors: session of pid %d refused",
                  static_cast<int>(s->pid));
    reply.status = shm::kStatusLimit;
    std::snprintf(reply.text, sizeof(reply.text), "%s",
                  "the daemon is out of file descriptors (LimitNOFILE)");
    shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true);
    Close(s);
    return;
  }
  s->control_wake = control_pipe[0];
  s->engine_wake = std::make_unique<engine::WakeRoute>();
  s->engine_wake->fd = engine_pipe[0];
  // A kick only wakes the control loop, which serves every session's ring.
  const int wake = s->control_wake;
  if (!reactor_
           ->Add(wake,
                 [wake] {
                   uint8_t sink[64];
                   while (read(wake, sink, sizeof(sink)) > 0) {
                   }
                 })
           .ok()) {
    close(control_pipe[1]);
    close(engine_pipe[1]);
    return refuse("cannot watch the doorbell");
  }
  // Engines watch engine_pipe[0] while they serve one of the session's
  // connections (Endpoint::info().wake).
  s->requests = *req;
  s->responses = *resp;
  s->cm_events = *events;
  s->ready = true;
  if (hooks_.ready) hooks_.ready(s);
  reply.status = shm::kStatusOk;
  reply.id = s->id;
  const bool sent = shm::SendSetup(s->sock, reply, control_pipe[1],
                                   engine_pipe[1], /*dont_wait=*/true);
  close(control_pipe[1]);
  close(engine_pipe[1]);
  if (!sent) Close(s);
}

std::optional<SessionServer::ArenaCharges> SessionServer::ChargeArena(
    Session* s, uint64_t bytes, int fd) {
  auto refuse = [&](const std::string& why) -> std::optional<ArenaCharges> {
    if (fd >= 0) close(fd);
    AnswerArena(s, shm::kStatusLimit, 0, why);
    return std::nullopt;
  };
  if (s->arenas.size() >= policy_.max_arenas_per_session) {
    return refuse(absl::StrCat("--max_arenas_per_session reached: ",
                               policy_.max_arenas_per_session, " arenas"));
  }
  absl::StatusOr<UserAccounts::Charge> count =
      accounts_->Take(s->uid, Resource::kArenas);
  if (!count.ok()) return refuse(std::string(count.status().message()));
  absl::StatusOr<UserAccounts::Charge> charge_bytes =
      accounts_->Take(s->uid, Resource::kArenaBytes, bytes);
  if (!charge_bytes.ok()) {
    return refuse(std::string(charge_bytes.status().message()));
  }
  return ArenaCharges{std::move(*count), std::move(*charge_bytes)};
}

uint32_t SessionServer::AddArena(Session* s, const shm::SetupMessage& msg,
                                 uint8_t* host, int fd, size_t page_size,
                                 ArenaCharges charges) {
  Arena a;
  a.client_address = msg.address;
  a.bytes = msg.length;
  a.host = host;
  a.fd = fd;
  a.owner = arena_memory_->AdoptPages(a.host, a.bytes, page_size);
  a.charge = std::move(charges.count);
  a.bytes_charge = std::move(charges.bytes);
  const uint32_t id = next_arena_id_++;
  s->arenas[id] = std::move(a);
  return id;
}

void SessionServer::AnswerArena(Session* s, int32_t status, uint32_t id,
                                const std::string& why) {
  shm::SetupMessage reply = shm::MakeSetup(shm::kSetupArenaReply);
  reply.status = status;
  reply.id = id;
  if (status != shm::kStatusOk) {
    RDP_LOG_EVERY(kWarning, 10, "arena of pid %d refused: %s",
                  static_cast<int>(s->pid), why.c_str());
    std::snprintf(reply.text, sizeof(reply.text), "%s", why.c_str());
  }
  // A client that does not read its answers is dropped, never waited for.
  if (!shm::SendSetup(s->sock, reply, -1, -1, /*dont_wait=*/true)) Close(s);
}

void SessionServer::HandleArena(Session* s, const shm::SetupMessage& msg,
                                int fd) {
  std::optional<ArenaCharges> charges = ChargeArena(s, msg.length, fd);
  if (!charges) return;
  struct stat st{};
  const bool sized = fd >= 0 && fstat(fd, &st) == 0 && msg.length > 0 &&
                     static_cast<uint64_t>(st.st_size) >= msg.length &&
                     msg.address + msg.length > msg.address;
  // An arena may lie where older ones do in the client's address space:
  // the newest holds those addresses from now on (Session::PiecesOf).
  void* mem = MAP_FAILED;
  if (sized && SealedAgainstShrinking(fd)) {
    mem = mmap(nullptr, msg.length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (mem == MAP_FAILED) {
    if (fd >= 0) close(fd);
    return AnswerArena(s, shm::kStatusInvalid, 0,
                       "arena refused: not a sealed memfd of that size");
  }
  // Its pages may not vanish under us (arena_memory.h).
  if (absl::Status sealed = SealAgainstHoles(fd); !sealed.ok()) {
    munmap(mem, msg.length);
    close(fd);
    return AnswerArena(
        s, shm::kStatusInvalid, 0,
        "arena refused: holes could be punched in it (F_SEAL_SEAL)");
  }
  const uint32_t id = AddArena(s, msg, static_cast<uint8_t*>(mem), fd,
                               PageSizeOf(fd), std::move(*charges));
  AnswerArena(s, shm::kStatusOk, id, "");
}

namespace {

// The IPC namespace of process `pid` (its inode), or 0.
uint64_t IpcNamespaceOf(const std::string& pid) {
  struct stat st{};
  if (stat(("/proc/" + pid + "/ns/ipc").c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

// The size of the pages of this process's mapping at `addr` (smaps'
// KernelPageSize), or 0 when not found.
uint64_t KernelPageSizeAt(const void* addr) {
  FILE* f = std::fopen("/proc/self/smaps", "re");
  if (f == nullptr) return 0;
  const uint64_t at = reinterpret_cast<uint64_t>(addr);
  char line[512];
  bool inside = false;
  uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long begin = 0, end = 0;
    if (std::sscanf(line, "%llx-%llx ", &begin, &end) == 2 &&
        std::strchr(line, ':') != nullptr && line[0] != 'K') {
      inside = at >= begin && at < end;
      continue;
    }
    if (inside && std::sscanf(line, "KernelPageSize: %llu kB", &begin) == 1) {
      kib = begin;
      break;
    }
  }
  std::fclose(f);
  return kib * 1024;
}

}  // namespace

void SessionServer::HandleSegment(Session* s, const shm::SetupMessage& msg) {
  std::optional<ArenaCharges> charges = ChargeArena(s, msg.length, -1);
  if (!charges) return;
  auto refuse = [&](const char* reason) {
    AnswerArena(s, shm::kStatusInvalid, 0,
                absl::StrCat("segment refused: ", reason));
  };
  // The id names a segment of the client's IPC namespace only.
  const uint64_t ours = IpcNamespaceOf("self");
  if (ours == 0 || IpcNamespaceOf(std::to_string(s->pid)) != ours) {
    return refuse("the client is in another IPC namespace");
  }
  shmid_ds ds{};
  const int shmid = static_cast<int>(msg.id);
  if (msg.id > static_cast<uint32_t>(INT32_MAX) ||
      shmctl(shmid, IPC_STAT, &ds) != 0) {
    return refuse("no such segment");
  }
  // Only the client's own segment, readable and writable by its owner.
  if (ds.shm_perm.uid != s->uid || (ds.shm_perm.mode & 0600) != 0600) {
    return refuse("not a segment the client owns, readable and writable");
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t segment = (ds.shm_segsz + page - 1) / page * page;
  if (msg.length == 0 || msg.length > segment ||
      msg.address + msg.length < msg.address) {
    return refuse("not that size");
  }
  void* mem = shmat(shmid, nullptr, 0);
  if (mem == reinterpret_cast<void*>(-1)) return refuse("cannot attach it");
  // A segment on hugepages may lose a page to a hole punched in it
  // (MADV_REMOVE) when no free hugepage fills it again: the guard keeps the
  // daemon alive then, as for files (bus_error_guard.h). On 4 KiB pages a
  // hole only reads as zeros.
  const uint64_t page_size = KernelPageSizeAt(mem);
  if (page_size == 0 || msg.length % page_size != 0) {
    shmdt(mem);
    return refuse("not whole pages of it (hugepages)");
  }
  int watch = -1;
  if (page_size != page) {
    watch = BusErrorGuard::Watch(
        mem, (ds.shm_segsz + page_size - 1) / page_size * page_size);
    if (watch < 0) {
      shmdt(mem);
      return refuse("the daemon maps too many files in place");
    }
  }
  const uint32_t id = AddArena(s, msg, static_cast<uint8_t*>(mem), -1,
                               page_size, std::move(*charges));
  s->arenas[id].watch = watch;
  AnswerArena(s, shm::kStatusOk, id, "");
}

namespace {

// Filesystems whose files the daemon maps in place: memory (tmpfs, which
// also backs memfds, POSIX shared memory and shared anonymous memory;
// hugetlbfs) and local disks. An access to a page of a network or
// user-space filesystem (NFS, FUSE) may wait for its server -- possibly the
// client itself -- and the engine would wait with it, for every client.
bool MappableInPlace(int fd) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0) return false;
  switch (static_cast<uint64_t>(fs.f_type)) {
    case TMPFS_MAGIC:
    case HUGETLBFS_MAGIC:
    case EXT4_SUPER_MAGIC:  // also ext2 and ext3
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
    case OVERLAYFS_SUPER_MAGIC:  // containers' root, over a local disk
      return true;
    default:
      return false;
  }
}

}  // namespace

void SessionServer::HandleFile(Session* s, const shm::SetupMessage& msg,
                               int fd) {
  std::optional<ArenaCharges> charges = ChargeArena(s, msg.length, fd);
  if (!charges) return;
  auto refuse = [&](const char* reason) {
    if (fd >= 0) close(fd);
    AnswerArena(s, shm::kStatusInvalid, 0,
                absl::StrCat("file refused: ", reason));
  };
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return refuse("not a regular file");
  }
  // The descriptor is the client's right to the file: the daemon writes
  // there only what the client could.
  const int mode = fcntl(fd, F_GETFL);
  if (mode < 0 || (mode & O_ACCMODE) != O_RDWR) {
    return refuse("not open for reading and writing");
  }
  if (!MappableInPlace(fd)) {
    return refuse("not on memory or a local disk (a network or user-space "
                  "filesystem could stall the daemon)");
  }
  const uint64_t page = PageSizeOf(fd);
  const uint64_t offset = static_cast<uint64_t>(msg.id) * 4096;
  if (msg.length == 0 || msg.address + msg.length < msg.address ||
      msg.address % page != 0 || msg.length % page != 0 ||
      offset % page != 0) {
    return refuse("not whole pages of the file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (msg.length > size || offset > size - msg.length) {
    return refuse("past the end of the file");
  }
  void* mem = mmap(nullptr, msg.length, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, static_cast<off_t>(offset));
  int watch = -1;
  if (mem == MAP_FAILED && errno == EPERM) {
    // Sealed against new writable mappings: pages an arena of the client's
    // other session holds (the verbs front end's moved pages, registered
    // through a second context of the device), mapped again from there.
    // Sealed so, the memfd can neither shrink nor lose pages to a hole.
    mem = MapFromSibling(*s, st, offset, msg.length);
    if (mem == MAP_FAILED) {
      return refuse("sealed against writing, and no other session of the "
                    "process holds it");
    }
  } else if (mem == MAP_FAILED) {
    return refuse("cannot map it");
  } else {
    // Anyone who may write the file may shrink it under the mapping: the
    // guard keeps the daemon alive then (bus_error_guard.h).
    watch = BusErrorGuard::Watch(mem, msg.length);
    if (watch < 0) {
      munmap(mem, msg.length);
      return refuse("the daemon maps too many files in place");
    }
  }
  const uint32_t id = AddArena(s, msg, static_cast<uint8_t*>(mem), fd, page,
                               std::move(*charges));
  s->arenas[id].watch = watch;
  s->arenas[id].file_offset = offset;
  AnswerArena(s, shm::kStatusOk, id, "");
}

void* SessionServer::MapFromSibling(const Session& s, const struct stat& st,
                                    uint64_t offset, uint64_t length) const {
  for (const auto& [sock, other] : sessions_) {
    if (other->pid != s.pid || other->uid != s.uid) continue;
    for (const auto& [id, a] : other->arenas) {
      struct stat ast {};
      if (a.fd < 0 || a.lost() || offset < a.file_offset ||
          offset - a.file_offset > a.bytes ||
          length > a.bytes - (offset - a.file_offset) ||
          fstat(a.fd, &ast) != 0 || ast.st_dev != st.st_dev ||
          ast.st_ino != st.st_ino) {
        continue;
      }
      // old_size 0: a second mapping of the same shared pages.
      void* mem = mremap(a.host + (offset - a.file_offset), 0, length,
                         MREMAP_MAYMOVE);
      if (mem != MAP_FAILED) return mem;
    }
  }
  return MAP_FAILED;
}

void SessionServer::ReportLostFiles() {
  const uint64_t losses = BusErrorGuard::losses();
  if (losses == losses_reported_) return;
  losses_reported_ = losses;
  for (const auto& [fd, s] : sessions_) {
    for (auto& [id, a] : s->arenas) {
      if (!a.lost() || a.loss_reported) continue;
      a.loss_reported = true;
      RDP_LOG_EVERY(kWarning, 10,
                    "pid %d's file at %#llx (%llu bytes) lost pages under the "
                    "daemon's mapping (shrunk, a hole without a hugepage to "
                    "fill it, or a read error): registrations over it now "
                    "reach memory the file no longer holds, and new ones are "
                    "refused",
                    static_cast<int>(s->pid),
                    static_cast<unsigned long long>(a.client_address),
                    static_cast<unsigned long long>(a.bytes));
    }
  }
}

void SessionServer::ContinueAdminAnswer(Session* s) {
  const std::string& out = s->admin_answer;
  while (s->admin_sent < out.size()) {
    const ssize_t n = send(s->sock, out.data() + s->admin_sent,
                           out.size() - s->admin_sent,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      s->admin_sent += static_cast<size_t>(n);
      s->admin_progress = absl::Now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Room comes when the asker reads: watch for it (once).
      if (!s->admin_waits_for_room) {
        reactor_->Remove(s->sock);
        if (!reactor_->Add(s->sock, [this, s] { ContinueAdminAnswer(s); },
                           /*writable=*/true)
                 .ok()) {
          break;
        }
        s->admin_waits_for_room = true;
      }
      return;
    }
    break;  // the asker is gone
  }
  Close(s);
}

void SessionServer::DropStalledAdmin(absl::Time now) {
  std::vector<Session*> stalled;
  for (const auto& [fd, s] : sessions_) {
    if (s->admin && s->admin_waits_for_room &&
        now - s->admin_progress > kAdminStall) {
      stalled.push_back(s.get());
    }
  }
  for (Session* s : stalled) Close(s);
}

void SessionServer::Close(Session* s) {
  if (hooks_.closing && s->ready) hooks_.closing(s);
  // The engines no longer serve the session's connections, but frames they
  // sent may still point into its arenas: those stay mapped until freed.
  for (ArenaView& v : s->views) {
    arena_memory_->Release(v.host, v.bytes, -1, std::move(v.owner));
  }
  for (auto& [id, a] : s->arenas) {
    arena_memory_->Release(a.host, a.bytes, a.fd, std::move(a.owner));
  }
  if (s->control_wake >= 0) {
    reactor_->Remove(s->control_wake);
    close(s->control_wake);
  }
  // No engine serves a connection of the session any more, so none
  // watches its doorbell socket.
  if (s->engine_wake != nullptr) close(s->engine_wake->fd);
  if (s->region != nullptr) munmap(s->region, s->region_bytes);
  if (s->region_fd >= 0) close(s->region_fd);
  if (s->pidfd >= 0) close(s->pidfd);
  reactor_->Remove(s->sock);
  close(s->sock);
  if (!s->over_limit.empty()) {
    auto it = over_limit_.find(s->uid);
    if (it != over_limit_.end() && --it->second == 0) over_limit_.erase(it);
  }
  if (!s->admin) counters_->Count(&ControlCounters::sessions_reclaimed);
  sessions_.erase(s->sock);
}

}  // namespace rdmaplane::control
