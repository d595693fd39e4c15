#include "control/registration_cache.h"

#include <gtest/gtest.h>

namespace rdmaplane::control {
namespace {

mr::Registration Reg(uint32_t owner, uint32_t conn, uint64_t addr,
                     uint64_t len, uint8_t access) {
  static uint8_t memory[1 << 16];
  mr::Registration r;
  r.owner = owner;
  r.connection = conn;
  r.address = addr;
  r.length = len;
  r.host = memory;
  r.access = access;
  return r;
}

TEST(RegistrationCacheTest, SameBufferTwiceSharesTheKeyAndCountsReferences) {
  mr::RegistrationTable table(64, 1);
  RegistrationCache cache(&table);
  auto a = cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  auto b = cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(cache.references(*a), 2u);
  EXPECT_EQ(cache.Deregister(1, 7, *a), RegistrationCache::Release::kOk);
  EXPECT_NE(table.Lookup(*a), nullptr) << "released before the last reference";
  EXPECT_EQ(cache.Deregister(1, 7, *a), RegistrationCache::Release::kOk);
  EXPECT_EQ(table.Lookup(*a), nullptr);
  EXPECT_EQ(cache.Deregister(1, 7, *a), RegistrationCache::Release::kUnknown);
}

TEST(RegistrationCacheTest, DifferentIdentityGetsDifferentKeys) {
  mr::RegistrationTable table(64, 1);
  RegistrationCache cache(&table);
  auto a = cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  auto b = cache.Register(Reg(1, 8, 0x1000, 100, mr::kAccessRemoteWrite));
  auto c = cache.Register(Reg(2, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  auto d = cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteRead));
  EXPECT_NE(*a, *b);
  EXPECT_NE(*a, *c);
  EXPECT_NE(*a, *d);
  EXPECT_EQ(cache.size(), 4u);
}

TEST(RegistrationCacheTest, OnlyTheOwnerOnItsConnectionMayDeregister) {
  mr::RegistrationTable table(64, 1);
  RegistrationCache cache(&table);
  auto a = cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  EXPECT_EQ(cache.Deregister(2, 7, *a), RegistrationCache::Release::kUnknown);
  EXPECT_EQ(cache.Deregister(1, 8, *a), RegistrationCache::Release::kUnknown);
  EXPECT_EQ(cache.Deregister(1, 7, *a + 1),
            RegistrationCache::Release::kUnknown);
  EXPECT_NE(table.Lookup(*a), nullptr);
}

TEST(RegistrationCacheTest, InUseRegistrationCannotBeReleased) {
  mr::RegistrationTable table(64, 1);
  RegistrationCache cache(&table);
  auto a = cache.Register(Reg(1, mr::kAnyConnection, 0x1000, 100,
                              mr::kAccessLocal));
  ASSERT_TRUE(table.BeginUse(*a));
  EXPECT_EQ(cache.Deregister(1, mr::kAnyConnection, *a),
            RegistrationCache::Release::kInUse);
  EXPECT_NE(table.Lookup(*a), nullptr);
  table.EndUse(*a);
  EXPECT_EQ(cache.Deregister(1, mr::kAnyConnection, *a),
            RegistrationCache::Release::kOk);
}

TEST(RegistrationCacheTest, DropOwnerAndConnectionRemoveEverything) {
  mr::RegistrationTable table(64, 1);
  RegistrationCache cache(&table);
  auto a = cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  cache.Register(Reg(1, 7, 0x1000, 100, mr::kAccessRemoteWrite));
  auto b = cache.Register(Reg(1, 8, 0x2000, 100, mr::kAccessRemoteRead));
  auto c = cache.Register(Reg(2, 9, 0x3000, 100, mr::kAccessRemoteRead));
  EXPECT_EQ(cache.DropConnection(7), 1u);
  EXPECT_EQ(table.Lookup(*a), nullptr);
  EXPECT_NE(table.Lookup(*b), nullptr);
  EXPECT_EQ(cache.DropOwner(1), 1u);
  EXPECT_EQ(table.Lookup(*b), nullptr);
  EXPECT_NE(table.Lookup(*c), nullptr);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(RegistrationCacheTest, OwnerLimitCountsDistinctRegistrations) {
  mr::RegistrationTable table(64, 1);
  RegistrationCache cache(&table);
  EXPECT_TRUE(cache.Register(Reg(1, 7, 0x1000, 1, mr::kAccessRemoteWrite), 2));
  EXPECT_TRUE(cache.Register(Reg(1, 7, 0x2000, 1, mr::kAccessRemoteWrite), 2));
  // A third distinct one is over the limit; a repeat is not new.
  EXPECT_FALSE(cache.Register(Reg(1, 7, 0x3000, 1, mr::kAccessRemoteWrite), 2));
  EXPECT_TRUE(cache.Register(Reg(1, 7, 0x2000, 1, mr::kAccessRemoteWrite), 2));
  // Another owner has its own share.
  EXPECT_TRUE(cache.Register(Reg(2, 7, 0x3000, 1, mr::kAccessRemoteWrite), 2));
  EXPECT_EQ(cache.CountOwner(1), 2u);
  EXPECT_EQ(cache.DropOwner(1), 2u);
  EXPECT_EQ(cache.CountOwner(1), 0u);
  EXPECT_TRUE(cache.Register(Reg(1, 7, 0x3000, 1, mr::kAccessRemoteWrite), 2));
}

TEST(RegistrationCacheTest, FullTableIsReported) {
  mr::RegistrationTable table(2, 1);
  RegistrationCache cache(&table);
  EXPECT_TRUE(cache.Register(Reg(1, 7, 0x1000, 1, mr::kAccessRemoteWrite)));
  EXPECT_TRUE(cache.Register(Reg(1, 7, 0x2000, 1, mr::kAccessRemoteWrite)));
  EXPECT_FALSE(cache.Register(Reg(1, 7, 0x3000, 1, mr::kAccessRemoteWrite)));
}

}  // namespace
}  // namespace rdmaplane::control
