// The daemon's control plane: the Unix socket clients set up sessions on,
// the control thread that serves register/deregister and connection
// requests from the sessions' shared-memory control rings, the registration
// cache, and the engines that run the data path.
//
// Thread-safety: Start/Stop from one thread; Snapshot() is thread-safe.
// Everything else runs on the control thread.
#ifndef RDMAPLANE_CONTROL_DAEMON_H_
#define RDMAPLANE_CONTROL_DAEMON_H_

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"
#include "control/arena_memory.h"
#include "control/registration_cache.h"
#include "control/status.h"
#include "dataplane/engine/engine.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::port {
class EthPort;
}  // namespace rdmaplane::port

namespace rdmaplane::control {

// The data port towards other daemons (DPDK). Without a device, connections
// join clients of this daemon only.
struct DataPortOptions {
  // A DPDK vdev ("net_memif0,role=server,socket=/run/rdmaplane/memif.sock",
  // "net_af_packet0,iface=eth1", ...) or a PCI address (the only case in
  // which PCI probing is enabled, for that device only).
  std::string device;
  uint32_t ip = 0;                // host order; required with a device
  std::optional<wire::MacAddr> mac;  // default: the port's own
  bool hugepages = false;         // false: EAL --no-huge
  size_t memory_mb = 256;         // EAL memory without hugepages
  std::string file_prefix = "rdmaplane";
  std::vector<std::string> eal_args;
  uint32_t mbufs = 8191;
  // With pinned engines (DaemonOptions::engine_cpus): the EAL main lcore,
  // where the control thread runs (EAL -l control,engines...).
  int control_lcore = 0;
  fault::FaultSpec faults;        // injected on transmit
  // Send payload from client arenas in place where the port allows it
  // (false: always copy into packet buffers).
  bool zero_copy = true;
};

struct DaemonOptions {
  std::string socket_path;          // empty: shm::DefaultSocketPath()
  std::vector<uid_t> allowed_uids;  // besides root and the daemon's own uid
  std::vector<gid_t> allowed_gids;
  engine::PollMode poll_mode = engine::PollMode::kAdaptive;
  fault::FaultSpec link_faults;     // applied to in-process links
  uint32_t max_registrations = 1 << 16;
  // Distinct registrations one session may hold, so that no client can
  // take the whole table.
  uint32_t max_registrations_per_session = 4096;
  // Arenas one session may hand over: each holds a descriptor and a
  // mapping in the daemon, so that no client can run it out of either.
  uint32_t max_arenas_per_session = 64;
  // Connections the daemon serves at once (two endpoints each).
  uint32_t max_connections = 512;
  // Frames or requests an engine moves per endpoint and turn, and frames
  // per port burst (1..256).
  uint32_t burst = 32;
  // Engines, each a thread of its own. Connections inside the daemon go to
  // the engine serving the fewest endpoints; connections through the data
  // port to engine 0, which owns the port.
  uint32_t engines = 1;
  // CPUs the engines run on, one each (size == engines), or empty: not
  // pinned. With a data port they are EAL lcores.
  std::vector<int> engine_cpus;
  // The longest an idle adaptive engine sleeps when nothing wakes it and
  // no timer is due. Tests raise it, so that a lost wake-up shows as a
  // hang rather than as a short delay.
  uint64_t engine_max_sleep_ns = 10'000'000;
  uint32_t path_mtu = 4096;
  // First retransmission timeout of a connection inside this daemon, and of
  // one to another daemon (whose engine may be descheduled for a while on a
  // busy host); doubled after each timeout without progress.
  uint64_t retransmit_timeout_ns = 2'000'000;
  uint64_t remote_retransmit_timeout_ns = 10'000'000;
  DataPortOptions port;
};

// Counters for tests and operators.
struct DaemonSnapshot {
  uint32_t sessions = 0;
  uint32_t registrations = 0;
  uint32_t connections = 0;
  uint32_t arenas = 0;
  uint64_t sessions_reclaimed = 0;
  uint64_t control_requests = 0;
  uint64_t rejected_clients = 0;
  uint64_t bad_requests = 0;
  uint64_t remote_connects = 0;   // connection requests sent to peers
  uint64_t remote_accepts = 0;    // connections peers made to us
  uint64_t remote_refused = 0;    // REJ sent
  uint64_t peer_disconnects = 0;  // DREQ received
  uint64_t cm_retransmits = 0;
  uint64_t arp_replies_sent = 0;
  uint64_t bad_control_frames = 0;
};

class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options);
  ~Daemon();

  absl::Status Start();
  // Closes every session (outstanding work completes as aborted, clients
  // see their connections aborted), stops the engine, removes the socket.
  void Stop();

  DaemonSnapshot Snapshot() const;
  // What rdmaplanectl and DPDK telemetry show; thread-safe (a copy the
  // control thread refreshes at most every 200 ms, or at once when asked
  // over the control socket).
  DaemonStatus Status() const;
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Arena {
    uint64_t client_address = 0;
    uint64_t bytes = 0;
    uint8_t* host = nullptr;
    int fd = -1;
    // Counts frames still pointing into the arena (zero-copy transmit).
    std::unique_ptr<rc::MemoryOwner> owner;
  };
  struct Session;
  enum class CmState : uint8_t {
    kNone,           // local connection
    kResolving,      // active: waiting for the peer's ARP reply
    kReqSent,        // active: REQ sent, no answer yet
    kWaitingAccept,  // active: MRA received, the peer has not accepted
    kPassivePending, // passive: REQ queued for the listener's accept
    kRepSent,        // passive: accepted, REP sent, no RTU yet
    kEstablished,
  };
  struct Connection {
    uint32_t id = 0;
    Session* side[2] = {nullptr, nullptr};
    uint32_t slot[2] = {0, 0};
    std::unique_ptr<engine::Endpoint> endpoint[2];
    bool open[2] = {false, false};  // the side still holds its slot
    bool running = false;           // the engine serves it
    uint32_t engine = 0;            // which engine (while running)
    // Connected, not yet accepted: the connector may register and post
    // (requests wait in its ring); the listener holds no slot yet.
    bool pending = false;
    // Status for requests a closed side still had queued; the control
    // loop completes them as the client makes room.
    int32_t abort_status[2] = {0, 0};
    uint32_t qpn[2] = {0, 0};
    uint32_t psn[2] = {0, 0};
    // A connection to another daemon: side 0 is ours, side 1 unused; the
    // peer's QPN and PSN are in qpn[1] and psn[1].
    bool remote = false;
    bool passive = false;  // the peer connected to us
    uint32_t peer_ip = 0;
    wire::MacAddr peer_mac;
    std::string service;
    uint32_t pmtu = 0;
    uint32_t comm_id = 0;       // our communication id
    uint32_t peer_comm_id = 0;  // the peer's
    CmState cm = CmState::kNone;
    uint64_t cm_deadline_ns = 0;
    uint32_t cm_tries = 0;
    // A Connect the client waits for (answered when the peer answers).
    Session* waiting = nullptr;
    uint64_t waiting_request = 0;
  };
  // A DREQ we keep repeating until the peer's DREP (the connection itself
  // may be gone).
  struct Farewell {
    uint32_t peer_comm_id = 0;
    uint32_t peer_ip = 0;
    wire::MacAddr peer_mac;
    uint32_t peer_qpn = 0;
    uint64_t deadline_ns = 0;
    uint32_t tries = 0;
  };
  struct Session {
    uint32_t id = 0;
    int sock = -1;
    pid_t pid = 0;
    uid_t uid = 0;
    bool ready = false;  // hello done
    bool admin = false;  // an rdmaplanectl query, not a client
    std::unique_ptr<shm::SetupReader> setup;  // non-blocking reads
    int control_wake = -1;  // read end of the control doorbell socket
    // The read end of the engine doorbell socket, as engines watch it.
    std::unique_ptr<engine::WakeRoute> engine_wake;
    uint8_t* region = nullptr;
    uint64_t region_bytes = 0;
    int region_fd = -1;
    shm::SessionHeader* header = nullptr;
    shm::SessionHeader refs;  // ring offsets, copied once at hello
    shm::SpscRing<shm::ControlRequest> requests;
    shm::SpscRing<shm::ControlResponse> responses;
    // Attached once at hello: ring headers are never read from client
    // memory again.
    shm::SpscRing<shm::SendEntry> send[shm::kMaxConnections];
    shm::SpscRing<shm::CompletionEntry> completion[shm::kMaxConnections];
    std::map<uint32_t, Arena> arenas;  // by arena id
    Connection* connections[shm::kMaxConnections] = {};
    std::set<std::string> listening;
  };

  void ControlLoop();
  void AcceptClient();
  void HandleSocket(Session* s);
  void HandleHello(Session* s, const shm::SetupMessage& msg, int fd);
  void HandleArena(Session* s, const shm::SetupMessage& msg, int fd);
  void CloseSession(Session* s);
  // Serves every session's control ring; true if anything was answered.
  bool ServeControlRings();
  void UpdateSnapshot();
  // Control thread: the status as of now (daemon_status.cc).
  DaemonStatus BuildStatus() const;
  void PublishStatus(bool force);
  shm::ControlResponse Handle(Session* s, const shm::ControlRequest& req);
  // Host address of [address, address + length) inside one of s's arenas,
  // and that arena's owner in `owner` if given.
  uint8_t* Translate(const Session* s, uint64_t address, uint64_t length,
                     rc::MemoryOwner** owner = nullptr) const;
  shm::ControlResponse RegisterLocal(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse DeregisterLocal(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse RegisterRdma(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse DeregisterRdma(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Listen(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Unlisten(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Connect(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Accept(Session* s, const shm::ControlRequest& r);
  shm::ControlResponse Disconnect(Session* s, const shm::ControlRequest& r);
  // Closes `side` of c (status for its outstanding work) and, if running,
  // the other side with `peer_status`.
  void CloseConnection(Connection* c, int side, int32_t status,
                       int32_t peer_status);
  void MaybeDeleteConnection(Connection* c);
  // Completes every request waiting in `side`'s send ring with `status`
  // (only while the engine does not serve the connection).
  void AbortQueued(Connection* c, int side, int32_t status);
  // The listener went away before accepting: the connector sees a reset.
  void RefusePending(Connection* c);
  std::unique_ptr<engine::Endpoint> MakeEndpoint(Session* s, uint32_t slot,
                                                 uint32_t connection_id,
                                                 uint32_t local_qpn,
                                                 uint32_t remote_qpn,
                                                 uint32_t send_psn,
                                                 uint32_t recv_psn,
                                                 const Connection* remote =
                                                     nullptr);
  bool Allowed(uid_t uid, gid_t gid) const;
  static void ClearSendRing(Session* s, uint32_t slot);

  // --- Connections to other daemons (daemon_remote.cc) -------------------
  absl::Status StartPort();
  void StopPort();
  shm::ControlResponse ConnectRemote(Session* s, const shm::ControlRequest& r);
  void AcceptRemote(Connection* c, Session* s, uint32_t slot);
  // Everything the engine passed up: ARP, connection management, broken
  // connections.
  void DrainControlFrames();
  void HandleArp(std::span<const uint8_t> frame);
  void HandleCm(std::span<const uint8_t> frame);
  void OnRequest(const wire::CmMessage& m, const wire::Path& from);
  void OnMra(Connection* c, const wire::CmMessage& m);
  void OnReply(Connection* c, const wire::CmMessage& m,
               const wire::Path& from);
  void OnReject(Connection* c, const wire::CmMessage& m);
  void OnDisconnectRequest(const wire::CmMessage& m, const wire::Path& from);
  // Retransmissions and timeouts of the connection manager.
  void CmTick();
  void SendArpRequest(uint32_t ip);
  void SendCm(const wire::CmMessage& m, uint32_t peer_ip,
              const wire::MacAddr& peer_mac);
  void SendReq(Connection* c);
  void SendRep(Connection* c);
  void SendSimple(Connection* c, wire::CmType type);  // MRA, RTU
  void SendReject(uint32_t peer_comm_id, uint32_t peer_ip,
                  const wire::MacAddr& mac, uint16_t reason,
                  const std::string& text);
  void SayFarewell(Connection* c);
  // Sends (or repeats) the DREQ of `f` and schedules the next try.
  void SendDreq(uint32_t comm_id, Farewell* f, uint64_t now);
  // The peer closed or vanished: our side's work completes as reset.
  void PeerClosed(Connection* c, int32_t status, shm::ConnectionState state);
  // Answers a Connect the client still waits for; on failure the slot is
  // released and the connection forgotten (c is then gone).
  void AnswerConnect(Connection* c, int32_t status, const std::string& text);
  Connection* FindByCommId(uint32_t comm_id);
  std::unique_ptr<engine::Endpoint> MakeRemoteEndpoint(Session* s,
                                                       uint32_t slot,
                                                       Connection* c);
  uint64_t NowNs() const { return engines_[0]->clock()->NowNs(); }
  // The engine that owns the data port and talks to the control plane
  // about frames.
  engine::Engine& port_engine() const { return *engines_[0]; }
  // The engine a new connection inside the daemon goes to.
  uint32_t LeastLoadedEngine() const;
  // options.engines, within what the engines can address.
  static uint32_t EngineCount(const DaemonOptions& options) {
    return std::clamp<uint32_t>(options.engines, 1,
                                engine::WakeRoute::kMaxEngines);
  }
  // Each engine has its CPU (DaemonOptions::engine_cpus).
  bool EnginesPinned() const {
    return options_.engine_cpus.size() == options_.engines;
  }
  uint32_t NextCommId() {
    if (next_comm_id_ == 0) ++next_comm_id_;  // 0 means "none"
    return next_comm_id_++;
  }
  // Registration scope of one end of a connection: requests arriving at that
  // end may use memory registered with this scope, and nothing else may.
  static uint32_t ScopeOf(const Connection* c, int side);
  static uint32_t ScopeOf(const Session* s, uint32_t slot);
  // A free connection slot of `s`, or -1.
  static int FreeSlot(const Session* s);

  DaemonOptions options_;
  mr::RegistrationTable table_;
  RegistrationCache cache_;
  // Before the engine and the port: frames they hold may point into arenas.
  ArenaMemory arena_memory_;
  std::vector<std::unique_ptr<engine::Engine>> engines_;
  std::unique_ptr<port::EthPort> port_;
  wire::MacAddr port_mac_;
  bool dpdk_ = false;
  // Connection manager state (control thread).
  std::map<uint32_t, wire::MacAddr> neighbors_;  // ARP cache, by IPv4
  std::map<uint32_t, Farewell> farewells_;      // by our comm id
  uint32_t next_comm_id_ = 1;
  uint64_t current_request_id_ = 0;  // of the request Handle serves
  bool defer_answer_ = false;        // Handle's answer comes later
  int listen_fd_ = -1;
  // Where the socket is bound while the daemon starts (renamed to the
  // socket path once it serves).
  std::string starting_path_;
  int epoll_fd_ = -1;
  int control_eventfd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread control_thread_;

  // Control-thread state.
  std::map<int, std::unique_ptr<Session>> sessions_;  // by socket fd
  std::set<int> control_wake_fds_;
  std::map<uint32_t, std::unique_ptr<Connection>> connections_;
  std::map<std::string, Session*> listeners_;
  std::map<std::string, std::deque<std::pair<Connection*, int>>> pending_;
  uint32_t next_session_id_ = 1;
  uint32_t next_connection_id_ = 1;
  uint32_t next_arena_id_ = 1;
  uint32_t running_connections_ = 0;
  uint64_t psn_seed_ = 0x9E3779B97F4A7C15ull;

  absl::Time started_ = absl::Now();
  absl::Time status_published_ = absl::InfinitePast();
  bool telemetry_ = false;

  mutable absl::Mutex snapshot_mu_;
  DaemonSnapshot snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
  DaemonStatus published_status_ ABSL_GUARDED_BY(snapshot_mu_);
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_DAEMON_H_
