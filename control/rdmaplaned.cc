// rdmaplaned: the rdmaplane daemon. Serves client sessions on a Unix socket
// and runs their RDMA traffic on its engine.
//
//   rdmaplaned --socket=/run/rdmaplane/rdmaplane.sock --poll_mode=adaptive
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "control/daemon.h"

ABSL_FLAG(std::string, socket, "",
          "Unix socket clients connect to (default: /run/rdmaplane/"
          "rdmaplane.sock as root, else $XDG_RUNTIME_DIR or /tmp)");
ABSL_FLAG(std::string, allow_uids, "",
          "comma-separated uids allowed besides root and the daemon's own");
ABSL_FLAG(std::string, allow_gids, "", "comma-separated gids allowed");
ABSL_FLAG(std::string, poll_mode, "adaptive",
          "busy: engines spin on their core; adaptive: they sleep when idle");
ABSL_FLAG(std::string, link_faults, "",
          "faults injected on in-process links, e.g. loss=0.01,seed=3");
ABSL_FLAG(uint32_t, max_registrations, 65536, "registration table size");
ABSL_FLAG(uint32_t, max_registrations_per_session, 4096,
          "distinct registrations one client session may hold");
ABSL_FLAG(uint32_t, max_connections, 512,
          "connections the engine serves at once");
ABSL_FLAG(uint32_t, mtu, 4096, "path MTU: 256, 512, 1024, 2048 or 4096");

namespace {

bool ParseIds(const std::string& text, std::vector<uint32_t>* out) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    uint32_t v;
    if (!absl::SimpleAtoi(part, &v)) return false;
    out->push_back(v);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("the rdmaplane daemon");
  absl::ParseCommandLine(argc, argv);
  rdmaplane::control::DaemonOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  std::vector<uint32_t> uids, gids;
  if (!ParseIds(absl::GetFlag(FLAGS_allow_uids), &uids) ||
      !ParseIds(absl::GetFlag(FLAGS_allow_gids), &gids)) {
    std::fprintf(stderr, "rdmaplaned: --allow_uids/--allow_gids take numbers\n");
    return 2;
  }
  options.allowed_uids.assign(uids.begin(), uids.end());
  options.allowed_gids.assign(gids.begin(), gids.end());
  const std::string mode = absl::GetFlag(FLAGS_poll_mode);
  if (mode == "busy") {
    options.poll_mode = rdmaplane::engine::PollMode::kBusy;
  } else if (mode != "adaptive") {
    std::fprintf(stderr, "rdmaplaned: --poll_mode is busy or adaptive\n");
    return 2;
  }
  if (std::string err = rdmaplane::fault::ParseFaultSpec(
          absl::GetFlag(FLAGS_link_faults), &options.link_faults);
      !err.empty()) {
    std::fprintf(stderr, "rdmaplaned: --link_faults: %s\n", err.c_str());
    return 2;
  }
  options.max_registrations = absl::GetFlag(FLAGS_max_registrations);
  options.max_registrations_per_session =
      absl::GetFlag(FLAGS_max_registrations_per_session);
  options.max_connections = absl::GetFlag(FLAGS_max_connections);
  if (options.max_connections == 0 || options.max_connections > 65536) {
    std::fprintf(stderr, "rdmaplaned: --max_connections must be 1..65536\n");
    return 2;
  }
  options.path_mtu = absl::GetFlag(FLAGS_mtu);
  const uint32_t m = options.path_mtu;
  if (m != 256 && m != 512 && m != 1024 && m != 2048 && m != 4096) {
    std::fprintf(stderr, "rdmaplaned: --mtu must be 256..4096, a power of 2\n");
    return 2;
  }

  // SIGTERM and SIGINT end the daemon cleanly; they are taken synchronously.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  rdmaplane::control::Daemon daemon(options);
  if (absl::Status s = daemon.Start(); !s.ok()) {
    std::fprintf(stderr, "rdmaplaned: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "rdmaplaned: serving %s\n", daemon.socket_path().c_str());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "rdmaplaned: signal %d, shutting down\n", sig);
  daemon.Stop();
  return 0;
}
