// The RDMA IP CM service (IBA Annex A11) for the rdma_cm ids of sessions:
// what the kernel's rdma_cm does beneath librdmacm, spoken on the daemon's
// data port the way Linux speaks it (wire::IpCmServiceId, the 36-byte IP
// CM header, SIDR for UD), so that an rdma_cm program on another host, on
// a RoCE NIC or on rxe, is a valid peer.
//
// An id is bound to a port of a port space (kOpCmBind); it listens
// (kOpCmListen), or resolves a peer's address (kOpCmResolve: ARP) and
// connects (kOpCmConnect: REQ, or SIDR REQ for RDMA_PS_UDP). The daemon
// only carries the exchange: the queue pairs, their QPNs, first PSNs and
// private data are the application's, and its verbs move its queue pairs
// with what the exchange delivered. What the peer does arrives as
// shm::CmEvents on the owner's event ring.
//
// Active:  Bind, Resolve -> kCmAddrResolved, Connect -> REQ ... MRA (the
//          listener has it) ... REP -> kCmConnectResponse, Accept -> RTU.
// Passive: Bind, Listen; REQ -> MRA, a new id, kCmConnectRequest; Accept
//          -> REP ... RTU -> kCmEstablished (Reject -> REJ).
// UD:      Connect -> SIDR REQ ... SIDR REP -> kCmEstablished (the peer's
//          QPN and Q_Key); passive: SIDR REQ -> kCmConnectRequest, Accept
//          or Reject -> SIDR REP.
// Either:  Disconnect -> DREQ ... DREP -> kCmDisconnected; the peer's DREQ
//          -> DREP, kCmDisconnected. Then, after a time-wait,
//          kCmTimewaitExit.
// Timeouts: no ARP answer within the caller's time -> kCmAddrError; REQ,
// REP or SIDR REQ unanswered -> kCmUnreachable; DREQ unanswered ->
// kCmDisconnected all the same (status -ETIMEDOUT).
//
// Events report the peer's parameters from the receiver's side, as Linux's
// CM does: a REQ's or REP's initiator depth arrives as responder_resources
// and its responder resources as initiator_depth.
//
// Our communication ids have the top bit set (kCommIdBit); the native
// connections' CM (connection_manager.h) keeps it clear, and passes every
// message for an id of ours, or a REQ for an IP CM service id, here.
//
// Thread-compatible: the control thread only.
#ifndef RDMAPLANE_CONTROL_IP_CM_H_
#define RDMAPLANE_CONTROL_IP_CM_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "api/shm/layout.h"
#include "control/sessions.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::control {

class IpCm {
 public:
  // How messages reach other daemons: the data port (ARP and frames).
  class Link {
   public:
    virtual ~Link() = default;
    virtual std::optional<wire::MacAddr> Neighbor(uint32_t ip) const = 0;
    virtual void AskNeighbor(uint32_t ip) = 0;
    virtual void SendCm(const wire::CmMessage& m, uint32_t ip,
                        const wire::MacAddr& mac) = 0;
  };

  struct Options {
    uint32_t ip = 0;  // ours (host order)
    uint32_t path_mtu = 4096;
    uint32_t comm_id_seed = 1;
    // ids one session may hold (listeners, connections, requests waiting).
    uint32_t max_ids_per_session = 1024;
    // Events the daemon holds for a session whose ring is full, beyond
    // which new connection requests to its listeners are rejected.
    uint32_t max_held_events = 1024;
  };

  static constexpr uint32_t kCommIdBit = 0x80000000;
  // Retransmission schedule, the native connections' too
  // (connection_manager.cc).
  static constexpr uint64_t kReqIntervalNs = 250'000'000;
  static constexpr uint32_t kReqTries = 8;
  static constexpr uint64_t kKeepAliveNs = 1'000'000'000;
  static constexpr uint32_t kKeepAliveTries = 5;
  static constexpr uint64_t kRepIntervalNs = 250'000'000;
  static constexpr uint32_t kRepTries = 8;
  static constexpr uint64_t kDreqIntervalNs = 100'000'000;
  static constexpr uint32_t kDreqTries = 5;
  static constexpr uint64_t kArpIntervalNs = 200'000'000;
  // How long a disconnected id stays in time-wait: stray packets of the
  // old connection die out within a few ACK timeouts.
  static constexpr uint64_t kTimewaitNs = 100'000'000;
  // Ephemeral ports (kOpCmBind with port 0), as Linux's default range.
  static constexpr uint16_t kFirstEphemeralPort = 32768;
  static constexpr uint16_t kLastEphemeralPort = 60999;
  static constexpr uint32_t kMaxBacklog = 1024;
  static constexpr uint32_t kDefaultBacklog = 128;

  // `link` is null for a daemon without a data port: then only our own
  // address is reachable. `now_ns` is the control thread's clock.
  IpCm(const Options& options, Link* link, std::function<uint64_t()> now_ns);

  // kOpCm* of session `s`: answered at once.
  shm::ControlResponse Handle(Session* s, const shm::ControlRequest& r);
  // A CM message for us (Owns) from `from_ip`.
  void OnMessage(const wire::CmMessage& m, uint32_t from_ip,
                 const wire::MacAddr& from_mac);
  // Whether `m` belongs here rather than to the native connections' CM.
  static bool Owns(const wire::CmMessage& m);
  // ARP taught us `ip`'s MAC.
  void OnNeighbor(uint32_t ip);
  // Retransmissions, time-outs, time-wait.
  void Tick();
  // The session ends: each of its ids goes as kOpCmDestroy would take it.
  void DropSession(Session* s);
  // ids that still say farewell (DREQ) to a peer for a session that went.
  size_t farewells() const;
  size_t size() const { return ids_.size(); }
  // ids listening (rdma_listen) now.
  size_t listeners() const;

 private:
  enum class State : uint8_t {
    kBound,
    kListening,
    kResolving,  // ARP for kOpCmResolve
    kResolved,
    kAddrError,
    kReqSent,      // active: REQ or SIDR REQ out
    kMraReceived,  // active: the peer's listener holds the REQ
    kRepReceived,  // active: kCmConnectResponse out; the app's Accept
                   // (RTU) or Reject follows
    kReqReceived,  // passive: kCmConnectRequest out
    kRepSent,      // passive: REP out, waiting for RTU
    kEstablished,
    kDreqSent,
    kTimewait,
    kClosed,  // rejected, unreachable, or time-wait over
  };
  struct Id {
    uint32_t id = 0;
    Session* owner = nullptr;  // null: the session went; farewell only
    uint16_t port_space = 0;
    uint16_t local_port = 0;
    bool bound = false;  // holds local_port in ports_
    uint32_t remote_ip = 0;
    uint16_t remote_port = 0;
    wire::MacAddr remote_mac;
    State state = State::kBound;
    uint32_t backlog = 0;   // listening
    uint32_t listener = 0;  // passive: the listener it came to
    uint32_t comm_id = 0;
    uint32_t peer_comm_id = 0;
    uint64_t tid = 0;
    uint32_t peer_qpn = 0;
    uint8_t path_mtu = 0;  // code
    wire::CmMessage last;  // what Tick repeats
    uint64_t deadline_ns = 0;
    uint32_t tries = 0;
    bool ud() const { return port_space == wire::kPortSpaceUdp; }
  };

  shm::ControlResponse Bind(Session* s, const shm::CmParams& p);
  shm::ControlResponse Listen(Id* id, const shm::CmParams& p);
  shm::ControlResponse Resolve(Id* id, const shm::CmParams& p);
  shm::ControlResponse Connect(Id* id, const shm::CmParams& p);
  shm::ControlResponse Accept(Id* id, const shm::CmParams& p);
  shm::ControlResponse Reject(Id* id, const shm::CmParams& p);
  shm::ControlResponse Disconnect(Id* id);
  // kOpCmDestroy, and a session's end: a REJ for a request not accepted, a
  // DREQ for a connection (the id stays, ownerless, until its DREP).
  void Destroy(Id* id);

  void OnRequest(const wire::CmMessage& m, uint32_t from_ip,
                 const wire::MacAddr& from_mac);
  // What REQ and SIDR REQ share: the passive id an earlier copy of the
  // request made (ud: a SIDR REQ's), or null; the listener of the
  // request's service id, or null; whether it takes one more request
  // (its backlog, its owner's ids and events held); a new passive id for
  // a request to it; and the owner told (kCmConnectRequest).
  Id* RequestFrom(uint32_t from_ip, uint32_t peer_id, bool ud);
  Id* ListenerFor(const wire::CmMessage& m, bool ud);
  bool HasRoom(const Id& listener) const;
  Id* NewPassive(const Id& listener, const wire::CmMessage& m,
                 uint16_t remote_port, uint32_t from_ip,
                 const wire::MacAddr& from_mac);
  void EmitRequest(const Id& made, const shm::CmParams& p);
  void OnSidrRequest(const wire::CmMessage& m, uint32_t from_ip,
                     const wire::MacAddr& from_mac);
  void OnReply(Id* id, const wire::CmMessage& m);
  void OnSidrReply(Id* id, const wire::CmMessage& m);
  void OnReject(Id* id, const wire::CmMessage& m);
  void OnDisconnectRequest(const wire::CmMessage& m, uint32_t from_ip,
                           const wire::MacAddr& from_mac);

  // Sends m to the id's peer and, with `repeat`, keeps it for Tick.
  void Send(Id* id, const wire::CmMessage& m, uint64_t interval_ns);
  void SendTo(const wire::CmMessage& m, uint32_t ip, const wire::MacAddr& mac);
  void SendReject(uint32_t peer_comm_id, uint32_t local_comm_id, uint64_t tid,
                  uint16_t reason, wire::CmRefersTo refers_to,
                  std::span<const uint8_t> private_data, uint32_t ip,
                  const wire::MacAddr& mac);
  wire::CmMessage Simple(const Id& id, wire::CmType type) const;
  // An event of `type` about `id` for its owner (none once it went).
  void Emit(const Id& id, shm::CmEventType type, int32_t status,
            const shm::CmParams& params);
  void Emit(const Id& id, shm::CmEventType type, int32_t status = 0);
  shm::CmParams ParamsOf(const Id& id) const;
  // The id ends its connection: kCmDisconnected (with `status`), then
  // time-wait.
  void Disconnected(Id* id, int32_t status = 0);
  void Forget(Id* id);
  // Messages to our own address, delivered after the current step.
  void DrainLoopback();

  Id* Find(Session* s, uint32_t id);
  Id* FindByCommId(uint32_t comm_id);
  uint32_t IdsOf(const Session* s) const;
  uint64_t NowNs() const { return now_ns_(); }
  uint32_t NextId();
  uint32_t NextCommId();
  std::optional<uint16_t> FreePort(uint16_t port_space);

  Options options_;
  Link* link_;
  std::function<uint64_t()> now_ns_;
  std::map<uint32_t, Id> ids_;                               // by id
  std::map<std::pair<uint16_t, uint16_t>, uint32_t> ports_;  // -> id
  std::map<uint32_t, uint32_t> by_comm_id_;  // our comm id -> id
  struct Looped {
    wire::CmMessage m;
  };
  std::deque<Looped> loopback_;
  bool draining_ = false;
  uint32_t next_id_ = 1;
  uint32_t next_comm_id_;
  uint16_t next_port_ = kFirstEphemeralPort;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_IP_CM_H_
