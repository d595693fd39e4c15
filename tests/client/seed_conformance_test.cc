// One test (or more) per requirement sentence of the four seed documents:
// WSPRegisterRdmaMemory, WSPDeregisterRdmaMemory, WSPRdmaWrite and NdkRead.
// docs/seed-conformance.md maps each sentence to the test here that proves
// it. The daemon runs in-process; the two clients use real shared memory.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "api/client.h"
#include "api/shm/layout.h"
#include "api/status.h"
#include "dataplane/fault/fault_model.h"
#include "tests/testing/counters.h"
#include "tests/testing/test_util.h"

namespace rdmaplane {
namespace {

using testing::ConnectedPair;
using testing::TestDaemon;

struct Desc {
  alignas(8) uint8_t bytes[RDP_DESCRIPTOR_BYTES] = {};
  uint32_t len = sizeof(bytes);
  const shm::RdmaDescriptor* d() const {
    return reinterpret_cast<const shm::RdmaDescriptor*>(bytes);
  }
};

class SeedTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(control::DaemonOptions options) {
    pair_.reset();
    daemon_.reset();
    daemon_ = std::make_unique<TestDaemon>(
        ::testing::UnitTest::GetInstance()->current_test_info()->name(),
        options);
    ASSERT_TRUE(daemon_->start_status.ok()) << daemon_->start_status;
    pair_ = std::make_unique<ConnectedPair>(*daemon_);
    ASSERT_TRUE(pair_->ok);
  }

  Client& server() { return *pair_->server; }
  Client& client() { return *pair_->client; }
  rdp_conn sconn() const { return pair_->server_conn; }
  rdp_conn cconn() const { return pair_->client_conn; }

  uint8_t* Buffer(Client& c, uint32_t n, uint8_t fill) {
    auto* p = static_cast<uint8_t*>(c.Alloc(n));
    if (p != nullptr) std::memset(p, fill, n);
    return p;
  }

  Desc Register(Client& c, rdp_conn conn, void* buf, uint32_t n,
                uint32_t flags) {
    Desc d;
    EXPECT_EQ(c.RegisterRdmaMemory(conn, buf, n, flags, d.bytes, &d.len),
              RDP_OK);
    return d;
  }

  uint32_t Lkey(Client& c, void* buf, uint64_t n) {
    auto k = c.RegisterMemory(buf, n, RDP_MEM_READWRITE);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : 0;
  }

  // Waits until the engine has taken `n` requests of the connections.
  bool WaitUntilTaken(uint64_t n) {
    return testing::WaitFor([&] {
      return testing::SumOverConnections(*daemon_->daemon, "posted") >= n;
    });
  }

  // Posts a write and waits; returns the final status.
  int WriteWait(Client& c, rdp_conn conn, void* src, uint32_t n, uint32_t lkey,
                const Desc& target, uint32_t offset, uint32_t flags = 0,
                uint32_t* bytes = nullptr) {
    rdp_sge sge{src, n, lkey};
    rdp_overlapped ov{};
    int r =
        c.Write(conn, &sge, 1, target.bytes, target.len, offset, flags, &ov);
    if (r != RDP_PENDING) return r;
    uint32_t b = 0;
    r = c.GetOverlappedResult(conn, &ov, true, &b);
    if (bytes != nullptr) *bytes = b;
    return r;
  }

  int ReadWait(Client& c, rdp_conn conn, void* dst, uint32_t n, uint32_t lkey,
               const Desc& token, uint64_t remote_offset, uint32_t flags = 0,
               uint32_t* bytes = nullptr) {
    rdp_sge sge{dst, n, lkey};
    rdp_overlapped ov{};
    int r = c.Read(conn, &sge, 1, token.d()->address + remote_offset,
                   token.bytes, token.len, flags, &ov);
    if (r != RDP_PENDING) return r;
    uint32_t b = 0;
    r = c.GetOverlappedResult(conn, &ov, true, &b);
    if (bytes != nullptr) *bytes = b;
    return r;
  }

  std::unique_ptr<TestDaemon> daemon_;
  std::unique_ptr<ConnectedPair> pair_;
};

// --- WSPRegisterRdmaMemory --------------------------------------------------

// "registers an RDMA buffer that can be used as either the target buffer in a
// WSPRdmaWrite call or the source buffer in a WSPRdmaRead call"
TEST_F(SeedTest, RegisteredBufferIsWriteTargetAndReadSource) {
  uint8_t* target = Buffer(server(), 4096, 0);
  uint8_t* src = Buffer(client(), 4096, 0x5A);
  uint8_t* dst = Buffer(client(), 4096, 0);
  Desc d = Register(server(), sconn(), target, 4096, RDP_MEM_READWRITE);
  ASSERT_EQ(
      WriteWait(client(), cconn(), src, 4096, Lkey(client(), src, 4096), d, 0),
      RDP_OK);
  EXPECT_EQ(std::memcmp(target, src, 4096), 0);
  ASSERT_EQ(
      ReadWait(client(), cconn(), dst, 4096, Lkey(client(), dst, 4096), d, 0),
      RDP_OK);
  EXPECT_EQ(std::memcmp(dst, src, 4096), 0);
}

// "Returns zero if successful" and "returns either the size of the
// descriptor that it actually stored"
// Guard bytes after the descriptor buffer show that nothing is written
// beyond the size stored.
TEST_F(SeedTest, SuccessReturnsZeroAndTheStoredSize) {
  uint8_t* buf = Buffer(server(), 100, 0);
  uint8_t desc[64];
  std::memset(desc, 0xEE, sizeof(desc));
  uint32_t len = sizeof(desc);
  EXPECT_EQ(
      server().RegisterRdmaMemory(sconn(), buf, 100, RDP_MEM_WRITE, desc, &len),
      RDP_OK);
  EXPECT_EQ(len, RDP_DESCRIPTOR_BYTES);
  for (uint32_t i = RDP_DESCRIPTOR_BYTES; i < sizeof(desc); ++i) {
    EXPECT_EQ(desc[i], 0xEE) << "byte " << i << " after the descriptor";
  }
}

// "the size of lpRdmaDescriptorBuffer is insufficient ... must return the
// WSAEFAULT error code ... and store the required size at
// lpdwDescriptorLength"
// The buffer given is 8 bytes inside a larger one whose guard bytes must
// stay as they were: the library writes nothing into a buffer too small.
TEST_F(SeedTest, SmallDescriptorBufferIsFaultWithRequiredSize) {
  uint8_t* buf = Buffer(server(), 100, 0);
  uint8_t block[64];
  std::memset(block, 0xEE, sizeof(block));
  uint32_t len = 8;
  EXPECT_EQ(server().RegisterRdmaMemory(sconn(), buf, 100, RDP_MEM_WRITE, block,
                                        &len),
            RDP_ERR_FAULT);
  EXPECT_EQ(len, RDP_DESCRIPTOR_BYTES);
  for (uint32_t i = 0; i < sizeof(block); ++i) {
    EXPECT_EQ(block[i], 0xEE) << "byte " << i;
  }
  // Nothing was registered either: had the refused call taken a reference,
  // the registration below would share it, and a second deregistration
  // would succeed too.
  Desc d = Register(server(), sconn(), buf, 100, RDP_MEM_WRITE);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len), RDP_OK);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len),
            RDP_ERR_INVALID);
}

// "lpBuffer is not contained completely within a valid part of the user
// address space" -> WSAEFAULT, and "must not overwrite the initial value"
TEST_F(SeedTest, BufferOutsideArenasIsFaultAndLengthUntouched) {
  std::vector<uint8_t> heap(4096);
  uint8_t desc[RDP_DESCRIPTOR_BYTES];
  uint32_t len = 1234;
  EXPECT_EQ(server().RegisterRdmaMemory(sconn(), heap.data(), 4096,
                                        RDP_MEM_WRITE, desc, &len),
            RDP_ERR_FAULT);
  EXPECT_EQ(len, 1234u);
  // Partly inside an arena is still outside.
  uint8_t* arena = Buffer(server(), 4096, 0);
  len = 777;
  EXPECT_EQ(server().RegisterRdmaMemory(sconn(), arena, 64u << 20,
                                        RDP_MEM_WRITE, desc, &len),
            RDP_ERR_FAULT);
  EXPECT_EQ(len, 777u);
}

// "WSAEINVAL Invalid flags specified." (MEM_READ, MEM_WRITE, MEM_READWRITE
// are the only flags)
TEST_F(SeedTest, InvalidRegistrationFlags) {
  uint8_t* buf = Buffer(server(), 100, 0);
  for (uint32_t flags : {0u, 4u, 5u, 0x80000001u}) {
    Desc d;
    EXPECT_EQ(
        server().RegisterRdmaMemory(sconn(), buf, 100, flags, d.bytes, &d.len),
        RDP_ERR_INVALID)
        << flags;
  }
  for (uint32_t flags : {RDP_MEM_READ, RDP_MEM_WRITE, RDP_MEM_READWRITE}) {
    Desc d;
    EXPECT_EQ(
        server().RegisterRdmaMemory(sconn(), buf, 100, flags, d.bytes, &d.len),
        RDP_OK);
  }
}

// "WSAENOTCONN Socket is not connected"
TEST_F(SeedTest, RegisterOnUnconnectedSocket) {
  uint8_t* buf = Buffer(server(), 100, 0);
  Desc d;
  EXPECT_EQ(
      server().RegisterRdmaMemory(9, buf, 100, RDP_MEM_WRITE, d.bytes, &d.len),
      RDP_ERR_NOT_CONNECTED);
  ASSERT_TRUE(server().Disconnect(sconn()).ok());
  EXPECT_EQ(server().RegisterRdmaMemory(sconn(), buf, 100, RDP_MEM_WRITE,
                                        d.bytes, &d.len),
            RDP_ERR_NOT_CONNECTED);
}

// "WSANOBUFS No memory resources available."
TEST_F(SeedTest, RegistrationTableExhaustedIsNoBuffers) {
  control::DaemonOptions o;
  o.max_registrations = 4;
  Start(o);
  uint8_t* buf = Buffer(server(), 4096, 0);
  int status = RDP_OK;
  for (uint32_t i = 0; i < 8 && status == RDP_OK; ++i) {
    Desc d;
    status = server().RegisterRdmaMemory(sconn(), buf + i, 16, RDP_MEM_WRITE,
                                         d.bytes, &d.len);
  }
  EXPECT_EQ(status, RDP_ERR_NO_BUFFERS);
}

// "can call WSPRegisterRdmaMemory more than once to register the same RDMA
// buffer ... not required to return a different descriptor ... maintain an
// internal reference count ... Only the final WSPDeregisterRdmaMemory call
// ... releases all resources"
TEST_F(SeedTest, SameBufferTwiceSharesDescriptorUntilLastDeregistration) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d1 = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  Desc d2 = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  EXPECT_EQ(std::memcmp(d1.bytes, d2.bytes, sizeof(d1.bytes)), 0);
  uint8_t* src = Buffer(client(), 256, 0x11);
  const uint32_t lkey = Lkey(client(), src, 256);
  ASSERT_EQ(server().DeregisterRdmaMemory(sconn(), d1.bytes, d1.len), RDP_OK);
  // One reference left: still usable.
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, lkey, d1, 0), RDP_OK);
  EXPECT_EQ(target[255], 0x11);
  ASSERT_EQ(server().DeregisterRdmaMemory(sconn(), d2.bytes, d2.len), RDP_OK);
  // Released: the peer's access now fails and touches nothing.
  std::memset(src, 0x22, 256);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, lkey, d1, 0), RDP_ERR_FAULT);
  EXPECT_EQ(target[0], 0x11);
}

// "... for use by any number of sockets": each connection's peer can use it.
TEST_F(SeedTest, SameBufferOnSeveralConnections) {
  uint8_t* target = Buffer(server(), 256, 0);
  ASSERT_TRUE(server().Listen("second").ok());
  auto other = daemon_->NewClient();
  auto oc = other->Connect("second");
  ASSERT_TRUE(oc.ok());
  auto sc2 = server().Accept("second", absl::Seconds(5));
  ASSERT_TRUE(sc2.ok());
  Desc d1 = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  Desc d2 = Register(server(), *sc2, target, 256, RDP_MEM_WRITE);
  uint8_t* a = Buffer(client(), 128, 0xA1);
  uint8_t* b = Buffer(*other, 128, 0xB2);
  EXPECT_EQ(WriteWait(client(), cconn(), a, 128, Lkey(client(), a, 128), d1, 0),
            RDP_OK);
  EXPECT_EQ(WriteWait(*other, *oc, b, 128, Lkey(*other, b, 128), d2, 128),
            RDP_OK);
  EXPECT_EQ(target[0], 0xA1);
  EXPECT_EQ(target[200], 0xB2);
}

// "must obtain memory that can be accessed as specified in dwFlags";
// "requires ... write access if ... the target in ... WSPRdmaWrite";
// "Read access is required for memory that is used as the source in a
// WSPRdmaRead call"; "Memory registered only for remote read access must not
// be available for remote write access. Memory registered only for remote
// write access must not be available for remote read access."
TEST_F(SeedTest, AccessFlagsAreEnforced) {
  uint8_t* ro = Buffer(server(), 256, 0x01);
  uint8_t* wo = Buffer(server(), 256, 0x02);
  uint8_t* rw = Buffer(server(), 256, 0x03);
  Desc dro = Register(server(), sconn(), ro, 256, RDP_MEM_READ);
  Desc dwo = Register(server(), sconn(), wo, 256, RDP_MEM_WRITE);
  Desc drw = Register(server(), sconn(), rw, 256, RDP_MEM_READWRITE);
  uint8_t* src = Buffer(client(), 256, 0xEE);
  uint8_t* dst = Buffer(client(), 256, 0);
  const uint32_t ls = Lkey(client(), src, 256);
  const uint32_t ld = Lkey(client(), dst, 256);
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 256, ld, dro, 0), RDP_OK);
  EXPECT_EQ(dst[0], 0x01);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, ls, dwo, 0), RDP_OK);
  EXPECT_EQ(wo[0], 0xEE);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, ls, drw, 0), RDP_OK);
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 256, ld, drw, 0), RDP_OK);
  EXPECT_EQ(dst[0], 0xEE);
}

TEST_F(SeedTest, ReadOnlyMemoryIsNeverRemotelyWritable) {
  uint8_t* ro = Buffer(server(), 256, 0x01);
  Desc dro = Register(server(), sconn(), ro, 256, RDP_MEM_READ);
  uint8_t* src = Buffer(client(), 256, 0xEE);
  EXPECT_EQ(
      WriteWait(client(), cconn(), src, 256, Lkey(client(), src, 256), dro, 0),
      RDP_ERR_FAULT);
  EXPECT_EQ(ro[0], 0x01);
  EXPECT_EQ(ro[255], 0x01);
}

TEST_F(SeedTest, WriteOnlyMemoryIsNeverRemotelyReadable) {
  uint8_t* wo = Buffer(server(), 256, 0x02);
  Desc dwo = Register(server(), sconn(), wo, 256, RDP_MEM_WRITE);
  uint8_t* dst = Buffer(client(), 256, 0x77);
  EXPECT_EQ(
      ReadWait(client(), cconn(), dst, 256, Lkey(client(), dst, 256), dwo, 0),
      RDP_ERR_REMOTE_RESOURCES);
  EXPECT_EQ(dst[0], 0x77);  // nothing of the buffer leaked
}

// "The returned descriptor for the RDMA buffer is valid for RDMA data
// transfer operations that the remote peer initiates in the context of the
// peer's connection to the socket." and "Only the connection (process) on
// which that RDMA buffer is registered can have access"
TEST_F(SeedTest, DescriptorIsValidOnlyOnItsConnection) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_READWRITE);
  // A third client, connected to the same server on another connection,
  // presents the descriptor.
  ASSERT_TRUE(server().Listen("other").ok());
  auto third = daemon_->NewClient();
  auto tc = third->Connect("other");
  ASSERT_TRUE(tc.ok());
  ASSERT_TRUE(server().Accept("other", absl::Seconds(5)).ok());
  uint8_t* src = Buffer(*third, 256, 0x66);
  uint8_t* dst = Buffer(*third, 256, 0x00);
  const uint32_t ls = Lkey(*third, src, 256);
  EXPECT_EQ(WriteWait(*third, *tc, src, 256, ls, d, 0), RDP_ERR_FAULT);
  EXPECT_EQ(target[0], 0);
  // The connection broke on the violation; a fresh one tries a read.
  auto tc2 = third->Connect("other");
  ASSERT_TRUE(tc2.ok());
  ASSERT_TRUE(server().Accept("other", absl::Seconds(5)).ok());
  EXPECT_EQ(ReadWait(*third, *tc2, dst, 256, Lkey(*third, dst, 256), d, 0),
            RDP_ERR_REMOTE_RESOURCES);
  EXPECT_EQ(dst[0], 0);
  // The registering side itself cannot aim the descriptor at its own memory
  // through its own connection either: the peer owns the access.
  uint8_t* ssrc = Buffer(server(), 256, 0x44);
  EXPECT_EQ(
      WriteWait(server(), sconn(), ssrc, 256, Lkey(server(), ssrc, 256), d, 0),
      RDP_ERR_FAULT);
  EXPECT_EQ(target[0], 0);
}

// "Memory that supports both local and remote access must be accessible only
// when registered and while the connection is established."
TEST_F(SeedTest, AccessibleOnlyWhileRegisteredAndConnected) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_READWRITE);
  uint8_t* src = Buffer(client(), 256, 0x31);
  const uint32_t ls = Lkey(client(), src, 256);
  ASSERT_EQ(WriteWait(client(), cconn(), src, 256, ls, d, 0), RDP_OK);
  ASSERT_TRUE(server().Disconnect(sconn()).ok());
  std::memset(src, 0x32, 256);
  const int after = WriteWait(client(), cconn(), src, 256, ls, d, 0);
  EXPECT_TRUE(after == RDP_ERR_CONN_RESET || after == RDP_ERR_NOT_CONNECTED)
      << rdp_status_name(after);
  EXPECT_EQ(target[0], 0x31);
  // The registration went with the connection.
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len),
            RDP_ERR_INVALID);
}

// --- WSPDeregisterRdmaMemory ------------------------------------------------

// "releases an RDMA buffer that was registered" / "Returns zero if
// successful"
TEST_F(SeedTest, DeregisterReleases) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_READWRITE);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len), RDP_OK);
  uint8_t* dst = Buffer(client(), 256, 0x12);
  EXPECT_EQ(
      ReadWait(client(), cconn(), dst, 256, Lkey(client(), dst, 256), d, 0),
      RDP_ERR_REMOTE_RESOURCES);
}

// "WSAEINVAL The specified pointer to the descriptor for the RDMA buffer does
// not represent a previously registered RDMA buffer"
TEST_F(SeedTest, DeregisterUnknownDescriptorIsInvalid) {
  uint8_t junk[RDP_DESCRIPTOR_BYTES] = {1, 2, 3};
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), junk, sizeof(junk)),
            RDP_ERR_INVALID);
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  ASSERT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len), RDP_OK);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len),
            RDP_ERR_INVALID);  // twice
  Desc forged = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  const_cast<shm::RdmaDescriptor*>(forged.d())->rkey ^= 0x100;
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), forged.bytes, forged.len),
            RDP_ERR_INVALID);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), nullptr, 32),
            RDP_ERR_INVALID);
}

// "the switch passes the same socket descriptor that it passed to the
// WSPRegisterRdmaMemory function": another socket cannot release it.
TEST_F(SeedTest, DeregisterOnAnotherConnectionIsInvalid) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  ASSERT_TRUE(server().Listen("x").ok());
  auto other = daemon_->NewClient();
  ASSERT_TRUE(other->Connect("x").ok());
  auto sc2 = server().Accept("x", absl::Seconds(5));
  ASSERT_TRUE(sc2.ok());
  EXPECT_EQ(server().DeregisterRdmaMemory(*sc2, d.bytes, d.len),
            RDP_ERR_INVALID);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len), RDP_OK);
}

// "or the SAN service provider cannot release the RDMA buffer, because the
// RDMA buffer is currently being used in an RDMA data transfer operation."
TEST_F(SeedTest, DeregisterWhileInUseIsInvalid) {
  control::DaemonOptions o;
  o.link_faults.drop_after = 1;  // the write's first packet only arrives
  o.retransmit_timeout_ns = 10'000'000'000ull;
  Start(o);
  uint8_t* target = Buffer(server(), 64 << 10, 0);
  Desc d = Register(server(), sconn(), target, 64 << 10, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 64 << 10, 0x10);
  const uint32_t lkey = *client().RegisterMemory(src, 64 << 10, RDP_MEM_READ);
  rdp_sge sge{src, 64 << 10, lkey};
  rdp_overlapped ov{};
  ASSERT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_PENDING);
  // The engine took the request and its first packet arrived.
  ASSERT_TRUE(testing::WaitFor([&] {
    return testing::SumOverConnections(*daemon_->daemon, "posted") >= 1 &&
           testing::SumOverConnections(*daemon_->daemon, "rx_packets") >= 1;
  }));
  // The target is held by the half-received write, the source by the
  // outstanding request: neither can be released.
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len),
            RDP_ERR_INVALID);
  EXPECT_EQ(RdpCode(client().DeregisterMemory(lkey)), RDP_ERR_INVALID);
  // Once the connection goes, so does the use.
  ASSERT_TRUE(client().Disconnect(cconn()).ok());
  EXPECT_EQ(ov.status, RDP_ERR_ABORTED);
  EXPECT_TRUE(client().DeregisterMemory(lkey).ok());
}

// --- WSPRdmaWrite
// -------------------------------------------------------------

// "transfers data from a source buffer ... to a target buffer"; the target
// offset; "the number of bytes transferred"; WSA_IO_PENDING
TEST_F(SeedTest, WriteAtOffsetReportsBytes) {
  uint8_t* target = Buffer(server(), 8192, 0);
  Desc d = Register(server(), sconn(), target, 8192, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 3000, 0x9C);
  uint32_t bytes = 0;
  EXPECT_EQ(WriteWait(client(), cconn(), src, 3000, Lkey(client(), src, 3000),
                      d, 5000, 0, &bytes),
            RDP_OK);
  EXPECT_EQ(bytes, 3000u);
  EXPECT_EQ(target[4999], 0);
  EXPECT_EQ(target[5000], 0x9C);
  EXPECT_EQ(target[7999], 0x9C);
  EXPECT_EQ(target[8000], 0);
}

// "Each buffer was registered in a call to the WSPRegisterMemory function":
// an unregistered or foreign local key fails with WSAEFAULT.
TEST_F(SeedTest, SourceMustBeLocallyRegistered) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, 0xDEAD00, d, 0),
            RDP_ERR_FAULT);
  // A key the server registered is not the client's.
  uint8_t* sbuf = Buffer(server(), 256, 0);
  const uint32_t server_key = Lkey(server(), sbuf, 256);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, server_key, d, 0),
            RDP_ERR_FAULT);
  // A range beyond the key's registration.
  const uint32_t small = *client().RegisterMemory(src, 16, RDP_MEM_READ);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, small, d, 0), RDP_ERR_FAULT);
  EXPECT_EQ(target[0], 0);
}

// "the target buffer identified by the descriptor ... is not contained
// completely within a valid part" -> WSAEFAULT
TEST_F(SeedTest, TargetOutsideRegistrationIsFault) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  const uint32_t ls = Lkey(client(), src, 256);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 100, ls, d, 200), RDP_ERR_FAULT);
  uint8_t bad[RDP_DESCRIPTOR_BYTES] = {};
  rdp_sge sge{src, 10, ls};
  rdp_overlapped ov{};
  EXPECT_EQ(client().Write(cconn(), &sge, 1, bad, sizeof(bad), 0, 0, &ov),
            RDP_ERR_FAULT);
  // A forged descriptor claiming more length is caught by the peer's daemon.
  Desc forged = d;
  const_cast<shm::RdmaDescriptor*>(forged.d())->length = 1 << 20;
  EXPECT_EQ(WriteWait(client(), cconn(), src, 256, ls, forged, 128),
            RDP_ERR_FAULT);
  EXPECT_EQ(target[255], 0);
}

// "WSAEINVAL Invalid flags specified."
TEST_F(SeedTest, WriteWithInvalidFlags) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 10, Lkey(client(), src, 256)};
  rdp_overlapped ov{};
  for (uint32_t flags : {0x4u, RDP_FLAG_READ_LOCAL_INVALIDATE, 0x80000000u}) {
    EXPECT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, flags, &ov),
              RDP_ERR_INVALID);
  }
  EXPECT_EQ(target[0], 0);
}

// "WSAENOTCONN Socket not connected."
TEST_F(SeedTest, WriteOnUnconnectedSocket) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 10, Lkey(client(), src, 256)};
  rdp_overlapped ov{};
  EXPECT_EQ(client().Write(11, &sge, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_ERR_NOT_CONNECTED);
  ASSERT_TRUE(client().Disconnect(cconn()).ok());
  EXPECT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_ERR_NOT_CONNECTED);
}

// "WSANOBUFS No memory resources available.": posting never blocks; a full
// queue says so.
TEST_F(SeedTest, FullSendQueueIsNoBuffers) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 8, Lkey(client(), src, 256)};
  std::vector<rdp_overlapped> ovs(shm::kSendRingEntries + 1);
  int last = RDP_PENDING;
  size_t posted = 0;
  for (; posted < ovs.size() && last == RDP_PENDING; ++posted) {
    last = client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, RDP_FLAG_DEFER,
                          &ovs[posted]);
  }
  EXPECT_EQ(last, RDP_ERR_NO_BUFFERS);
  EXPECT_EQ(client().Flush(cconn()), RDP_OK);
  for (size_t i = 0; i + 1 < posted; ++i) {
    EXPECT_EQ(client().GetOverlappedResult(cconn(), &ovs[i], true, nullptr),
              RDP_OK);
  }
}

// "WSAECONNRESET Remote peer terminated the connection."
TEST_F(SeedTest, PeerCloseResetsTheConnection) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  const uint32_t ls = Lkey(client(), src, 256);
  ASSERT_TRUE(server().Disconnect(sconn()).ok());
  EXPECT_EQ(WriteWait(client(), cconn(), src, 10, ls, d, 0),
            RDP_ERR_CONN_RESET);
}

// "WSAECONNABORTED Connection to the remote peer was terminated, because of
// a time-out or other failure."
TEST_F(SeedTest, TimeoutAbortsTheConnection) {
  control::DaemonOptions o;
  o.link_faults.loss = 1.0;  // nothing arrives
  o.retransmit_timeout_ns = 1'000'000;
  Start(o);
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  EXPECT_EQ(
      WriteWait(client(), cconn(), src, 10, Lkey(client(), src, 256), d, 0),
      RDP_ERR_CONN_ABORTED);
  EXPECT_EQ(target[0], 0);
}

// "WSA_OPERATION_ABORTED Overlapped operation was canceled, because the
// socket was closed."
TEST_F(SeedTest, ClosingWithWorkOutstandingAbortsIt) {
  control::DaemonOptions o;
  o.link_faults.loss = 1.0;  // keep the write outstanding
  o.retransmit_timeout_ns = 10'000'000'000ull;
  Start(o);
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 10, Lkey(client(), src, 256)};
  rdp_overlapped sent{}, deferred{};
  ASSERT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &sent),
            RDP_PENDING);
  ASSERT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, RDP_FLAG_DEFER,
                           &deferred),
            RDP_PENDING);
  ASSERT_TRUE(WaitUntilTaken(1));
  ASSERT_TRUE(client().Disconnect(cconn()).ok());
  EXPECT_EQ(sent.status, RDP_ERR_ABORTED);
  EXPECT_EQ(deferred.status, RDP_ERR_ABORTED);
}

// "The array of WSABUFEX structures at lpBuffers is transient ... must
// capture these WSABUFEX structures before it returns ... enables
// applications to build stack-based WSABUFEX arrays."
TEST_F(SeedTest, SglIsCapturedAtPost) {
  uint8_t* target = Buffer(server(), 512, 0);
  Desc d = Register(server(), sconn(), target, 512, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 512, 0);
  for (int i = 0; i < 512; ++i) src[i] = static_cast<uint8_t>(i);
  const uint32_t ls = Lkey(client(), src, 512);
  rdp_overlapped ov{};
  {
    rdp_sge sgl[2] = {{src, 200, ls}, {src + 200, 312, ls}};
    ASSERT_EQ(client().Write(cconn(), sgl, 2, d.bytes, d.len, 0, 0, &ov),
              RDP_PENDING);
    std::memset(sgl, 0xFF, sizeof(sgl));  // the caller reuses its stack
  }
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &ov, true, nullptr), RDP_OK);
  EXPECT_EQ(std::memcmp(target, src, 512), 0);
}

// "If multiple data transfer operations are outstanding simultaneously, each
// must reference a separate overlapped structure." and "Completion
// indications can be delivered in any order"
TEST_F(SeedTest, ManyOutstandingEachWithItsOverlapped) {
  constexpr int kN = 64;
  uint8_t* target = Buffer(server(), kN * 64, 0);
  Desc d = Register(server(), sconn(), target, kN * 64, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), kN * 64, 0);
  for (int i = 0; i < kN * 64; ++i) src[i] = static_cast<uint8_t>(i / 64);
  const uint32_t ls = Lkey(client(), src, kN * 64);
  std::vector<rdp_overlapped> ovs(kN);
  for (int i = 0; i < kN; ++i) {
    ovs[i].context = 1000 + i;
    rdp_sge sge{src + i * 64, 64, ls};
    ASSERT_EQ(
        client().Write(cconn(), &sge, 1, d.bytes, d.len, i * 64, 0, &ovs[i]),
        RDP_PENDING);
  }
  // Waiting in reverse order works: each result lands in its own structure.
  for (int i = kN - 1; i >= 0; --i) {
    uint32_t bytes = 0;
    EXPECT_EQ(client().GetOverlappedResult(cconn(), &ovs[i], true, &bytes),
              RDP_OK);
    EXPECT_EQ(bytes, 64u);
    EXPECT_EQ(ovs[i].context, uint64_t(1000 + i));
  }
  EXPECT_EQ(std::memcmp(target, src, kN * 64), 0);
}

// "the switch calls the WSPGetOverlappedResult function to poll for
// completion": polling without waiting.
TEST_F(SeedTest, PollingForCompletion) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 256, Lkey(client(), src, 256)};
  rdp_overlapped ov{};
  ASSERT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_PENDING);
  int status = RDP_PENDING;
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (status == RDP_PENDING && absl::Now() < end) {
    status = client().GetOverlappedResult(cconn(), &ov, false, nullptr);
  }
  EXPECT_EQ(status, RDP_OK);
  rdp_overlapped* done[4];
  EXPECT_EQ(client().Poll(cconn(), done, 4), 0);  // already reaped
}

// --- NdkRead --------------------------------------------------------------

// "posts a read request"; "RequestContext ... returned"; "pSgl ... buffers to
// place incoming data into"; "RemoteAddress ... The NDK consumer can add an
// offset"; "RemoteToken"
TEST_F(SeedTest, ReadIntoScatterListAtRemoteOffset) {
  uint8_t* source = Buffer(server(), 4096, 0);
  for (int i = 0; i < 4096; ++i) source[i] = static_cast<uint8_t>(i * 3);
  Desc d = Register(server(), sconn(), source, 4096, RDP_MEM_READ);
  uint8_t* a = Buffer(client(), 100, 0);
  uint8_t* b = Buffer(client(), 900, 0);
  const uint32_t la = Lkey(client(), a, 100);
  const uint32_t lb = Lkey(client(), b, 900);
  rdp_sge sgl[2] = {{a, 100, la}, {b, 900, lb}};
  rdp_overlapped ov{};
  ov.context = 0xC0FFEE;
  ASSERT_EQ(client().Read(cconn(), sgl, 2, d.d()->address + 1000, d.bytes,
                          d.len, 0, &ov),
            RDP_PENDING);
  uint32_t bytes = 0;
  ASSERT_EQ(client().GetOverlappedResult(cconn(), &ov, true, &bytes), RDP_OK);
  EXPECT_EQ(bytes, 1000u);
  EXPECT_EQ(ov.context, 0xC0FFEEu);
  EXPECT_EQ(std::memcmp(a, source + 1000, 100), 0);
  EXPECT_EQ(std::memcmp(b, source + 1100, 900), 0);
}

// "NDK_OP_FLAG_SILENT_SUCCESS: the successful completion of this request does
// not generate a completion ... However, requests that fail do generate an
// event"
TEST_F(SeedTest, SilentSuccessOnlyReportsFailures) {
  uint8_t* source = Buffer(server(), 256, 0x42);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  const uint32_t ld = Lkey(client(), dst, 256);
  rdp_sge sge{dst, 256, ld};
  rdp_overlapped silent{}, marker{};
  ASSERT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len,
                          RDP_FLAG_SILENT_SUCCESS, &silent),
            RDP_PENDING);
  ASSERT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len, 0,
                          &marker),
            RDP_PENDING);
  ASSERT_EQ(client().GetOverlappedResult(cconn(), &marker, true, nullptr),
            RDP_OK);
  // RC completes in order: the silent read finished before the marker.
  EXPECT_EQ(silent.status, RDP_PENDING) << "a silent success was reported";
  EXPECT_EQ(dst[0], 0x42);
  // A failing silent request is reported. (Write-only memory is unreadable.)
  uint8_t* wo = Buffer(server(), 256, 0);
  Desc dwo = Register(server(), sconn(), wo, 256, RDP_MEM_WRITE);
  rdp_overlapped failing{};
  ASSERT_EQ(client().Read(cconn(), &sge, 1, dwo.d()->address, dwo.bytes,
                          dwo.len, RDP_FLAG_SILENT_SUCCESS, &failing),
            RDP_PENDING);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &failing, true, nullptr),
            RDP_ERR_REMOTE_RESOURCES);
}

// "NDK_OP_FLAG_READ_FENCE: all prior read requests must be complete before
// the hardware begins processing this request." (Ordering at the wire level
// is shown by dataplane/rc:qp_test ReadFenceWaitsForEarlierReads, and end to
// end by ReadFenceHoldsAWriteUntilTheReadHasLanded below; here the flag is
// accepted on a read and the fenced read sees the earlier reads done.)
TEST_F(SeedTest, ReadFenceOrdersAfterEarlierReads) {
  uint8_t* source = Buffer(server(), 1 << 20, 0x21);
  Desc d = Register(server(), sconn(), source, 1 << 20, RDP_MEM_READ);
  uint8_t* big = Buffer(client(), 1 << 20, 0);
  uint8_t* small = Buffer(client(), 64, 0);
  rdp_sge s1{big, 1 << 20, Lkey(client(), big, 1 << 20)};
  rdp_sge s2{small, 64, Lkey(client(), small, 64)};
  rdp_overlapped o1{}, o2{};
  ASSERT_EQ(
      client().Read(cconn(), &s1, 1, d.d()->address, d.bytes, d.len, 0, &o1),
      RDP_PENDING);
  ASSERT_EQ(client().Read(cconn(), &s2, 1, d.d()->address, d.bytes, d.len,
                          RDP_FLAG_READ_FENCE, &o2),
            RDP_PENDING);
  ASSERT_EQ(client().GetOverlappedResult(cconn(), &o2, true, nullptr), RDP_OK);
  EXPECT_NE(o1.status, RDP_PENDING);
  EXPECT_EQ(big[(1 << 20) - 1], 0x21);
}

// The fence as applications use it, end to end: a WRITE whose source is the
// destination of an earlier READ carries what the READ brought only when it
// is fenced. The connection's frames cross a link with 20 ms of delay (the
// daemon's in-process copies would run in order anyway). Unfenced, the same
// WRITE goes out at once with the buffer's old bytes, which shows that the
// test tells the two apart. The READ is deferred until the WRITE is posted,
// so that the engine finds both in one turn: a client descheduled between
// its two posts on a busy machine does not let the READ's answer overtake.
TEST_F(SeedTest, ReadFenceHoldsAWriteUntilTheReadHasLanded) {
  control::DaemonOptions options;
  ASSERT_EQ(fault::ParseFaultSpec("delay_us=20000,seed=1", &options.link_faults),
            "");
  options.retransmit_timeout_ns = 200'000'000;  // well above the delay
  Start(options);
  constexpr uint32_t kLen = 4096;
  uint8_t* remote_source = Buffer(server(), kLen, 0x5D);
  uint8_t* remote_target = Buffer(server(), 2 * kLen, 0);
  Desc source = Register(server(), sconn(), remote_source, kLen, RDP_MEM_READ);
  Desc target =
      Register(server(), sconn(), remote_target, 2 * kLen, RDP_MEM_WRITE);
  for (const bool fenced : {false, true}) {
    SCOPED_TRACE(fenced ? "fenced" : "not fenced");
    uint8_t* local = Buffer(client(), kLen, 0);
    rdp_sge sge{local, kLen, Lkey(client(), local, kLen)};
    rdp_overlapped read{}, write{};
    ASSERT_EQ(client().Read(cconn(), &sge, 1, source.d()->address, source.bytes,
                            source.len, RDP_FLAG_DEFER, &read),
              RDP_PENDING);
    const uint32_t offset = fenced ? kLen : 0;
    ASSERT_EQ(client().Write(cconn(), &sge, 1, target.bytes, target.len, offset,
                             fenced ? RDP_FLAG_READ_FENCE : 0, &write),
              RDP_PENDING);
    ASSERT_EQ(client().GetOverlappedResult(cconn(), &write, true, nullptr),
              RDP_OK);
    ASSERT_EQ(client().GetOverlappedResult(cconn(), &read, true, nullptr),
              RDP_OK);
    const std::vector<uint8_t> landed(remote_target + offset,
                                      remote_target + offset + kLen);
    const std::vector<uint8_t> brought(kLen, 0x5D);
    if (fenced) {
      EXPECT_EQ(landed, brought);
    } else {
      EXPECT_EQ(landed, std::vector<uint8_t>(kLen, 0));
    }
  }
}

// "NDK_OP_FLAG_DEFER: ... may defer indicating the request to hardware"
// (until a later request without the flag or an explicit flush)
TEST_F(SeedTest, DeferWaitsForFlush) {
  uint8_t* source = Buffer(server(), 256, 0x37);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  rdp_sge sge{dst, 256, Lkey(client(), dst, 256)};
  rdp_overlapped ov{};
  ASSERT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len,
                          RDP_FLAG_DEFER, &ov),
            RDP_PENDING);
  // The engine serves the other end's read from start to end meanwhile: it
  // was free to start ours, had the doorbell rung.
  uint8_t* probe = Buffer(client(), 64, 0x21);
  Desc probe_desc = Register(client(), cconn(), probe, 64, RDP_MEM_READ);
  uint8_t* landing = Buffer(server(), 64, 0);
  ASSERT_EQ(ReadWait(server(), sconn(), landing, 64,
                     Lkey(server(), landing, 64), probe_desc, 0),
            RDP_OK);
  ASSERT_EQ(landing[0], 0x21);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &ov, false, nullptr),
            RDP_PENDING);
  EXPECT_EQ(dst[0], 0);
  ASSERT_EQ(client().Flush(cconn()), RDP_OK);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &ov, true, nullptr), RDP_OK);
  EXPECT_EQ(dst[0], 0x37);
  // A later request without the flag also rings the doorbell for it.
  rdp_overlapped a{}, b{};
  dst[0] = 0;
  ASSERT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len,
                          RDP_FLAG_DEFER, &a),
            RDP_PENDING);
  ASSERT_EQ(
      client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len, 0, &b),
      RDP_PENDING);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &a, true, nullptr), RDP_OK);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &b, true, nullptr), RDP_OK);
}

// "NDK_OP_FLAG_RDMA_READ_LOCAL_INVALIDATE ... successful completion ...
// means that the first buffer specified in the pSgl parameter is
// invalidated."
TEST_F(SeedTest, ReadLocalInvalidateRetiresTheFirstBuffer) {
  uint8_t* source = Buffer(server(), 256, 0x61);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* first = Buffer(client(), 128, 0);
  uint8_t* second = Buffer(client(), 128, 0);
  const uint32_t l1 = *client().RegisterMemory(first, 128, RDP_MEM_WRITE);
  const uint32_t l2 = *client().RegisterMemory(second, 128, RDP_MEM_WRITE);
  rdp_sge sgl[2] = {{first, 128, l1}, {second, 128, l2}};
  rdp_overlapped ov{};
  ASSERT_EQ(client().Read(cconn(), sgl, 2, d.d()->address, d.bytes, d.len,
                          RDP_FLAG_READ_LOCAL_INVALIDATE, &ov),
            RDP_PENDING);
  ASSERT_EQ(client().GetOverlappedResult(cconn(), &ov, true, nullptr), RDP_OK);
  EXPECT_EQ(first[0], 0x61);
  EXPECT_EQ(second[127], 0x61);
  // The first buffer's key is now refused; the second still works.
  EXPECT_EQ(ReadWait(client(), cconn(), first, 128, l1, d, 0), RDP_ERR_FAULT);
  EXPECT_EQ(ReadWait(client(), cconn(), second, 128, l2, d, 0), RDP_OK);
  // Registering the buffer again gives a fresh, working key.
  const uint32_t again = *client().RegisterMemory(first, 128, RDP_MEM_WRITE);
  EXPECT_NE(again, l1);
  EXPECT_EQ(ReadWait(client(), cconn(), first, 128, again, d, 0), RDP_OK);
  // The read without the flag leaves keys alone.
  EXPECT_EQ(ReadWait(client(), cconn(), second, 128, l2, d, 0), RDP_OK);
}

// "STATUS_CONNECTION_INVALID The QP is not connected."
TEST_F(SeedTest, ReadOnUnconnectedQp) {
  uint8_t* source = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  rdp_sge sge{dst, 256, Lkey(client(), dst, 256)};
  rdp_overlapped ov{};
  EXPECT_EQ(client().Read(7, &sge, 1, d.d()->address, d.bytes, d.len, 0, &ov),
            RDP_ERR_NOT_CONNECTED);
}

// "STATUS_REMOTE_RESOURCES The request tried to read beyond the size of the
// remote memory."
TEST_F(SeedTest, ReadBeyondRemoteMemory) {
  uint8_t* source = Buffer(server(), 256, 0x55);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 512, 0);
  const uint32_t ld = Lkey(client(), dst, 512);
  rdp_sge sge{dst, 512, ld};
  rdp_overlapped ov{};
  EXPECT_EQ(
      client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len, 0, &ov),
      RDP_ERR_REMOTE_RESOURCES);
  // With a token that lies about the length, the peer's daemon refuses.
  Desc forged = d;
  const_cast<shm::RdmaDescriptor*>(forged.d())->length = 4096;
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 512, ld, forged, 0),
            RDP_ERR_REMOTE_RESOURCES);
  EXPECT_EQ(dst[0], 0);
}

// Over frames (a link with a delay), the refusing end counts what its
// responder refused, and the status shows it for that connection.
TEST_F(SeedTest, ARefusedRemoteAccessIsCountedWhereItWasRefused) {
  control::DaemonOptions o;
  o.link_faults.delay_ns = 1000;
  Start(o);
  uint8_t* source = Buffer(server(), 256, 0x55);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 512, 0);
  Desc forged = d;
  const_cast<shm::RdmaDescriptor*>(forged.d())->length = 4096;
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 512, Lkey(client(), dst, 512),
                     forged, 0),
            RDP_ERR_REMOTE_RESOURCES);
  EXPECT_EQ(testing::SumOverConnections(*daemon_->daemon, "access_errors"), 1u);
  EXPECT_EQ(testing::SumOverConnections(*daemon_->daemon, "invalid_requests"),
            0u);
  EXPECT_EQ(testing::SumOverConnections(*daemon_->daemon, "bad_responses"), 0u);
}

// "STATUS_SUCCESS The request was posted successfully. A completion entry
// will be queued to the CQ when the work request is completed."
TEST_F(SeedTest, CompletionIsQueued) {
  uint8_t* source = Buffer(server(), 256, 0x55);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  rdp_sge sge{dst, 256, Lkey(client(), dst, 256)};
  rdp_overlapped ov{};
  ASSERT_EQ(
      client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len, 0, &ov),
      RDP_PENDING);
  rdp_overlapped* done[4] = {};
  int n = 0;
  const absl::Time end = absl::Now() + absl::Seconds(5);
  while (n == 0 && absl::Now() < end) n = client().Poll(cconn(), done, 4);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(done[0], &ov);
  EXPECT_EQ(ov.status, RDP_OK);
}

// --- Cases the sentences imply beyond their main statement -------------------

// WSPRdmaWrite "WSAENETDOWN Network subsystem failed.": with the daemon gone,
// posts and control calls fail at once; work in flight completes as aborted.
TEST_F(SeedTest, DaemonGoneIsNetworkDown) {
  control::DaemonOptions o;
  o.link_faults.loss = 1.0;  // keep one write in flight
  o.retransmit_timeout_ns = 10'000'000'000ull;
  Start(o);
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 10, Lkey(client(), src, 256)};
  rdp_overlapped in_flight{}, later{};
  ASSERT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &in_flight),
            RDP_PENDING);
  ASSERT_TRUE(WaitUntilTaken(1));
  daemon_->daemon->Stop();
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &in_flight, true, nullptr),
            RDP_ERR_CONN_ABORTED);
  EXPECT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &later),
            RDP_ERR_NET_DOWN);
  EXPECT_EQ(RdpCode(client().RegisterMemory(src, 16, RDP_MEM_READ).status()),
            RDP_ERR_NET_DOWN);
}

// NdkRead "Flags ... The following flags are supported": any other bit is
// refused and nothing is posted.
TEST_F(SeedTest, ReadWithUnsupportedFlags) {
  uint8_t* source = Buffer(server(), 256, 0x01);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  rdp_sge sge{dst, 256, Lkey(client(), dst, 256)};
  for (uint32_t flags : {0x4u, 0x400u, 0x80000000u}) {
    rdp_overlapped ov{};
    EXPECT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, d.len,
                            flags, &ov),
              RDP_ERR_INVALID);
  }
  EXPECT_EQ(dst[0], 0);
  // Nothing was posted: a valid read afterwards (requests run in order) is
  // the only completion there is.
  uint8_t* other = Buffer(client(), 16, 0);
  rdp_sge valid{other, 16, Lkey(client(), other, 16)};
  rdp_overlapped ok{};
  ASSERT_EQ(
      client().Read(cconn(), &valid, 1, d.d()->address, d.bytes, d.len, 0, &ok),
      RDP_PENDING);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &ok, true, nullptr), RDP_OK);
  EXPECT_EQ(dst[0], 0);
  rdp_overlapped* done[2];
  EXPECT_EQ(client().Poll(cconn(), done, 2), 0);
}

// WSPDeregisterRdmaMemory "dwDescriptorLength ... Size, in bytes, of the
// memory block": a block that cannot hold a descriptor is not one.
TEST_F(SeedTest, DeregisterWithWrongDescriptorLength) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len - 1),
            RDP_ERR_INVALID);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, 0),
            RDP_ERR_INVALID);
  uint8_t longer[64] = {};
  std::memcpy(longer, d.bytes, d.len);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), longer, sizeof(longer)),
            RDP_ERR_INVALID);
  EXPECT_EQ(server().DeregisterRdmaMemory(99, d.bytes, d.len), RDP_ERR_INVALID);
  EXPECT_EQ(server().DeregisterRdmaMemory(sconn(), d.bytes, d.len), RDP_OK);
}

// WSPRdmaWrite "dwTargetDescriptorLength" and NdkRead "RemoteToken ... an
// opaque array of bytes": short or garbage descriptors are refused at post.
TEST_F(SeedTest, ShortOrGarbageDescriptorsAreFaults) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_READWRITE);
  uint8_t* buf = Buffer(client(), 256, 0x10);
  rdp_sge sge{buf, 16, Lkey(client(), buf, 256)};
  rdp_overlapped ov{};
  EXPECT_EQ(client().Write(cconn(), &sge, 1, d.bytes, 16, 0, 0, &ov),
            RDP_ERR_FAULT);
  EXPECT_EQ(client().Write(cconn(), &sge, 1, nullptr, 32, 0, 0, &ov),
            RDP_ERR_FAULT);
  uint8_t garbage[RDP_DESCRIPTOR_BYTES];
  std::memset(garbage, 0xA5, sizeof(garbage));
  EXPECT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, garbage,
                          sizeof(garbage), 0, &ov),
            RDP_ERR_FAULT);
  EXPECT_EQ(client().Read(cconn(), &sge, 1, d.d()->address, d.bytes, 8, 0, &ov),
            RDP_ERR_FAULT);
  EXPECT_EQ(target[0], 0);
}

// WSPRdmaWrite "... because of a time-out or other failure": a transport
// failure (here a remote access violation) aborts the connection for later
// posts, and the peer sees it reset.
TEST_F(SeedTest, TransportFailureAbortsTheConnection) {
  uint8_t* ro = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), ro, 256, RDP_MEM_READ);
  uint8_t* src = Buffer(client(), 256, 0x10);
  const uint32_t ls = Lkey(client(), src, 256);
  EXPECT_EQ(WriteWait(client(), cconn(), src, 16, ls, d, 0), RDP_ERR_FAULT);
  rdp_sge sge{src, 16, ls};
  rdp_overlapped ov{};
  EXPECT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_ERR_CONN_ABORTED);
  uint8_t* sbuf = Buffer(server(), 16, 0);
  rdp_sge ssge{sbuf, 16, Lkey(server(), sbuf, 16)};
  EXPECT_EQ(
      server().Read(sconn(), &ssge, 1, d.d()->address, d.bytes, d.len, 0, &ov),
      RDP_ERR_CONN_RESET);
}

// WSPRegisterRdmaMemory "for use by any number of sockets" with reference
// counting per registration: releasing it on one connection leaves the
// other's peer able to reach it.
TEST_F(SeedTest, DeregisteringOnOneConnectionKeepsTheOther) {
  uint8_t* target = Buffer(server(), 256, 0);
  ASSERT_TRUE(server().Listen("second").ok());
  auto other = daemon_->NewClient();
  auto oc = other->Connect("second");
  ASSERT_TRUE(oc.ok());
  auto sc2 = server().Accept("second", absl::Seconds(5));
  ASSERT_TRUE(sc2.ok());
  Desc d1 = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  Desc d2 = Register(server(), *sc2, target, 256, RDP_MEM_WRITE);
  ASSERT_EQ(server().DeregisterRdmaMemory(sconn(), d1.bytes, d1.len), RDP_OK);
  uint8_t* a = Buffer(client(), 16, 0xA1);
  uint8_t* b = Buffer(*other, 16, 0xB2);
  EXPECT_EQ(WriteWait(client(), cconn(), a, 16, Lkey(client(), a, 16), d1, 0),
            RDP_ERR_FAULT);
  EXPECT_EQ(WriteWait(*other, *oc, b, 16, Lkey(*other, b, 16), d2, 0), RDP_OK);
  EXPECT_EQ(target[0], 0xB2);
}

// WSPRdmaWrite "must capture these WSABUFEX structures before it returns",
// also when the request is deferred.
TEST_F(SeedTest, DeferredSglIsCapturedAtPost) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0);
  for (int i = 0; i < 256; ++i) src[i] = static_cast<uint8_t>(255 - i);
  const uint32_t ls = Lkey(client(), src, 256);
  rdp_overlapped ov{};
  {
    rdp_sge sgl[2] = {{src, 100, ls}, {src + 100, 156, ls}};
    ASSERT_EQ(
        client().Write(cconn(), sgl, 2, d.bytes, d.len, 0, RDP_FLAG_DEFER, &ov),
        RDP_PENDING);
    std::memset(sgl, 0, sizeof(sgl));
  }
  ASSERT_EQ(client().Flush(cconn()), RDP_OK);
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &ov, true, nullptr), RDP_OK);
  EXPECT_EQ(std::memcmp(target, src, 256), 0);
}

// WSPRegisterRdmaMemory "must not overwrite the initial value" also when the
// descriptor buffer is too small as well.
TEST_F(SeedTest, OutsideArenasWinsOverSmallDescriptor) {
  std::vector<uint8_t> heap(64);
  uint8_t desc[4];
  uint32_t len = 4;
  EXPECT_EQ(server().RegisterRdmaMemory(sconn(), heap.data(), 64, RDP_MEM_WRITE,
                                        desc, &len),
            RDP_ERR_FAULT);
  EXPECT_EQ(len, 4u);
}

// WSPRdmaWrite: "in this case, the SAN service provider does not specify a
// value at lpdwNumberOfBytesWritten" while the operation is pending.
TEST_F(SeedTest, NoByteCountWhilePending) {
  control::DaemonOptions o;
  o.link_faults.loss = 1.0;
  o.retransmit_timeout_ns = 10'000'000'000ull;
  Start(o);
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  rdp_sge sge{src, 10, Lkey(client(), src, 256)};
  rdp_overlapped ov{};
  ASSERT_EQ(client().Write(cconn(), &sge, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_PENDING);
  uint32_t bytes = 0xFEEDu;
  EXPECT_EQ(client().GetOverlappedResult(cconn(), &ov, false, &bytes),
            RDP_PENDING);
  EXPECT_EQ(bytes, 0xFEEDu);
  // Ends the request while `ov` still lives: the client would otherwise
  // finish it as it closes, after this function's stack is gone.
  ASSERT_TRUE(client().Disconnect(cconn()).ok());
}

// Library-level checks of the posting arguments.
TEST_F(SeedTest, PostingArgumentsAreChecked) {
  uint8_t* target = Buffer(server(), 256, 0);
  Desc d = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  uint8_t* src = Buffer(client(), 256, 0x10);
  const uint32_t ls = Lkey(client(), src, 256);
  // One SGE more than a request takes (16).
  rdp_sge sgl[17];
  for (auto& e : sgl) e = {src, 1, ls};
  rdp_overlapped ov{};
  EXPECT_EQ(client().Write(cconn(), sgl, 17, d.bytes, d.len, 0, 0, &ov),
            RDP_ERR_INVALID);
  EXPECT_EQ(client().Write(cconn(), sgl, 1, d.bytes, d.len, 0, 0, nullptr),
            RDP_ERR_FAULT);
  EXPECT_EQ(client().Write(cconn(), nullptr, 1, d.bytes, d.len, 0, 0, &ov),
            RDP_ERR_FAULT);
  // The same checks on rdp_read (NdkRead's nSge and pSgl).
  uint8_t* source = Buffer(server(), 256, 0x6B);
  Desc r = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  const uint32_t ld = Lkey(client(), dst, 256);
  for (auto& e : sgl) e = {dst, 1, ld};
  EXPECT_EQ(
      client().Read(cconn(), sgl, 17, r.d()->address, r.bytes, r.len, 0, &ov),
      RDP_ERR_INVALID);
  EXPECT_EQ(client().Read(cconn(), sgl, 1, r.d()->address, r.bytes, r.len, 0,
                          nullptr),
            RDP_ERR_FAULT);
  EXPECT_EQ(client().Read(cconn(), nullptr, 1, r.d()->address, r.bytes, r.len,
                          0, &ov),
            RDP_ERR_FAULT);
  // None of them reached the peer: a valid read afterwards (requests run in
  // order) is the first and only completion, and the one that fills dst.
  EXPECT_EQ(dst[0], 0);
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 8, ld, r, 0), RDP_OK);
  EXPECT_EQ(dst[0], 0x6B);
  EXPECT_EQ(dst[8], 0);
}

// WSPRegisterMemory's access flags hold for local keys too: a read-only
// buffer cannot be the target of a read.
TEST_F(SeedTest, LocalAccessFlagsAreEnforced) {
  uint8_t* source = Buffer(server(), 256, 0x5E);
  Desc d = Register(server(), sconn(), source, 256, RDP_MEM_READ);
  uint8_t* dst = Buffer(client(), 256, 0);
  const uint32_t read_only = *client().RegisterMemory(dst, 256, RDP_MEM_READ);
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 256, read_only, d, 0),
            RDP_ERR_FAULT);
  EXPECT_EQ(dst[0], 0);
  uint8_t* target = Buffer(server(), 256, 0);
  Desc dt = Register(server(), sconn(), target, 256, RDP_MEM_WRITE);
  const uint32_t write_only = *client().RegisterMemory(dst, 128, RDP_MEM_WRITE);
  EXPECT_EQ(WriteWait(client(), cconn(), dst, 128, write_only, dt, 0),
            RDP_ERR_FAULT);
  EXPECT_EQ(ReadWait(client(), cconn(), dst, 128, write_only, d, 0), RDP_OK);
  EXPECT_EQ(dst[0], 0x5E);
}

}  // namespace
}  // namespace rdmaplane
