// Registrations as the control plane serves them, over a session whose
// arena is plain memory: local keys and RDMA descriptors, the seeds' order
// of checks, reference counts, every field of a descriptor checked on
// deregistration, and each distinct registration charged to its user until
// it goes -- by deregistration, the end of its connection or of its session.
#include "control/memory_service.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

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

// Arenas of memfds, as clients hand them over: a registration across
// several, adjacent in the client's address space, is mapped contiguously
// (a view); a newer arena takes over the addresses of older ones.
class ArenaViewTest : public ::testing::Test {
 protected:
  ArenaViewTest()
      : table_(512, 1),
        accounts_(UserLimits{}),
        memory_(&table_, /*max_per_session=*/256, &accounts_,
                &arena_memory_) {
    session_.id = 3;
    session_.uid = 1000;
    table_.Offline(0);  // no engine reads the table here
  }
  ~ArenaViewTest() override {
    memory_.DropOwner(session_.id);
    table_.Reclaim();
    for (ArenaView& v : session_.views) {
      arena_memory_.Release(v.host, v.bytes, -1, std::move(v.owner));
    }
    for (auto& [id, a] : session_.arenas) {
      arena_memory_.Release(a.host, a.bytes, a.fd, std::move(a.owner));
    }
  }
  // A sealed memfd of `bytes` at `client_address`, mapped here, its bytes
  // filled with `fill`.
  Arena& AddArena(uint32_t id, uint64_t client_address, uint64_t bytes,
                  uint8_t fill) {
    Arena a;
    a.client_address = client_address;
    a.bytes = bytes;
    a.fd = memfd_create("arena-view-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(a.fd, 0);
    EXPECT_EQ(ftruncate(a.fd, static_cast<off_t>(bytes)), 0);
    void* host = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                      a.fd, 0);
    EXPECT_NE(host, MAP_FAILED);
    a.host = static_cast<uint8_t*>(host);
    std::memset(a.host, fill, bytes);
    EXPECT_TRUE(SealAgainstHoles(a.fd).ok());
    a.owner = arena_memory_.Adopt(a.host, bytes, a.fd);
    return session_.arenas[id] = std::move(a);
  }
  shm::ControlResponse Register(uint64_t address, uint64_t length) {
    shm::ControlRequest r{};
    r.op = shm::kOpRegisterLocal;
    r.address = address;
    r.length = length;
    r.flags = shm::kAccessReadWrite;
    return memory_.RegisterLocal(session_, r);
  }

  mr::RegistrationTable table_;
  UserAccounts accounts_;
  ArenaMemory arena_memory_;
  MemoryService memory_;
  Session session_;
};

constexpr uint64_t kPage = 4096;

TEST_F(ArenaViewTest, ARegistrationAcrossArenasSeesTheirPagesInARow) {
  Arena& a = AddArena(1, kBase, 16 * kPage, 0xA1);
  Arena& b = AddArena(2, kBase + 16 * kPage, 8 * kPage, 0xB2);
  ASSERT_EQ(Register(kBase + 15 * kPage + 100, 2 * kPage).status,
            shm::kStatusOk);
  ASSERT_EQ(session_.views.size(), 1u);
  uint8_t* view = session_.Translate(kBase + 15 * kPage + 100, 2 * kPage);
  ASSERT_NE(view, nullptr);
  // The same pages: what either side writes, the other reads.
  EXPECT_EQ(view[0], 0xA1);
  EXPECT_EQ(view[kPage - 101], 0xA1);
  EXPECT_EQ(view[kPage - 100], 0xB2);
  view[kPage - 101] = 0x11;
  view[kPage - 100] = 0x22;
  EXPECT_EQ(a.host[16 * kPage - 1], 0x11);
  EXPECT_EQ(b.host[0], 0x22);
  b.host[kPage] = 0x33;
  EXPECT_EQ(view[2 * kPage - 100], 0x33);
  // Another registration over the same arenas uses the same view; one
  // inside one arena needs none.
  ASSERT_EQ(Register(kBase + 10 * kPage, 10 * kPage).status, shm::kStatusOk);
  ASSERT_EQ(Register(kBase, kPage).status, shm::kStatusOk);
  EXPECT_EQ(session_.views.size(), 1u);
  EXPECT_EQ(session_.Translate(kBase, kPage), a.host);
  // Past the last arena, or over a hole between arenas: refused.
  EXPECT_EQ(Register(kBase + 20 * kPage, 5 * kPage).status,
            shm::kStatusFault);
  AddArena(3, kBase + 25 * kPage, kPage, 0xC3);
  EXPECT_EQ(Register(kBase + 23 * kPage, 3 * kPage).status,
            shm::kStatusFault);
  EXPECT_EQ(session_.views.size(), 1u);
}

TEST_F(ArenaViewTest, ANewerArenaTakesOverTheAddressesOfOlderOnes) {
  Arena& old = AddArena(1, kBase, 16 * kPage, 0x01);
  const shm::ControlResponse before = Register(kBase + 4 * kPage, kPage);
  ASSERT_EQ(before.status, shm::kStatusOk);
  Arena& fresh = AddArena(2, kBase + 4 * kPage, 4 * kPage, 0x02);
  EXPECT_EQ(session_.PiecesOf(kBase, 16 * kPage),
            (std::vector<ArenaPiece>{{kBase, kBase + 4 * kPage, 1},
                                     {kBase + 4 * kPage, kBase + 8 * kPage, 2},
                                     {kBase + 8 * kPage, kBase + 16 * kPage,
                                      1}}));
  EXPECT_EQ(session_.Translate(kBase + 4 * kPage, kPage), fresh.host);
  EXPECT_EQ(session_.Translate(kBase + 8 * kPage, kPage),
            old.host + 8 * kPage);
  // The same addresses again are another registration now, of the new
  // pages; the one made before keeps the old pages.
  const shm::ControlResponse after = Register(kBase + 4 * kPage, kPage);
  ASSERT_EQ(after.status, shm::kStatusOk);
  EXPECT_NE(after.key, before.key);
  const mr::Registration* r = table_.Lookup(before.key);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->host, old.host + 4 * kPage);
  r = table_.Lookup(after.key);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->host, fresh.host);
  // Across all three pieces: a view of old, new, old.
  ASSERT_EQ(Register(kBase + 2 * kPage, 10 * kPage).status, shm::kStatusOk);
  uint8_t* view = session_.Translate(kBase + 2 * kPage, 10 * kPage);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view[0], 0x01);
  EXPECT_EQ(view[2 * kPage], 0x02);
  EXPECT_EQ(view[6 * kPage], 0x01);
}

TEST_F(ArenaViewTest, ViewsNoRegistrationUsesGoWhenTheSessionHasItsMost) {
  const size_t n = Session::kMaxViews + 2;
  for (uint32_t i = 0; i < n; ++i) {
    AddArena(i + 1, kBase + i * kPage, kPage, static_cast<uint8_t>(i));
  }
  std::vector<uint32_t> keys;
  for (uint32_t i = 0; i < Session::kMaxViews; ++i) {
    const shm::ControlResponse r = Register(kBase + i * kPage + 10, kPage);
    ASSERT_EQ(r.status, shm::kStatusOk) << i << ": " << r.message;
    keys.push_back(r.key);
  }
  ASSERT_EQ(session_.views.size(), Session::kMaxViews);
  // All in use: the next view is refused, and nothing is lost.
  shm::ControlResponse r =
      Register(kBase + Session::kMaxViews * kPage + 10, kPage);
  EXPECT_EQ(r.status, shm::kStatusNoBuffers);
  EXPECT_NE(std::strstr(r.message, "across arenas"), nullptr) << r.message;
  // Half of them deregistered: the next view takes the place of those.
  for (uint32_t i = 0; i < Session::kMaxViews / 2; ++i) {
    shm::ControlRequest d{};
    d.op = shm::kOpDeregisterLocal;
    d.key = keys[i];
    ASSERT_EQ(memory_.DeregisterLocal(session_, d).status, shm::kStatusOk);
  }
  r = Register(kBase + Session::kMaxViews * kPage + 10, kPage);
  ASSERT_EQ(r.status, shm::kStatusOk) << r.message;
  EXPECT_EQ(session_.views.size(), Session::kMaxViews / 2 + 1);
  // The views still used still translate.
  const uint32_t kept = Session::kMaxViews - 1;
  uint8_t* view = session_.Translate(kBase + kept * kPage + 10, kPage);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view[kPage - 11], static_cast<uint8_t>(kept));
  EXPECT_EQ(view[kPage - 10], static_cast<uint8_t>(kept + 1));
}

}  // namespace
}  // namespace rdmaplane::control
