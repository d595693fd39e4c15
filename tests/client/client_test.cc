#include "api/client.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "api/status.h"
#include "tests/testing/test_util.h"

namespace rdmaplane {
namespace {

using testing::ConnectedPair;
using testing::TestDaemon;

TEST(ClientTest, WriteAndReadBetweenTwoClients) {
  TestDaemon d("smoke");
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  ConnectedPair p(d);
  ASSERT_TRUE(p.ok);

  const uint32_t n = 1 << 20;
  auto* target = static_cast<uint8_t*>(p.server->Alloc(n));
  auto* source = static_cast<uint8_t*>(p.client->Alloc(n));
  auto* back = static_cast<uint8_t*>(p.client->Alloc(n));
  ASSERT_TRUE(target && source && back);
  for (uint32_t i = 0; i < n; ++i) source[i] = static_cast<uint8_t>(i * 7);
  std::memset(target, 0, n);

  alignas(8) uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t desc_len = sizeof(desc);
  ASSERT_EQ(p.server->RegisterRdmaMemory(p.server_conn, target, n,
                                         RDP_MEM_READWRITE, desc, &desc_len),
            RDP_OK);
  auto lkey = p.client->RegisterMemory(source, n, RDP_MEM_READ);
  ASSERT_TRUE(lkey.ok()) << lkey.status();
  auto lkey2 = p.client->RegisterMemory(back, n, RDP_MEM_WRITE);
  ASSERT_TRUE(lkey2.ok());

  rdp_sge sge{source, n, *lkey};
  rdp_overlapped ov{};
  ASSERT_EQ(p.client->Write(p.client_conn, &sge, 1, desc, desc_len, 0, 0, &ov),
            RDP_PENDING);
  uint32_t bytes = 0;
  ASSERT_EQ(p.client->GetOverlappedResult(p.client_conn, &ov, true, &bytes),
            RDP_OK);
  EXPECT_EQ(bytes, n);
  EXPECT_EQ(std::memcmp(source, target, n), 0);

  rdp_sge rsge{back, n, *lkey2};
  rdp_overlapped rov{};
  const auto* d_struct = reinterpret_cast<const shm::RdmaDescriptor*>(desc);
  ASSERT_EQ(p.client->Read(p.client_conn, &rsge, 1, d_struct->address, desc,
                           desc_len, 0, &rov),
            RDP_PENDING);
  ASSERT_EQ(p.client->GetOverlappedResult(p.client_conn, &rov, true, &bytes),
            RDP_OK);
  EXPECT_EQ(std::memcmp(source, back, n), 0);
}

TEST(ClientTest, UnknownServiceIsRefused) {
  TestDaemon d("refused");
  ASSERT_TRUE(d.start_status.ok());
  auto c = d.NewClient();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(RdpCode(c->Connect("nobody-listens").status()), RDP_ERR_REFUSED);
  EXPECT_EQ(RdpCode(c->Connect("").status()), RDP_ERR_INVALID);
  EXPECT_EQ(RdpCode(c->Connect(std::string(64, 'x')).status()),
            RDP_ERR_INVALID);
}

TEST(ClientTest, RequestsQueuedBeforeAcceptRunAfterIt) {
  TestDaemon d("queued");
  ASSERT_TRUE(d.start_status.ok());
  auto server = d.NewClient();
  auto client = d.NewClient();
  ASSERT_TRUE(server->Listen("late").ok());
  auto cc = client->Connect("late");
  ASSERT_TRUE(cc.ok());
  // The client registers and reads before the server has accepted.
  auto* src = static_cast<uint8_t*>(client->Alloc(256));
  std::memset(src, 0x3C, 256);
  alignas(8) uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t len = sizeof(desc);
  ASSERT_EQ(client->RegisterRdmaMemory(*cc, src, 256, RDP_MEM_READ, desc, &len),
            RDP_OK);
  auto sc = server->Accept("late", absl::Seconds(5));
  ASSERT_TRUE(sc.ok());
  auto* dst = static_cast<uint8_t*>(server->Alloc(256));
  auto lkey = server->RegisterMemory(dst, 256, RDP_MEM_WRITE);
  rdp_sge sge{dst, 256, *lkey};
  rdp_overlapped ov{};
  const auto* dd = reinterpret_cast<const shm::RdmaDescriptor*>(desc);
  ASSERT_EQ(server->Read(*sc, &sge, 1, dd->address, desc, len, 0, &ov),
            RDP_PENDING);
  EXPECT_EQ(server->GetOverlappedResult(*sc, &ov, true, nullptr), RDP_OK);
  EXPECT_EQ(dst[255], 0x3C);
}

TEST(ClientTest, ListenerGoneBeforeAcceptResetsTheConnector) {
  TestDaemon d("gone");
  ASSERT_TRUE(d.start_status.ok());
  auto server = d.NewClient();
  auto client = d.NewClient();
  ASSERT_TRUE(server->Listen("brief").ok());
  auto cc = client->Connect("brief");
  ASSERT_TRUE(cc.ok());
  auto* src = static_cast<uint8_t*>(client->Alloc(256));
  auto lkey = client->RegisterMemory(src, 256, RDP_MEM_READ);
  shm::RdmaDescriptor fake{shm::kDescriptorMagic, 0x100, 0x1000, 256, 3, 0};
  rdp_sge sge{src, 16, *lkey};
  rdp_overlapped queued{};
  ASSERT_EQ(client->Write(*cc, &sge, 1, &fake, sizeof(fake), 0, 0, &queued),
            RDP_PENDING);
  server.reset();  // the listener exits without accepting
  EXPECT_EQ(client->GetOverlappedResult(*cc, &queued, true, nullptr),
            RDP_ERR_CONN_RESET);
  rdp_overlapped later{};
  EXPECT_EQ(client->Write(*cc, &sge, 1, &fake, sizeof(fake), 0, 0, &later),
            RDP_ERR_CONN_RESET);
  EXPECT_TRUE(client->Disconnect(*cc).ok());
  EXPECT_EQ(d.daemon->Snapshot().connections, 0u);
}

// Free 2 MiB pages on this machine.
long FreeHugepages() {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (f == nullptr) return 0;
  char line[256];
  long free_pages = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "HugePages_Free: %ld", &free_pages) == 1) break;
  }
  std::fclose(f);
  return free_pages;
}

TEST(ClientTest, TheEnvironmentTurnsHugepagesOffOrInsistsOnThem) {
  TestDaemon d("hugeenv");
  ASSERT_TRUE(d.start_status.ok());
  ClientOptions o;
  o.socket_path = d.daemon->socket_path();
  o.arena_bytes = 4 << 20;
  o.hugepages = ClientOptions::Hugepages::kAuto;

  ASSERT_EQ(setenv("RDMAPLANE_HUGEPAGES", "0", 1), 0);
  auto off = Client::Open(o);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_NE((*off)->Alloc(4096), nullptr);
  EXPECT_FALSE((*off)->hugepages());

  ASSERT_EQ(setenv("RDMAPLANE_HUGEPAGES", "1", 1), 0);
  const bool enough = FreeHugepages() >= 8;
  auto on = Client::Open(o);
  unsetenv("RDMAPLANE_HUGEPAGES");
  if (!on.ok()) {
    // No arena without hugepages: the client says why instead of falling
    // back to regular pages.
    EXPECT_FALSE(enough) << on.status();
    EXPECT_NE(std::string(on.status().message()).find("no hugepages"),
              std::string::npos)
        << on.status();
    return;
  }
  void* p = (*on)->Alloc(4096);
  if (enough) {
    EXPECT_NE(p, nullptr);
    EXPECT_TRUE((*on)->hugepages());
  } else {
    EXPECT_EQ(p, nullptr);
    EXPECT_FALSE((*on)->hugepages());
  }
}

// Registration moves the pages around a buffer (its whole mapping, here 8
// MiB) onto shared memory: a write another thread makes anywhere in them
// while they move must land, not stay behind in the pages replaced. The
// writer goes round a log of slots, paced, writing its running count + 1,
// from before the move begins until after it returned, so the move always
// comes while it writes; every slot must then hold the last count written
// to it (a lost write leaves an older one, or 0).
TEST(ClientTest, MovingMemoryKeepsWhatOtherThreadsWriteMeanwhile) {
  // Writes are held through userfaultfd (docs/verbs.md): without it the
  // move is documented to lose them.
  int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC));
  if (uffd < 0 && errno == EPERM) {
    uffd = static_cast<int>(
        syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY));
  }
  if (uffd < 0) {
    GTEST_SKIP() << "userfaultfd is not available here: "
                 << std::strerror(errno);
  }
  close(uffd);
  TestDaemon d("share");
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  std::unique_ptr<Client> client = d.NewClient();
  ASSERT_NE(client, nullptr);
  constexpr size_t kBytes = 8 << 20;
  constexpr size_t kBuffer = 4096;  // registered; the log is the rest
  for (int attempt = 0; attempt < 3; ++attempt) {
    void* map = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(map, MAP_FAILED);
    auto* bytes = static_cast<uint8_t*>(map);
    std::memset(bytes, 0, kBuffer);
    auto* log = reinterpret_cast<volatile uint64_t*>(bytes + kBuffer);
    const size_t slots = (kBytes - kBuffer) / sizeof(uint64_t);
    // Writes made so far; the writer stops once it reaches `stop_at`.
    std::atomic<size_t> written{0};
    std::atomic<size_t> stop_at{SIZE_MAX};
    std::thread writer([&] {
      for (size_t n = 0; n < stop_at.load(std::memory_order_acquire); ++n) {
        log[n % slots] = n + 1;
        written.store(n + 1, std::memory_order_release);
        for (int pace = 0; pace < 20; ++pace) {
          asm volatile("" ::: "memory");  // not optimized away
        }
      }
    });
    // Move while the writer is under way: it has written a part of the
    // log, and goes on until it has written more after the move returned.
    while (written.load(std::memory_order_acquire) < slots / 8) {
    }
    const size_t before = written.load(std::memory_order_acquire);
    const absl::Status moved = client->ShareMemory(bytes, kBuffer);
    const size_t after = written.load(std::memory_order_acquire);
    stop_at.store(after + slots / 8, std::memory_order_release);
    writer.join();
    ASSERT_TRUE(moved.ok()) << moved;
    const size_t total = written.load(std::memory_order_acquire);
    size_t lost = 0, first = 0;
    for (size_t i = 0; i < slots; ++i) {
      // The last write to slot i: the largest n < total with n % slots == i.
      const uint64_t want =
          i < total ? (total - 1 - i) / slots * slots + i + 1 : 0;
      if (log[i] != want && lost++ == 0) first = i;
    }
    EXPECT_EQ(lost, 0u) << lost << " slots lost their last write, the first "
                        << first << " (" << log[first]
                        << "; the move came between writes " << before
                        << " and " << after << " of " << total << ")";
    // The pages are shared now: the daemon sees what was written.
    absl::StatusOr<uint32_t> lkey =
        client->RegisterMemory(bytes, kBuffer, RDP_MEM_READWRITE);
    EXPECT_TRUE(lkey.ok()) << lkey.status();
  }
}

thread_local uint64_t tls_word = 0;

// The same for memory next to the registering thread's TLS (here in the
// main thread, whose TLS is not on its stack but in memory of the
// process's own, for instance the heap). The kernel writes there (the
// rseq area) when the thread returns to user mode after a signal, so the
// move must not hold the registering thread's writes.
TEST(ClientTest, MemoryBesideTheRegisteringThreadsTlsMoves) {
  TestDaemon d("share_tls");
  ASSERT_TRUE(d.start_status.ok()) << d.start_status;
  ConnectedPair p(d);
  ASSERT_TRUE(p.ok);
  Client* client = p.client.get();
  tls_word = 0x5eed;
  // Signals bring a thread back to user mode, and the kernel then writes
  // its rseq area: a registration that held this thread's writes would
  // wait for itself (or fail) under them.
  struct sigaction ping {}, before {};
  ping.sa_handler = [](int) {};
  ping.sa_flags = SA_RESTART;
  ASSERT_EQ(sigaction(SIGURG, &ping, &before), 0);
  std::atomic<bool> stop{false};
  const pthread_t self = pthread_self();
  std::thread pinger([&] {
    while (!stop.load(std::memory_order_acquire)) {
      pthread_kill(self, SIGURG);
      usleep(20);
    }
  });
  const absl::Status moved = client->ShareMemory(&tls_word, sizeof(tls_word));
  stop.store(true, std::memory_order_release);
  pinger.join();
  sigaction(SIGURG, &before, nullptr);
  if (!moved.ok()) {
    // Only where the TLS lies in memory registration refuses (a file's or
    // the stack's).
    EXPECT_EQ(moved.code(), absl::StatusCode::kInvalidArgument) << moved;
    GTEST_SKIP() << "this thread's TLS is not in movable memory: " << moved;
  }
  EXPECT_EQ(tls_word, 0x5eedu);
  // The thread's TLS stays usable after the move, and what it writes there
  // lands in the shared pages: a peer reads it over a connection.
  tls_word = 0x7e11;
  alignas(8) uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t desc_len = sizeof(desc);
  ASSERT_EQ(p.client->RegisterRdmaMemory(p.client_conn, &tls_word,
                                         sizeof(tls_word), RDP_MEM_READ, desc,
                                         &desc_len),
            RDP_OK);
  auto* seen = static_cast<uint64_t*>(p.server->Alloc(sizeof(uint64_t)));
  ASSERT_NE(seen, nullptr);
  *seen = 0;
  auto lkey = p.server->RegisterMemory(seen, sizeof(*seen), RDP_MEM_WRITE);
  ASSERT_TRUE(lkey.ok()) << lkey.status();
  rdp_sge sge{seen, sizeof(*seen), *lkey};
  rdp_overlapped ov{};
  const auto* d_struct = reinterpret_cast<const shm::RdmaDescriptor*>(desc);
  ASSERT_EQ(p.server->Read(p.server_conn, &sge, 1, d_struct->address, desc,
                           desc_len, 0, &ov),
            RDP_PENDING);
  ASSERT_EQ(p.server->GetOverlappedResult(p.server_conn, &ov, true, nullptr),
            RDP_OK);
  EXPECT_EQ(*seen, 0x7e11u);
}

}  // namespace
}  // namespace rdmaplane
