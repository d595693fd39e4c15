// What an operator can see of a running daemon, and its two renderings:
// JSON for scripts and aligned tables for people. The daemon fills a
// DaemonStatus; rdmaplanectl (over the control socket) and DPDK telemetry
// show it.
//
// Topics: "status" (the scalar header fields and the number of clients,
// connections and registrations), "clients", "connections",
// "registrations", "counters".
//
// Plain data and pure functions: thread-compatible.
#ifndef RDMAPLANE_CONTROL_STATUS_H_
#define RDMAPLANE_CONTROL_STATUS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rdmaplane::control {

struct ClientStatus {
  uint32_t session_id = 0;
  int pid = 0;
  uint32_t uid = 0;
  uint32_t connections = 0;
  uint32_t registrations = 0;
  uint32_t arenas = 0;
  uint64_t arena_bytes = 0;
};

struct ConnectionStatus {
  uint32_t id = 0;
  uint32_t session_id = 0;
  uint32_t slot = 0;
  std::string service;
  std::string peer;     // "local" or the peer's IP address, e.g. "10.0.0.2"
  std::string state;    // "pending", "connecting", "up", "closing"
  uint32_t engine = 0;  // index of the engine serving it
  uint32_t local_qpn = 0;
  uint32_t remote_qpn = 0;
  uint64_t posted = 0;
  uint64_t completed = 0;
  uint64_t tx_packets = 0;
  uint64_t rx_packets = 0;
  uint64_t retransmitted_packets = 0;
  uint64_t timeouts = 0;
  uint64_t naks_sent = 0;
  uint64_t naks_received = 0;
  // Requests this end's responder refused: remote access errors (bad key,
  // rights or range) and invalid requests (unserved opcodes, bad lengths).
  uint64_t access_errors = 0;
  uint64_t invalid_requests = 0;
  uint64_t pkey_violations = 0;  // frames of another partition, dropped
  uint64_t bad_responses = 0;    // responses that broke the protocol
};

struct RegistrationStatus {
  uint32_t key = 0;
  uint32_t session_id = 0;
  uint32_t connection = 0;  // 0: a local key
  uint64_t address = 0;
  uint64_t length = 0;
  uint32_t access = 0;  // shm::kAccessRead | shm::kAccessWrite
  uint32_t refs = 0;
};

struct DaemonStatus {
  std::string version;
  int pid = 0;
  uint64_t uptime_s = 0;
  std::string socket;
  std::string data_port;
  std::string ip;
  std::string mac;
  uint32_t mtu = 0;
  // The data port's link as the device reports it ("up" or "down"); a
  // daemon without one serves its self link, always "up".
  std::string link;
  // Seconds the link has been as `link` says, and how many times it went
  // up or down since the daemon started.
  uint64_t link_since_s = 0;
  uint64_t link_changes = 0;
  std::string poll_mode;
  uint32_t engines = 0;
  std::vector<ClientStatus> clients;
  std::vector<ConnectionStatus> connections;
  std::vector<RegistrationStatus> registrations;
  // What the asker may see: "all", or "own" (KeepOnlyOwn: its own clients
  // and their connections and registrations). What was left out for it
  // is counted here; "status" shows the daemon's totals either way.
  std::string view = "all";
  uint32_t hidden_clients = 0;
  uint32_t hidden_connections = 0;
  uint32_t hidden_registrations = 0;
  // The daemon's totals, whatever the asker is shown.
  uint64_t total_clients() const { return clients.size() + hidden_clients; }
  uint64_t total_connections() const {
    return connections.size() + hidden_connections;
  }
  uint64_t total_registrations() const {
    return registrations.size() + hidden_registrations;
  }
  // Name and value, shown in this order; e.g. port_rx_frames,
  // engine_sleeps, sessions_reclaimed.
  std::vector<std::pair<std::string, uint64_t>> counters;
};

inline constexpr std::array<std::string_view, 5> kStatusTopics = {
    "status", "clients", "connections", "registrations", "counters"};

// True for one of kStatusTopics (exact, lower case).
bool ValidTopic(std::string_view topic);

// Leaves in `status` only what user `uid` holds: its clients, and the
// connections and registrations of their sessions. What goes is counted in
// hidden_*, and view becomes "own". The daemon answers so whoever may not
// see other users' details (docs/operations.md, "Who may see what").
void KeepOnlyOwn(DaemonStatus* status, uint32_t uid);

// JSON text (UTF-8, no trailing newline). "status" and "counters" are
// objects (counters: {"name": value, ...}); the three lists are arrays of
// objects whose keys are the struct's field names. Strings are escaped;
// bytes that are not UTF-8 become U+FFFD. An invalid topic gives "".
std::string RenderJson(const DaemonStatus& status, std::string_view topic);

// Aligned tables (or "name  value" lines for "status" and "counters"),
// ending in a newline. Control characters in strings are shown escaped, so
// one row is always one line. An invalid topic gives "".
std::string RenderText(const DaemonStatus& status, std::string_view topic);

// `text` as the body of a JSON string (without the quotes): '"', '\\' and
// control characters escaped, invalid UTF-8 replaced with U+FFFD.
std::string JsonEscape(std::string_view text);

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_STATUS_H_
