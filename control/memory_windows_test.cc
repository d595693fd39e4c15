#include "control/memory_windows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dataplane/mr/registration_table.h"

namespace rdmaplane::control {
namespace {

constexpr uint32_t kSession = 5;
constexpr uid_t kUid = 1000;
constexpr uint32_t kPd = 0x80000003;
constexpr uint32_t kQp = 20;
constexpr uint32_t kOtherQp = 22;
constexpr uint64_t kAll =
    shm::kBindRemoteRead | shm::kBindRemoteWrite | shm::kBindRegionAllowsBind;

class MemoryWindowsTest : public ::testing::Test {
 protected:
  MemoryWindowsTest() : table_(64, 1), windows_(&table_, 8) {
    mr::Registration r;
    r.owner = kSession;
    r.address = 0x10000;
    r.length = sizeof(buf_);
    r.host = buf_;
    r.access = mr::kAccessLocal | mr::kAccessLocalWrite;
    lkey_ = *table_.Insert(r);
    r.access = mr::kAccessLocal;
    read_only_lkey_ = *table_.Insert(r);
  }

  uint32_t Alloc(uint32_t type) {
    const shm::ControlResponse resp = windows_.Alloc(kSession, kUid, kPd, type);
    EXPECT_EQ(resp.status, shm::kStatusOk) << resp.message;
    return resp.key;
  }

  static shm::SendEntry BindEntry(uint32_t window, uint8_t tag, uint32_t lkey,
                                  uint64_t address, uint32_t length,
                                  uint64_t bits = kAll) {
    shm::SendEntry e{};
    e.op = shm::kSendBindMw;
    e.rkey = window;
    e.imm = (window & ~0xFFu) | tag;
    e.swap_add = bits;
    e.num_sge = 1;
    e.sge[0] = {address, length, lkey};
    return e;
  }

  MemoryWindows::Outcome Run(const shm::SendEntry& e, uint32_t qp = kQp,
                             uint32_t pd = kPd) {
    const auto o = windows_.Execute(kSession, pd, qp, e);
    EXPECT_TRUE(o.has_value());
    return o.value_or(MemoryWindows::Outcome{-100, 0});
  }

  uint32_t Bound(uint32_t window, uint8_t tag) {
    return (window & ~0xFFu) | tag;
  }

  mr::AccessCheck Remote(uint32_t key, uint64_t address, uint64_t length,
                         uint32_t qp = kQp) {
    return mr::ResolveRemote(table_, key, kPd, mr::kAccessRemoteWrite, address,
                             length, qp)
        .check;
  }

  uint8_t buf_[4096] = {};
  mr::RegistrationTable table_;
  MemoryWindows windows_;
  uint32_t lkey_ = 0;
  uint32_t read_only_lkey_ = 0;
};

TEST_F(MemoryWindowsTest, TypeTwoBindReachesTheWindowThroughItsQueuePairOnly) {
  const uint32_t w = Alloc(2);
  EXPECT_EQ(Run(BindEntry(w, 7, lkey_, 0x10100, 256)).status, shm::kStatusOk);
  const uint32_t key = Bound(w, 7);
  EXPECT_EQ(Remote(key, 0x10100, 256), mr::AccessCheck::kOk);
  EXPECT_EQ(Remote(key, 0x10100, 257), mr::AccessCheck::kOutOfRange);
  EXPECT_EQ(Remote(key, 0x100FF, 1), mr::AccessCheck::kOutOfRange);
  EXPECT_EQ(Remote(key, 0x10100, 1, kOtherQp),
            mr::AccessCheck::kWrongConnection);
  EXPECT_EQ(Remote(w, 0x10100, 1), mr::AccessCheck::kUnknownKey);
  // The window's memory is the region's, at the window's offset.
  EXPECT_EQ(mr::ResolveRemote(table_, key, kPd, mr::kAccessRemoteRead, 0x10100,
                              1, kQp)
                .host,
            buf_ + 0x100);
  // Bound: no second bind until it is invalidated; the region stays.
  EXPECT_EQ(Run(BindEntry(w, 8, lkey_, 0x10100, 16)).detail,
            shm::kDetailMwBind);
  EXPECT_TRUE(windows_.Holds(kSession, lkey_));
  EXPECT_TRUE(windows_.HoldsRegion(kSession, 0x10000, sizeof(buf_)));
  EXPECT_FALSE(windows_.HoldsRegion(kSession, 0x10000, 8));
  EXPECT_FALSE(windows_.HoldsRegion(kSession + 1, 0x10000, sizeof(buf_)));
  shm::SendEntry inv{};
  inv.op = shm::kSendLocalInvalidate;
  inv.rkey = Bound(w, 9);  // not its key
  EXPECT_EQ(Run(inv).detail, shm::kDetailLocalOperation);
  inv.rkey = key;
  EXPECT_EQ(Run(inv).status, shm::kStatusOk);
  EXPECT_EQ(Remote(key, 0x10100, 1), mr::AccessCheck::kUnknownKey);
  EXPECT_FALSE(windows_.Holds(kSession, lkey_));
  EXPECT_FALSE(windows_.HoldsRegion(kSession, 0x10000, sizeof(buf_)));
  EXPECT_EQ(Run(inv).status, shm::kStatusOk);  // free already: nothing to do
  // Bound again, once readers passed the old binding.
  EXPECT_FALSE(
      windows_.Execute(kSession, kPd, kQp, BindEntry(w, 8, lkey_, 0x10000, 16))
          .has_value());
  table_.Quiescent(0);
  EXPECT_EQ(Run(BindEntry(w, 8, lkey_, 0x10000, 16)).status, shm::kStatusOk);
  EXPECT_EQ(Remote(Bound(w, 8), 0x10000, 16), mr::AccessCheck::kOk);
  EXPECT_EQ(Remote(key, 0x10100, 1), mr::AccessCheck::kUnknownKey);
}

TEST_F(MemoryWindowsTest, BindsTheRulesRefuse) {
  const uint32_t w = Alloc(2);
  // Outside the region, before it, wrapping.
  EXPECT_EQ(Run(BindEntry(w, 1, lkey_, 0x10F00, 0x200)).detail,
            shm::kDetailMwBind);
  EXPECT_EQ(Run(BindEntry(w, 1, lkey_, 0xFFFF, 2)).detail, shm::kDetailMwBind);
  EXPECT_EQ(Run(BindEntry(w, 1, lkey_, ~uint64_t{0}, 2)).detail,
            shm::kDetailMwBind);
  // A region registered without IBV_ACCESS_MW_BIND.
  EXPECT_EQ(
      Run(BindEntry(w, 1, lkey_, 0x10000, 8, shm::kBindRemoteRead)).detail,
      shm::kDetailMwBind);
  // Remote write on a region the daemon may not write.
  EXPECT_EQ(Run(BindEntry(w, 1, read_only_lkey_, 0x10000, 8)).detail,
            shm::kDetailMwBind);
  EXPECT_EQ(Run(BindEntry(w, 1, read_only_lkey_, 0x10000, 8,
                          shm::kBindRemoteRead | shm::kBindRegionAllowsBind))
                .status,
            shm::kStatusOk);
  const uint32_t w2 = Alloc(2);
  // A queue pair of another protection domain; zero length; no such key;
  // unknown bits; a window of another session.
  EXPECT_EQ(Run(BindEntry(w2, 1, lkey_, 0x10000, 8), kQp, kPd + 1).detail,
            shm::kDetailMwBind);
  EXPECT_EQ(Run(BindEntry(w2, 1, lkey_, 0x10000, 0)).detail,
            shm::kDetailMwBind);
  EXPECT_EQ(Run(BindEntry(w2, 1, 0x7777, 0x10000, 8)).detail,
            shm::kDetailMwBind);
  EXPECT_EQ(Run(BindEntry(w2, 1, lkey_, 0x10000, 8, kAll | 0x100)).detail,
            shm::kDetailMwBind);
  EXPECT_FALSE(
      windows_
          .Execute(kSession + 1, kPd, kQp, BindEntry(w2, 1, lkey_, 0x10000, 8))
          ->status == shm::kStatusOk);
  // A window key is never an lkey, nor a region for another window.
  EXPECT_EQ(Run(BindEntry(w2, 1, Bound(w, 1), 0x10000, 8)).detail,
            shm::kDetailMwBind);
  // Type 1 windows cannot be invalidated.
  const uint32_t t1 = Alloc(1);
  shm::SendEntry inv{};
  inv.op = shm::kSendLocalInvalidate;
  inv.rkey = t1;
  EXPECT_EQ(Run(inv).detail, shm::kDetailLocalOperation);
  // Nor can regions.
  inv.rkey = lkey_;
  EXPECT_EQ(Run(inv).detail, shm::kDetailLocalOperation);
  EXPECT_EQ(windows_.Alloc(kSession, kUid, kPd, 3).status, shm::kStatusInvalid);
}

TEST_F(MemoryWindowsTest,
       TypeOneRebindsOverItsBindingAndUnbindsWithLengthZero) {
  const uint32_t w = Alloc(1);
  EXPECT_EQ(Run(BindEntry(w, 1, lkey_, 0x10000, 64)).status, shm::kStatusOk);
  // Any queue pair of the domain reaches a type 1 window.
  EXPECT_EQ(Remote(Bound(w, 1), 0x10000, 64, kOtherQp), mr::AccessCheck::kOk);
  // The old binding goes at once; the new one waits until the engines
  // moved on from the old.
  EXPECT_FALSE(
      windows_.Execute(kSession, kPd, kQp, BindEntry(w, 2, lkey_, 0x10040, 64))
          .has_value());
  EXPECT_EQ(Remote(Bound(w, 1), 0x10000, 1), mr::AccessCheck::kUnknownKey);
  table_.Quiescent(0);
  EXPECT_EQ(Run(BindEntry(w, 2, lkey_, 0x10040, 64)).status, shm::kStatusOk);
  EXPECT_EQ(Remote(Bound(w, 2), 0x10040, 64), mr::AccessCheck::kOk);
  EXPECT_EQ(Run(BindEntry(w, 3, lkey_, 0x10040, 0)).status, shm::kStatusOk);
  EXPECT_EQ(Remote(Bound(w, 2), 0x10040, 1), mr::AccessCheck::kUnknownKey);
  EXPECT_FALSE(windows_.Holds(kSession, lkey_));
}

TEST_F(MemoryWindowsTest, ZeroBasedWindowsAreAddressedFromZero) {
  const uint32_t w = Alloc(2);
  ASSERT_EQ(Run(BindEntry(w, 4, lkey_, 0x10200, 32, kAll | shm::kBindZeroBased))
                .status,
            shm::kStatusOk);
  const mr::AccessResult r = mr::ResolveRemote(
      table_, Bound(w, 4), kPd, mr::kAccessRemoteWrite, 0, 32, kQp);
  ASSERT_EQ(r.check, mr::AccessCheck::kOk);
  EXPECT_EQ(r.host, buf_ + 0x200);
  EXPECT_EQ(Remote(Bound(w, 4), 1, 32), mr::AccessCheck::kOutOfRange);
}

TEST_F(MemoryWindowsTest, InvalidationsAndEndsOfQueuePairsAndSessions) {
  const uint32_t w = Alloc(2);
  ASSERT_EQ(Run(BindEntry(w, 5, lkey_, 0x10000, 8)).status, shm::kStatusOk);
  // The peer's SEND with Invalidate: the engine invalidates the key.
  ASSERT_TRUE(table_.Invalidate(Bound(w, 5)));
  EXPECT_FALSE(windows_.Holds(kSession, lkey_));
  table_.Quiescent(0);
  ASSERT_EQ(Run(BindEntry(w, 6, lkey_, 0x10000, 8)).status, shm::kStatusOk);
  // A transfer holds the key when the queue pair ends: it stops resolving
  // now and leaves the table once released.
  ASSERT_TRUE(table_.BeginUse(Bound(w, 6)));
  windows_.DropScope(kQp);
  EXPECT_EQ(Remote(Bound(w, 6), 0x10000, 8), mr::AccessCheck::kUnknownKey);
  EXPECT_TRUE(windows_.Tidy());
  table_.EndUse(Bound(w, 6));
  EXPECT_FALSE(windows_.Tidy());
  // Deallocated or the session gone: the slots go back.
  const uint32_t live = table_.live();
  EXPECT_EQ(windows_.Dealloc(kSession, w).status, shm::kStatusOk);
  EXPECT_EQ(windows_.Dealloc(kSession, w).status, shm::kStatusInvalid);
  table_.Quiescent(0);
  table_.Reclaim();
  EXPECT_EQ(table_.live(), live - 1);
  const uint32_t w2 = Alloc(2);
  ASSERT_EQ(Run(BindEntry(w2, 1, lkey_, 0x10000, 8)).status, shm::kStatusOk);
  windows_.DropOwner(kSession);
  EXPECT_EQ(windows_.size(), 0u);
  EXPECT_EQ(Remote(Bound(w2, 1), 0x10000, 8), mr::AccessCheck::kUnknownKey);
  // At most max_per_session windows.
  for (int i = 0; i < 8; ++i) Alloc(1);
  EXPECT_EQ(windows_.Alloc(kSession, kUid, kPd, 1).status, shm::kStatusLimit);
}

TEST_F(MemoryWindowsTest, RegionStaysWhileATransferHoldsAnUnboundKey) {
  const uint32_t w = Alloc(2);
  ASSERT_EQ(Run(BindEntry(w, 3, lkey_, 0x10000, 64)).status, shm::kStatusOk);
  // A peer's WRITE holds the window's key; the client invalidates it.
  ASSERT_TRUE(table_.BeginUse(Bound(w, 3)));
  shm::SendEntry inv{};
  inv.op = shm::kSendLocalInvalidate;
  inv.rkey = Bound(w, 3);
  EXPECT_EQ(Run(inv).status, shm::kStatusOk);
  EXPECT_EQ(Remote(Bound(w, 3), 0x10000, 8), mr::AccessCheck::kUnknownKey);
  // The transfer may still write the region: it stays.
  EXPECT_TRUE(windows_.Holds(kSession, lkey_));
  EXPECT_TRUE(windows_.HoldsRegion(kSession, 0x10000, sizeof(buf_)));
  int owners = 0;
  windows_.ForEachMemoryOwner(kSession,
                              [&](const rc::MemoryOwner*) { ++owners; });
  EXPECT_EQ(owners, 1);
  EXPECT_TRUE(windows_.Tidy());
  table_.EndUse(Bound(w, 3));
  EXPECT_FALSE(windows_.Tidy());
  EXPECT_FALSE(windows_.Holds(kSession, lkey_));
}

TEST_F(MemoryWindowsTest, OnlyALocalRegistrationTakesAWindow) {
  // The client's own memory under a connection's or a domain's remote key:
  // it goes with its connection or domain, so no window is bound to it.
  mr::Registration remote;
  remote.owner = kSession;
  remote.connection = kPd;
  remote.address = 0x10000;
  remote.length = sizeof(buf_);
  remote.host = buf_;
  remote.access = mr::kAccessRemoteRead | mr::kAccessRemoteWrite;
  const uint32_t rkey = *table_.Insert(remote);
  const uint32_t w = Alloc(2);
  EXPECT_EQ(Run(BindEntry(w, 1, rkey, 0x10000, 64)).detail, shm::kDetailMwBind);
}

TEST(MemoryWindowsAccountsTest, EachWindowIsARegistrationOfItsUser) {
  mr::RegistrationTable table(64, 1);
  UserLimits limits;
  limits.registrations = 3;
  UserAccounts accounts(limits);
  MemoryWindows windows(&table, 100, &accounts);
  std::vector<uint32_t> keys;
  for (int i = 0; i < 3; ++i) {
    const shm::ControlResponse r = windows.Alloc(kSession + i, kUid, kPd, 2);
    ASSERT_EQ(r.status, shm::kStatusOk) << r.message;
    keys.push_back(r.key);
  }
  // The user's allowance holds across its sessions.
  EXPECT_EQ(windows.Alloc(kSession + 9, kUid, kPd, 1).status,
            shm::kStatusNoBuffers);
  EXPECT_EQ(windows.Alloc(kSession, kUid + 1, kPd, 1).status, shm::kStatusOk);
  // Given back with the window.
  ASSERT_EQ(windows.Dealloc(kSession, keys[0]).status, shm::kStatusOk);
  EXPECT_EQ(windows.Alloc(kSession, kUid, kPd, 1).status, shm::kStatusOk);
  windows.DropOwner(kSession + 1);
  EXPECT_EQ(accounts.Used(kUid, Resource::kRegistrations), 2u);
}

}  // namespace
}  // namespace rdmaplane::control
