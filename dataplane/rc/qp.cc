// RcQp construction, posting, polling and the error state. The requester and
// completer live in requester.cc, the responder in responder.cc.
#include "dataplane/rc/qp.h"

#include "dataplane/rc/sgl.h"
#include "dataplane/wire/icrc.h"

namespace rdmaplane::rc {
namespace {

bool IsPowerOfTwo(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

uint32_t NextPowerOfTwo(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// PSNs a send queue may hold at once: well inside the 2^23 ordering window.
constexpr uint32_t kMaxPsnsOutstanding = 1u << 22;

}  // namespace

const char* WcStatusName(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess: return "success";
    case WcStatus::kRemoteAccessError: return "remote_access_error";
    case WcStatus::kRemoteInvalidRequest: return "remote_invalid_request";
    case WcStatus::kRemoteOperationalError: return "remote_operational_error";
    case WcStatus::kRetryExceeded: return "retry_exceeded";
    case WcStatus::kFlushed: return "flushed";
    case WcStatus::kBadResponse: return "bad_response";
    case WcStatus::kPeerInvalidRequest: return "peer_invalid_request";
    case WcStatus::kPeerAccessError: return "peer_access_error";
    case WcStatus::kRnrRetryExceeded: return "rnr_retry_exceeded";
    case WcStatus::kLocalLengthError: return "local_length_error";
    case WcStatus::kInvalidateError: return "invalidate_error";
    case WcStatus::kLocalProtectionError: return "local_protection_error";
  }
  return "unknown";
}

const char* RcQp::ValidateConfig(const QpConfig& c) {
  if (c.pmtu != 256 && c.pmtu != 512 && c.pmtu != 1024 && c.pmtu != 2048 &&
      c.pmtu != 4096) {
    return "path MTU must be 256, 512, 1024, 2048 or 4096";
  }
  if (!IsPowerOfTwo(c.sq_depth) || c.sq_depth > 65536) {
    return "send queue depth must be a power of two up to 65536";
  }
  if (!IsPowerOfTwo(c.rq_depth) || c.rq_depth > 65536) {
    return "receive queue depth must be a power of two up to 65536";
  }
  if (c.rnr_retry > 7 || c.min_rnr_timer > 31) {
    return "RNR retry is 0..7 and the RNR timer code 0..31";
  }
  if (!IsPowerOfTwo(c.max_dest_rd_atomic) || c.max_dest_rd_atomic > 256) {
    return "responder read resources must be a power of two up to 256";
  }
  if (c.max_rd_atomic == 0 || c.max_rd_atomic > 256) {
    return "outstanding reads must be 1..256";
  }
  if (c.max_inflight_packets == 0 || c.max_inflight_packets > (1u << 22)) {
    return "in-flight packet window must be 1..2^22";
  }
  if (c.ack_req_every == 0) return "ack request interval must be positive";
  if (c.retransmit_timeout_ns == 0) return "retransmit timeout must be positive";
  if ((c.pkey & 0x7FFF) == 0) return "P_Keys 0x0000 and 0x8000 are invalid";
  if (c.type != lifecycle::QpType::kRc && c.type != lifecycle::QpType::kUc &&
      c.type != lifecycle::QpType::kUd) {
    return "a queue pair is RC, UC or UD";
  }
  if (c.local_qpn.value() > wire::Psn::kMask ||
      c.remote_qpn.value() > wire::Psn::kMask) {
    return "queue pair numbers are 24 bits";
  }
  return nullptr;
}

RcQp::RcQp(const QpConfig& config, const Env& env)
    : config_(config),
      env_(env),
      sq_(new Wqe[config.sq_depth]),
      sq_mask_(config.sq_depth - 1),
      next_psn_(config.send_psn),
      alloc_psn_(config.send_psn),
      sent_limit_(config.send_psn),
      acked_psn_(config.send_psn - 1),
      una_(config.send_psn),
      window_(config.max_inflight_packets),
      retries_left_(config.retry_count),
      rnr_retries_left_(config.rnr_retry),
      epsn_(config.recv_psn),
      rq_(new WorkRequest[config.rq_depth]),
      rq_mask_(config.rq_depth - 1),
      read_resources_(new ReadResource[config.max_dest_rd_atomic]),
      atomic_resources_(new AtomicResource[config.max_dest_rd_atomic]) {
  // At most one coalesced ACK sits between two reads or atomics (the peer
  // keeps no more of them outstanding than we have resources), plus NAKs.
  const uint32_t resp_capacity =
      NextPowerOfTwo(2 * config.max_dest_rd_atomic + 8);
  resp_q_.reset(new RespItem[resp_capacity]);
  resp_q_mask_ = resp_capacity - 1;
}

RcQp::~RcQp() = default;

bool RcQp::StartRequester(const RequesterSettings& s) {
  owner_.Check();
  if (sq_tail_ != 0 || alloc_psn_ != config_.send_psn || s.retry_count > 7 ||
      s.rnr_retry > 7 || s.retransmit_timeout_ns == 0 ||
      s.max_rd_atomic == 0) {
    return false;
  }
  const wire::Psn psn = s.send_psn;
  config_.send_psn = psn;
  config_.retry_count = s.retry_count;
  config_.rnr_retry = s.rnr_retry;
  config_.retransmit_timeout_ns = s.retransmit_timeout_ns;
  config_.max_rd_atomic = s.max_rd_atomic;
  retries_left_ = s.retry_count;
  rnr_retries_left_ = s.rnr_retry;
  next_psn_ = psn;
  alloc_psn_ = psn;
  sent_limit_ = psn;
  acked_psn_ = psn - 1;
  una_ = psn;
  return true;
}

bool RcQp::SetMinRnrTimer(uint8_t code) {
  owner_.Check();
  if (code > 31) return false;
  config_.min_rnr_timer = code;
  return true;
}

uint32_t RcQp::PacketsFor(uint32_t length) const {
  return length == 0 ? 1 : (length + config_.pmtu - 1) / config_.pmtu;
}

PostResult RcQp::Post(const WorkRequest& wr) {
  owner_.Check();
  if (state_ != QpState::kReadyToSend) return PostResult::kNotConnected;
  if ((wr.flags & ~kWrKnownFlags) != 0 || wr.num_sge > kMaxSge ||
      static_cast<uint8_t>(wr.opcode) >
          static_cast<uint8_t>(WrOpcode::kFetchAdd) ||
      (AwaitsResponse(wr.opcode) && (wr.flags & kWrImmediate) != 0)) {
    return PostResult::kInvalid;
  }
  // SEND with Invalidate is an RC opcode (UC and UD have none), and has no
  // variant with immediate data.
  if ((wr.flags & kWrInvalidate) != 0 &&
      (wr.opcode != WrOpcode::kSend || config_.type != lifecycle::QpType::kRc ||
       (wr.flags & kWrImmediate) != 0)) {
    return PostResult::kInvalid;
  }
  // UC carries SENDs and WRITEs only (IBA 9.8.1), UD SENDs of one packet
  // each, to a queue pair that is not 0.
  if (config_.type == lifecycle::QpType::kUc &&
      wr.opcode != WrOpcode::kWrite && wr.opcode != WrOpcode::kSend) {
    return PostResult::kInvalid;
  }
  if (datagram() &&
      (wr.opcode != WrOpcode::kSend || SglLength(wr) > config_.pmtu ||
       wr.ud.qpn.value() == 0 || wr.ud.qpn.value() > wire::Psn::kMask)) {
    return PostResult::kInvalid;
  }
  // An atomic's original value lands in exactly one 8-byte buffer.
  if (IsAtomic(wr.opcode) &&
      (wr.num_sge != 1 || wr.sge[0].length != kAtomicBytes)) {
    return PostResult::kInvalid;
  }
  const uint64_t length = SglLength(wr);
  if (length > (1u << 31)) return PostResult::kInvalid;
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].addr == nullptr && wr.sge[i].length != 0) {
      return PostResult::kInvalid;
    }
  }
  const uint32_t npkts = PacketsFor(static_cast<uint32_t>(length));
  if (sq_tail_ - sq_head_ >= config_.sq_depth ||
      static_cast<uint32_t>(alloc_psn_.DistanceFrom(una_)) + npkts >
          kMaxPsnsOutstanding) {
    return PostResult::kQueueFull;
  }
  Wqe& w = wqe_at(sq_tail_);
  w = Wqe{};
  w.wr = wr;
  w.length = static_cast<uint32_t>(length);
  w.first_psn = alloc_psn_;
  w.last_psn = alloc_psn_ + (npkts - 1);
  w.read_next_psn = alloc_psn_;
  alloc_psn_ += npkts;
  ++sq_tail_;
  return PostResult::kOk;
}

PostResult RcQp::PostRecv(const WorkRequest& wr) {
  owner_.Check();
  if (state_ != QpState::kReadyToSend) return PostResult::kNotConnected;
  if (wr.num_sge > kMaxSge || SglLength(wr) > (1u << 31)) {
    return PostResult::kInvalid;
  }
  // A buffer without an address is one whose local key reached nothing
  // (Sge::lkey says which): taken, and failed by the message that uses it
  // (BuffersPlaceable).
  for (uint32_t i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].addr == nullptr && wr.sge[i].length != 0 &&
        wr.sge[i].lkey == 0) {
      return PostResult::kInvalid;
    }
  }
  if (rq_tail_ - rq_head_ >= config_.rq_depth) return PostResult::kQueueFull;
  rq_[rq_tail_ & rq_mask_] = wr;
  ++rq_tail_;
  return PostResult::kOk;
}

uint32_t RcQp::Poll(uint32_t budget) {
  owner_.Check();
  if (state_ != QpState::kReadyToSend) return 0;
  CheckTimer();
  if (state_ != QpState::kReadyToSend) return 0;
  // Responses may take half the budget first so that a long read stream
  // does not starve our own requests, then whatever requests left over.
  // Sending a NAK that refuses a request moves the QP to the error state.
  uint32_t sent = SendResponses(budget / 2 + 1);
  if (state_ == QpState::kReadyToSend) sent += SendRequests(budget - sent);
  if (state_ == QpState::kReadyToSend) sent += SendResponses(budget - sent);
  stats_.tx_packets += sent;
  return sent;
}

void RcQp::HandleFrame(const wire::ParsedPacket& pkt) {
  owner_.Check();
  if (datagram()) {
    HandleDatagram(pkt);
    return;
  }
  // Only the connected peer may use this QP, and only with its transport's
  // opcodes (a UC queue pair takes no acknowledgements).
  if (state_ != QpState::kReadyToSend ||
      pkt.bth.dest_qp != config_.local_qpn ||
      pkt.src_ip != config_.path.dst_ip ||
      (config_.type == lifecycle::QpType::kUc
           ? !wire::IsUcOpcode(static_cast<uint8_t>(pkt.bth.opcode))
           : !wire::IsRcOpcode(static_cast<uint8_t>(pkt.bth.opcode)))) {
    ++stats_.ignored_packets;
    return;
  }
  // A packet of another partition is dropped and counted (the IBA's P_Key
  // check of every received packet), whatever it is.
  if (!wire::PkeysMatch(pkt.bth.pkey, config_.pkey)) {
    ++stats_.pkey_violations;
    return;
  }
  ++stats_.rx_packets;
  if (unreliable()) {
    HandleUcRequest(pkt);
  } else if (wire::IsRequest(pkt.bth.opcode)) {
    HandleRequest(pkt);
  } else {
    HandleResponse(pkt);
  }
}

void RcQp::Flush() {
  owner_.Check();
  Shutdown(WcStatus::kFlushed, nullptr);
}

void RcQp::CompleteWqe(Wqe& w, WcStatus status) {
  if (AwaitsResponse(w.wr.opcode) && w.started && !w.read_done) {
    --outstanding_reads_;
  }
  Completion c;
  c.silent =
      status == WcStatus::kSuccess && (w.wr.flags & kWrSilentSuccess) != 0;
  c.wr_id = w.wr.wr_id;
  c.status = status;
  c.opcode = w.wr.opcode;
  c.byte_len = status == WcStatus::kSuccess ? w.length : 0;
  env_.completions->Complete(c);
}

void RcQp::EnterError(WcStatus status, wire::Psn at) { Shutdown(status, &at); }

void RcQp::Shutdown(WcStatus cause, const wire::Psn* failed_at) {
  if (state_ == QpState::kError) return;
  state_ = QpState::kError;
  error_status_ = cause;
  for (; sq_head_ != sq_tail_; ++sq_head_) {
    Wqe& w = wqe_at(sq_head_);
    const bool failed = failed_at != nullptr && w.first_psn <= *failed_at &&
                        *failed_at <= w.last_psn;
    CompleteWqe(w, failed ? cause : WcStatus::kFlushed);
  }
  sq_send_ = sq_head_;
  timer_deadline_ns_ = 0;
  rnr_until_ns_ = 0;
  // Receive requests end without a completion: their owner ends them.
  rq_head_ = rq_tail_;
  resp_q_head_ = resp_q_tail_;
  resp_tail_ack_open_ = false;
  ReleaseAll();
}

bool RcQp::CommitGathered(std::span<uint8_t> frame, size_t header_len,
                          std::span<const PayloadPiece> payload) {
  if (!env_.tx->CanGather(payload)) return false;
  // The ICRC covers the payload: read it in place, once.
  const std::span<const uint8_t> headers = frame.first(header_len);
  uint32_t icrc = wire::HeadersIcrc(headers);
  for (const PayloadPiece& p : payload) {
    icrc = wire::ExtendIcrc(icrc, {p.data, p.len});
  }
  uint8_t trailer[wire::kMaxTrailerLen];
  const size_t trailer_len = wire::EncodeTrailer(headers, icrc, trailer);
  env_.tx->CommitGather(frame, header_len, payload, {trailer, trailer_len});
  return true;
}

wire::PacketHeaders RcQp::BaseHeaders() const {
  wire::PacketHeaders h;
  h.path = config_.path;
  h.bth.pkey = config_.pkey;
  h.bth.dest_qp = config_.remote_qpn;
  return h;
}

}  // namespace rdmaplane::rc
