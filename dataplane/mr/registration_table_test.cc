#include "dataplane/mr/registration_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/fuzz.h"

namespace rdmaplane::mr {
namespace {

using RemoveResult = RegistrationTable::RemoveResult;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint32_t IndexOf(uint32_t key) { return key >> 8; }
uint32_t TagOf(uint32_t key) { return key & 0xFF; }

Registration Reg(uint8_t* host, uint64_t address, uint64_t length,
                 uint8_t access, uint32_t connection = 7, uint32_t owner = 3) {
  Registration r;
  r.owner = owner;
  r.connection = connection;
  r.address = address;
  r.length = length;
  r.host = host;
  r.access = access;
  return r;
}

// --- Insert / Lookup / Remove ----------------------------------------------

TEST(RegistrationTableTest, InsertLookupRemove) {
  RegistrationTable table(16, 1);
  uint8_t buf[64];
  const Registration r = Reg(buf, 0x1000, sizeof(buf), kAccessRemoteRead);
  const std::optional<uint32_t> key = table.Insert(r);
  ASSERT_TRUE(key.has_value());
  EXPECT_NE(*key, 0u);
  EXPECT_NE(TagOf(*key), 0u);
  EXPECT_EQ(table.live(), 1u);

  const Registration* got = table.Lookup(*key);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->owner, r.owner);
  EXPECT_EQ(got->connection, r.connection);
  EXPECT_EQ(got->address, r.address);
  EXPECT_EQ(got->length, r.length);
  EXPECT_EQ(got->host, r.host);
  EXPECT_EQ(got->access, r.access);

  EXPECT_EQ(table.Remove(*key), RemoveResult::kOk);
  EXPECT_EQ(table.Lookup(*key), nullptr);
  EXPECT_EQ(table.live(), 0u);
  EXPECT_EQ(table.pending_reclaim(), 1u);
  EXPECT_EQ(table.Remove(*key), RemoveResult::kUnknown);
}

TEST(RegistrationTableTest, ManyLiveKeysResolveToTheirOwnRegistration) {
  RegistrationTable table(256, 1);
  std::vector<uint8_t> buf(256);
  std::vector<uint32_t> keys;
  for (uint32_t i = 0; i < 256; ++i) {
    const auto key = table.Insert(Reg(&buf[i], i * 100, 1, kAccessLocal, i, i));
    ASSERT_TRUE(key.has_value());
    keys.push_back(*key);
  }
  EXPECT_FALSE(table.Insert(Reg(buf.data(), 0, 1, kAccessLocal)).has_value());
  std::set<uint32_t> indexes;
  for (uint32_t i = 0; i < 256; ++i) {
    const Registration* r = table.Lookup(keys[i]);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->owner, i);
    EXPECT_EQ(r->host, &buf[i]);
    indexes.insert(IndexOf(keys[i]));
  }
  EXPECT_EQ(indexes.size(), 256u);
}

TEST(RegistrationTableTest, UnknownKeysDoNotResolve) {
  RegistrationTable table(4, 1);
  uint8_t buf[8];
  const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(key.has_value());
  // Key 0 never names a registration, not even one in slot 0.
  EXPECT_EQ(IndexOf(*key), 0u);
  EXPECT_EQ(table.Lookup(0), nullptr);
  EXPECT_FALSE(table.BeginUse(0));
  EXPECT_EQ(table.Remove(0), RemoveResult::kUnknown);
  // Every other tag of the same slot.
  for (uint32_t tag = 0; tag < 256; ++tag) {
    const uint32_t other = IndexOf(*key) << 8 | tag;
    if (other == *key) continue;
    EXPECT_EQ(table.Lookup(other), nullptr) << tag;
    EXPECT_FALSE(table.BeginUse(other)) << tag;
    EXPECT_EQ(table.Remove(other), RemoveResult::kUnknown) << tag;
  }
  // Free slots and indexes past the capacity.
  EXPECT_EQ(table.Lookup(1u << 8 | 1), nullptr);
  EXPECT_EQ(table.Lookup(4u << 8 | TagOf(*key)), nullptr);
  EXPECT_EQ(table.Lookup(0xFFFFFFFF), nullptr);
  EXPECT_FALSE(table.BeginUse(0xFFFFFFFF));
  EXPECT_EQ(table.in_flight(0xFFFFFFFF), 0u);
  EXPECT_EQ(table.Remove(0xFFFFFFFF), RemoveResult::kUnknown);
  EXPECT_NE(table.Lookup(*key), nullptr);
}

TEST(RegistrationTableTest, StaleKeyAfterRemoveDoesNotResolve) {
  RegistrationTable table(4, 1);
  uint8_t buf[8];
  const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(key.has_value());
  ASSERT_EQ(table.Remove(*key), RemoveResult::kOk);
  EXPECT_EQ(table.Lookup(*key), nullptr);
  EXPECT_FALSE(table.BeginUse(*key));
  EXPECT_EQ(table.in_flight(*key), 0u);
  EXPECT_EQ(table.Remove(*key), RemoveResult::kUnknown);
  EXPECT_EQ(ResolveLocal(table, *key, 3, kAccessLocal, 0, 1).check,
            AccessCheck::kUnknownKey);
}

TEST(RegistrationTableTest, StaleKeyAfterSlotReuseDoesNotResolve) {
  RegistrationTable table(1, 0);
  uint8_t a[8], b[8];
  const auto old_key = table.Insert(Reg(a, 0, sizeof(a), kAccessLocal));
  ASSERT_TRUE(old_key.has_value());
  ASSERT_EQ(table.Remove(*old_key), RemoveResult::kOk);
  const auto new_key = table.Insert(Reg(b, 0, sizeof(b), kAccessLocal));
  ASSERT_TRUE(new_key.has_value());
  EXPECT_EQ(IndexOf(*new_key), IndexOf(*old_key));  // the same slot
  EXPECT_NE(*new_key, *old_key);
  EXPECT_EQ(table.Lookup(*old_key), nullptr);
  EXPECT_FALSE(table.BeginUse(*old_key));
  EXPECT_EQ(table.Remove(*old_key), RemoveResult::kUnknown);
  ASSERT_NE(table.Lookup(*new_key), nullptr);
  EXPECT_EQ(table.Lookup(*new_key)->host, b);
}

TEST(RegistrationTableTest, TagsAreNonZeroDifferOnReuseAndAreSpread) {
  RegistrationTable table(1, 0);
  uint8_t buf[8];
  std::set<uint32_t> tags;
  uint32_t previous = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
    ASSERT_TRUE(key.has_value());
    ASSERT_EQ(IndexOf(*key), 0u);
    ASSERT_NE(TagOf(*key), 0u);
    ASSERT_NE(*key, previous) << "slot reused with the same tag";
    previous = *key;
    tags.insert(TagOf(*key));
    ASSERT_EQ(table.Remove(*key), RemoveResult::kOk);
  }
  // 2000 uniform draws from 255 tags miss one with probability ~1e-1; fewer
  // than 200 distinct tags would mean the tags are far from random.
  EXPECT_GT(tags.size(), 200u);
}

TEST(RegistrationTableTest, KeysDifferBetweenTables) {
  // The same sequence of operations on two tables gives different keys: the
  // tags come from a random source, not a counter a client could predict.
  RegistrationTable a(64, 0), b(64, 0);
  uint8_t buf[8];
  int same = 0;
  for (int i = 0; i < 64; ++i) {
    const auto ka = a.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
    const auto kb = b.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
    ASSERT_TRUE(ka.has_value() && kb.has_value());
    ASSERT_EQ(IndexOf(*ka), IndexOf(*kb));
    same += *ka == *kb;
  }
  EXPECT_LT(same, 10);  // expected 64 / 255
}

// --- Capacity and reclamation ----------------------------------------------

TEST(RegistrationTableTest, FullThenReclaimAfterQuiescent) {
  RegistrationTable table(4, 1);
  uint8_t buf[8];
  std::vector<uint32_t> keys;
  for (int i = 0; i < 4; ++i) {
    const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
    ASSERT_TRUE(key.has_value());
    keys.push_back(*key);
  }
  EXPECT_FALSE(table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal)));
  ASSERT_EQ(table.Remove(keys[1]), RemoveResult::kOk);
  EXPECT_EQ(table.live(), 3u);
  EXPECT_EQ(table.pending_reclaim(), 1u);
  // The reader has not passed a quiescent point since the removal.
  EXPECT_FALSE(table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal)));
  EXPECT_EQ(table.Reclaim(), 0u);
  EXPECT_EQ(table.pending_reclaim(), 1u);

  table.Quiescent(0);
  EXPECT_EQ(table.Reclaim(), 1u);
  EXPECT_EQ(table.pending_reclaim(), 0u);
  const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(IndexOf(*key), IndexOf(keys[1]));
  EXPECT_EQ(table.live(), 4u);
}

TEST(RegistrationTableTest, InsertReclaimsByItselfWhenFull) {
  RegistrationTable table(2, 1);
  uint8_t buf[8];
  const auto a = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  const auto b = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(a && b);
  ASSERT_EQ(table.Remove(*a), RemoveResult::kOk);
  table.Quiescent(0);
  const auto c = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(IndexOf(*c), IndexOf(*a));
  EXPECT_EQ(table.pending_reclaim(), 0u);
}

TEST(RegistrationTableTest, QuiescentBeforeTheRemovalDoesNotCount) {
  RegistrationTable table(4, 1);
  uint8_t buf[8];
  const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(key.has_value());
  table.Quiescent(0);
  ASSERT_EQ(table.Remove(*key), RemoveResult::kOk);
  EXPECT_EQ(table.Reclaim(), 0u);
  table.Quiescent(0);
  EXPECT_EQ(table.Reclaim(), 1u);
}

TEST(RegistrationTableTest, ReclaimWaitsForEveryReader) {
  RegistrationTable table(4, 3);
  uint8_t buf[8];
  const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(key.has_value());
  ASSERT_EQ(table.Remove(*key), RemoveResult::kOk);
  table.Quiescent(0);
  table.Quiescent(2);
  EXPECT_EQ(table.Reclaim(), 0u);  // reader 1 may still hold the pointer
  EXPECT_EQ(table.Reclaim(), 0u);
  table.Quiescent(1);
  EXPECT_EQ(table.Reclaim(), 1u);
  EXPECT_EQ(table.Reclaim(), 0u);
}

TEST(RegistrationTableTest, ReclaimIsInRemovalOrder) {
  RegistrationTable table(4, 2);
  uint8_t buf[8];
  const auto a = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  const auto b = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(a && b);
  ASSERT_EQ(table.Remove(*a), RemoveResult::kOk);
  table.Quiescent(0);
  table.Quiescent(1);
  ASSERT_EQ(table.Remove(*b), RemoveResult::kOk);
  table.Quiescent(0);
  // Reader 1 passed a quiescent point after `a`'s removal only.
  EXPECT_EQ(table.Reclaim(), 1u);
  EXPECT_EQ(table.pending_reclaim(), 1u);
  table.Quiescent(1);
  EXPECT_EQ(table.Reclaim(), 1u);
}

TEST(RegistrationTableTest, OfflineReaderDoesNotBlockReclamation) {
  RegistrationTable table(4, 2);
  uint8_t buf[8];
  const auto a = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  const auto b = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(a && b);
  table.Offline(1);
  ASSERT_EQ(table.Remove(*a), RemoveResult::kOk);
  table.Quiescent(0);
  EXPECT_EQ(table.Reclaim(), 1u);

  // Back online: blocks removals made from now on until its next Quiescent.
  table.Quiescent(1);
  ASSERT_EQ(table.Remove(*b), RemoveResult::kOk);
  table.Quiescent(0);
  EXPECT_EQ(table.Reclaim(), 0u);
  table.Quiescent(1);
  EXPECT_EQ(table.Reclaim(), 1u);
}

TEST(RegistrationTableTest, AllReadersOfflineOrNoReaders) {
  RegistrationTable none(2, 0);
  RegistrationTable idle(2, 2);
  idle.Offline(0);
  idle.Offline(1);
  uint8_t buf[8];
  for (RegistrationTable* table : {&none, &idle}) {
    const auto key = table->Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
    ASSERT_TRUE(key.has_value());
    ASSERT_EQ(table->Remove(*key), RemoveResult::kOk);
    EXPECT_EQ(table->Reclaim(), 1u);
  }
}

TEST(RegistrationTableTest, ZeroCapacityIsAlwaysFull) {
  RegistrationTable table(0, 1);
  uint8_t buf[8];
  EXPECT_FALSE(table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal)));
  EXPECT_EQ(table.Lookup(1), nullptr);
  EXPECT_EQ(table.Reclaim(), 0u);
}

// --- Transfer pins ----------------------------------------------------------

TEST(RegistrationTableTest, PinnedRegistrationCannotBeRemoved) {
  RegistrationTable table(4, 1);
  uint8_t buf[8];
  const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(table.in_flight(*key), 0u);
  ASSERT_TRUE(table.BeginUse(*key));
  ASSERT_TRUE(table.BeginUse(*key));
  EXPECT_EQ(table.in_flight(*key), 2u);
  EXPECT_EQ(table.Remove(*key), RemoveResult::kInUse);
  EXPECT_NE(table.Lookup(*key), nullptr);  // a failed Remove changes nothing
  table.EndUse(*key);
  EXPECT_EQ(table.in_flight(*key), 1u);
  EXPECT_EQ(table.Remove(*key), RemoveResult::kInUse);
  table.EndUse(*key);
  EXPECT_EQ(table.in_flight(*key), 0u);
  EXPECT_EQ(table.Remove(*key), RemoveResult::kOk);
  EXPECT_FALSE(table.BeginUse(*key));
  EXPECT_EQ(table.live(), 0u);
}

// Engines pin and unpin as fast as they can while the control thread tries to
// remove. Once Remove has returned kOk no pin may still be held, and no later
// BeginUse may succeed.
TEST(RegistrationTableTest, RemoveIsExactAgainstConcurrentPins) {
  constexpr int kRounds = 200;
  RegistrationTable table(4, 2);
  uint8_t buf[8];
  std::atomic<uint32_t> current_key{0};
  std::atomic<bool> removed{false};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> violations{0};
  std::atomic<uint64_t> pins{0};

  auto engine = [&](uint32_t reader) {
    while (!stop.load(std::memory_order_relaxed)) {
      const uint32_t key = current_key.load(std::memory_order_acquire);
      if (key != 0 && table.BeginUse(key)) {
        pins.fetch_add(1, std::memory_order_relaxed);
        if (removed.load(std::memory_order_seq_cst)) violations.fetch_add(1);
        if (table.in_flight(key) == 0) violations.fetch_add(1);
        table.EndUse(key);
      }
      table.Quiescent(reader);
      // Some unpinned time, so that the remover gets windows without
      // waiting for the scheduler.
      std::atomic<int> spin{0};
      while (spin.fetch_add(1, std::memory_order_relaxed) < 100) {
      }
    }
    table.Offline(reader);
  };
  std::thread e0(engine, 0), e1(engine, 1);

  uint64_t in_use = 0;
  for (int round = 0; round < kRounds; ++round) {
    // Cleared before the key can resolve again (a tag may come back).
    removed.store(false, std::memory_order_seq_cst);
    const auto key = table.Insert(Reg(buf, 0, sizeof(buf), kAccessLocal));
    ASSERT_TRUE(key.has_value());
    current_key.store(*key, std::memory_order_release);
    const uint64_t pins_before = pins.load();
    // Let the engines pin it a few times before trying to remove it.
    while (pins.load() < pins_before + 20) std::this_thread::yield();
    RemoveResult result;
    while ((result = table.Remove(*key)) == RemoveResult::kInUse) ++in_use;
    ASSERT_EQ(result, RemoveResult::kOk);
    removed.store(true, std::memory_order_seq_cst);
    EXPECT_FALSE(table.BeginUse(*key));
    while (table.Reclaim() == 0 && table.pending_reclaim() > 0) {
      std::this_thread::yield();
    }
  }
  stop.store(true);
  e0.join();
  e1.join();
  EXPECT_EQ(violations.load(), 0u);
  EXPECT_GT(pins.load(), 0u);
  // in_use counts contended removals; not asserted (scheduling dependent).
  RecordProperty("remove_in_use", std::to_string(in_use));
}

// --- Access checks -----------------------------------------------------------

// --- Memory windows: reserved slots --------------------------------------

TEST(RegistrationTableWindowTest, ReservedSlotPublishesUnderTheTagAsked) {
  RegistrationTable table(4, 1);
  uint8_t buf[64];
  const std::optional<uint32_t> index = table.Reserve();
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(table.live(), 1u);
  EXPECT_TRUE(table.Quiet(*index));
  Registration w = Reg(buf, 0x1000, 32, kAccessRemoteWrite);
  w.kind = KeyKind::kWindowType1;
  const std::optional<uint32_t> key = table.Publish(*index, 0x5A, w);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(*key, *index << 8 | 0x5A);
  ASSERT_NE(table.Lookup(*key), nullptr);
  EXPECT_EQ(table.Lookup(*key)->kind, KeyKind::kWindowType1);
  // Published: no second publication over it.
  EXPECT_FALSE(table.Publish(*index, 0x5B, w).has_value());
  // Reserved slots never reach the free list while reserved.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
  }
  EXPECT_FALSE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
}

TEST(RegistrationTableWindowTest, RepublishWaitsForReadersAndForPins) {
  RegistrationTable table(2, 1);
  uint8_t buf[64];
  const uint32_t index = *table.Reserve();
  const uint32_t first = *table.Publish(index, 1, Reg(buf, 0, 64, kAccessRemoteRead));
  ASSERT_TRUE(table.BeginUse(first));
  EXPECT_EQ(table.Unpublish(first), RemoveResult::kInUse);
  table.EndUse(first);
  EXPECT_EQ(table.Unpublish(first ^ 1), RemoveResult::kUnknown);
  ASSERT_EQ(table.Unpublish(first), RemoveResult::kOk);
  EXPECT_EQ(table.Lookup(first), nullptr);
  EXPECT_EQ(table.live(), 1u);  // still the window's
  // A reader may still hold the old registration.
  EXPECT_FALSE(table.Quiet(index));
  EXPECT_FALSE(table.Publish(index, 2, Reg(buf, 0, 8, kAccessRemoteRead)));
  table.Quiescent(0);
  EXPECT_EQ(table.Reclaim(), 0u);  // nothing freed: it stays reserved
  EXPECT_EQ(table.pending_reclaim(), 0u);
  EXPECT_TRUE(table.Quiet(index));
  const std::optional<uint32_t> second =
      table.Publish(index, 2, Reg(buf, 0, 8, kAccessRemoteRead));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(table.Lookup(first), nullptr);
  EXPECT_NE(table.Lookup(*second), nullptr);
  // Never slot 0, where the client's tag 0 would make key 0: it stays for
  // Insert.
  RegistrationTable small(2, 1);
  const std::optional<uint32_t> one = small.Reserve();
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(*one, 1u);
  EXPECT_TRUE(small.Publish(*one, 0, Reg(buf, 0, 8, kAccessRemoteRead)));
  EXPECT_FALSE(small.Reserve().has_value());
  const std::optional<uint32_t> key = small.Insert(Reg(buf, 0, 8, kAccessLocal));
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(IndexOf(*key), 0u);
}

TEST(RegistrationTableWindowTest, TheSlotsNextOccupantNeverGetsTheWindowsLastKey) {
  uint8_t buf[8];
  for (int trial = 0; trial < 200; ++trial) {
    RegistrationTable table(2, 1);
    ASSERT_TRUE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
    const uint32_t index = *table.Reserve();
    const uint8_t tag = static_cast<uint8_t>(1 + trial % 255);
    const uint32_t window = *table.Publish(index, tag, Reg(buf, 0, 8, kAccessRemoteRead));
    ASSERT_EQ(table.Unpublish(window), RemoveResult::kOk);
    table.Unreserve(index);
    table.Quiescent(0);
    table.Reclaim();
    const std::optional<uint32_t> next = table.Insert(Reg(buf, 0, 8, kAccessRemoteRead));
    ASSERT_TRUE(next.has_value());
    ASSERT_EQ(IndexOf(*next), index);
    ASSERT_NE(*next, window) << "trial " << trial;
  }
}

TEST(RegistrationTableWindowTest, UnreservedSlotIsFreeOnceQuiet) {
  RegistrationTable table(2, 1);
  uint8_t buf[8];
  ASSERT_TRUE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
  const uint32_t index = *table.Reserve();
  const uint32_t key = *table.Publish(index, 9, Reg(buf, 0, 8, kAccessRemoteRead));
  EXPECT_FALSE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
  ASSERT_EQ(table.Unpublish(key), RemoveResult::kOk);
  table.Unreserve(index);
  EXPECT_EQ(table.live(), 2u);  // pending: readers may see it still
  EXPECT_FALSE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
  table.Quiescent(0);
  EXPECT_EQ(table.Reclaim(), 1u);
  EXPECT_EQ(table.live(), 1u);
  EXPECT_FALSE(table.Quiet(index));
  ASSERT_TRUE(table.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
  // A slot never published goes back at once.
  RegistrationTable other(2, 1);
  other.Unreserve(*other.Reserve());
  EXPECT_EQ(other.live(), 0u);
  EXPECT_TRUE(other.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
  EXPECT_TRUE(other.Insert(Reg(buf, 0, 8, kAccessLocal)).has_value());
}

TEST(RegistrationTableWindowTest, InvalidatedWindowIsUnpublishedAsUsual) {
  RegistrationTable table(2, 1);
  uint8_t buf[8];
  const uint32_t index = *table.Reserve();
  const uint32_t key = *table.Publish(index, 3, Reg(buf, 0, 8, kAccessRemoteRead));
  ASSERT_TRUE(table.Invalidate(key));  // SEND with Invalidate, engine side
  EXPECT_EQ(table.Lookup(key), nullptr);
  EXPECT_FALSE(table.Publish(index, 4, Reg(buf, 0, 8, kAccessRemoteRead)));
  EXPECT_EQ(table.Unpublish(key), RemoveResult::kOk);
  table.Quiescent(0);
  table.Reclaim();
  EXPECT_TRUE(table.Publish(index, 4, Reg(buf, 0, 8, kAccessRemoteRead)));
}

TEST(CheckAccessTest, TypeTwoWindowAnswersOnlyItsQueuePair) {
  uint8_t buf[16];
  Registration w = Reg(buf, 0x2000, 16, kAccessRemoteRead, /*connection=*/9);
  w.kind = KeyKind::kWindowType2;
  w.queue_pair = 41;
  EXPECT_EQ(CheckAccess(w, 9, kAccessRemoteRead, 0x2000, 16, 41).check,
            AccessCheck::kOk);
  EXPECT_EQ(CheckAccess(w, 9, kAccessRemoteRead, 0x2000, 16, 42).check,
            AccessCheck::kWrongConnection);
  EXPECT_EQ(CheckAccess(w, 9, kAccessRemoteRead, 0x2000, 16).check,
            AccessCheck::kWrongConnection);
  // Type 1: any queue pair of the scope.
  w.kind = KeyKind::kWindowType1;
  EXPECT_EQ(CheckAccess(w, 9, kAccessRemoteRead, 0x2000, 16, 42).check,
            AccessCheck::kOk);
  // A window key is never a local key.
  w.access = kAccessLocal | kAccessRemoteRead;
  EXPECT_EQ(CheckLocalAccess(w, w.owner, kAccessLocal, 0x2000, 16).check,
            AccessCheck::kWrongConnection);
}

TEST(CheckAccessTest, RemoteAccessGranted) {
  uint8_t buf[4096];
  const Registration r =
      Reg(buf, 0x10000, sizeof(buf), kAccessRemoteRead | kAccessRemoteWrite, 9);
  AccessResult res = CheckAccess(r, 9, kAccessRemoteRead, 0x10000, 4096);
  EXPECT_EQ(res.check, AccessCheck::kOk);
  EXPECT_EQ(res.host, buf);
  res = CheckAccess(r, 9, kAccessRemoteWrite, 0x10100, 16);
  EXPECT_EQ(res.check, AccessCheck::kOk);
  EXPECT_EQ(res.host, buf + 0x100);
  res = CheckAccess(r, 9, kAccessRemoteRead | kAccessRemoteWrite, 0x10FFF, 1);
  EXPECT_EQ(res.check, AccessCheck::kOk);
  EXPECT_EQ(res.host, buf + 4095);
  // Zero-length accesses inside or at the end of the range.
  EXPECT_EQ(CheckAccess(r, 9, kAccessRemoteRead, 0x11000, 0).check,
            AccessCheck::kOk);
  EXPECT_EQ(CheckAccess(r, 9, kAccessRemoteRead, 0x11001, 0).check,
            AccessCheck::kOutOfRange);
}

TEST(CheckAccessTest, WrongConnection) {
  uint8_t buf[64];
  const Registration r = Reg(buf, 0, sizeof(buf), kAccessRemoteRead, 9);
  AccessResult res = CheckAccess(r, 10, kAccessRemoteRead, 0, 8);
  EXPECT_EQ(res.check, AccessCheck::kWrongConnection);
  EXPECT_EQ(res.host, nullptr);
  // A registration without connection scope is never remotely reachable,
  // even for a caller passing kAnyConnection.
  const Registration local = Reg(
      buf, 0, sizeof(buf), kAccessRemoteRead | kAccessLocal, kAnyConnection);
  EXPECT_EQ(CheckAccess(local, 9, kAccessRemoteRead, 0, 8).check,
            AccessCheck::kWrongConnection);
  EXPECT_EQ(CheckAccess(local, kAnyConnection, kAccessRemoteRead, 0, 8).check,
            AccessCheck::kWrongConnection);
}

TEST(CheckAccessTest, NoPermission) {
  uint8_t buf[64];
  const Registration read_only = Reg(buf, 0, sizeof(buf), kAccessRemoteRead, 9);
  const Registration write_only =
      Reg(buf, 0, sizeof(buf), kAccessRemoteWrite, 9);
  const Registration local_only = Reg(buf, 0, sizeof(buf), kAccessLocal, 9);
  EXPECT_EQ(CheckAccess(read_only, 9, kAccessRemoteWrite, 0, 8).check,
            AccessCheck::kNoPermission);
  EXPECT_EQ(CheckAccess(write_only, 9, kAccessRemoteRead, 0, 8).check,
            AccessCheck::kNoPermission);
  EXPECT_EQ(CheckAccess(local_only, 9, kAccessRemoteRead, 0, 8).check,
            AccessCheck::kNoPermission);
  EXPECT_EQ(
      CheckAccess(read_only, 9, kAccessRemoteRead | kAccessRemoteWrite, 0, 8)
          .check,
      AccessCheck::kNoPermission);
  EXPECT_EQ(CheckAccess(read_only, 9, 0, 0, 8).check,
            AccessCheck::kNoPermission);
  EXPECT_EQ(CheckAccess(read_only, 9, 0x80 | kAccessRemoteRead, 0, 8).check,
            AccessCheck::kNoPermission);
}

TEST(CheckAccessTest, OutOfRange) {
  uint8_t buf[4096];
  const Registration r = Reg(buf, 0x10000, sizeof(buf), kAccessRemoteRead, 9);
  auto check = [&](uint64_t address, uint64_t length) {
    return CheckAccess(r, 9, kAccessRemoteRead, address, length).check;
  };
  EXPECT_EQ(check(0xFFFF, 1), AccessCheck::kOutOfRange);   // starts before
  EXPECT_EQ(check(0xFFFF, 2), AccessCheck::kOutOfRange);   // straddles start
  EXPECT_EQ(check(0x10FFF, 2), AccessCheck::kOutOfRange);  // straddles end
  EXPECT_EQ(check(0x11000, 1), AccessCheck::kOutOfRange);  // just past
  EXPECT_EQ(check(0x10000, 4097), AccessCheck::kOutOfRange);
  EXPECT_EQ(check(0, kMax), AccessCheck::kOutOfRange);
  // address + length wraps to something inside the registration.
  EXPECT_EQ(check(0x10010, kMax - 0x10), AccessCheck::kOutOfRange);
  EXPECT_EQ(check(0x10010, kMax), AccessCheck::kOutOfRange);
  EXPECT_EQ(check(kMax, 0x10002), AccessCheck::kOutOfRange);
  EXPECT_EQ(check(kMax - 0x1000, 0x12000), AccessCheck::kOutOfRange);
}

TEST(CheckAccessTest, RegistrationAtTheTopOfTheAddressSpace) {
  uint8_t buf[4095];
  const uint64_t base = kMax - 4095;  // last byte at kMax - 1
  const Registration r = Reg(buf, base, sizeof(buf), kAccessRemoteWrite, 9);
  auto check = [&](uint64_t address, uint64_t length) {
    return CheckAccess(r, 9, kAccessRemoteWrite, address, length);
  };
  EXPECT_EQ(check(base, 4095).check, AccessCheck::kOk);
  EXPECT_EQ(check(kMax - 1, 1).check, AccessCheck::kOk);
  EXPECT_EQ(check(kMax - 1, 1).host, buf + 4094);
  EXPECT_EQ(check(kMax - 1, 2).check, AccessCheck::kOutOfRange);
  EXPECT_EQ(check(kMax, 1).check, AccessCheck::kOutOfRange);
  EXPECT_EQ(check(kMax - 10, 100).check, AccessCheck::kOutOfRange);  // wraps
  EXPECT_EQ(check(kMax - 10, kMax).check, AccessCheck::kOutOfRange);
  EXPECT_EQ(check(base + 10, kMax - 5).check, AccessCheck::kOutOfRange);
  EXPECT_EQ(check(base - 1, 2).check, AccessCheck::kOutOfRange);
}

TEST(CheckAccessTest, LocalAccessChecksOwnerNotConnection) {
  uint8_t buf[64];
  const Registration r =
      Reg(buf, 0x2000, sizeof(buf), kAccessLocal, kAnyConnection, /*owner=*/5);
  AccessResult res = CheckLocalAccess(r, 5, kAccessLocal, 0x2008, 8);
  EXPECT_EQ(res.check, AccessCheck::kOk);
  EXPECT_EQ(res.host, buf + 8);
  EXPECT_EQ(CheckLocalAccess(r, 6, kAccessLocal, 0x2008, 8).check,
            AccessCheck::kWrongConnection);
  EXPECT_EQ(CheckLocalAccess(r, 5, kAccessLocal, 0x2038, 9).check,
            AccessCheck::kOutOfRange);
  EXPECT_EQ(CheckLocalAccess(r, 5, kAccessLocal, kMax, 2).check,
            AccessCheck::kOutOfRange);
  // Remote-only registrations are not usable as local keys.
  const Registration remote =
      Reg(buf, 0x2000, sizeof(buf), kAccessRemoteRead, 9, /*owner=*/5);
  EXPECT_EQ(CheckLocalAccess(remote, 5, kAccessLocal, 0x2000, 8).check,
            AccessCheck::kNoPermission);
  // A key of protection domain 9 (a verbs MR's) serves that domain's queue
  // pairs only; a session-wide key serves every scope.
  const Registration in_pd =
      Reg(buf, 0x2000, sizeof(buf), kAccessLocal, 9, /*owner=*/5);
  EXPECT_EQ(CheckLocalAccess(in_pd, 5, kAccessLocal, 0x2000, 8, 9).check,
            AccessCheck::kOk);
  EXPECT_EQ(CheckLocalAccess(in_pd, 5, kAccessLocal, 0x2000, 8, 10).check,
            AccessCheck::kWrongConnection);
  EXPECT_EQ(CheckLocalAccess(r, 5, kAccessLocal, 0x2008, 8, 10).check,
            AccessCheck::kOk);
}

TEST(CheckAccessTest, ResolveThroughTheTable) {
  RegistrationTable table(8, 1);
  uint8_t buf[64];
  const auto rkey = table.Insert(
      Reg(buf, 0x3000, sizeof(buf), kAccessRemoteRead, /*connection=*/4, 1));
  const auto lkey = table.Insert(
      Reg(buf, 0x3000, sizeof(buf), kAccessLocal, kAnyConnection, 1));
  ASSERT_TRUE(rkey && lkey);
  AccessResult res =
      ResolveRemote(table, *rkey, 4, kAccessRemoteRead, 0x3010, 4);
  EXPECT_EQ(res.check, AccessCheck::kOk);
  EXPECT_EQ(res.host, buf + 0x10);
  EXPECT_EQ(
      ResolveRemote(table, *rkey ^ 1, 4, kAccessRemoteRead, 0x3010, 4).check,
      AccessCheck::kUnknownKey);
  EXPECT_EQ(ResolveRemote(table, *rkey, 5, kAccessRemoteRead, 0x3010, 4).check,
            AccessCheck::kWrongConnection);
  EXPECT_EQ(ResolveRemote(table, *rkey, 4, kAccessRemoteWrite, 0x3010, 4).check,
            AccessCheck::kNoPermission);
  EXPECT_EQ(ResolveRemote(table, *rkey, 4, kAccessRemoteRead, 0x3040, 1).check,
            AccessCheck::kOutOfRange);
  // An lkey is not an rkey.
  EXPECT_EQ(ResolveRemote(table, *lkey, 4, kAccessRemoteRead, 0x3010, 4).check,
            AccessCheck::kWrongConnection);
  res = ResolveLocal(table, *lkey, 1, kAccessLocal, 0x3000, 64);
  EXPECT_EQ(res.check, AccessCheck::kOk);
  EXPECT_EQ(res.host, buf);
  EXPECT_EQ(ResolveLocal(table, *lkey, 2, kAccessLocal, 0x3000, 64).check,
            AccessCheck::kWrongConnection);
  ASSERT_EQ(table.Remove(*lkey), RemoveResult::kOk);
  EXPECT_EQ(ResolveLocal(table, *lkey, 1, kAccessLocal, 0x3000, 64).check,
            AccessCheck::kUnknownKey);
}

// --- Concurrent stress
// ---------------------------------------------------------

// Everything a registration holds is derived from a nonce the writer picks
// before inserting it, so a reader can tell whether what it sees is whole.
constexpr uint32_t kBufferSize = 256;

Registration StressReg(uint32_t nonce, uint8_t* host) {
  Registration r;
  r.owner = nonce;
  r.connection = nonce * 2654435761u;
  r.address = uint64_t{nonce} << 12 | (nonce & 0xFFF);
  r.length = 1 + nonce % kBufferSize;
  r.host = host;
  r.access = static_cast<uint8_t>(1 + nonce % 7);
  return r;
}

uint8_t PatternByte(uint32_t nonce, uint64_t i) {
  return static_cast<uint8_t>(nonce * 31 + i * 7 + (nonce >> 8));
}

// Empty when `r` is a whole registration made by StressReg with its buffer
// still holding that registration's pattern; otherwise what is wrong.
std::string Inconsistency(const Registration& r) {
  const Registration expected = StressReg(r.owner, r.host);
  if (r.connection != expected.connection || r.address != expected.address ||
      r.length != expected.length || r.access != expected.access) {
    return "torn registration fields for nonce " + std::to_string(r.owner);
  }
  for (uint64_t i = 0; i < r.length; ++i) {
    // The buffer is rewritten by the writer only after the slot that pointed
    // at it was reclaimed; a reader that sees another pattern caught a reuse
    // under its feet. Read through a volatile so the check really reloads.
    const uint8_t byte = static_cast<const volatile uint8_t*>(r.host)[i];
    if (byte != PatternByte(r.owner, i)) {
      return "buffer reused under a reader for nonce " +
             std::to_string(r.owner);
    }
  }
  return "";
}

TEST(RegistrationTableStressTest, ReadersNeverSeeTornOrReusedRegistrations) {
  constexpr uint32_t kCapacity = 64;
  constexpr uint32_t kReaders = 2;
  const auto kDuration = std::chrono::seconds(2);

  RegistrationTable table(kCapacity, kReaders);
  // key << 32 | nonce of the live registration in each slot (0 when none),
  // set after Insert returns and cleared after Remove; readers use it to pick
  // keys and to check that a key resolves to the nonce it was inserted with.
  std::vector<std::atomic<uint64_t>> published(kCapacity);
  for (auto& p : published) p.store(0);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failures{0};
  std::mutex first_failure_mu;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    if (failures.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> lock(first_failure_mu);
      first_failure = what;
    }
  };
  std::atomic<uint64_t> hits{0}, misses{0}, pins{0};

  auto reader = [&](uint32_t id) {
    std::mt19937_64 rng(rdmaplane::testing::FuzzSeed() + id + 1);
    constexpr int kHeld = 4;
    const Registration* held[kHeld] = {};
    uint32_t held_keys[kHeld] = {};
    uint32_t held_nonces[kHeld] = {};
    uint32_t recent[8] = {};  // keys seen earlier: some are stale by now
    uint64_t iteration = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      ++iteration;
      int n = 0;
      for (int i = 0; i < kHeld; ++i) {
        uint32_t key;
        switch (rng() % 8) {
          case 0:
            key = static_cast<uint32_t>(rng());  // mostly garbage
            break;
          case 1:
          case 2:
            key = recent[rng() % 8];
            break;
          default:
            key = static_cast<uint32_t>(
                published[rng() % kCapacity].load(std::memory_order_relaxed) >>
                32);
        }
        const Registration* r = table.Lookup(key);
        if (r == nullptr) {
          misses.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        hits.fetch_add(1, std::memory_order_relaxed);
        recent[iteration % 8] = key;
        // The writer clears published[index] when it removes the key and
        // sets it after inserting the next one; Lookup's acquire orders this
        // load after the former, so it holds 0 or exactly this registration.
        const uint64_t now =
            published[key >> 8].load(std::memory_order_relaxed);
        if (static_cast<uint32_t>(now >> 32) == key &&
            static_cast<uint32_t>(now) != r->owner) {
          fail("key " + std::to_string(key) + " resolved to nonce " +
               std::to_string(r->owner) + ", inserted with " +
               std::to_string(static_cast<uint32_t>(now)));
        }
        if (std::string why = Inconsistency(*r); !why.empty()) fail(why);
        held[n] = r;
        held_keys[n] = key;
        held_nonces[n] = r->owner;
        ++n;
        if (rng() % 16 == 0 && table.BeginUse(key)) {
          pins.fetch_add(1, std::memory_order_relaxed);
          std::this_thread::yield();  // a "transfer"
          if (table.Lookup(key) != r) fail("pinned key stopped resolving");
          if (std::string why = Inconsistency(*r); !why.empty()) fail(why);
          table.EndUse(key);
        }
      }
      // Hold the pointers a while, then check that nothing changed under us:
      // same registration (nonce), still whole, buffer still its own.
      if (iteration % 64 == 0) std::this_thread::yield();
      for (int i = 0; i < n; ++i) {
        if (held[i]->owner != held_nonces[i]) {
          fail("slot of key " + std::to_string(held_keys[i]) +
               " reused under a reader");
        } else if (std::string why = Inconsistency(*held[i]); !why.empty()) {
          fail("after holding key " + std::to_string(held_keys[i]) + ": " +
               why);
        }
      }
      if (iteration % 1024 == 0) {
        // Go idle now and then: offline readers must not block reclamation,
        // and coming back online must be safe.
        table.Offline(id);
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      table.Quiescent(id);
    }
    table.Offline(id);
  };

  struct Stats {
    uint64_t inserts = 0, removes = 0, in_use = 0, full = 0, reclaimed = 0;
  } stats;
  // kCapacity + 1 buffers: each slot keeps the one of its last occupant
  // until the slot is reused, which proves it was reclaimed; so one buffer
  // is always free. They outlive the readers, which still hold pointers to
  // live registrations when the writer stops.
  std::vector<std::unique_ptr<uint8_t[]>> storage;
  for (uint32_t i = 0; i <= kCapacity; ++i) {
    storage.emplace_back(new uint8_t[kBufferSize]);
  }
  auto writer = [&] {
    std::mt19937_64 rng(rdmaplane::testing::FuzzSeed());
    std::vector<uint8_t*> free_buffers;
    for (auto& buffer : storage) free_buffers.push_back(buffer.get());
    std::vector<uint8_t*> buffer_of_slot(kCapacity, nullptr);
    std::vector<uint32_t> live;
    uint32_t next_nonce = 1;
    const auto deadline = std::chrono::steady_clock::now() + kDuration;
    while (std::chrono::steady_clock::now() < deadline) {
      for (int op = 0; op < 64; ++op) {
        const bool insert =
            live.empty() || (live.size() < kCapacity && rng() % 2 == 0);
        if (insert) {
          ASSERT_FALSE(free_buffers.empty());
          uint8_t* buffer = free_buffers.back();
          free_buffers.pop_back();
          const uint32_t nonce = next_nonce++;
          for (uint32_t i = 0; i < kBufferSize; ++i) {
            buffer[i] = PatternByte(nonce, i);
          }
          const std::optional<uint32_t> key =
              table.Insert(StressReg(nonce, buffer));
          if (!key) {
            ++stats.full;
            free_buffers.push_back(buffer);
            continue;
          }
          ++stats.inserts;
          const uint32_t index = *key >> 8;
          if (buffer_of_slot[index] != nullptr) {
            // Poison the previous occupant's buffer before it is reused.
            std::memset(buffer_of_slot[index], 0xEE, kBufferSize);
            free_buffers.push_back(buffer_of_slot[index]);
          }
          buffer_of_slot[index] = buffer;
          published[index].store(uint64_t{*key} << 32 | nonce,
                                 std::memory_order_relaxed);
          live.push_back(*key);
        } else {
          const size_t victim = rng() % live.size();
          const RemoveResult result = table.Remove(live[victim]);
          if (result == RemoveResult::kInUse) {
            ++stats.in_use;
            continue;
          }
          ASSERT_EQ(result, RemoveResult::kOk);
          ++stats.removes;
          published[live[victim] >> 8].store(0, std::memory_order_relaxed);
          live[victim] = live.back();
          live.pop_back();
        }
      }
      if (rng() % 4 == 0) stats.reclaimed += table.Reclaim();
      std::this_thread::yield();
    }
  };

  std::vector<std::thread> readers;
  for (uint32_t i = 0; i < kReaders; ++i) readers.emplace_back(reader, i);
  std::thread writer_thread(writer);
  writer_thread.join();
  stop.store(true);
  for (auto& t : readers) t.join();

  EXPECT_EQ(failures.load(), 0u) << first_failure;
  // The run must have exercised reuse under readers, not idled.
  EXPECT_GT(stats.inserts, kCapacity * 10);
  EXPECT_GT(stats.removes, kCapacity * 10);
  EXPECT_GT(hits.load(), 1000u);
  EXPECT_GT(misses.load(), 0u);
  RecordProperty("inserts", std::to_string(stats.inserts));
  RecordProperty("removes", std::to_string(stats.removes));
  RecordProperty("remove_in_use", std::to_string(stats.in_use));
  RecordProperty("insert_full", std::to_string(stats.full));
  RecordProperty("lookups_hit", std::to_string(hits.load()));
  RecordProperty("pins", std::to_string(pins.load()));
  std::printf(
      "stress: %llu inserts, %llu removes (%llu in use), %llu full, %llu "
      "hits, %llu misses, %llu pins\n",
      static_cast<unsigned long long>(stats.inserts),
      static_cast<unsigned long long>(stats.removes),
      static_cast<unsigned long long>(stats.in_use),
      static_cast<unsigned long long>(stats.full),
      static_cast<unsigned long long>(hits.load()),
      static_cast<unsigned long long>(misses.load()),
      static_cast<unsigned long long>(pins.load()));
}

TEST(RegistrationTableInvalidateTest, InvalidatedKeyStopsResolvingButKeepsPins) {
  RegistrationTable table(8, 1);
  static uint8_t memory[64];
  Registration r;
  r.owner = 1;
  r.address = 0x1000;
  r.length = 64;
  r.host = memory;
  r.access = kAccessLocal;
  const uint32_t key = *table.Insert(r);
  ASSERT_TRUE(table.BeginUse(key));
  EXPECT_TRUE(table.Invalidate(key));
  EXPECT_FALSE(table.Invalidate(key));  // once
  EXPECT_EQ(table.Lookup(key), nullptr);
  EXPECT_FALSE(table.BeginUse(key));
  EXPECT_EQ(table.in_flight(key), 1u);
  EXPECT_EQ(table.Remove(key), RegistrationTable::RemoveResult::kInUse);
  table.EndUse(key);
  EXPECT_EQ(table.in_flight(key), 0u);
  EXPECT_EQ(table.Remove(key), RegistrationTable::RemoveResult::kOk);
  EXPECT_FALSE(table.Invalidate(key));
  EXPECT_FALSE(table.Invalidate(0));
}

}  // namespace
}  // namespace rdmaplane::mr
