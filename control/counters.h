// The control plane's counters and gauges, as tests and operators read them
// (Daemon::Snapshot, rdmaplanectl counters).
//
// Thread-safe: the control thread writes them, any thread reads them; all
// relaxed atomics (each value stands alone, none orders anything).
#ifndef RDMAPLANE_CONTROL_COUNTERS_H_
#define RDMAPLANE_CONTROL_COUNTERS_H_

#include <atomic>
#include <cstdint>

namespace rdmaplane::control {

// A copy of the counters at one moment (each value read on its own).
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

class ControlCounters {
 public:
  using Counter = std::atomic<uint64_t> ControlCounters::*;

  // Control thread.
  void Count(Counter c, uint64_t n = 1) {
    (this->*c).fetch_add(n, std::memory_order_relaxed);
  }
  void SetGauges(uint32_t sessions, uint32_t registrations,
                 uint32_t connections, uint32_t arenas) {
    sessions_.store(sessions, std::memory_order_relaxed);
    registrations_.store(registrations, std::memory_order_relaxed);
    connections_.store(connections, std::memory_order_relaxed);
    arenas_.store(arenas, std::memory_order_relaxed);
  }

  // Any thread.
  DaemonSnapshot Snapshot() const;

  std::atomic<uint64_t> sessions_reclaimed{0};
  std::atomic<uint64_t> control_requests{0};
  std::atomic<uint64_t> rejected_clients{0};
  std::atomic<uint64_t> bad_requests{0};
  std::atomic<uint64_t> remote_connects{0};
  std::atomic<uint64_t> remote_accepts{0};
  std::atomic<uint64_t> remote_refused{0};
  std::atomic<uint64_t> peer_disconnects{0};
  std::atomic<uint64_t> cm_retransmits{0};
  std::atomic<uint64_t> arp_replies_sent{0};
  std::atomic<uint64_t> bad_control_frames{0};

 private:
  std::atomic<uint32_t> sessions_{0};
  std::atomic<uint32_t> registrations_{0};
  std::atomic<uint32_t> connections_{0};
  std::atomic<uint32_t> arenas_{0};
};

inline DaemonSnapshot ControlCounters::Snapshot() const {
  auto get = [](const auto& a) { return a.load(std::memory_order_relaxed); };
  DaemonSnapshot s;
  s.sessions = get(sessions_);
  s.registrations = get(registrations_);
  s.connections = get(connections_);
  s.arenas = get(arenas_);
  s.sessions_reclaimed = get(sessions_reclaimed);
  s.control_requests = get(control_requests);
  s.rejected_clients = get(rejected_clients);
  s.bad_requests = get(bad_requests);
  s.remote_connects = get(remote_connects);
  s.remote_accepts = get(remote_accepts);
  s.remote_refused = get(remote_refused);
  s.peer_disconnects = get(peer_disconnects);
  s.cm_retransmits = get(cm_retransmits);
  s.arp_replies_sent = get(arp_replies_sent);
  s.bad_control_frames = get(bad_control_frames);
  return s;
}

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_COUNTERS_H_
