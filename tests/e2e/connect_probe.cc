// connect_probe: one Client::Connect to a service at a peer daemon, and what
// came of it. The end-to-end tests use it to check that connections which
// cannot succeed fail with the right code and a clear message, in bounded
// time.
//
//   connect_probe --socket=/tmp/b.sock --service=nosuchservice --peer=10.0.0.1
//
// Prints one line on stdout:
//   connect_probe: status=RDP_ERR_REFUSED seconds=0.004 message=no listener ...
// (status=RDP_OK when the connection came up; it is then closed again).
// Exit status: 0 connected, 1 the connect failed (the line says how), 2 bad
// usage or no session with the daemon.
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/status.h"

ABSL_FLAG(std::string, socket, "", "socket of the daemon to connect through");
ABSL_FLAG(std::string, service, "", "service name to connect to");
ABSL_FLAG(std::string, peer, "", "data-port IPv4 address of the peer daemon");
ABSL_FLAG(int32_t, control_timeout_s, 30,
          "how long the library waits for the daemon's answer; longer than "
          "the daemon's own bounds, so that those are what the probe sees");

namespace {

const char* CodeName(int code) {
  switch (code) {
    case RDP_OK: return "RDP_OK";
    case RDP_PENDING: return "RDP_PENDING";
    case RDP_ERR_INVALID: return "RDP_ERR_INVALID";
    case RDP_ERR_FAULT: return "RDP_ERR_FAULT";
    case RDP_ERR_NO_BUFFERS: return "RDP_ERR_NO_BUFFERS";
    case RDP_ERR_NOT_CONNECTED: return "RDP_ERR_NOT_CONNECTED";
    case RDP_ERR_CONN_RESET: return "RDP_ERR_CONN_RESET";
    case RDP_ERR_CONN_ABORTED: return "RDP_ERR_CONN_ABORTED";
    case RDP_ERR_ABORTED: return "RDP_ERR_ABORTED";
    case RDP_ERR_REMOTE_RESOURCES: return "RDP_ERR_REMOTE_RESOURCES";
    case RDP_ERR_NET_DOWN: return "RDP_ERR_NET_DOWN";
    case RDP_ERR_REFUSED: return "RDP_ERR_REFUSED";
    case RDP_ERR_PERMISSION: return "RDP_ERR_PERMISSION";
    case RDP_ERR_TIMEOUT: return "RDP_ERR_TIMEOUT";
    case RDP_ERR_AGAIN: return "RDP_ERR_AGAIN";
  }
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one connect to a service at a peer daemon; prints the outcome");
  absl::ParseCommandLine(argc, argv);
  const std::string service = absl::GetFlag(FLAGS_service);
  const std::string peer = absl::GetFlag(FLAGS_peer);
  const int32_t control_timeout_s = absl::GetFlag(FLAGS_control_timeout_s);
  if (service.empty() || peer.empty() || control_timeout_s <= 0) {
    std::fprintf(stderr,
                 "connect_probe: --service, --peer and a positive "
                 "--control_timeout_s are required\n");
    return 2;
  }
  rdmaplane::ClientOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  options.control_timeout = absl::Seconds(control_timeout_s);
  absl::StatusOr<std::unique_ptr<rdmaplane::Client>> client =
      rdmaplane::Client::Open(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect_probe: open: %s\n",
                 std::string(client.status().message()).c_str());
    return 2;
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<rdp_conn> conn = (*client)->Connect(service, peer);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  const int code = rdmaplane::RdpCode(conn.status());
  std::printf("connect_probe: status=%s seconds=%.3f message=%s\n",
              CodeName(code), seconds,
              std::string(conn.status().message()).c_str());
  if (!conn.ok()) return 1;
  (void)(*client)->Disconnect(*conn);
  return 0;
}
