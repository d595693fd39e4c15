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

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"
#include "control/registration_cache.h"
#include "dataplane/engine/engine.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::control {

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
  // Connections the engine serves at once (two endpoints each).
  uint32_t max_connections = 512;
  uint32_t path_mtu = 4096;
  uint64_t retransmit_timeout_ns = 2'000'000;
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
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Arena {
    uint64_t client_address = 0;
    uint64_t bytes = 0;
    uint8_t* host = nullptr;
    int fd = -1;
  };
  struct Session;
  struct Connection {
    uint32_t id = 0;
    Session* side[2] = {nullptr, nullptr};
    uint32_t slot[2] = {0, 0};
    std::unique_ptr<engine::Endpoint> endpoint[2];
    bool open[2] = {false, false};  // the side still holds its slot
    bool running = false;           // the engine serves it
    // Connected, not yet accepted: the connector may register and post
    // (requests wait in its ring); the listener holds no slot yet.
    bool pending = false;
    // Status for requests a closed side still had queued; the control
    // loop completes them as the client makes room.
    int32_t abort_status[2] = {0, 0};
    uint32_t qpn[2] = {0, 0};
    uint32_t psn[2] = {0, 0};
  };
  struct Session {
    uint32_t id = 0;
    int sock = -1;
    pid_t pid = 0;
    uid_t uid = 0;
    bool ready = false;  // hello done
    std::unique_ptr<shm::SetupReader> setup;  // non-blocking reads
    int control_wake = -1;  // read ends of the session's doorbell pipes
    int engine_wake = -1;
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
  shm::ControlResponse Handle(Session* s, const shm::ControlRequest& req);
  // Host address of [address, address + length) inside one of s's arenas.
  uint8_t* Translate(const Session* s, uint64_t address, uint64_t length) const;
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
                                                 uint32_t recv_psn);
  bool Allowed(uid_t uid, gid_t gid) const;
  // Registration scope of one end of a connection: requests arriving at that
  // end may use memory registered with this scope, and nothing else may.
  static uint32_t ScopeOf(const Connection* c, int side);
  static uint32_t ScopeOf(const Session* s, uint32_t slot);
  // A free connection slot of `s`, or -1.
  static int FreeSlot(const Session* s);

  DaemonOptions options_;
  mr::RegistrationTable table_;
  RegistrationCache cache_;
  std::unique_ptr<engine::Engine> engine_;
  int listen_fd_ = -1;
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

  mutable absl::Mutex snapshot_mu_;
  DaemonSnapshot snapshot_ ABSL_GUARDED_BY(snapshot_mu_);
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_DAEMON_H_
