#include "dataplane/engine/endpoint.h"

#include <time.h>

#include <cstring>

#include "api/shm/doorbell.h"
#include "dataplane/rc/sgl.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::engine {

uint64_t MonotonicClock::NowNs() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

FrameQueue::FrameQueue()
    : frames_(new uint8_t[size_t{kSlots} * kSlotBytes]) {}

std::span<uint8_t> FrameQueue::Reserve(size_t len) {
  if (tail_ - head_ == kSlots || len > kSlotBytes) return {};
  return {frames_.get() + size_t{tail_ % kSlots} * kSlotBytes, len};
}

void FrameQueue::Commit(size_t len) {
  lengths_[tail_ % kSlots] = static_cast<uint32_t>(len);
  ++tail_;
}

std::span<const uint8_t> FrameQueue::Front() const {
  if (empty()) return {};
  return {frames_.get() + size_t{head_ % kSlots} * kSlotBytes,
          lengths_[head_ % kSlots]};
}

std::span<uint8_t> LoopbackTx::Reserve(size_t max_len) {
  std::span<uint8_t> slot = peer_rx_ != nullptr ? peer_rx_->Reserve(max_len)
                                                 : std::span<uint8_t>{};
  reserved_in_peer_ = !slot.empty();
  if (slot.empty()) return {};  // link full: back-pressure
  return slot;
}

void LoopbackTx::Commit(size_t len) {
  // The fault model may drop the frame; duplication and delay need a timed
  // queue and are left to ports that have one.
  if (faults_.spec().active() && faults_.Next().copies == 0) return;
  if (reserved_in_peer_) peer_rx_->Commit(len);
}

namespace {

// Pins FIFO and send ring sizes bound the requests outstanding per QP.
constexpr uint32_t kMaxOutstanding = shm::kSendRingEntries;

rc::QpConfig WithDepth(rc::QpConfig c) {
  c.sq_depth = kMaxOutstanding;
  return c;
}

}  // namespace

Endpoint::Endpoint(const EndpointInfo& info, mr::RegistrationTable* table,
                   const rc::Clock* clock, const fault::FaultSpec& faults,
                   rc::FrameSink* port_tx)
    : info_(info),
      table_(table),
      clock_(clock),
      port_tx_(port_tx),
      rx_(port_tx == nullptr ? std::make_unique<FrameQueue>() : nullptr),
      tx_(faults),
      pins_(new Pins[kMaxOutstanding]),
      pins_mask_(kMaxOutstanding - 1),
      flush_status_(shm::kStatusConnAborted),
      direct_(port_tx == nullptr && !faults.active()) {
  qp_ = std::make_unique<rc::RcQp>(
      WithDepth(info.qp),
      rc::RcQp::Env{clock, port_tx != nullptr ? port_tx : &tx_, this, this});
}

Endpoint::~Endpoint() = default;

void Endpoint::Wire(Endpoint* peer) {
  peer_ = peer;
  tx_.Connect(peer->rx_.get());
}

void Endpoint::SetPeer(wire::Qpn remote_qpn, wire::Psn recv_psn,
                       const wire::MacAddr& mac) {
  info_.qp.remote_qpn = remote_qpn;
  info_.qp.recv_psn = recv_psn;
  info_.qp.path.dst_mac = mac;
  qp_ = std::make_unique<rc::RcQp>(
      WithDepth(info_.qp), rc::RcQp::Env{clock_, port_tx_, this, this});
}

void Endpoint::HandleFrame(const wire::ParsedPacket& pkt) {
  if (!closed_) qp_->HandleFrame(pkt);
}

bool Endpoint::TakeTransportError() {
  const bool e = transport_error_;
  transport_error_ = false;
  return e;
}

void Endpoint::PublishState(shm::ConnectionState state) {
  info_.header->connection_state[info_.slot].store(state,
                                                   std::memory_order_release);
}

void Endpoint::SetIdle(bool idle) {
  info_.header->engine_idle[info_.slot].sleeping.store(
      idle ? 1 : 0, std::memory_order_seq_cst);
}

bool Endpoint::HasWork() const {
  return (rx_ != nullptr && !rx_->empty()) || (!closed_ && info_.send.Size() > 0) ||
         qp_->responder_busy();
}

rc::ResolvedMemory Endpoint::Resolve(wire::Qpn, wire::Rkey rkey, uint64_t va,
                                     uint32_t len, rc::RemoteAccess access) {
  const uint8_t bit = access == rc::RemoteAccess::kRead
                          ? mr::kAccessRemoteRead
                          : mr::kAccessRemoteWrite;
  const mr::AccessResult r = mr::ResolveRemote(
      *table_, rkey.value(), info_.connection_id, bit, va, len);
  // Pinned until the responder releases it, so that deregistration of a
  // buffer a transfer is using fails as "in use".
  if (r.check == mr::AccessCheck::kOk && !table_->BeginUse(rkey.value())) {
    return {rc::AccessCheck::kUnknownKey, nullptr};
  }
  return {static_cast<rc::AccessCheck>(r.check), r.host, r.memory_owner};
}

void Endpoint::Release(wire::Rkey rkey) { table_->EndUse(rkey.value()); }

int Endpoint::Translate(const shm::SendEntry& e, rc::WorkRequest* wr,
                        Pins* pins) {
  pins->count = 0;
  pins->invalidate = 0;
  if ((e.op != shm::kSendWrite && e.op != shm::kSendRead) ||
      e.num_sge > shm::kMaxSge || (e.flags & ~shm::kKnownSendFlags) != 0) {
    ++stats_.bad_entries;
    return shm::kStatusInvalid;
  }
  wr->wr_id = e.wr_id;
  wr->opcode = e.op == shm::kSendWrite ? rc::WrOpcode::kWrite
                                       : rc::WrOpcode::kRead;
  wr->flags = ((e.flags & shm::kFlagSilentSuccess) ? rc::kWrSilentSuccess : 0) |
              ((e.flags & shm::kFlagReadFence) ? rc::kWrReadFence : 0);
  wr->num_sge = e.num_sge;
  wr->remote_va = e.remote_address;
  wr->rkey = wire::Rkey(e.rkey);
  uint64_t total = 0;
  // A write reads the local buffers, a read fills them.
  const uint8_t access = e.op == shm::kSendWrite ? mr::kAccessLocal
                                                 : mr::kAccessLocalWrite;
  for (uint32_t i = 0; i < e.num_sge; ++i) {
    const shm::SgeEntry& s = e.sge[i];
    total += s.length;
    const mr::AccessResult r = mr::ResolveLocal(
        *table_, s.lkey, info_.session_id, access, s.address, s.length);
    // Pin before trusting the pointer beyond this loop iteration; a key
    // deregistered in between fails the pin.
    if (r.check != mr::AccessCheck::kOk || !table_->BeginUse(s.lkey)) {
      for (uint32_t j = 0; j < pins->count; ++j) table_->EndUse(pins->lkeys[j]);
      pins->count = 0;
      ++stats_.local_key_errors;
      return shm::kStatusFault;
    }
    pins->lkeys[pins->count++] = s.lkey;
    wr->sge[i] = {r.host, s.length, r.memory_owner};
  }
  if ((e.flags & shm::kFlagReadLocalInvalidate) != 0 &&
      e.op == shm::kSendRead && e.num_sge > 0) {
    pins->invalidate = e.sge[0].lkey;
  }
  if (total > (1ull << 31)) {
    for (uint32_t j = 0; j < pins->count; ++j) table_->EndUse(pins->lkeys[j]);
    pins->count = 0;
    return shm::kStatusInvalid;
  }
  return shm::kStatusOk;
}

void Endpoint::PushCompletion(uint64_t wr_id, int32_t status, uint8_t op,
                              uint32_t bytes) {
  shm::CompletionEntry c{};
  c.wr_id = wr_id;
  c.status = status;
  c.op = op;
  c.byte_len = bytes;
  // Room is guaranteed: requests are taken only while the ring can hold a
  // completion for every one outstanding.
  info_.completion.TryPush(c);
  ring_bell_ = true;
  ++stats_.completed;
}

uint32_t Endpoint::PullRequests(uint32_t budget) {
  uint32_t n = 0;
  while (n < budget && !closed_) {
    const uint32_t outstanding = pins_tail_ - pins_head_;
    if (outstanding >= kMaxOutstanding ||
        outstanding + info_.completion.Size() >=
            info_.completion.capacity()) {
      break;
    }
    shm::SendEntry e;
    const shm::PopResult pr = info_.send.TryPop(&e);
    if (pr == shm::PopResult::kEmpty) break;
    if (pr == shm::PopResult::kCorrupted) {
      // The client broke its own ring: its connection cannot go on.
      ++stats_.bad_entries;
      Close(shm::kStatusConnAborted, shm::kConnAborted);
      break;
    }
    ++n;
    rc::WorkRequest wr;
    Pins& pins = pins_[pins_tail_ & pins_mask_];
    const int status = Translate(e, &wr, &pins);
    if (status != shm::kStatusOk) {
      PushCompletion(e.wr_id, status, e.op, 0);
      continue;
    }
    if (direct_) {
      ExecuteDirect(wr, pins, e.op);
      ++stats_.posted;
      continue;
    }
    const rc::PostResult r = qp_->Post(wr);
    if (r != rc::PostResult::kOk) {
      for (uint32_t j = 0; j < pins.count; ++j) table_->EndUse(pins.lkeys[j]);
      PushCompletion(e.wr_id,
                     r == rc::PostResult::kNotConnected
                         ? shm::kStatusNotConnected
                         : shm::kStatusInvalid,
                     e.op, 0);
      continue;
    }
    ++pins_tail_;
    ++stats_.posted;
  }
  return n;
}

void Endpoint::ReleasePins(Pins& pins) {
  for (uint32_t j = 0; j < pins.count; ++j) table_->EndUse(pins.lkeys[j]);
  pins.count = 0;
}

void Endpoint::ExecuteDirect(const rc::WorkRequest& wr, Pins& pins,
                             uint8_t op) {
  ++stats_.direct;
  uint32_t len = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) len += wr.sge[i].length;
  const bool write = wr.opcode == rc::WrOpcode::kWrite;
  rc::ResolvedMemory mem{rc::AccessCheck::kOk, nullptr};
  if (len > 0) {
    // The checks the peer's responder makes (key, connection, access,
    // range), and its pin while the memory is used.
    mem = peer_->Resolve(peer_->info_.qp.local_qpn, wr.rkey, wr.remote_va,
                         len,
                         write ? rc::RemoteAccess::kWrite
                               : rc::RemoteAccess::kRead);
  }
  if (mem.check != rc::AccessCheck::kOk) {
    // As over the wire: NAK "remote access error", the requester fails the
    // request and the connection breaks for both ends.
    ReleasePins(pins);
    PublishState(shm::kConnAborted);
    peer_->PublishState(shm::kConnReset);
    PushCompletion(wr.wr_id,
                   write ? shm::kStatusFault : shm::kStatusRemoteResources, op,
                   0);
    Close(shm::kStatusConnAborted, shm::kConnAborted);
    peer_->Close(shm::kStatusConnReset, shm::kConnReset);
    return;
  }
  if (len > 0) {
    if (write) {
      rc::CopyFromSgl(wr, 0, mem.addr, len);
    } else {
      rc::CopyToSgl(wr, 0, mem.addr, len);
    }
    peer_->Release(wr.rkey);
  }
  ReleasePins(pins);
  if (pins.invalidate != 0) table_->Invalidate(pins.invalidate);
  if ((wr.flags & rc::kWrSilentSuccess) != 0) return;
  PushCompletion(wr.wr_id, shm::kStatusOk, op, len);
}

void Endpoint::Complete(const rc::Completion& c) {
  Pins& pins = pins_[pins_head_ & pins_mask_];
  ++pins_head_;
  for (uint32_t j = 0; j < pins.count; ++j) table_->EndUse(pins.lkeys[j]);
  // NdkRead's local invalidate: a successful read retires the key of its
  // first buffer before the completion is seen.
  if (pins.invalidate != 0 && c.status == rc::WcStatus::kSuccess) {
    table_->Invalidate(pins.invalidate);
  }
  if (c.silent) return;
  // A transport error: the client must see the connection aborted before
  // (release order of the ring push) it sees the failed request.
  if (!closed_ && qp_->state() == rc::QpState::kError) {
    PublishState(shm::kConnAborted);
    if (peer_ != nullptr) peer_->PublishState(shm::kConnReset);
  }
  const uint8_t op =
      c.opcode == rc::WrOpcode::kWrite ? shm::kSendWrite : shm::kSendRead;
  int32_t status = shm::kStatusOk;
  switch (c.status) {
    case rc::WcStatus::kSuccess:
      break;
    case rc::WcStatus::kRemoteAccessError:
      // The target lies outside what the peer registered for us.
      status = op == shm::kSendRead ? shm::kStatusRemoteResources
                                    : shm::kStatusFault;
      break;
    case rc::WcStatus::kFlushed:
      status = flush_status_;
      break;
    case rc::WcStatus::kRetryExceeded:
    case rc::WcStatus::kRemoteInvalidRequest:
    case rc::WcStatus::kRemoteOperationalError:
    case rc::WcStatus::kBadResponse:
    // Never a completion's (the QP's error_status only), but a transport
    // error all the same.
    case rc::WcStatus::kPeerInvalidRequest:
    case rc::WcStatus::kPeerAccessError:
      status = shm::kStatusConnAborted;
      break;
  }
  PushCompletion(c.wr_id, status, op, c.byte_len);
}

bool Endpoint::CloseOnTransportError() {
  if (closed_) return true;
  if (qp_->state() != rc::QpState::kError) return false;
  // A transport error breaks the connection for both ends.
  Close(shm::kStatusConnAborted, shm::kConnAborted);
  if (peer_ != nullptr) peer_->Close(shm::kStatusConnReset, shm::kConnReset);
  if (remote()) transport_error_ = true;
  return true;
}

void Endpoint::Close(int32_t status, shm::ConnectionState state) {
  if (closed_) return;
  closed_ = true;
  flush_status_ = status;
  PublishState(state);
  qp_->Flush();
  // Requests still in the send ring were never started: they are aborted
  // too (the control plane finishes what does not fit yet).
  AbortQueued(status);
}

void Endpoint::AbortQueued(int32_t status) {
  // Bounded: the client moves the indices.
  shm::SendEntry e;
  for (uint32_t i = 0; i < info_.send.capacity(); ++i) {
    if (info_.completion.Size() >= info_.completion.capacity() ||
        info_.send.TryPop(&e) != shm::PopResult::kOk) {
      break;
    }
    PushCompletion(e.wr_id, status, e.op, 0);
  }
  if (ring_bell_) {
    ring_bell_ = false;
    shm::RingDoorbell(&info_.header->completion_bell[info_.slot]);
  }
}

uint32_t Endpoint::Poll(uint32_t budget) {
  uint32_t work = 0;
  // Frames from the peer first: they complete and free work.
  while (rx_ != nullptr && work < budget && !rx_->empty()) {
    wire::ParsedPacket pkt;
    if (wire::ParseFrame(rx_->Front(), &pkt) == wire::ParseError::kOk) {
      qp_->HandleFrame(pkt);
    } else {
      ++stats_.rx_rejected;
    }
    rx_->Pop();
    ++work;
  }
  // The QP may have entered the error state on a frame (a NAK, a bad
  // response, or a request our responder refused, which it does once its
  // NAK is sent, in Poll): no request is posted to it after that.
  if (!CloseOnTransportError()) {
    work += PullRequests(budget);
    work += qp_->Poll(budget);
    CloseOnTransportError();
  }
  if (ring_bell_) {
    ring_bell_ = false;
    shm::RingDoorbell(&info_.header->completion_bell[info_.slot]);
  }
  return work;
}

}  // namespace rdmaplane::engine
