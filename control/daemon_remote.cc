// The daemon's side of connections to other daemons: the DPDK data port,
// ARP for its address and its peers', and the connection manager, which
// speaks InfiniBand CM (REQ, MRA, REP, RTU, REJ, DREQ, DREP) over RoCEv2 to
// QP 1 the way RoCE NICs do.
//
// Active side:  Connect -> (ARP) -> REQ ... MRA: the client's Connect
//               returns, its requests wait in the ring ... REP: the endpoint
//               starts, RTU.
// Passive side: REQ -> queued for the listener, MRA ... Accept: the endpoint
//               starts, REP ... RTU.
// Either side:  close -> DREQ (repeated until DREP); the peer's side of the
//               connection completes its work as reset. A transport error
//               (retries exhausted: the peer vanished) closes ours and sends
//               DREQ in case the peer is still there.
//
// Control thread only, like the rest of Daemon.
#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/shm/doorbell.h"
#include "control/daemon.h"
#include "control/log.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"
#include "dataplane/wire/arp.h"

namespace rdmaplane::control {
namespace {

using shm::ControlRequest;
using shm::ControlResponse;

// Retransmission schedule of the connection manager.
constexpr uint64_t kArpIntervalNs = 200'000'000;
constexpr uint32_t kArpTries = 10;
constexpr uint64_t kReqIntervalNs = 250'000'000;
constexpr uint32_t kReqTries = 8;
// While the peer has not accepted, the REQ is repeated as a keep-alive (the
// peer answers each with MRA); this many unanswered means it is gone.
constexpr uint64_t kKeepAliveNs = 1'000'000'000;
constexpr uint32_t kKeepAliveTries = 5;
constexpr uint64_t kRepIntervalNs = 250'000'000;
constexpr uint32_t kRepTries = 8;
constexpr uint64_t kDreqIntervalNs = 100'000'000;
constexpr uint32_t kDreqTries = 5;

std::string IpText(uint32_t ip) {
  in_addr a{htonl(ip)};
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

ControlResponse Reply(int32_t status, const std::string& message = "") {
  ControlResponse r{};
  r.status = status;
  std::snprintf(r.message, sizeof(r.message), "%s", message.c_str());
  return r;
}

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

absl::Status Daemon::StartPort() {
  const DataPortOptions& p = options_.port;
  if (p.device.empty()) return absl::OkStatus();
  if (p.ip == 0) {
    return absl::InvalidArgumentError("a data port needs an IPv4 address");
  }
  port::EalOptions eal;
  eal.hugepages = p.hugepages;
  eal.memory_mb = p.memory_mb;
  eal.file_prefix = p.file_prefix;
  const bool vdev = p.device.rfind("net_", 0) == 0;
  eal.allow_pci = !vdev;
  if (vdev) {
    eal.args.push_back("--vdev=" + p.device);
  } else {
    eal.args.push_back("-a");
    eal.args.push_back(p.device);
  }
  if (EnginesPinned()) {
    eal.args.push_back("-l");
    eal.args.push_back(absl::StrCat(p.control_lcore, ",",
                                    absl::StrJoin(options_.engine_cpus, ",")));
    eal.args.push_back(absl::StrCat("--main-lcore=", p.control_lcore));
  }
  eal.args.insert(eal.args.end(), p.eal_args.begin(), p.eal_args.end());
  // memif's own zero-copy mode (a memif client with zero-copy=yes) shares
  // the daemon's packet memory with its peer by descriptor, which needs
  // that memory in hugepage files (EalArguments asks for them).
  if (p.device.rfind("net_memif", 0) == 0 &&
      p.device.find("zero-copy=yes") != std::string::npos && !p.hugepages) {
    return absl::InvalidArgumentError(
        "memif with zero-copy=yes needs --hugepages (its peer maps this "
        "daemon's packet memory, which must lie in hugepage files)");
  }
  if (absl::Status s = port::InitDpdk(eal); !s.ok()) return s;
  dpdk_ = true;
  absl::StatusOr<uint16_t> id = port::FindPort(p.device);
  if (!id.ok()) return id.status();
  port::PortConfig pc;
  pc.port_id = *id;
  pc.mbufs = p.mbufs;
  pc.burst = static_cast<uint16_t>(options_.burst);
  pc.max_frame = static_cast<uint32_t>(
      wire::FrameLength(wire::Opcode::kWriteFirst, options_.path_mtu));
  pc.mbuf_data_room = static_cast<uint16_t>(
      std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE,
                         pc.max_frame + RTE_PKTMBUF_HEADROOM));
  // Frames to an overriding MAC must be received too.
  pc.promiscuous = p.mac.has_value();
  if (!p.zero_copy) pc.zero_copy_min_payload = 0;
  auto opened = port::EthPort::Open(pc);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("data port ", p.device, ": ",
                                     opened.status().message()));
  }
  port_ = std::move(*opened);
  port_->SetFaults(p.faults);
  port_mac_ = p.mac.value_or(port_->mac());
  port_engine().AttachPort(port_.get());
  return absl::OkStatus();
}

void Daemon::StopPort() {
  port_.reset();
  if (dpdk_) {
    port::ShutdownDpdk();
    dpdk_ = false;
  }
}

// --- Frames ------------------------------------------------------------------

void Daemon::DrainControlFrames() {
  uint64_t v;
  [[maybe_unused]] ssize_t r =
      read(port_engine().control_notify_fd(), &v, sizeof(v));
  engine::ControlFrame f;
  // Bounded: the engine may keep passing frames up.
  for (int i = 0; i < 256 && port_engine().TakeControlFrame(&f); ++i) {
    if (f.kind == engine::ControlFrame::kTransportError) {
      auto it = connections_.find(f.connection_id / 2);
      if (it != connections_.end() && it->second->remote &&
          it->second->running) {
        Connection* c = it->second.get();
        PeerClosed(c, shm::kStatusConnAborted, shm::kConnAborted);
        // The engine no longer serves the endpoint: its counters are ours.
        const rc::QpStats& q = c->endpoint[0]->qp_stats();
        RDP_LOG(kWarning,
                "connection %u to %s broke: %s (tx %llu, rx %llu, "
                "retransmitted %llu, timeouts %llu, NAKs in %llu)",
                c->id, IpText(c->peer_ip).c_str(),
                BreakReason(c->endpoint[0]->qp_error()),
                static_cast<unsigned long long>(q.tx_packets),
                static_cast<unsigned long long>(q.rx_packets),
                static_cast<unsigned long long>(q.retransmitted_packets),
                static_cast<unsigned long long>(q.timeouts),
                static_cast<unsigned long long>(q.naks_received));
        SayFarewell(c);
      }
      continue;
    }
    const std::span<const uint8_t> frame(f.bytes, f.length);
    switch (wire::ClassifyFrame(frame)) {
      case wire::FrameKind::kArp:
        HandleArp(frame);
        break;
      case wire::FrameKind::kCm:
        HandleCm(frame);
        break;
      default: {
        absl::MutexLock lock(&snapshot_mu_);
        ++snapshot_.bad_control_frames;
      }
    }
  }
}

void Daemon::HandleArp(std::span<const uint8_t> frame) {
  wire::ArpMessage m;
  if (!wire::ParseArp(frame, &m)) {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.bad_control_frames;
    return;
  }
  const uint32_t my_ip = options_.port.ip;
  RDP_LOG(kDebug, "ARP %s from %s for %s", m.op == 1 ? "request" : "reply",
          IpText(m.sender_ip).c_str(), IpText(m.target_ip).c_str());
  if (m.sender_ip != 0 && m.sender_ip != my_ip) {
    neighbors_[m.sender_ip] = m.sender_mac;
  }
  if (m.op == 1 && m.target_ip == my_ip) {
    uint8_t out[64];
    const size_t n =
        wire::EncodeArp(wire::MakeArpReply(m, port_mac_), std::span(out));
    if (n > 0 && port_engine().SendControlFrame({out, n})) {
      absl::MutexLock lock(&snapshot_mu_);
      ++snapshot_.arp_replies_sent;
    }
  }
  // Connections waiting for this neighbour go on.
  if (m.sender_ip == 0) return;
  for (auto& [id, c] : connections_) {
    if (c->remote && c->cm == CmState::kResolving &&
        c->peer_ip == m.sender_ip) {
      c->peer_mac = m.sender_mac;
      c->cm = CmState::kReqSent;
      c->cm_tries = 0;
      SendReq(c.get());
    }
  }
}

void Daemon::SendArpRequest(uint32_t ip) {
  RDP_LOG(kDebug, "ARP request for %s", IpText(ip).c_str());
  wire::ArpMessage m{};
  m.op = 1;
  m.sender_mac = port_mac_;
  m.sender_ip = options_.port.ip;
  m.target_ip = ip;
  uint8_t out[64];
  const size_t n = wire::EncodeArp(m, std::span(out));
  if (n > 0) port_engine().SendControlFrame({out, n});
}

void Daemon::SendCm(const wire::CmMessage& m, uint32_t peer_ip,
                    const wire::MacAddr& peer_mac) {
  wire::Path path;
  path.src_mac = port_mac_;
  path.dst_mac = peer_mac;
  path.src_ip = options_.port.ip;
  path.dst_ip = peer_ip;
  path.udp_src_port = static_cast<uint16_t>(0xC000 | (m.local_comm_id & 0x3FFF));
  uint8_t out[engine::ControlFrame::kMaxBytes];
  const size_t n = wire::EncodeCmFrame(path, m, std::span(out));
  RDP_LOG(kDebug, "CM %s to %s, comm id %u -> %u", wire::CmTypeName(m.type),
          IpText(peer_ip).c_str(), m.local_comm_id, m.remote_comm_id);
  if (n == 0 || !port_engine().SendControlFrame({out, n})) {
    RDP_LOG(kWarning, "cannot send CM %s to %s", wire::CmTypeName(m.type),
            IpText(peer_ip).c_str());
  }
}

Daemon::Connection* Daemon::FindByCommId(uint32_t comm_id) {
  for (auto& [id, c] : connections_) {
    if (c->remote && c->comm_id == comm_id) return c.get();
  }
  return nullptr;
}

void Daemon::HandleCm(std::span<const uint8_t> frame) {
  wire::CmMessage m;
  wire::Path from;
  if (!wire::ParseCmFrame(frame, &m, &from) ||
      from.dst_ip != options_.port.ip) {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.bad_control_frames;
    return;
  }
  neighbors_[from.src_ip] = from.src_mac;
  RDP_LOG(kDebug, "CM %s from %s, comm id %u -> %u",
          wire::CmTypeName(m.type), IpText(from.src_ip).c_str(),
          m.local_comm_id, m.remote_comm_id);
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
  if (c == nullptr || c->peer_ip != from.src_ip) return;  // stale
  switch (m.type) {
    case wire::CmType::kMra:
      OnMra(c, m);
      break;
    case wire::CmType::kRep:
      OnReply(c, m, from);
      break;
    case wire::CmType::kRtu:
      if (c->cm == CmState::kRepSent) c->cm = CmState::kEstablished;
      break;
    case wire::CmType::kRej:
      OnReject(c, m);
      break;
    default:
      break;
  }
}

// --- Active side ---------------------------------------------------------------

ControlResponse Daemon::ConnectRemote(Session* s, const ControlRequest& r) {
  if (port_ == nullptr) {
    return Reply(shm::kStatusNetDown,
                 "this daemon has no data port (--port) to reach peers");
  }
  if (r.address > 0xFFFFFFFFull || r.address == options_.port.ip) {
    return Reply(shm::kStatusInvalid,
                 "the peer must be another daemon's IPv4 address");
  }
  if (running_connections_ >= options_.max_connections) {
    return Reply(shm::kStatusNoBuffers, "the engine serves all it can");
  }
  const int slot = FreeSlot(s);
  if (slot < 0) return Reply(shm::kStatusNoBuffers, "no free connection slot");
  auto owned = std::make_unique<Connection>();
  Connection* c = owned.get();
  c->id = next_connection_id_++;
  c->remote = true;
  c->side[0] = s;
  c->slot[0] = static_cast<uint32_t>(slot);
  c->slot[1] = shm::kMaxConnections;
  c->peer_ip = static_cast<uint32_t>(r.address);
  c->service = r.service;
  c->pmtu = options_.path_mtu;
  c->comm_id = NextCommId();
  psn_seed_ = psn_seed_ * 6364136223846793005ull + 1442695040888963407ull;
  c->psn[0] = static_cast<uint32_t>(psn_seed_ >> 40);
  c->qpn[0] = std::max<uint32_t>((c->id * 2) & 0xFFFFFF, 2);
  c->open[0] = true;
  c->pending = true;
  c->waiting = s;
  c->waiting_request = current_request_id_;
  s->connections[slot] = c;
  ClearSendRing(s, static_cast<uint32_t>(slot));
  connections_[c->id] = std::move(owned);
  {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.remote_connects;
  }
  if (auto it = neighbors_.find(c->peer_ip); it != neighbors_.end()) {
    c->peer_mac = it->second;
    c->cm = CmState::kReqSent;
    SendReq(c);
  } else {
    c->cm = CmState::kResolving;
    c->cm_deadline_ns = NowNs() + kArpIntervalNs;
    c->cm_tries = 1;
    SendArpRequest(c->peer_ip);
  }
  defer_answer_ = true;
  return Reply(shm::kStatusPending);
}

void Daemon::SendReq(Connection* c) {
  wire::CmMessage m{};
  m.type = wire::CmType::kReq;
  // Repetitions and keep-alives are the same transaction.
  m.transaction_id =
      wire::CmTransactionId(wire::CmTransaction::kConnect, c->comm_id);
  m.local_comm_id = c->comm_id;
  m.service_id = wire::ServiceIdForName(c->service);
  m.qpn = wire::Qpn(c->qpn[0]);
  m.start_psn = wire::Psn(c->psn[0]);
  m.path_mtu = wire::IbMtuCode(c->pmtu);
  // What this daemon does, as the peer should expect it: the READs our
  // responder keeps and our requester has in flight (the queue pair's
  // defaults), our first retransmission, how long we wait for an answer to
  // the REQ and for an RTU to our REP, how often we send either.
  const rc::QpConfig qp;
  static_assert(kReqTries == kRepTries);
  m.responder_resources = static_cast<uint8_t>(qp.max_dest_rd_atomic);
  m.initiator_depth = static_cast<uint8_t>(qp.max_rd_atomic);
  m.local_ack_timeout =
      wire::LocalAckTimeoutCode(options_.remote_retransmit_timeout_ns);
  m.remote_cm_response_timeout = wire::IbTimeoutCode(kReqIntervalNs);
  m.local_cm_response_timeout = wire::IbTimeoutCode(kRepIntervalNs);
  m.max_cm_retries = static_cast<uint8_t>(kReqTries - 1);
  m.retry_count = static_cast<uint8_t>(qp.retry_count);
  m.local_ip = options_.port.ip;
  m.remote_ip = c->peer_ip;
  wire::SetServiceName(c->service, &m);
  SendCm(m, c->peer_ip, c->peer_mac);
  if (c->cm_tries > 0) {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.cm_retransmits;
  }
  ++c->cm_tries;
  c->cm_deadline_ns =
      NowNs() + (c->cm == CmState::kWaitingAccept ? kKeepAliveNs
                                                  : kReqIntervalNs);
}

void Daemon::OnMra(Connection* c, const wire::CmMessage& m) {
  if (c->cm != CmState::kReqSent && c->cm != CmState::kWaitingAccept) return;
  c->peer_comm_id = m.local_comm_id;
  c->cm = CmState::kWaitingAccept;
  c->cm_tries = 0;
  c->cm_deadline_ns = NowNs() + kKeepAliveNs;
  // The peer's listener has the request queued: like a local connect, the
  // client may go on and post; requests wait until the peer accepts.
  AnswerConnect(c, shm::kStatusOk, "");
}

void Daemon::OnReply(Connection* c, const wire::CmMessage& m,
                     const wire::Path& from) {
  if (c->cm == CmState::kEstablished) {
    SendSimple(c, wire::CmType::kRtu);  // our RTU was lost
    return;
  }
  if (c->cm != CmState::kReqSent && c->cm != CmState::kWaitingAccept) return;
  // The passive side's MTU, where it says (a peer with another CM uses the
  // one our REQ proposed).
  const uint8_t code = wire::ReplyPathMtu(m);
  const uint32_t pmtu = code != 0 ? wire::IbMtuBytes(code) : c->pmtu;
  if (m.qpn.value() < 2) {
    SendReject(m.local_comm_id, c->peer_ip, from.src_mac, wire::kRejConsumer,
               "malformed reply");
    c->peer_comm_id = 0;
    c->cm = CmState::kNone;
    if (c->waiting != nullptr) {
      AnswerConnect(c, shm::kStatusConnReset, "the peer sent a bad reply");
    } else {
      RefusePending(c);
    }
    return;
  }
  c->peer_comm_id = m.local_comm_id;
  c->peer_mac = from.src_mac;
  c->qpn[1] = m.qpn.value();
  c->psn[1] = m.start_psn.value();
  c->pmtu = std::min(c->pmtu, pmtu);
  Session* s = c->side[0];
  c->endpoint[0] = MakeRemoteEndpoint(s, c->slot[0], c);
  c->pending = false;
  c->cm = CmState::kEstablished;
  port_engine().AddRemote(c->endpoint[0].get());
  c->running = true;
  ++running_connections_;
  SendSimple(c, wire::CmType::kRtu);
  AnswerConnect(c, shm::kStatusOk, "");
}

void Daemon::OnReject(Connection* c, const wire::CmMessage& m) {
  if (c->cm != CmState::kReqSent && c->cm != CmState::kWaitingAccept &&
      c->cm != CmState::kResolving) {
    return;
  }
  std::string why = RejectText(m);
  if (why.empty()) why = absl::StrCat("rejected, reason ", m.reject_reason);
  const std::string text =
      absl::StrCat(why, " at ", IpText(c->peer_ip));
  c->cm = CmState::kNone;
  c->peer_comm_id = 0;  // nothing to say farewell to
  if (c->waiting != nullptr) {
    AnswerConnect(c, shm::kStatusRefused, text);
    return;
  }
  // Answered already (MRA): like a local listener that went away.
  c->remote = false;
  RefusePending(c);
  c->remote = true;
}

void Daemon::AnswerConnect(Connection* c, int32_t status,
                           const std::string& text) {
  Session* s = c->waiting;
  if (s == nullptr) return;
  c->waiting = nullptr;
  ControlResponse resp = Reply(status, text);
  resp.request_id = c->waiting_request;
  resp.connection = c->slot[0];
  if (status == shm::kStatusOk) {
    s->header->connection_state[c->slot[0]].store(shm::kConnUp,
                                                  std::memory_order_release);
  } else {
    s->connections[c->slot[0]] = nullptr;
    c->open[0] = false;
    connections_.erase(c->id);  // c is gone
  }
  s->responses.TryPush(resp);
  shm::RingDoorbell(&s->header->control_response_bell);
}

// --- Passive side --------------------------------------------------------------

void Daemon::OnRequest(const wire::CmMessage& m, const wire::Path& from) {
  // A repeated REQ: answer as before.
  for (auto& [id, c] : connections_) {
    if (!c->remote || !c->passive || c->peer_ip != from.src_ip ||
        c->peer_comm_id != m.local_comm_id) {
      continue;
    }
    if (c->cm == CmState::kPassivePending) {
      SendSimple(c.get(), wire::CmType::kMra);
    } else if (c->cm == CmState::kRepSent || c->cm == CmState::kEstablished) {
      SendRep(c.get());
    }
    return;
  }
  const std::string service(wire::ServiceNameFromPrivateData(m));
  auto it = listeners_.find(service);
  auto refuse = [&](uint16_t reason, const std::string& text) {
    SendReject(m.local_comm_id, from.src_ip, from.src_mac, reason, text);
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.remote_refused;
  };
  if (service.empty() || it == listeners_.end()) {
    refuse(wire::kRejInvalidServiceId,
           absl::StrCat("no listener for service '", service, "'"));
    return;
  }
  const uint32_t pmtu = wire::IbMtuBytes(m.path_mtu);
  if (pmtu == 0 || m.qpn.value() < 2) {
    refuse(wire::kRejConsumer, "malformed connection request");
    return;
  }
  auto& queue = pending_[service];
  if (queue.size() >= 16) {
    refuse(wire::kRejConsumer, "the listener's accept queue is full");
    return;
  }
  auto owned = std::make_unique<Connection>();
  Connection* c = owned.get();
  c->id = next_connection_id_++;
  c->remote = true;
  c->side[0] = it->second;
  c->slot[0] = shm::kMaxConnections;  // none until accepted
  c->slot[1] = shm::kMaxConnections;
  c->peer_ip = from.src_ip;
  c->peer_mac = from.src_mac;
  c->service = service;
  c->pmtu = std::min(options_.path_mtu, pmtu);
  c->comm_id = NextCommId();
  c->peer_comm_id = m.local_comm_id;
  c->qpn[1] = m.qpn.value();
  c->psn[1] = m.start_psn.value();
  psn_seed_ = psn_seed_ * 6364136223846793005ull + 1442695040888963407ull;
  c->psn[0] = static_cast<uint32_t>(psn_seed_ >> 40);
  c->qpn[0] = std::max<uint32_t>((c->id * 2) & 0xFFFFFF, 2);
  c->passive = true;
  c->pending = true;
  c->cm = CmState::kPassivePending;
  queue.push_back({c, 0});
  connections_[c->id] = std::move(owned);
  SendSimple(c, wire::CmType::kMra);
}

void Daemon::AcceptRemote(Connection* c, Session* s, uint32_t slot) {
  c->side[0] = s;
  c->slot[0] = slot;
  c->endpoint[0] = MakeRemoteEndpoint(s, slot, c);
  c->open[0] = true;
  c->pending = false;
  s->connections[slot] = c;
  port_engine().AddRemote(c->endpoint[0].get());
  c->running = true;
  ++running_connections_;
  c->cm = CmState::kRepSent;
  c->cm_tries = 0;
  SendRep(c);
  absl::MutexLock lock(&snapshot_mu_);
  ++snapshot_.remote_accepts;
}

void Daemon::SendRep(Connection* c) {
  wire::CmMessage m{};
  m.type = wire::CmType::kRep;
  // The REQ's transaction (named after the active side's comm id).
  m.transaction_id =
      wire::CmTransactionId(wire::CmTransaction::kConnect, c->peer_comm_id);
  m.local_comm_id = c->comm_id;
  m.remote_comm_id = c->peer_comm_id;
  m.qpn = wire::Qpn(c->qpn[0]);
  m.start_psn = wire::Psn(c->psn[0]);
  // The REP has no MTU field: the MTU we chose (no more than the REQ's)
  // travels in its private data.
  wire::SetReplyPathMtu(wire::IbMtuCode(c->pmtu), &m);
  const rc::QpConfig qp;
  m.responder_resources = static_cast<uint8_t>(qp.max_dest_rd_atomic);
  m.initiator_depth = static_cast<uint8_t>(qp.max_rd_atomic);
  // How late our responder may acknowledge: an idle engine naps this long
  // before it looks at the port again.
  m.target_ack_delay =
      wire::IbTimeoutCode(engine::EngineOptions{}.port_max_nap_ns);
  m.local_ip = options_.port.ip;
  m.remote_ip = c->peer_ip;
  SendCm(m, c->peer_ip, c->peer_mac);
  if (c->cm_tries > 0) {
    absl::MutexLock lock(&snapshot_mu_);
    ++snapshot_.cm_retransmits;
  }
  ++c->cm_tries;
  c->cm_deadline_ns = NowNs() + kRepIntervalNs;
}

void Daemon::SendSimple(Connection* c, wire::CmType type) {
  wire::CmMessage m{};
  m.type = type;
  // Both belong to the REQ's transaction: ours for an RTU, the peer's for
  // an MRA.
  m.transaction_id = wire::CmTransactionId(
      wire::CmTransaction::kConnect, c->passive ? c->peer_comm_id : c->comm_id);
  m.local_comm_id = c->comm_id;
  m.remote_comm_id = c->peer_comm_id;
  m.refers_to = wire::CmRefersTo::kReq;  // an MRA acknowledges a REQ
  // The REP may take until the listener accepts; meanwhile the active side
  // repeats its REQ every kKeepAliveNs, each answered by an MRA.
  m.service_timeout = wire::IbTimeoutCode(kKeepAliveNs);
  m.local_ip = options_.port.ip;
  m.remote_ip = c->peer_ip;
  SendCm(m, c->peer_ip, c->peer_mac);
}

void Daemon::SendReject(uint32_t peer_comm_id, uint32_t peer_ip,
                        const wire::MacAddr& mac, uint16_t reason,
                        const std::string& text) {
  wire::CmMessage m{};
  m.type = wire::CmType::kRej;
  // The rejected REQ's transaction; our comm id if we gave the request one
  // (a request our listener never accepted), else 0.
  m.transaction_id =
      wire::CmTransactionId(wire::CmTransaction::kConnect, peer_comm_id);
  for (const auto& [id, c] : connections_) {
    if (c->remote && c->passive && c->peer_ip == peer_ip &&
        c->peer_comm_id == peer_comm_id) {
      m.local_comm_id = c->comm_id;
    }
  }
  m.remote_comm_id = peer_comm_id;
  m.reject_reason = reason;
  m.local_ip = options_.port.ip;
  m.remote_ip = peer_ip;
  SetRejectText(&m, text);
  SendCm(m, peer_ip, mac);
}

// --- Teardown -----------------------------------------------------------------

void Daemon::SayFarewell(Connection* c) {
  if (c->peer_comm_id == 0 || c->comm_id == 0) return;
  Farewell f;
  f.peer_comm_id = c->peer_comm_id;
  f.peer_ip = c->peer_ip;
  f.peer_mac = c->peer_mac;
  f.peer_qpn = c->qpn[1];
  c->peer_comm_id = 0;  // once
  c->cm = CmState::kNone;
  SendDreq(c->comm_id, &(farewells_[c->comm_id] = f), NowNs());
}

void Daemon::SendDreq(uint32_t comm_id, Farewell* f, uint64_t now) {
  wire::CmMessage m{};
  m.type = wire::CmType::kDreq;
  // One transaction however often it is repeated.
  m.transaction_id =
      wire::CmTransactionId(wire::CmTransaction::kDisconnect, comm_id);
  m.local_comm_id = comm_id;
  m.remote_comm_id = f->peer_comm_id;
  m.qpn = wire::Qpn(f->peer_qpn);
  m.local_ip = options_.port.ip;
  m.remote_ip = f->peer_ip;
  SendCm(m, f->peer_ip, f->peer_mac);
  ++f->tries;
  f->deadline_ns = now + kDreqIntervalNs;
}

void Daemon::PeerClosed(Connection* c, int32_t status,
                        shm::ConnectionState state) {
  if (!c->running) return;
  port_engine().RemovePair(c->endpoint[0].get(), status, state, 0, state);
  c->running = false;
  --running_connections_;
  c->abort_status[0] = status;
  AbortQueued(c, 0, status);
  cache_.DropConnection(ScopeOf(c, 0));
}

void Daemon::OnDisconnectRequest(const wire::CmMessage& m,
                                 const wire::Path& from) {
  Connection* c = FindByCommId(m.remote_comm_id);
  if (c != nullptr && c->peer_ip == from.src_ip &&
      c->peer_comm_id == m.local_comm_id) {
    {
      absl::MutexLock lock(&snapshot_mu_);
      ++snapshot_.peer_disconnects;
    }
    c->peer_comm_id = 0;  // the peer needs no DREQ from us
    if (c->cm == CmState::kPassivePending) {
      // The connector gave up before our listener accepted.
      for (auto& [service, queue] : pending_) {
        std::erase_if(queue, [c](const auto& p) { return p.first == c; });
      }
      connections_.erase(c->id);
    } else if (c->running) {
      c->cm = CmState::kNone;
      PeerClosed(c, shm::kStatusConnReset, shm::kConnReset);
    } else if (c->open[0] && c->pending) {
      c->cm = CmState::kNone;
      if (c->waiting != nullptr) {
        AnswerConnect(c, shm::kStatusConnReset, "the peer closed");
      } else {
        c->remote = false;
        RefusePending(c);
        c->remote = true;
      }
    }
  }
  // Always answered, so that a peer repeating its DREQ stops.
  wire::CmMessage r{};
  r.type = wire::CmType::kDrep;
  r.transaction_id = m.transaction_id;  // the DREQ's
  r.local_comm_id = m.remote_comm_id;
  r.remote_comm_id = m.local_comm_id;
  r.local_ip = options_.port.ip;
  r.remote_ip = from.src_ip;
  SendCm(r, from.src_ip, from.src_mac);
}

// --- Timers ---------------------------------------------------------------------

void Daemon::CmTick() {
  if (port_ == nullptr) return;
  const uint64_t now = NowNs();
  std::vector<Connection*> due;
  for (auto& [id, c] : connections_) {
    if (c->remote && c->cm_deadline_ns != 0 && c->cm_deadline_ns <= now) {
      due.push_back(c.get());
    }
  }
  for (Connection* c : due) {
    c->cm_deadline_ns = 0;
    switch (c->cm) {
      case CmState::kResolving:
        if (c->cm_tries >= kArpTries) {
          c->cm = CmState::kNone;
          AnswerConnect(c, shm::kStatusTimeout,
                        absl::StrCat("no ARP answer from ", IpText(c->peer_ip)));
          break;
        }
        ++c->cm_tries;
        c->cm_deadline_ns = now + kArpIntervalNs;
        SendArpRequest(c->peer_ip);
        break;
      case CmState::kReqSent:
        if (c->cm_tries >= kReqTries) {
          c->cm = CmState::kNone;
          AnswerConnect(c, shm::kStatusTimeout,
                        absl::StrCat("no rdmaplaned answered at ",
                                     IpText(c->peer_ip)));
          break;
        }
        SendReq(c);
        break;
      case CmState::kWaitingAccept:
        if (c->cm_tries >= kKeepAliveTries) {  // the peer vanished
          c->cm = CmState::kNone;
          c->peer_comm_id = 0;
          c->remote = false;
          RefusePending(c);
          c->remote = true;
          break;
        }
        SendReq(c);
        break;
      case CmState::kRepSent:
        if (c->cm_tries >= kRepTries) {
          c->cm = CmState::kEstablished;  // data flows; RTU was lost
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

std::unique_ptr<engine::Endpoint> Daemon::MakeRemoteEndpoint(Session* s,
                                                             uint32_t slot,
                                                             Connection* c) {
  std::unique_ptr<engine::Endpoint> e =
      MakeEndpoint(s, slot, ScopeOf(c, 0), c->qpn[0], c->qpn[1], c->psn[0],
                   c->psn[1], c);
  return e;
}

}  // namespace rdmaplane::control
