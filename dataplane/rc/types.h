// Work requests, completions and configuration of an RC queue pair.
//
// Plain value types (thread-compatible). A WorkRequest's scatter/gather list
// holds addresses the caller has already checked against its local
// registrations; the QP copies the request when it is posted.
#ifndef RDMAPLANE_DATAPLANE_RC_TYPES_H_
#define RDMAPLANE_DATAPLANE_RC_TYPES_H_

#include <cstdint>

#include "dataplane/rc/memory_owner.h"
#include "dataplane/rc/qp_state.h"
#include "dataplane/rc/stat_counter.h"
#include "dataplane/wire/psn.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::rc {

inline constexpr int kMaxSge = 16;  // shm::kMaxSge agrees

// kAtomic: COMPARE SWAP and FETCH ADD on an 8-byte word (the IBA's remote
// atomic access right, which neither read nor write access implies).
enum class RemoteAccess : uint8_t { kRead = 1, kWrite = 2, kAtomic = 4 };

// kSend is a two-sided SEND: the peer's responder places it in the buffers
// of its next receive request. kCompareSwap and kFetchAdd are the IBA's
// atomics on the 8-byte word at remote_va: the word as it was before lands
// in the request's one SGE of 8 bytes.
enum class WrOpcode : uint8_t {
  kWrite = 0,
  kRead = 1,
  kSend = 2,
  kCompareSwap = 3,
  kFetchAdd = 4,
};

inline constexpr bool IsAtomic(WrOpcode op) {
  return op == WrOpcode::kCompareSwap || op == WrOpcode::kFetchAdd;
}
// READs and atomics are answered with data (read responses, ATOMIC
// ACKNOWLEDGE), use the peer's responder resources and count against
// max_rd_atomic together, as the IBA has them share the initiator depth.
inline constexpr bool AwaitsResponse(WrOpcode op) {
  return op == WrOpcode::kRead || IsAtomic(op);
}
// The bytes an atomic reads and writes, its alignment, and the length of
// its one SGE.
inline constexpr uint32_t kAtomicBytes = 8;

// Work request flags (a subset of the seed API's flags).
inline constexpr uint32_t kWrSilentSuccess = 1u
                                             << 0;  // no completion on success
inline constexpr uint32_t kWrReadFence = 1u << 1;   // wait for earlier reads
// A SEND or WRITE that carries WorkRequest::imm to the peer (and, for a
// WRITE, consumes one of its receive requests).
inline constexpr uint32_t kWrImmediate = 1u << 2;
// The last packet of the message sets the BTH's solicited event bit.
inline constexpr uint32_t kWrSolicited = 1u << 3;
// A kSend of an RC queue pair whose last (or only) packet carries an IETH
// naming WorkRequest::invalidate_rkey: SEND with Invalidate, which asks the
// peer's responder to invalidate that key of its own before the receive
// completes. Never with kWrImmediate (the IBA has no such opcode), nor on
// UC or UD.
inline constexpr uint32_t kWrInvalidate = 1u << 4;
inline constexpr uint32_t kWrKnownFlags = kWrSilentSuccess | kWrReadFence |
                                          kWrImmediate | kWrSolicited |
                                          kWrInvalidate;

struct Sge {
  uint8_t* addr = nullptr;
  uint32_t length = 0;
  // A receive's buffer: the local key it was resolved under (0: none to
  // check), which must still resolve to it when a message arrives
  // (RemoteMemory::ReceiveBuffersLive).
  uint32_t lkey = 0;
  // Keeps the memory mapped while frames point into it (zero-copy
  // transmit of a write); null: its bytes are always copied.
  MemoryOwner* owner = nullptr;
};

// Where a UD queue pair's SEND goes: the destination's addresses, its
// queue pair, and the Q_Key the frame carries (its top bit set: the
// sending queue pair's own, IBA 10.2.5).
struct DatagramDest {
  wire::MacAddr mac;
  uint32_t ip = 0;  // host order
  wire::Qpn qpn;
  uint32_t qkey = 0;
};

struct WorkRequest {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kWrite;
  uint32_t flags = 0;
  uint32_t num_sge = 0;
  Sge sge[kMaxSge];
  uint64_t remote_va = 0;
  wire::Rkey rkey;
  uint32_t imm = 0;  // with kWrImmediate: ImmDt, as on the wire
  wire::Rkey invalidate_rkey;  // with kWrInvalidate: the IETH's R_Key
  // Atomics: kCompareSwap writes swap_add where the word equals compare;
  // kFetchAdd adds swap_add (modulo 2^64) and ignores compare.
  uint64_t compare = 0;
  uint64_t swap_add = 0;
  DatagramDest ud;  // a UD queue pair's SEND
};

enum class WcStatus : uint8_t {
  kSuccess = 0,
  kRemoteAccessError,       // NAK 0x62: bad rkey, connection, access or range
  kRemoteInvalidRequest,    // NAK 0x61
  kRemoteOperationalError,  // NAK 0x63
  kRetryExceeded,           // no answer after the retry count
  kFlushed,                 // the connection went to error with this queued
  // The peer's responses broke the protocol (a read response out of its
  // FIRST/MIDDLE/LAST order, of the wrong length or with a NAK syndrome):
  // the IBA's "bad response".
  kBadResponse,
  // Only RcQp::error_status() says these: our responder refused a request
  // of the peer, with NAK 0x61 (an opcode rdmaplane does not serve, a
  // reserved one, one out of sequence, a bad length) or NAK 0x62 (memory
  // the peer may not touch), and the QP entered the error state, as the IBA
  // says; our own queued requests complete as kFlushed. kPeerInvalidRequest
  // also follows a SEND with Invalidate whose key the responder could not
  // invalidate (its receive completes with kInvalidateError; an ACK, not a
  // NAK, answers it).
  kPeerInvalidRequest,
  kPeerAccessError,
  // The peer answered RNR NAKs (no receive request posted) more often than
  // the QP's rnr_retry allows.
  kRnrRetryExceeded,
  // Receive side: the message was longer than the receive request's
  // buffers.
  kLocalLengthError,
  // Receive side: a SEND with Invalidate named an R_Key this queue pair may
  // not invalidate; its data were placed, the receive completes with this
  // status, and the queue pair enters the error state (IBA responder class
  // J, as Linux rxe has it).
  kInvalidateError,
  // Receive side: a local key of the receive's buffers stopped resolving to
  // them (deregistered, or registered again elsewhere) after it was posted:
  // nothing was placed; the requester is told with NAK "remote operational
  // error" and the queue pair enters the error state (IBA 9.9.3.1.3, as
  // hardware RNICs report it).
  kLocalProtectionError,
};
const char* WcStatusName(WcStatus s);

// Every posted work request produces exactly one Completion, in posting
// order. `silent` marks a success of a kWrSilentSuccess request: the consumer
// releases what it held for the request but reports nothing.
struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WrOpcode opcode = WrOpcode::kWrite;
  uint32_t byte_len = 0;
  bool silent = false;
};

// The end of a receive request: a SEND placed in its buffers, or a WRITE
// with immediate data that consumed it (byte_len: the WRITE's length).
// Receive requests complete in the order they were posted; those still
// posted when the QP enters the error state end without a completion.
struct RecvCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  uint32_t byte_len = 0;
  bool with_imm = false;
  bool write = false;  // consumed by a WRITE with immediate data
  bool solicited = false;  // the message's last packet asked for an event
  uint32_t imm = 0;    // ImmDt, as on the wire
  // A SEND with Invalidate: `invalidated_rkey` (the IETH's R_Key) no longer
  // resolves. Only on a successful receive.
  bool invalidated = false;
  wire::Rkey invalidated_rkey;
  // UD: the receive's first kGrhBytes hold the GRH (an IPv4 header in its
  // last 20, as RoCEv2 has it), and byte_len counts them; src_qp is the
  // sender's queue pair.
  bool grh = false;
  wire::Qpn src_qp;
};

// The room a UD receive keeps in front of the message for its GRH.
inline constexpr uint32_t kGrhBytes = 40;

enum class PostResult : uint8_t {
  kOk = 0,
  kQueueFull,  // send queue full: try again after completions
  // Unknown flags, or a flag the opcode or transport does not take; too
  // many SGEs; length over 2 GiB.
  kInvalid,
  kNotConnected,  // the QP is in the error state
};

enum class QpState : uint8_t { kReadyToSend, kError };

struct QpConfig {
  // kRc, or kUc: the same SENDs and WRITEs with the UC opcodes, never
  // acknowledged or resent. A request completes once its last packet is
  // sent; the responder drops a message that lost a packet (or found no
  // receive request, or broke a rule) without a word to the requester and
  // waits for the next message's first packet. No READs, no atomics.
  // Or kUd: one-packet SENDs (UD SEND ONLY, with a DETH) to the
  // destination each request names (WorkRequest::ud), taken from any
  // sender whose frame carries `qkey`; remote_qpn, recv_psn and the
  // path's destination are unused.
  lifecycle::QpType type = lifecycle::QpType::kRc;
  uint32_t qkey = 0;  // UD
  // The partition: frames whose BTH P_Key does not match it (wire::
  // PkeysMatch) are dropped and counted; ours carry it.
  uint16_t pkey = wire::kDefaultPkey;
  wire::Qpn local_qpn;
  wire::Qpn remote_qpn;
  wire::Psn send_psn;       // first PSN of our requester
  wire::Psn recv_psn;       // first PSN the peer's requester uses
  wire::Path path;          // Ethernet/IP/UDP addressing towards the peer
  uint32_t pmtu = 1024;     // payload bytes per packet: 256..4096
  uint32_t sq_depth = 256;  // power of two
  uint32_t max_inflight_packets = 128;  // go-back-N window
  uint32_t ack_req_every = 16;          // AckReq at least every N packets
  uint32_t max_rd_atomic = 16;          // reads and atomics we keep outstanding
  // Responder resources (power of 2): as many READs of the peer kept for
  // replay, and as many atomics' results.
  uint32_t max_dest_rd_atomic = 16;
  // Doubled after each timeout without progress (up to 64x).
  uint64_t retransmit_timeout_ns = 1'000'000;
  uint32_t retry_count = 7;  // retransmissions without progress
  uint32_t rq_depth = 256;   // receive requests posted at once (power of 2)
  // RNR NAKs in a row the requester retries (7: for ever).
  uint32_t rnr_retry = 7;
  // The RNR timer code (wire::RnrTimerNs) our responder's RNR NAKs carry.
  uint8_t min_rnr_timer = 1;
};

// What a verbs application sets when its QP moves to RTS, after the QP
// already serves as a responder (RcQp::StartRequester).
struct RequesterSettings {
  wire::Psn send_psn;
  uint32_t retry_count = 7;
  uint32_t rnr_retry = 7;
  uint64_t retransmit_timeout_ns = 1'000'000;
  uint32_t max_rd_atomic = 16;  // READs and atomics kept outstanding
};

// What a verbs application may change of a responder in passing (RTR->RTS,
// RTS->RTS): the remote operations it serves and its RNR timer.
struct ResponderSettings {
  uint8_t remote_access = 0;  // mr::kAccessRemote* bits
  uint8_t min_rnr_timer = 1;  // the code our RNR NAKs carry (0..31)
};

// Per-QP counters; engine thread only.
struct QpStats {
  StatCounter tx_packets;
  StatCounter rx_packets;
  StatCounter retransmitted_packets;
  StatCounter timeouts;
  StatCounter naks_sent;
  StatCounter naks_received;
  StatCounter seq_naks_sent;
  StatCounter acks_sent;
  StatCounter duplicate_requests;
  StatCounter atomics_executed;  // COMPARE SWAPs and FETCH ADDs carried out
  // Resent atomics answered from the atomic resources, not executed again.
  StatCounter atomic_replays;
  StatCounter out_of_order_responses;
  StatCounter ignored_packets;  // stale, foreign or inconsistent
  StatCounter access_errors;    // remote accesses this responder refused
  // Requests this responder refused with NAK "invalid request": opcodes it
  // does not serve, reserved ones, ones out of sequence, bad lengths.
  StatCounter invalid_requests;
  StatCounter pkey_violations;  // frames of another partition, dropped
  StatCounter bad_responses;    // responses that broke the protocol
  StatCounter rnr_naks_sent;    // a SEND found no receive request
  StatCounter rnr_naks_received;
  // SENDs with Invalidate whose R_Key this responder invalidated, and those
  // whose R_Key it could not (WcStatus::kInvalidateError).
  StatCounter invalidations;
  StatCounter invalidate_errors;
  // SENDs refused because the receive's buffers were deregistered after
  // it was posted (WcStatus::kLocalProtectionError).
  StatCounter local_protection_errors;
  // UC: messages the responder dropped (a packet lost, no receive request,
  // a rule broken); the requester never learns of them.
  StatCounter uc_messages_dropped;
  // UD: datagrams dropped for a Q_Key other than the queue pair's, and for
  // want of a receive request.
  StatCounter qkey_violations;
  StatCounter ud_no_receive;
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_TYPES_H_
