// What the daemon shows operators (rdmaplanectl, DPDK telemetry): sessions,
// connections with their transport counters, registrations, and counters of
// the control plane, the engine and the data port.
//
// Engine-side counters (per connection, engine, port) are plain 64-bit
// values the engine thread increments; the control thread reads them
// without synchronization, so a reading may lag by a few events. They only
// ever grow, and they are 8-byte aligned, so a reading is never torn.
#include <arpa/inet.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "control/bus_error_guard.h"
#include "control/daemon.h"
#include "control/reply.h"
#include "dataplane/engine/tsc.h"
#include "dataplane/port/eth_port.h"

namespace rdmaplane::control {
namespace {

std::string MacText(const wire::MacAddr& m) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m.bytes[0],
                m.bytes[1], m.bytes[2], m.bytes[3], m.bytes[4], m.bytes[5]);
  return buf;
}

}  // namespace

DaemonStatus Daemon::BuildStatus() const {
  DaemonStatus st;
  st.version = kVersion;
  st.pid = getpid();
  st.uptime_s =
      static_cast<uint64_t>(absl::ToInt64Seconds(absl::Now() - started_));
  st.socket = options_.socket_path;
  st.poll_mode =
      options_.poll_mode == engine::PollMode::kBusy ? "busy" : "adaptive";
  st.mtu = PathMtu();
  st.link = (port_state_ & 1) != 0 ? "up" : "down";
  st.link_since_s = static_cast<uint64_t>(
      absl::ToInt64Seconds(absl::Now() - port_state_since_));
  st.link_changes = port_state_ >> 1;
  st.engines = static_cast<uint32_t>(engines_.size());
  if (port_ != nullptr) st.data_port = options_.port.device;
  // Without a data port: the address of the self link (StartSelfLink).
  st.ip = IpText(own_ip_);
  st.mac = MacText(port_mac_);
  sessions_->ForEachReady([&](const Session* s) {
    ClientStatus c;
    c.session_id = s->id;
    c.pid = s->pid;
    c.uid = s->uid;
    for (const Connection* conn : s->connections)
      c.connections += conn != nullptr;
    c.registrations = static_cast<uint32_t>(memory_.CountOwner(s->id));
    c.arenas = static_cast<uint32_t>(s->arenas.size());
    c.arena_bytes = s->arena_bytes();
    st.clients.push_back(c);
  });
  connections_->AppendStatus(&st);
  memory_.AppendStatus(&st);
  const DaemonSnapshot snap = counters_.Snapshot();
  auto add = [&st](std::string name, uint64_t v) {
    st.counters.emplace_back(std::move(name), v);
  };
  // Live values: the snapshot may predate this very query.
  uint64_t arenas = 0;
  for (const ClientStatus& c : st.clients) arenas += c.arenas;
  add("sessions", st.clients.size());
  add("connections", connections_->size());
  add("registrations", memory_.size());
  add("arenas", arenas);
  add("sessions_reclaimed", snap.sessions_reclaimed);
  add("control_requests", snap.control_requests);
  add("rejected_clients", snap.rejected_clients);
  add("bad_requests", snap.bad_requests);
  add("remote_connects", snap.remote_connects);
  add("remote_accepts", snap.remote_accepts);
  add("remote_refused", snap.remote_refused);
  add("peer_disconnects", snap.peer_disconnects);
  add("cm_retransmits", snap.cm_retransmits);
  // rdma_cm ids (IP CM) the daemon holds, and those listening now.
  add("ip_cm_ids", ip_cm_ != nullptr ? ip_cm_->size() : 0);
  add("ip_cm_listeners", ip_cm_ != nullptr ? ip_cm_->listeners() : 0);
  add("arp_replies_sent", snap.arp_replies_sent);
  add("bad_control_frames", snap.bad_control_frames);
  add("file_mappings_lost", BusErrorGuard::losses());
  // Engine counters summed over the engines.
  auto sum = [this](auto field) {
    uint64_t total = 0;
    for (const auto& e : engines_) {
      total += (e->counters().*field).load(std::memory_order_relaxed);
    }
    return total;
  };
  using engine::EngineCounters;
  add("engine_loops", sum(&EngineCounters::loops));
  add("engine_sleeps", sum(&EngineCounters::sleeps));
  add("engine_wakeups", sum(&EngineCounters::wakeups));
  add("engine_port_socket_errors", sum(&EngineCounters::port_socket_errors));
  add("engines_asleep", sum(&EngineCounters::asleep));
  add("engine_kicks_passed_on", sum(&EngineCounters::kicks_passed_on));
  add("engine_rx_unknown_qpn", sum(&EngineCounters::rx_unknown_qpn));
  add("engine_rx_rejected", sum(&EngineCounters::rx_rejected));
  add("engine_control_frames_in", sum(&EngineCounters::control_frames_in));
  add("engine_control_frames_out", sum(&EngineCounters::control_frames_out));
  add("engine_control_frames_dropped",
      sum(&EngineCounters::control_frames_dropped));
  // Each engine's cost and load: the cycles of its turns that did work
  // (tsc_hz per second), its turns, the requests its endpoints took and
  // their payload bytes.
  add("tsc_hz", engine::TscHz());
  for (size_t i = 0; i < engines_.size(); ++i) {
    const EngineCounters& c = engines_[i]->counters();
    const std::string engine = absl::StrCat("engine", i, "_");
    add(engine + "busy_cycles", c.busy_cycles);
    add(engine + "loops", c.loops.load(std::memory_order_relaxed));
    add(engine + "requests", c.load.requests);
    add(engine + "request_bytes", c.load.bytes);
  }
  if (port_ != nullptr) {
    const port::PortCounters& pc = port_->counters();
    add("port_rx_frames", pc.rx_frames);
    add("port_tx_frames", pc.tx_frames);
    add("port_rx_dropped", port_->rx_dropped());
    add("port_tx_dropped", pc.tx_dropped);
    add("port_tx_backpressure", pc.tx_backpressure);
    add("port_link_down", pc.link_down);
    add("port_reconnect_tries", pc.reconnect_tries);
    add("port_reconnects", pc.reconnects);
    add("port_burst_faults", pc.burst_faults);
    add("port_burst_fault_frames", pc.burst_fault_frames);
    add("port_mbufs_in_use", port_->mbufs_in_use());
    add("port_rx_segmented", pc.rx_segmented);
    add("port_tx_no_mbuf", pc.tx_no_mbuf);
    add("port_fault_dropped", pc.fault_dropped);
    add("port_fault_duplicated", pc.fault_duplicated);
    add("port_fault_delayed", pc.fault_delayed);
    add("port_tx_zero_copy", pc.tx_zero_copy);
    add("port_tx_zero_copy_fallback", pc.tx_zero_copy_fallback);
  }
  add("arenas_held_by_frames", arena_memory_.waiting());
  return st;
}

void Daemon::PublishStatus(bool force) {
  const absl::Time now = absl::Now();
  if (!force && now - status_published_ < absl::Milliseconds(200)) return;
  status_published_ = now;
  DaemonStatus st = BuildStatus();
  std::lock_guard<std::mutex> lock(status_mu_);
  published_status_ = std::move(st);
}

}  // namespace rdmaplane::control
