// ShutdownDpdk against the memif server's listener that DPDK 22.11 leaves
// registered when its port closes: once DPDK is shut down, the listener's
// name refuses connections (before the fix it stayed bound, and a peer
// connecting woke its callback on freed, then unmapped, memory).
// One EAL per process: this binary holds this one test.
#include <errno.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "dataplane/port/dpdk_env.h"

namespace rdmaplane::port {
namespace {

// Connects to the abstract AF_UNIX name `name` as memif clients do;
// returns 0 or the errno.
int ConnectAbstract(const std::string& name) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const socklen_t len =
      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const int r = connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  const int err = r == 0 ? 0 : errno;
  close(fd);
  return err;
}

TEST(ShutdownDpdkTest, AMemifServersListenerRefusesConnectionsOnceShutDown) {
  const std::string name = absl::StrCat("rdp-dpdk-env-test-", getpid());
  EalOptions options;
  options.memory_mb = 256;
  options.args = {absl::StrCat("--vdev=net_memif0,role=server,socket=", name)};
  ASSERT_TRUE(InitDpdk(options).ok());
  // The port listens (abstract name, memif's default). A client that
  // connects and leaves is what the server's listener serves every day.
  ASSERT_EQ(ConnectAbstract(name), 0);
  ShutdownDpdk();
  EXPECT_EQ(ConnectAbstract(name), ECONNREFUSED)
      << "the memif listener outlived DPDK";
}

}  // namespace
}  // namespace rdmaplane::port
