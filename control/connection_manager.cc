#include "control/connection_manager.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/log.h"
#include "control/reply.h"
#include "dataplane/wire/arp.h"

namespace rdmaplane::control {
namespace {

using shm::ControlRequest;
using shm::ControlResponse;

// The native connections are a consumer of the IP CM Service: their
// messages are repeated on its schedule (IpCm's constants). While the peer
// has not accepted, the REQ is repeated as a keep-alive (the peer answers
// each with MRA); kKeepAliveTries unanswered mean it is gone.
constexpr uint64_t kReqIntervalNs = IpCm::kReqIntervalNs;
constexpr uint32_t kReqTries = IpCm::kReqTries;
constexpr uint64_t kKeepAliveNs = IpCm::kKeepAliveNs;
constexpr uint32_t kKeepAliveTries = IpCm::kKeepAliveTries;
constexpr uint64_t kRepIntervalNs = IpCm::kRepIntervalNs;
constexpr uint32_t kRepTries = IpCm::kRepTries;
constexpr uint64_t kDreqIntervalNs = IpCm::kDreqIntervalNs;
constexpr uint32_t kDreqTries = IpCm::kDreqTries;

// A REJ carries why, as text in its private data, for the client's error.
void SetRejectText(wire::CmMessage* m, const std::string& text) {
  const size_t n = std::min(text.size(), wire::CmPrivateDataCapacity(m->type));
  std::memcpy(m->private_data.data(), text.data(), n);
  m->private_data_len = static_cast<uint8_t>(n);
}

// Why a queue pair to another daemon broke, for the log.
const char* BreakReason(rc::WcStatus s) {
  switch (s) {
    case rc::WcStatus::kRetryExceeded:
      return "retries exhausted (the peer stopped answering)";
    case rc::WcStatus::kRemoteAccessError:
      return "the peer refused access (NAK: remote access error)";
    case rc::WcStatus::kRemoteInvalidRequest:
      return "the peer rejected a request (NAK: invalid request)";
    case rc::WcStatus::kRemoteOperationalError:
      return "the peer could not carry out a request (NAK: remote "
             "operational error)";
    case rc::WcStatus::kBadResponse:
      return "the peer's read responses broke the protocol (bad response)";
    case rc::WcStatus::kPeerInvalidRequest:
      return "we refused a request of the peer (NAK sent: invalid request, "
             "such as an opcode rdmaplane does not serve)";
    case rc::WcStatus::kPeerAccessError:
      return "we refused a request of the peer (NAK sent: remote access "
             "error)";
    default:
      return "transport error";
  }
}

std::string RejectText(const wire::CmMessage& m) {
  const size_t cap = wire::CmPrivateDataCapacity(m.type);
  std::string text;
  for (size_t i = 0; i < cap && m.private_data[i] != 0; ++i) {
    const char ch = static_cast<char>(m.private_data[i]);
    text.push_back(ch >= 0x20 && ch < 0x7F ? ch : '?');
  }
  return text;
}

}  // namespace

// --- Frames ------------------------------------------------------------------

ConnectionManager::ConnectionManager(ConnectionTable* connections,
                                     engine::Engine* port_engine,
                                     ControlCounters* counters,
                                     const PeerAddress& us, uint32_t path_mtu,
                                     uint32_t comm_id_seed)
    : connections_(connections),
      port_engine_(port_engine),
      counters_(counters),
      us_(us),
      path_mtu_(path_mtu),
      next_comm_id_(comm_id_seed) {}

// --- Frames ------------------------------------------------------------------

void ConnectionManager::DrainControlFrames() {
  uint64_t v;
  [[maybe_unused]] ssize_t r =
      read(port_engine_->control_notify_fd(), &v, sizeof(v));
  engine::ControlFrame f;
  // Bounded: the engine may keep passing frames up.
  for (int i = 0; i < 256 && port_engine_->TakeControlFrame(&f); ++i) {
    HandleControlFrame(f);
  }
}

void ConnectionManager::HandleControlFrame(const engine::ControlFrame& f) {
  if (f.kind == engine::ControlFrame::kTransportError) {
    OnTransportError(f.connection_id);
    return;
  }
  if (f.kind != engine::ControlFrame::kFrame) {
    counters_->Count(&ControlCounters::bad_control_frames);
    return;
  }
  const std::span<const uint8_t> frame(f.bytes, f.length);
  switch (wire::ClassifyFrame(frame)) {
    case wire::FrameKind::kArp:
      HandleArp(frame);
      break;
    case wire::FrameKind::kCm:
      HandleCm(frame);
      break;
    default:
      counters_->Count(&ControlCounters::bad_control_frames);
  }
}

void ConnectionManager::OnTransportError(uint32_t scope) {
  Connection* c = connections_->Find(ConnectionOfScope(scope));
  if (c == nullptr || !c->remote() || !c->running) return;
  connections_->PeerClosed(c, engine::CloseReason::kTransportError);
  // The engine no longer serves the endpoint: its counters are ours.
  const engine::Endpoint& e = *c->endpoint[0];
  const rc::QpStats& q = e.qp_stats();
  RDP_LOG(kWarning,
          "connection %u to %s broke: %s (tx %llu, rx %llu, "
          "retransmitted %llu, timeouts %llu, NAKs in %llu)",
          c->id, IpText(c->peer.ip).c_str(),
          engine::IsTransportBreak(e.close_reason())
              ? BreakReason(e.qp_error())
              : engine::CloseReasonName(e.close_reason()),
          static_cast<unsigned long long>(q.tx_packets),
          static_cast<unsigned long long>(q.rx_packets),
          static_cast<unsigned long long>(q.retransmitted_packets),
          static_cast<unsigned long long>(q.timeouts),
          static_cast<unsigned long long>(q.naks_received));
  Closed(c);
}

void ConnectionManager::HandleArp(std::span<const uint8_t> frame) {
  wire::ArpMessage m;
  if (!wire::ParseArp(frame, &m)) {
    counters_->Count(&ControlCounters::bad_control_frames);
    return;
  }
  RDP_LOG(kDebug, "ARP %s from %s for %s", m.op == 1 ? "request" : "reply",
          IpText(m.sender_ip).c_str(), IpText(m.target_ip).c_str());
  if (m.sender_ip != 0 && m.sender_ip != us_.ip) {
    neighbors_[m.sender_ip] = m.sender_mac;
    if (ip_cm_ != nullptr) ip_cm_->OnNeighbor(m.sender_ip);
  }
  if (m.op == 1 && m.target_ip == us_.ip) {
    uint8_t out[64];
    const size_t n =
        wire::EncodeArp(wire::MakeArpReply(m, us_.mac), std::span(out));
    if (n > 0 && port_engine_->SendControlFrame({out, n})) {
      counters_->Count(&ControlCounters::arp_replies_sent);
    }
  }
  // Connections waiting for this neighbour go on.
  if (m.sender_ip == 0) return;
  std::vector<Connection*> queue_pairs;
  connections_->ForEach([&](Connection* c) {
    if (c->remote() && c->cm.state == CmState::kResolving &&
        c->peer.ip == m.sender_ip) {
      c->peer.mac = m.sender_mac;
      c->cm.state = CmState::kReqSent;
      c->cm.tries = 0;
      SendReq(c);
    } else if (c->cm.state == CmState::kQpResolving && c->peer.ip == m.sender_ip) {
      c->peer.mac = m.sender_mac;
      queue_pairs.push_back(c);
    }
  });
  for (Connection* c : queue_pairs) AnswerQueuePair(c, shm::kStatusOk, "");
}

std::optional<wire::MacAddr> ConnectionManager::Neighbor(uint32_t ip) const {
  if (ip == us_.ip) return us_.mac;  // our port loops frames to us back
  if (auto it = neighbors_.find(ip); it != neighbors_.end()) return it->second;
  return std::nullopt;
}

void ConnectionManager::SendArpRequest(uint32_t ip) {
  RDP_LOG(kDebug, "ARP request for %s", IpText(ip).c_str());
  wire::ArpMessage m{};
  m.op = 1;
  m.sender_mac = us_.mac;
  m.sender_ip = us_.ip;
  m.target_ip = ip;
  uint8_t out[64];
  const size_t n = wire::EncodeArp(m, std::span(out));
  if (n > 0) port_engine_->SendControlFrame({out, n});
}

void ConnectionManager::SendCm(const wire::CmMessage& m, uint32_t peer_ip,
                               const wire::MacAddr& peer_mac) {
  wire::Path path;
  path.src_mac = us_.mac;
  path.dst_mac = peer_mac;
  path.src_ip = us_.ip;
  path.dst_ip = peer_ip;
  path.udp_src_port =
      static_cast<uint16_t>(0xC000 | (m.local_comm_id & 0x3FFF));
  uint8_t out[engine::ControlFrame::kMaxBytes];
  const size_t n = wire::EncodeCmFrame(path, m, std::span(out));
  RDP_LOG(kDebug, "CM %s to %s, comm id %u -> %u", wire::CmTypeName(m.type),
          IpText(peer_ip).c_str(), m.local_comm_id, m.remote_comm_id);
  if (n == 0 || !port_engine_->SendControlFrame({out, n})) {
    RDP_LOG(kWarning, "cannot send CM %s to %s", wire::CmTypeName(m.type),
            IpText(peer_ip).c_str());
  }
}

Connection* ConnectionManager::FindByCommId(uint32_t comm_id) {
  Connection* found = nullptr;
  connections_->ForEach([&](Connection* c) {
    if (found == nullptr && c->remote() && c->cm.comm_id == comm_id) found = c;
  });
  return found;
}

void ConnectionManager::HandleCm(std::span<const uint8_t> frame) {
  wire::CmMessage m;
  wire::Path from;
  if (!wire::ParseCmFrame(frame, &m, &from) || from.dst_ip != us_.ip) {
    counters_->Count(&ControlCounters::bad_control_frames);
    return;
  }
  neighbors_[from.src_ip] = from.src_mac;
  if (ip_cm_ != nullptr && IpCm::Owns(m)) {
    ip_cm_->OnMessage(m, from.src_ip, from.src_mac);
    return;
  }
  RDP_LOG(kDebug, "CM %s from %s, comm id %u -> %u", wire::CmTypeName(m.type),
          IpText(from.src_ip).c_str(), m.local_comm_id, m.remote_comm_id);
  if (m.type == wire::CmType::kSidrReq || m.type == wire::CmType::kSidrRep) {
    return;  // no rdma_cm ids here
  }
  if (m.type == wire::CmType::kReq) {
    OnRequest(m, from);
    return;
  }
  if (m.type == wire::CmType::kDreq) {
    OnDisconnectRequest(m, from);
    return;
  }
  if (m.type == wire::CmType::kDrep) {
    farewells_.erase(m.remote_comm_id);
    return;
  }
  Connection* c = FindByCommId(m.remote_comm_id);
  if (c == nullptr || c->peer.ip != from.src_ip) return;  // stale
  switch (m.type) {
    case wire::CmType::kMra:
      OnMra(c, m);
      break;
    case wire::CmType::kRep:
      OnReply(c, m, from);
      break;
    case wire::CmType::kRtu:
      if (c->cm.state == CmState::kRepSent) c->cm.state = CmState::kEstablished;
      break;
    case wire::CmType::kRej:
      OnReject(c, m);
      break;
    default:
      break;
  }
}

// --- Active side
// ---------------------------------------------------------------

std::optional<ControlResponse> ConnectionManager::Connect(
    Session* s, const ControlRequest& r) {
  if (r.address > 0xFFFFFFFFull || r.address == us_.ip) {
    return Reply(shm::kStatusInvalid,
                 "the peer must be another daemon's IPv4 address");
  }
  const int slot = s->FreeSlot();
  if (slot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  ControlResponse refusal;
  std::optional<UserAccounts::Charge> charge =
      connections_->ChargeEnd(*s, &refusal);
  if (!charge) return refusal;
  Connection* c = connections_->Create();
  c->charge[0] = std::move(*charge);
  c->kind = ConnectionKind::kToDaemon;
  c->side[0] = s;
  c->slot[0] = static_cast<uint32_t>(slot);
  c->slot[1] = shm::kMaxConnections;
  c->peer.ip = static_cast<uint32_t>(r.address);
  c->service = r.service;
  c->peer.pmtu = path_mtu_;
  c->cm.comm_id = NextCommId();
  c->cm.tid = wire::CmTransactionId(wire::CmTransaction::kConnect, c->cm.comm_id);
  c->open[0] = true;
  c->pending = true;
  c->cm.waiting = s;
  c->cm.waiting_request = r.request_id;
  s->connections[slot] = c;
  s->ResetSlot(static_cast<uint32_t>(slot));
  counters_->Count(&ControlCounters::remote_connects);
  if (auto it = neighbors_.find(c->peer.ip); it != neighbors_.end()) {
    c->peer.mac = it->second;
    c->cm.state = CmState::kReqSent;
    SendReq(c);
  } else {
    c->cm.state = CmState::kResolving;
    c->cm.deadline_ns = NowNs() + kArpIntervalNs;
    c->cm.tries = 1;
    SendArpRequest(c->peer.ip);
  }
  return std::nullopt;
}

std::optional<ControlResponse> ConnectionManager::StartQueuePair(
    Session* s, Connection* c, uint64_t request_id) {
  if (auto it = neighbors_.find(c->peer.ip); it != neighbors_.end()) {
    c->peer.mac = it->second;
    connections_->StartRemote(c);
    return Reply(shm::kStatusOk);
  }
  if (c->peer.ip == us_.ip) {
    // A queue pair of this daemon (loopback): our port hands frames to our
    // own MAC back to our receive path.
    c->peer.mac = us_.mac;
    connections_->StartRemote(c);
    return Reply(shm::kStatusOk);
  }
  c->cm.state = CmState::kQpResolving;
  c->cm.deadline_ns = NowNs() + kArpIntervalNs;
  c->cm.tries = 1;
  c->cm.waiting = s;
  c->cm.waiting_request = request_id;
  SendArpRequest(c->peer.ip);
  return std::nullopt;
}

// Answers the RTR of a queue pair that waited for ARP.
void ConnectionManager::AnswerQueuePair(Connection* c, int32_t status,
                                        const std::string& text) {
  c->cm.state = CmState::kNone;
  Session* s = c->cm.waiting;
  c->cm.waiting = nullptr;
  if (status == shm::kStatusOk) {
    connections_->StartRemote(c);
  }  // else it stays at INIT, as before the RTR it asked for
  if (s == nullptr) return;
  ControlResponse resp = Reply(status, text);
  resp.request_id = c->cm.waiting_request;
  resp.connection = c->slot[0];
  s->Answer(resp);
}

void ConnectionManager::SendReq(Connection* c) {
  wire::CmMessage m{};
  m.type = wire::CmType::kReq;
  m.transaction_id = c->cm.tid;  // repetitions and keep-alives keep it
  m.local_comm_id = c->cm.comm_id;
  m.qpn = wire::Qpn(c->qpn[0]);
  m.start_psn = wire::Psn(c->psn[0]);
  m.path_mtu = wire::IbMtuCode(c->peer.pmtu);
  // What this daemon does, as the peer should expect it: the READs our
  // responder keeps and our requester has in flight (the queue pair's
  // defaults), our first retransmission, how long we wait for an answer to
  // the REQ and for an RTU to our REP, how often we send either.
  const rc::QpConfig qp;
  static_assert(kReqTries == kRepTries);
  m.responder_resources = static_cast<uint8_t>(qp.max_dest_rd_atomic);
  m.initiator_depth = static_cast<uint8_t>(qp.max_rd_atomic);
  m.local_ack_timeout = wire::LocalAckTimeoutCode(
      connections_->options().remote_retransmit_timeout_ns);
  m.remote_cm_response_timeout = wire::IbTimeoutCode(kReqIntervalNs);
  m.local_cm_response_timeout = wire::IbTimeoutCode(kRepIntervalNs);
  m.max_cm_retries = static_cast<uint8_t>(kReqTries - 1);
  m.retry_count = static_cast<uint8_t>(qp.retry_count);
  m.local_ip = us_.ip;
  m.remote_ip = c->peer.ip;
  // The service's name after the IP CM header, whose port is none: native
  // connections have no port of their own.
  wire::SetNativeRequest(c->service,
                         {.src_port = 0, .src_ip = us_.ip, .dst_ip = c->peer.ip},
                         &m);
  SendCm(m, c->peer.ip, c->peer.mac);
  if (c->cm.tries > 0) counters_->Count(&ControlCounters::cm_retransmits);
  ++c->cm.tries;
  c->cm.deadline_ns =
      NowNs() +
      (c->cm.state == CmState::kWaitingAccept ? kKeepAliveNs : kReqIntervalNs);
}

void ConnectionManager::OnMra(Connection* c, const wire::CmMessage& m) {
  if (c->cm.state != CmState::kReqSent && c->cm.state != CmState::kWaitingAccept) return;
  c->cm.peer_comm_id = m.local_comm_id;
  c->cm.state = CmState::kWaitingAccept;
  c->cm.tries = 0;
  c->cm.deadline_ns = NowNs() + kKeepAliveNs;
  // The peer's listener has the request queued: like a local connect, the
  // client may go on and post; requests wait until the peer accepts.
  AnswerConnect(c, shm::kStatusOk, "");
}

void ConnectionManager::OnReply(Connection* c, const wire::CmMessage& m,
                                const wire::Path& from) {
  if (c->cm.state == CmState::kEstablished) {
    SendSimple(c, wire::CmType::kRtu);  // our RTU was lost
    return;
  }
  if (c->cm.state != CmState::kReqSent && c->cm.state != CmState::kWaitingAccept) return;
  // The passive side's MTU, where it says (a peer with another CM uses the
  // one our REQ proposed).
  const uint8_t code = wire::NativeReplyMtu(m);
  const uint32_t pmtu = code != 0 ? wire::IbMtuBytes(code) : c->peer.pmtu;
  if (m.qpn.value() < 2) {
    SendReject(m.local_comm_id, c->peer.ip, from.src_mac, wire::kRejConsumer,
               "malformed reply", c->cm.tid, wire::CmRefersTo::kRep,
               c->cm.comm_id);
    c->cm.peer_comm_id = 0;
    c->cm.state = CmState::kNone;
    if (c->cm.waiting != nullptr) {
      AnswerConnect(c, shm::kStatusConnReset, "the peer sent a bad reply");
    } else {
      connections_->RefusePending(c);
    }
    return;
  }
  c->cm.peer_comm_id = m.local_comm_id;
  c->peer.mac = from.src_mac;
  c->qpn[1] = m.qpn.value();
  c->psn[1] = m.start_psn.value();
  c->peer.pmtu = std::min(c->peer.pmtu, pmtu);
  c->peer.reads_out = std::min<uint32_t>(c->peer.reads_out, m.responder_resources);
  c->cm.state = CmState::kEstablished;
  connections_->StartRemote(c);
  SendSimple(c, wire::CmType::kRtu);
  AnswerConnect(c, shm::kStatusOk, "");
}

void ConnectionManager::OnReject(Connection* c, const wire::CmMessage& m) {
  if (c->cm.state == CmState::kRepSent) {
    // The active side refused our REP: the connection our listener
    // accepted ends as if the peer had closed it (no DREQ: the peer holds
    // no connection to end).
    c->cm.state = CmState::kNone;
    c->cm.peer_comm_id = 0;
    connections_->PeerClosed(c, engine::CloseReason::kPeerClosed);
    return;
  }
  if (c->cm.state != CmState::kReqSent && c->cm.state != CmState::kWaitingAccept &&
      c->cm.state != CmState::kResolving) {
    return;
  }
  std::string why = RejectText(m);
  if (why.empty() && m.reject_reason == wire::kRejInvalidServiceId) {
    // An rdmaplaned answers a native REQ with the reason in words; a CM
    // that took it for an rdma_cm port nobody listens on (an rdmaplaned
    // from before the native connections spoke IP CM, another host's
    // rdma_cm) says nothing. A client sees 63 bytes of this and " at IP".
    why = "peer serves no native connections (too old?)";
  } else if (why.empty()) {
    why = absl::StrCat("rejected, reason ", m.reject_reason);
  }
  const std::string text = absl::StrCat(why, " at ", IpText(c->peer.ip));
  c->cm.state = CmState::kNone;
  c->cm.peer_comm_id = 0;  // nothing to say farewell to
  if (c->cm.waiting != nullptr) {
    AnswerConnect(c, shm::kStatusRefused, text);
    return;
  }
  // Answered already (MRA): like a local listener that went away.
  connections_->RefusePending(c);
}

void ConnectionManager::AnswerConnect(Connection* c, int32_t status,
                                      const std::string& text) {
  Session* s = c->cm.waiting;
  if (s == nullptr) return;
  c->cm.waiting = nullptr;
  ControlResponse resp = Reply(status, text);
  resp.request_id = c->cm.waiting_request;
  resp.connection = c->slot[0];
  if (status == shm::kStatusOk) {
    s->PublishState(c->slot[0], shm::kConnUp);
  } else {
    s->connections[c->slot[0]] = nullptr;
    c->open[0] = false;
    connections_->Forget(c);  // c is gone
  }
  s->Answer(resp);
}

// --- Passive side
// --------------------------------------------------------------

void ConnectionManager::OnRequest(const wire::CmMessage& m,
                                  const wire::Path& from) {
  // A repeated REQ: answer as before.
  Connection* known = nullptr;
  connections_->ForEach([&](Connection* c) {
    if (known == nullptr && c->remote() && c->passive() &&
        c->peer.ip == from.src_ip && c->cm.peer_comm_id == m.local_comm_id) {
      known = c;
    }
  });
  if (known != nullptr) {
    if (known->cm.state == CmState::kPassivePending) {
      SendSimple(known, wire::CmType::kMra);
    } else if (known->cm.state == CmState::kRepSent ||
               known->cm.state == CmState::kEstablished) {
      SendRep(known);
    }
    return;
  }
  auto refuse = [&](uint16_t reason, const std::string& text) {
    SendReject(m.local_comm_id, from.src_ip, from.src_mac, reason, text,
               m.transaction_id);
    counters_->Count(&ControlCounters::remote_refused);
  };
  wire::NativeService named;
  if (!wire::ParseNativeRequest(m, &named)) {
    // An old daemon shows its client this text and " at IP", 63 bytes in
    // all (it reads a REJ's private data as words).
    refuse(wire::kRejInvalidServiceId,
           wire::IsPreIpCmNativeServiceId(m.service_id)
               ? "peer rdmaplaned is newer: upgrade this one"
               : "not a request for rdmaplane's native connections");
    return;
  }
  const std::string service = connections_->ListenedService(
      named.prefix, [&named](std::string_view n) { return named.Names(n); });
  Session* listener =
      service.empty() ? nullptr : connections_->Listener(service);
  if (listener == nullptr) {
    refuse(wire::kRejInvalidServiceId,
           absl::StrCat("no listener for service '", named.Text(), "'"));
    return;
  }
  const uint32_t pmtu = wire::IbMtuBytes(m.path_mtu);
  if (pmtu == 0 || m.qpn.value() < 2) {
    refuse(wire::kRejConsumer, "malformed connection request");
    return;
  }
  if (connections_->AcceptQueueFull(service)) {
    refuse(wire::kRejConsumer, "the listener's accept queue is full");
    return;
  }
  Connection* c = connections_->Create();
  c->kind = ConnectionKind::kFromDaemon;
  c->side[0] = listener;
  c->slot[0] = shm::kMaxConnections;  // none until accepted
  c->slot[1] = shm::kMaxConnections;
  c->peer.ip = from.src_ip;
  c->peer.mac = from.src_mac;
  c->service = service;
  c->peer.pmtu = std::min(path_mtu_, pmtu);
  c->peer.reads_out = std::min<uint32_t>(c->peer.reads_out, m.responder_resources);
  c->peer.reads_in = std::min<uint32_t>(c->peer.reads_in, m.initiator_depth);
  c->cm.comm_id = NextCommId();
  c->cm.peer_comm_id = m.local_comm_id;
  c->cm.tid = m.transaction_id;
  c->qpn[1] = m.qpn.value();
  c->psn[1] = m.start_psn.value();
  c->pending = true;
  c->cm.state = CmState::kPassivePending;
  connections_->QueueForAccept(service, c);
  SendSimple(c, wire::CmType::kMra);
}

void ConnectionManager::Accepted(Connection* c) {
  c->cm.state = CmState::kRepSent;
  c->cm.tries = 0;
  SendRep(c);
  counters_->Count(&ControlCounters::remote_accepts);
}

void ConnectionManager::Refused(Connection* c) {
  SendReject(c->cm.peer_comm_id, c->peer.ip, c->peer.mac, wire::kRejConsumer,
             "the listener closed before accepting", c->cm.tid,
             wire::CmRefersTo::kReq, c->cm.comm_id);
}

void ConnectionManager::SendRep(Connection* c) {
  wire::CmMessage m{};
  m.type = wire::CmType::kRep;
  m.transaction_id = c->cm.tid;  // the REQ's
  m.local_comm_id = c->cm.comm_id;
  m.remote_comm_id = c->cm.peer_comm_id;
  m.qpn = wire::Qpn(c->qpn[0]);
  m.start_psn = wire::Psn(c->psn[0]);
  // The REP has no MTU field: the MTU we chose (no more than the REQ's)
  // travels in its private data.
  wire::SetNativeReply(wire::IbMtuCode(c->peer.pmtu), &m);
  // No more than the REQ asked for, each way.
  m.responder_resources = static_cast<uint8_t>(c->peer.reads_in);
  m.initiator_depth = static_cast<uint8_t>(c->peer.reads_out);
  // How late our responder may acknowledge: an idle engine naps this long
  // before it looks at the port again.
  m.target_ack_delay =
      wire::IbTimeoutCode(engine::EngineOptions{}.port_max_nap_ns);
  m.local_ip = us_.ip;
  m.remote_ip = c->peer.ip;
  SendCm(m, c->peer.ip, c->peer.mac);
  if (c->cm.tries > 0) counters_->Count(&ControlCounters::cm_retransmits);
  ++c->cm.tries;
  c->cm.deadline_ns = NowNs() + kRepIntervalNs;
}

void ConnectionManager::SendSimple(Connection* c, wire::CmType type) {
  wire::CmMessage m{};
  m.type = type;
  m.transaction_id = c->cm.tid;  // both belong to the REQ's transaction
  m.local_comm_id = c->cm.comm_id;
  m.remote_comm_id = c->cm.peer_comm_id;
  m.refers_to = wire::CmRefersTo::kReq;  // an MRA acknowledges a REQ
  // The REP may take until the listener accepts; meanwhile the active side
  // repeats its REQ every kKeepAliveNs, each answered by an MRA.
  m.service_timeout = wire::IbTimeoutCode(kKeepAliveNs);
  m.local_ip = us_.ip;
  m.remote_ip = c->peer.ip;
  SendCm(m, c->peer.ip, c->peer.mac);
}

void ConnectionManager::SendReject(uint32_t peer_comm_id, uint32_t peer_ip,
                                   const wire::MacAddr& mac, uint16_t reason,
                                   const std::string& text,
                                   uint64_t transaction_id,
                                   wire::CmRefersTo refers_to,
                                   uint32_t local_comm_id) {
  wire::CmMessage m{};
  m.type = wire::CmType::kRej;
  m.transaction_id = transaction_id;
  m.refers_to = refers_to;
  m.local_comm_id = local_comm_id;
  m.remote_comm_id = peer_comm_id;
  m.reject_reason = reason;
  m.local_ip = us_.ip;
  m.remote_ip = peer_ip;
  SetRejectText(&m, text);
  SendCm(m, peer_ip, mac);
}

// --- Teardown
// -----------------------------------------------------------------

void ConnectionManager::Closed(Connection* c) {
  if (c->cm.peer_comm_id == 0 || c->cm.comm_id == 0) return;
  Farewell f;
  f.peer_comm_id = c->cm.peer_comm_id;
  f.peer_ip = c->peer.ip;
  f.peer_mac = c->peer.mac;
  f.peer_qpn = c->qpn[1];
  c->cm.peer_comm_id = 0;  // once
  c->cm.state = CmState::kNone;
  SendDreq(c->cm.comm_id, &(farewells_[c->cm.comm_id] = f), NowNs());
}

void ConnectionManager::SendDreq(uint32_t comm_id, Farewell* f, uint64_t now) {
  wire::CmMessage m{};
  m.type = wire::CmType::kDreq;
  // One transaction however often it is repeated.
  m.transaction_id =
      wire::CmTransactionId(wire::CmTransaction::kDisconnect, comm_id);
  m.local_comm_id = comm_id;
  m.remote_comm_id = f->peer_comm_id;
  m.qpn = wire::Qpn(f->peer_qpn);
  m.local_ip = us_.ip;
  m.remote_ip = f->peer_ip;
  SendCm(m, f->peer_ip, f->peer_mac);
  ++f->tries;
  f->deadline_ns = now + kDreqIntervalNs;
}

void ConnectionManager::OnDisconnectRequest(const wire::CmMessage& m,
                                            const wire::Path& from) {
  Connection* c = FindByCommId(m.remote_comm_id);
  if (c != nullptr && c->peer.ip == from.src_ip &&
      c->cm.peer_comm_id == m.local_comm_id) {
    counters_->Count(&ControlCounters::peer_disconnects);
    c->cm.peer_comm_id = 0;  // the peer needs no DREQ from us
    if (c->cm.state == CmState::kPassivePending) {
      // The connector gave up before our listener accepted.
      connections_->Forget(c);
    } else if (c->running) {
      c->cm.state = CmState::kNone;
      connections_->PeerClosed(c, engine::CloseReason::kPeerClosed);
    } else if (c->open[0] && c->pending) {
      c->cm.state = CmState::kNone;
      if (c->cm.waiting != nullptr) {
        AnswerConnect(c, shm::kStatusConnReset, "the peer closed");
      } else {
        connections_->RefusePending(c);
      }
    }
  }
  // Always answered, so that a peer repeating its DREQ stops.
  wire::CmMessage r = wire::DisconnectReply(m);
  r.local_ip = us_.ip;
  r.remote_ip = from.src_ip;
  SendCm(r, from.src_ip, from.src_mac);
}

// --- Timers
// ---------------------------------------------------------------------

void ConnectionManager::Tick() {
  const uint64_t now = NowNs();
  std::vector<Connection*> due;
  connections_->ForEach([&](Connection* c) {
    if (c->remote() && c->cm.deadline_ns != 0 && c->cm.deadline_ns <= now) {
      due.push_back(c);
    }
  });
  for (Connection* c : due) {
    c->cm.deadline_ns = 0;
    switch (c->cm.state) {
      case CmState::kResolving:
        if (c->cm.tries >= kArpTries) {
          c->cm.state = CmState::kNone;
          AnswerConnect(
              c, shm::kStatusTimeout,
              absl::StrCat("no ARP answer from ", IpText(c->peer.ip)));
          break;
        }
        ++c->cm.tries;
        c->cm.deadline_ns = now + kArpIntervalNs;
        SendArpRequest(c->peer.ip);
        break;
      case CmState::kQpResolving:
        if (c->cm.tries >= kArpTries) {
          AnswerQueuePair(
              c, shm::kStatusTimeout,
              absl::StrCat("no ARP answer from ", IpText(c->peer.ip)));
          break;
        }
        ++c->cm.tries;
        c->cm.deadline_ns = now + kArpIntervalNs;
        SendArpRequest(c->peer.ip);
        break;
      case CmState::kReqSent:
        if (c->cm.tries >= kReqTries) {
          c->cm.state = CmState::kNone;
          AnswerConnect(
              c, shm::kStatusTimeout,
              absl::StrCat("no rdmaplaned answered at ", IpText(c->peer.ip)));
          break;
        }
        SendReq(c);
        break;
      case CmState::kWaitingAccept:
        if (c->cm.tries >= kKeepAliveTries) {  // the peer vanished
          c->cm.state = CmState::kNone;
          c->cm.peer_comm_id = 0;
          connections_->RefusePending(c);
          break;
        }
        SendReq(c);
        break;
      case CmState::kRepSent:
        if (c->cm.tries >= kRepTries) {
          c->cm.state = CmState::kEstablished;  // data flows; RTU was lost
          break;
        }
        SendRep(c);
        break;
      default:
        break;
    }
  }
  for (auto it = farewells_.begin(); it != farewells_.end();) {
    Farewell& f = it->second;
    if (f.deadline_ns > now) {
      ++it;
      continue;
    }
    if (f.tries >= kDreqTries) {
      it = farewells_.erase(it);
      continue;
    }
    SendDreq(it->first, &f, now);
    ++it;
  }
}

}  // namespace rdmaplane::control
