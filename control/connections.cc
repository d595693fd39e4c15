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
  if (c.queue_pair.retransmit_timeout_ns != 0) {
    return c.queue_pair.retransmit_timeout_ns;
  }
  return c.remote() ? options_.remote_retransmit_timeout_ns
                  : options_.retransmit_timeout_ns;
}

std::unique_ptr<engine::Endpoint> ConnectionTable::MakeEndpoint(
    Session* s, uint32_t slot, const Connection* c, int side) {
  engine::EndpointInfo info;
  info.connection_id = ScopeOf(c->id, side);
  info.registration_scope = c->is_queue_pair() ? c->queue_pair.pd_scope : info.connection_id;
  if (c->is_queue_pair()) {
    info.remote_access = RemoteAccessBits(c->queue_pair.remote_access);
  }
  info.session_id = s->id;
  info.header = s->header;
  info.slot = slot;
  info.wake = s->engine_wake.get();
  info.send = s->slots[slot].send;
  info.completion = s->slots[slot].completion;
  // Receives only for queue pairs set up out of band (verbs): engines never
  // look at the receive ring of any other connection.
  if (c->is_queue_pair()) {
    info.receive =
        s->slots[c->queue_pair.srq_slot != shm::kNoSrq ? c->queue_pair.srq_slot : slot].receive;
    info.shared_receive = c->queue_pair.srq_slot != shm::kNoSrq;
  }
  if (c->queue_pair.life.type() == rc::lifecycle::QpType::kUd) {
    info.address_handles = s->EnsureAddressHandles();
  }
  info.owner_pidfd = s->pidfd;
  rc::QpConfig qp;
  qp.type = c->queue_pair.life.type();
  qp.qkey = c->queue_pair.qkey;
  qp.local_qpn = wire::Qpn(c->qpn[side]);
  qp.remote_qpn = wire::Qpn(c->qpn[1 - side]);
  qp.send_psn = wire::Psn(c->psn[side]);
  qp.recv_psn = wire::Psn(c->psn[1 - side]);
  if (c->remote()) {
    qp.path.src_mac = port_mac_;
    qp.path.dst_mac = c->peer.mac;
    qp.path.src_ip = port_ip_;
    qp.path.dst_ip = c->peer.ip;
    qp.pmtu = c->peer.pmtu;
    // Never more READs in flight than the peer serves. A peer that serves
    // none still gets one: it refuses it, and the connection breaks
    // (RDP_ERR_CONN_ABORTED) instead of the READ waiting forever.
    qp.max_rd_atomic = std::max<uint32_t>(1, c->peer.reads_out);
  } else {
    qp.path.src_ip = 0x7F000001;  // in-process link: both ends are this host
    qp.path.dst_ip = 0x7F000001;
    qp.pmtu = options_.path_mtu;
  }
  qp.path.udp_src_port = wire::UdpSourcePortForQpn(qp.local_qpn);
  qp.max_inflight_packets = 256;
  qp.ack_req_every = 32;
  qp.retransmit_timeout_ns = RetransmitTimeoutNs(*c);
  qp.retry_count = c->queue_pair.retry_count;
  qp.rnr_retry = c->queue_pair.rnr_retry;
  // A receive queue only where receives can be posted (verbs queue pairs).
  // Receives the responder takes from the ring and holds at once; a
  // deeper ring keeps the rest in the client's memory until these are
  // used.
  qp.rq_depth = c->is_queue_pair() ? shm::kRecvRingEntries : 1;
  qp.min_rnr_timer = c->queue_pair.min_rnr_timer;
  // retry_count, READ depths: QpConfig's defaults, which the CM's REQ and
  // REP announce.
  info.qp = qp;
  const rc::Clock* clock = engines_[0]->clock();
  if (c->remote()) {
    return std::make_unique<engine::Endpoint>(info, &memory_->table(), clock,
                                              fault::FaultSpec{}, port_tx_);
  }
  return std::make_unique<engine::Endpoint>(info, &memory_->table(), clock,
                                            options_.link_faults);
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
  if (c->is_queue_pair()) {
    // The peer is reachable: RTR (the daemon's move; the front end checked
    // the application's attribute mask against the same table).
    using rc::lifecycle::QpState;
    c->queue_pair.life.Modify(QpState::kRtr,
                   rc::lifecycle::kQpAttrState |
                       rc::lifecycle::RequiredQpAttrs(
                           c->queue_pair.life.type(), QpState::kInit, QpState::kRtr));
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
  if (c->remote() && c->passive()) {  // a peer's request we never accepted
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
  if (c->remote() && link_ != nullptr) link_->Closed(c);
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
  if (c->queue_pair.srq_slot != shm::kNoSrq) --s->srq_users[c->queue_pair.srq_slot];
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
    const int sides = c->remote() ? 1 : 2;
    for (int side = 0; side < sides; ++side) {
      if (c->side[side] == nullptr) continue;
      ConnectionStatus cs;
      cs.id = c->id;
      cs.session_id = c->side[side]->id;
      cs.slot = c->slot[side];
      cs.service = c->service;
      cs.peer = c->remote() ? IpText(c->peer.ip) : "local";
      cs.engine = c->engine;
      cs.local_qpn = c->qpn[side];
      cs.remote_qpn = c->qpn[c->remote() ? 1 : 1 - side];
      if (c->running) {
        cs.state = "up";
      } else if (c->pending || c->cm.state == CmState::kResolving ||
                 c->cm.state == CmState::kReqSent) {
        cs.state = c->remote() && !c->passive() ? "connecting" : "pending";
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
