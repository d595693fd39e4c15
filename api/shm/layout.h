// The shared-memory ABI between librdmaplane and rdmaplaned: the session
// region a client creates (memfd) and hands to the daemon, and the messages
// that travel on its rings. Fixed-width fields, offsets instead of pointers,
// magic and version checked on attach, unknown flags rejected by the reader.
//
// Session region layout (offsets from the start of the region):
//
//   0      SessionHeader                        (header_pages pages)
//   ...    control request ring   client -> daemon  (ControlRequest)
//   ...    control response ring  daemon -> client  (ControlResponse)
//   ...    rdma_cm event ring     daemon -> client  (CmEvent)
//   ...    kDeepSlotsAt x ConnectionSlot, then kDeepSlots deeper ones, each:
//            send ring        client -> daemon  (SendEntry)
//            completion ring  daemon -> client  (CompletionEntry)
//   ...    kDeepSlotsAt receive rings, then kDeepSlots deeper ones
//                                         client -> daemon  (RecvEntry)
//
// Every ring is an SpscRing (ring.h). The header records each ring's offset
// so that the daemon never derives addresses from sizes it did not check.
// The client formats the control rings, the daemon the rdma_cm event ring
// (at hello); a connection slot's rings are
// formatted by the daemon when it first hands the slot out (the client
// attaches after the answer), so a slot never used costs no memory.
//
// Wakeups: a side that sleeps publishes that in a doorbell word and waits on
// it with futex(2) (shared, not private: the word is in shared memory); the
// other side bumps the word and wakes only when a sleeper is flagged, so the
// busy path makes no system call.
#ifndef RDMAPLANE_API_SHM_LAYOUT_H_
#define RDMAPLANE_API_SHM_LAYOUT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "api/shm/ring.h"

namespace rdmaplane::shm {

inline constexpr uint32_t kSessionMagic = 0x53504452;  // "RDPS"
inline constexpr uint16_t kSessionVersion = 14;
// Connection slots (connections and verbs queue pairs) of one session. The
// region reserves room for every slot's rings, but only a slot the daemon
// hands out is formatted and touched: memory grows with what is used. The
// first kDeepSlotsAt slots hold rings up to kSlotSendRingEntries,
// kSlotRecvRingEntries and kSlotCompletionRingEntries; the kDeepSlots after
// them up to the maxima (a verbs queue pair as deep as rxe's, 16384 work
// requests): reserving the maxima for every slot would take four times the
// address space (11 GiB a session instead of 3).
inline constexpr uint32_t kDeepSlotsAt = 1024;
inline constexpr uint32_t kDeepSlots = 32;
inline constexpr uint32_t kMaxConnections = kDeepSlotsAt + kDeepSlots;
// SGEs per request, as RNICs offer (dataplane/rc/types.h agrees).
inline constexpr uint32_t kMaxSge = 16;
inline constexpr uint32_t kControlRingEntries = 64;
// A slot's rings as a native connection has them; a verbs queue pair or
// shared receive queue asks for its own depths (SlotDepths), up to the
// maxima, which the layout reserves room for.
inline constexpr uint32_t kSendRingEntries = 256;
inline constexpr uint32_t kCompletionRingEntries = 1024;
inline constexpr uint32_t kRecvRingEntries = 512;
inline constexpr uint32_t kSlotSendRingEntries = 4096;
inline constexpr uint32_t kSlotRecvRingEntries = 4096;
inline constexpr uint32_t kSlotCompletionRingEntries = 8192;
inline constexpr uint32_t kMaxSendRingEntries = 16384;
inline constexpr uint32_t kMaxRecvRingEntries = 16384;
inline constexpr uint32_t kMaxCompletionRingEntries = 32768;
inline constexpr uint32_t kDescriptorBytes = 32;
inline constexpr uint32_t kServiceNameBytes = 64;
// rdma_cm events the daemon has for the client (CmEvent) that wait in the
// session region for it to take them.
inline constexpr uint32_t kCmEventRingEntries = 64;

// A futex word plus a "sleeping" flag, one cache line.
struct alignas(kCacheLine) Doorbell {
  std::atomic<uint32_t> sequence;  // bumped by the waker
  std::atomic<uint32_t> sleeping;  // set by the waiter before it sleeps
  uint8_t pad[kCacheLine - 2 * sizeof(std::atomic<uint32_t>)];
};
static_assert(sizeof(Doorbell) == kCacheLine);

struct RingRef {
  uint64_t offset;    // from the start of the session region
  uint32_t capacity;  // entries
  uint32_t bytes;     // SpscRing<T>::BytesFor(capacity)
  friend constexpr bool operator==(const RingRef&, const RingRef&) = default;
};

struct ConnectionSlotRef {
  RingRef send;
  RingRef completion;
};

struct alignas(4096) SessionHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_pages;  // the header's size in 4 KiB pages
  uint64_t region_bytes;
  uint32_t max_connections;
  // The data port's link as the daemon last saw it, written by the daemon
  // (at hello and whenever it changes): bit 0 set while it is up (the
  // peer is there; always, for a daemon without a data port), and above
  // it the number of times it changed since the daemon started, so that a
  // reader who missed a quick down-and-up still sees both.
  std::atomic<uint32_t> port_state;
  RingRef control_requests;
  RingRef control_responses;
  ConnectionSlotRef connections[kMaxConnections];
  // Doorbells. The daemon sleeps on none of these: it polls, and a client
  // that posts to a sleeping engine rings its session's engine socket.
  Doorbell control_response_bell;  // client waits for control responses
  Doorbell completion_bell[kMaxConnections];  // client waits for completions
  // Set by the daemon while the engine serving a connection sleeps.
  Doorbell engine_idle[kMaxConnections];
  // ConnectionState of each slot, written by the daemon.
  std::atomic<uint32_t> connection_state[kMaxConnections];
  // The end of the daemon's part in each slot's connection (PublishFinal):
  // 0 while the daemon may still complete requests of the connection; then
  // the status every request it did not complete ends with (an rdp_status
  // below 0). Reset to 0 before the slot's next connection is handed out.
  std::atomic<int32_t> final_status[kMaxConnections];
  // Requests of each slot's connection retired in order: the first
  // `retired` requests taken from the send ring are finished, each with a
  // completion entry or as a silent success. Counted modulo 2^32 from the
  // connection's first request; reset with final_status.
  std::atomic<uint32_t> retired[kMaxConnections];
  // 1 once the queue pair of the slot accepted its first packet from its
  // peer (IBA 11.6.3.1: communication is established; the verbs front end
  // raises IBV_EVENT_COMM_EST for a queue pair still in RTR), written by
  // the engine and reset with final_status.
  std::atomic<uint32_t> established[kMaxConnections];
  // Each slot's receive ring (two-sided SEND, verbs only).
  RingRef receive[kMaxConnections];
  // rdma_cm events, daemon -> client (CmEvent), and the doorbell the
  // client waits on for them. The daemon formats this ring at hello (the
  // client attaches after the answer).
  RingRef cm_events;
  Doorbell cm_event_bell;
  // A robust, process-shared pthread mutex the client locks when it opens
  // the session, from that thread: when the thread dies (with its process,
  // or on its own), the kernel marks the futex word (the mutex's first four
  // bytes) FUTEX_OWNER_DIED before the process can be reaped, so engines
  // can tell a dead client with one load (SessionOwnerMaybeGone).
  alignas(kCacheLine) uint8_t liveness[kCacheLine];
};
static_assert(sizeof(SessionHeader) % 4096 == 0);
static_assert(sizeof(SessionHeader) / 4096 <= 0xFFFF);
static_assert(offsetof(SessionHeader, control_requests) == 24);

// Status codes carried in responses and completions. They equal the
// rdp_status values of api/rdmaplane.h (checked there by static_assert).
enum StatusCode : int32_t {
  kStatusOk = 0,
  kStatusPending = 1,
  kStatusInvalid = -1,
  kStatusFault = -2,
  kStatusNoBuffers = -3,
  kStatusNotConnected = -4,
  kStatusConnReset = -5,
  kStatusConnAborted = -6,
  kStatusAborted = -7,
  kStatusRemoteResources = -8,
  kStatusNetDown = -9,
  kStatusRefused = -10,
  kStatusPermission = -11,
  kStatusTimeout = -12,
  kStatusAgain = -13,
  kStatusLimit = -14,
};

enum ConnectionState : uint32_t {
  kConnFree = 0,
  kConnUp = 1,
  kConnReset = 2,    // the peer closed
  kConnAborted = 3,  // time-out or transport failure
  kConnDaemonGone = 4,  // the daemon shut down
  // The transport failed as for kConnAborted because our responder refused
  // a request of the peer (and sent it the NAK): an invalid request (an
  // opcode not served, out of sequence, a bad length, an unaligned
  // atomic), or an access to memory the peer may not touch. A verbs queue
  // pair's affiliated asynchronous error tells which (IBA 11.6.3).
  kConnRequestRefused = 5,
  kConnAccessRefused = 6,
};

// --- Control messages ----------------------------------------------------

enum ControlOp : uint32_t {
  kOpRegisterLocal = 1,     // memory a local SGE may name; with
                            // connection kPdScopeSlot and key a protection
                            // domain, only that domain's queue pairs may
                            // (a verbs MR's lkey)
  kOpDeregisterLocal = 2,
  kOpRegisterRdma = 3,      // memory the connection's peer may access
  kOpDeregisterRdma = 4,
  kOpListen = 5,            // accept connections to a service name
  kOpConnect = 6,           // connect to a service name
  kOpAccept = 7,            // take the next connection to a listened service
  kOpDisconnect = 8,
  kOpUnlisten = 9,
  // Verbs (api/verbs): protection domains, queue pairs connected out of
  // band, and what the device offers.
  kOpAllocPd = 10,       // key: the new protection domain
  kOpDeallocPd = 11,     // key: the protection domain
  kOpCreateQp = 12,      // key: its protection domain; flags: its
                         // QpService; connection: its shared receive
                         // queue's slot, or kNoSrq; length: its depths
                         // (SlotDepths::Encode); answers slot and QPN
  kOpModifyQp = 13,      // connection: slot; flags: QpTransition; QpPeer
  kOpQueryDevice = 14,   // answers a DeviceInfo in the descriptor
  // UD address handles: key: the destination's IPv4 (host order); answers
  // the handle in key once the destination's MAC is known (ARP), or
  // kStatusTimeout. Destroy: key: the handle.
  kOpCreateAh = 15,
  kOpDestroyAh = 16,
  // Shared receive queues (verbs): a connection slot whose receive ring
  // the queue pairs created with it (kOpCreateQp's connection) take their
  // receive requests from, one at a time, as messages need them.
  // Create: key: the protection domain; length: its depth (the receive
  // half of SlotDepths::Encode); answers the slot. Destroy: connection: the
  // slot (refused while a queue pair uses it).
  kOpCreateSrq = 17,
  kOpDestroySrq = 18,
  // Memory windows (verbs ibv_alloc_mw): Alloc: key: the protection
  // domain; flags: the type, 1 or 2; answers the window's first rkey (its
  // slot in the high 24 bits, which every later rkey of it keeps).
  // Dealloc: key: an rkey of the window.
  kOpAllocMw = 19,
  kOpDeallocMw = 20,
  // rdma_cm ids (the RDMA IP CM service, control/ip_cm.h), with their
  // arguments in ControlRequest::cm (CmParams). Each answers at once;
  // what happens later comes as CmEvents on the session's event ring.
  kOpCmBind = 21,        // a new id on port_space, local_port (0: any)
                         // of local_ip (0 or ours); answers id (in key)
                         // and the port (in connection)
  kOpCmListen = 22,      // id: listen, with `backlog` requests waiting
  kOpCmResolve = 23,     // id: find remote_ip within timeout_ms (ARP):
                         // kCmAddrResolved or kCmAddrError
  kOpCmConnect = 24,     // id: REQ (SIDR REQ for RDMA_PS_UDP) to
                         // remote_ip:remote_port with the queue pair
                         // qpn, first PSN psn and the private data
  kOpCmAccept = 25,      // id: REP (passive), RTU (active, after
                         // kCmConnectResponse) or SIDR REP
  kOpCmReject = 26,      // id: REJ (SIDR REP rejected) with `reason`
                         // and the private data
  kOpCmDisconnect = 27,  // id: DREQ, or DREP to the peer's DREQ
  kOpCmDestroy = 28,     // id: gone; its connection ends as a
                         // disconnect, a request waiting is rejected
  kOpCmNotify = 29,      // id: its queue pair got its first packet
                         // (an RTU lost on the way counts as come)
};

// How many entries a slot's rings hold: powers of two, the send and
// receive rings at least what was asked for (kOpCreateQp, kOpCreateSrq),
// the completion ring one entry for each of theirs, within the maxima.
struct SlotDepths {
  uint32_t send = kSendRingEntries;
  uint32_t receive = kRecvRingEntries;
  uint32_t completion = kCompletionRingEntries;

  static constexpr uint32_t kMinEntries = 16;
  static constexpr uint32_t RoundUp(uint32_t n) {
    uint32_t p = kMinEntries;
    while (p < n) p <<= 1;
    return p;
  }
  // A request's `length`: send entries in the low 32 bits, receive entries
  // in the high ones.
  static constexpr uint64_t Encode(uint32_t send, uint32_t receive) {
    return uint64_t{send} | uint64_t{receive} << 32;
  }
  // The depths a request's `length` asks for, or nullopt when one is above
  // its maximum (0: the native default).
  static constexpr std::optional<SlotDepths> Decode(uint64_t length) {
    const uint64_t send = length & 0xFFFFFFFF;
    const uint64_t receive = length >> 32;
    if (send > kMaxSendRingEntries || receive > kMaxRecvRingEntries) {
      return std::nullopt;
    }
    SlotDepths d;
    d.send = send == 0 ? kSendRingEntries : RoundUp(send);
    d.receive = receive == 0 ? kRecvRingEntries : RoundUp(receive);
    d.completion = RoundUp(d.send + d.receive);
    return d;
  }
  // Whether the rings need one of the deep slots (kDeepSlotsAt and up).
  constexpr bool Deep() const {
    return send > kSlotSendRingEntries || receive > kSlotRecvRingEntries ||
           completion > kSlotCompletionRingEntries;
  }
};

// kOpCreateQp's connection when the queue pair has its own receive ring.
inline constexpr uint32_t kNoSrq = 0xFFFFFFFF;

// Address handles one session may hold (kOpCreateAh).
inline constexpr uint32_t kMaxAddressHandles = 4096;

// kOpRegisterRdma / kOpDeregisterRdma with this connection value scope the
// registration to the protection domain in `key` instead of one connection:
// every queue pair created in that domain may reach it.
inline constexpr uint32_t kPdScopeSlot = 0xFFFFFFFF;

// kOpCreateQp's queue-pair services, numbered as libibverbs' ibv_qp_type.
enum QpService : uint32_t {
  kQpServiceRc = 2,  // reliable connected
  kQpServiceUc = 3,  // unreliable connected: SENDs and WRITEs, never
                     // acknowledged or resent
  kQpServiceUd = 4,  // unreliable datagram: one-packet SENDs to any UD
                     // queue pair, through an address handle
};

// kOpModifyQp's moves, as the verbs state machine names them. The daemon
// keeps each queue pair's state (dataplane/rc/qp_state.h) and refuses a
// move its table does not have from that state.
enum QpTransition : uint32_t {
  kQpToRtr = 1,  // connect to the peer (QpPeer), serve it as responder
  kQpToRts = 2,  // from RTR: the requester starts at QpPeer::sq_psn, with
                 // its retry_count, timeout and rnr_retry; from RTS: an
                 // attribute-only modify. Either way, the responder takes
                 // the remote_access and min_rnr_timer that carry their
                 // Set bits at once
  kQpToInit = 3,  // from RESET: ready to be connected
  kQpToErr = 4,   // from any state: the transport stops; every request
                  // posted and not finished ends flushed; the slot stays
  kQpToReset = 5,  // from any state: as new, with the same QPN and slot;
                   // the client attaches the slot again
};

// QpPeer::remote_access says which operations the queue pair serves.
inline constexpr uint8_t kQpRemoteAccessSet = 0x80;
// kQpToRts: QpPeer::min_rnr_timer carries a new RNR timer code (0..31).
inline constexpr uint8_t kQpMinRnrTimerSet = 0x80;

// kOpModifyQp's arguments, in ControlRequest::descriptor.
struct QpPeer {
  uint32_t peer_ip;    // IPv4 of the peer's daemon (host order)
  uint32_t peer_qpn;
  uint32_t rq_psn;     // first PSN the peer sends (kQpToRtr)
  uint32_t sq_psn;     // our first PSN (kQpToRts)
  uint32_t path_mtu;   // bytes: 256 .. 4096
  uint8_t max_rd_atomic;       // READs we keep outstanding at the peer
  uint8_t max_dest_rd_atomic;  // READs the peer may keep outstanding here
  uint8_t retry_count;         // 0 .. 7
  uint8_t timeout;             // IBA local ACK timeout code; 0: ours
  uint8_t rnr_retry;           // RNR NAKs we retry in a row (7: for ever)
  uint8_t min_rnr_timer;       // the RNR timer code our RNR NAKs carry
                               // (kQpToRts: with kQpMinRnrTimerSet)
  // kQpToRtr, kQpToRts: with kQpRemoteAccessSet, the remote operations the
  // queue pair's responder serves (kAccessRead, kAccessWrite,
  // kAccessAtomic: verbs' qp_access_flags); without it, at RTR every one,
  // at RTS those it served.
  uint8_t remote_access;
  uint8_t reserved;
  uint32_t qkey;  // UD (kQpToInit, kQpToRtr): the queue pair's Q_Key
};
static_assert(sizeof(QpPeer) == kDescriptorBytes);

// kOpQueryDevice's answer, in ControlResponse::descriptor.
struct DeviceInfo {
  uint32_t ip;  // the data port's IPv4 (host order); 0: no data port
  uint8_t mac[6];
  uint16_t path_mtu;  // bytes
  uint32_t max_qps;   // queue pairs one session may hold
  uint32_t max_mrs;   // registrations one session may hold
  uint32_t max_qp_wr;  // send ring entries
  uint32_t max_cqe;    // completion ring entries
  uint8_t max_sge;
  uint8_t max_rd_atomic;
  uint8_t link_up;  // 1: the data port's link is up (a peer is there)
  uint8_t reserved;
};
static_assert(sizeof(DeviceInfo) == kDescriptorBytes);

// Access flags for registrations (the seed's MEM_READ / MEM_WRITE).
inline constexpr uint32_t kAccessRead = 1u << 0;
inline constexpr uint32_t kAccessWrite = 1u << 1;
inline constexpr uint32_t kAccessReadWrite = kAccessRead | kAccessWrite;
// Remote atomics (COMPARE SWAP, FETCH ADD; verbs' IBV_ACCESS_REMOTE_ATOMIC):
// for kOpRegisterRdma only, alone or with the others.
inline constexpr uint32_t kAccessAtomic = 1u << 2;

// The arguments of kOpCm* requests, and what a CmEvent says. Addresses
// are IPv4, host order; ports host order.
inline constexpr uint32_t kCmPrivateDataBytes = 224;
struct CmParams {
  uint32_t id;  // the daemon's id of the rdma_cm id
  uint32_t local_ip;
  uint32_t remote_ip;
  uint16_t local_port;
  uint16_t remote_port;
  uint16_t port_space;  // rdma_cm's RDMA_PS_* (wire::kPortSpace*)
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t flow_control;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t srq;
  uint32_t qpn;         // the sender's queue pair
  uint32_t psn;         // its first PSN
  uint32_t qkey;        // UD
  uint32_t timeout_ms;  // kOpCmResolve
  uint32_t backlog;     // kOpCmListen
  uint16_t reason;      // REJ reason (sent, or received)
  uint8_t path_mtu;     // IBA MTU code (1..5)
  uint8_t private_data_len;
  uint8_t private_data[kCmPrivateDataBytes];
};
static_assert(sizeof(CmParams) == 272);

enum CmEventType : uint32_t {
  kCmAddrResolved = 1,    // kOpCmResolve: the address answered
  kCmAddrError = 2,       // ... or did not, within the time (status)
  kCmConnectRequest = 3,  // a listener's new id (params.id) for a REQ
                          // or SIDR REQ; `listener` is the listener
  kCmConnectResponse = 4,  // REP: the peer's queue pair, PSN, data
  kCmConnectError = 5,     // the exchange broke (a bad answer)
  kCmUnreachable = 6,      // no answer (REQ, REP, SIDR REQ timed out)
  kCmRejected = 7,         // REJ, or SIDR REP not valid: params.reason
  kCmEstablished = 8,      // RTU (passive), SIDR REP valid (active)
  kCmDisconnected = 9,     // the peer's DREQ, or the DREP to ours (or
                           // none came)
  kCmTimewaitExit = 10,    // after kCmDisconnected: the QP may be reused
};

struct CmEvent {
  uint32_t type;  // CmEventType
  // 0, or a negative errno (kCmAddrError, kCmUnreachable,
  // kCmConnectError, kCmDisconnected when the peer never answered); for
  // kCmUnreachable after a SIDR REP, its (positive) status. A REJ's reason
  // is in params.reason.
  int32_t status;
  uint32_t listener;  // kCmConnectRequest
  uint32_t reserved;
  CmParams params;  // the id, and what the peer sent
};
static_assert(sizeof(CmEvent) == 288);

struct ControlRequest {
  uint64_t request_id;
  uint32_t op;          // ControlOp
  uint32_t connection;  // connection slot, where the op takes one
  uint64_t address;     // client virtual address of the buffer
  uint64_t length;
  uint32_t flags;       // access flags
  uint32_t key;         // local key for kOpDeregisterLocal
  uint8_t descriptor[kDescriptorBytes];  // for kOpDeregisterRdma
  uint32_t descriptor_length;
  uint32_t reserved;
  char service[kServiceNameBytes];  // NUL-terminated, for listen/connect
  CmParams cm;  // kOpCm*
};
static_assert(sizeof(ControlRequest) == 416);

struct ControlResponse {
  uint64_t request_id;
  int32_t status;       // RdpStatus (api/rdmaplane.h)
  uint32_t connection;  // for listen/connect/accept
  uint32_t key;         // local key, or the rkey inside the descriptor
  uint32_t descriptor_length;
  uint8_t descriptor[kDescriptorBytes];
  char message[64];     // NUL-terminated explanation of an error
};
static_assert(sizeof(ControlResponse) == 120);

// The RDMA buffer descriptor a client hands to its peer (opaque to it).
struct RdmaDescriptor {
  uint32_t magic;  // kDescriptorMagic
  uint32_t rkey;
  uint64_t address;  // the registering client's virtual address
  uint64_t length;
  uint32_t access;
  uint32_t reserved;
};
inline constexpr uint32_t kDescriptorMagic = 0x44504452;  // "RDPD"
static_assert(sizeof(RdmaDescriptor) == kDescriptorBytes);

// --- Data path messages --------------------------------------------------

// kSendSend (verbs) is a two-sided SEND, placed in the peer's next
// receive; kRecv and kRecvWriteImm are the ops of receive completions (a
// SEND received, a WRITE with immediate data that consumed the receive).
// kSendCompareSwap and kSendFetchAdd (verbs) are the atomics on the peer's
// 8-byte word at remote_address (8-byte aligned, or the peer refuses it)
// with SendEntry::compare and swap_add; their one SGE of 8 bytes receives
// the word as it was. Their completions carry the same ops.
enum SendOp : uint8_t {
  kSendWrite = 1,
  kSendRead = 2,
  kSendFlush = 3,
  kSendSend = 4,
  kRecv = 5,
  kRecvWriteImm = 6,
  kSendCompareSwap = 7,
  kSendFetchAdd = 8,
  // Verbs memory windows, carried out in order: every request before one
  // completes before it runs, and the requests after it wait for it.
  // kSendBindMw: rkey: the window's (its slot counts, not its tag); imm:
  // the rkey it is bound under; swap_add: kBind* bits; one SGE: the
  // window's first byte, length and the lkey of the memory region it lies
  // in (none: a type 1 window is unbound). kSendLocalInvalidate: rkey: the
  // type 2 window's key to invalidate.
  kSendBindMw = 9,
  kSendLocalInvalidate = 10,
};

// kSendBindMw's access, in SendEntry::swap_add.
inline constexpr uint64_t kBindRemoteRead = 1u << 0;
inline constexpr uint64_t kBindRemoteWrite = 1u << 1;
inline constexpr uint64_t kBindRemoteAtomic = 1u << 2;
// Peers address the window from 0, not by the client's addresses.
inline constexpr uint64_t kBindZeroBased = 1u << 3;
// The memory region was registered with IBV_ACCESS_MW_BIND (the front end
// vouches for its own region).
inline constexpr uint64_t kBindRegionAllowsBind = 1u << 4;
inline constexpr uint64_t kBindKnownBits =
    kBindRemoteRead | kBindRemoteWrite | kBindRemoteAtomic | kBindZeroBased |
    kBindRegionAllowsBind;

// Work request flags, numbered as in the NDK's ndkpi.h (the NdkRead page
// gives 0x200 to both DEFER and READ_LOCAL_INVALIDATE; the header does not).
inline constexpr uint32_t kFlagSilentSuccess = 0x00000001;
inline constexpr uint32_t kFlagReadFence = 0x00000002;
inline constexpr uint32_t kFlagReadLocalInvalidate = 0x00000100;
inline constexpr uint32_t kFlagDefer = 0x00000200;
inline constexpr uint32_t kKnownSendFlags = kFlagSilentSuccess |
                                            kFlagReadFence | kFlagDefer |
                                            kFlagReadLocalInvalidate;
// Verbs only: the SEND or WRITE carries SendEntry::imm; its last packet
// asks for a solicited event.
inline constexpr uint32_t kFlagImmediate = 0x00010000;
inline constexpr uint32_t kFlagSolicited = 0x00020000;
// A SEND whose last packet tells the peer to invalidate SendEntry::rkey
// (IBA SEND with Invalidate; RC only).
inline constexpr uint32_t kFlagInvalidate = 0x00040000;
inline constexpr uint32_t kVerbsSendFlags =
    kKnownSendFlags | kFlagImmediate | kFlagSolicited | kFlagInvalidate;

struct SgeEntry {
  uint64_t address;  // client virtual address
  uint32_t length;
  uint32_t lkey;     // from kOpRegisterLocal
};
static_assert(sizeof(SgeEntry) == 16);

struct SendEntry {
  uint64_t wr_id;
  uint8_t op;  // SendOp
  uint8_t num_sge;
  uint16_t reserved0;
  uint32_t flags;
  SgeEntry sge[kMaxSge];
  uint64_t remote_address;
  uint32_t rkey;
  uint32_t imm;  // with kFlagImmediate: ImmDt, as on the wire
  // kSendCompareSwap: the value compared with, and the one written when
  // they are equal; kSendFetchAdd: swap_add is added (modulo 2^64).
  // Host order, as the word is in the peer's memory.
  uint64_t compare;
  uint64_t swap_add;
  // A UD queue pair's SEND: where it goes (kOpCreateAh's handle), to which
  // queue pair there, under which Q_Key (its top bit set: the sending
  // queue pair's own Q_Key, as the IBA has it).
  uint32_t ah;
  uint32_t remote_qpn;
  uint32_t remote_qkey;
  uint32_t reserved1;
};
static_assert(sizeof(SendEntry) == 320);

// A receive request (verbs' ibv_post_recv): the buffers the peer's next
// SEND fills. Its completion names it by wr_id.
struct RecvEntry {
  uint64_t wr_id;
  uint8_t num_sge;
  uint8_t reserved0[7];
  SgeEntry sge[kMaxSge];
};
static_assert(sizeof(RecvEntry) == 272);

struct CompletionEntry {
  uint64_t wr_id;
  int32_t status;  // RdpStatus
  uint8_t op;      // SendOp
  uint8_t flags;   // kCompletionImm
  uint8_t detail;  // CompletionDetail: why a request failed, in IBA terms
  uint8_t reserved0;
  uint32_t byte_len;
  // The slot's retired count once this request finished (see
  // SessionHeader::retired): the requests before it are finished too.
  // Receive completions (kRecv, kRecvWriteImm) retire no send request and
  // leave it 0.
  uint32_t retired;
  uint32_t imm;  // with kCompletionImm: the immediate data, as on the wire
  // With kCompletionGrh (UD receives): the sending queue pair; the
  // receive's first 40 bytes hold the GRH (the IPv4 header in its last 20).
  uint32_t src_qp;
};
static_assert(sizeof(CompletionEntry) == 32);
inline constexpr uint8_t kCompletionImm = 1;
inline constexpr uint8_t kCompletionGrh = 4;
// A receive whose message asked for a solicited event.
inline constexpr uint8_t kCompletionSolicited = 2;
// A SEND with Invalidate: imm holds the rkey invalidated before the
// receive completed.
inline constexpr uint8_t kCompletionInvalidated = 8;

// What the transport said of a failed request, finer than its status (the
// verbs front end reports it as the work completion's status).
enum CompletionDetail : uint8_t {
  kDetailNone = 0,
  kDetailRetryExceeded = 1,     // no answer after the retry count
  kDetailRnrRetryExceeded = 2,  // the peer had no receive, too often
  kDetailRemoteAccess = 3,      // NAK remote access error
  kDetailRemoteInvalid = 4,     // NAK invalid request
  kDetailRemoteOperational = 5, // NAK remote operational error
  kDetailBadResponse = 6,
  kDetailLocalLength = 7,       // a receive too small for the message
  kDetailMwBind = 8,            // a memory window bind the rules refuse
  // A local operation (LOCAL_INV) on a key it cannot act on.
  kDetailLocalOperation = 9,
  // A receive: the SEND with Invalidate named a key this queue pair may not
  // invalidate (its data were placed).
  kDetailInvalidateRefused = 10,
};

// The daemon is done with the connection in `slot`: it completes nothing
// more, `retired` requests finished in order, and every other request the
// client posted ends with `status`. The client sees the state first (so it
// stops posting), then the rest; acquire-loading final_status makes
// `retired` and every completion pushed before visible.
inline void PublishFinal(SessionHeader* h, uint32_t slot,
                         ConnectionState state, int32_t status,
                         uint32_t retired) {
  h->connection_state[slot].store(state, std::memory_order_release);
  h->retired[slot].store(retired, std::memory_order_relaxed);
  // Pairs with the client's acquire load of final_status.
  h->final_status[slot].store(status, std::memory_order_release);
}

// Readies `slot` for a new connection (the daemon, before answering the
// connect or accept that hands the slot out).
inline void ResetSlot(SessionHeader* h, uint32_t slot) {
  h->retired[slot].store(0, std::memory_order_relaxed);
  h->established[slot].store(0, std::memory_order_relaxed);
  h->final_status[slot].store(0, std::memory_order_relaxed);
  h->connection_state[slot].store(kConnUp, std::memory_order_release);
}

// Futex bits of the liveness mutex's word (linux/futex.h).
inline constexpr uint32_t kFutexOwnerDied = 0x40000000;
inline constexpr uint32_t kFutexTidMask = 0x3FFFFFFF;

// True when the thread that opened the session may be gone (the kernel
// marked its robust mutex, or nobody holds it). One relaxed load: for the
// engines' data path. The word is client memory, so this is only a hint:
// the daemon confirms it before acting (the process may live on).
inline bool SessionOwnerMaybeGone(const SessionHeader* h) {
  const uint32_t word = __atomic_load_n(
      reinterpret_cast<const uint32_t*>(h->liveness), __ATOMIC_RELAXED);
  return (word & kFutexOwnerDied) != 0 || (word & kFutexTidMask) == 0;
}

// Where every ring of a session lies: one after the other from the end of
// the header, each on a cache line (SpscRing::Create needs it), in the
// order the layout comment lists them. The one layout of this version:
// the creator writes it into the header (PlanRings), and the daemon takes
// a session only when its header says exactly this, then uses these
// offsets, never the header's.
inline constexpr uint64_t RoundToCacheLine(uint64_t bytes) {
  return (bytes + kCacheLine - 1) / kCacheLine * kCacheLine;
}

struct SessionRings {
  static constexpr uint64_t Line(uint64_t bytes) {
    return RoundToCacheLine(bytes);
  }
  static constexpr uint32_t kRequestBytes =
      SpscRing<ControlRequest>::BytesFor(kControlRingEntries);
  static constexpr uint32_t kResponseBytes =
      SpscRing<ControlResponse>::BytesFor(kControlRingEntries);
  static constexpr uint32_t kCmEventBytes =
      SpscRing<CmEvent>::BytesFor(kCmEventRingEntries);
  // A slot's rooms (below kDeepSlotsAt), and a deep slot's.
  static constexpr uint32_t kSendBytes =
      SpscRing<SendEntry>::BytesFor(kSlotSendRingEntries);
  static constexpr uint32_t kCompletionBytes =
      SpscRing<CompletionEntry>::BytesFor(kSlotCompletionRingEntries);
  static constexpr uint32_t kReceiveBytes =
      SpscRing<RecvEntry>::BytesFor(kSlotRecvRingEntries);
  static constexpr uint32_t kDeepSendBytes =
      SpscRing<SendEntry>::BytesFor(kMaxSendRingEntries);
  static constexpr uint32_t kDeepCompletionBytes =
      SpscRing<CompletionEntry>::BytesFor(kMaxCompletionRingEntries);
  static constexpr uint32_t kDeepReceiveBytes =
      SpscRing<RecvEntry>::BytesFor(kMaxRecvRingEntries);
  static constexpr uint64_t kSlotsAt = sizeof(SessionHeader) +
                                       RoundToCacheLine(kRequestBytes) +
                                       RoundToCacheLine(kResponseBytes) +
                                       RoundToCacheLine(kCmEventBytes);
  static constexpr uint64_t kSlotStride =
      RoundToCacheLine(kSendBytes) + RoundToCacheLine(kCompletionBytes);
  static constexpr uint64_t kDeepSlotStride =
      RoundToCacheLine(kDeepSendBytes) + RoundToCacheLine(kDeepCompletionBytes);
  static constexpr uint64_t kDeepAt =
      kSlotsAt + uint64_t{kDeepSlotsAt} * kSlotStride;
  static constexpr uint64_t kReceivesAt =
      kDeepAt + uint64_t{kDeepSlots} * kDeepSlotStride;
  static constexpr uint64_t kDeepReceivesAt =
      kReceivesAt + uint64_t{kDeepSlotsAt} * RoundToCacheLine(kReceiveBytes);
  static constexpr uint64_t kEnd =
      kDeepReceivesAt +
      uint64_t{kDeepSlots} * RoundToCacheLine(kDeepReceiveBytes);

  static constexpr RingRef ControlRequests() {
    return {sizeof(SessionHeader), kControlRingEntries, kRequestBytes};
  }
  static constexpr RingRef ControlResponses() {
    return {sizeof(SessionHeader) + Line(kRequestBytes), kControlRingEntries,
            kResponseBytes};
  }
  static constexpr RingRef CmEvents() {
    return {sizeof(SessionHeader) + Line(kRequestBytes) +
                Line(kResponseBytes),
            kCmEventRingEntries, kCmEventBytes};
  }
  // Each ring's room, and in `capacity` the most entries it may hold (the
  // daemon formats it with the slot's SlotDepths, which its header says).
  static constexpr RingRef Send(uint32_t slot) {
    if (slot >= kDeepSlotsAt) {
      return {kDeepAt + (slot - kDeepSlotsAt) * kDeepSlotStride,
              kMaxSendRingEntries, kDeepSendBytes};
    }
    return {kSlotsAt + slot * kSlotStride, kSlotSendRingEntries, kSendBytes};
  }
  static constexpr RingRef Completion(uint32_t slot) {
    if (slot >= kDeepSlotsAt) {
      return {kDeepAt + (slot - kDeepSlotsAt) * kDeepSlotStride +
                  Line(kDeepSendBytes),
              kMaxCompletionRingEntries, kDeepCompletionBytes};
    }
    return {kSlotsAt + slot * kSlotStride + Line(kSendBytes),
            kSlotCompletionRingEntries, kCompletionBytes};
  }
  static constexpr RingRef Receive(uint32_t slot) {
    if (slot >= kDeepSlotsAt) {
      return {kDeepReceivesAt + (slot - kDeepSlotsAt) * Line(kDeepReceiveBytes),
              kMaxRecvRingEntries, kDeepReceiveBytes};
    }
    return {kReceivesAt + slot * Line(kReceiveBytes), kSlotRecvRingEntries,
            kReceiveBytes};
  }
  // Whether slot's rings hold `depths`.
  static constexpr bool Holds(uint32_t slot, const SlotDepths& depths) {
    return depths.send <= Send(slot).capacity &&
           depths.completion <= Completion(slot).capacity &&
           depths.receive <= Receive(slot).capacity;
  }
};

// Writes SessionRings' layout into the header's ring table; returns the
// offset past the last ring (at most SessionRegionBytes()).
inline uint64_t PlanRings(SessionHeader* h) {
  h->control_requests = SessionRings::ControlRequests();
  h->control_responses = SessionRings::ControlResponses();
  h->cm_events = SessionRings::CmEvents();
  for (uint32_t i = 0; i < kMaxConnections; ++i) {
    h->connections[i].send = SessionRings::Send(i);
    h->connections[i].completion = SessionRings::Completion(i);
    h->receive[i] = SessionRings::Receive(i);
  }
  return SessionRings::kEnd;
}

// Whether the header's ring table is SessionRings' layout.
inline bool HasSessionRings(const SessionHeader& h) {
  if (!(h.control_requests == SessionRings::ControlRequests()) ||
      !(h.control_responses == SessionRings::ControlResponses()) ||
      !(h.cm_events == SessionRings::CmEvents())) {
    return false;
  }
  for (uint32_t i = 0; i < kMaxConnections; ++i) {
    if (!(h.connections[i].send == SessionRings::Send(i)) ||
        !(h.connections[i].completion == SessionRings::Completion(i)) ||
        !(h.receive[i] == SessionRings::Receive(i))) {
      return false;
    }
  }
  return true;
}

// Bytes of a session region with every ring, page-rounded.
constexpr uint64_t SessionRegionBytes() {
  return (SessionRings::kEnd + 4095) & ~uint64_t{4095};
}

}  // namespace rdmaplane::shm

#endif  // RDMAPLANE_API_SHM_LAYOUT_H_
