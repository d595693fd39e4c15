// One connected queue pair, reliable (RC) or unreliable (UC): requester (RDMA WRITE, READ, SEND and
// the atomics COMPARE SWAP and FETCH ADD), completer (ACK/NAK, read-response
// and atomic-acknowledge handling, go-back-N retransmission) and responder
// (executes the peer's requests against registered memory), as in the
// InfiniBand RC transport. A UC queue pair (QpConfig::type) is the same
// requester and responder for SENDs and WRITEs without acknowledgements,
// resends or NAKs.
//
// Engine thread only: a QP is created, polled and destroyed by the engine that
// owns it; nothing in it locks or allocates after construction. The
// environment (clock, transmit, memory, completions) is injected.
#ifndef RDMAPLANE_DATAPLANE_RC_QP_H_
#define RDMAPLANE_DATAPLANE_RC_QP_H_

#include <cstdint>
#include <memory>

#include "dataplane/rc/interfaces.h"
#include "dataplane/rc/thread_owner.h"
#include "dataplane/rc/types.h"
#include "dataplane/wire/psn.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::rc {

class RcQp {
 public:
  struct Env {
    const Clock* clock = nullptr;
    FrameSink* tx = nullptr;
    RemoteMemory* memory = nullptr;
    CompletionSink* completions = nullptr;
  };

  // `config` must be valid (see ValidateConfig).
  RcQp(const QpConfig& config, const Env& env);
  ~RcQp();
  RcQp(const RcQp&) = delete;
  RcQp& operator=(const RcQp&) = delete;

  // Returns nullptr when the configuration is acceptable, else the reason.
  static const char* ValidateConfig(const QpConfig& config);

  // Queues a work request; the request (and its SGL) is copied.
  PostResult Post(const WorkRequest& wr);

  // Queues a receive request: the buffers (wr.sge) the peer's next SEND,
  // or the receive a WRITE with immediate data consumes. Only wr_id,
  // num_sge and sge are used.
  PostResult PostRecv(const WorkRequest& wr);
  // Whether PostRecv would find the receive queue full (rq_depth taken and
  // not used yet).
  bool RecvQueueFull() const {
    return rq_tail_ - rq_head_ >= config_.rq_depth;
  }
  // Receive requests posted and not yet consumed.
  uint32_t recv_outstanding() const { return rq_tail_ - rq_head_; }

  // Handles one received frame addressed to this QP.
  void HandleFrame(const wire::ParsedPacket& pkt);

  // Runs the retransmit timer, then sends up to `budget` frames: responses
  // (ACK/NAK, read data) first, then requests. Returns the frames sent.
  uint32_t Poll(uint32_t budget);

  // The requester's first PSN and retry settings, set once the QP already
  // serves as a responder (verbs: RTR, then RTS). Only before anything was
  // posted; returns false (and changes nothing) after.
  bool StartRequester(const RequesterSettings& s);
  // The RNR timer code (0..31) of the RNR NAKs sent from now on (verbs:
  // min_rnr_timer changed at RTS); false, changing nothing, above 31.
  bool SetMinRnrTimer(uint8_t code);

  // Moves the QP to the error state: every queued work request completes
  // with kFlushed. Used when the connection is torn down.
  void Flush();

  QpState state() const { return state_; }
  // Why the QP entered the error state: the status of the request that
  // failed (retries exhausted, the peer's NAK, a bad response),
  // kPeerInvalidRequest or kPeerAccessError when our responder refused a
  // request of the peer (once its NAK is sent), kPeerInvalidRequest too
  // after a SEND with Invalidate whose key it could not invalidate (once
  // its ACK is sent), kFlushed when it was torn down (Flush), kSuccess
  // while it is not in error.
  WcStatus error_status() const { return error_status_; }
  const QpStats& stats() const { return stats_; }
  const QpConfig& config() const { return config_; }
  // Work requests posted and not yet completed.
  uint32_t outstanding() const { return sq_tail_ - sq_head_; }
  // When the retransmit timer fires next (0: disarmed); lets a caller sleep.
  uint64_t timer_deadline_ns() const { return timer_deadline_ns_; }
  // True while the responder has responses waiting to be sent.
  bool responder_busy() const { return resp_q_head_ != resp_q_tail_; }

 private:
  struct Wqe {
    WorkRequest wr;
    uint32_t length = 0;
    wire::Psn first_psn;
    wire::Psn last_psn;
    bool started = false;    // sent at least once (fence and read counting)
    // All read response bytes placed; for an atomic, its ATOMIC ACKNOWLEDGE
    // arrived and the original value is in its SGE.
    bool read_done = false;
    uint32_t read_received = 0;
    wire::Psn read_next_psn;  // next expected response PSN
    // Where the last READ request sent for it starts: the only PSN at which
    // a response stream (FIRST or ONLY) may begin.
    wire::Psn read_request_psn;
  };

  // A read the responder accepted: kept for replay of duplicates.
  struct ReadResource {
    bool valid = false;
    wire::Psn first_psn;
    wire::Psn last_psn;
    uint64_t va = 0;
    wire::Rkey rkey;
    uint32_t length = 0;
    // Response generation cursor. A queued kRead item serves the stream it
    // was queued for only: a reused slot starts a new stream_seq.
    bool active = false;
    uint32_t stream_seq = 0;
    wire::Psn next_psn;
    uint8_t* addr = nullptr;  // memory at the stream's first byte
    MemoryOwner* owner = nullptr;  // of that memory (zero-copy transmit)
    bool pinned = false;      // rkey is pinned for this stream
    uint32_t stream_length = 0;
    uint32_t stream_offset = 0;
  };

  // An atomic the responder executed, kept so that a resend of it (the
  // same PSN: its ATOMIC ACKNOWLEDGE was lost) is answered with the same
  // original value instead of being executed again (IBA 9.7.5.1.5). The
  // slot's previous atomic is at least max_dest_rd_atomic atomics old: the
  // requester, which keeps no more than that outstanding, is done with it.
  struct AtomicResource {
    bool valid = false;
    wire::Psn psn;
    wire::Opcode opcode = wire::Opcode::kFetchAdd;
    uint64_t va = 0;
    wire::Rkey rkey;
    uint64_t orig = 0;  // the word before the operation
  };

  enum class RespKind : uint8_t { kAck, kRead, kAtomic };
  // Responses carry the responder's current MSN when they are sent (the
  // number of messages it has completed), as the IBA has every
  // acknowledgement do, so the MSNs on the wire never go back, replayed
  // read responses included.
  struct RespItem {
    RespKind kind;
    uint8_t syndrome;   // kAck: AETH syndrome
    wire::Psn psn;      // kAck, kAtomic
    uint32_t resource;  // kRead: index into read_resources_
    uint32_t stream;    // kRead: the resource's stream_seq when queued
    uint64_t orig = 0;  // kAtomic: the original value it carries
    // kAck: once it is sent, the QP enters the error state (EndAfterAck).
    bool ends_connection = false;
  };

  // Requester.
  uint32_t SendRequests(uint32_t budget);
  bool SendOnePacket(Wqe& wqe);
  void SeekSendCursor(wire::Psn psn);
  void GoBack(bool count_retry);
  void RequestRetransmit();
  void ArmTimer();
  uint64_t RetransmitTimeoutNs() const;
  void CheckTimer();
  // Completer.
  void HandleResponse(const wire::ParsedPacket& pkt);
  void HandleAck(const wire::ParsedPacket& pkt);
  void HandleReadResponse(const wire::ParsedPacket& pkt);
  void HandleAtomicAck(const wire::ParsedPacket& pkt);
  // The oldest started READ or atomic whose response has not all arrived,
  // or nullptr: responses answer them in PSN order.
  Wqe* OldestAwaitingResponse();
  void OnProgress();
  void RetireCompleted();
  void RecomputeUna();
  void CompleteWqe(Wqe& wqe, WcStatus status);
  // Fails the WQE holding `at` with `status` and flushes every other one.
  void EnterError(WcStatus status, wire::Psn at);
  // Moves to the error state for `cause`: the WQE holding `*failed_at`, if
  // given, completes with `cause`, every other one with kFlushed.
  void Shutdown(WcStatus cause, const wire::Psn* failed_at);
  // UC and UD: nothing acknowledged, nothing resent.
  bool unreliable() const { return config_.type != lifecycle::QpType::kRc; }
  bool datagram() const { return config_.type == lifecycle::QpType::kUd; }
  // UD: a datagram for this queue pair from anyone with its Q_Key lands in
  // the next receive request, behind its GRH; otherwise it is dropped.
  void HandleDatagram(const wire::ParsedPacket& pkt);
  // Responder.
  void HandleRequest(const wire::ParsedPacket& pkt);
  // UC: a packet out of sequence (one was lost) or one that does not fit
  // the message in progress drops that message; only a FIRST or ONLY
  // packet starts the next one.
  void HandleUcRequest(const wire::ParsedPacket& pkt);
  // UC: the message in progress (if any) is dropped, and so is every packet
  // until the next one that starts a message.
  void DropUcMessage();
  // Refuses the request at `psn` with a NAK 0x61 or 0x62: later requests
  // are dropped, and once the NAK is sent the QP enters the error state, as
  // the IBA has a responder do for these errors (its classes B and C); at
  // once if the NAK cannot be queued.
  void RefuseRequest(uint8_t syndrome, wire::Psn psn);
  // The message at `psn` was executed but its receive failed in a way that
  // ends the connection (a SEND with Invalidate whose key could not be
  // invalidated: the IBA's responder class J). Like RefuseRequest, but the
  // answer is an ACK of `psn`: later requests are dropped, and once the
  // ACK is sent the QP enters the error state (kPeerInvalidRequest).
  void EndAfterAck(wire::Psn psn);
  void HandleDuplicateRequest(const wire::ParsedPacket& pkt);
  bool ExecuteWrite(const wire::ParsedPacket& pkt);
  bool ExecuteSend(const wire::ParsedPacket& pkt);
  // No receive request for the message at `psn`: RNR NAK, and the packets
  // after it are dropped until the requester resends it.
  void RefuseNotReady(wire::Psn psn);
  // The receive request at the head of the receive queue ends.
  void CompleteRecv(WcStatus status, uint32_t byte_len, bool write,
                    const wire::ParsedPacket& pkt);
  bool ExecuteReadRequest(const wire::ParsedPacket& pkt);
  // COMPARE SWAP and FETCH ADD: alignment, room for the answer, the remote
  // key, then one atomic instruction on the word.
  bool ExecuteAtomic(const wire::ParsedPacket& pkt);
  // A resent atomic: its answer again, from the atomic resources.
  void ReplayAtomic(const wire::ParsedPacket& pkt);
  void QueueAck(wire::Psn psn);
  void QueueNak(uint8_t syndrome, wire::Psn psn);
  bool PushResp(const RespItem& item);
  bool RespQueueFull() const {
    return resp_q_tail_ - resp_q_head_ > resp_q_mask_;
  }
  uint32_t SendResponses(uint32_t budget);
  bool SendAck(const RespItem& item);
  bool SendReadResponse(ReadResource& res);
  bool SendAtomicAck(const RespItem& item);
  void ReleaseWrite();
  void ReleaseRead(ReadResource& res);
  void ReleaseAll();

  // Zero-copy transmit: true when `payload` bytes are worth sending in place.
  bool WantsGather(uint32_t payload) const {
    const uint32_t min = env_.tx->min_gather_payload();
    return min != 0 && payload >= min;
  }
  // Sends the frame whose headers (`header_len` bytes) are in `frame` (from
  // Reserve, large enough for the whole frame) with `payload` in place, and
  // returns true; false (nothing sent) when the sink cannot take them.
  bool CommitGathered(std::span<uint8_t> frame, size_t header_len,
                      std::span<const PayloadPiece> payload);
  wire::PacketHeaders BaseHeaders() const;
  Wqe& wqe_at(uint32_t index) { return sq_[index & sq_mask_]; }
  uint32_t PacketsFor(uint32_t length) const;

  // Changed once by StartRequester, before any post; min_rnr_timer by
  // SetMinRnrTimer.
  QpConfig config_;
  const Env env_;
  ThreadOwner owner_;
  QpState state_ = QpState::kReadyToSend;
  WcStatus error_status_ = WcStatus::kSuccess;
  QpStats stats_;

  // Requester: WQEs [sq_head_, sq_tail_) are posted and not yet completed;
  // [sq_head_, sq_send_) have been sent at least up to the send cursor.
  std::unique_ptr<Wqe[]> sq_;
  uint32_t sq_mask_;
  uint32_t sq_head_ = 0;
  uint32_t sq_send_ = 0;
  uint32_t sq_tail_ = 0;
  // Where the oldest unfinished READ may be: every WQE in [sq_head_,
  // read_scan_) was sent and is no READ or a finished one (neither ever
  // changes back), so a read response's search starts here rather than
  // at sq_head_. Behind sq_head_ after retirements: start there.
  uint32_t read_scan_ = 0;
  uint32_t send_offset_ = 0;   // bytes of wqe_at(sq_send_) already sent
  wire::Psn next_psn_;         // PSN of the next packet to send
  wire::Psn alloc_psn_;        // PSN the next posted WQE starts at
  wire::Psn sent_limit_;       // one past the highest PSN ever sent
  wire::Psn acked_psn_;        // every PSN up to this one is acknowledged
  wire::Psn una_;              // oldest PSN not acknowledged
  uint32_t outstanding_reads_ = 0;
  uint32_t pkts_since_ack_req_ = 0;
  uint64_t timer_deadline_ns_ = 0;  // 0: disarmed
  // Timeouts in a row without progress: the timeout is doubled that often.
  static constexpr uint32_t kMaxBackoffShift = 6;
  uint32_t backoff_shift_ = 0;
  // Packets that may be in flight (at most max_inflight_packets). A
  // retransmission timeout means the path lost a whole window, or the peer
  // could not take it (a receive ring overflowing, a descheduled peer):
  // what is resent then is one packet, and each acknowledgement of
  // progress doubles the window back, so that a resent window does not
  // overflow the same ring again and again until the retries run out.
  uint32_t window_;
  uint32_t retries_left_;
  bool went_back_at_una_ = false;  // a NAK or gap already sent us back
                                   // to the current una_
  // After an RNR NAK, nothing is sent until then (0: no RNR wait).
  uint64_t rnr_until_ns_ = 0;
  uint32_t rnr_retries_left_;

  // Responder.
  wire::Psn epsn_;             // next expected request PSN
  uint32_t msn_ = 0;           // completed request messages (24 bits)
  bool seq_nak_sent_ = false;  // one NAK per sequence gap
  bool refusing_ = false;      // a NAK refusing a request is queued
  bool write_active_ = false;  // inside a multi-packet write
  bool write_pinned_ = false;  // write_rkey_ is pinned (see RemoteMemory)
  wire::Rkey write_rkey_;
  uint8_t* write_addr_ = nullptr;
  uint32_t write_remaining_ = 0;
  uint32_t write_length_ = 0;  // the whole write's (a receive's byte_len)
  bool send_active_ = false;   // inside a multi-packet SEND
  bool uc_dropping_ = false;   // UC: dropping until a message starts
  uint32_t recv_offset_ = 0;   // bytes of the SEND placed so far
  // Receive queue: [rq_head_, rq_tail_) posted, the head one being filled.
  std::unique_ptr<WorkRequest[]> rq_;
  uint32_t rq_mask_;
  uint32_t rq_head_ = 0;
  uint32_t rq_tail_ = 0;
  std::unique_ptr<ReadResource[]> read_resources_;
  uint32_t read_res_next_ = 0;  // free-running index of the next slot
  std::unique_ptr<AtomicResource[]> atomic_resources_;
  uint32_t atomic_res_next_ = 0;  // free-running index of the next slot
  std::unique_ptr<RespItem[]> resp_q_;
  uint32_t resp_q_mask_;
  uint32_t resp_q_head_ = 0;
  uint32_t resp_q_tail_ = 0;
  bool resp_tail_ack_open_ = false;  // the last queued item is an ACK still
                                     // open for coalescing
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_QP_H_
