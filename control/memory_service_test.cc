// Registrations as the control plane serves them, over a session whose
// arena is plain memory: local keys and RDMA descriptors, the seeds' order
// of checks, reference counts, every field of a descriptor checked on
// deregistration, and each distinct registration charged to its user until
// it goes -- by deregistration, the end of its connection or of its session.
#include "control/memory_service.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace rdmaplane::control {
namespace {

constexpr uint64_t kBase = 0x7f0000000000ull;
constexpr uint64_t kBytes = 1u << 20;

class MemoryServiceTest : public ::testing::Test {
 protected:
  MemoryServiceTest()
      : table_(256, 1),
        accounts_(Limits()),
        memory_(&table_, /*max_per_session=*/8, &accounts_),
        host_(kBytes) {
    session_.id = 7;
    session_.uid = 1000;
    Arena a;
    a.client_address = kBase;
    a.bytes = kBytes;
    a.host = host_.data();
    session_.arenas[1] = std::move(a);
  }
  static UserLimits Limits() {
    UserLimits l;
    l.registrations = 12;
    return l;
  }
  static shm::ControlRequest Local(uint64_t offset, uint64_t length,
                                   uint32_t flags = shm::kAccessReadWrite) {
    shm::ControlRequest r{};
    r.op = shm::kOpRegisterLocal;
    r.address = kBase + offset;
    r.length = length;
    r.flags = flags;
    return r;
  }
  static shm::ControlRequest Rdma(uint64_t offset, uint64_t length,
                                  uint32_t flags = shm::kAccessReadWrite) {
    shm::ControlRequest r = Local(offset, length, flags);
    r.op = shm::kOpRegisterRdma;
    r.descriptor_length = shm::kDescriptorBytes;
    return r;
  }
  static shm::ControlRequest Dereg(const shm::RdmaDescriptor& d) {
    shm::ControlRequest r{};
    r.op = shm::kOpDeregisterRdma;
    std::memcpy(r.descriptor, &d, sizeof(d));
    r.descriptor_length = sizeof(d);
    return r;
  }
  static shm::RdmaDescriptor DescOf(const shm::ControlResponse& r) {
    shm::RdmaDescriptor d;
    std::memcpy(&d, r.descriptor, sizeof(d));
    return d;
  }

  mr::RegistrationTable table_;
  UserAccounts accounts_;
  MemoryService memory_;
  std::vector<uint8_t> host_;
  Session session_;
};

TEST_F(MemoryServiceTest, TheSeedsOrderOfChecks) {
  // Flags first, then the connection, then the buffer, then the size.
  for (uint32_t flags : {0u, 8u, 1u << 31}) {
    EXPECT_EQ(
        memory_.RegisterRdma(session_, std::nullopt, Rdma(0, 64, flags)).status,
        shm::kStatusInvalid)
        << flags;
  }
  EXPECT_EQ(memory_.RegisterRdma(session_, std::nullopt, Rdma(0, 64)).status,
            shm::kStatusNotConnected);
  shm::ControlResponse outside =
      memory_.RegisterRdma(session_, 3, Rdma(kBytes, 64));
  EXPECT_EQ(outside.status, shm::kStatusFault);
  EXPECT_EQ(outside.descriptor_length, 0u) << "the caller's length changed";
  shm::ControlRequest small = Rdma(0, 64);
  small.descriptor_length = 31;
  shm::ControlResponse too_small = memory_.RegisterRdma(session_, 3, small);
  EXPECT_EQ(too_small.status, shm::kStatusFault);
  EXPECT_EQ(too_small.descriptor_length, shm::kDescriptorBytes);
  EXPECT_EQ(memory_.size(), 0u);
}

TEST_F(MemoryServiceTest, ADescriptorMustMatchItsRegistrationInEveryField) {
  const shm::ControlResponse r = memory_.RegisterRdma(session_, 3, Rdma(0, 4096));
  ASSERT_EQ(r.status, shm::kStatusOk);
  const shm::RdmaDescriptor real = DescOf(r);
  std::vector<shm::RdmaDescriptor> altered(6, real);
  altered[0].address += 1;
  altered[1].length -= 1;
  altered[2].access = shm::kAccessRead;
  altered[3].reserved = 1;
  altered[4].rkey ^= 0x100;
  altered[5].magic ^= 1;
  for (const shm::RdmaDescriptor& d : altered) {
    EXPECT_EQ(memory_.DeregisterRdma(session_, 3, Dereg(d)).status,
              shm::kStatusInvalid);
  }
  // Another connection's scope, or another session, names nothing either.
  EXPECT_EQ(memory_.DeregisterRdma(session_, 4, Dereg(real)).status,
            shm::kStatusInvalid);
  Session other;
  other.id = 8;
  EXPECT_EQ(memory_.DeregisterRdma(other, 3, Dereg(real)).status,
            shm::kStatusInvalid);
  EXPECT_EQ(memory_.size(), 1u);
  EXPECT_EQ(memory_.DeregisterRdma(session_, 3, Dereg(real)).status,
            shm::kStatusOk);
  EXPECT_EQ(memory_.size(), 0u);
}

// Remote atomic access is a right of its own, alone or with the others,
// and part of what a descriptor names.
TEST_F(MemoryServiceTest, AtomicAccessIsCarriedToTheRegistration) {
  const shm::ControlResponse a =
      memory_.RegisterRdma(session_, 3, Rdma(0, 4096, shm::kAccessAtomic));
  ASSERT_EQ(a.status, shm::kStatusOk);
  const mr::Registration* r = table_.Lookup(a.key);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->access, mr::kAccessRemoteAtomic);
  EXPECT_EQ(DescOf(a).access, shm::kAccessAtomic);
  const shm::ControlResponse rwa = memory_.RegisterRdma(
      session_, 3,
      Rdma(8192, 4096, shm::kAccessReadWrite | shm::kAccessAtomic));
  ASSERT_EQ(rwa.status, shm::kStatusOk);
  r = table_.Lookup(rwa.key);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->access, mr::kAccessRemoteRead | mr::kAccessRemoteWrite |
                           mr::kAccessRemoteAtomic);
  // Read and write access never include atomics.
  const shm::ControlResponse rw =
      memory_.RegisterRdma(session_, 3, Rdma(16384, 4096));
  ASSERT_EQ(rw.status, shm::kStatusOk);
  EXPECT_EQ(table_.Lookup(rw.key)->access & mr::kAccessRemoteAtomic, 0);
  // A descriptor without the atomic bit names nothing.
  shm::RdmaDescriptor altered = DescOf(rwa);
  altered.access = shm::kAccessReadWrite;
  EXPECT_EQ(memory_.DeregisterRdma(session_, 3, Dereg(altered)).status,
            shm::kStatusInvalid);
  EXPECT_EQ(memory_.DeregisterRdma(session_, 3, Dereg(DescOf(rwa))).status,
            shm::kStatusOk);
  EXPECT_EQ(memory_.DeregisterRdma(session_, 3, Dereg(DescOf(a))).status,
            shm::kStatusOk);
}

TEST_F(MemoryServiceTest, RegisteringAgainAddsAReferenceNotACharge) {
  const shm::ControlResponse a = memory_.RegisterLocal(session_, Local(0, 64));
  const shm::ControlResponse b = memory_.RegisterLocal(session_, Local(0, 64));
  ASSERT_EQ(a.status, shm::kStatusOk);
  ASSERT_EQ(b.status, shm::kStatusOk);
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(accounts_.Used(1000, Resource::kRegistrations), 1u);
  shm::ControlRequest dereg{};
  dereg.key = a.key;
  EXPECT_EQ(memory_.DeregisterLocal(session_, dereg).status, shm::kStatusOk);
  EXPECT_EQ(accounts_.Used(1000, Resource::kRegistrations), 1u);
  EXPECT_EQ(memory_.DeregisterLocal(session_, dereg).status, shm::kStatusOk);
  EXPECT_EQ(accounts_.Used(1000, Resource::kRegistrations), 0u);
  EXPECT_EQ(memory_.DeregisterLocal(session_, dereg).status,
            shm::kStatusInvalid);
}

TEST_F(MemoryServiceTest, LimitsPerSessionAndPerUserAreNoBuffersWithTheirFlag) {
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(memory_.RegisterLocal(session_, Local(64 * i, 64)).status,
              shm::kStatusOk);
  }
  shm::ControlResponse r = memory_.RegisterLocal(session_, Local(4096, 64));
  EXPECT_EQ(r.status, shm::kStatusNoBuffers);
  EXPECT_NE(std::strstr(r.message, "--max_registrations_per_session"), nullptr)
      << r.message;
  // Another session of the same user: 4 more, then the user's 12 are used.
  Session s;
  s.id = 9;
  s.uid = 1000;
  std::vector<uint8_t> host(kBytes);
  Arena a;
  a.client_address = kBase;
  a.bytes = kBytes;
  a.host = host.data();
  s.arenas[1] = std::move(a);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(memory_.RegisterLocal(s, Local(8192 + 64 * i, 64)).status,
              shm::kStatusOk);
  }
  r = memory_.RegisterLocal(s, Local(16384, 64));
  EXPECT_EQ(r.status, shm::kStatusNoBuffers);
  EXPECT_NE(std::strstr(r.message, "--max_registrations_per_user"), nullptr)
      << r.message;
  // The end of a session gives its user's allowance back.
  memory_.DropOwner(7);
  EXPECT_EQ(accounts_.Used(1000, Resource::kRegistrations), 4u);
  EXPECT_EQ(memory_.RegisterLocal(s, Local(16384, 64)).status, shm::kStatusOk);
}

TEST_F(MemoryServiceTest, TheEndOfAConnectionDropsItsRegistrations) {
  ASSERT_EQ(memory_.RegisterRdma(session_, 3, Rdma(0, 64)).status,
            shm::kStatusOk);
  ASSERT_EQ(memory_.RegisterRdma(session_, 3, Rdma(64, 64)).status,
            shm::kStatusOk);
  ASSERT_EQ(memory_.RegisterRdma(session_, 5, Rdma(0, 64)).status,
            shm::kStatusOk);
  EXPECT_EQ(accounts_.Used(1000, Resource::kRegistrations), 3u);
  memory_.DropScope(3);
  EXPECT_EQ(memory_.size(), 1u);
  EXPECT_EQ(accounts_.Used(1000, Resource::kRegistrations), 1u);
  DaemonStatus st;
  memory_.AppendStatus(&st);
  ASSERT_EQ(st.registrations.size(), 1u);
  EXPECT_EQ(st.registrations[0].connection, ConnectionOfScope(5));
}

}  // namespace
}  // namespace rdmaplane::control
