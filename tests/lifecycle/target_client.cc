// A client process that offers its memory to a peer, for tests that kill the
// peer of a connection: it opens a session, listens on a service, accepts
// one connection, registers BYTES of its memory (read and write) for it,
// prints the descriptor, and then waits -- holding the connection -- until
// its stdin closes or it is killed.
//
// Usage: target_client SOCKET_PATH SERVICE BYTES
//
// Output on stdout, one line each: "listening", then "descriptor HEX" (the
// RDMA descriptor as hex), or "error STAGE STATUS_NAME" before it exits with
// status 2. It dies with its parent, so a crashed test leaves nothing behind.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "api/rdmaplane.h"

namespace {

[[noreturn]] void Fail(const char* stage, int status) {
  std::printf("error %s %s\n", stage, rdp_status_name(status));
  std::fflush(stdout);
  std::_Exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s SOCKET_PATH SERVICE BYTES\n", argv[0]);
    return 64;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 3;
  const auto bytes = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10));

  rdp_client* client = nullptr;
  if (int r = rdp_open(argv[1], &client); r != RDP_OK) Fail("open", r);
  if (int r = rdp_listen(client, argv[2]); r != RDP_OK) Fail("listen", r);
  std::printf("listening\n");
  std::fflush(stdout);
  rdp_conn conn = 0;
  if (int r = rdp_accept(client, argv[2], 10'000, &conn); r != RDP_OK) {
    Fail("accept", r);
  }
  void* buffer = rdp_alloc(client, bytes);
  if (buffer == nullptr) Fail("alloc", RDP_ERR_NO_BUFFERS);
  std::memset(buffer, 0, bytes);
  uint8_t descriptor[RDP_DESCRIPTOR_BYTES];
  uint32_t length = sizeof(descriptor);
  if (int r = rdp_register_rdma_memory(client, conn, buffer, bytes,
                                       RDP_MEM_READWRITE, descriptor, &length);
      r != RDP_OK) {
    Fail("register", r);
  }
  std::printf("descriptor ");
  for (uint32_t i = 0; i < length; ++i) std::printf("%02x", descriptor[i]);
  std::printf("\n");
  std::fflush(stdout);
  char line[64];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
  }
  rdp_close(client);
  return 0;
}
