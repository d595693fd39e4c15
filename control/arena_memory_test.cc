// Arena lifetime with zero-copy transmit: an arena released while frames
// built from it are still held (here by the port's delay model, then in the
// ring to the other port) stays mapped and readable until the last of them
// is freed, and is unmapped at the next Reap after that.
#include "control/arena_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>

#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/eth_port.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::control {
namespace {

constexpr uint64_t kArenaBytes = 1 << 20;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

bool Mapped(const void* addr) {
  return msync(const_cast<void*>(addr), 4096, MS_ASYNC) == 0 ||
         errno != ENOMEM;
}

// A client arena as the daemon maps it: a sealed memfd, mapped shared.
struct Arena {
  Arena() {
    fd = memfd_create("arena_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, kArenaBytes), 0);
    void* p = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                   fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    host = static_cast<uint8_t*>(p);
    for (uint64_t i = 0; i < kArenaBytes; ++i) {
      host[i] = static_cast<uint8_t>(i * 11 + 3);
    }
  }
  uint8_t* host = nullptr;
  int fd = -1;
};

class ArenaMemoryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    port::EalOptions o;
    o.memory_mb = 256;
    ASSERT_TRUE(port::InitDpdk(o).ok());
  }
  static void TearDownTestSuite() { port::ShutdownDpdk(); }
};

TEST_F(ArenaMemoryTest, WithoutPortArenasAreCopiedAndUnmappedAtOnce) {
  ArenaMemory arenas;
  Arena arena;
  auto owner = arenas.Adopt(arena.host, kArenaBytes, arena.fd);
  EXPECT_FALSE(owner->zero_copy());
  arenas.Release(arena.host, kArenaBytes, arena.fd, std::move(owner));
  EXPECT_EQ(arenas.waiting(), 0u);
  EXPECT_FALSE(Mapped(arena.host));
  EXPECT_EQ(fcntl(arena.fd, F_GETFD), -1);  // closed
}

// Sends `len` bytes at `payload` in place, as the RC code does.
void SendInPlace(port::EthPort& port, const uint8_t* payload, uint32_t len,
                 rc::MemoryOwner* owner, std::vector<uint8_t>* expected) {
  wire::PacketHeaders h;
  h.path.src_ip = 0x0A000001;
  h.path.dst_ip = 0x0A000002;
  h.bth.opcode = wire::Opcode::kReadResponseMiddle;
  h.bth.dest_qp = wire::Qpn(9);
  const size_t frame_len = wire::FrameLength(h.bth.opcode, len);
  expected->resize(frame_len);
  ASSERT_EQ(wire::EncodeFrame(h, {payload, len}, *expected), frame_len);
  std::span<uint8_t> buf = port.Reserve(frame_len);
  ASSERT_FALSE(buf.empty());
  const size_t header_len = wire::EncodeHeaders(h, len, buf);
  const rc::PayloadPiece piece{payload, len, owner};
  ASSERT_TRUE(port.CanGather({&piece, 1}));
  // The trailer (pad and ICRC) is the end of the frame EncodeFrame made.
  const std::span<const uint8_t> trailer =
      std::span<const uint8_t>(*expected).subspan(header_len + len);
  port.CommitGather(buf, header_len, {&piece, 1}, trailer);
}

TEST_F(ArenaMemoryTest, ArenaWithFramesInFlightIsUnmappedOnlyAfterThem) {
  rte_ring* ab = rte_ring_create("am_ab", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* ba = rte_ring_create("am_ba", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_TRUE(ab && ba);
  const int pa = rte_eth_from_rings("am_a", &ba, 1, &ab, 1, 0);
  const int pb = rte_eth_from_rings("am_b", &ab, 1, &ba, 1, 0);
  ASSERT_GE(pa, 0);
  ASSERT_GE(pb, 0);
  {
    ArenaMemory arenas;  // outlives the ports, as in the daemon
    port::PortConfig ca, cb;
    ca.port_id = static_cast<uint16_t>(pa);
    cb.port_id = static_cast<uint16_t>(pb);
    auto a = port::EthPort::Open(ca);
    auto b = port::EthPort::Open(cb);
    ASSERT_TRUE(a.ok() && b.ok());
    fault::FaultSpec delay;
    ASSERT_EQ(fault::ParseFaultSpec("delay_us=300000,seed=5", &delay), "");
    (*a)->SetFaults(delay);
    arenas.AttachPort(a->get());

    Arena arena;
    std::unique_ptr<rc::MemoryOwner> owner =
        arenas.Adopt(arena.host, kArenaBytes, arena.fd);
    ASSERT_TRUE(owner->zero_copy());
    rc::MemoryOwner* counter = owner.get();
    std::vector<uint8_t> expected[2];
    SendInPlace(**a, arena.host + 4096, 1024, counter, &expected[0]);
    SendInPlace(**a, arena.host + 9000, 333, counter, &expected[1]);
    ASSERT_EQ((*a)->delayed(), 2u);
    EXPECT_EQ(counter->references(), 2u);

    // The session closes: its arena is released while frames still point
    // into it. It stays mapped, with its contents.
    arenas.Release(arena.host, kArenaBytes, arena.fd, std::move(owner));
    EXPECT_EQ(arenas.waiting(), 1u);
    EXPECT_EQ(arenas.Reap(), 1u);
    EXPECT_EQ(counter->references(), 2u);
    ASSERT_TRUE(Mapped(arena.host));
    for (uint64_t i = 0; i < kArenaBytes; i += 4099) {
      ASSERT_EQ(arena.host[i], static_cast<uint8_t>(i * 11 + 3)) << i;
    }

    // The delay runs out: the frames move to the ring, still referenced.
    // The deadline (30 s for a 300 ms delay) only turns a hang into a
    // failure: a busy machine may run this thread rarely.
    const uint64_t end = NowNs() + 30'000'000'000;
    while ((*a)->delayed() > 0 && NowNs() < end) {
      (*a)->Flush();
      usleep(1000);
    }
    ASSERT_EQ((*a)->delayed(), 0u);
    EXPECT_EQ(arenas.Reap(), 1u);
    EXPECT_TRUE(Mapped(arena.host));

    // The receiver takes them (their bytes are the arena's) and frees them:
    // now the arena goes.
    std::vector<std::vector<uint8_t>> got;
    (*b)->Receive([&got](std::span<const uint8_t> frame) {
      got.emplace_back(frame.begin(), frame.end());
    });
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], expected[0]);
    EXPECT_EQ(got[1], expected[1]);
    EXPECT_EQ(arenas.Reap(), 0u);
    EXPECT_FALSE(Mapped(arena.host));
    EXPECT_EQ(fcntl(arena.fd, F_GETFD), -1);
    arenas.AttachPort(nullptr);
  }
  rte_eth_dev_close(static_cast<uint16_t>(pa));
  rte_eth_dev_close(static_cast<uint16_t>(pb));
  rte_ring_free(ab);
  rte_ring_free(ba);
}

// A port that closes with frames still held frees them: the arena released
// before goes at the next Reap.
TEST_F(ArenaMemoryTest, ClosingThePortLetsHeldArenasGo) {
  rte_ring* ab = rte_ring_create("am2_ab", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* ba = rte_ring_create("am2_ba", 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_TRUE(ab && ba);
  const int pa = rte_eth_from_rings("am2_a", &ba, 1, &ab, 1, 0);
  ASSERT_GE(pa, 0);
  {
    ArenaMemory arenas;
    port::PortConfig ca;
    ca.port_id = static_cast<uint16_t>(pa);
    auto a = port::EthPort::Open(ca);
    ASSERT_TRUE(a.ok());
    fault::FaultSpec delay;
    ASSERT_EQ(fault::ParseFaultSpec("delay_us=5000000,seed=5", &delay), "");
    (*a)->SetFaults(delay);
    arenas.AttachPort(a->get());
    Arena arena;
    auto owner = arenas.Adopt(arena.host, kArenaBytes, arena.fd);
    rc::MemoryOwner* counter = owner.get();
    std::vector<uint8_t> expected;
    SendInPlace(**a, arena.host, 1500, counter, &expected);
    arenas.Release(arena.host, kArenaBytes, arena.fd, std::move(owner));
    EXPECT_EQ(arenas.waiting(), 1u);
    // The daemon's shutdown order: detach, close the port, reap.
    arenas.AttachPort(nullptr);
    a->reset();
    EXPECT_EQ(arenas.Reap(), 0u);
    EXPECT_FALSE(Mapped(arena.host));
  }
  rte_eth_dev_close(static_cast<uint16_t>(pa));
  rte_ring_free(ab);
  rte_ring_free(ba);
}

// --- Sealing against holes ---------------------------------------------------

// A memfd as a client hands it over (sealed against resizing), mapped
// shared and writable by the client and, once handed over, by the daemon.
struct ClientMemfd {
  explicit ClientMemfd(unsigned flags, size_t bytes) : bytes(bytes) {
    fd = memfd_create("seal-test", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
      return;
    }
    void* c = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
    void* d = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c == MAP_FAILED || d == MAP_FAILED) return;
    client = static_cast<uint8_t*>(c);
    daemon = static_cast<uint8_t*>(d);
  }
  ~ClientMemfd() {
    if (client != nullptr) munmap(client, bytes);
    if (daemon != nullptr) munmap(daemon, bytes);
    if (fd >= 0) close(fd);
  }
  bool ok() const { return daemon != nullptr; }
  size_t bytes;
  int fd = -1;
  uint8_t* client = nullptr;
  uint8_t* daemon = nullptr;
};

// What a client can do to take pages away after the daemon sealed: nothing.
void ExpectNoHoles(ClientMemfd& m) {
  ASSERT_TRUE(SealAgainstHoles(m.fd).ok());
  EXPECT_NE(fcntl(m.fd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE, 0);
  EXPECT_NE(fallocate(m.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                      static_cast<off_t>(m.bytes)),
            0);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(madvise(m.client, m.bytes, MADV_REMOVE), 0);
  // Both mappings still write, and see each other.
  m.client[0] = 0x11;
  m.daemon[m.bytes - 1] = 0x22;
  EXPECT_EQ(m.daemon[0], 0x11);
  EXPECT_EQ(m.client[m.bytes - 1], 0x22);
  // No new writable mapping, so no new way in.
  void* again =
      mmap(nullptr, m.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  EXPECT_EQ(again, MAP_FAILED);
  // Sealing twice is fine.
  EXPECT_TRUE(SealAgainstHoles(m.fd).ok());
}

TEST(SealAgainstHolesTest, ARegularMemfdCanNoLongerLosePages) {
  ClientMemfd m(0, 1u << 20);
  ASSERT_TRUE(m.ok());
  ExpectNoHoles(m);
}

TEST(SealAgainstHolesTest, AHugetlbMemfdCanNoLongerLosePages) {
  // Two hugepages of our own, given back after (root only).
  FILE* f = std::fopen("/proc/sys/vm/nr_hugepages", "r+");
  long before = -1;
  if (f == nullptr || std::fscanf(f, "%ld", &before) != 1) {
    if (f != nullptr) std::fclose(f);
    GTEST_SKIP() << "cannot read /proc/sys/vm/nr_hugepages";
  }
  std::fclose(f);
  auto set = [](long n) {
    FILE* w = std::fopen("/proc/sys/vm/nr_hugepages", "w");
    if (w == nullptr) return false;
    const bool ok = std::fprintf(w, "%ld", n) > 0;
    return std::fclose(w) == 0 && ok;
  };
  if (geteuid() != 0 || !set(before + 2)) {
    GTEST_SKIP() << "reserving hugepages needs root";
  }
  {
    ClientMemfd m(MFD_HUGETLB, 2u << 20);
    if (m.ok()) ExpectNoHoles(m);
    EXPECT_TRUE(m.ok()) << "no hugepage for the test after reserving two";
  }
  set(before);
}

TEST(SealAgainstHolesTest, AMemfdThatTakesNoMoreSealsIsRefused) {
  ClientMemfd m(0, 1u << 20);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(fcntl(m.fd, F_ADD_SEALS, F_SEAL_SEAL), 0);
  const absl::Status s = SealAgainstHoles(m.fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // A pipe is no memfd at all.
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  EXPECT_FALSE(SealAgainstHoles(p[0]).ok());
  close(p[0]);
  close(p[1]);
}

}  // namespace
}  // namespace rdmaplane::control
