#include "control/status_sample.h"

namespace rdmaplane::control {

const std::vector<std::string>& OddServiceNames() {
  static const std::vector<std::string> names = {
      "plain",
      "quote\"back\\slash",
      "new\nline\ttab\rcr",
      std::string("nul\0byte", 8),
      "\x01\x1f\x7f control",
      "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
      "</script>&<'>",
      "",
  };
  return names;
}

DaemonStatus SampleStatus() {
  DaemonStatus s;
  s.version = "0.3.1 \"dev\"";
  s.pid = 4242;
  s.uptime_s = 93784;  // 1d 2h 3m 4s
  s.socket = "/run/rdmaplane/rdmaplane.sock";
  s.data_port = "net_ring0";
  s.ip = "10.0.0.1";
  s.mac = "02:00:00:00:00:01";
  s.mtu = 4096;
  s.link = "up";
  s.link_since_s = 3723;  // 1h 2m 3s
  s.link_changes = 3;
  s.poll_mode = "adaptive";
  s.engines = 2;
  s.clients.push_back({1, 100, 1000, 2, 3, 1, 64ull << 20});
  s.clients.push_back({2, 200, 0, 0, 0, 4, 1536});
  uint32_t id = 1;
  for (const std::string& name : OddServiceNames()) {
    ConnectionStatus c;
    c.id = id;
    c.session_id = 1;
    c.slot = id - 1;
    c.service = name;
    c.peer = id % 2 ? "local" : "10.0.0.2";
    c.state = "up";
    c.engine = id % 2;
    c.local_qpn = 0x11 + id;
    c.remote_qpn = 0x21 + id;
    c.posted = 1000 + id;
    c.completed = 999 + id;
    c.tx_packets = 18446744073709551615ull;
    c.rx_packets = 7;
    c.retransmitted_packets = 3;
    c.timeouts = 1;
    c.naks_sent = 2;
    c.naks_received = 4;
    c.access_errors = 5;
    c.invalid_requests = 6;
    c.pkey_violations = 8;
    c.bad_responses = 9;
    s.connections.push_back(c);
    ++id;
  }
  s.registrations.push_back({0x1234ab, 1, 0, 0x7f0000001000, 4096, 1, 1});
  s.registrations.push_back({0x5678cd, 1, 2, 0x7f0000002000, 1 << 20, 3, 2});
  s.counters = {{"port_rx_frames", 12345},
                {"engine_sleeps", 0},
                {"sessions_reclaimed", 18446744073709551615ull}};
  return s;
}

}  // namespace rdmaplane::control
