// Client sessions and their arenas: the daemon's Unix socket, who may use it
// (SO_PEERCRED against the uid/gid policy), the setup messages a client
// sends on it (hello with its session region, arenas, or an operator's
// admin query), and everything a session holds in the daemon: the mapped
// session region and its rings, its doorbell sockets, the arenas it handed
// over (Translate), and its connection slots.
//
// A session ends when its client closes the socket (exit, crash, or a
// malformed message). SessionServer::Close first lets the other parts let go
// of it (SessionHooks::closing: connections, registrations, listeners), then
// releases its arenas (through ArenaMemory, which keeps mapped what frames
// still point into), descriptors and mappings.
//
// Thread-compatible: the control thread only. Engines see a session only
// through what an engine::EndpointInfo copies out of it (the header, one
// slot's rings, the wake route), valid while the engine serves the
// endpoint: Close runs `closing` (which takes every endpoint back from the
// engines) before it unmaps anything.
#ifndef RDMAPLANE_CONTROL_SESSIONS_H_
#define RDMAPLANE_CONTROL_SESSIONS_H_

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"
#include "control/arena_memory.h"
#include "control/counters.h"
#include "control/reactor.h"
#include "control/status.h"
#include "control/user_accounts.h"
#include "dataplane/engine/endpoint.h"
#include "dataplane/rc/memory_owner.h"

namespace rdmaplane::control {

struct Connection;  // connections.h

// Client memory the daemon mapped: [client_address, client_address + bytes)
// in the client's address space is host[0, bytes) here.
struct Arena {
  uint64_t client_address = 0;
  uint64_t bytes = 0;
  uint8_t* host = nullptr;
  int fd = -1;
  // Where in fd's file the mapping starts (kSetupFile; 0 for kSetupArena).
  uint64_t file_offset = 0;
  // A client's file mapped in place (kSetupFile): its BusErrorGuard watch.
  // Once the watch saw the file lose pages under the mapping, the arena
  // holds no addresses any more (PiecesOf).
  int watch = -1;
  bool lost() const;
  bool loss_reported = false;  // logged (SessionServer::ReportLostFiles)
  // Counts frames still pointing into the arena (zero-copy transmit).
  std::unique_ptr<rc::MemoryOwner> owner;
  // Its share of the user's allowances.
  UserAccounts::Charge charge;
  UserAccounts::Charge bytes_charge;
};

// Which arena holds a piece of the client's address space: [begin, end) in
// the client's address space. Where arenas overlap there, the newest (the
// highest id) holds the addresses: a client may hand over an arena where
// pages of an older one were unmapped since (the verbs front end moves such
// addresses again); registrations made before keep the older pages.
struct ArenaPiece {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint32_t arena = 0;
  bool operator==(const ArenaPiece&) const = default;
};

// A mapping of several arenas that meet in the client's address space, one
// after another as there, so that a registration across them is contiguous
// here too (the verbs front end moves a buffer's pages in several moves when
// parts of it moved before). Each piece is a second mapping of its arena's
// pages (mremap), made when a registration first needs it.
struct ArenaView {
  uint64_t client_address = 0;
  uint64_t bytes = 0;
  uint8_t* host = nullptr;
  std::vector<ArenaPiece> pieces;
  std::unique_ptr<rc::MemoryOwner> owner;
};

struct Session {
  uint32_t id = 0;
  int sock = -1;
  pid_t pid = 0;
  uid_t uid = 0;
  int pidfd = -1;  // the client process, to confirm that it exited
  UserAccounts::Charge charge;  // one of the user's sessions
  bool ready = false;  // hello done
  bool admin = false;  // an rdmaplanectl query, not a client
  gid_t gid = 0;  // the peer's primary group (SO_PEERCRED), at connect
  // Why the user may open no session (its limit was reached when this
  // connection came): only an admin query is answered.
  std::string over_limit;
  // An admin query's answer, sent as the asker reads it (never waiting in
  // the control thread): what is left from admin_sent, and when the asker
  // last took some.
  std::string admin_answer;
  size_t admin_sent = 0;
  absl::Time admin_progress;
  bool admin_waits_for_room = false;  // watched for writability
  std::unique_ptr<shm::SetupReader> setup;  // non-blocking reads
  int control_wake = -1;  // read end of the control doorbell socket
  // The read end of the engine doorbell socket, as engines watch it.
  std::unique_ptr<engine::WakeRoute> engine_wake;
  uint8_t* region = nullptr;
  uint64_t region_bytes = 0;
  int region_fd = -1;
  shm::SessionHeader* header = nullptr;
  // Attached at hello; a slot's rings formatted when the slot is first
  // handed out (ResetSlot), where shm::SessionRings puts them. Ring headers
  // are never read from client memory.
  shm::SpscRing<shm::ControlRequest> requests;
  shm::SpscRing<shm::ControlResponse> responses;
  shm::SpscRing<shm::CmEvent> cm_events;
  std::deque<shm::CmEvent> held_events;
  struct SlotRings {
    shm::SpscRing<shm::SendEntry> send;
    shm::SpscRing<shm::CompletionEntry> completion;
    shm::SpscRing<shm::RecvEntry> receive;
    // What they were formatted with.
    shm::SlotDepths depths() const {
      return {send.capacity(), receive.capacity(), completion.capacity()};
    }
  };
  std::vector<SlotRings> slots;  // by slot, as far as slots were used
  std::map<uint32_t, Arena> arenas;  // by arena id
  std::vector<ArenaView> views;      // at most kMaxViews
  static constexpr size_t kMaxViews = 64;
  Connection* connections[shm::kMaxConnections] = {};
  // Slots that hold a shared receive queue (kOpCreateSrq), and how many
  // queue pairs take receives from each.
  std::vector<uint32_t> srq_users;  // by slot; empty until the first SRQ
  bool IsSrq(uint32_t slot) const {
    return slot < srq_users.size() && srq_users[slot] != kNotSrq;
  }
  static constexpr uint32_t kNotSrq = 0xFFFFFFFF;
  std::set<std::string> listening;
  // Answers that found the response ring full, oldest first (Answer).
  std::deque<shm::ControlResponse> held;
  // UD address handles (kOpCreateAh), made with the first one or the first
  // UD queue pair; which handles are taken (set, or waiting for ARP); and
  // the creations that wait for ARP, each answered once it does (the
  // daemon's ResolveAddressHandles).
  std::unique_ptr<engine::AddressHandles> address_handles;
  std::vector<bool> address_handle_taken;
  struct PendingAddressHandle {
    uint64_t request_id = 0;
    uint32_t ip = 0;
    uint32_t handle = 0;
    uint64_t deadline_ns = 0;
    uint32_t tries = 0;
  };
  std::vector<PendingAddressHandle> pending_address_handles;
  // The address handles, made when first needed.
  engine::AddressHandles* EnsureAddressHandles();

  // The pieces of the arenas that hold [address, address + length) (each
  // as large as its arena and newer arenas allow), in address order; empty
  // when some byte of it is in no arena (or the range is empty or wraps).
  std::vector<ArenaPiece> PiecesOf(uint64_t address, uint64_t length) const;
  // Host address of [address, address + length): inside one arena, or
  // inside a view of the arenas that hold it. The mapping's owner in
  // `owner` if given. nullptr when no arena holds some byte of it, or when
  // it lies across arenas that no view maps yet (MapView).
  uint8_t* Translate(uint64_t address, uint64_t length,
                     rc::MemoryOwner** owner = nullptr) const;
  // Maps a view of the arenas that hold [address, address + length) (more
  // than one), registered with `memory` like an arena. Refused when the
  // pieces do not meet at their pages' boundaries, or are hugetlb pages
  // (which the kernel cannot map twice this way), or views are at
  // kMaxViews.
  absl::Status MapView(uint64_t address, uint64_t length,
                       ArenaMemory* memory);
  // A free connection slot whose rings hold `depths`, or -1: rings
  // deeper than a slot's take one of the deep slots (shm::kDeepSlotsAt and
  // up); others take the first free slot, deep ones last.
  int FreeSlot(const shm::SlotDepths& depths = {}) const;
  uint64_t arena_bytes() const;
  // Tells the client what became of the connection in `slot`.
  void PublishState(uint32_t slot, shm::ConnectionState state);
  // Pushes an answer to the control response ring and wakes the client.
  // Room is checked before a request is taken, but the client owns the
  // ring's consumer index and may move it between that check and the
  // answer (or fill the ring with answers of later requests while an
  // earlier one waits for a peer daemon): an answer that finds no room is
  // held, in order, and delivered by FlushHeldAnswers once the client makes
  // room. Every request taken is answered exactly once.
  void Answer(const shm::ControlResponse& response);
  // Delivers held answers while the ring has room; true if any went out
  // (the client was woken).
  bool FlushHeldAnswers();
  // Answers taken requests wait for; no new request is taken meanwhile.
  size_t held_answers() const { return held.size(); }
  // An rdma_cm event for the client (ip_cm.h): on the event ring, or, when
  // that is full, held in order until FlushHeldCmEvents finds room. The
  // client is woken either way once it is there.
  void PushCmEvent(const shm::CmEvent& event);
  bool FlushHeldCmEvents();
  size_t held_cm_events() const { return held_events.size(); }
  // Readies `slot` for a new connection: formats its rings, empty, with
  // `depths` where the layout puts them (whatever a previous user left in
  // them is gone), and resets its state words (shm::ResetSlot). The slot
  // holds `depths` (FreeSlot chose it for them).
  void ResetSlot(uint32_t slot, const shm::SlotDepths& depths = {});
};

struct SessionPolicy {
  std::vector<uid_t> allowed_uids;  // besides root and the daemon's own uid
  // Groups whose members may connect: a process's primary group, or one of
  // its supplementary groups as they were when it connected (SO_PEERGROUPS).
  std::vector<gid_t> allowed_gids;
  // Whose admin queries see every user's clients, connections and
  // registrations: root, the daemon's own uid, and members of these groups
  // (primary or supplementary). Everyone else sees only their own.
  std::vector<gid_t> admin_gids;
  // Arenas one session may hand over: each holds a descriptor and a
  // mapping in the daemon. (Users' allowances are in UserAccounts.)
  uint32_t max_arenas_per_session = 64;
};

struct SessionHooks {
  // The session is ending: let go of everything held for it (its
  // connections must be out of the engines when this returns).
  std::function<void(Session*)> closing;
  // What an admin query shows.
  std::function<DaemonStatus()> status;
  // The session finished its hello: its header is the daemon's to write.
  std::function<void(Session*)> ready;
};

// How long an admin query's asker may take nothing of its answer before
// the daemon drops it: long enough for a reader on a loaded machine (a
// sanitizer build on two busy CPUs), short enough that a client that never
// reads holds nothing for long. The control thread never waits for it.
inline constexpr absl::Duration kAdminStall = absl::Seconds(10);

class SessionServer {
 public:
  SessionServer(const SessionPolicy& policy, Reactor* reactor,
                ArenaMemory* arena_memory, UserAccounts* accounts,
                ControlCounters* counters, SessionHooks hooks);
  ~SessionServer();
  SessionServer(const SessionServer&) = delete;
  SessionServer& operator=(const SessionServer&) = delete;

  // Listens on `path` under a temporary name in the same folder, so that
  // whoever waits for `path` never finds a daemon still starting; Publish
  // renames it. Fails when another daemon serves `path`.
  absl::Status Listen(const std::string& path);
  absl::Status Publish();
  // Closes every session, as if each client had exited, and the socket.
  void Shutdown();
  // Ends admin queries whose asker took nothing of its answer for
  // kAdminStall (it does not read, or is gone without closing).
  void DropStalledAdmin(absl::Time now);
  // Logs, once each, files mapped in place that lost pages under the
  // daemon's mapping since the last call (cheap when none did).
  void ReportLostFiles();

  void Close(Session* s);

  template <typename Fn>
  void ForEachReady(Fn&& fn) {
    for (auto& [fd, s] : sessions_) {
      if (s->ready) fn(s.get());
    }
  }
  template <typename Fn>
  void ForEachReady(Fn&& fn) const {
    for (const auto& [fd, s] : sessions_) {
      if (s->ready) fn(static_cast<const Session*>(s.get()));
    }
  }
  // Sessions of clients (admin queries do not count).
  uint32_t size() const;
  uint32_t arena_count() const;

 private:
  void AcceptClients();
  // Out of file descriptors: accepts one waiting client with the spare
  // descriptor to tell it so, rather than leave it waiting (and the
  // listening socket readable for ever).
  void RefuseForLackOfDescriptors();
  // The uid/gid policy for the peer of `sock` (credentials `cred`): root,
  // the daemon's own uid, SessionPolicy::allowed_uids, and members (primary
  // or supplementary) of allowed_gids.
  bool Allowed(int sock, const ucred& cred) const;
  // Whether the asker of an admin question on `s` may see every user's
  // details (SessionPolicy::admin_gids); else it sees its own.
  bool SeesAll(const Session& s) const;
  void OnReadable(Session* s);
  // Sends what the socket takes of an admin answer; closes the session once
  // all is out or the asker is gone, else waits for room (writable).
  void ContinueAdminAnswer(Session* s);
  void HandleHello(Session* s, const shm::SetupMessage& msg, int fd);
  void HandleArena(Session* s, const shm::SetupMessage& msg, int fd);
  // kSetupSegment: a SysV shared memory segment of the client's (its id),
  // attached here rather than moved by the client; refused (and the client
  // moves its pages instead) when it is not the client's own or lies in
  // another IPC namespace. One on hugepages is watched for lost pages
  // (BusErrorGuard).
  void HandleSegment(Session* s, const shm::SetupMessage& msg);
  // kSetupFile: a file the client maps shared, as its descriptor `fd`:
  // mapped here too and watched for lost pages (BusErrorGuard).
  void HandleFile(Session* s, const shm::SetupMessage& msg, int fd);
  // An arena's share of the session's and the user's allowances.
  struct ArenaCharges {
    UserAccounts::Charge count;
    UserAccounts::Charge bytes;
  };
  // Or, beyond an allowance, answers the client why (kStatusLimit), closes
  // `fd` (unless -1) and returns nullopt.
  std::optional<ArenaCharges> ChargeArena(Session* s, uint64_t bytes, int fd);
  // Keeps memory mapped at `host` as the arena the client has at
  // msg.address; its id.
  // A new mapping of the pages [offset, offset + length) of the file `st`
  // describes, made from the mapping of an arena another session of the
  // same process (pid and uid) holds, or MAP_FAILED when none holds them
  // all: for a memfd sealed against new writable mappings
  // (SealAgainstHoles), which the client's other session handed over.
  void* MapFromSibling(const Session& s, const struct stat& st,
                       uint64_t offset, uint64_t length) const;
  uint32_t AddArena(Session* s, const shm::SetupMessage& msg, uint8_t* host,
                    int fd, size_t page_size, ArenaCharges charges);
  void AnswerArena(Session* s, int32_t status, uint32_t id,
                   const std::string& why);
  void Forget(Session* s);

  SessionPolicy policy_;
  Reactor* reactor_;
  ArenaMemory* arena_memory_;
  UserAccounts* accounts_;
  ControlCounters* counters_;
  SessionHooks hooks_;
  int spare_fd_ = -1;  // given up to accept when descriptors run out
  int listen_fd_ = -1;
  std::string path_;
  std::string starting_path_;  // where the socket is bound until Publish
  std::map<int, std::unique_ptr<Session>> sessions_;  // by socket fd
  // Connections of users at their session limit, waiting for an admin
  // query, per user; at most kOverLimitPerUser each.
  static constexpr int kOverLimitPerUser = 8;
  std::map<uid_t, int> over_limit_;
  uint32_t next_session_id_ = 1;
  uint32_t next_arena_id_ = 1;
  uint64_t losses_reported_ = 0;  // BusErrorGuard::losses() seen
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_SESSIONS_H_
