// ConnectionTable, for queue pairs of the verbs front end
// (ConnectionKind::kQueuePair): connected out of band, moved through their
// states by kOpModifyQp (Daemon::ModifyQueuePair checks each move against
// rc::lifecycle's table first); and shared receive queues.
#include "control/connections.h"
#include "control/reply.h"

namespace rdmaplane::control {

using shm::ControlResponse;

namespace {

// The answer when no slot holds a queue of `depths`.
ControlResponse NoSlot(const shm::SlotDepths& depths) {
  if (depths.Deep()) {
    return Reply(shm::kStatusNoBuffers,
                 "no free slot for a queue deeper than 4096 (32 per session)");
  }
  return Reply(shm::kStatusNoBuffers, "no free connection slot");
}
static_assert(shm::kSlotSendRingEntries == 4096 &&
              shm::kSlotRecvRingEntries == 4096 && shm::kDeepSlots == 32);

// kQpToRts: an RNR timer code, where one is given, is 0..31.
bool RnrTimerValid(const shm::QpPeer& p) {
  return (p.min_rnr_timer & shm::kQpMinRnrTimerSet) == 0 ||
         (p.min_rnr_timer & ~shm::kQpMinRnrTimerSet) <= 31;
}

}  // namespace

// --- Queue pairs connected out of band
// ---------------------------------------------

ControlResponse ConnectionTable::CreateSharedReceiveQueue(
    Session* s, const shm::SlotDepths& depths) {
  const int slot = s->FreeSlot(depths);
  if (slot < 0) return NoSlot(depths);
  if (s->srq_users.empty()) {
    s->srq_users.assign(shm::kMaxConnections, Session::kNotSrq);
  }
  s->srq_users[slot] = 0;
  s->ResetSlot(static_cast<uint32_t>(slot), depths);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = static_cast<uint32_t>(slot);
  return resp;
}

ControlResponse ConnectionTable::DestroySharedReceiveQueue(Session* s,
                                                           uint32_t slot) {
  if (!s->IsSrq(slot)) {
    return Reply(shm::kStatusInvalid, "not a shared receive queue");
  }
  if (s->srq_users[slot] != 0) {
    return Reply(shm::kStatusAgain, "queue pairs still use the queue");
  }
  s->srq_users[slot] = Session::kNotSrq;
  s->PublishState(slot, shm::kConnFree);
  return Reply(shm::kStatusOk);
}

ControlResponse ConnectionTable::CreateQueuePair(
    Session* s, uint32_t pd_scope, rc::lifecycle::QpType type,
    const shm::SlotDepths& depths, uint32_t srq_slot) {
  if (srq_slot != shm::kNoSrq && !s->IsSrq(srq_slot)) {
    return Reply(shm::kStatusInvalid, "not a shared receive queue");
  }
  const int slot = s->FreeSlot(depths);
  if (slot < 0) return NoSlot(depths);
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge = ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = Create();
  c->charge[0] = std::move(*charge);
  c->kind = ConnectionKind::kQueuePair;
  c->queue_pair.life = rc::lifecycle::QpLifecycle(type);
  c->queue_pair.pd_scope = pd_scope;
  c->queue_pair.srq_slot = srq_slot;
  if (srq_slot != shm::kNoSrq) ++s->srq_users[srq_slot];
  c->side[0] = s;
  c->slot[0] = static_cast<uint32_t>(slot);
  c->slot[1] = shm::kMaxConnections;
  c->open[0] = true;
  c->peer.pmtu = options_.path_mtu;
  s->connections[slot] = c;
  s->ResetSlot(static_cast<uint32_t>(slot), depths);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = static_cast<uint32_t>(slot);
  resp.key = c->qpn[0];
  return resp;
}

Connection* ConnectionTable::QueuePair(const Session& s, uint32_t slot) const {
  if (slot >= shm::kMaxConnections) return nullptr;
  Connection* c = s.connections[slot];
  return c != nullptr && c->is_queue_pair() ? c : nullptr;
}

ControlResponse ConnectionTable::SetQueuePairPeer(Connection* c,
                                                  const shm::QpPeer& p) {
  if (p.peer_qpn < 2 || p.peer_qpn > wire::Psn::kMask ||
      p.rq_psn > wire::Psn::kMask) {
    return Reply(shm::kStatusInvalid,
                 "the peer's QPN and PSN are 24 bits (QPN 2 or more)");
  }
  if (p.path_mtu != 256 && p.path_mtu != 512 && p.path_mtu != 1024 &&
      p.path_mtu != 2048 && p.path_mtu != 4096) {
    return Reply(shm::kStatusInvalid, "path MTU must be 256 .. 4096 bytes");
  }
  if (p.path_mtu > options_.path_mtu) {
    return Reply(shm::kStatusInvalid,
                 absl::StrCat("path MTU ", p.path_mtu, " is above the port's ",
                              options_.path_mtu));
  }
  if (p.min_rnr_timer > 31) {
    return Reply(shm::kStatusInvalid, "the RNR timer code is 0..31");
  }
  if (p.peer_ip == 0) {
    return Reply(shm::kStatusInvalid, "the peer's IPv4 address is 0");
  }
  c->peer.ip = p.peer_ip;
  c->qpn[1] = p.peer_qpn;
  c->psn[1] = p.rq_psn;
  c->peer.pmtu = p.path_mtu;
  const rc::QpConfig defaults;
  c->peer.reads_out = std::clamp<uint32_t>(p.max_rd_atomic, 1,
                                      defaults.max_rd_atomic);
  c->peer.reads_in = std::min<uint32_t>(p.max_dest_rd_atomic,
                                   defaults.max_dest_rd_atomic);
  c->queue_pair.min_rnr_timer = p.min_rnr_timer;
  if ((p.remote_access & shm::kQpRemoteAccessSet) != 0) {
    c->queue_pair.remote_access = p.remote_access;
  }
  return Reply(shm::kStatusOk);
}

ControlResponse ConnectionTable::StartRequester(Connection* c,
                                                const shm::QpPeer& p) {
  if (p.sq_psn > wire::Psn::kMask) {
    return Reply(shm::kStatusInvalid, "PSNs are 24 bits");
  }
  if (p.retry_count > 7 || p.rnr_retry > 7 || p.timeout > 31) {
    return Reply(shm::kStatusInvalid,
                 "retry counts are 0..7, the timeout code 0..31");
  }
  // ModifyResponder follows, and must not refuse once the requester runs.
  if (!RnrTimerValid(p)) {
    return Reply(shm::kStatusInvalid, "the RNR timer code is 0..31");
  }
  c->psn[0] = p.sq_psn;
  c->queue_pair.retry_count = p.retry_count;
  c->queue_pair.rnr_retry = p.rnr_retry;
  // Never more READs in flight than the peer serves, at least one.
  c->peer.reads_out = std::clamp<uint32_t>(p.max_rd_atomic, 1,
                                      rc::QpConfig{}.max_rd_atomic);
  // 4.096 us * 2^timeout, as the IBA defines the local ACK timeout; 0:
  // the daemon's own.
  c->queue_pair.retransmit_timeout_ns =
      p.timeout == 0 ? 0 : static_cast<uint64_t>(4096) << p.timeout;
  if (c->running) {
    rc::RequesterSettings s;
    s.send_psn = wire::Psn(p.sq_psn);
    s.retry_count = c->queue_pair.retry_count;
    s.rnr_retry = c->queue_pair.rnr_retry;
    s.max_rd_atomic = c->peer.reads_out;
    s.retransmit_timeout_ns = RetransmitTimeoutNs(*c);
    engines_[c->engine]->StartRequester(c->endpoint[0].get(), s);
  }
  return Reply(shm::kStatusOk);
}

ControlResponse ConnectionTable::ModifyResponder(Connection* c,
                                                 const shm::QpPeer& p) {
  const bool access = (p.remote_access & shm::kQpRemoteAccessSet) != 0;
  const bool timer = (p.min_rnr_timer & shm::kQpMinRnrTimerSet) != 0;
  const uint8_t code = p.min_rnr_timer & ~shm::kQpMinRnrTimerSet;
  if (!RnrTimerValid(p)) {
    return Reply(shm::kStatusInvalid, "the RNR timer code is 0..31");
  }
  if (!access && !timer) return Reply(shm::kStatusOk);
  if (access) c->queue_pair.remote_access = p.remote_access;
  if (timer) c->queue_pair.min_rnr_timer = code;
  if (c->running) {
    rc::ResponderSettings s;
    s.remote_access = RemoteAccessBits(c->queue_pair.remote_access);
    s.min_rnr_timer = c->queue_pair.min_rnr_timer;
    engines_[c->engine]->ModifyResponder(c->endpoint[0].get(), s);
  }
  return Reply(shm::kStatusOk);
}

void ConnectionTable::StopQueuePair(Connection* c) {
  // As a disconnect, but the slot and the connection stay.
  CloseConnection(c, 0, engine::CloseReason::kClosedByClient,
                  engine::CloseReason::kPeerClosed);
}

void ConnectionTable::ResetQueuePair(Connection* c) {
  if (c->running || c->queue_pair.life.state() != rc::lifecycle::QpState::kErr) {
    StopQueuePair(c);
  }
  // The engine let go of the endpoint (RemovePair returns once it has).
  c->endpoint[0].reset();
  // As CreateQueuePair made it: its domain, type, state and receive queue
  // stay; everything the application set since goes.
  const QueuePairSettings kept = c->queue_pair;
  c->queue_pair = QueuePairSettings{};
  c->queue_pair.pd_scope = kept.pd_scope;
  c->queue_pair.life = kept.life;
  c->queue_pair.srq_slot = kept.srq_slot;
  c->peer = RemotePeer{};
  c->peer.pmtu = options_.path_mtu;
  c->cm = CmExchange{};
  c->qpn[1] = 0;
  c->psn[0] = NextPsn();
  c->psn[1] = 0;
  c->side[0]->ResetSlot(c->slot[0], c->side[0]->slots[c->slot[0]].depths());
}

}  // namespace rdmaplane::control
