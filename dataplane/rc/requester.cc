// Requester and completer of an RC QP: segmentation of WRITEs and SENDs
// (with immediate data or, RC only, Invalidate) into packets, READ
// requests, atomics, ACK/NAK, read-response and atomic-acknowledge
// processing, in-order completion, go-back-N retransmission and the retry
// budget.
#include <algorithm>
#include <cstring>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sgl.h"

namespace rdmaplane::rc {

using wire::Opcode;
using wire::Psn;

uint32_t RcQp::SendRequests(uint32_t budget) {
  if (rnr_until_ns_ != 0) return 0;  // the peer asked us to wait
  uint32_t sent = 0;
  while (sent < budget && sq_send_ != sq_tail_) {
    Wqe& w = wqe_at(sq_send_);
    if (!w.started) {
      // READs and atomics share the initiator depth.
      if (AwaitsResponse(w.wr.opcode) &&
          outstanding_reads_ >= config_.max_rd_atomic) {
        break;
      }
      // READ_FENCE: every earlier read and atomic must have completed.
      if ((w.wr.flags & kWrReadFence) != 0 && outstanding_reads_ > 0) break;
    }
    // UC keeps no window: nothing it sends is ever acknowledged.
    if (!unreliable() &&
        static_cast<uint32_t>(next_psn_.DistanceFrom(una_)) >= window_) {
      break;
    }
    if (!SendOnePacket(w)) break;
    ++sent;
  }
  return sent;
}

bool RcQp::SendOnePacket(Wqe& w) {
  const Psn psn = next_psn_;
  wire::PacketHeaders h = BaseHeaders();
  h.bth.psn = psn;
  uint32_t payload = 0;
  uint32_t psns_used = 1;
  bool last = true;
  if (datagram()) {
    // One packet (Post checked the length), to the request's destination,
    // with the DETH naming us.
    payload = w.length;
    const bool imm = (w.wr.flags & kWrImmediate) != 0;
    h.bth.opcode = imm ? Opcode::kUdSendOnlyImmediate : Opcode::kUdSendOnly;
    h.bth.dest_qp = w.wr.ud.qpn;
    h.bth.solicited = (w.wr.flags & kWrSolicited) != 0;
    h.bth.ack_req = false;
    h.imm = w.wr.imm;
    h.path.dst_mac = w.wr.ud.mac;
    h.path.dst_ip = w.wr.ud.ip;
    h.deth.qkey =
        (w.wr.ud.qkey & 0x80000000u) != 0 ? config_.qkey : w.wr.ud.qkey;
    h.deth.src_qp = config_.local_qpn;
  } else if (IsAtomic(w.wr.opcode)) {
    // One packet, one PSN; its ATOMIC ACKNOWLEDGE is the answer, so it asks
    // for one like the last packet of any message.
    h.bth.opcode = w.wr.opcode == WrOpcode::kCompareSwap ? Opcode::kCompareSwap
                                                         : Opcode::kFetchAdd;
    h.bth.ack_req = true;
    w.read_request_psn = psn;
    h.atomic_eth.va = w.wr.remote_va;
    h.atomic_eth.rkey = w.wr.rkey;
    h.atomic_eth.swap_add = w.wr.swap_add;
    h.atomic_eth.compare = w.wr.compare;
  } else if (w.wr.opcode != WrOpcode::kRead) {
    const uint32_t remaining = w.length - send_offset_;
    const bool first = send_offset_ == 0;
    last = remaining <= config_.pmtu;
    payload = last ? remaining : config_.pmtu;
    const bool imm = (w.wr.flags & kWrImmediate) != 0;
    if (w.wr.opcode == WrOpcode::kSend) {
      // With Invalidate (RC only, never with immediate data: Post checked),
      // only the last packet differs: it carries the IETH.
      const bool invalidate = (w.wr.flags & kWrInvalidate) != 0;
      h.bth.opcode = last ? (first ? (imm          ? Opcode::kSendOnlyImmediate
                                      : invalidate ? Opcode::kSendOnlyInvalidate
                                                   : Opcode::kSendOnly)
                                   : (imm          ? Opcode::kSendLastImmediate
                                      : invalidate ? Opcode::kSendLastInvalidate
                                                   : Opcode::kSendLast))
                          : (first ? Opcode::kSendFirst : Opcode::kSendMiddle);
      h.ieth.rkey = w.wr.invalidate_rkey;
    } else {
      h.bth.opcode =
          last ? (first
                      ? (imm ? Opcode::kWriteOnlyImmediate : Opcode::kWriteOnly)
                      : (imm ? Opcode::kWriteLastImmediate : Opcode::kWriteLast))
               : (first ? Opcode::kWriteFirst : Opcode::kWriteMiddle);
    }
    if (last) {
      h.imm = w.wr.imm;
      h.bth.solicited = (w.wr.flags & kWrSolicited) != 0;
    }
    // Ask for an ACK at the end of a message, every few packets, and when
    // the window is about to close, so that the window keeps moving.
    h.bth.ack_req =
        last || pkts_since_ack_req_ + 1 >= config_.ack_req_every ||
        static_cast<uint32_t>((psn + 1).DistanceFrom(una_)) >= window_;
    if (first && w.wr.opcode == WrOpcode::kWrite) {
      h.reth.va = w.wr.remote_va;
      h.reth.rkey = w.wr.rkey;
      h.reth.dma_length = w.length;
    }
    if (unreliable()) {  // the UC namesake; nothing is acknowledged
      h.bth.opcode = static_cast<Opcode>(
          static_cast<uint8_t>(h.bth.opcode) | wire::kUcOpcodeBase);
      h.bth.ack_req = false;
    }
  } else {
    // A read (or the rest of one, after a retransmission) is one request
    // that consumes a PSN per response packet. It is a whole message, so
    // its only packet asks for an acknowledgement like the last packet of
    // any message (the read responses are that acknowledgement).
    const uint32_t offset = send_offset_;
    h.bth.opcode = Opcode::kReadRequest;
    h.bth.ack_req = true;
    w.read_request_psn = psn;
    h.reth.va = w.wr.remote_va + offset;
    h.reth.rkey = w.wr.rkey;
    h.reth.dma_length = w.length - offset;
    psns_used = PacketsFor(w.length - offset);
  }

  std::span<uint8_t> buf =
      env_.tx->Reserve(wire::FrameLength(h.bth.opcode, payload));
  if (buf.empty()) return false;
  const size_t hdr_len = wire::EncodeHeaders(h, payload, buf);
  bool in_place = false;
  if (WantsGather(payload)) {
    PayloadPiece pieces[kMaxSge];
    const uint32_t n = GatherFromSgl(w.wr, send_offset_, payload, pieces);
    in_place = CommitGathered(buf, hdr_len, {pieces, n});
  }
  if (!in_place) {
    if (payload > 0) {
      CopyFromSgl(w.wr, send_offset_, buf.data() + hdr_len, payload);
    }
    env_.tx->Commit(wire::FinishFrame(buf));
  }

  if (psn < sent_limit_) ++stats_.retransmitted_packets;
  pkts_since_ack_req_ = h.bth.ack_req ? 0 : pkts_since_ack_req_ + 1;
  if (AwaitsResponse(w.wr.opcode) && !w.started) ++outstanding_reads_;
  w.started = true;
  next_psn_ += psns_used;
  if (next_psn_ > sent_limit_) sent_limit_ = next_psn_;
  if (last || AwaitsResponse(w.wr.opcode)) {
    ++sq_send_;
    send_offset_ = 0;
  } else {
    send_offset_ += payload;
  }
  if (unreliable()) {
    // A UC request is done once its last packet is on the wire.
    if (last) {
      acked_psn_ = psn;
      RetireCompleted();
    }
    return true;
  }
  ArmTimer();
  return true;
}

void RcQp::SeekSendCursor(Psn psn) {
  uint32_t idx = sq_head_;
  while (idx != sq_tail_ && wqe_at(idx).last_psn < psn) ++idx;
  sq_send_ = idx;
  send_offset_ = 0;
  if (idx != sq_tail_) {
    const Wqe& w = wqe_at(idx);
    if (psn < w.first_psn) psn = w.first_psn;
    send_offset_ = static_cast<uint32_t>(psn.DistanceFrom(w.first_psn)) *
                   config_.pmtu;
  } else {
    psn = alloc_psn_;
  }
  next_psn_ = psn;
}

void RcQp::GoBack(bool count_retry) {
  if (count_retry) {
    if (retries_left_ == 0) {
      EnterError(WcStatus::kRetryExceeded, una_);
      return;
    }
    --retries_left_;
  }
  SeekSendCursor(una_);
  pkts_since_ack_req_ = 0;
}

// A NAK, an out-of-order response or an ACK past an unanswered read says
// packets from una_ on were lost: go back once per una_, not once per hint.
// Such a hint proves the peer alive, so it does not use up the retry count:
// only timeouts do (each one twice as long as the last), so that a path
// that loses packets, or a peer whose stale responses are still in flight,
// is not mistaken for a dead peer.
void RcQp::RequestRetransmit() {
  if (went_back_at_una_) return;
  went_back_at_una_ = true;
  GoBack(/*count_retry=*/false);
}

uint64_t RcQp::RetransmitTimeoutNs() const {
  return config_.retransmit_timeout_ns << backoff_shift_;
}

void RcQp::ArmTimer() {
  if (timer_deadline_ns_ == 0) {
    timer_deadline_ns_ = env_.clock->NowNs() + RetransmitTimeoutNs();
  }
}

void RcQp::CheckTimer() {
  if (timer_deadline_ns_ == 0 || env_.clock->NowNs() < timer_deadline_ns_) {
    return;
  }
  if (rnr_until_ns_ != 0) {  // the RNR wait is over: resend from una_
    rnr_until_ns_ = 0;
    went_back_at_una_ = false;
    timer_deadline_ns_ = env_.clock->NowNs() + RetransmitTimeoutNs();
    return;
  }
  if (una_ >= sent_limit_) {  // nothing unacknowledged
    timer_deadline_ns_ = 0;
    return;
  }
  ++stats_.timeouts;
  went_back_at_una_ = false;
  // Each timeout without progress doubles the next one: a peer that is
  // slow (descheduled, its queue overflowing) is not taken for a dead one.
  if (backoff_shift_ < kMaxBackoffShift) ++backoff_shift_;
  window_ = 1;
  timer_deadline_ns_ = env_.clock->NowNs() + RetransmitTimeoutNs();
  GoBack(/*count_retry=*/true);
}

void RcQp::OnProgress() {
  retries_left_ = config_.retry_count;
  rnr_retries_left_ = config_.rnr_retry;
  went_back_at_una_ = false;
  backoff_shift_ = 0;
  window_ = std::min(window_ * 2, config_.max_inflight_packets);
  timer_deadline_ns_ =
      una_ < sent_limit_ ? env_.clock->NowNs() + RetransmitTimeoutNs() : 0;
}

void RcQp::RecomputeUna() {
  if (sq_head_ == sq_tail_) {
    una_ = alloc_psn_;
    return;
  }
  const Wqe& w = wqe_at(sq_head_);
  una_ = AwaitsResponse(w.wr.opcode) ? w.read_next_psn : acked_psn_ + 1;
}

void RcQp::RetireCompleted() {
  const Psn old_una = una_;
  while (sq_head_ != sq_tail_) {
    Wqe& w = wqe_at(sq_head_);
    const bool done = AwaitsResponse(w.wr.opcode)
                          ? w.read_done
                          : w.started && w.last_psn <= acked_psn_;
    if (!done) break;
    CompleteWqe(w, WcStatus::kSuccess);
    ++sq_head_;
  }
  if (static_cast<int32_t>(sq_send_ - sq_head_) < 0) {
    sq_send_ = sq_head_;
    send_offset_ = 0;
  }
  RecomputeUna();
  // Never resend what the peer has acknowledged.
  if (next_psn_ < una_) SeekSendCursor(una_);
  if (una_ > old_una) OnProgress();
}

void RcQp::HandleResponse(const wire::ParsedPacket& pkt) {
  switch (wire::InfoOf(pkt.bth.opcode).op_class) {
    case wire::OpcodeClass::kAcknowledge:
      HandleAck(pkt);
      return;
    case wire::OpcodeClass::kReadResponse:
      HandleReadResponse(pkt);
      return;
    case wire::OpcodeClass::kAtomicAcknowledge:
      HandleAtomicAck(pkt);
      return;
    default:
      ++stats_.ignored_packets;
      return;
  }
}

void RcQp::HandleAck(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  // Only PSNs we have sent can be acknowledged; older ones are stale.
  if (psn >= sent_limit_ || psn < una_ - 1) {
    ++stats_.ignored_packets;
    return;
  }
  const uint8_t syndrome = pkt.aeth.syndrome;
  switch (syndrome >> 5) {
    case 0: {  // ACK
      if (psn > acked_psn_) acked_psn_ = psn;
      RetireCompleted();
      // The responder answered requests past a read or atomic whose
      // responses we still miss: they were lost.
      if (sq_head_ != sq_tail_) {
        const Wqe& head = wqe_at(sq_head_);
        if (AwaitsResponse(head.wr.opcode) && head.started &&
            head.read_next_psn <= acked_psn_) {
          ++stats_.out_of_order_responses;
          RequestRetransmit();
        }
      }
      return;
    }
    case 3: {  // NAK
      ++stats_.naks_received;
      // Everything before the NAK'd PSN was executed.
      if (psn - 1 > acked_psn_) acked_psn_ = psn - 1;
      RetireCompleted();
      switch (syndrome & 0x1F) {
        case 0:  // PSN sequence error: resend from the PSN the peer expects
          RequestRetransmit();
          return;
        case 1:
          EnterError(WcStatus::kRemoteInvalidRequest, psn);
          return;
        case 2:
          EnterError(WcStatus::kRemoteAccessError, psn);
          return;
        default:
          EnterError(WcStatus::kRemoteOperationalError, psn);
          return;
      }
    }
    case 1: {  // RNR NAK: no receive request for the message at `psn`
      ++stats_.rnr_naks_received;
      if (psn - 1 > acked_psn_) acked_psn_ = psn - 1;
      RetireCompleted();
      if (config_.rnr_retry != 7) {  // 7: retry for ever
        if (rnr_retries_left_ == 0) {
          EnterError(WcStatus::kRnrRetryExceeded, psn);
          return;
        }
        --rnr_retries_left_;
      }
      // Wait as long as the peer asked, then resend from the NAK'd PSN
      // (CheckTimer ends the wait; until then SendRequests sends nothing).
      rnr_until_ns_ = env_.clock->NowNs() + wire::RnrTimerNs(syndrome & 0x1F);
      timer_deadline_ns_ = rnr_until_ns_;
      went_back_at_una_ = true;  // the gaps the peer reports meanwhile
      SeekSendCursor(psn);
      pkts_since_ack_req_ = 0;
      return;
    }
    default:  // reserved
      ++stats_.ignored_packets;
      return;
  }
}

void RcQp::HandleReadResponse(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  if (psn >= sent_limit_) {
    ++stats_.ignored_packets;
    return;
  }
  // Responses come in PSN order for the oldest unfinished read (or atomic).
  Wqe* read = OldestAwaitingResponse();
  if (read == nullptr || psn < read->read_next_psn) {
    ++stats_.ignored_packets;  // a duplicate of something already placed
    return;
  }
  if (psn != read->read_next_psn) {
    ++stats_.out_of_order_responses;
    RequestRetransmit();
    return;
  }
  // The response the read expects (an atomic expects none): a stream of
  // responses begins (FIRST, ONLY) only where a READ request of ours began,
  // goes on (MIDDLE, LAST) only after bytes of it arrived, and ends (LAST,
  // ONLY) at the read's last PSN; every packet but the last is a full MTU,
  // the last brings the rest; FIRST, LAST and ONLY carry an ACK. Anything
  // else at this PSN is a bad response: the request fails and the QP enters
  // the error state.
  const wire::OpcodeInfo& info = wire::InfoOf(pkt.bth.opcode);
  const bool begins = (info.flags & wire::kOpFirst) != 0;
  const bool last = (info.flags & wire::kOpLast) != 0;
  const uint32_t remaining = read->length - read->read_received;
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  const bool valid =
      read->wr.opcode == WrOpcode::kRead &&
      (begins ? psn == read->read_request_psn : read->read_received > 0) &&
      last == (psn == read->last_psn) &&
      (last ? len == remaining : len == config_.pmtu) &&
      (!wire::HasAeth(pkt.bth.opcode) || (pkt.aeth.syndrome >> 5) == 0);
  if (!valid) {
    ++stats_.bad_responses;
    EnterError(WcStatus::kBadResponse, psn);
    return;
  }
  if (len > 0) CopyToSgl(read->wr, read->read_received, pkt.payload.data(), len);
  read->read_received += len;
  ++read->read_next_psn;
  // A response also acknowledges every request before it.
  if (psn > acked_psn_) acked_psn_ = psn;
  if (last) {
    read->read_done = true;
    --outstanding_reads_;
  }
  RetireCompleted();
}

RcQp::Wqe* RcQp::OldestAwaitingResponse() {
  if (read_scan_ - sq_head_ > sq_tail_ - sq_head_) read_scan_ = sq_head_;
  for (; read_scan_ != sq_tail_; ++read_scan_) {
    Wqe& w = wqe_at(read_scan_);
    if (!w.started) break;
    if (AwaitsResponse(w.wr.opcode) && !w.read_done) return &w;
  }
  return nullptr;
}

void RcQp::HandleAtomicAck(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  if (psn >= sent_limit_) {
    ++stats_.ignored_packets;
    return;
  }
  Wqe* atomic = OldestAwaitingResponse();
  if (atomic == nullptr || psn < atomic->read_next_psn) {
    ++stats_.ignored_packets;  // a duplicate of an answer already taken
    return;
  }
  if (psn != atomic->read_next_psn) {
    // Responses before it were lost.
    ++stats_.out_of_order_responses;
    RequestRetransmit();
    return;
  }
  // The answer the oldest outstanding READ or atomic expects: only an
  // atomic's, and only an ACK (a NAK comes as ACKNOWLEDGE). Anything else
  // is a bad response.
  if (!IsAtomic(atomic->wr.opcode) || (pkt.aeth.syndrome >> 5) != 0) {
    ++stats_.bad_responses;
    EnterError(WcStatus::kBadResponse, psn);
    return;
  }
  // The word as it was, in host order (the AtomicAckETH is big-endian on
  // the wire; the codec converted it), into the request's 8-byte buffer.
  const uint64_t orig = pkt.atomic_ack_eth.orig_data;
  std::memcpy(atomic->wr.sge[0].addr, &orig, sizeof(orig));
  atomic->read_received = kAtomicBytes;
  ++atomic->read_next_psn;
  atomic->read_done = true;
  --outstanding_reads_;
  // It also acknowledges every request before it.
  if (psn > acked_psn_) acked_psn_ = psn;
  RetireCompleted();
}

}  // namespace rdmaplane::rc
