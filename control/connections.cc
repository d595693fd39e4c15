#include "control/connections.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/shm/doorbell.h"
#include "control/log.h"
#include "control/reply.h"

namespace rdmaplane::control {
namespace {

using shm::ControlRequest;
using shm::ControlResponse;

bool ValidService(const ControlRequest& r) {
  const void* nul = std::memchr(r.service, '\0', sizeof(r.service));
  return nul != nullptr && r.service[0] != '\0';
}

}  // namespace

ConnectionTable::ConnectionTable(const ConnectionOptions& options,
                                 std::vector<engine::Engine*> engines,
                                 MemoryService* memory, UserAccounts* accounts,
                                 uint64_t psn_seed)
    : options_(options),
      engines_(std::move(engines)),
      memory_(memory),
      accounts_(accounts),
      psn_seed_(psn_seed) {}

std::optional<UserAccounts::Charge> ConnectionTable::ChargeEnd(
    const Session& s, ControlResponse* refusal) {
  std::string why;
  if (AtCapacity()) {
    why = absl::StrCat("--max_connections reached: the daemon serves ",
                       options_.max_connections);
  } else if (absl::StatusOr<UserAccounts::Charge> c =
                 accounts_->Take(s.uid, Resource::kConnections);
             c.ok()) {
    return std::move(*c);
  } else {
    why = std::string(c.status().message());
  }
  RDP_LOG_EVERY(kWarning, 10, "connection of pid %d refused: %s",
                static_cast<int>(s.pid), why.c_str());
  *refusal = Reply(shm::kStatusLimit, why);
  return std::nullopt;
}

ConnectionTable::~ConnectionTable() = default;

void ConnectionTable::AttachPort(rc::FrameSink* tx, const wire::MacAddr& mac,
                                 uint32_t ip, PeerLink* link) {
  port_tx_ = tx;
  port_mac_ = mac;
  port_ip_ = ip;
  link_ = link;
}

uint32_t ConnectionTable::NextPsn() {
  psn_seed_ = psn_seed_ * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(psn_seed_ >> 40);
}

Connection* ConnectionTable::Create() {
  auto owned = std::make_unique<Connection>();
  Connection* c = owned.get();
  c->id = next_id_++;
  c->psn[0] = NextPsn();
  c->psn[1] = static_cast<uint32_t>(psn_seed_ >> 16) & 0xFFFFFF;
  // QPNs 0 and 1 are the IBA's special QPs.
  c->qpn[0] = std::max<uint32_t>((c->id * 2) & 0xFFFFFF, 2);
  c->qpn[1] = std::max<uint32_t>((c->id * 2 + 1) & 0xFFFFFF, 3);
  connections_[c->id] = std::move(owned);
  return c;
}

void ConnectionTable::Forget(Connection* c) {
  Unqueue(c);
  connections_.erase(c->id);
}

Connection* ConnectionTable::Find(uint32_t id) const {
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second.get();
}

uint32_t ConnectionTable::LeastLoadedEngine() const {
  uint32_t best = 0;
  for (uint32_t i = 1; i < engines_.size(); ++i) {
    if (engines_[i]->endpoint_count() < engines_[best]->endpoint_count()) {
      best = i;
    }
  }
  return best;
}

uint64_t ConnectionTable::RetransmitTimeoutNs(const Connection& c) const {
  if (c.retransmit_timeout_ns != 0) return c.retransmit_timeout_ns;
  return c.remote ? options_.remote_retransmit_timeout_ns
                  : options_.retransmit_timeout_ns;
}

std::unique_ptr<engine::Endpoint> ConnectionTable::MakeEndpoint(
    Session* s, uint32_t slot, const Connection* c, int side) {
  engine::EndpointInfo info;
  info.connection_id = ScopeOf(c->id, side);
  info.registration_scope = c->out_of_band ? c->pd_scope : info.connection_id;
  info.session_id = s->id;
  info.header = s->header;
  info.slot = slot;
  info.wake = s->engine_wake.get();
  info.send = s->slots[slot].send;
  info.completion = s->slots[slot].completion;
  // Receives only for queue pairs set up out of band (verbs): engines never
  // look at the receive ring of any other connection.
  if (c->out_of_band) {
    info.receive =
        s->slots[c->srq_slot != shm::kNoSrq ? c->srq_slot : slot].receive;
    info.shared_receive = c->srq_slot != shm::kNoSrq;
  }
  if (c->life.type() == rc::lifecycle::QpType::kUd) {
    info.address_handles = s->EnsureAddressHandles();
  }
  info.owner_pidfd = s->pidfd;
  rc::QpConfig qp;
  qp.type = c->life.type();
  qp.qkey = c->qkey;
  qp.local_qpn = wire::Qpn(c->qpn[side]);
  qp.remote_qpn = wire::Qpn(c->qpn[1 - side]);
  qp.send_psn = wire::Psn(c->psn[side]);
  qp.recv_psn = wire::Psn(c->psn[1 - side]);
  if (c->remote) {
    qp.path.src_mac = port_mac_;
    qp.path.dst_mac = c->peer_mac;
    qp.path.src_ip = port_ip_;
    qp.path.dst_ip = c->peer_ip;
    qp.pmtu = c->pmtu;
    // Never more READs in flight than the peer serves. A peer that serves
    // none still gets one: it refuses it, and the connection breaks
    // (RDP_ERR_CONN_ABORTED) instead of the READ waiting forever.
    qp.max_rd_atomic = std::max<uint32_t>(1, c->reads_out);
  } else {
    qp.path.src_ip = 0x7F000001;  // in-process link: both ends are this host
    qp.path.dst_ip = 0x7F000001;
    qp.pmtu = options_.path_mtu;
  }
  qp.path.udp_src_port = wire::UdpSourcePortForQpn(qp.local_qpn);
  qp.max_inflight_packets = 256;
  qp.ack_req_every = 32;
  qp.retransmit_timeout_ns = RetransmitTimeoutNs(*c);
  qp.retry_count = c->retry_count;
  qp.rnr_retry = c->rnr_retry;
  // A receive queue only where receives can be posted (verbs queue pairs).
  // Receives the responder takes from the ring and holds at once; a
  // deeper ring keeps the rest in the client's memory until these are
  // used.
  qp.rq_depth = c->out_of_band ? shm::kRecvRingEntries : 1;
  qp.min_rnr_timer = c->min_rnr_timer;
  // retry_count, READ depths: QpConfig's defaults, which the CM's REQ and
  // REP announce.
  info.qp = qp;
  const rc::Clock* clock = engines_[0]->clock();
  if (c->remote) {
    return std::make_unique<engine::Endpoint>(info, &memory_->table(), clock,
                                              fault::FaultSpec{}, port_tx_);
  }
  return std::make_unique<engine::Endpoint>(info, &memory_->table(), clock,
                                            options_.link_faults);
}

// --- Listeners
// ----------------------------------------------------------------

ControlResponse ConnectionTable::Listen(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  const std::string service(r.service);
  if (auto it = listeners_.find(service); it != listeners_.end()) {
    return it->second == s ? Reply(shm::kStatusOk)
                           : Reply(shm::kStatusInvalid,
                                   "another client listens on this service");
  }
  listeners_[service] = s;
  s->listening.insert(service);
  return Reply(shm::kStatusOk);
}

ControlResponse ConnectionTable::Unlisten(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  const std::string service(r.service);
  auto it = listeners_.find(service);
  if (it == listeners_.end() || it->second != s) {
    return Reply(shm::kStatusInvalid, "not listening on this service");
  }
  listeners_.erase(it);
  s->listening.erase(service);
  if (auto p = pending_.find(service); p != pending_.end()) {
    auto queue = std::move(p->second);
    pending_.erase(p);
    Refuse(std::move(queue));
  }
  return Reply(shm::kStatusOk);
}

Session* ConnectionTable::Listener(const std::string& service) const {
  auto it = listeners_.find(service);
  return it == listeners_.end() ? nullptr : it->second;
}

bool ConnectionTable::AcceptQueueFull(const std::string& service) const {
  auto it = pending_.find(service);
  return it != pending_.end() && it->second.size() >= options_.accept_backlog;
}

void ConnectionTable::QueueForAccept(const std::string& service,
                                     Connection* c) {
  pending_[service].push_back(c);
}

void ConnectionTable::Unqueue(Connection* c) {
  for (auto& [service, queue] : pending_) {
    std::erase(queue, c);
  }
}

void ConnectionTable::Refuse(std::deque<Connection*> queue) {
  for (Connection* c : queue) RefusePending(c);
}

// --- Connections inside the daemon
// ----------------------------------------------

ControlResponse ConnectionTable::Connect(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  Session* listener = Listener(r.service);
  if (listener == nullptr) {
    return Reply(shm::kStatusRefused, "no listener for this service");
  }
  // The listener's slots are taken only when it accepts, and the queue of
  // connections waiting for that is bounded.
  if (AcceptQueueFull(r.service)) {
    return Reply(shm::kStatusRefused, "the listener's accept queue is full");
  }
  const int cslot = s->FreeSlot();
  if (cslot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge = ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = Create();
  c->charge[0] = std::move(*charge);
  c->side[0] = s;
  c->slot[0] = cslot;
  c->side[1] = listener;
  c->slot[1] = shm::kMaxConnections;  // none until accepted
  c->service = r.service;
  s->ResetSlot(cslot);
  c->endpoint[0] = MakeEndpoint(s, cslot, c, 0);
  c->open[0] = true;
  c->pending = true;
  s->connections[cslot] = c;
  QueueForAccept(r.service, c);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = cslot;
  return resp;
}

ControlResponse ConnectionTable::Accept(Session* s, const ControlRequest& r) {
  if (!ValidService(r)) return Reply(shm::kStatusInvalid, "bad service name");
  if (Listener(r.service) != s) {
    return Reply(shm::kStatusInvalid, "not listening on this service");
  }
  auto& queue = pending_[r.service];
  if (queue.empty()) return Reply(shm::kStatusAgain, "no connection yet");
  const int sslot = s->FreeSlot();
  if (sslot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge = ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = queue.front();
  queue.pop_front();
  // The side the listener takes: 0 towards another daemon, else 1.
  c->charge[c->remote ? 0 : 1] = std::move(*charge);
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.connection = sslot;
  s->ResetSlot(sslot);
  if (c->remote) {
    c->side[0] = s;
    c->slot[0] = sslot;
    c->open[0] = true;
    s->connections[sslot] = c;
    StartRemote(c);
    link_->Accepted(c);
    return resp;
  }
  c->slot[1] = sslot;
  c->endpoint[1] = MakeEndpoint(s, sslot, c, 1);
  c->open[1] = true;
  c->pending = false;
  s->connections[sslot] = c;
  c->engine = LeastLoadedEngine();
  engines_[c->engine]->AddPair(c->endpoint[0].get(), c->endpoint[1].get());
  c->running = true;
  ++running_;
  return resp;
}

// --- Queue pairs connected out of band
// ---------------------------------------------

ControlResponse ConnectionTable::CreateSharedReceiveQueue(
    Session* s, const shm::SlotDepths& depths) {
  const int slot = s->FreeSlot();
  if (slot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
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
  const int slot = s->FreeSlot();
  if (slot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge = ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = Create();
  c->charge[0] = std::move(*charge);
  c->remote = true;
  c->out_of_band = true;
  c->life = rc::lifecycle::QpLifecycle(type);
  c->pd_scope = pd_scope;
  c->srq_slot = srq_slot;
  if (srq_slot != shm::kNoSrq) ++s->srq_users[srq_slot];
  c->side[0] = s;
  c->slot[0] = static_cast<uint32_t>(slot);
  c->slot[1] = shm::kMaxConnections;
  c->open[0] = true;
  c->pmtu = options_.path_mtu;
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
  return c != nullptr && c->out_of_band ? c : nullptr;
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
  c->peer_ip = p.peer_ip;
  c->qpn[1] = p.peer_qpn;
  c->psn[1] = p.rq_psn;
  c->pmtu = p.path_mtu;
  const rc::QpConfig defaults;
  c->reads_out = std::clamp<uint32_t>(p.max_rd_atomic, 1,
                                      defaults.max_rd_atomic);
  c->reads_in = std::min<uint32_t>(p.max_dest_rd_atomic,
                                   defaults.max_dest_rd_atomic);
  c->min_rnr_timer = p.min_rnr_timer;
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
  c->psn[0] = p.sq_psn;
  c->retry_count = p.retry_count;
  c->rnr_retry = p.rnr_retry;
  // Never more READs in flight than the peer serves, at least one.
  c->reads_out = std::clamp<uint32_t>(p.max_rd_atomic, 1,
                                      rc::QpConfig{}.max_rd_atomic);
  // 4.096 us * 2^timeout, as the IBA defines the local ACK timeout; 0:
  // the daemon's own.
  c->retransmit_timeout_ns =
      p.timeout == 0 ? 0 : static_cast<uint64_t>(4096) << p.timeout;
  if (c->running) {
    rc::RequesterSettings s;
    s.send_psn = wire::Psn(p.sq_psn);
    s.retry_count = c->retry_count;
    s.rnr_retry = c->rnr_retry;
    s.max_rd_atomic = c->reads_out;
    s.retransmit_timeout_ns = RetransmitTimeoutNs(*c);
    engines_[c->engine]->StartRequester(c->endpoint[0].get(), s);
  }
  return Reply(shm::kStatusOk);
}

void ConnectionTable::StopQueuePair(Connection* c) {
  // As a disconnect, but the slot and the connection stay.
  CloseConnection(c, 0, engine::CloseReason::kClosedByClient,
                  engine::CloseReason::kPeerClosed);
}

void ConnectionTable::ResetQueuePair(Connection* c) {
  if (c->running || c->life.state() != rc::lifecycle::QpState::kErr) {
    StopQueuePair(c);
  }
  // The engine let go of the endpoint (RemovePair returns once it has).
  c->endpoint[0].reset();
  const Connection fresh;
  c->peer_ip = 0;
  c->peer_mac = fresh.peer_mac;
  c->qpn[1] = 0;
  c->psn[0] = NextPsn();
  c->psn[1] = 0;
  c->pmtu = options_.path_mtu;
  c->retry_count = fresh.retry_count;
  c->retransmit_timeout_ns = fresh.retransmit_timeout_ns;
  c->rnr_retry = fresh.rnr_retry;
  c->min_rnr_timer = fresh.min_rnr_timer;
  c->qkey = fresh.qkey;
  c->reads_out = fresh.reads_out;
  c->reads_in = fresh.reads_in;
  c->cm = CmState::kNone;
  c->cm_deadline_ns = 0;
  c->cm_tries = 0;
  c->waiting = nullptr;
  c->side[0]->ResetSlot(c->slot[0], c->side[0]->slots[c->slot[0]].depths());
}

// --- Connections to other daemons
// ------------------------------------------------

void ConnectionTable::StartRemote(Connection* c) {
  Session* s = c->side[0];
  c->endpoint[0] = MakeEndpoint(s, c->slot[0], c, 0);
  c->pending = false;
  c->engine = 0;  // the port's
  engines_[0]->AddRemote(c->endpoint[0].get());
  c->running = true;
  ++running_;
  if (c->out_of_band) {
    // The peer is reachable: RTR (the daemon's move; the front end checked
    // the application's attribute mask against the same table).
    using rc::lifecycle::QpState;
    c->life.Modify(QpState::kRtr,
                   rc::lifecycle::kQpAttrState |
                       rc::lifecycle::RequiredQpAttrs(
                           c->life.type(), QpState::kInit, QpState::kRtr));
  }
}

void ConnectionTable::PeerClosed(Connection* c, engine::CloseReason reason) {
  if (!c->running) return;
  engines_[c->engine]->RemovePair(c->endpoint[0].get(), reason, reason);
  c->running = false;
  --running_;
  memory_->DropScope(ScopeOf(c->id, 0));
}

void ConnectionTable::RefusePending(Connection* c) {
  if (c->remote && c->passive) {  // a peer's request we never accepted
    if (link_ != nullptr) link_->Refused(c);
    Forget(c);
    return;
  }
  if (c->open[0]) Finish(c, 0, engine::CloseReason::kPeerClosed);
  c->pending = false;
  c->side[1] = nullptr;
  memory_->DropScope(ScopeOf(c->id, 0));
}

// --- Closing
// ---------------------------------------------------------------------

void ConnectionTable::Finish(Connection* c, int side,
                             engine::CloseReason reason) {
  if (engine::Endpoint* e = c->endpoint[side].get()) {
    e->Close(reason);
    return;
  }
  // A connection to another daemon not answered yet has no endpoint.
  Session* s = c->side[side];
  if (s == nullptr || c->slot[side] >= shm::kMaxConnections) return;
  const engine::CloseOutcome outcome = engine::OutcomeOf(reason);
  shm::PublishFinal(s->header, c->slot[side], outcome.state, outcome.status,
                    /*retired=*/0);
  shm::RingDoorbell(&s->header->completion_bell[c->slot[side]]);
}

void ConnectionTable::CloseConnection(Connection* c, int side,
                                      engine::CloseReason reason,
                                      engine::CloseReason peer_reason) {
  if (c->running) {
    engines_[c->engine]->RemovePair(c->endpoint[side].get(), reason,
                                    peer_reason);
    c->running = false;
    --running_;
    // Memory registered for the connection is unreachable from now on.
    memory_->DropScope(ScopeOf(c->id, 0));
    memory_->DropScope(ScopeOf(c->id, 1));
  } else {
    Finish(c, side, reason);
    if (c->pending && side == 0) {
      c->pending = false;
      memory_->DropScope(ScopeOf(c->id, 0));
    }
  }
  if (c->remote && link_ != nullptr) link_->Closed(c);
}

void ConnectionTable::MaybeDelete(Connection* c) {
  if (c->open[0] || c->open[1]) return;
  Forget(c);
}

ControlResponse ConnectionTable::Disconnect(Session* s,
                                            const ControlRequest& r) {
  if (r.connection >= shm::kMaxConnections ||
      s->connections[r.connection] == nullptr) {
    return Reply(shm::kStatusNotConnected, "no such connection");
  }
  Connection* c = s->connections[r.connection];
  const int side = c->SideOf(s, r.connection);
  CloseConnection(c, side, engine::CloseReason::kClosedByClient,
                  engine::CloseReason::kPeerClosed);
  if (c->srq_slot != shm::kNoSrq) --s->srq_users[c->srq_slot];
  c->open[side] = false;
  c->side[side] = nullptr;  // the session may go; nothing may reach it
  c->charge[side].Release();
  s->connections[r.connection] = nullptr;
  MaybeDelete(c);
  return Reply(shm::kStatusOk);
}

void ConnectionTable::CloseSession(Session* s, bool daemon_stopping) {
  // Connections first: the engine completes their work and drops its pins.
  for (uint32_t slot = 0; slot < shm::kMaxConnections; ++slot) {
    Connection* c = s->connections[slot];
    if (c == nullptr) continue;
    const int side = c->SideOf(s, slot);
    CloseConnection(c, side,
                    daemon_stopping ? engine::CloseReason::kDaemonStopping
                                    : engine::CloseReason::kClosedByClient,
                    daemon_stopping ? engine::CloseReason::kDaemonStopping
                                    : engine::CloseReason::kPeerClosed);
    c->open[side] = false;
    c->side[side] = nullptr;  // the session is going
    c->charge[side].Release();
    s->connections[slot] = nullptr;
    MaybeDelete(c);
  }
  // Connections waiting in our accept queues are refused to their other end.
  for (const std::string& service : s->listening) {
    listeners_.erase(service);
    auto it = pending_.find(service);
    if (it == pending_.end()) continue;
    auto queue = std::move(it->second);
    pending_.erase(it);
    Refuse(std::move(queue));
  }
  s->listening.clear();
}

std::optional<uint32_t> ConnectionTable::RegistrationScope(
    const Session& s, uint32_t slot) const {
  if (slot >= shm::kMaxConnections) return std::nullopt;
  const Connection* c = s.connections[slot];
  if (c == nullptr || !(c->running || c->pending)) return std::nullopt;
  return ScopeOf(c->id, c->SideOf(&s, slot));
}

std::optional<uint32_t> ConnectionTable::DeregistrationScope(
    const Session& s, uint32_t slot) const {
  if (slot >= shm::kMaxConnections) return std::nullopt;
  const Connection* c = s.connections[slot];
  if (c == nullptr) return std::nullopt;
  return ScopeOf(c->id, c->SideOf(&s, slot));
}

void ConnectionTable::AppendStatus(DaemonStatus* st) const {
  for (const auto& [id, c] : connections_) {
    const int sides = c->remote ? 1 : 2;
    for (int side = 0; side < sides; ++side) {
      if (c->side[side] == nullptr) continue;
      ConnectionStatus cs;
      cs.id = c->id;
      cs.session_id = c->side[side]->id;
      cs.slot = c->slot[side];
      cs.service = c->service;
      cs.peer = c->remote ? IpText(c->peer_ip) : "local";
      cs.engine = c->engine;
      cs.local_qpn = c->qpn[side];
      cs.remote_qpn = c->qpn[c->remote ? 1 : 1 - side];
      if (c->running) {
        cs.state = "up";
      } else if (c->pending || c->cm == CmState::kResolving ||
                 c->cm == CmState::kReqSent) {
        cs.state = c->remote && !c->passive ? "connecting" : "pending";
      } else {
        cs.state = "closing";
      }
      if (const engine::Endpoint* e = c->endpoint[side].get()) {
        cs.posted = e->stats().posted;
        cs.completed = e->stats().completed;
        const rc::QpStats& q = e->qp_stats();
        cs.tx_packets = q.tx_packets;
        cs.rx_packets = q.rx_packets;
        cs.retransmitted_packets = q.retransmitted_packets;
        cs.timeouts = q.timeouts;
        cs.naks_sent = q.naks_sent;
        cs.naks_received = q.naks_received;
        cs.access_errors = q.access_errors;
        cs.invalid_requests = q.invalid_requests;
        cs.pkey_violations = q.pkey_violations;
        cs.bad_responses = q.bad_responses;
      }
      st->connections.push_back(std::move(cs));
    }
  }
}

}  // namespace rdmaplane::control
