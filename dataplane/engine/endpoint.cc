#include "dataplane/engine/endpoint.h"

#include <poll.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "api/shm/doorbell.h"
#include "dataplane/rc/sgl.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::engine {

static_assert(shm::kMaxSge == static_cast<uint32_t>(rc::kMaxSge),
              "a request's SGEs in shared memory and in the transport");

namespace {

// The time of this thread's current engine turn, or 0 outside one.
thread_local uint64_t turn_now_ns = 0;

}  // namespace

uint64_t MonotonicClock::NowNs() const {
  return turn_now_ns != 0 ? turn_now_ns : rc::MonotonicNowNs();
}

void MonotonicClock::BeginTurn() { turn_now_ns = rc::MonotonicNowNs(); }

void MonotonicClock::EndTurn() { turn_now_ns = 0; }

FrameQueue::FrameQueue() : frames_(new uint8_t[size_t{kSlots} * kSlotBytes]) {}

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
  std::span<uint8_t> slot =
      peer_rx_ != nullptr ? peer_rx_->Reserve(max_len) : std::span<uint8_t>{};
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

// Requests the engine takes from a send ring and holds at once (its pins
// FIFO and the QP's send queue); a deeper ring (a verbs queue pair's, up to
// shm::kMaxSendRingEntries) keeps the rest in the client's memory until
// these end, so that the daemon's memory per queue pair does not grow with
// the depth a client asks for.
constexpr uint32_t kMaxOutstanding = shm::kSendRingEntries;

// Why the transport broke a connection whose QP is in the error state.
CloseReason BreakReason(rc::WcStatus error) {
  switch (error) {
    case rc::WcStatus::kPeerInvalidRequest:
      return CloseReason::kRequestRefused;
    case rc::WcStatus::kPeerAccessError:
      return CloseReason::kAccessRefused;
    default:
      return CloseReason::kTransportError;
  }
}

rc::QpConfig WithDepth(rc::QpConfig c) {
  c.sq_depth = kMaxOutstanding;
  return c;
}

}  // namespace

Endpoint::Endpoint(const EndpointInfo& info, mr::RegistrationTable* table,
                   const rc::Clock* clock, const fault::FaultSpec& faults,
                   rc::FrameSink* port_tx)
    : incarnation_(next_incarnation.fetch_add(1, std::memory_order_relaxed)),
      info_(info),
      table_(table),
      clock_(clock),
      port_tx_(port_tx),
      rx_(port_tx == nullptr ? std::make_unique<FrameQueue>() : nullptr),
      tx_(faults),
      pins_(new Pins[kMaxOutstanding]),
      pins_mask_(kMaxOutstanding - 1),
      direct_(port_tx == nullptr && !faults.active()) {
  qp_ = std::make_unique<rc::RcQp>(
      WithDepth(info.qp),
      rc::RcQp::Env{clock, port_tx != nullptr ? port_tx : &tx_, this, this});
}

std::atomic<uint64_t> Endpoint::next_incarnation{1};

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
  qp_ = std::make_unique<rc::RcQp>(WithDepth(info_.qp),
                                   rc::RcQp::Env{clock_, port_tx_, this, this});
}

void AddressHandles::Set(uint32_t handle, uint32_t ip,
                         const wire::MacAddr& mac) {
  uint64_t mac48 = 0;
  for (uint8_t b : mac.bytes) mac48 = mac48 << 8 | b;
  slots_[handle].ip.store(ip, std::memory_order_relaxed);
  slots_[handle].mac_valid.store(mac48 | kValid, std::memory_order_release);
}

void AddressHandles::Clear(uint32_t handle) {
  slots_[handle].mac_valid.store(0, std::memory_order_release);
}

bool AddressHandles::Lookup(uint32_t handle, rc::DatagramDest* dest) const {
  if (handle >= kCount) return false;
  uint64_t word = slots_[handle].mac_valid.load(std::memory_order_acquire);
  if ((word & kValid) == 0) return false;
  for (int i = 5; i >= 0; --i) {
    dest->mac.bytes[i] = static_cast<uint8_t>(word);
    word >>= 8;
  }
  dest->ip = slots_[handle].ip.load(std::memory_order_relaxed);
  return true;
}

namespace {

// Whether the frame begins a message that consumes a receive request: the
// first packet of a SEND (or a datagram), or a packet with immediate data.
bool NeedsReceive(const wire::ParsedPacket& pkt) {
  const wire::OpcodeInfo& info = wire::InfoOf(pkt.bth.opcode);
  return ((info.op_class == wire::OpcodeClass::kSend ||
           info.op_class == wire::OpcodeClass::kDatagram) &&
          (info.flags & wire::kOpFirst) != 0) ||
         wire::HasImm(pkt.bth.opcode);
}

}  // namespace

void Endpoint::HandleFrame(const wire::ParsedPacket& pkt) {
  // The responder may touch our client's memory: not once it exited (a
  // frame dropped while it may be dying is sent again).
  if (closed_ || !ClientsLive()) return;
  // The frame may start a message that needs a receive request: those the
  // client posted before it arrived serve it, even when this turn has not
  // pulled them yet (UC would drop the message, RC send an RNR NAK). A
  // shared receive queue gives one for this message, none kept from the
  // others. Frames that need none (WRITEs) look at no ring.
  if (qp_->recv_outstanding() == 0 && info_.receive.valid() &&
      NeedsReceive(pkt) && qp_->state() == rc::QpState::kReadyToSend) {
    PullReceives(info_.shared_receive ? 1 : kReceivesPulledForAFrame);
  }
  qp_->HandleFrame(pkt);
  // The first packet the queue pair accepted: the client learns that
  // communication is established (and is woken to see it).
  if (ABSL_PREDICT_FALSE(!established_) && qp_->stats().rx_packets != 0) {
    established_ = true;
    info_.header->established[info_.slot].store(1, std::memory_order_release);
    ring_bell_ = true;
  }
}

bool Endpoint::TakeTransportError() {
  const bool e = transport_error_;
  transport_error_ = false;
  return e;
}

void Endpoint::PublishState(shm::ConnectionState state) {
  if (closed_) return;  // Close published the final state
  info_.header->connection_state[info_.slot].store(state,
                                                   std::memory_order_release);
}

void Endpoint::SetIdle(bool idle) {
  info_.header->engine_idle[info_.slot].sleeping.store(
      idle ? 1 : 0, std::memory_order_seq_cst);
}

bool Endpoint::HasWork() const {
  return (rx_ != nullptr && !rx_->empty()) ||
         (!closed_ && ((info_.send.Size() > 0 && !send_waits_) ||
                       direct_copy_.active ||
                       (info_.receive.valid() && info_.receive.Size() > 0))) ||
         qp_->responder_busy();
}

Endpoint::Liveness Endpoint::ConfirmClient() {
  if (client_gone_) return Liveness::kGone;
  if (liveness_unknown_) return Liveness::kAlive;
  // The mutex says its owner thread is gone (the kernel marks it before the
  // process can be reaped), or nobody holds it. Only the process's exit
  // counts: a thread of a live client may have ended on its own, and the
  // word is client memory anyway.
  pollfd p{info_.owner_pidfd, POLLIN, 0};
  if (info_.owner_pidfd < 0) {
    liveness_unknown_ = true;  // nothing to confirm with: the socket tells
    return Liveness::kAlive;
  }
  if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0) {
    client_gone_ = true;
    return Liveness::kGone;
  }
  // A dying process marks the mutex a moment before it exits.
  const uint64_t now = clock_->NowNs();
  if (suspect_since_ns_ == 0) suspect_since_ns_ = now;
  if (now - suspect_since_ns_ < kSuspectNs) return Liveness::kSuspect;
  // Not gone after the wait: a thread of a live client ended on its own,
  // or the process is still being torn down (a large address space, a
  // sanitizer's shadow memory, a busy machine: seen taking well over
  // kSuspectNs). Its requests run meanwhile, but its exit is still looked
  // for on every call, so that nothing runs once it is reaped.
  return Liveness::kAlive;
}

bool Endpoint::ClientsLive() {
  const Liveness own = CheckClient();
  const Liveness peer =
      peer_ != nullptr ? peer_->CheckClient() : Liveness::kAlive;
  if (own == Liveness::kGone) {
    Close(CloseReason::kClosedByClient);
    if (peer_ != nullptr) peer_->Close(CloseReason::kPeerClosed);
    if (remote()) transport_error_ = true;
    return false;
  }
  if (peer == Liveness::kGone) {
    peer_->Close(CloseReason::kClosedByClient);
    Close(CloseReason::kPeerClosed);
    return false;
  }
  return own == Liveness::kAlive && peer == Liveness::kAlive;
}

rc::ResolvedMemory Endpoint::Resolve(wire::Qpn, wire::Rkey rkey, uint64_t va,
                                     uint32_t len, rc::RemoteAccess access) {
  const uint8_t bit = access == rc::RemoteAccess::kRead ? mr::kAccessRemoteRead
                      : access == rc::RemoteAccess::kWrite
                          ? mr::kAccessRemoteWrite
                          : mr::kAccessRemoteAtomic;
  // The queue pair itself does not serve the operation (verbs'
  // qp_access_flags): refused as an access error, as RNICs do.
  if ((info_.remote_access & bit) == 0) {
    ++stats_.access_refused_by_qp;
    return {rc::AccessCheck::kNoPermission, nullptr};
  }
  const mr::AccessResult r =
      mr::ResolveRemote(*table_, rkey.value(), info_.registration_scope, bit,
                        va, len, info_.connection_id);
  // Pinned until the responder releases it, so that deregistration of a
  // buffer a transfer is using fails as "in use".
  if (r.check == mr::AccessCheck::kOk && !table_->BeginUse(rkey.value())) {
    return {rc::AccessCheck::kUnknownKey, nullptr};
  }
  return {static_cast<rc::AccessCheck>(r.check), r.host, r.memory_owner};
}

void Endpoint::Release(wire::Rkey rkey) { table_->EndUse(rkey.value()); }

bool Endpoint::Invalidate(wire::Qpn, wire::Rkey rkey) {
  // Only a type 2 window bound to this queue pair (IBA 10.6.7.2.4: the QP
  // association of a type 2B window), in its protection domain.
  const mr::Registration* r = table_->Lookup(rkey.value());
  if (r == nullptr || r->kind != mr::KeyKind::kWindowType2 ||
      r->connection != info_.registration_scope ||
      r->queue_pair != info_.connection_id) {
    return false;
  }
  // The control plane finds it invalid when it next looks at the window
  // (a bind, a deallocation) and takes it out of the table then.
  return table_->Invalidate(rkey.value());
}

bool Endpoint::StartLocalOp(const shm::SendEntry& e) {
  // Every request before it completes first (IBA 10.6.5.1's local
  // invalidate fence, which holds for binds here too): it then runs on its
  // own, and the requests after it wait for its answer.
  if (pins_head_ != pins_tail_) {
    send_waits_ = true;
    return false;
  }
  info_.send.Consume();
  local_op_.entry = e;
  local_op_.index = taken_++;
  local_op_.waiting = true;
  local_op_.pass_up = true;
  send_waits_ = true;
  return true;
}

bool Endpoint::TakeLocalOp(shm::SendEntry* entry, uint32_t* seq) const {
  if (!local_op_.pass_up || closed_) return false;
  *entry = local_op_.entry;
  *seq = local_op_.index;
  return true;
}

bool Endpoint::ClaimLocalOp(uint32_t seq) {
  uint64_t idle = 0;
  // Acquire pairs with nothing the engine wrote but the word itself; the
  // entry the control thread acts on travelled in the frame.
  return local_op_answer_.compare_exchange_strong(
      idle, kClaimed | seq, std::memory_order_acq_rel,
      std::memory_order_acquire);
}

void Endpoint::ReleaseLocalOp() {
  local_op_answer_.store(0, std::memory_order_release);
}

void Endpoint::AnswerLocalOp(uint32_t seq, int32_t status, uint8_t detail) {
  const uint64_t word = kAnswered | uint64_t{detail} << 40 |
                        uint64_t{static_cast<uint8_t>(status)} << 32 | seq;
  // Release pairs with the acquire loads in FinishLocalOp and SettleLocalOp.
  local_op_answer_.store(word, std::memory_order_release);
}

bool Endpoint::CompleteLocalOp(uint64_t word) {
  local_op_answer_.store(0, std::memory_order_relaxed);
  local_op_.waiting = false;
  send_waits_ = false;
  const int32_t status = static_cast<int8_t>(word >> 32);
  const uint8_t detail = static_cast<uint8_t>(word >> 40);
  const shm::SendEntry& e = local_op_.entry;
  if (status == shm::kStatusOk) {
    if ((e.flags & shm::kFlagSilentSuccess) == 0) {
      PushCompletion(e.wr_id, status, e.op, 0);
    }
    return true;
  }
  // A bind or invalidation the rules refuse puts the queue pair in the
  // error state (IBA 10.6.7.2.4, 10.6.5.1): the request fails with its
  // reason, every later one is flushed.
  PublishState(shm::kConnAborted);
  PushCompletion(e.wr_id, status, e.op, 0, detail);
  return false;
}

void Endpoint::FinishLocalOp() {
  const uint64_t word = local_op_answer_.load(std::memory_order_acquire);
  if ((word & kAnswered) == 0 ||
      static_cast<uint32_t>(word) != local_op_.index) {
    return;
  }
  if (!CompleteLocalOp(word)) {
    Close(CloseReason::kTransportError);
    transport_error_ = true;
  }
}

void Endpoint::SettleLocalOp() {
  // The control thread may be carrying the request out right now: what it
  // did is what the request did, and the client is told so. Otherwise the
  // request is abandoned, and the final status ends it.
  while (true) {
    uint64_t word = local_op_answer_.load(std::memory_order_acquire);
    if (word == 0) {
      if (local_op_answer_.compare_exchange_strong(
              word, kAbandoned | local_op_.index, std::memory_order_acq_rel,
              std::memory_order_acquire)) {
        return;
      }
      continue;
    }
    if ((word & kAnswered) != 0 &&
        static_cast<uint32_t>(word) == local_op_.index) {
      (void)CompleteLocalOp(word);
      return;
    }
    if ((word & kClaimed) == 0) return;  // not this request's: nothing to do
    sched_yield();  // claimed: the answer comes within microseconds
  }
}

int Endpoint::Translate(const shm::SendEntry& e, rc::WorkRequest* wr,
                        Pins* pins) {
  pins->count = 0;
  pins->invalidate = 0;
  // SENDs and immediate data (verbs) go over a port only: inside the
  // daemon a connection's requests are carried out directly. Atomics go
  // either way; their one SGE takes the 8-byte word as it was.
  const uint32_t known = remote() ? shm::kVerbsSendFlags : shm::kKnownSendFlags;
  const bool atomic =
      e.op == shm::kSendCompareSwap || e.op == shm::kSendFetchAdd;
  // A UD queue pair's SEND goes where its address handle says.
  if (info_.qp.type == rc::lifecycle::QpType::kUd) {
    if (e.op != shm::kSendSend || info_.address_handles == nullptr ||
        !info_.address_handles->Lookup(e.ah, &wr->ud)) {
      ++stats_.bad_entries;
      return shm::kStatusInvalid;
    }
    wr->ud.qpn = wire::Qpn(e.remote_qpn & wire::Psn::kMask);
    wr->ud.qkey = e.remote_qkey;
  }
  if ((e.op != shm::kSendWrite && e.op != shm::kSendRead && !atomic &&
       !(e.op == shm::kSendSend && remote())) ||
      e.num_sge > shm::kMaxSge || (e.flags & ~known) != 0 ||
      ((e.op == shm::kSendRead || atomic) &&
       (e.flags & shm::kFlagImmediate) != 0) ||
      // SEND with Invalidate: RC only, and never with immediate data.
      ((e.flags & shm::kFlagInvalidate) != 0 &&
       (e.op != shm::kSendSend || (e.flags & shm::kFlagImmediate) != 0 ||
        info_.qp.type != rc::lifecycle::QpType::kRc)) ||
      (atomic && (e.num_sge != 1 || e.sge[0].length != rc::kAtomicBytes))) {
    ++stats_.bad_entries;
    return shm::kStatusInvalid;
  }
  wr->wr_id = e.wr_id;
  wr->opcode = e.op == shm::kSendWrite         ? rc::WrOpcode::kWrite
               : e.op == shm::kSendRead        ? rc::WrOpcode::kRead
               : e.op == shm::kSendCompareSwap ? rc::WrOpcode::kCompareSwap
               : e.op == shm::kSendFetchAdd    ? rc::WrOpcode::kFetchAdd
                                               : rc::WrOpcode::kSend;
  wr->flags = ((e.flags & shm::kFlagSilentSuccess) ? rc::kWrSilentSuccess : 0) |
              ((e.flags & shm::kFlagReadFence) ? rc::kWrReadFence : 0) |
              ((e.flags & shm::kFlagImmediate) ? rc::kWrImmediate : 0) |
              ((e.flags & shm::kFlagSolicited) ? rc::kWrSolicited : 0) |
              ((e.flags & shm::kFlagInvalidate) ? rc::kWrInvalidate : 0);
  wr->invalidate_rkey = wire::Rkey(e.rkey);
  wr->num_sge = e.num_sge;
  wr->remote_va = e.remote_address;
  wr->rkey = wire::Rkey(e.rkey);
  wr->imm = e.imm;
  wr->compare = atomic ? e.compare : 0;
  wr->swap_add = atomic ? e.swap_add : 0;
  uint64_t total = 0;
  // A write or send reads the local buffers, a read or atomic fills them.
  const uint8_t access = e.op == shm::kSendRead || atomic
                             ? mr::kAccessLocalWrite
                             : mr::kAccessLocal;
  for (uint32_t i = 0; i < e.num_sge; ++i) {
    const shm::SgeEntry& s = e.sge[i];
    total += s.length;
    const mr::AccessResult r =
        mr::ResolveLocal(*table_, s.lkey, info_.session_id, access, s.address,
                         s.length, info_.registration_scope);
    // Pin before trusting the pointer beyond this loop iteration; a key
    // deregistered in between fails the pin.
    if (r.check != mr::AccessCheck::kOk || !table_->BeginUse(s.lkey)) {
      ReleasePins(*pins);
      ++stats_.local_key_errors;
      return shm::kStatusFault;
    }
    pins->lkeys[pins->count++] = s.lkey;
    wr->sge[i] = {r.host, s.length, 0, r.memory_owner};
  }
  if ((e.flags & shm::kFlagReadLocalInvalidate) != 0 &&
      e.op == shm::kSendRead && e.num_sge > 0) {
    pins->invalidate = e.sge[0].lkey;
  }
  if (total > (1ull << 31)) {
    ReleasePins(*pins);
    return shm::kStatusInvalid;
  }
  return shm::kStatusOk;
}

uint32_t Endpoint::Retired() const {
  // Requests the QP flushed never ran: the final status ends them.
  if (first_flushed_.has_value()) return *first_flushed_;
  if (local_op_.waiting) return local_op_.index;
  if (direct_copy_.active) return direct_copy_.pins.index;
  if (pins_head_ != pins_tail_) return pins_[pins_head_ & pins_mask_].index;
  return taken_;
}

void Endpoint::PublishRetired() {
  const uint32_t retired = Retired();
  if (retired == published_retired_) return;
  published_retired_ = retired;
  // Pairs with the client's acquire load: what the retired requests did is
  // done.
  info_.header->retired[info_.slot].store(retired, std::memory_order_release);
  // Someone may wait for a silent request.
  ring_bell_ = true;
}

void Endpoint::PushCompletion(uint64_t wr_id, int32_t status, uint8_t op,
                              uint32_t bytes, uint8_t detail) {
  shm::CompletionEntry c{};
  c.wr_id = wr_id;
  c.status = status;
  c.op = op;
  c.detail = detail;
  c.byte_len = bytes;
  c.retired = Retired();
  Push(c);
}

void Endpoint::Push(const shm::CompletionEntry& c) {
  // Room is kept for every request taken (CompletionRoom): a full ring
  // means the client moved its indices, and the connection cannot go on.
  if (ABSL_PREDICT_FALSE(!info_.completion.TryPush(c))) {
    ++stats_.completions_lost;
    ring_broken_ = true;
    return;
  }
  ring_bell_ = true;
  ++stats_.completed;
}

bool Endpoint::CompletionRoom() const {
  // Every request taken, send or receive, may still push one entry.
  return (pins_tail_ - pins_head_) + (local_op_.waiting ? 1 : 0) +
             qp_->recv_outstanding() + info_.completion.Size() <
         info_.completion.capacity();
}

void Endpoint::PushRecvCompletion(uint64_t wr_id, int32_t status, uint8_t op,
                                  uint32_t bytes, uint8_t flags, uint32_t imm,
                                  uint32_t src_qp, uint8_t detail) {
  shm::CompletionEntry c{};
  c.detail = detail;
  c.src_qp = src_qp;
  c.wr_id = wr_id;
  c.status = status;
  c.op = op;
  c.flags = flags;
  c.byte_len = bytes;
  c.imm = imm;
  Push(c);
}

void Endpoint::CompleteRecv(const rc::RecvCompletion& c) {
  shared_taken_.reset();
  int32_t status = shm::kStatusOk;
  uint8_t detail = shm::kDetailNone;
  if (c.status == rc::WcStatus::kLocalLengthError) {
    status = shm::kStatusNoBuffers;  // the message did not fit
  } else if (c.status == rc::WcStatus::kInvalidateError) {
    status = shm::kStatusInvalid;
    detail = shm::kDetailInvalidateRefused;
  } else if (c.status == rc::WcStatus::kLocalProtectionError) {
    status = shm::kStatusFault;  // IBV_WC_LOC_PROT_ERR
  } else if (c.status != rc::WcStatus::kSuccess) {
    status = shm::kStatusConnAborted;
  }
  const uint8_t flags = static_cast<uint8_t>(
      (c.with_imm ? shm::kCompletionImm : 0) |
      (c.solicited ? shm::kCompletionSolicited : 0) |
      (c.grh ? shm::kCompletionGrh : 0) |
      (c.invalidated ? shm::kCompletionInvalidated : 0));
  PushRecvCompletion(c.wr_id, status, c.write ? shm::kRecvWriteImm : shm::kRecv,
                     c.byte_len, flags,
                     c.invalidated ? c.invalidated_rkey.value() : c.imm,
                     c.src_qp.value(), detail);
}

bool Endpoint::ReceiveBuffersLive(const rc::WorkRequest& recv) {
  for (uint32_t i = 0; i < recv.num_sge; ++i) {
    const rc::Sge& s = recv.sge[i];
    if (s.length == 0 || s.lkey == 0) continue;
    // The buffer's client address under the key's registration now, checked
    // as at the post (ResolveLocal).
    const mr::Registration* r = table_->Lookup(s.lkey);
    if (r == nullptr || s.addr < r->host ||
        mr::CheckLocalAccess(*r, info_.session_id, mr::kAccessLocalWrite,
                             r->address + static_cast<uint64_t>(s.addr - r->host),
                             s.length, info_.registration_scope)
                .check != mr::AccessCheck::kOk) {
      ++stats_.local_key_errors;
      return false;
    }
  }
  return true;
}

uint32_t Endpoint::PullReceives(uint32_t budget) {
  uint32_t n = 0;
  while (n < budget && info_.receive.valid() && !closed_ && ClientsLive()) {
    shm::RecvEntry e;
    const shm::PopResult pr = info_.receive.TryPeek(&e);
    if (pr == shm::PopResult::kEmpty) break;
    if (pr == shm::PopResult::kCorrupted) {
      ++stats_.bad_entries;
      Close(CloseReason::kClientBroke);
      transport_error_ = true;
      break;
    }
    if (!CompletionRoom()) break;  // judged as for requests (PullRequests)
    // A ring deeper than the queue pair's receive queue keeps the rest
    // until receives are used.
    if (qp_->RecvQueueFull()) break;
    info_.receive.Consume();
    ++n;
    rc::WorkRequest wr;
    wr.wr_id = e.wr_id;
    int32_t status = shm::kStatusOk;
    if (e.num_sge > shm::kMaxSge) {
      ++stats_.bad_entries;
      status = shm::kStatusInvalid;
    } else {
      wr.num_sge = e.num_sge;
      // Not pinned: the buffers are checked now, and the arena behind them
      // stays mapped while the session lives, which outlasts this endpoint;
      // their keys are checked again when a message arrives
      // (ReceiveBuffersLive), so that a receive whose memory was
      // deregistered since never writes there. A buffer its key does not
      // reach is posted all the same, without an address: the message that
      // takes the receive finds it (IBA 9.9.3.1.3: a local protection
      // error then, NAK "remote operational error" to the requester).
      for (uint32_t i = 0; i < e.num_sge; ++i) {
        const shm::SgeEntry& s = e.sge[i];
        const mr::AccessResult r =
            mr::ResolveLocal(*table_, s.lkey, info_.session_id,
                             mr::kAccessLocalWrite, s.address, s.length,
                             info_.registration_scope);
        if (r.check != mr::AccessCheck::kOk) {
          ++stats_.local_key_errors;
          wr.sge[i] = {nullptr, s.length, s.lkey != 0 ? s.lkey : ~0u, nullptr};
          continue;
        }
        wr.sge[i] = {r.host, s.length, s.lkey, r.memory_owner};
      }
    }
    if (status == shm::kStatusOk) {
      const rc::PostResult r = qp_->PostRecv(wr);
      if (r != rc::PostResult::kOk) {
        status = r == rc::PostResult::kNotConnected ? shm::kStatusNotConnected
                                                    : shm::kStatusInvalid;
      } else if (info_.shared_receive) {
        shared_taken_ = e.wr_id;
      }
    }
    if (status != shm::kStatusOk) {
      PushRecvCompletion(e.wr_id, status, shm::kRecv, 0, 0, 0);
    }
  }
  return n;
}

uint32_t Endpoint::PullRequests(uint32_t budget) {
  uint32_t n = 0;
  // Both clients must live for every request taken: one may die while this
  // loop runs, and what it posts later must never be carried out.
  // A memory window request waiting for its answer holds back the requests
  // after it (StartLocalOp).
  while (n < budget && !closed_ && !direct_copy_.active &&
         !local_op_.waiting && ClientsLive()) {
    const uint32_t outstanding = pins_tail_ - pins_head_;
    if (outstanding >= kMaxOutstanding) break;
    shm::SendEntry e;
    const shm::PopResult pr = info_.send.TryPeek(&e);
    if (pr == shm::PopResult::kEmpty) break;
    if (pr == shm::PopResult::kCorrupted) {
      // The client broke its own ring: its connection cannot go on.
      ++stats_.bad_entries;
      Close(CloseReason::kClientBroke);
      if (peer_ != nullptr) peer_->PeerEnded();
      if (remote()) transport_error_ = true;
      break;
    }
    // Room for its completion, judged once the request is visible: a
    // client that moved its completion ring's consumer index before it
    // posted is seen to have, and the request stays in the ring.
    if (!CompletionRoom()) break;
    if ((e.op == shm::kSendBindMw || e.op == shm::kSendLocalInvalidate) &&
        remote() && info_.qp.type != rc::lifecycle::QpType::kUd) {
      if (StartLocalOp(e)) ++n;
      break;
    }
    info_.send.Consume();
    ++n;
    rc::WorkRequest wr;
    Pins& pins = pins_[pins_tail_ & pins_mask_];
    pins.index = taken_++;
    const int status = Translate(e, &wr, &pins);
    if (status != shm::kStatusOk) {
      PushCompletion(e.wr_id, status, e.op, 0);
      continue;
    }
    if (direct_) {
      CountLoad(wr);
      ExecuteDirect(wr, pins, e.op);
      ++stats_.posted;
      continue;
    }
    const rc::PostResult r = qp_->Post(wr);
    if (r != rc::PostResult::kOk) {
      ReleasePins(pins);
      PushCompletion(e.wr_id,
                     r == rc::PostResult::kNotConnected
                         ? shm::kStatusNotConnected
                         : shm::kStatusInvalid,
                     e.op, 0);
      continue;
    }
    ++pins_tail_;
    ++stats_.posted;
    CountLoad(wr);
  }
  return n;
}

void Endpoint::ReleasePins(Pins& pins) {
  for (uint32_t j = 0; j < pins.count; ++j) table_->EndUse(pins.lkeys[j]);
  pins.count = 0;
}

void Endpoint::FailDirect(const rc::WorkRequest& wr, Pins& pins, uint8_t op,
                          int32_t status, uint8_t detail) {
  // As over the wire: the peer's NAK, the requester fails the request and
  // the connection breaks for both ends.
  ReleasePins(pins);
  PublishState(shm::kConnAborted);
  peer_->PublishState(shm::kConnReset);
  PushCompletion(wr.wr_id, status, op, 0, detail);
  Close(CloseReason::kTransportError);
  peer_->Close(CloseReason::kPeerClosed);
}

void Endpoint::ExecuteDirectAtomic(const rc::WorkRequest& wr, Pins& pins,
                                   uint8_t op) {
  // The peer's responder's checks, in its order: alignment (NAK "invalid
  // request"), then key, connection, atomic access and range (NAK "remote
  // access error").
  if ((wr.remote_va & (rc::kAtomicBytes - 1)) != 0) {
    FailDirect(wr, pins, op, shm::kStatusConnAborted,
               shm::kDetailRemoteInvalid);
    return;
  }
  const rc::ResolvedMemory mem =
      peer_->Resolve(peer_->info_.qp.local_qpn, wr.rkey, wr.remote_va,
                     rc::kAtomicBytes, rc::RemoteAccess::kAtomic);
  if (mem.check != rc::AccessCheck::kOk) {
    FailDirect(wr, pins, op, shm::kStatusRemoteResources,
               shm::kDetailRemoteAccess);
    return;
  }
  if ((reinterpret_cast<uintptr_t>(mem.addr) & (rc::kAtomicBytes - 1)) != 0) {
    peer_->Release(wr.rkey);
    FailDirect(wr, pins, op, shm::kStatusConnAborted,
               shm::kDetailRemoteInvalid);
    return;
  }
  // One atomic instruction on the word, as the RC responder executes it:
  // atomic against requesters on other engines and the owner's CPUs.
  auto* word = reinterpret_cast<uint64_t*>(mem.addr);
  uint64_t orig;
  if (wr.opcode == rc::WrOpcode::kCompareSwap) {
    orig = wr.compare;  // replaced by the word's value when it differs
    __atomic_compare_exchange_n(word, &orig, wr.swap_add, /*weak=*/false,
                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  } else {
    orig = __atomic_fetch_add(word, wr.swap_add, __ATOMIC_SEQ_CST);
  }
  peer_->Release(wr.rkey);
  std::memcpy(wr.sge[0].addr, &orig, sizeof(orig));
  ReleasePins(pins);
  if ((wr.flags & rc::kWrSilentSuccess) == 0) {
    PushCompletion(wr.wr_id, shm::kStatusOk, op, rc::kAtomicBytes);
  }
}

void Endpoint::ExecuteDirect(const rc::WorkRequest& wr, Pins& pins,
                             uint8_t op) {
  ++stats_.direct;
  if (rc::IsAtomic(wr.opcode)) {
    ExecuteDirectAtomic(wr, pins, op);
    return;
  }
  uint32_t len = 0;
  for (uint32_t i = 0; i < wr.num_sge; ++i) len += wr.sge[i].length;
  const bool write = wr.opcode == rc::WrOpcode::kWrite;
  rc::ResolvedMemory mem{rc::AccessCheck::kOk, nullptr};
  if (len > 0) {
    // The checks the peer's responder makes (key, connection, access,
    // range), and its pin while the memory is used.
    mem = peer_->Resolve(
        peer_->info_.qp.local_qpn, wr.rkey, wr.remote_va, len,
        write ? rc::RemoteAccess::kWrite : rc::RemoteAccess::kRead);
  }
  if (mem.check != rc::AccessCheck::kOk) {
    // NAK "remote access error".
    FailDirect(wr, pins, op,
               write ? shm::kStatusFault : shm::kStatusRemoteResources,
               shm::kDetailRemoteAccess);
    return;
  }
  if (len <= kDirectBytesPerTurn) {
    // The common case: done in this turn, nothing to keep.
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
    if ((wr.flags & rc::kWrSilentSuccess) == 0) {
      PushCompletion(wr.wr_id, shm::kStatusOk, op, len);
    }
    return;
  }
  direct_copy_.wr = wr;
  direct_copy_.pins = pins;
  direct_copy_.op = op;
  direct_copy_.remote = mem.addr;
  direct_copy_.length = len;
  direct_copy_.done = 0;
  direct_copy_.active = true;
  ContinueDirect();
}

void Endpoint::ContinueDirect() {
  DirectCopy& d = direct_copy_;
  const uint32_t n = std::min(d.length - d.done, kDirectBytesPerTurn);
  if (n > 0) {
    if (d.wr.opcode == rc::WrOpcode::kWrite) {
      rc::CopyFromSgl(d.wr, d.done, d.remote + d.done, n);
    } else {
      rc::CopyToSgl(d.wr, d.done, d.remote + d.done, n);
    }
    d.done += n;
  }
  if (d.done < d.length) return;  // more next turn
  d.active = false;
  if (d.length > 0) peer_->Release(d.wr.rkey);
  ReleasePins(d.pins);
  if (d.pins.invalidate != 0) table_->Invalidate(d.pins.invalidate);
  if ((d.wr.flags & rc::kWrSilentSuccess) != 0) return;
  PushCompletion(d.wr.wr_id, shm::kStatusOk, d.op, d.length);
}

void Endpoint::Complete(const rc::Completion& c) {
  send_waits_ = false;  // a memory window request may wait for this one
  Pins& pins = pins_[pins_head_ & pins_mask_];
  ++pins_head_;
  ReleasePins(pins);
  // The QP flushes in order, after everything that finished: the first
  // flushed request bounds what is retired.
  if (c.status == rc::WcStatus::kFlushed && !first_flushed_.has_value()) {
    first_flushed_ = pins.index;
  }
  // NdkRead's local invalidate: a successful read retires the key of its
  // first buffer before the completion is seen.
  if (pins.invalidate != 0 && c.status == rc::WcStatus::kSuccess) {
    table_->Invalidate(pins.invalidate);
  }
  // Flushed: the connection is closing, and its final status ends the
  // request (Close).
  if (c.silent || c.status == rc::WcStatus::kFlushed) return;
  // A transport error: the client must see the connection aborted before
  // (release order of the ring push) it sees the failed request.
  if (!closed_ && qp_->state() == rc::QpState::kError) {
    PublishState(shm::kConnAborted);
    if (peer_ != nullptr) peer_->PublishState(shm::kConnReset);
  }
  const uint8_t op = c.opcode == rc::WrOpcode::kWrite  ? shm::kSendWrite
                     : c.opcode == rc::WrOpcode::kRead ? shm::kSendRead
                     : c.opcode == rc::WrOpcode::kCompareSwap
                         ? shm::kSendCompareSwap
                     : c.opcode == rc::WrOpcode::kFetchAdd ? shm::kSendFetchAdd
                                                           : shm::kSendSend;
  int32_t status = shm::kStatusOk;
  uint8_t detail = shm::kDetailNone;
  switch (c.status) {
    case rc::WcStatus::kSuccess:
    case rc::WcStatus::kFlushed:
      break;
    case rc::WcStatus::kRemoteAccessError:
      // The target lies outside what the peer registered for us.
      status = op == shm::kSendRead || rc::IsAtomic(c.opcode)
                   ? shm::kStatusRemoteResources
                   : shm::kStatusFault;
      detail = shm::kDetailRemoteAccess;
      break;
    case rc::WcStatus::kRetryExceeded:
      status = shm::kStatusConnAborted;
      detail = shm::kDetailRetryExceeded;
      break;
    case rc::WcStatus::kRnrRetryExceeded:
      status = shm::kStatusConnAborted;
      detail = shm::kDetailRnrRetryExceeded;
      break;
    case rc::WcStatus::kRemoteInvalidRequest:
      status = shm::kStatusConnAborted;
      detail = shm::kDetailRemoteInvalid;
      break;
    case rc::WcStatus::kRemoteOperationalError:
      status = shm::kStatusConnAborted;
      detail = shm::kDetailRemoteOperational;
      break;
    case rc::WcStatus::kBadResponse:
    // Never a send completion's (the QP's error_status, or a receive's),
    // but a transport error all the same.
    case rc::WcStatus::kPeerInvalidRequest:
    case rc::WcStatus::kPeerAccessError:
    case rc::WcStatus::kLocalLengthError:
    case rc::WcStatus::kInvalidateError:
    case rc::WcStatus::kLocalProtectionError:
      status = shm::kStatusConnAborted;
      detail = shm::kDetailBadResponse;
      break;
  }
  PushCompletion(c.wr_id, status, op, c.byte_len, detail);
}

uint32_t Endpoint::Receive(uint32_t budget) {
  uint32_t work = 0;
  while (rx_ != nullptr && work < budget && !rx_->empty()) {
    wire::ParsedPacket pkt;
    if (closed_) {
      // Nothing of a closed connection reaches client memory.
    } else if (wire::ParseQueuePairFrame(rx_->Front(), &pkt) == wire::ParseError::kOk) {
      qp_->HandleFrame(pkt);
    } else {
      ++stats_.rx_rejected;
    }
    rx_->Pop();
    ++work;
  }
  return work;
}

void Endpoint::PeerEnded() {
  // The frames are copies: taking them touches only this end's client
  // memory, which must still be there.
  if (!closed_ && CheckClient() == Liveness::kAlive) {
    Receive(FrameQueue::kSlots);
  }
  Close(CloseReason::kPeerClosed);
}

void Endpoint::Close(CloseReason reason) {
  if (closed_) return;
  if (local_op_.waiting) SettleLocalOp();
  closed_ = true;
  close_reason_ = reason;
  // Outstanding requests are released without completions; the final
  // status below ends them.
  qp_->Flush();
  // A request cut short is not retired: the final status ends it.
  published_retired_ = Retired();
  if (direct_copy_.active) {
    direct_copy_.active = false;
    if (direct_copy_.length > 0) peer_->Release(direct_copy_.wr.rkey);
    ReleasePins(direct_copy_.pins);
  }
  const CloseOutcome outcome = OutcomeOf(reason);
  // A receive taken from a shared receive queue and not used goes back to
  // the client, ended (its own receives it ends itself, by count).
  if (shared_taken_.has_value() && !client_gone_) {
    PushRecvCompletion(*shared_taken_, outcome.status, shm::kRecv, 0, 0, 0);
    shared_taken_.reset();
  }
  shm::PublishFinal(info_.header, info_.slot, outcome.state, outcome.status,
                    published_retired_);
  ring_bell_ = false;
  shm::RingDoorbell(&info_.header->completion_bell[info_.slot]);
}

uint32_t Endpoint::Poll(uint32_t budget) {
  uint32_t work = 0;
  // Requests and frames touch client memory only while both clients live;
  // while one may be dying, the turn waits for the answer.
  if (!closed_ && !ClientsLive()) return 1;
  // Frames from the peer first: they complete and free work.
  work += Receive(budget);
  if (!closed_) {
    if (direct_copy_.active) {
      ContinueDirect();
      ++work;
    }
    if (local_op_.waiting) FinishLocalOp();
    // The QP may have entered the error state on a frame (a NAK, a bad
    // response): no request is handed to it after that; it closes below.
    if (!closed_ && qp_->state() == rc::QpState::kReadyToSend) {
      // A shared receive queue's receives are taken as frames need them.
      if (!info_.shared_receive) work += PullReceives(budget);
      work += PullRequests(budget);
    }
    work += qp_->Poll(budget);
    if (ABSL_PREDICT_FALSE(ring_broken_)) {
      Close(CloseReason::kClientBroke);
      if (peer_ != nullptr) peer_->PeerEnded();
      if (remote()) transport_error_ = true;
    } else if (qp_->state() == rc::QpState::kError) {
      // A transport error breaks the connection for both ends, whatever
      // put the QP in the error state (retries exhausted, a NAK, a bad
      // response, a request our responder refused once its NAK is sent);
      // the client learns which of the last it was.
      Close(BreakReason(qp_->error_status()));
      if (peer_ != nullptr) peer_->PeerEnded();
      if (remote()) transport_error_ = true;
    }
  }
  if (!closed_) PublishRetired();
  if (ring_bell_) {
    ring_bell_ = false;
    shm::RingDoorbell(&info_.header->completion_bell[info_.slot]);
  }
  return work;
}

}  // namespace rdmaplane::engine
