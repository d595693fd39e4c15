// A real client process for tests that kill clients or run them as another
// user: it opens a session, connects to a service, reads the peer's RDMA
// descriptor as hex from stdin (one line), registers its own memory, prints
// "ready" and then writes 1 MiB blocks into the peer's buffer, many at a
// time, until it is killed.
//
// Usage: victim_client SOCKET_PATH SERVICE
//
// Output on stdout, one line each: "connected" once the connection is made,
// "ready FILL" once writes start (FILL: the byte value it writes), or
// "error STAGE STATUS_CODE STATUS_NAME" before it exits with status 2 when
// anything fails (the daemon refuses the session, the peer goes away, ...).
// It also dies with its parent, so a crashed test leaves no process behind.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/status.h"

namespace {

constexpr uint32_t kBlockBytes = 1u << 20;
constexpr uint32_t kSourceBlocks = 4;
constexpr uint32_t kOutstanding = 16;

[[noreturn]] void Fail(const char* stage, int status) {
  std::printf("error %s %d %s\n", stage, status, rdp_status_name(status));
  std::fflush(stdout);
  std::_Exit(2);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Parses exactly sizeof(shm::RdmaDescriptor) bytes of hex.
bool ParseDescriptor(const std::string& line, uint8_t* out) {
  if (line.size() < 2 * rdmaplane::shm::kDescriptorBytes) return false;
  for (uint32_t i = 0; i < rdmaplane::shm::kDescriptorBytes; ++i) {
    const int hi = HexValue(line[2 * i]);
    const int lo = HexValue(line[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SOCKET_PATH SERVICE\n", argv[0]);
    return 64;
  }
  // Die with the test that started us (its daemon is in-process anyway).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 3;

  rdmaplane::ClientOptions options;
  options.socket_path = argv[1];
  options.arena_bytes = 16u << 20;
  auto opened = rdmaplane::Client::Open(options);
  if (!opened.ok()) Fail("open", rdmaplane::RdpCode(opened.status()));
  std::unique_ptr<rdmaplane::Client> client = std::move(*opened);

  auto conn = client->Connect(argv[2]);
  if (!conn.ok()) Fail("connect", rdmaplane::RdpCode(conn.status()));
  std::printf("connected\n");
  std::fflush(stdout);

  char line[256];
  if (std::fgets(line, sizeof(line), stdin) == nullptr)
    Fail("stdin", RDP_ERR_INVALID);
  uint8_t descriptor[rdmaplane::shm::kDescriptorBytes];
  if (!ParseDescriptor(line, descriptor)) Fail("descriptor", RDP_ERR_INVALID);
  rdmaplane::shm::RdmaDescriptor d;
  std::memcpy(&d, descriptor, sizeof(d));
  const uint64_t target_blocks = d.length / kBlockBytes;
  if (target_blocks == 0) Fail("descriptor", RDP_ERR_FAULT);

  // The source blocks carry a byte the test can recognize: the low byte of
  // our pid, never zero.
  const uint8_t fill = static_cast<uint8_t>(getpid() % 255 + 1);
  auto* source =
      static_cast<uint8_t*>(client->Alloc(kSourceBlocks * kBlockBytes));
  if (source == nullptr) Fail("alloc", RDP_ERR_NO_BUFFERS);
  std::memset(source, fill, kSourceBlocks * kBlockBytes);
  auto lkey = client->RegisterMemory(source, kSourceBlocks * kBlockBytes,
                                     RDP_MEM_READWRITE);
  if (!lkey.ok()) Fail("register", rdmaplane::RdpCode(lkey.status()));
  std::printf("ready %u\n", fill);
  std::fflush(stdout);

  rdp_overlapped ov[kOutstanding] = {};
  for (uint64_t i = 0;; ++i) {
    rdp_overlapped& o = ov[i % kOutstanding];
    if (i >= kOutstanding) {
      uint32_t bytes = 0;
      const int r = client->GetOverlappedResult(*conn, &o, true, &bytes);
      if (r != RDP_OK) Fail("complete", r);
    }
    const rdp_sge sge{source + (i % kSourceBlocks) * kBlockBytes, kBlockBytes,
                      *lkey};
    const auto offset =
        static_cast<uint32_t>((i % target_blocks) * kBlockBytes);
    const int r = client->Write(*conn, &sge, 1, descriptor, sizeof(descriptor),
                                offset, 0, &o);
    if (r != RDP_PENDING) Fail("post", r);
  }
}
