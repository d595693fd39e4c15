// Responder of an RC QP: PSN checking (duplicates and gaps), opcode
// sequence and length checks, remote-key checks, execution of WRITEs into
// registered memory, SENDs into posted receive requests (RNR NAK when there
// is none; a SEND with Invalidate invalidates its key once placed), READ
// responses from the responder-resource ring, atomics (one atomic
// instruction on the word, the result kept for resends), and ordered,
// coalesced ACK/NAK generation. A UC QP's responder shares the SEND and
// WRITE execution and answers nothing: what RC would refuse or NAK, UC
// drops with its message.
#include <cstring>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sgl.h"

namespace rdmaplane::rc {

using wire::Opcode;
using wire::Psn;

namespace {

// NAKs after which the responder's QP is in the error state: every NAK but
// "PSN sequence error" (an RNR NAK is no NAK of this class).
bool IsFatalNak(uint8_t syndrome) {
  return (syndrome >> 5) == 3 && syndrome != wire::kAethNakPsnSeqError;
}

// Whether a message may be placed in `recv`'s buffers: each has an address
// (its key reached it when it was posted) and its key still reaches it.
bool BuffersPlaceable(const WorkRequest& recv, RemoteMemory& memory) {
  for (uint32_t i = 0; i < recv.num_sge; ++i) {
    if (recv.sge[i].addr == nullptr && recv.sge[i].length != 0) return false;
  }
  return memory.ReceiveBuffersLive(recv);
}

WcStatus RefusalCause(uint8_t syndrome) {
  return syndrome == wire::kAethNakRemoteAccess ? WcStatus::kPeerAccessError
                                                : WcStatus::kPeerInvalidRequest;
}

}  // namespace

// The checks, in order: PSN (duplicates and gaps), then the opcode (one
// rdmaplane serves, in sequence), then lengths (an atomic's alignment) and
// the remote key in ExecuteWrite, ExecuteReadRequest and ExecuteAtomic.
void RcQp::HandleRequest(const wire::ParsedPacket& pkt) {
  if (refusing_) {
    ++stats_.ignored_packets;  // the QP is about to enter the error state
    return;
  }
  const int32_t distance = pkt.bth.psn.DistanceFrom(epsn_);
  if (distance < 0) {
    HandleDuplicateRequest(pkt);
    return;
  }
  if (distance > 0) {
    // A gap: tell the requester once where we are, drop until it resends.
    if (!seq_nak_sent_) {
      seq_nak_sent_ = true;
      QueueNak(wire::kAethNakPsnSeqError, epsn_);
    }
    return;
  }
  seq_nak_sent_ = false;
  // Opcodes rdmaplane does not serve (FLUSH, ATOMIC WRITE) and
  // reserved ones are invalid requests, as is any opcode out of sequence:
  // inside a multi-packet WRITE or SEND only its MIDDLE or LAST may come,
  // outside one only an opcode that starts a message.
  const wire::OpcodeInfo& info = wire::InfoOf(pkt.bth.opcode);
  const bool continues = (info.flags & wire::kOpFirst) == 0;
  const bool in_sequence =
      write_active_  ? continues && info.op_class == wire::OpcodeClass::kWrite
      : send_active_ ? continues && info.op_class == wire::OpcodeClass::kSend
                     : !continues;
  if ((info.flags & wire::kOpSupported) == 0 || !in_sequence) {
    ++stats_.invalid_requests;
    RefuseRequest(wire::kAethNakInvalidRequest, pkt.bth.psn);
    return;
  }
  if (pkt.bth.opcode == Opcode::kReadRequest) {
    ExecuteReadRequest(pkt);
  } else if (info.op_class == wire::OpcodeClass::kAtomic) {
    ExecuteAtomic(pkt);
  } else if (info.op_class == wire::OpcodeClass::kSend) {
    ExecuteSend(pkt);
  } else {
    ExecuteWrite(pkt);
  }
}

void RcQp::HandleUcRequest(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  const wire::OpcodeInfo& info = wire::InfoOf(pkt.bth.opcode);
  const bool starts = (info.flags & wire::kOpFirst) != 0;
  // Another PSN than the next one: packets were lost (nothing is resent,
  // so an older PSN is a loss as well), and the message they belonged to
  // with them.
  if (psn != epsn_) DropUcMessage();
  epsn_ = psn + 1;
  const bool in_message = write_active_ || send_active_;
  const bool fits =
      in_message ? !starts && info.op_class == (write_active_
                                                    ? wire::OpcodeClass::kWrite
                                                    : wire::OpcodeClass::kSend)
                 : starts;
  if (!fits) {
    // The end of the message in progress was lost, or a packet came that
    // no message in progress continues: drop that, and start over only at
    // a packet that starts a message.
    if (in_message || !uc_dropping_) DropUcMessage();
    if (!starts) {
      ++stats_.ignored_packets;
      return;
    }
  }
  uc_dropping_ = false;
  epsn_ = psn;
  if (info.op_class == wire::OpcodeClass::kSend) {
    ExecuteSend(pkt);
  } else {
    ExecuteWrite(pkt);
  }
  epsn_ = psn + 1;
}

void RcQp::HandleDatagram(const wire::ParsedPacket& pkt) {
  // Only UD SENDs for us, in our partition, with our Q_Key (IBA 10.2.5,
  // 9.6.1.1): anything else is dropped and counted.
  if (state_ != QpState::kReadyToSend ||
      pkt.bth.dest_qp != config_.local_qpn ||
      !wire::IsUdOpcode(static_cast<uint8_t>(pkt.bth.opcode))) {
    ++stats_.ignored_packets;
    return;
  }
  if (!wire::PkeysMatch(pkt.bth.pkey, config_.pkey)) {
    ++stats_.pkey_violations;
    return;
  }
  if (pkt.deth.qkey != config_.qkey) {
    ++stats_.qkey_violations;
    return;
  }
  ++stats_.rx_packets;
  if (rq_head_ == rq_tail_) {  // UD has no RNR NAK: the datagram is lost
    ++stats_.ud_no_receive;
    return;
  }
  const WorkRequest& recv = rq_[rq_head_ & rq_mask_];
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  if (!BuffersPlaceable(recv, *env_.memory)) {  // nothing placed
    ++stats_.local_protection_errors;
    CompleteRecv(WcStatus::kLocalProtectionError, 0, false, pkt);
    return;
  }
  if (SglLength(recv) < uint64_t{kGrhBytes} + len) {
    CompleteRecv(WcStatus::kLocalLengthError, 0, false, pkt);
    return;
  }
  // The GRH: for RoCEv2 over IPv4, 20 bytes of zeros and the IPv4 header
  // as it arrived.
  uint8_t grh[kGrhBytes] = {};
  if (pkt.ipv4_header.size() == kGrhBytes / 2) {
    std::memcpy(grh + kGrhBytes / 2, pkt.ipv4_header.data(), kGrhBytes / 2);
  }
  CopyToSgl(recv, 0, grh, kGrhBytes);
  if (len > 0) CopyToSgl(recv, kGrhBytes, pkt.payload.data(), len);
  CompleteRecv(WcStatus::kSuccess, kGrhBytes + len, false, pkt);
}

void RcQp::DropUcMessage() {
  if (!uc_dropping_) ++stats_.uc_messages_dropped;
  uc_dropping_ = true;
  write_active_ = false;
  send_active_ = false;
  recv_offset_ = 0;
  ReleaseWrite();
}

void RcQp::RefuseNotReady(Psn psn) {
  if (unreliable()) {  // no RNR NAK in UC: the message is lost
    DropUcMessage();
    return;
  }
  ++stats_.rnr_naks_sent;
  QueueNak(static_cast<uint8_t>(wire::kAethRnrNak | config_.min_rnr_timer),
           psn);
  // The rest of the message is beyond ePSN: dropped quietly, the RNR NAK
  // already told the requester where to resume.
  seq_nak_sent_ = true;
}

void RcQp::CompleteRecv(WcStatus status, uint32_t byte_len, bool write,
                        const wire::ParsedPacket& pkt) {
  RecvCompletion c;
  c.wr_id = rq_[rq_head_ & rq_mask_].wr_id;
  c.status = status;
  c.byte_len = byte_len;
  c.write = write;
  c.with_imm = wire::HasImm(pkt.bth.opcode);
  c.solicited = pkt.bth.solicited;
  c.imm = pkt.imm;
  // ExecuteSend invalidated the key before a successful receive completes.
  if (status == WcStatus::kSuccess && wire::HasIeth(pkt.bth.opcode)) {
    c.invalidated = true;
    c.invalidated_rkey = pkt.ieth.rkey;
  }
  if (datagram()) {
    c.grh = true;
    c.src_qp = pkt.deth.src_qp;
  }
  ++rq_head_;
  env_.completions->CompleteRecv(c);
}

bool RcQp::ExecuteSend(const wire::ParsedPacket& pkt) {
  const wire::OpcodeInfo& info = wire::InfoOf(pkt.bth.opcode);
  const bool first = (info.flags & wire::kOpFirst) != 0;
  const bool last = (info.flags & wire::kOpLast) != 0;
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  const Psn psn = pkt.bth.psn;
  // Every packet but the last is a full MTU.
  if (last ? len > config_.pmtu : len != config_.pmtu) {
    ++stats_.invalid_requests;
    RefuseRequest(wire::kAethNakInvalidRequest, psn);
    return false;
  }
  if (first) {
    if (rq_head_ == rq_tail_) {
      RefuseNotReady(psn);
      return false;
    }
    recv_offset_ = 0;
    // Memory the application deregistered after posting the receive:
    // nothing of the message lands there (IBA 9.9.3.1.3: a local
    // protection error, NAK "remote operational error" to the requester).
    if (!BuffersPlaceable(rq_[rq_head_ & rq_mask_], *env_.memory)) {
      ++stats_.local_protection_errors;
      CompleteRecv(WcStatus::kLocalProtectionError, 0, false, pkt);
      send_active_ = false;
      RefuseRequest(wire::kAethNakRemoteOperational, psn);
      return false;
    }
  }
  const WorkRequest& recv = rq_[rq_head_ & rq_mask_];
  if (static_cast<uint64_t>(recv_offset_) + len > SglLength(recv)) {
    // Longer than the receive's buffers: the receive fails here, and the
    // requester is told with NAK "invalid request" (IBA 9.7.5.2.2).
    ++stats_.invalid_requests;
    CompleteRecv(WcStatus::kLocalLengthError, 0, false, pkt);
    send_active_ = false;
    RefuseRequest(wire::kAethNakInvalidRequest, psn);
    return false;
  }
  if (len > 0) CopyToSgl(recv, recv_offset_, pkt.payload.data(), len);
  recv_offset_ += len;
  send_active_ = !last;
  ++epsn_;
  if (last) {
    msn_ = (msn_ + 1) & Psn::kMask;
    // SEND with Invalidate: the whole message is placed; the key stops
    // resolving before the receive completes. A key this queue pair may
    // not invalidate fails the receive, not the message (IBA class J).
    if (wire::HasIeth(pkt.bth.opcode) &&
        !env_.memory->Invalidate(config_.local_qpn, pkt.ieth.rkey)) {
      ++stats_.invalidate_errors;
      CompleteRecv(WcStatus::kInvalidateError, recv_offset_, false, pkt);
      EndAfterAck(psn);
      return true;
    }
    if (wire::HasIeth(pkt.bth.opcode)) ++stats_.invalidations;
    CompleteRecv(WcStatus::kSuccess, recv_offset_, false, pkt);
  }
  if (pkt.bth.ack_req) QueueAck(psn);
  return true;
}

void RcQp::EndAfterAck(Psn psn) {
  refusing_ = true;  // nothing more of the peer is executed
  if (!PushResp(
          {RespKind::kAck,
           static_cast<uint8_t>(wire::kAethAck | wire::kAethCreditsInvalid),
           psn, 0, 0, 0, /*ends_connection=*/true})) {
    Shutdown(WcStatus::kPeerInvalidRequest, nullptr);
  }
}

void RcQp::RefuseRequest(uint8_t syndrome, Psn psn) {
  if (unreliable()) {  // no NAK in UC: the message is dropped, silently
    DropUcMessage();
    return;
  }
  refusing_ = true;
  if (!PushResp({RespKind::kAck, syndrome, psn, 0, 0})) {
    Shutdown(RefusalCause(syndrome), nullptr);
  }
}

bool RcQp::ExecuteWrite(const wire::ParsedPacket& pkt) {
  const Opcode op = pkt.bth.opcode;
  const uint16_t flags = wire::InfoOf(op).flags;
  const bool first = (flags & wire::kOpFirst) != 0;
  const bool last = (flags & wire::kOpLast) != 0;
  const uint32_t len = static_cast<uint32_t>(pkt.payload.size());
  const uint32_t pmtu = config_.pmtu;
  const Psn psn = pkt.bth.psn;

  // HandleRequest checked the sequence; lengths must fill every packet but
  // the last and add up to the RETH length.
  bool valid;
  if (first) {
    const uint32_t total = pkt.reth.dma_length;
    valid = total <= (1u << 31) &&
            (last ? len == total && len <= pmtu : len == pmtu && total > pmtu);
  } else {
    valid = last ? len == write_remaining_ && len <= pmtu
                 : len == pmtu && write_remaining_ > pmtu;
  }
  if (!valid) {
    ++stats_.invalid_requests;
    RefuseRequest(wire::kAethNakInvalidRequest, psn);
    return false;
  }
  // Immediate data consumes a receive request: without one, nothing of
  // this packet is placed, and the requester resends it after the wait.
  if (wire::HasImm(op) && rq_head_ == rq_tail_) {
    RefuseNotReady(psn);
    return false;
  }
  if (first) {
    write_addr_ = nullptr;
    write_remaining_ = pkt.reth.dma_length;
    write_length_ = pkt.reth.dma_length;
    if (write_remaining_ > 0) {
      const ResolvedMemory mem = env_.memory->Resolve(
          config_.local_qpn, pkt.reth.rkey, pkt.reth.va, write_remaining_,
          RemoteAccess::kWrite);
      if (mem.check != AccessCheck::kOk) {
        ++stats_.access_errors;
        RefuseRequest(wire::kAethNakRemoteAccess, psn);
        return false;
      }
      write_addr_ = mem.addr;
      write_rkey_ = pkt.reth.rkey;
      write_pinned_ = true;
    }
  }
  if (len > 0) {
    std::memcpy(write_addr_, pkt.payload.data(), len);
    write_addr_ += len;
    write_remaining_ -= len;
  }
  write_active_ = !last;
  ++epsn_;
  if (last) {
    msn_ = (msn_ + 1) & Psn::kMask;
    ReleaseWrite();
    if (wire::HasImm(op)) {
      CompleteRecv(WcStatus::kSuccess, write_length_, true, pkt);
    }
  }
  if (pkt.bth.ack_req) QueueAck(psn);
  return true;
}

bool RcQp::ExecuteReadRequest(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  const uint32_t len = pkt.reth.dma_length;
  // Messages are at most 2 GiB (and PSN arithmetic assumes so).
  if (len > (1u << 31)) {
    ++stats_.invalid_requests;
    RefuseRequest(wire::kAethNakInvalidRequest, psn);
    return false;
  }
  uint8_t* addr = nullptr;
  MemoryOwner* owner = nullptr;
  if (len > 0) {
    const ResolvedMemory mem =
        env_.memory->Resolve(config_.local_qpn, pkt.reth.rkey, pkt.reth.va,
                             len, RemoteAccess::kRead);
    if (mem.check != AccessCheck::kOk) {
      ++stats_.access_errors;
      RefuseRequest(wire::kAethNakRemoteAccess, psn);
      return false;
    }
    addr = mem.addr;
    owner = mem.owner;
  }
  // The slot's previous read is at least max_dest_rd_atomic reads old, so
  // the requester has finished with it; a replay of it still queued (after a
  // stale duplicate) is dropped by the stream check in SendResponses.
  const uint32_t slot = read_res_next_ & (config_.max_dest_rd_atomic - 1);
  ReadResource& res = read_resources_[slot];
  const uint32_t npkts = PacketsFor(len);
  const uint32_t stream = res.stream_seq + 1;
  ReleaseRead(res);
  res = ReadResource{};
  res.stream_seq = stream;
  res.valid = true;
  res.first_psn = psn;
  res.last_psn = psn + (npkts - 1);
  res.va = pkt.reth.va;
  res.rkey = pkt.reth.rkey;
  res.length = len;
  res.active = true;
  res.next_psn = psn;
  res.addr = addr;
  res.owner = owner;
  res.pinned = addr != nullptr;
  res.stream_length = len;
  if (!PushResp({RespKind::kRead, 0, psn, slot, stream})) {
    ReleaseRead(res);
    res.valid = res.active = false;  // no room: the requester will resend
    return false;
  }
  ++read_res_next_;
  // A READ counts as completed once accepted: its responses carry the MSN
  // that includes it.
  msn_ = (msn_ + 1) & Psn::kMask;
  epsn_ += npkts;
  return true;
}

bool RcQp::ExecuteAtomic(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  const wire::AtomicEth& a = pkt.atomic_eth;
  // The IBA's atomics work on naturally aligned 8-byte words; another
  // address is an invalid request, refused before any memory is named.
  if ((a.va & (kAtomicBytes - 1)) != 0) {
    ++stats_.invalid_requests;
    RefuseRequest(wire::kAethNakInvalidRequest, psn);
    return false;
  }
  // Reserve first: an atomic executed must be answered, so without room
  // for its answer it is dropped unexecuted, and the requester resends it.
  if (RespQueueFull()) return false;
  const ResolvedMemory mem = env_.memory->Resolve(
      config_.local_qpn, a.rkey, a.va, kAtomicBytes, RemoteAccess::kAtomic);
  if (mem.check != AccessCheck::kOk) {
    ++stats_.access_errors;
    RefuseRequest(wire::kAethNakRemoteAccess, psn);
    return false;
  }
  // The word in our mapping is aligned as the address is (mappings are
  // page-granular); checked all the same, since an atomic instruction on a
  // misaligned word is not atomic.
  if ((reinterpret_cast<uintptr_t>(mem.addr) & (kAtomicBytes - 1)) != 0) {
    env_.memory->Release(a.rkey);
    ++stats_.invalid_requests;
    RefuseRequest(wire::kAethNakInvalidRequest, psn);
    return false;
  }
  // One atomic instruction on the word itself, in the target's byte order
  // (host order), so that it is atomic against every other requester of
  // that memory: queue pairs on other engine threads, and the CPUs of the
  // process that registered it. Sequentially consistent: it is ordered
  // after this queue pair's earlier writes (IBA 9.5).
  auto* word = reinterpret_cast<uint64_t*>(mem.addr);
  uint64_t orig;
  if (pkt.bth.opcode == Opcode::kCompareSwap) {
    orig = a.compare;  // replaced by the word's value when it differs
    __atomic_compare_exchange_n(word, &orig, a.swap_add, /*weak=*/false,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    orig = __atomic_fetch_add(word, a.swap_add, __ATOMIC_SEQ_CST);
  }
  env_.memory->Release(a.rkey);
  ++stats_.atomics_executed;
  AtomicResource& res =
      atomic_resources_[atomic_res_next_ & (config_.max_dest_rd_atomic - 1)];
  ++atomic_res_next_;
  res.valid = true;
  res.psn = psn;
  res.opcode = pkt.bth.opcode;
  res.va = a.va;
  res.rkey = a.rkey;
  res.orig = orig;
  PushResp({RespKind::kAtomic, wire::kAethAck | wire::kAethCreditsInvalid, psn,
            0, 0, orig});  // room was checked above
  msn_ = (msn_ + 1) & Psn::kMask;
  ++epsn_;
  return true;
}

void RcQp::ReplayAtomic(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  for (uint32_t i = 0; i < config_.max_dest_rd_atomic; ++i) {
    const AtomicResource& res = atomic_resources_[i];
    if (!res.valid || res.psn != psn) continue;
    // The same request again, or it is no resend of that atomic.
    if (res.opcode != pkt.bth.opcode || res.va != pkt.atomic_eth.va ||
        res.rkey != pkt.atomic_eth.rkey) {
      break;
    }
    // Answered again, never executed again; without room, dropped (the
    // requester asks once more).
    if (PushResp({RespKind::kAtomic, wire::kAethAck | wire::kAethCreditsInvalid,
                  psn, 0, 0, res.orig})) {
      ++stats_.atomic_replays;
    }
    return;
  }
  // Too old to be kept (or never executed): the requester is done with it.
  ++stats_.ignored_packets;
}

void RcQp::HandleDuplicateRequest(const wire::ParsedPacket& pkt) {
  const Psn psn = pkt.bth.psn;
  if (!wire::IsSupported(pkt.bth.opcode)) {
    ++stats_.ignored_packets;  // nothing we could have executed
    return;
  }
  ++stats_.duplicate_requests;
  if (wire::InfoOf(pkt.bth.opcode).op_class == wire::OpcodeClass::kAtomic) {
    ReplayAtomic(pkt);
    return;
  }
  if (pkt.bth.opcode != Opcode::kReadRequest) {
    // A resent write we already executed: acknowledge all we have.
    QueueAck(epsn_ - 1);
    return;
  }
  // A resent read: replay from the resource ring, starting where asked.
  for (uint32_t i = 0; i < config_.max_dest_rd_atomic; ++i) {
    ReadResource& res = read_resources_[i];
    if (!res.valid || psn < res.first_psn || psn > res.last_psn) continue;
    const uint32_t skip =
        static_cast<uint32_t>(psn.DistanceFrom(res.first_psn)) * config_.pmtu;
    if (pkt.reth.rkey != res.rkey || pkt.reth.va != res.va + skip ||
        pkt.reth.dma_length != res.length - skip) {
      break;  // not a resend of that read
    }
    if (res.active && psn >= res.next_psn) return;  // not sent yet anyway
    uint8_t* addr = nullptr;
    MemoryOwner* owner = nullptr;
    if (pkt.reth.dma_length > 0) {
      // The memory may have been deregistered since: check again, and only
      // then let go of the pin the earlier stream held.
      const ResolvedMemory mem = env_.memory->Resolve(
          config_.local_qpn, pkt.reth.rkey, pkt.reth.va, pkt.reth.dma_length,
          RemoteAccess::kRead);
      if (mem.check != AccessCheck::kOk) {
        ++stats_.access_errors;
        res.active = false;
        ReleaseRead(res);
        RefuseRequest(wire::kAethNakRemoteAccess, psn);
        return;
      }
      addr = mem.addr;
      owner = mem.owner;
    }
    ReleaseRead(res);  // the replay holds the pin just taken
    const bool was_active = res.active;
    if (!was_active) ++res.stream_seq;
    res.active = true;
    res.next_psn = psn;
    res.addr = addr;
    res.owner = owner;
    res.pinned = addr != nullptr;
    res.stream_length = pkt.reth.dma_length;
    res.stream_offset = 0;
    if (!was_active &&
        !PushResp({RespKind::kRead, 0, psn, i, res.stream_seq})) {
      res.active = false;
      ReleaseRead(res);
    }
    return;
  }
  ++stats_.ignored_packets;
}

bool RcQp::PushResp(const RespItem& item) {
  if (RespQueueFull()) return false;
  resp_q_[resp_q_tail_ & resp_q_mask_] = item;
  ++resp_q_tail_;
  resp_tail_ack_open_ = false;
  return true;
}

void RcQp::QueueAck(Psn psn) {
  if (unreliable()) return;
  // Coalesce with an ACK that is still waiting at the tail of the queue.
  if (resp_tail_ack_open_) {
    RespItem& tail = resp_q_[(resp_q_tail_ - 1) & resp_q_mask_];
    if (psn > tail.psn) tail.psn = psn;
    return;
  }
  if (PushResp(
          {RespKind::kAck,
           static_cast<uint8_t>(wire::kAethAck | wire::kAethCreditsInvalid),
           psn, 0, 0})) {
    resp_tail_ack_open_ = true;
  }
}

void RcQp::QueueNak(uint8_t syndrome, Psn psn) {
  PushResp({RespKind::kAck, syndrome, psn, 0, 0});
}

uint32_t RcQp::SendResponses(uint32_t budget) {
  uint32_t sent = 0;
  while (sent < budget && resp_q_head_ != resp_q_tail_) {
    const RespItem& item = resp_q_[resp_q_head_ & resp_q_mask_];
    if (item.kind == RespKind::kAck) {
      if (!SendAck(item)) break;
      ++sent;
      if (item.ends_connection) {
        // The last ACK before the error state (EndAfterAck) is on its way.
        Shutdown(WcStatus::kPeerInvalidRequest, nullptr);
        return sent;
      }
      if (IsFatalNak(item.syndrome)) {
        // The refusal is on its way: now the error state.
        Shutdown(RefusalCause(item.syndrome), nullptr);
        return sent;
      }
    } else if (item.kind == RespKind::kAtomic) {
      if (!SendAtomicAck(item)) break;
      ++sent;
    } else {
      ReadResource& res = read_resources_[item.resource];
      if (res.active && res.stream_seq == item.stream) {
        if (!SendReadResponse(res)) break;
        ++sent;
        if (res.active) continue;  // more packets of this read
      }
    }
    ++resp_q_head_;
    if (resp_q_head_ == resp_q_tail_) resp_tail_ack_open_ = false;
  }
  return sent;
}

bool RcQp::SendAck(const RespItem& item) {
  wire::PacketHeaders h = BaseHeaders();
  h.bth.opcode = Opcode::kAcknowledge;
  h.bth.psn = item.psn;
  h.aeth.syndrome = item.syndrome;
  h.aeth.msn = msn_;
  std::span<uint8_t> buf =
      env_.tx->Reserve(wire::FrameLength(Opcode::kAcknowledge, 0));
  if (buf.empty()) return false;
  env_.tx->Commit(wire::EncodeFrame(h, {}, buf));
  if ((item.syndrome >> 5) == 3) {
    ++stats_.naks_sent;
    if (item.syndrome == wire::kAethNakPsnSeqError) ++stats_.seq_naks_sent;
  } else {
    ++stats_.acks_sent;
  }
  return true;
}

bool RcQp::SendAtomicAck(const RespItem& item) {
  wire::PacketHeaders h = BaseHeaders();
  h.bth.opcode = Opcode::kAtomicAcknowledge;
  h.bth.psn = item.psn;
  h.aeth.syndrome = item.syndrome;
  h.aeth.msn = msn_;
  h.atomic_ack_eth.orig_data = item.orig;
  std::span<uint8_t> buf =
      env_.tx->Reserve(wire::FrameLength(Opcode::kAtomicAcknowledge, 0));
  if (buf.empty()) return false;
  env_.tx->Commit(wire::EncodeFrame(h, {}, buf));
  ++stats_.acks_sent;
  return true;
}

bool RcQp::SendReadResponse(ReadResource& res) {
  const uint32_t remaining = res.stream_length - res.stream_offset;
  const bool first = res.stream_offset == 0;
  const bool last = remaining <= config_.pmtu;
  const uint32_t len = last ? remaining : config_.pmtu;
  wire::PacketHeaders h = BaseHeaders();
  h.bth.opcode =
      first ? (last ? Opcode::kReadResponseOnly : Opcode::kReadResponseFirst)
            : (last ? Opcode::kReadResponseLast : Opcode::kReadResponseMiddle);
  h.bth.psn = res.next_psn;
  h.aeth.syndrome = wire::kAethAck | wire::kAethCreditsInvalid;
  h.aeth.msn = msn_;
  std::span<uint8_t> buf = env_.tx->Reserve(wire::FrameLength(h.bth.opcode, len));
  if (buf.empty()) return false;
  const size_t hdr_len = wire::EncodeHeaders(h, len, buf);
  const PayloadPiece piece{res.addr + res.stream_offset, len, res.owner};
  if (!WantsGather(len) || !CommitGathered(buf, hdr_len, {&piece, 1})) {
    if (len > 0) std::memcpy(buf.data() + hdr_len, piece.data, len);
    env_.tx->Commit(wire::FinishFrame(buf));
  }
  res.stream_offset += len;
  ++res.next_psn;
  if (last) {
    res.active = false;
    ReleaseRead(res);
  }
  return true;
}

void RcQp::ReleaseWrite() {
  if (write_pinned_) {
    write_pinned_ = false;
    env_.memory->Release(write_rkey_);
  }
}

void RcQp::ReleaseRead(ReadResource& res) {
  if (res.pinned) {
    res.pinned = false;
    env_.memory->Release(res.rkey);
  }
}

void RcQp::ReleaseAll() {
  ReleaseWrite();
  for (uint32_t i = 0; i < config_.max_dest_rd_atomic; ++i) {
    ReleaseRead(read_resources_[i]);
  }
}

}  // namespace rdmaplane::rc
