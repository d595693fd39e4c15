// librdmaplane's C++ interface. Control-path calls return absl::Status or
// StatusOr (their rdp_status code is in the payload, see status.h); the
// seed-shaped data-path calls return rdp_status codes directly, never
// allocate and never block unless told to wait.
//
// Thread-compatible: see rdmaplane.h for which calls may run concurrently.
#ifndef RDMAPLANE_API_CLIENT_H_
#define RDMAPLANE_API_CLIENT_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"

namespace rdmaplane {
namespace memory {
struct MovedPages;   // client_memory.h
struct MappedRange;  // page_mover.cc
}  // namespace memory

struct ClientOptions {
  std::string socket_path;           // empty: shm::DefaultSocketPath()
  size_t arena_bytes = 64ull << 20;  // size of each arena
  enum class Hugepages { kAuto, kOn, kOff };
  Hugepages hugepages = Hugepages::kAuto;
  absl::Duration control_timeout = absl::Seconds(5);
};

class Client {
 public:
  // What a request posted without an overlapped structure of the poster's
  // (the verbs front end's posts) carries to its completion: the ledger
  // keeps the request in an overlapped structure of its own, whose context
  // is `context` and internal[1] `kind` (internal[0] holds the
  // shm::CompletionDetail of a failure). Poll lists that structure as it
  // lists a caller's; it stays as it is until the connection's next post.
  struct Tag {
    uint64_t context = 0;
    uint32_t kind = 0;
  };

  static absl::StatusOr<std::unique_ptr<Client>> Open(
      const ClientOptions& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Arena memory.
  void* Alloc(size_t bytes);
  absl::Status Free(void* ptr);
  // True when the arenas are backed by hugepages.
  bool hugepages() const { return hugepages_; }

  // With `pd` (a protection domain of AllocPd), the key serves only that
  // domain's queue pairs (a verbs MR's lkey).
  absl::StatusOr<uint32_t> RegisterMemory(
      void* addr, uint64_t length, uint32_t flags,
      std::optional<uint32_t> pd = std::nullopt);
  absl::Status DeregisterMemory(uint32_t lkey);

  absl::Status Listen(absl::string_view service);
  absl::StatusOr<rdp_conn> Accept(absl::string_view service,
                                  absl::Duration timeout);
  // Connects to `service` at the daemon of this host, or, with `peer` (an
  // IPv4 address of another daemon's data port), at that daemon.
  absl::StatusOr<rdp_conn> Connect(absl::string_view service,
                                   absl::string_view peer = "");
  absl::Status Disconnect(rdp_conn conn);

  int RegisterRdmaMemory(rdp_conn conn, void* buffer, uint32_t length,
                         uint32_t flags, void* descriptor,
                         uint32_t* descriptor_length);
  int DeregisterRdmaMemory(rdp_conn conn, const void* descriptor,
                           uint32_t descriptor_length);
  int Write(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
            const void* target_descriptor, uint32_t descriptor_length,
            uint32_t target_offset, uint32_t flags, rdp_overlapped* ov);
  int Read(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
           uint64_t remote_address, const void* remote_token,
           uint32_t token_length, uint32_t flags, rdp_overlapped* ov);
  int Flush(rdp_conn conn);
  int Poll(rdp_conn conn, rdp_overlapped** done, int max);
  int GetOverlappedResult(rdp_conn conn, rdp_overlapped* ov, bool wait,
                          uint32_t* bytes);

  uint32_t session_id() const { return session_id_; }

  // --- For the verbs front end (api/verbs; client_verbs.cc) ---------------
  // Shares the pages under [addr, addr + length) with the daemon where they
  // are: their contents move onto a shared memfd mapped at the same
  // addresses (MAP_FIXED), which the daemon maps as an arena. Pages of the
  // range moved before stay; each run of the others moves with those of
  // its whole mapping when that is at most 16 MiB, else of a 2 MiB window
  // around it inside the mapping, outside pages moved before. The daemon
  // maps a registration across several moves contiguously. While pages
  // move, writes to them from other threads wait (userfaultfd write
  // protection, where the kernel allows it) and then land in the shared
  // pages. Pages of a move that the application unmapped since are
  // forgotten: what is mapped there now moves again. RDP_ERR_INVALID when
  // the range overlaps pages moved by another Client of this process, or
  // is not private anonymous read-write memory (a file or shared mapping),
  // or lies in the mapping of the calling thread's stack; RDP_ERR_FAULT
  // when part of it is not mapped. The pages stay shared until the client
  // closes (and stay mapped after it, with their contents).
  absl::Status ShareMemory(void* addr, uint64_t length);
  absl::StatusOr<uint32_t> AllocPd();
  absl::Status DeallocPd(uint32_t pd);
  // A memory window of `type` (1 or 2) in protection domain `pd`: its first
  // rkey. DeallocMw takes any rkey of it.
  absl::StatusOr<uint32_t> AllocMw(uint32_t pd, uint32_t type);
  absl::Status DeallocMw(uint32_t rkey);
  // An RDMA registration in protection domain `pd`: its rkey, which every
  // queue pair of the domain serves. `flags`: RDP_MEM_READ / RDP_MEM_WRITE
  // and shm::kAccessAtomic, at least one of them.
  absl::StatusOr<uint32_t> RegisterPdMemory(uint32_t pd, void* addr,
                                            uint64_t length, uint32_t flags);
  absl::Status DeregisterPdMemory(uint32_t pd, uint32_t rkey, void* addr,
                                  uint64_t length, uint32_t flags);
  // A connection handle is the slot's generation above the slot number.
  static constexpr uint32_t kSlotBits = 11;
  static constexpr uint32_t kSlotMask = (1u << kSlotBits) - 1;
  static_assert(shm::kMaxConnections <= (1u << kSlotBits));
  struct QueuePair {
    rdp_conn conn = 0;
    uint32_t qpn = 0;
  };
  // A queue pair in `pd`, connected out of band by ModifyQueuePair; ended
  // by Disconnect.
  // With `srq` (CreateSharedReceiveQueue's handle) its receives come from
  // that queue.
  // `send_depth` and `recv_depth`: the requests its send and receive rings
  // must hold (up to shm::kMaxSendRingEntries and kMaxRecvRingEntries;
  // 0: a native connection's depths).
  absl::StatusOr<QueuePair> CreateQueuePair(
      uint32_t pd, shm::QpService service = shm::kQpServiceRc,
      rdp_conn srq = 0, uint32_t send_depth = 0, uint32_t recv_depth = 0);
  // A shared receive queue in `pd`: receives posted to its handle
  // (PostRecv) serve the queue pairs created with it, whose completion
  // rings report them. Ended by DestroySharedReceiveQueue, which fails
  // while a queue pair still uses it.
  absl::StatusOr<rdp_conn> CreateSharedReceiveQueue(uint32_t pd,
                                                    uint32_t depth = 0);
  absl::Status DestroySharedReceiveQueue(rdp_conn srq);
  absl::Status ModifyQueuePair(rdp_conn conn, shm::QpTransition to,
                               const shm::QpPeer& peer);
  // kQpToReset: the queue pair as new, with the same QPN and slot, under a
  // new handle (the old one names nothing from now on). Every request of
  // the old handle must have been reported first (it is at ERR, drained).
  absl::StatusOr<rdp_conn> ResetQueuePair(rdp_conn conn);
  absl::StatusOr<shm::DeviceInfo> QueryDevice();
  // The session's setup socket: its peer shuts down (POLLRDHUP) when the
  // daemon ends the session or dies. For a watcher that waits on it with
  // poll(2); only the client reads it (the answers of setup messages).
  int session_fd() const { return sock_; }
  // Posts a WRITE, READ or SEND (shm::kSendWrite / kSendRead / kSendSend)
  // of the SGL; a WRITE or READ to the peer's memory at remote_address
  // under rkey, which the peer's daemon checks. `flags` may add
  // shm::kFlagImmediate (with `imm`, as on the wire) and kFlagSolicited.
  // Otherwise as Write, except that the request's overlapped structure is
  // the ledger's own (see Tag). Returns RDP_PENDING, or the error of a
  // request refused here.
  int PostVerbs(rdp_conn conn, uint8_t op, const rdp_sge* sgl,
                uint32_t sge_count, uint64_t remote_address, uint32_t rkey,
                uint32_t flags, uint32_t imm, const Tag& tag);
  // Posts an atomic (shm::kSendCompareSwap with `compare` and `swap_add`,
  // or shm::kSendFetchAdd adding `swap_add`) on the peer's 8-byte word at
  // remote_address under rkey, which the peer's daemon checks (an address
  // not 8-byte aligned fails there, with shm::kDetailRemoteInvalid). `sge`
  // is the one 8-byte buffer the word as it was lands in (another length:
  // RDP_ERR_INVALID). `flags` as PostVerbs's, without kFlagImmediate. The
  // completion's bytes are 8.
  int PostAtomic(rdp_conn conn, uint8_t op, const rdp_sge& sge,
                 uint64_t remote_address, uint32_t rkey, uint64_t compare,
                 uint64_t swap_add, uint32_t flags, const Tag& tag);
  // Posts a memory window request, carried out in order after every
  // request posted before it: shm::kSendBindMw binds window `rkey` under
  // `bound_rkey` to `sge` (its address and length, and the lkey of the
  // region it lies in; null: a type 1 window is unbound) with
  // `bind_bits` (shm::kBind*); shm::kSendLocalInvalidate invalidates
  // `rkey`. `flags`: RDP_FLAG_SILENT_SUCCESS, RDP_FLAG_DEFER,
  // RDP_FLAG_READ_FENCE. The completion's bytes are 0.
  int PostMemoryWindow(rdp_conn conn, uint8_t op, const rdp_sge* sge,
                       uint32_t rkey, uint32_t bound_rkey, uint64_t bind_bits,
                       uint32_t flags, const Tag& tag);
  // Posts a UD queue pair's SEND of the SGL (one packet: at most the path
  // MTU) to queue pair `remote_qpn` where address handle `ah` points, under
  // `remote_qkey` (top bit set: the queue pair's own). `flags` as
  // PostVerbs's.
  int PostDatagram(rdp_conn conn, const rdp_sge* sgl, uint32_t sge_count,
                   uint32_t ah, uint32_t remote_qpn, uint32_t remote_qkey,
                   uint32_t flags, uint32_t imm, const Tag& tag);
  // Requests of the connection posted and not ended (those Poll has not
  // listed yet included): its send queue's occupancy.
  uint32_t Outstanding(rdp_conn conn) const;
  // Ends every request of the connection left (the daemon did not end
  // them) with `status`, listing up to max of their overlapped structures
  // in done; returns how many it listed.
  int Abandon(rdp_conn conn, int32_t status, rdp_overlapped** done, int max);
  // A UD address handle for the IPv4 address `ip` (host order), once the
  // daemon knows its MAC (RDP_ERR_TIMEOUT when ARP did not answer).
  absl::StatusOr<uint32_t> CreateAddressHandle(uint32_t ip);
  absl::Status DestroyAddressHandle(uint32_t ah);
  // Posts a receive request (SEND's target) named wr_id; RDP_ERR_NO_BUFFERS
  // when the receive ring is full.
  int PostRecv(rdp_conn conn, uint64_t wr_id, const rdp_sge* sgl,
               uint32_t sge_count);
  // True once the daemon is done with conn (or the daemon is gone): every
  // completion it made is in the rings (acquire), the rest end with its
  // final status.
  bool ConnectionEnded(rdp_conn conn);
  // Whether the connection's queue pair has accepted a packet of its peer
  // (shm::SessionHeader::established).
  bool Established(rdp_conn conn) const;

  // rdma_cm ids (the daemon's RDMA IP CM service, control/ip_cm.h): one
  // kOpCm* request with its arguments; the answer (an error status with
  // its text, or the request's result in key and connection).
  shm::ControlResponse CmCall(uint32_t op, const shm::CmParams& params);
  // Takes the next rdma_cm event of this session, waiting at most
  // timeout_ns for one (0: not at all; negative: until one comes or the
  // daemon is gone). False when none came.
  bool TakeCmEvent(shm::CmEvent* event, int64_t timeout_ns);
  // True once the daemon is gone (its session's socket hung up).
  bool DaemonGone() { return !DaemonAlive(); }
  // The connection's shm::ConnectionState as the daemon published it
  // (kConnFree for a handle that names none).
  uint32_t ConnectionStateOf(rdp_conn conn) const {
    const int slot = SlotOf(conn);
    return slot < 0 ? uint32_t{shm::kConnFree}
                    : header_->connection_state[slot].load(
                          std::memory_order_acquire);
  }
  // The daemon's port state word (shm::SessionHeader::port_state).
  uint32_t PortState() const {
    return header_->port_state.load(std::memory_order_acquire);
  }
  // Takes up to max receive completions (op shm::kRecv or kRecvWriteImm)
  // that Poll set aside, in order.
  int TakeReceived(rdp_conn conn, shm::CompletionEntry* out, int max);
  // Sleeps until conn's completion ring holds an entry, the connection
  // ended, or timeout_ns passed; true unless it timed out. May run on
  // another thread than the one using conn, while conn stays open.
  bool WaitForCompletions(rdp_conn conn, int64_t timeout_ns);

 private:
  struct Arena {
    uint8_t* base = nullptr;
    size_t bytes = 0;
    int fd = -1;
    uint32_t id = 0;
    std::map<size_t, size_t> free_blocks;  // offset -> length
    std::map<size_t, size_t> used_blocks;  // offset -> length
    // The caller's own pages (ShareMemory): never allocated from, and left
    // mapped when the client closes.
    bool shared_in_place = false;
  };

  // A request posted and not ended yet: its overlapped structure, waiting
  // for a completion entry, a silent retirement or the connection's end.
  struct Pending {
    rdp_overlapped* ov = nullptr;  // the poster's, or &own
    uint32_t flags = 0;
    bool done = false;
    // The request's overlapped structure when its poster keeps none (the
    // verbs front end posts with a Tag): the one record of the request on
    // this side of the daemon.
    rdp_overlapped own{};
  };
  // Requests one connection may have posted and not ended (deferred, in
  // the send ring, taken by the engine, and completed but not reaped): four
  // times its send ring's depth.
  static constexpr uint32_t kLedgerPerSendEntry = 4;

  struct Connection {
    bool open = false;
    // Part of the handle (rdp_conn), so that a stale handle never names the
    // slot's next connection.
    uint32_t generation = 0;
    shm::SpscRing<shm::SendEntry> send;
    shm::SpscRing<shm::CompletionEntry> completion;
    std::vector<shm::SendEntry> deferred;  // reserved at connect time
    uint32_t deferred_count = 0;
    // Every request posted and not ended, by its index (sent as wr_id):
    // [head, posted) modulo ledger_size (a power of two). Reserved at
    // connect time.
    std::unique_ptr<Pending[]> ledger;
    uint32_t ledger_size = 0;
    Pending& Ledger(uint32_t index) {
      return ledger[index & (ledger_size - 1)];
    }
    uint32_t posted = 0;  // index of the next request
    uint32_t head = 0;    // the oldest request not ended
    uint32_t silent = 0;  // silent requests among them
    // Receives (verbs): the ring, and the completions Reap set aside for
    // TakeReceived, [received_head, received_tail) modulo received_size:
    // at most one per receive in the ring and one per receive the daemon
    // holds, twice the receive ring's depth.
    shm::SpscRing<shm::RecvEntry> receive;
    std::unique_ptr<shm::CompletionEntry[]> received;
    uint32_t received_size = 0;
    shm::CompletionEntry& Received(uint32_t index) {
      return received[index & (received_size - 1)];
    }
    uint32_t received_head = 0;
    uint32_t received_tail = 0;
  };

  Client() = default;
  absl::Status Init(const ClientOptions& options);
  // The slot of a connection handle; -1 unless it names an open
  // connection.
  int SlotOf(rdp_conn conn) const;
  // The verbs posts' common end: the connection's slot, the SGL into *e,
  // and Submit.
  int PostEntry(rdp_conn conn, shm::SendEntry* e, const rdp_sge* sgl,
                uint32_t sge_count, uint32_t flags, const Tag& tag);
  // A control request of `op` naming `key`; the key the answer names.
  absl::StatusOr<uint32_t> CallForKey(uint32_t op, uint32_t key);
  rdp_conn HandleOf(uint32_t slot) const;
  // Ends the work of every connection (rdp_close): the daemon takes them all
  // back, then every request not completed ends as aborted.
  void CloseAll();
  absl::StatusOr<Arena*> NewArena(size_t min_bytes);
  // Hands a mapped arena to the daemon; its id is set on success.
  absl::Status HandOver(Arena* arena);
  // kSetupSegment: hands the daemon a SysV segment of this process by id,
  // attached at `address`; the arena's id.
  absl::StatusOr<uint32_t> HandOverSegment(uint32_t shmid, uint64_t address,
                                           uint64_t length);
  // kSetupFile: hands the daemon `fd`, the file this process maps shared at
  // `address` from byte `offset` of it (a multiple of 4096); the arena's id.
  absl::StatusOr<uint32_t> HandOverFile(int fd, uint64_t address,
                                        uint64_t length, uint64_t offset);
  absl::Status ShareFile(const memory::MappedRange& vma, uint64_t start,
                         uint64_t end, std::vector<memory::MovedPages>& moved);
  // Sends an arena message (with `fd`, or none) and takes the answer: the
  // arena's id.
  absl::StatusOr<uint32_t> SendArena(const shm::SetupMessage& msg, int fd);
  bool ShareSegment(const std::vector<memory::MappedRange>& maps,
                    const memory::MappedRange& vma,
                    std::vector<memory::MovedPages>& moved);
  // ShareMemory's move of the pages under [start, end) of the mapping
  // [vma_begin, vma_end), with its window; adds it to `moved`.
  absl::Status MoveWindow(uint64_t vma_begin, uint64_t vma_end,
                          uint64_t start, uint64_t end,
                          std::vector<memory::MovedPages>& moved);
  // Whether [addr, addr + len) lies inside one arena.
  bool InArenas(const void* addr, uint64_t len) const;
  // One control request/response round trip on the control rings.
  shm::ControlResponse Call(shm::ControlRequest request);
  absl::Status CallStatus(shm::ControlRequest request,
                          shm::ControlResponse* response = nullptr);
  // Error for posting on slot `slot` (-1: no such connection), or RDP_OK.
  int ConnectionError(int slot) const;
  // `ov` null: the ledger's own, carrying `tag`.
  int Post(uint32_t slot, shm::SendEntry& entry, rdp_overlapped* ov,
           bool defer, const Tag* tag = nullptr);
  // Fills the common fields of `e`, posts it for `ov` and wakes the engine.
  int Submit(uint32_t slot, shm::SendEntry& e, uint32_t flags,
             rdp_overlapped* ov);
  // ... for the ledger's own overlapped structure, carrying `tag`.
  int SubmitTagged(uint32_t slot, shm::SendEntry& e, uint32_t flags,
                   const Tag& tag);
  int PushDeferred(Connection& c);
  void KickEngine(uint32_t slot);
  // Applies completions of `slot` (listing up to max in done, when given),
  // retires silent successes, and once the daemon is done with the
  // connection ends every request left with its final status. Returns how
  // many requests it listed (or ended, without `done`).
  int Reap(uint32_t slot, rdp_overlapped** done, int max);
  // Applies one completion entry to its request; returns its overlapped
  // structure, or nullptr for an entry that names none of ours.
  rdp_overlapped* Apply(Connection& c, const shm::CompletionEntry& e);
  // Forgets the silent requests before index `retired`: they succeeded
  // (and are never reported).
  void RetireSilent(Connection& c, uint32_t retired);
  // Ends requests left in the ledger with `status`, at most max when
  // listing them in done.
  int EndRemaining(Connection& c, int32_t status, rdp_overlapped** done,
                   int max);
  // The status the connection's unfinished requests end with: the
  // daemon's, or, once the daemon is gone, RDP_ERR_CONN_ABORTED; 0 while
  // they may still complete.
  int32_t FinalStatus(uint32_t slot);
  // Reaps what is left and ends the rest (the daemon let go of the
  // connection, or cannot be reached: then with `fallback`), and frees the
  // slot.
  void EndConnection(uint32_t slot, int32_t fallback);
  // Checks the setup socket; remembers a dead daemon in daemon_down_.
  bool DaemonAlive();
  // DaemonAlive, at most every 100 ms (for polling loops).
  bool DaemonAliveRateLimited();
  rdp_conn AttachConnection(uint32_t slot);

  ClientOptions options_;
  int sock_ = -1;
  int session_fd_ = -1;
  int control_eventfd_ = -1;  // this session's doorbell sockets
  int engine_eventfd_ = -1;
  uint32_t session_id_ = 0;
  uint8_t* region_ = nullptr;
  size_t region_bytes_ = 0;
  shm::SessionHeader* header_ = nullptr;
  bool hugepages_ = false;
  bool warned_no_hugepages_ = false;
  // Set once the daemon is known to be gone; posts then fail at once.
  std::atomic<bool> daemon_down_{false};
  std::atomic<int64_t> daemon_checked_ns_{0};
  // The liveness mutex in the session header is locked (see layout.h), by
  // this thread.
  bool liveness_locked_ = false;
  pid_t liveness_owner_ = 0;

  std::mutex control_mu_;
  shm::SpscRing<shm::ControlRequest> requests_ ABSL_GUARDED_BY(control_mu_);
  shm::SpscRing<shm::ControlResponse> responses_ ABSL_GUARDED_BY(control_mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(control_mu_) = 1;

  std::mutex cm_mu_;  // the consumer of the rdma_cm event ring
  shm::SpscRing<shm::CmEvent> cm_events_ ABSL_GUARDED_BY(cm_mu_);

  std::mutex arena_mu_;
  std::vector<std::unique_ptr<Arena>> arenas_ ABSL_GUARDED_BY(arena_mu_);

  Connection connections_[shm::kMaxConnections];
};

}  // namespace rdmaplane

#endif  // RDMAPLANE_API_CLIENT_H_
