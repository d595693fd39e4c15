// rdmaplaned's control plane: the options, and the Daemon that runs the
// control thread (serving the sessions' shared-memory control rings, their
// setup sockets and the connection manager) and the engines that run the
// data path.
//
// Thread-safety: Start/Stop from one thread; Snapshot() and Status() are
// thread-safe. Everything else runs on the control thread.
#ifndef RDMAPLANE_CONTROL_DAEMON_H_
#define RDMAPLANE_CONTROL_DAEMON_H_

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "api/shm/setup.h"
#include "control/arena_memory.h"
#include "control/connections.h"
#include "control/counters.h"
#include "control/ip_cm.h"
#include "control/memory_service.h"
#include "control/reactor.h"
#include "control/sessions.h"
#include "control/status.h"
#include "control/user_accounts.h"
#include "dataplane/engine/engine.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/wire/cm.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::port {
class EthPort;
}  // namespace rdmaplane::port

namespace rdmaplane::control {

// The daemon's version, as `rdmaplanectl status` and `rdmaplaned --version`
// show it, and the Debian package is numbered (deploy/package.sh).
inline constexpr char kVersion[] = "0.4.0";

// The data port towards other daemons (DPDK). Without a device, connections
// join clients of this daemon only.
struct DataPortOptions {
  // A DPDK vdev ("net_memif0,role=server,socket=/run/rdmaplane/memif.sock",
  // "net_af_packet0,iface=eth1", ...) or a PCI address (the only case in
  // which PCI probing is enabled, for that device only).
  std::string device;
  uint32_t ip = 0;                   // host order; required with a device
  std::optional<wire::MacAddr> mac;  // default: the port's own
  bool hugepages = false;            // false: EAL --no-huge
  size_t memory_mb = 256;            // EAL memory without hugepages
  std::string file_prefix = "rdmaplane";
  std::vector<std::string> eal_args;
  uint32_t mbufs = 8191;
  // With pinned engines (DaemonOptions::engine_cpus): the EAL main lcore,
  // where the control thread runs (EAL -l control,engines...).
  int control_lcore = 0;
  fault::FaultSpec faults;  // injected on transmit
  // Send payload from client arenas in place where the port allows it
  // (false: always copy into packet buffers).
  bool zero_copy = true;
};

struct DaemonOptions {
  std::string socket_path;          // empty: shm::DefaultSocketPath()
  std::vector<uid_t> allowed_uids;  // besides root and the daemon's own uid
  std::vector<gid_t> allowed_gids;
  std::vector<gid_t> admin_gids;  // SessionPolicy::admin_gids
  engine::PollMode poll_mode = engine::PollMode::kAdaptive;
  fault::FaultSpec link_faults;  // applied to in-process links
  uint32_t max_registrations = 1 << 16;
  // Distinct registrations one session may hold, so that no client can
  // take the whole table.
  uint32_t max_registrations_per_session = 4096;
  // Arenas one session may hand over: each holds a descriptor and a
  // mapping in the daemon, so that no client can run it out of either.
  uint32_t max_arenas_per_session = 64;
  // Connections the daemon serves at once (two endpoints each).
  uint32_t max_connections = 512;
  // What each user may hold at once (user_accounts.h).
  UserLimits user_limits;
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
  // RoCE path MTU towards other daemons: 256..4096, or 0 for the largest
  // the data port carries as it is: 4096 over memif; over a kernel
  // interface (af_packet, af_xdp, tap) what its MTU carries, which the
  // daemon leaves alone (at most 2048 over af_xdp, 1024 over tap); otherwise what the device reports as its largest
  // frame allows. An explicit MTU raises the interface's where needed.
  // Connections between this daemon's own clients use 4096 unless it is
  // set.
  uint32_t path_mtu = 0;
  // First retransmission timeout of a connection inside this daemon, and of
  // one to another daemon (whose engine may be descheduled for a while on a
  // busy host); doubled after each timeout without progress.
  uint64_t retransmit_timeout_ns = 2'000'000;
  uint64_t remote_retransmit_timeout_ns = 10'000'000;
  DataPortOptions port;
};

class ConnectionManager;

// The daemon: wires the control-plane parts together and runs them on its
// control thread, with the engines that run the data path.
//
//   SessionServer     client sessions and arenas (sessions.h)
//   MemoryService     registrations (memory_service.h)
//   ConnectionTable   connections and their queue pairs (connections.h)
//   ConnectionManager CM and ARP towards other daemons (connection_manager.h)
//   ControlCounters   counters; the status snapshot below
//
// The daemon owns their state's lifetime and dispatches each session's
// control requests to the part that serves them.
class Daemon {
 public:
  explicit Daemon(const DaemonOptions& options);
  ~Daemon();

  absl::Status Start();
  // Closes every session (outstanding work completes as aborted, clients
  // see their connections aborted), stops the engine, removes the socket.
  void Stop();

  DaemonSnapshot Snapshot() const { return counters_.Snapshot(); }
  // What rdmaplanectl and DPDK telemetry show; thread-safe (a copy the
  // control thread refreshes at most every 200 ms, or at once when asked
  // over the control socket).
  DaemonStatus Status() const;
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  void ControlLoop();
  // Serves every session's control ring; true if anything was answered.
  bool ServeControlRings();
  // The answer to one request, or nullopt when it comes later.
  std::optional<shm::ControlResponse> Handle(Session* s,
                                             const shm::ControlRequest& req);
  // kOpModifyQp: a verbs queue pair moves to RTR or RTS.
  std::optional<shm::ControlResponse> ModifyQueuePair(
      Session* s, const shm::ControlRequest& req);
  // kOpQueryDevice: what the verbs front end reports as its device.
  shm::ControlResponse QueryDevice() const;
  // kOpCreateAh: a UD address handle for an IPv4 destination, answered
  // once its MAC is known (now, or, nullopt, when ARP answers or gives up).
  std::optional<shm::ControlResponse> CreateAddressHandle(
      Session* s, const shm::ControlRequest& req);
  shm::ControlResponse DestroyAddressHandle(Session* s,
                                            const shm::ControlRequest& req);
  // Answers the address-handle creations whose ARP answered or timed out,
  // and repeats the ARP requests of the others.
  void ResolveAddressHandles();
  // Creations waiting in some session's pending_address_handles.
  size_t pending_address_handles_ = 0;
  // What the port engine passed up: memory window requests of its queue
  // pairs, and for the connection manager frames and broken connections.
  void DrainEngineFrames();
  // Carries out a memory window request, or keeps it for later
  // (pending_local_ops_) when it cannot run yet; true when it was answered
  // or can never be (its queue pair is gone).
  bool HandleLocalOp(uint32_t scope, const engine::LocalOpRequest& op);
  struct PendingLocalOp {
    uint32_t scope;
    engine::LocalOpRequest op;
  };
  std::vector<PendingLocalOp> pending_local_ops_;
  // Retries the pending requests and window removals; true while any
  // still waits.
  bool RetryMemoryWindows();
  // A session is ending: its connections, listeners and registrations go.
  void SessionClosing(Session* s);
  void UpdateGauges();
  // Writes the data port's link state into every session's header when it
  // changed (shm::SessionHeader::port_state); control thread.
  void PublishPortState();
  uint32_t port_state_ = 1;  // up, no change yet (port_state's format)
  absl::Time port_state_since_;  // when port_state_ last changed
  uint64_t next_port_look_ns_ = 0;
  // Control thread: the status as of now (daemon_status.cc).
  DaemonStatus BuildStatus() const;
  void PublishStatus(bool force);
  absl::Status StartPort();
  // Without a data port the daemon is a network of its own: its queue pairs
  // reach each other (loopback) over the port engine's link to itself, and
  // nothing else.
  void StartSelfLink();
  // The rdma_cm service, over `link` (null: no data port).
  void StartIpCm(IpCm::Link* link);
  // A locally administered MAC (02:...) that no device has.
  static constexpr wire::MacAddr kSelfLinkMac{{0x02, 0x72, 0x64, 0x70, 0, 1}};
  // Why a request to reach another address is refused without a data port.
  std::string NoDataPort() const;
  void StopPort();
  uint64_t NowNs() const { return engines_[0]->clock()->NowNs(); }
  engine::Engine& port_engine() const { return *engines_[0]; }
  // The path MTU of connections inside the daemon, and of those to other
  // daemons once StartPort has resolved --mtu=0: the largest, 4096, unless
  // set.
  static constexpr uint32_t kLargestPathMtu =
      wire::IbMtuBytes(wire::kIbMtu4096);
  uint32_t PathMtu() const {
    return options_.path_mtu != 0 ? options_.path_mtu : kLargestPathMtu;
  }
  // The path MTU --mtu=0 gives that the device string alone tells (memif in
  // its copy mode, af_packet on its interface), or 0 when the device must
  // be asked once it is open.
  static uint32_t PathMtuBeforeOpen(const std::string& device);
  // options.engines, within what the engines can address.
  static uint32_t EngineCount(const DaemonOptions& options) {
    return std::clamp<uint32_t>(options.engines, 1,
                                engine::WakeRoute::kMaxEngines);
  }
  // Each engine has its CPU (DaemonOptions::engine_cpus).
  bool EnginesPinned() const {
    return options_.engine_cpus.size() == options_.engines;
  }

  DaemonOptions options_;
  uint64_t seed_;  // varies ids and PSNs from one daemon run to the next
  ControlCounters counters_;
  UserAccounts accounts_;
  mr::RegistrationTable table_;
  MemoryService memory_;
  // Before the engines and the port: frames they hold may point into
  // arenas.
  ArenaMemory arena_memory_;
  std::vector<std::unique_ptr<engine::Engine>> engines_;
  std::unique_ptr<port::EthPort> port_;
  // Our address: the data port's, or without one (see StartSelfLink) --ip,
  // else 127.0.0.1, and kSelfLinkMac.
  uint32_t own_ip_ = 0;
  wire::MacAddr port_mac_;
  bool dpdk_ = false;
  Reactor reactor_;
  std::unique_ptr<ConnectionTable> connections_;
  std::unique_ptr<ConnectionManager> cm_;  // with a data port only
  // The sessions' rdma_cm ids, over cm_ (or, without a data port, among
  // this daemon's own).
  std::unique_ptr<IpCm> ip_cm_;
  std::unique_ptr<SessionServer> sessions_;
  std::atomic<bool> stop_{false};
  std::thread control_thread_;

  absl::Time started_ = absl::Now();
  absl::Time status_published_ = absl::InfinitePast();
  bool telemetry_ = false;

  mutable std::mutex status_mu_;
  DaemonStatus published_status_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_DAEMON_H_
