// Connections and their queue pairs: the life of every connection the daemon
// serves, whichever way it was set up. Each end a session holds is a slot of
// that session and an engine::Endpoint (its RC queue pair); the table
// allocates connection ids, QPNs and first PSNs, places connections on
// engines, hands endpoints to the engines and takes them back, and closes
// connections (the first close wins; outstanding work completes with the
// status of the reason). It also keeps the listeners and their accept
// queues (service names).
//
// Connections between two clients of this daemon are made here entirely
// (Connect, then Accept). Connections to another daemon are negotiated by
// the connection manager (connection_manager.h), which creates them here,
// starts them once the peer answered, and is told through PeerLink when
// our end accepts, closes or refuses one. Queue pairs of the verbs front
// end are connected out of band: the application creates one here
// (CreateQueuePair: our QPN), learns its peer's QPN, PSN and address
// itself, and moves it to RTR (SetQueuePairPeer; the connection manager
// resolves the peer's MAC and starts it) and RTS (StartRequester).
//
// A Connection says which kind it is (ConnectionKind) and keeps what only
// that kind has in a part of its own: QueuePairSettings, RemotePeer,
// CmExchange. The table's operations sit in files by kind: connections.cc
// (what every kind shares: ids, endpoints, engines, closing, status),
// service_connections.cc (listeners and kLocal connections) and
// queue_pairs.cc (kQueuePair and shared receive queues).
//
// Thread-compatible: the control thread only. Engines own an endpoint from
// Engine::AddPair/AddRemote until Engine::RemovePair returns.
#ifndef RDMAPLANE_CONTROL_CONNECTIONS_H_
#define RDMAPLANE_CONTROL_CONNECTIONS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/shm/layout.h"
#include "control/memory_service.h"
#include "control/sessions.h"
#include "control/status.h"
#include "dataplane/engine/endpoint.h"
#include "dataplane/engine/engine.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/rc/qp_state.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::control {

// Connection manager state of a connection to another daemon.
enum class CmState : uint8_t {
  kNone,            // local connection, or nothing more to negotiate
  kResolving,       // active: waiting for the peer's ARP reply
  kReqSent,         // active: REQ sent, no answer yet
  kWaitingAccept,   // active: MRA received, the peer has not accepted
  kPassivePending,  // passive: REQ queued for the listener's accept
  kRepSent,         // passive: accepted, REP sent, no RTU yet
  kEstablished,
  kQpResolving,     // a queue pair moving to RTR: waiting for ARP
};

// How a connection was made, and so where its other end is.
enum class ConnectionKind : uint8_t {
  // Two clients of this daemon, by service name (Connect, then Accept):
  // both ends are here, and the engine copies between them.
  kLocal,
  // Our client's Connect to another daemon's listener, through the
  // connection manager (active side); our end only.
  kToDaemon,
  // Another daemon's request to our listener, through the connection
  // manager (passive side); our end only.
  kFromDaemon,
  // A queue pair of the verbs front end, connected out of band: the
  // application gives it its peer (another daemon's queue pair, or one of
  // ours over the data port or the self link); our end only.
  kQueuePair,
};

// What a queue pair of the verbs front end keeps besides its ends: the
// settings its application gave with ibv_modify_qp, and its state.
struct QueuePairSettings {
  uint32_t pd_scope = 0;  // the protection domain peers reach through it
  // Its state (RESET, INIT, RTR, RTS, ERR), moved by kOpModifyQp. RTR is
  // entered once the peer's MAC is known (StartRemote; cm.state is
  // kQpResolving until then).
  rc::lifecycle::QpLifecycle life{rc::lifecycle::QpType::kRc};
  uint32_t retry_count = rc::QpConfig{}.retry_count;
  uint64_t retransmit_timeout_ns = 0;  // 0: the daemon's
  uint32_t rnr_retry = rc::QpConfig{}.rnr_retry;
  uint8_t min_rnr_timer = rc::QpConfig{}.min_rnr_timer;
  uint32_t qkey = 0;  // UD: the Q_Key datagrams to it must carry
  // The remote operations its responder serves (shm::kAccess* bits, others
  // ignored; verbs' qp_access_flags at RTR).
  uint8_t remote_access =
      shm::kAccessRead | shm::kAccessWrite | shm::kAccessAtomic;
  // The slot of the shared receive queue it takes receives from, or
  // shm::kNoSrq (its own receive ring).
  uint32_t srq_slot = shm::kNoSrq;
};

// The other end of a connection that is not local: where it is on the data
// port's network, and what the two ends agreed.
struct RemotePeer {
  uint32_t ip = 0;
  wire::MacAddr mac;
  uint32_t pmtu = 0;
  // READs our requester may keep outstanding at the peer (the responder
  // resources its REQ or REP offered, at most our QPs' depth) and READs the
  // peer may keep outstanding at us (its REQ's initiator depth, at most our
  // responder resources), as the CM negotiated them.
  uint32_t reads_out = rc::QpConfig{}.max_rd_atomic;
  uint32_t reads_in = rc::QpConfig{}.max_dest_rd_atomic;
};

// The connection manager's exchange for a connection to or from another
// daemon (connection_manager.cc), and the ARP resolution of a queue pair's
// peer (state kQpResolving).
struct CmExchange {
  uint32_t comm_id = 0;       // our communication id
  uint32_t peer_comm_id = 0;  // the peer's
  // The connect transaction's id: ours (wire::CmTransactionId) when we sent
  // the REQ, the REQ's as received when the peer did (the REQ, MRA, REP, RTU
  // and a REJ of the REQ or REP carry it).
  uint64_t tid = 0;
  CmState state = CmState::kNone;
  uint64_t deadline_ns = 0;
  uint32_t tries = 0;
  // A Connect the client waits for (answered when the peer answers).
  Session* waiting = nullptr;
  uint64_t waiting_request = 0;
};

struct Connection {
  uint32_t id = 0;
  ConnectionKind kind = ConnectionKind::kLocal;
  // The two ends. A connection that is not local has only side 0 (ours);
  // the peer's QPN and PSN are in qpn[1] and psn[1].
  Session* side[2] = {nullptr, nullptr};
  uint32_t slot[2] = {0, 0};
  std::unique_ptr<engine::Endpoint> endpoint[2];
  bool open[2] = {false, false};  // the side still holds its slot
  // The side's share of its user's allowance, while it holds its slot.
  UserAccounts::Charge charge[2];
  bool running = false;  // an engine serves it
  uint32_t engine = 0;   // which engine (while running)
  uint32_t qpn[2] = {0, 0};
  uint32_t psn[2] = {0, 0};
  // Made by service name (kLocal, kToDaemon, kFromDaemon): the service, and
  // whether it waits for the listener's accept -- the connector may
  // register and post meanwhile (requests wait in its ring); the listener
  // holds no slot yet.
  std::string service;
  bool pending = false;
  // By kind: kQueuePair only; every kind but kLocal; kToDaemon and
  // kFromDaemon, and kQueuePair while its peer's MAC resolves.
  QueuePairSettings queue_pair;
  RemotePeer peer;
  CmExchange cm;

  bool remote() const { return kind != ConnectionKind::kLocal; }
  bool passive() const { return kind == ConnectionKind::kFromDaemon; }
  bool is_queue_pair() const { return kind == ConnectionKind::kQueuePair; }
  // Which side `s`'s slot `slot` is.
  int SideOf(const Session* s, uint32_t slot_index) const {
    return side[0] == s && slot[0] == slot_index ? 0 : 1;
  }
};

// What the connection manager does when our end of a connection to another
// daemon changes.
class PeerLink {
 public:
  virtual ~PeerLink() = default;
  // Our listener accepted a connection the peer requested (REP).
  virtual void Accepted(Connection* c) = 0;
  // Our end closed (DREQ).
  virtual void Closed(Connection* c) = 0;
  // A request of the peer our listener will never accept (REJ).
  virtual void Refused(Connection* c) = 0;
};

struct ConnectionOptions {
  // Connections the daemon serves at once.
  uint32_t max_connections = 512;
  uint32_t path_mtu = 4096;
  // First retransmission timeout inside this daemon and towards another.
  uint64_t retransmit_timeout_ns = 2'000'000;
  uint64_t remote_retransmit_timeout_ns = 10'000'000;
  fault::FaultSpec link_faults;  // on in-process links
  // Connections waiting for a listener's accept.
  uint32_t accept_backlog = 16;
};

class ConnectionTable {
 public:
  // `engines`: the daemon's engines; engine 0 owns the data port, if any.
  // `psn_seed` varies first PSNs from one daemon run to the next.
  ConnectionTable(const ConnectionOptions& options,
                  std::vector<engine::Engine*> engines, MemoryService* memory,
                  UserAccounts* accounts, uint64_t psn_seed);
  ~ConnectionTable();
  ConnectionTable(const ConnectionTable&) = delete;
  ConnectionTable& operator=(const ConnectionTable&) = delete;

  // Where connections to queue pairs outside this table's pairs go: the
  // data port's transmit side, or an engine's link to itself (a daemon
  // without a data port), with our address on it; `link` (null without a
  // data port) hears of their changes.
  void AttachPort(rc::FrameSink* tx, const wire::MacAddr& mac, uint32_t ip,
                  PeerLink* link);

  // --- Control operations of a session ----------------------------------
  shm::ControlResponse Listen(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Unlisten(Session* s, const shm::ControlRequest& r);
  // To a listener of this daemon.
  shm::ControlResponse Connect(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Accept(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Disconnect(Session* s, const shm::ControlRequest& r);
  // The session ends: every connection it holds closes (its work aborted,
  // peers reset; with `daemon_stopping`, aborted on both ends) and its
  // listeners go (queued connectors are refused). When this returns, no
  // engine serves any of its connections.
  void CloseSession(Session* s, bool daemon_stopping);

  // The registration scope of the connection in `slot` of `s`: for a new
  // registration the connection must be up or pending; a deregistration
  // needs only that the session still holds the slot.
  std::optional<uint32_t> RegistrationScope(const Session& s,
                                            uint32_t slot) const;
  std::optional<uint32_t> DeregistrationScope(const Session& s,
                                              uint32_t slot) const;

  // --- Queue pairs connected out of band (verbs) --------------------------
  // kOpCreateQp: a queue pair of `type` (RC or UC) in a free slot of `s`,
  // in the protection domain `pd_scope`, charged like a connection end;
  // answers the slot and our QPN. Not served until SetQueuePairPeer and
  // StartRemote.
  shm::ControlResponse CreateQueuePair(Session* s, uint32_t pd_scope,
                                       rc::lifecycle::QpType type,
                                       const shm::SlotDepths& depths = {},
                                       uint32_t srq_slot = shm::kNoSrq);
  // kOpCreateSrq / kOpDestroySrq: a slot whose receive ring queue pairs
  // share; destroyed only once no queue pair uses it.
  shm::ControlResponse CreateSharedReceiveQueue(
      Session* s, const shm::SlotDepths& depths = {});
  shm::ControlResponse DestroySharedReceiveQueue(Session* s, uint32_t slot);
  // The queue pair in `slot` of `s`, or null.
  Connection* QueuePair(const Session& s, uint32_t slot) const;
  // kQpToRtr: checks and takes the peer's QPN, first PSN, path MTU (at most
  // ours), READ depths and retry settings (nothing changed when refused).
  // The caller checked that the queue pair is at INIT with no RTR under way
  // (Daemon::ModifyQueuePair, against the lifecycle's table).
  shm::ControlResponse SetQueuePairPeer(Connection* c, const shm::QpPeer& p);
  // kQpToRts: our requester's first PSN, retry count, timeout and RNR
  // retry count (checked).
  shm::ControlResponse StartRequester(Connection* c, const shm::QpPeer& p);
  // kQpToRts (from RTR or RTS): the remote operations the responder serves
  // and its RNR timer, where p marks them with their Set bits (checked;
  // nothing changed when refused), at once for a running queue pair.
  shm::ControlResponse ModifyResponder(Connection* c, const shm::QpPeer& p);
  // kQpToErr: the engine stops serving it; every request posted and not
  // finished ends flushed (the client sees the slot's final state). The
  // slot and QPN stay.
  void StopQueuePair(Connection* c);
  // kQpToReset: as CreateQueuePair made it, with the same slot and QPN (a
  // new first PSN); stopped first when it still runs.
  void ResetQueuePair(Connection* c);

  // --- Connections to other daemons (the connection manager) --------------
  // A new connection with its id, our QPN and first PSN; the caller fills
  // in the rest.
  Connection* Create();
  // Removes a connection no engine serves and no session holds.
  void Forget(Connection* c);
  Session* Listener(const std::string& service) const;
  // The service listened on whose name `is_it` accepts, of those that
  // begin with `prefix`; empty when none.
  std::string ListenedService(
      std::string_view prefix,
      const std::function<bool(std::string_view)>& is_it) const;
  bool AcceptQueueFull(const std::string& service) const;
  // Queues a passive connection for the listener's Accept.
  void QueueForAccept(const std::string& service, Connection* c);
  // Drops `c` from the accept queues.
  void Unqueue(Connection* c);
  // An established connection to another daemon: our endpoint starts.
  void StartRemote(Connection* c);
  // The peer closed (kPeerClosed) or vanished (kTransportError): our end
  // closes for that reason.
  void PeerClosed(Connection* c, engine::CloseReason reason);
  // The connection will never be accepted: a peer daemon's request is
  // rejected; a connector of ours is reset.
  void RefusePending(Connection* c);
  bool AtCapacity() const { return running_ >= options_.max_connections; }
  // What the queue pairs of connections get (the CM describes it to peers).
  const ConnectionOptions& options() const { return options_; }
  // A connection end for `s`, charged to its user; kStatusLimit with the
  // reason in `refusal` when the daemon or the user is at its limit.
  std::optional<UserAccounts::Charge> ChargeEnd(const Session& s,
                                                shm::ControlResponse* refusal);
  Connection* Find(uint32_t id) const;
  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (auto& [id, c] : connections_) fn(c.get());
  }

  uint32_t size() const { return static_cast<uint32_t>(connections_.size()); }
  void AppendStatus(DaemonStatus* status) const;

 private:
  std::unique_ptr<engine::Endpoint> MakeEndpoint(Session* s, uint32_t slot,
                                                 const Connection* c, int side);
  // Closes `side` of c for `reason` and, if an engine serves it, the other
  // side for `peer_reason`; memory registered for it becomes unreachable.
  void CloseConnection(Connection* c, int side, engine::CloseReason reason,
                       engine::CloseReason peer_reason);
  // Ends `side` of a connection no engine serves: its endpoint closes (on
  // this thread), or, with none yet, the client is told directly.
  void Finish(Connection* c, int side, engine::CloseReason reason);
  void MaybeDelete(Connection* c);
  // The first retransmission timeout of c's queue pair: its application's
  // (verbs), else the daemon's for its kind of connection.
  uint64_t RetransmitTimeoutNs(const Connection& c) const;
  // The engine a new connection inside the daemon goes to.
  uint32_t LeastLoadedEngine() const;
  uint32_t NextPsn();
  void Refuse(std::deque<Connection*> queue);

  ConnectionOptions options_;
  std::vector<engine::Engine*> engines_;
  MemoryService* memory_;
  UserAccounts* accounts_;
  rc::FrameSink* port_tx_ = nullptr;
  wire::MacAddr port_mac_;
  uint32_t port_ip_ = 0;
  PeerLink* link_ = nullptr;
  std::map<uint32_t, std::unique_ptr<Connection>> connections_;
  std::map<std::string, Session*> listeners_;
  std::map<std::string, std::deque<Connection*>> pending_;
  uint32_t next_id_ = 1;
  uint32_t running_ = 0;
  uint64_t psn_seed_;
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_CONNECTIONS_H_
