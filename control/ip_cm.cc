#include "control/ip_cm.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/log.h"
#include "control/reply.h"

namespace rdmaplane::control {
namespace {

using shm::CmParams;
using shm::ControlRequest;
using shm::ControlResponse;

bool KnownPortSpace(uint16_t ps) {
  return ps == wire::kPortSpaceTcp || ps == wire::kPortSpaceUdp ||
         ps == wire::kPortSpaceIb;
}

std::span<const uint8_t> PrivateDataOf(const CmParams& p) {
  return {p.private_data,
          std::min<size_t>(p.private_data_len, sizeof(p.private_data))};
}

// What the consumer sent, after the IP CM header where the message has one.
void CopyPrivateData(const wire::CmMessage& m, size_t skip, CmParams* p) {
  const size_t cap = wire::CmPrivateDataCapacity(m.type);
  const size_t n = cap > skip ? cap - skip : 0;
  std::memcpy(p->private_data, m.private_data.data() + skip, n);
  p->private_data_len = static_cast<uint8_t>(n);
}

void SetPrivateData(std::span<const uint8_t> data, wire::CmMessage* m) {
  if (!data.empty()) {
    std::memcpy(m->private_data.data(), data.data(), data.size());
  }
  m->private_data_len = static_cast<uint8_t>(data.size());
}

}  // namespace

IpCm::IpCm(const Options& options, Link* link, std::function<uint64_t()> now_ns)
    : options_(options),
      link_(link),
      now_ns_(std::move(now_ns)),
      next_comm_id_(options.comm_id_seed) {}

bool IpCm::Owns(const wire::CmMessage& m) {
  switch (m.type) {
    case wire::CmType::kReq:  // the native connections' service is theirs
      return wire::IsIpCmServiceId(m.service_id) &&
             m.service_id != wire::kNativeServiceId;
    case wire::CmType::kSidrReq:
      return true;
    case wire::CmType::kSidrRep:
      return (m.local_comm_id & kCommIdBit) != 0;
    default:
      return (m.remote_comm_id & kCommIdBit) != 0;
  }
}

uint32_t IpCm::NextId() {
  const uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;  // 0 is no id
  return id;
}

uint32_t IpCm::NextCommId() {
  const uint32_t id = kCommIdBit | (next_comm_id_ & ~kCommIdBit);
  ++next_comm_id_;
  return id;
}

IpCm::Id* IpCm::Find(Session* s, uint32_t id) {
  auto it = ids_.find(id);
  if (it == ids_.end() || it->second.owner != s) return nullptr;
  return &it->second;
}

IpCm::Id* IpCm::FindByCommId(uint32_t comm_id) {
  auto it = by_comm_id_.find(comm_id);
  if (it == by_comm_id_.end()) return nullptr;
  auto id = ids_.find(it->second);
  return id == ids_.end() ? nullptr : &id->second;
}

uint32_t IpCm::IdsOf(const Session* s) const {
  uint32_t n = 0;
  for (const auto& [key, id] : ids_) n += id.owner == s ? 1 : 0;
  return n;
}

size_t IpCm::farewells() const {
  size_t n = 0;
  for (const auto& [key, id] : ids_) n += id.owner == nullptr ? 1 : 0;
  return n;
}

size_t IpCm::listeners() const {
  size_t n = 0;
  for (const auto& [key, id] : ids_) n += id.state == State::kListening;
  return n;
}

std::optional<uint16_t> IpCm::FreePort(uint16_t port_space) {
  constexpr uint32_t kRange = kLastEphemeralPort - kFirstEphemeralPort + 1;
  for (uint32_t i = 0; i < kRange; ++i) {
    const uint16_t port = next_port_;
    next_port_ = next_port_ == kLastEphemeralPort
                     ? kFirstEphemeralPort
                     : static_cast<uint16_t>(next_port_ + 1);
    if (!ports_.contains({port_space, port})) return port;
  }
  return std::nullopt;
}

// --- Requests of the session -------------------------------------------------

ControlResponse IpCm::Handle(Session* s, const ControlRequest& r) {
  const CmParams& p = r.cm;
  if (p.private_data_len > sizeof(p.private_data)) {
    return Reply(shm::kStatusInvalid, "private data too long");
  }
  // A client that leaves its events on the ring gets no more of them
  // (what peers cause is bounded by its ids).
  if ((r.op == shm::kOpCmResolve || r.op == shm::kOpCmConnect) &&
      s->held_cm_events() >= options_.max_held_events) {
    return Reply(shm::kStatusAgain, "rdma_cm events are waiting to be taken");
  }
  ControlResponse resp;
  if (r.op == shm::kOpCmBind) {
    resp = Bind(s, p);
  } else {
    Id* id = Find(s, p.id);
    if (id == nullptr) return Reply(shm::kStatusInvalid, "no such rdma_cm id");
    switch (r.op) {
      case shm::kOpCmListen:
        resp = Listen(id, p);
        break;
      case shm::kOpCmResolve:
        resp = Resolve(id, p);
        break;
      case shm::kOpCmConnect:
        resp = Connect(id, p);
        break;
      case shm::kOpCmAccept:
        resp = Accept(id, p);
        break;
      case shm::kOpCmReject:
        resp = Reject(id, p);
        break;
      case shm::kOpCmDisconnect:
        resp = Disconnect(id);
        break;
      case shm::kOpCmNotify:
        if (id->state == State::kRepSent) {
          // The queue pair heard from the peer: the RTU was lost.
          id->state = State::kEstablished;
          id->deadline_ns = 0;
          Emit(*id, shm::kCmEstablished);
        }
        resp = Reply(shm::kStatusOk);
        break;
      case shm::kOpCmDestroy:
        Destroy(id);
        resp = Reply(shm::kStatusOk);
        break;
      default:
        return Reply(shm::kStatusInvalid, "unknown control operation");
    }
  }
  DrainLoopback();
  return resp;
}

ControlResponse IpCm::Bind(Session* s, const CmParams& p) {
  if (!KnownPortSpace(p.port_space)) {
    return Reply(shm::kStatusInvalid, "unknown port space");
  }
  if (p.local_ip != 0 && p.local_ip != options_.ip) {
    return Reply(shm::kStatusInvalid, "not this daemon's address");
  }
  if (IdsOf(s) >= options_.max_ids_per_session) {
    return Reply(shm::kStatusLimit, "too many rdma_cm ids in this session");
  }
  uint16_t port = p.local_port;
  if (port == 0) {
    std::optional<uint16_t> free = FreePort(p.port_space);
    if (!free) return Reply(shm::kStatusLimit, "no free port");
    port = *free;
  } else if (ports_.contains({p.port_space, port})) {
    return Reply(shm::kStatusRefused, "port in use");
  } else if (wire::IpCmServiceId(p.port_space, port) ==
             wire::kNativeServiceId) {
    return Reply(shm::kStatusRefused,
                 "port 4791 of RDMA_PS_TCP is rdmaplane's native service");
  }
  Id id;
  id.id = NextId();
  id.owner = s;
  id.port_space = p.port_space;
  id.local_port = port;
  id.bound = true;
  ports_[{p.port_space, port}] = id.id;
  ControlResponse resp = Reply(shm::kStatusOk);
  resp.key = id.id;
  resp.connection = port;
  ids_[id.id] = id;
  return resp;
}

ControlResponse IpCm::Listen(Id* id, const CmParams& p) {
  if (id->state != State::kBound || !id->bound) {
    return Reply(shm::kStatusInvalid, "only a bound id may listen");
  }
  id->state = State::kListening;
  id->backlog = p.backlog == 0 ? kDefaultBacklog
                               : std::min<uint32_t>(p.backlog, kMaxBacklog);
  return Reply(shm::kStatusOk);
}

ControlResponse IpCm::Resolve(Id* id, const CmParams& p) {
  if (id->state != State::kBound && id->state != State::kResolved &&
      id->state != State::kAddrError) {
    return Reply(shm::kStatusInvalid, "the id is in use");
  }
  id->remote_ip = p.remote_ip;
  if (p.remote_ip == options_.ip) {
    id->state = State::kResolved;
    Emit(*id, shm::kCmAddrResolved);
    return Reply(shm::kStatusOk);
  }
  if (link_ == nullptr) {
    id->state = State::kAddrError;
    Emit(*id, shm::kCmAddrError, -ENETUNREACH);
    return Reply(shm::kStatusOk);
  }
  if (std::optional<wire::MacAddr> mac = link_->Neighbor(p.remote_ip)) {
    id->remote_mac = *mac;
    id->state = State::kResolved;
    Emit(*id, shm::kCmAddrResolved);
    return Reply(shm::kStatusOk);
  }
  id->state = State::kResolving;
  // The caller's time, in ARP intervals (at least one try).
  const uint64_t timeout_ns =
      std::max<uint64_t>(uint64_t{p.timeout_ms} * 1'000'000, 1);
  id->tries = static_cast<uint32_t>(std::max<uint64_t>(
      1, (timeout_ns + kArpIntervalNs - 1) / kArpIntervalNs));
  id->deadline_ns = NowNs() + std::min(timeout_ns, kArpIntervalNs);
  link_->AskNeighbor(p.remote_ip);
  return Reply(shm::kStatusOk);
}

void IpCm::OnNeighbor(uint32_t ip) {
  if (link_ == nullptr) return;
  const std::optional<wire::MacAddr> mac = link_->Neighbor(ip);
  if (!mac) return;
  std::vector<uint32_t> done;
  for (auto& [key, id] : ids_) {
    if (id.state == State::kResolving && id.remote_ip == ip) {
      id.remote_mac = *mac;
      id.state = State::kResolved;
      id.deadline_ns = 0;
      done.push_back(key);
    }
  }
  for (uint32_t key : done) Emit(ids_[key], shm::kCmAddrResolved);
}

ControlResponse IpCm::Connect(Id* id, const CmParams& p) {
  if (id->state != State::kResolved) {
    return Reply(shm::kStatusInvalid, "resolve the address first");
  }
  if (p.remote_ip != id->remote_ip) {
    return Reply(shm::kStatusInvalid, "not the address resolved");
  }
  const size_t room =
      wire::CmPrivateDataCapacity(id->ud() ? wire::CmType::kSidrReq
                                           : wire::CmType::kReq) -
      wire::kIpCmHeaderLen;
  if (p.private_data_len > room) {
    return Reply(shm::kStatusInvalid, "private data too long");
  }
  // Any queue pair number goes, as with Linux's CM: a consumer without a
  // queue pair of the id's (rdma_connect's conn_param->qp_num) may name
  // none, or one it keeps itself.
  if (p.qpn > 0xFFFFFF) return Reply(shm::kStatusInvalid, "bad queue pair");
  id->remote_port = p.remote_port;
  id->comm_id = NextCommId();
  by_comm_id_[id->comm_id] = id->id;
  id->tid = wire::CmTransactionId(wire::CmTransaction::kConnect, id->comm_id);
  id->path_mtu = wire::IbMtuCode(options_.path_mtu);
  wire::CmMessage m{};
  m.type = id->ud() ? wire::CmType::kSidrReq : wire::CmType::kReq;
  m.transaction_id = id->tid;
  m.local_comm_id = id->comm_id;
  m.service_id = wire::IpCmServiceId(id->port_space, p.remote_port);
  m.local_ip = options_.ip;
  m.remote_ip = p.remote_ip;
  if (!id->ud()) {
    m.qpn = wire::Qpn(p.qpn);
    m.start_psn = wire::Psn(p.psn & wire::Psn::kMask);
    m.path_mtu = id->path_mtu;
    m.responder_resources = p.responder_resources;
    m.initiator_depth = p.initiator_depth;
    m.flow_control = p.flow_control != 0;
    m.srq = p.srq != 0;
    m.retry_count = std::min<uint8_t>(p.retry_count, 7);
    m.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
    m.remote_cm_response_timeout = wire::IbTimeoutCode(kReqIntervalNs);
    m.local_cm_response_timeout = wire::IbTimeoutCode(kRepIntervalNs);
    m.max_cm_retries = static_cast<uint8_t>(kReqTries - 1);
  }
  const wire::IpCmHeader h{
      .src_port = id->local_port, .src_ip = options_.ip, .dst_ip = p.remote_ip};
  wire::SetIpCmPrivateData(h, PrivateDataOf(p), &m);
  id->state = State::kReqSent;
  id->tries = 0;
  Send(id, m, kReqIntervalNs);
  return Reply(shm::kStatusOk);
}

ControlResponse IpCm::Accept(Id* id, const CmParams& p) {
  if (id->state == State::kRepReceived) {  // active: RTU
    id->state = State::kEstablished;
    SendTo(Simple(*id, wire::CmType::kRtu), id->remote_ip, id->remote_mac);
    return Reply(shm::kStatusOk);
  }
  if (id->state != State::kReqReceived) {
    return Reply(shm::kStatusInvalid, "no connection request to accept");
  }
  wire::CmMessage m{};
  if (id->ud()) {
    if (p.private_data_len >
        wire::CmPrivateDataCapacity(wire::CmType::kSidrRep)) {
      return Reply(shm::kStatusInvalid, "private data too long");
    }
    m.type = wire::CmType::kSidrRep;
    m.transaction_id = id->tid;
    m.local_comm_id = id->peer_comm_id;  // the request id
    m.sidr_status = wire::kSidrValid;
    m.qpn = wire::Qpn(p.qpn & wire::Psn::kMask);
    m.qkey = p.qkey;
    m.service_id = wire::IpCmServiceId(id->port_space, id->local_port);
    SetPrivateData(PrivateDataOf(p), &m);
    id->last = m;  // a repeated SIDR REQ gets it again
    id->state = State::kEstablished;
    SendTo(m, id->remote_ip, id->remote_mac);
    return Reply(shm::kStatusOk);
  }
  if (p.private_data_len > wire::CmPrivateDataCapacity(wire::CmType::kRep)) {
    return Reply(shm::kStatusInvalid, "private data too long");
  }
  if (p.qpn > 0xFFFFFF) return Reply(shm::kStatusInvalid, "bad queue pair");
  m.type = wire::CmType::kRep;
  m.transaction_id = id->tid;
  m.local_comm_id = id->comm_id;
  m.remote_comm_id = id->peer_comm_id;
  m.qpn = wire::Qpn(p.qpn);
  m.start_psn = wire::Psn(p.psn & wire::Psn::kMask);
  m.responder_resources = p.responder_resources;
  m.initiator_depth = p.initiator_depth;
  m.flow_control = p.flow_control != 0;
  m.srq = p.srq != 0;
  m.rnr_retry_count = std::min<uint8_t>(p.rnr_retry_count, 7);
  m.local_ip = options_.ip;
  m.remote_ip = id->remote_ip;
  SetPrivateData(PrivateDataOf(p), &m);
  id->state = State::kRepSent;
  id->tries = 0;
  Send(id, m, kRepIntervalNs);
  return Reply(shm::kStatusOk);
}

ControlResponse IpCm::Reject(Id* id, const CmParams& p) {
  if (id->state == State::kReqReceived && id->ud()) {
    if (p.private_data_len >
        wire::CmPrivateDataCapacity(wire::CmType::kSidrRep)) {
      return Reply(shm::kStatusInvalid, "private data too long");
    }
    wire::CmMessage m{};
    m.type = wire::CmType::kSidrRep;
    m.transaction_id = id->tid;
    m.local_comm_id = id->peer_comm_id;
    m.sidr_status = wire::kSidrRejected;
    m.service_id = wire::IpCmServiceId(id->port_space, id->local_port);
    SetPrivateData(PrivateDataOf(p), &m);
    id->last = m;
    id->state = State::kClosed;
    SendTo(m, id->remote_ip, id->remote_mac);
    return Reply(shm::kStatusOk);
  }
  if (id->state != State::kReqReceived && id->state != State::kRepReceived) {
    return Reply(shm::kStatusInvalid, "no connection request to reject");
  }
  if (p.private_data_len > wire::CmPrivateDataCapacity(wire::CmType::kRej)) {
    return Reply(shm::kStatusInvalid, "private data too long");
  }
  SendReject(id->peer_comm_id, id->comm_id, id->tid,
             p.reason != 0 ? p.reason : wire::kRejConsumer,
             id->state == State::kRepReceived ? wire::CmRefersTo::kRep
                                              : wire::CmRefersTo::kReq,
             PrivateDataOf(p), id->remote_ip, id->remote_mac);
  id->state = State::kClosed;
  id->deadline_ns = 0;
  return Reply(shm::kStatusOk);
}

ControlResponse IpCm::Disconnect(Id* id) {
  switch (id->state) {
    case State::kEstablished:
    case State::kRepSent:
    case State::kRepReceived:
      if (id->ud()) {  // nothing to end on the wire
        Disconnected(id);
        return Reply(shm::kStatusOk);
      }
      {
        wire::CmMessage m = Simple(*id, wire::CmType::kDreq);
        // Its own transaction, however often it is repeated.
        m.transaction_id = wire::CmTransactionId(
            wire::CmTransaction::kDisconnect, id->comm_id);
        m.qpn = wire::Qpn(id->peer_qpn);
        id->state = State::kDreqSent;
        id->tries = 0;
        Send(id, m, kDreqIntervalNs);
      }
      return Reply(shm::kStatusOk);
    case State::kBound:
    case State::kListening:
    case State::kResolving:
    case State::kResolved:
    case State::kAddrError:
      return Reply(shm::kStatusInvalid, "not connected");
    default:
      // As Linux: once a connection was asked for, a disconnect succeeds
      // whatever became of it (ended by the peer, refused, not yet
      // answered).
      return Reply(shm::kStatusOk);
  }
}

void IpCm::Destroy(Id* id) {
  switch (id->state) {
    case State::kReqReceived:
    case State::kRepReceived:
      if (id->ud()) {
        CmParams none{};
        Reject(id, none);
      } else {
        SendReject(id->peer_comm_id, id->comm_id, id->tid, wire::kRejConsumer,
                   id->state == State::kRepReceived ? wire::CmRefersTo::kRep
                                                    : wire::CmRefersTo::kReq,
                   {}, id->remote_ip, id->remote_mac);
      }
      break;
    case State::kReqSent:
    case State::kMraReceived:
      if (!id->ud()) {
        // Like a timed-out REQ (IBA 12.9.6): the passive side lets go (it
        // finds its end by the id its MRA gave).
        SendReject(id->peer_comm_id, id->comm_id, id->tid, wire::kRejTimeout,
                   wire::CmRefersTo::kReq, {}, id->remote_ip, id->remote_mac);
      }
      break;
    case State::kEstablished:
    case State::kRepSent:
      if (!id->ud()) {
        id->owner = nullptr;
        Disconnect(id);  // the id stays for its DREQ's answer
        return;
      }
      break;
    case State::kDreqSent:
      id->owner = nullptr;
      return;
    default:
      break;
  }
  Forget(id);
}

void IpCm::DropSession(Session* s) {
  std::vector<uint32_t> owned;
  for (const auto& [key, id] : ids_) {
    if (id.owner == s) owned.push_back(key);
  }
  for (uint32_t key : owned) {
    auto it = ids_.find(key);
    if (it != ids_.end()) Destroy(&it->second);
  }
  DrainLoopback();
}

void IpCm::Forget(Id* id) {
  if (id->bound) ports_.erase({id->port_space, id->local_port});
  if (id->comm_id != 0) by_comm_id_.erase(id->comm_id);
  ids_.erase(id->id);
}

// --- Messages from peers -------------------------------------------------

void IpCm::OnMessage(const wire::CmMessage& m, uint32_t from_ip,
                     const wire::MacAddr& from_mac) {
  RDP_LOG(kDebug, "IP CM %s from %s, comm id %u -> %u",
          wire::CmTypeName(m.type), IpText(from_ip).c_str(), m.local_comm_id,
          m.remote_comm_id);
  switch (m.type) {
    case wire::CmType::kReq:
      OnRequest(m, from_ip, from_mac);
      break;
    case wire::CmType::kSidrReq:
      OnSidrRequest(m, from_ip, from_mac);
      break;
    case wire::CmType::kDreq:
      OnDisconnectRequest(m, from_ip, from_mac);
      break;
    case wire::CmType::kSidrRep: {
      Id* id = FindByCommId(m.local_comm_id);
      if (id != nullptr && id->remote_ip == from_ip) OnSidrReply(id, m);
      break;
    }
    default: {
      Id* id = FindByCommId(m.remote_comm_id);
      if (id == nullptr || id->remote_ip != from_ip) break;  // stale
      switch (m.type) {
        case wire::CmType::kMra:
          if (id->state == State::kReqSent ||
              id->state == State::kMraReceived) {
            id->peer_comm_id = m.local_comm_id;
            id->state = State::kMraReceived;
            // Keep-alive: the REQ is repeated, each answered by an MRA.
            id->tries = 0;
            id->deadline_ns = NowNs() + kKeepAliveNs;
          }
          break;
        case wire::CmType::kRep:
          OnReply(id, m);
          break;
        case wire::CmType::kRtu:
          if (id->state == State::kRepSent) {
            id->state = State::kEstablished;
            id->deadline_ns = 0;
            Emit(*id, shm::kCmEstablished);
          }
          break;
        case wire::CmType::kRej:
          OnReject(id, m);
          break;
        case wire::CmType::kDrep:
          if (id->state == State::kDreqSent) Disconnected(id);
          break;
        default:
          break;
      }
    }
  }
  DrainLoopback();
}

IpCm::Id* IpCm::RequestFrom(uint32_t from_ip, uint32_t peer_id, bool ud) {
  for (auto& [key, id] : ids_) {
    if (id.ud() == ud && id.listener != 0 && id.remote_ip == from_ip &&
        id.peer_comm_id == peer_id) {
      return &id;
    }
  }
  return nullptr;
}

IpCm::Id* IpCm::ListenerFor(const wire::CmMessage& m, bool ud) {
  if (!wire::IsIpCmServiceId(m.service_id)) return nullptr;
  const uint16_t ps = wire::IpCmPortSpace(m.service_id);
  if ((ps == wire::kPortSpaceUdp) != ud) return nullptr;
  auto port = ports_.find({ps, wire::IpCmPort(m.service_id)});
  if (port == ports_.end()) return nullptr;
  auto it = ids_.find(port->second);
  if (it == ids_.end()) return nullptr;
  Id* listener = &it->second;
  return listener->state == State::kListening && listener->owner != nullptr
             ? listener
             : nullptr;
}

bool IpCm::HasRoom(const Id& listener) const {
  uint32_t waiting = 0;
  for (const auto& [key, id] : ids_) {
    waiting += id.listener == listener.id && id.state == State::kReqReceived;
  }
  return waiting < listener.backlog &&
         IdsOf(listener.owner) < options_.max_ids_per_session &&
         listener.owner->held_cm_events() < options_.max_held_events;
}

IpCm::Id* IpCm::NewPassive(const Id& listener, const wire::CmMessage& m,
                           uint16_t remote_port, uint32_t from_ip,
                           const wire::MacAddr& from_mac) {
  Id id;
  id.id = NextId();
  id.owner = listener.owner;
  id.port_space = listener.port_space;
  id.local_port = listener.local_port;
  id.listener = listener.id;
  id.remote_ip = from_ip;
  id.remote_port = remote_port;
  id.remote_mac = from_mac;
  id.state = State::kReqReceived;
  id.peer_comm_id = m.local_comm_id;  // a SIDR REQ's request id
  id.tid = m.transaction_id;
  return &(ids_[id.id] = id);
}

void IpCm::EmitRequest(const Id& made, const CmParams& p) {
  shm::CmEvent e{};
  e.type = shm::kCmConnectRequest;
  e.listener = made.listener;
  e.params = p;
  made.owner->PushCmEvent(e);
}

void IpCm::OnRequest(const wire::CmMessage& m, uint32_t from_ip,
                     const wire::MacAddr& from_mac) {
  // A repeated REQ: answered as before.
  if (Id* known = RequestFrom(from_ip, m.local_comm_id, /*ud=*/false)) {
    if (known->state == State::kReqReceived) {
      SendTo(Simple(*known, wire::CmType::kMra), from_ip, from_mac);
    } else if (known->state == State::kRepSent ||
               known->state == State::kEstablished) {
      SendTo(known->last, from_ip, from_mac);
    }
    return;
  }
  auto reject = [&](uint16_t reason) {
    SendReject(m.local_comm_id, 0, m.transaction_id, reason,
               wire::CmRefersTo::kReq, {}, from_ip, from_mac);
  };
  wire::IpCmHeader h;
  if (!wire::ParseIpCmHeader(m, &h)) {
    reject(wire::kRejConsumer);
    return;
  }
  const Id* listener = ListenerFor(m, /*ud=*/false);
  if (listener == nullptr) {
    reject(wire::kRejInvalidServiceId);
    return;
  }
  if (!HasRoom(*listener)) {
    reject(wire::kRejConsumer);
    return;
  }
  Id* made = NewPassive(*listener, m, h.src_port, from_ip, from_mac);
  made->comm_id = NextCommId();
  by_comm_id_[made->comm_id] = made->id;
  made->peer_qpn = m.qpn.value();
  made->path_mtu = std::min(m.path_mtu, wire::IbMtuCode(options_.path_mtu));
  SendTo(Simple(*made, wire::CmType::kMra), from_ip, from_mac);
  CmParams p = ParamsOf(*made);
  p.qpn = m.qpn.value();
  p.psn = m.start_psn.value();
  // From the receiver's side, as Linux's CM reports them: the READs the
  // peer will keep in flight are the ones we serve.
  p.responder_resources = m.initiator_depth;
  p.initiator_depth = m.responder_resources;
  p.flow_control = m.flow_control;
  p.retry_count = m.retry_count;
  p.rnr_retry_count = m.rnr_retry_count;
  p.srq = m.srq;
  CopyPrivateData(m, wire::kIpCmHeaderLen, &p);
  EmitRequest(*made, p);
}

void IpCm::OnSidrRequest(const wire::CmMessage& m, uint32_t from_ip,
                         const wire::MacAddr& from_mac) {
  if (Id* known = RequestFrom(from_ip, m.local_comm_id, /*ud=*/true)) {
    // Repeated: answered again once the application answered.
    if (known->state != State::kReqReceived) {
      SendTo(known->last, from_ip, from_mac);
    }
    return;
  }
  auto refuse = [&](uint8_t status) {
    wire::CmMessage r{};
    r.type = wire::CmType::kSidrRep;
    r.transaction_id = m.transaction_id;
    r.local_comm_id = m.local_comm_id;
    r.sidr_status = status;
    r.service_id = m.service_id;
    SendTo(r, from_ip, from_mac);
  };
  const Id* listener = ListenerFor(m, /*ud=*/true);
  if (listener == nullptr) {
    refuse(wire::kSidrServiceIdNotSupported);
    return;
  }
  wire::IpCmHeader h;
  if (!wire::ParseIpCmHeader(m, &h) || !HasRoom(*listener)) {
    refuse(wire::kSidrRejected);
    return;
  }
  Id* made = NewPassive(*listener, m, h.src_port, from_ip, from_mac);
  CmParams p = ParamsOf(*made);
  CopyPrivateData(m, wire::kIpCmHeaderLen, &p);
  EmitRequest(*made, p);
}

void IpCm::OnReply(Id* id, const wire::CmMessage& m) {
  if (id->state == State::kEstablished) {  // our RTU was lost
    SendTo(Simple(*id, wire::CmType::kRtu), id->remote_ip, id->remote_mac);
    return;
  }
  if (id->state != State::kReqSent && id->state != State::kMraReceived) return;
  id->peer_comm_id = m.local_comm_id;
  id->peer_qpn = m.qpn.value();
  id->state = State::kRepReceived;
  id->deadline_ns = 0;
  CmParams p = ParamsOf(*id);
  p.qpn = m.qpn.value();
  p.psn = m.start_psn.value();
  p.responder_resources = m.initiator_depth;  // the receiver's side
  p.initiator_depth = m.responder_resources;
  p.flow_control = m.flow_control;
  p.rnr_retry_count = m.rnr_retry_count;
  p.srq = m.srq;
  CopyPrivateData(m, 0, &p);
  Emit(*id, shm::kCmConnectResponse, 0, p);
}

void IpCm::OnSidrReply(Id* id, const wire::CmMessage& m) {
  if (id->state != State::kReqSent || !id->ud()) return;
  id->deadline_ns = 0;
  CmParams p = ParamsOf(*id);
  CopyPrivateData(m, 0, &p);
  if (m.sidr_status != wire::kSidrValid) {
    id->state = State::kClosed;
    // As Linux: the SIDR status itself (positive) says why.
    Emit(*id, shm::kCmUnreachable, m.sidr_status, p);
    return;
  }
  id->state = State::kEstablished;
  p.qpn = m.qpn.value();
  p.qkey = m.qkey;
  Emit(*id, shm::kCmEstablished, 0, p);
}

void IpCm::OnReject(Id* id, const wire::CmMessage& m) {
  // The peer refused our REQ (or our REP), or gave up its REQ before our
  // application answered it.
  if (id->state != State::kReqSent && id->state != State::kMraReceived &&
      id->state != State::kRepSent && id->state != State::kReqReceived) {
    return;
  }
  id->state = State::kClosed;
  id->deadline_ns = 0;
  CmParams p = ParamsOf(*id);
  p.reason = m.reject_reason;
  CopyPrivateData(m, 0, &p);
  Emit(*id, shm::kCmRejected, 0, p);
}

void IpCm::OnDisconnectRequest(const wire::CmMessage& m, uint32_t from_ip,
                               const wire::MacAddr& from_mac) {
  Id* id = FindByCommId(m.remote_comm_id);
  if (id != nullptr && id->remote_ip == from_ip &&
      id->peer_comm_id == m.local_comm_id) {
    switch (id->state) {
      case State::kEstablished:
      case State::kRepSent:
      case State::kRepReceived:
      case State::kDreqSent:  // both ended at once
        Disconnected(id);
        break;
      default:
        break;
    }
  }
  // Always answered, so that a peer repeating its DREQ stops.
  SendTo(wire::DisconnectReply(m), from_ip, from_mac);
}

void IpCm::Disconnected(Id* id, int32_t status) {
  if (id->owner == nullptr) {  // nobody to tell
    Forget(id);
    return;
  }
  id->state = State::kTimewait;
  id->deadline_ns = NowNs() + kTimewaitNs;
  Emit(*id, shm::kCmDisconnected, status);
}

// --- Sending -------------------------------------------------------------

wire::CmMessage IpCm::Simple(const Id& id, wire::CmType type) const {
  wire::CmMessage m{};
  m.type = type;
  m.transaction_id = id.tid;
  m.local_comm_id = id.comm_id;
  m.remote_comm_id = id.peer_comm_id;
  m.refers_to = wire::CmRefersTo::kReq;  // an MRA acknowledges a REQ
  m.service_timeout = wire::IbTimeoutCode(kKeepAliveNs);
  return m;
}

void IpCm::Send(Id* id, const wire::CmMessage& m, uint64_t interval_ns) {
  id->last = m;
  ++id->tries;
  id->deadline_ns = NowNs() + interval_ns;
  SendTo(m, id->remote_ip, id->remote_mac);
}

void IpCm::SendTo(const wire::CmMessage& m, uint32_t ip,
                  const wire::MacAddr& mac) {
  if (ip == options_.ip) {
    loopback_.push_back({m});
    return;
  }
  if (link_ != nullptr) link_->SendCm(m, ip, mac);
}

void IpCm::SendReject(uint32_t peer_comm_id, uint32_t local_comm_id,
                      uint64_t tid, uint16_t reason, wire::CmRefersTo refers_to,
                      std::span<const uint8_t> private_data, uint32_t ip,
                      const wire::MacAddr& mac) {
  wire::CmMessage m{};
  m.type = wire::CmType::kRej;
  m.transaction_id = tid;
  m.local_comm_id = local_comm_id;
  m.remote_comm_id = peer_comm_id;
  m.reject_reason = reason;
  m.refers_to = refers_to;
  SetPrivateData(private_data, &m);
  SendTo(m, ip, mac);
}

void IpCm::DrainLoopback() {
  if (draining_) return;
  draining_ = true;
  // Bounded: each message answers at most once more.
  for (int i = 0; i < 1024 && !loopback_.empty(); ++i) {
    const Looped l = loopback_.front();
    loopback_.pop_front();
    const wire::MacAddr none{};
    if (Owns(l.m) || l.m.type == wire::CmType::kReq) {
      OnMessage(l.m, options_.ip, none);
    }
  }
  draining_ = false;
}

// --- Events ----------------------------------------------------------------

shm::CmParams IpCm::ParamsOf(const Id& id) const {
  CmParams p{};
  p.id = id.id;
  p.local_ip = options_.ip;
  p.remote_ip = id.remote_ip;
  p.local_port = id.local_port;
  p.remote_port = id.remote_port;
  p.port_space = id.port_space;
  p.path_mtu =
      id.path_mtu != 0 ? id.path_mtu : wire::IbMtuCode(options_.path_mtu);
  return p;
}

void IpCm::Emit(const Id& id, shm::CmEventType type, int32_t status,
                const CmParams& params) {
  if (id.owner == nullptr) return;
  shm::CmEvent e{};
  e.type = type;
  e.status = status;
  e.params = params;
  id.owner->PushCmEvent(e);
}

void IpCm::Emit(const Id& id, shm::CmEventType type, int32_t status) {
  Emit(id, type, status, ParamsOf(id));
}

// --- Timers ------------------------------------------------------------------

void IpCm::Tick() {
  const uint64_t now = NowNs();
  std::vector<uint32_t> due;
  for (const auto& [key, id] : ids_) {
    if (id.deadline_ns != 0 && id.deadline_ns <= now) due.push_back(key);
  }
  for (uint32_t key : due) {
    auto it = ids_.find(key);
    if (it == ids_.end()) continue;
    Id* id = &it->second;
    id->deadline_ns = 0;
    switch (id->state) {
      case State::kResolving:
        if (--id->tries == 0) {
          id->state = State::kAddrError;
          Emit(*id, shm::kCmAddrError, -ETIMEDOUT);
          break;
        }
        id->deadline_ns = now + kArpIntervalNs;
        if (link_ != nullptr) link_->AskNeighbor(id->remote_ip);
        break;
      case State::kReqSent:
        if (id->tries >= kReqTries) {
          id->state = State::kClosed;
          Emit(*id, shm::kCmUnreachable, -ETIMEDOUT);
          if (id->owner == nullptr) Forget(id);
          break;
        }
        Send(id, id->last, kReqIntervalNs);
        break;
      case State::kMraReceived:
        if (id->tries >= kKeepAliveTries) {  // the peer vanished
          id->state = State::kClosed;
          Emit(*id, shm::kCmUnreachable, -ETIMEDOUT);
          break;
        }
        Send(id, id->last, kKeepAliveNs);
        break;
      case State::kRepSent:
        if (id->tries >= kRepTries) {
          id->state = State::kClosed;
          Emit(*id, shm::kCmUnreachable, -ETIMEDOUT);
          if (id->owner == nullptr) Forget(id);
          break;
        }
        Send(id, id->last, kRepIntervalNs);
        break;
      case State::kDreqSent:
        if (id->tries >= kDreqTries) {
          // As Linux: disconnected all the same, saying so.
          Disconnected(id, -ETIMEDOUT);
          break;
        }
        Send(id, id->last, kDreqIntervalNs);
        break;
      case State::kTimewait:
        id->state = State::kClosed;
        Emit(*id, shm::kCmTimewaitExit);
        break;
      default:
        break;
    }
  }
  DrainLoopback();
}

}  // namespace rdmaplane::control
