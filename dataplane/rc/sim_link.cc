#include "dataplane/rc/sim_link.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace rdmaplane::rc {

SimWire::SimWire(const SimClock* clock, const fault::FaultSpec& faults,
                 double gbps, uint32_t backlog_bytes)
    : clock_(clock),
      model_(faults),
      scratch_(16384),
      ns_per_byte_(gbps > 0 ? 8.0 / gbps : 0),
      backlog_ns_(static_cast<uint64_t>(backlog_bytes * ns_per_byte_)) {}

uint64_t SimWire::TxReadyNs() const {
  if (ns_per_byte_ == 0 || tx_free_ns_ <= clock_->NowNs() + backlog_ns_) {
    return std::numeric_limits<uint64_t>::max();
  }
  return tx_free_ns_ - backlog_ns_;
}

std::span<uint8_t> SimWire::Reserve(size_t max_len) {
  if (TxReadyNs() != std::numeric_limits<uint64_t>::max()) return {};
  if (scratch_.size() < max_len) scratch_.resize(max_len);
  return {scratch_.data(), max_len};
}

void SimWire::Commit(size_t len) {
  bytes_sent_ += len;
  const std::span<const uint8_t> frame(scratch_.data(), len);
  if (tap) tap(frame);
  if (drop && drop(frame)) return;
  const fault::FaultDecision d = model_.Next();
  if (d.copies >= 1) Enqueue(d.delay_ns, d.reordered, len);
  if (d.copies >= 2) Enqueue(d.delay2_ns, d.reordered2, len);
}

bool SimWire::CanGather(std::span<const PayloadPiece> payload) const {
  for (const PayloadPiece& p : payload) {
    if (p.owner == nullptr) return false;
  }
  return true;
}

void SimWire::CommitGather(std::span<uint8_t> frame, size_t header_len,
                           std::span<const PayloadPiece> payload,
                           std::span<const uint8_t> trailer) {
  ++gathered_frames_;
  if (on_gather) on_gather(payload);
  FrameSink::CommitGather(frame, header_len, payload, trailer);
}

void SimWire::Enqueue(uint64_t delay_ns, bool reordered, size_t len) {
  uint64_t sent = clock_->NowNs();
  if (ns_per_byte_ > 0) {
    sent = std::max(sent, tx_free_ns_) +
           static_cast<uint64_t>(static_cast<double>(len) * ns_per_byte_);
    tx_free_ns_ = sent;
  }
  const uint64_t due = order_.Due(sent, delay_ns, reordered);
  queue_.push({due, seq_++,
               std::vector<uint8_t>(scratch_.begin(), scratch_.begin() + len)});
}

size_t SimWire::Deliver(
    const std::function<void(std::span<const uint8_t>)>& rx) {
  size_t n = 0;
  const uint64_t now = clock_->NowNs();
  while (!queue_.empty() && queue_.top().due_ns <= now) {
    // priority_queue::top is const; move the frame out via a copy of the node.
    std::vector<uint8_t> frame = std::move(const_cast<InFlight&>(queue_.top()).frame);
    queue_.pop();
    rx(frame);
    ++n;
  }
  return n;
}

uint64_t SimWire::NextDueNs() const {
  return queue_.empty() ? std::numeric_limits<uint64_t>::max()
                        : queue_.top().due_ns;
}

ResolvedMemory TestMemory::Resolve(wire::Qpn local_qpn, wire::Rkey rkey,
                                   uint64_t va, uint32_t len,
                                   RemoteAccess access) {
  ++lookups_;
  for (const Region& r : regions_) {
    if (r.rkey != rkey) continue;
    if (r.qpn != local_qpn) return {AccessCheck::kWrongConnection, nullptr};
    const bool allowed = access == RemoteAccess::kRead    ? r.readable
                         : access == RemoteAccess::kWrite ? r.writable
                                                          : r.atomic;
    if (!allowed) return {AccessCheck::kNoPermission, nullptr};
    if (va < r.va || va - r.va > r.length || len > r.length - (va - r.va)) {
      return {AccessCheck::kOutOfRange, nullptr};
    }
    if (len > 0) ++pins_;
    return {AccessCheck::kOk, r.base + (va - r.va), r.owner};
  }
  return {AccessCheck::kUnknownKey, nullptr};
}

bool TestMemory::Invalidate(wire::Qpn local_qpn, wire::Rkey rkey) {
  ++invalidate_calls_;
  if (on_invalidate) on_invalidate(rkey);
  const auto it = std::find_if(invalidatable_.begin(), invalidatable_.end(),
                               [&](const Invalidatable& k) {
                                 return k.qpn == local_qpn && k.rkey == rkey;
                               });
  if (it == invalidatable_.end()) return false;
  invalidatable_.erase(it);
  std::erase_if(regions_, [rkey](const Region& r) { return r.rkey == rkey; });
  ++invalidations_;
  return true;
}

namespace {

QpConfig Addressed(QpConfig c, bool is_a) {
  const wire::MacAddr mac_a{{0x02, 0, 0, 0, 0, 0x0a}};
  const wire::MacAddr mac_b{{0x02, 0, 0, 0, 0, 0x0b}};
  c.local_qpn = wire::Qpn(is_a ? 0x11 : 0x22);
  c.remote_qpn = wire::Qpn(is_a ? 0x22 : 0x11);
  c.send_psn = wire::Psn(is_a ? 0xFFFF00 : 0x000100);  // A wraps early
  c.recv_psn = wire::Psn(is_a ? 0x000100 : 0xFFFF00);
  c.path.src_mac = is_a ? mac_a : mac_b;
  c.path.dst_mac = is_a ? mac_b : mac_a;
  c.path.src_ip = is_a ? 0x0A000001 : 0x0A000002;
  c.path.dst_ip = is_a ? 0x0A000002 : 0x0A000001;
  c.path.udp_src_port = wire::UdpSourcePortForQpn(c.local_qpn);
  return c;
}

}  // namespace

SimPair::SimPair(const QpConfig& base, const fault::FaultSpec& ab,
                 const fault::FaultSpec& ba, double gbps)
    : a_to_b(&clock, ab, gbps), b_to_a(&clock, ba, gbps) {
  a.qp = std::make_unique<RcQp>(
      Addressed(base, true),
      RcQp::Env{&clock, &a_to_b, &a.memory, &a.cq});
  b.qp = std::make_unique<RcQp>(
      Addressed(base, false),
      RcQp::Env{&clock, &b_to_a, &b.memory, &b.cq});
}

void SimPair::Receive(Side& side, std::span<const uint8_t> frame) {
  wire::ParsedPacket pkt;
  if (wire::ParseQueuePairFrame(frame, &pkt, &side.parse) != wire::ParseError::kOk) {
    ++rejected_frames;
    return;
  }
  side.qp->HandleFrame(pkt);
}

bool SimPair::Step(uint32_t budget) {
  size_t moved = a_to_b.Deliver([this](auto f) { Receive(b, f); });
  moved += b_to_a.Deliver([this](auto f) { Receive(a, f); });
  moved += a.qp->Poll(budget);
  moved += b.qp->Poll(budget);
  if (moved > 0) return true;
  uint64_t next = std::min({a_to_b.NextDueNs(), b_to_a.NextDueNs(),
                           a_to_b.TxReadyNs(), b_to_a.TxReadyNs()});
  for (const RcQp* qp : {a.qp.get(), b.qp.get()}) {
    if (qp->timer_deadline_ns() != 0) {
      next = std::min(next, qp->timer_deadline_ns());
    }
  }
  if (next == std::numeric_limits<uint64_t>::max()) return false;
  clock.AdvanceTo(next);
  return true;
}

bool SimPair::RunUntil(const std::function<bool()>& done, uint64_t max_ns) {
  const uint64_t end = clock.NowNs() + max_ns;
  while (!done()) {
    if (clock.NowNs() > end || !Step()) return done();
  }
  return true;
}

bool SimPair::RunUntilIdle(uint64_t max_ns) {
  return RunUntil(
      [this] {
        return a.qp->outstanding() == 0 && b.qp->outstanding() == 0 &&
               !a.qp->responder_busy() && !b.qp->responder_busy();
      },
      max_ns);
}

}  // namespace rdmaplane::rc
