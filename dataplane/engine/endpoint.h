// One end of a connection as an engine serves it: the client's send and
// completion rings, the RC queue pair, the adapters that connect the QP to
// the registration table and to the completion ring, and its link: either
// the in-process loopback link to a peer endpoint of the same daemon (the
// frame queue the peer's transmissions land in), or the engine's DPDK port
// towards a peer in another daemon (the engine hands it received frames).
//
// Every request the endpoint takes from the client's send ring ends exactly
// once, and the endpoint is its one owner: it completes it with an entry on
// the completion ring (success, or an error the request itself met), or
// retires it silently (a silent success), or -- when the connection closes
// (Close, the first reason wins) -- leaves it to the close: PublishFinal
// tells the client how many requests were retired in order and the status
// every other request it posted ends with, and the endpoint pushes nothing
// after that. Requests still in the send ring are never taken after the
// close; the client ends them with the same status.
//
// Before its requests touch a client's memory, the endpoint checks that the
// client, and for a connection inside the daemon the peer's client, still
// lives (shm::SessionOwnerMaybeGone, confirmed with the process's pidfd): a
// request posted after the peer's process died completes as reset.
//
// Created and destroyed by the control plane; between Engine::AddPair and
// the acknowledgement of Engine::RemovePair it is used by the engine thread
// only (the control thread may Close an endpoint no engine serves).
#ifndef RDMAPLANE_DATAPLANE_ENGINE_ENDPOINT_H_
#define RDMAPLANE_DATAPLANE_ENGINE_ENDPOINT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/engine/close_reason.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/rc/interfaces.h"
#include "dataplane/rc/qp.h"
#include "dataplane/rc/sgl.h"
#include "dataplane/rc/stat_counter.h"

namespace rdmaplane::engine {

// CLOCK_MONOTONIC, read once per engine turn: between BeginTurn and
// EndTurn, NowNs on the calling thread returns the time BeginTurn read, so
// that a turn serving many QPs (each checking its timers) reads the clock
// once. Elsewhere (other threads, an engine between turns) it reads the
// clock.
class MonotonicClock : public rc::Clock {
 public:
  uint64_t NowNs() const override;
  static void BeginTurn();
  static void EndTurn();
};

// Fixed-size FIFO of frames, filled by the peer's transmitter: the loopback
// link. Single producer and consumer, both the engine thread.
class FrameQueue {
 public:
  static constexpr uint32_t kSlots = 512;
  static constexpr uint32_t kSlotBytes = 4352;  // 4096 MTU + headers

  FrameQueue();
  std::span<uint8_t> Reserve(size_t len);
  void Commit(size_t len);
  // Oldest frame, or an empty span.
  std::span<const uint8_t> Front() const;
  void Pop() { ++head_; }
  bool empty() const { return head_ == tail_; }
  uint32_t size() const { return tail_ - head_; }

 private:
  std::unique_ptr<uint8_t[]> frames_;
  uint32_t lengths_[kSlots];
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
};

// Transmits into the peer's FrameQueue, through an optional fault model.
class LoopbackTx : public rc::FrameSink {
 public:
  explicit LoopbackTx(const fault::FaultSpec& faults) : faults_(faults) {}
  void Connect(FrameQueue* peer_rx) { peer_rx_ = peer_rx; }
  std::span<uint8_t> Reserve(size_t max_len) override;
  void Commit(size_t len) override;

 private:
  FrameQueue* peer_rx_ = nullptr;
  fault::FaultModel faults_;
  bool reserved_in_peer_ = false;
};

// A client session's wake-up socket as the engines see it (the read end of
// the socket pair whose other end the client rings after posting to a
// sleeping engine). Each engine serving one of the session's connections
// watches it; the one that drains a kick wakes the others that serve the
// session, so a kick meant for one engine is never lost to another.
// Owned by the control plane, which frees it only once no engine serves the
// session (every endpoint naming it was removed).
struct WakeRoute {
  static constexpr uint32_t kMaxEngines = 32;
  int fd = -1;
  // Whether the engine reads the fd empty when it fires (an eventfd, a
  // socket of kicks); false for one that stays readable while there is
  // work and must not be read (af_packet's socket).
  bool drain = true;
  // Bit i: engine i watches the socket. Set and cleared by engine i;
  // read by the others when they forward a kick.
  std::atomic<uint32_t> engines{0};
  // Endpoints of the session engine i serves; engine i only.
  uint32_t endpoints[kMaxEngines] = {};
};

// A session's UD address handles (kOpCreateAh): where each sends, by
// handle. The control thread sets and clears a handle; the engines read it
// when a UD queue pair's SEND names it. Each word is atomic, so a handle
// the client destroys while it still posts to it reads as gone, or as a
// mix of its own handles' addresses: it harms no one else.
class AddressHandles {
 public:
  static constexpr uint32_t kCount = shm::kMaxAddressHandles;
  void Set(uint32_t handle, uint32_t ip, const wire::MacAddr& mac);
  void Clear(uint32_t handle);
  // The handle's destination into dest->ip and dest->mac; false when it is
  // not set.
  bool Lookup(uint32_t handle, rc::DatagramDest* dest) const;

 private:
  static constexpr uint64_t kValid = uint64_t{1} << 48;
  struct Slot {
    std::atomic<uint64_t> mac_valid{0};  // MAC in the low 48 bits
    std::atomic<uint32_t> ip{0};
  };
  Slot slots_[kCount];
};

struct EndpointInfo {
  uint32_t connection_id = 0;  // the connection end (shm scope), for errors
  // Scope of the registrations peers may reach through this endpoint: the
  // connection end's, or a verbs protection domain's.
  uint32_t registration_scope = 0;
  // The remote operations the responder serves (mr::kAccessRemote* bits;
  // a verbs queue pair's qp_access_flags): others are refused as a remote
  // access error (NAK), whatever the key.
  uint8_t remote_access = mr::kAccessRemote;
  uint32_t session_id = 0;     // owner, for local keys
  shm::SessionHeader* header = nullptr;
  uint32_t slot = 0;          // connection slot in the session
  WakeRoute* wake = nullptr;  // the session's, or null (nothing to watch)
  shm::SpscRing<shm::SendEntry> send;
  shm::SpscRing<shm::CompletionEntry> completion;
  // Receive requests: given only to verbs queue pairs (over a port); left
  // invalid, no receive is ever looked for.
  shm::SpscRing<shm::RecvEntry> receive;
  // `receive` is a shared receive queue's, which other endpoints of the
  // same engine take from too: a receive is taken only when a message
  // needs one, one at a time.
  bool shared_receive = false;
  // The client process (pidfd_open), to confirm that it exited when its
  // liveness mutex says it may have; -1: no such check. Not owned.
  int owner_pidfd = -1;
  // The session's address handles: UD queue pairs only. Not owned; lives
  // as long as the session.
  const AddressHandles* address_handles = nullptr;
  rc::QpConfig qp;
};

// What an engine's endpoints took from their clients, summed over the
// endpoints' lives (the engine's thread writes, anyone reads).
struct EngineLoad {
  rc::StatCounter requests;
  rc::StatCounter bytes;  // the requests' payload
};

struct EndpointStats {
  rc::StatCounter posted;
  rc::StatCounter completed;
  rc::StatCounter local_key_errors;
  // Remote operations the queue pair does not serve (its qp_access_flags).
  rc::StatCounter access_refused_by_qp;
  rc::StatCounter bad_entries;
  rc::StatCounter rx_rejected;
  rc::StatCounter direct;  // requests carried out directly (same engine)
  rc::StatCounter completions_lost;  // the client's completion ring was broken
};

class Endpoint : public rc::RemoteMemory, public rc::CompletionSink {
 public:
  // `port_tx` null: an in-process link to a peer endpoint (see Wire), with
  // `faults` on its transmit side. Otherwise frames go out through
  // `port_tx` and come in through HandleFrame.
  Endpoint(const EndpointInfo& info, mr::RegistrationTable* table,
           const rc::Clock* clock, const fault::FaultSpec& faults,
           rc::FrameSink* port_tx = nullptr);
  ~Endpoint() override;

  // Engine thread. Moves work: client requests in, frames in, frames and
  // completions out. Returns how much it did (0: idle).
  uint32_t Poll(uint32_t budget);
  // The connection ends (the first reason wins): every request taken and
  // not yet finished is released without a completion, and the client is
  // told (shm::PublishFinal) how many were retired and how the rest end.
  // The engine thread while it serves the endpoint; the control thread
  // when no engine does (or never did).
  void Close(CloseReason reason);
  bool closed() const { return closed_; }
  CloseReason close_reason() const { return close_reason_; }
  bool HasWork() const;
  uint64_t next_timer_ns() const { return qp_->timer_deadline_ns(); }
  void SetIdle(bool idle);
  // Tells the client what became of the connection.
  void PublishState(shm::ConnectionState state);

  void Wire(Endpoint* peer);
  // rc::RcQp::StartRequester; the engine thread while it serves the
  // endpoint.
  bool StartRequester(const rc::RequesterSettings& s) {
    return qp_->StartRequester(s);
  }
  // The remote operations the responder serves and its RNR timer, from
  // now on (verbs: an attribute-only modify); the engine thread while it
  // serves the endpoint.
  void ModifyResponder(const rc::ResponderSettings& s) {
    info_.remote_access = s.remote_access;
    qp_->SetMinRnrTimer(s.min_rnr_timer);
  }
  // A port endpoint learns its peer's QP, first PSN and MAC from the
  // connection manager; before the engine serves it (control thread).
  void SetPeer(wire::Qpn remote_qpn, wire::Psn recv_psn,
               const wire::MacAddr& mac);
  // A frame for this endpoint's QP arrived on the port (engine thread).
  void HandleFrame(const wire::ParsedPacket& pkt);
  // True once, after a transport error (or its client's death) closed a
  // port endpoint: the engine tells the control plane, which tells the
  // peer daemon.
  bool TakeTransportError();
  bool remote() const { return rx_ == nullptr; }
  const EndpointInfo& info() const { return info_; }
  const EndpointStats& stats() const { return stats_; }
  // The engine that serves it counts its requests here (engine thread).
  void set_load(EngineLoad* load) { load_ = load; }
  const rc::QpStats& qp_stats() const { return qp_->stats(); }
  // Why the queue pair broke (rc::RcQp::error_status).
  rc::WcStatus qp_error() const { return qp_->error_status(); }
  Endpoint* peer() const { return peer_; }

  // rc::RemoteMemory
  rc::ResolvedMemory Resolve(wire::Qpn local_qpn, wire::Rkey rkey, uint64_t va,
                             uint32_t len, rc::RemoteAccess access) override;
  void Release(wire::Rkey rkey) override;
  bool Invalidate(wire::Qpn local_qpn, wire::Rkey rkey) override;
  bool ReceiveBuffersLive(const rc::WorkRequest& recv) override;

  // Memory window requests (kSendBindMw, kSendLocalInvalidate) change the
  // registration table, which only the control thread may: the endpoint
  // takes one once every earlier request completed, the engine passes it
  // to the control plane (TakeLocalOp, then LocalOpPassedUp), and the
  // requests after it wait until the control plane answers (AnswerLocalOp,
  // control thread; `seq` names the request). A request the rules refuse
  // fails with its reason and breaks the connection, as IBA's error state.
  // The control thread claims the request before it carries it out
  // (ClaimLocalOp: false once the endpoint closed and abandoned it, when
  // the final status ends it), then answers it, or gives the claim back to
  // try again later (ReleaseLocalOp). A close while the claim is held waits
  // for the answer, so that a request carried out is never reported as
  // flushed.
  bool TakeLocalOp(shm::SendEntry* entry, uint32_t* seq) const;
  void LocalOpPassedUp() { local_op_.pass_up = false; }
  bool ClaimLocalOp(uint32_t seq);
  void ReleaseLocalOp();
  void AnswerLocalOp(uint32_t seq, int32_t status, uint8_t detail);
  // Tells this endpoint from a later one of the same connection (a queue
  // pair reset): unique for the daemon's life.
  uint64_t incarnation() const { return incarnation_; }
  // rc::CompletionSink
  void Complete(const rc::Completion& c) override;
  void CompleteRecv(const rc::RecvCompletion& c) override;

 private:
  // Locks pinned for one posted request, released at its completion.
  struct Pins {
    uint32_t lkeys[shm::kMaxSge];
    uint32_t count;
    uint32_t invalidate;  // lkey to invalidate on success, or 0
    uint32_t index;       // the request's place in taking order (taken_)
  };
  // A request carried out directly whose copy spans several turns, so that
  // one large request never holds the engine for long.
  struct DirectCopy {
    bool active = false;
    rc::WorkRequest wr;
    Pins pins;
    uint8_t op = 0;
    uint8_t* remote = nullptr;  // the peer's memory, pinned under wr.rkey
    uint32_t length = 0;
    uint32_t done = 0;
  };
  static constexpr uint32_t kDirectBytesPerTurn = 1u << 20;

  uint32_t PullRequests(uint32_t budget);
  // Takes memory window request `e` from the send ring when nothing
  // earlier is outstanding; false (it stays in the ring) otherwise.
  bool StartLocalOp(const shm::SendEntry& e);
  // Completes the memory window request once the control plane answered.
  void FinishLocalOp();
  // Pushes the answered request's completion; false when it failed (the
  // connection then breaks).
  bool CompleteLocalOp(uint64_t word);
  // The endpoint closes with the request waiting (see ClaimLocalOp).
  void SettleLocalOp();
  // Receive requests from the client's receive ring into the QP (when
  // info.receive was given).
  uint32_t PullReceives(uint32_t budget);
  static constexpr uint32_t kReceivesPulledForAFrame = 32;
  // Shared receive queue: the receive this endpoint took for its QP and
  // the QP has not completed (at most one), to end flushed if the
  // connection closes first.
  std::optional<uint64_t> shared_taken_;
  // Whether the completion ring keeps room for one more request taken.
  bool CompletionRoom() const;
  void Push(const shm::CompletionEntry& c);
  void PushRecvCompletion(uint64_t wr_id, int32_t status, uint8_t op,
                          uint32_t bytes, uint8_t flags, uint32_t imm,
                          uint32_t src_qp = 0,
                          uint8_t detail = shm::kDetailNone);
  // Carries out a request against the peer endpoint's memory (direct_
  // connections only): the responder's checks, one copy, spread over turns
  // when it is large.
  void ExecuteDirect(const rc::WorkRequest& wr, Pins& pins, uint8_t op);
  // COMPARE SWAP and FETCH ADD on the peer endpoint's memory, with the
  // checks and the atomic instruction of the RC responder.
  void ExecuteDirectAtomic(const rc::WorkRequest& wr, Pins& pins, uint8_t op);
  // The request fails as its NAK would fail it over a wire (`status` and
  // `detail`), and the connection breaks for both ends.
  void FailDirect(const rc::WorkRequest& wr, Pins& pins, uint8_t op,
                  int32_t status, uint8_t detail);
  // Copies the next piece of the direct request in progress; completes it
  // when it is done.
  void ContinueDirect();
  void ReleasePins(Pins& pins);
  // Turns a client entry into a work request; returns an rdp_status.
  int Translate(const shm::SendEntry& e, rc::WorkRequest* wr, Pins* pins);
  void PushCompletion(uint64_t wr_id, int32_t status, uint8_t op,
                      uint32_t bytes,
                      uint8_t detail = shm::kDetailNone);
  // Requests retired in order: those before the oldest one unfinished.
  uint32_t Retired() const;
  void PublishRetired();
  // Whether this endpoint's client still lives (see the class comment).
  // kSuspect: its liveness mutex says its owner died, and the process has
  // not exited (yet): requests wait, for at most kSuspectNs, then the
  // client counts as alive (a thread of a live process ended on its own, or
  // the process is slow to exit) while its pidfd is checked on every call:
  // one poll(2) per turn, only for a client whose mutex is marked.
  enum class Liveness : uint8_t { kAlive, kSuspect, kGone };
  static constexpr uint64_t kSuspectNs = 100'000'000;
  Liveness CheckClient() {
    if (ABSL_PREDICT_TRUE(!shm::SessionOwnerMaybeGone(info_.header))) {
      return Liveness::kAlive;
    }
    return ConfirmClient();
  }
  ABSL_ATTRIBUTE_NOINLINE Liveness ConfirmClient();
  // Closes the connection for both ends when either client has exited.
  // Returns false when requests must not run this turn (closed, or a client
  // may be dying).
  bool ClientsLive();
  // Frames from the in-process peer, up to `budget`.
  uint32_t Receive(uint32_t budget);
  // The in-process peer's end broke (a transport error, or its client broke
  // its ring): as on a wire, the frames it sent before, the NAK that explains
  // the break among them, arrive before the news of its end. (A client that
  // exited or closed ends its connection at once: nothing it sent lands
  // after that.)
  void PeerEnded();

  static std::atomic<uint64_t> next_incarnation;
  const uint64_t incarnation_;
  EndpointInfo info_;
  mr::RegistrationTable* table_;
  const rc::Clock* clock_;
  rc::FrameSink* port_tx_;
  std::unique_ptr<FrameQueue> rx_;  // loopback endpoints only
  LoopbackTx tx_;
  std::unique_ptr<rc::RcQp> qp_;
  Endpoint* peer_ = nullptr;
  std::unique_ptr<Pins[]> pins_;  // FIFO, one per outstanding request
  uint32_t pins_head_ = 0;
  uint32_t pins_tail_ = 0;
  uint32_t pins_mask_;
  uint32_t taken_ = 0;  // requests taken from the send ring
  // Index of the first request the QP flushed: it and all after it were
  // never carried out (unset while the QP runs).
  std::optional<uint32_t> first_flushed_;
  uint32_t published_retired_ = 0;
  DirectCopy direct_copy_;
  struct LocalOp {
    bool waiting = false;  // taken, not answered yet
    bool pass_up = false;  // for the engine to pass to the control plane
    uint32_t index = 0;    // its place in taking order, and its seq
    shm::SendEntry entry;
  };
  LocalOp local_op_;
  static constexpr uint64_t kAnswered = uint64_t{1} << 63;
  static constexpr uint64_t kClaimed = uint64_t{1} << 62;
  static constexpr uint64_t kAbandoned = uint64_t{1} << 61;
  // 0; kClaimed | seq (the control thread carries the request out);
  // kAnswered | detail << 40 | (uint8_t) status << 32 | seq; or kAbandoned
  // | seq (the endpoint closed first).
  std::atomic<uint64_t> local_op_answer_{0};
  // The send ring's next request waits (for earlier ones to complete, or
  // for a memory window request's answer): it is no work until then.
  bool send_waits_ = false;
  bool ring_bell_ = false;
  // The queue pair accepted a packet (SessionHeader::established is set).
  bool established_ = false;
  bool closed_ = false;
  CloseReason close_reason_ = CloseReason::kClosedByClient;
  // A completion could not be pushed: the client broke its ring.
  bool ring_broken_ = false;
  bool client_gone_ = false;       // confirmed: the client exited
  bool liveness_unknown_ = false;  // no pidfd to confirm with: rely on its socket
  uint64_t suspect_since_ns_ = 0;  // kSuspect since then (0: never)
  // Both ends in this engine and a clean link: requests are carried out
  // directly instead of as RoCEv2 frames through the loopback link.
  bool direct_ = false;
  bool transport_error_ = false;  // not yet taken by the engine
  void CountLoad(const rc::WorkRequest& wr) {
    if (load_ == nullptr) return;
    ++load_->requests;
    load_->bytes += rc::SglLength(wr);
  }

  EndpointStats stats_;
  EngineLoad* load_ = nullptr;
};

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_ENDPOINT_H_
