// Test helpers: an in-process rdmaplaned on a private socket, and a pair of
// connected clients with registered buffers.
#ifndef RDMAPLANE_TESTS_TESTING_TEST_UTIL_H_
#define RDMAPLANE_TESTS_TESTING_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

#include "api/client.h"
#include "control/daemon.h"
#include "tests/testing/hang_limit.h"

namespace rdmaplane::testing {

// Unix socket paths are limited to 108 bytes, which Bazel's TEST_TMPDIR
// exceeds; /tmp is private to each sandboxed test anyway.
inline std::string TempSocketPath(const std::string& name) {
  return "/tmp/rdp-" + name + "-" + std::to_string(getpid()) + ".sock";
}

struct TestDaemon {
  explicit TestDaemon(const std::string& name,
                      control::DaemonOptions options = {}) {
    options.socket_path = TempSocketPath(name);
    daemon = std::make_unique<control::Daemon>(options);
    start_status = daemon->Start();
  }
  ~TestDaemon() { daemon->Stop(); }

  std::unique_ptr<Client> NewClient() {
    ClientOptions o;
    o.socket_path = daemon->socket_path();
    o.arena_bytes = 16 << 20;
    auto c = Client::Open(o);
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::unique_ptr<control::Daemon> daemon;
  absl::Status start_status;
};

// Two clients joined by one connection.
struct ConnectedPair {
  explicit ConnectedPair(TestDaemon& d, const std::string& service = "svc") {
    server = d.NewClient();
    client = d.NewClient();
    if (server == nullptr || client == nullptr) return;
    if (!server->Listen(service).ok()) return;
    auto c = client->Connect(service);
    if (!c.ok()) return;
    client_conn = *c;
    auto s = server->Accept(service, kHangLimit);
    if (!s.ok()) return;
    server_conn = *s;
    ok = true;
  }
  std::unique_ptr<Client> server;
  std::unique_ptr<Client> client;
  rdp_conn server_conn = 0;
  rdp_conn client_conn = 0;
  bool ok = false;
};

// Waits until the daemon holds `sessions` client sessions (a closed client's
// session goes when the daemon notices the socket closed); false after
// `timeout`, which only turns a hang into a failure.
inline bool WaitForSessions(const control::Daemon& daemon, uint32_t sessions,
                            absl::Duration timeout = kHangLimit) {
  return WaitFor([&] { return daemon.Snapshot().sessions == sessions; },
                 timeout);
}

}  // namespace rdmaplane::testing

#endif  // RDMAPLANE_TESTS_TESTING_TEST_UTIL_H_
