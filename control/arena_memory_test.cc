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
    const uint64_t end = NowNs() + 1'000'000'000;
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

}  // namespace
}  // namespace rdmaplane::control
