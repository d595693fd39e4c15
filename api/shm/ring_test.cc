#include "api/shm/ring.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "api/shm/test_util.h"
#include "tests/testing/fuzz.h"

namespace rdmaplane::shm {
namespace {

using testing::GuardedRegion;

// An entry whose size is not a power of two, to check the slot stride.
struct Triple {
  uint64_t a;
  uint64_t b;
  uint64_t c;
};
static_assert(sizeof(Triple) == 24);

using Ring = SpscRing<uint64_t>;

// The indices as a peer process sees them: raw words at fixed offsets.
std::atomic<uint32_t>& ProducerIndex(uint8_t* base) {
  return reinterpret_cast<RingIndex*>(base + kRingProducerOffset)->value;
}
std::atomic<uint32_t>& ConsumerIndex(uint8_t* base) {
  return reinterpret_cast<RingIndex*>(base + kRingConsumerOffset)->value;
}
RingHeader* Header(uint8_t* base) {
  return reinterpret_cast<RingHeader*>(base);
}
uint64_t SlotValue(uint8_t* base, uint32_t slot) {
  uint64_t value;
  std::memcpy(&value, base + kRingEntriesOffset + slot * sizeof(uint64_t),
              sizeof(value));
  return value;
}

Ring MustCreate(void* mem, size_t len, uint32_t capacity) {
  absl::StatusOr<Ring> ring = Ring::Create(mem, len, capacity);
  EXPECT_TRUE(ring.ok()) << ring.status();
  return ring.ok() ? *ring : Ring();
}

// --- Create --------------------------------------------------------------

TEST(SpscRingCreate, RejectsCapacityNotPowerOfTwo) {
  GuardedRegion region(Ring::BytesFor(1 << 12));
  for (uint32_t capacity : {0u, 3u, 6u, 100u, 1000u, 4095u}) {
    absl::StatusOr<Ring> ring =
        Ring::Create(region.data(), region.size(), capacity);
    EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument)
        << "capacity " << capacity;
  }
}

TEST(SpscRingCreate, RejectsCapacityAboveLimit) {
  using ByteRing = SpscRing<uint8_t>;
  const uint32_t capacity = 1u << 25;
  // Large enough for the ring, so only the capacity limit can refuse it.
  GuardedRegion region(ByteRing::BytesFor(capacity));
  EXPECT_EQ(
      ByteRing::Create(region.data(), region.size(), capacity).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ByteRing::Create(region.data(), region.size(), 1u << 24).ok());
}

TEST(SpscRingCreate, RejectsRegionTooSmall) {
  GuardedRegion region(Ring::BytesFor(64));
  EXPECT_EQ(
      Ring::Create(region.data(), Ring::BytesFor(64) - 1, 64).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Ring::Create(region.data(), 0, 64).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Ring::Create(region.data(), Ring::BytesFor(64), 64).ok());
}

TEST(SpscRingCreate, RejectsMisalignedOrNullMemory) {
  GuardedRegion region(2 * Ring::BytesFor(64));
  for (size_t misalign : {1, 4, 8, 32, 63}) {
    EXPECT_EQ(Ring::Create(region.data() + misalign, Ring::BytesFor(64), 64)
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << "misaligned by " << misalign;
  }
  EXPECT_TRUE(
      Ring::Create(region.data() + kCacheLine, Ring::BytesFor(64), 64).ok());
  EXPECT_EQ(Ring::Create(nullptr, Ring::BytesFor(64), 64).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SpscRingCreate, WritesHeaderAndEmptyIndices) {
  GuardedRegion region(SpscRing<Triple>::BytesFor(32));
  // Leftovers from an earlier user of the memory must not survive.
  std::memset(region.data(), 0xA5, region.size());
  absl::StatusOr<SpscRing<Triple>> ring =
      SpscRing<Triple>::Create(region.data(), region.size(), 32);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_TRUE(ring->valid());
  EXPECT_EQ(ring->capacity(), 32u);
  const RingHeader* header = Header(region.data());
  EXPECT_EQ(header->magic, kRingMagic);
  EXPECT_EQ(header->version, kRingVersion);
  EXPECT_EQ(header->entry_size, sizeof(Triple));
  EXPECT_EQ(header->capacity, 32u);
  for (uint32_t word : header->reserved) EXPECT_EQ(word, 0u);
  EXPECT_EQ(ProducerIndex(region.data()).load(), 0u);
  EXPECT_EQ(ConsumerIndex(region.data()).load(), 0u);
  EXPECT_EQ(ring->Size(), 0u);
  Triple out;
  EXPECT_EQ(ring->TryPop(&out), PopResult::kEmpty);
}

TEST(SpscRingCreate, BytesForCountsHeaderIndicesAndEntries) {
  EXPECT_EQ(Ring::BytesFor(1), 192u + 8u);
  EXPECT_EQ(SpscRing<Triple>::BytesFor(1024), 192u + 1024u * 24u);
  static_assert(Ring::BytesFor(16) == 192 + 16 * 8, "usable at compile time");
}

TEST(SpscRing, DefaultConstructedIsInvalid) {
  Ring ring;
  EXPECT_FALSE(ring.valid());
}

// --- Attach --------------------------------------------------------------

class SpscRingAttach : public ::testing::Test {
 protected:
  static constexpr uint32_t kCapacity = 16;
  SpscRingAttach() : region_(Ring::BytesFor(kCapacity)) {}
  void SetUp() override { MustCreate(region_.data(), kLen, kCapacity); }

  absl::StatusCode AttachCode(size_t len = kLen) {
    return Ring::Attach(region_.data(), len).status().code();
  }

  static constexpr size_t kLen = Ring::BytesFor(kCapacity);
  GuardedRegion region_;
};

TEST_F(SpscRingAttach, AcceptsWellFormedRing) {
  absl::StatusOr<Ring> ring = Ring::Attach(region_.data(), kLen);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_TRUE(ring->valid());
  EXPECT_EQ(ring->capacity(), kCapacity);
}

TEST_F(SpscRingAttach, RejectsBadMagic) {
  Header(region_.data())->magic ^= 1;
  EXPECT_EQ(AttachCode(), absl::StatusCode::kInvalidArgument);
  std::memset(region_.data(), 0, kLen);
  EXPECT_EQ(AttachCode(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SpscRingAttach, RejectsOtherVersion) {
  Header(region_.data())->version = kRingVersion + 1;
  EXPECT_EQ(AttachCode(), absl::StatusCode::kFailedPrecondition);
  Header(region_.data())->version = 0;
  EXPECT_EQ(AttachCode(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SpscRingAttach, RejectsEntrySizeMismatch) {
  // The same bytes viewed with a different entry type.
  EXPECT_EQ(SpscRing<uint32_t>::Attach(region_.data(), kLen).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpscRing<Triple>::Attach(region_.data(), kLen).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A header that lies about the entry size.
  Header(region_.data())->entry_size = sizeof(uint64_t) + 1;
  EXPECT_EQ(AttachCode(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SpscRingAttach, RejectsCapacityThatDoesNotFitRegion) {
  // A peer claims more entries than the region it shared can hold.
  Header(region_.data())->capacity = 2 * kCapacity;
  EXPECT_EQ(AttachCode(), absl::StatusCode::kInvalidArgument);
  Header(region_.data())->capacity = 1u << 31;
  EXPECT_EQ(AttachCode(), absl::StatusCode::kInvalidArgument);
  // The true capacity, but the region handed over is one byte short.
  Header(region_.data())->capacity = kCapacity;
  EXPECT_EQ(AttachCode(kLen - 1), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttachCode(kRingEntriesOffset - 1),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SpscRingAttach, RejectsCapacityNotPowerOfTwo) {
  for (uint32_t capacity : {0u, 3u, 12u, kCapacity - 1}) {
    Header(region_.data())->capacity = capacity;
    EXPECT_EQ(AttachCode(), absl::StatusCode::kInvalidArgument)
        << "capacity " << capacity;
  }
}

TEST_F(SpscRingAttach, RejectsCapacityAboveLimitEvenIfRegionIsLargeEnough) {
  Header(region_.data())->capacity = 1u << 25;
  // The claimed length is a lie; Attach reads only the header before it
  // refuses.
  EXPECT_EQ(
      Ring::Attach(region_.data(), Ring::BytesFor(1u << 25)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(SpscRingAttach, RejectsMisalignedOrNullMemory) {
  EXPECT_EQ(Ring::Attach(region_.data() + 8, kLen - 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Ring::Attach(nullptr, kLen).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SpscRingAttach, SharesStateWithCreator) {
  Ring creator = MustCreate(region_.data(), kLen, kCapacity);
  absl::StatusOr<Ring> peer = Ring::Attach(region_.data(), kLen);
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_TRUE(creator.TryPush(7));
  ASSERT_TRUE(creator.TryPush(8));
  EXPECT_EQ(peer->Size(), 2u);
  uint64_t out = 0;
  ASSERT_EQ(peer->TryPop(&out), PopResult::kOk);
  EXPECT_EQ(out, 7u);
  EXPECT_EQ(creator.Size(), 1u);
  ASSERT_TRUE(peer->TryPush(9));
  ASSERT_EQ(creator.TryPop(&out), PopResult::kOk);
  EXPECT_EQ(out, 8u);
  ASSERT_EQ(creator.TryPop(&out), PopResult::kOk);
  EXPECT_EQ(out, 9u);
}

// --- Push and pop --------------------------------------------------------

TEST(SpscRing, PopsInPushOrder) {
  constexpr uint32_t kCapacity = 64;
  GuardedRegion region(SpscRing<Triple>::BytesFor(kCapacity));
  absl::StatusOr<SpscRing<Triple>> ring =
      SpscRing<Triple>::Create(region.data(), region.size(), kCapacity);
  ASSERT_TRUE(ring.ok());
  // Several laps with varying fill levels.
  uint64_t pushed = 0;
  uint64_t popped = 0;
  for (uint32_t round = 0; round < 50; ++round) {
    const uint32_t burst = (round * 7) % (kCapacity + 1);
    for (uint32_t i = 0; i < burst && ring->Size() < kCapacity; ++i) {
      ASSERT_TRUE(ring->TryPush(Triple{pushed, ~pushed, pushed * 3}));
      ++pushed;
    }
    const uint32_t drain = ring->Size() / 2 + round % 3;
    for (uint32_t i = 0; i < drain && popped < pushed; ++i) {
      Triple out;
      ASSERT_EQ(ring->TryPop(&out), PopResult::kOk);
      EXPECT_EQ(out.a, popped);
      EXPECT_EQ(out.b, ~popped);
      EXPECT_EQ(out.c, popped * 3);
      ++popped;
    }
    EXPECT_EQ(ring->Size(), pushed - popped);
  }
  EXPECT_GT(pushed, 4 * kCapacity);  // the indices lapped the ring
}

TEST(SpscRing, TryPushFailsAtCapacityAndRecoversAfterPop) {
  constexpr uint32_t kCapacity = 8;
  GuardedRegion region(Ring::BytesFor(kCapacity));
  Ring ring = MustCreate(region.data(), region.size(), kCapacity);
  for (uint64_t i = 0; i < kCapacity; ++i) {
    EXPECT_EQ(ring.Size(), i);
    ASSERT_TRUE(ring.TryPush(100 + i));
  }
  EXPECT_EQ(ring.Size(), kCapacity);
  EXPECT_FALSE(ring.TryPush(999));
  EXPECT_FALSE(ring.TryPush(999));
  EXPECT_EQ(ring.Size(), kCapacity);
  // The refused pushes left the indices and the oldest entry alone.
  EXPECT_EQ(ProducerIndex(region.data()).load(), kCapacity);
  uint64_t out = 0;
  ASSERT_EQ(ring.TryPop(&out), PopResult::kOk);
  EXPECT_EQ(out, 100u);
  ASSERT_TRUE(ring.TryPush(108));
  EXPECT_FALSE(ring.TryPush(999));
  for (uint64_t i = 1; i <= kCapacity; ++i) {
    ASSERT_EQ(ring.TryPop(&out), PopResult::kOk);
    EXPECT_EQ(out, 100 + i);
  }
  EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);
}

TEST(SpscRing, CapacityOneHoldsOneEntry) {
  GuardedRegion region(Ring::BytesFor(1));
  Ring ring = MustCreate(region.data(), region.size(), 1);
  uint64_t out = 0;
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(ring.TryPush(i));
    EXPECT_FALSE(ring.TryPush(i));
    ASSERT_EQ(ring.TryPop(&out), PopResult::kOk);
    EXPECT_EQ(out, i);
    EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);
  }
}

TEST(SpscRing, EmptyRingPopsNothing) {
  GuardedRegion region(Ring::BytesFor(4));
  Ring ring = MustCreate(region.data(), region.size(), 4);
  uint64_t out = 0;
  EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);
  EXPECT_EQ(ring.Size(), 0u);
  ASSERT_TRUE(ring.TryPush(1));
  ASSERT_EQ(ring.TryPop(&out), PopResult::kOk);
  EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);
  EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);
  EXPECT_EQ(ConsumerIndex(region.data()).load(), 1u);
}

// --- Free-running indices ------------------------------------------------

// Starts both indices a few entries before 2^32 so that the producer index
// wraps to small numbers while the consumer index is still near the top.
TEST(SpscRing, IndicesWrapPast32Bits) {
  constexpr uint32_t kCapacity = 8;
  constexpr uint32_t kStart = std::numeric_limits<uint32_t>::max() - 2;
  GuardedRegion region(Ring::BytesFor(kCapacity));
  Ring ring = MustCreate(region.data(), region.size(), kCapacity);
  ProducerIndex(region.data()).store(kStart);
  ConsumerIndex(region.data()).store(kStart);
  EXPECT_EQ(ring.Size(), 0u);

  // Fill across the wrap: entries land in slots kStart & 7 = 5, 6, 7, 0, ...
  for (uint64_t i = 0; i < kCapacity; ++i) ASSERT_TRUE(ring.TryPush(1000 + i));
  EXPECT_EQ(ProducerIndex(region.data()).load(), kStart + kCapacity);
  EXPECT_LT(ProducerIndex(region.data()).load(), kStart);  // it wrapped
  EXPECT_EQ(ring.Size(), kCapacity);
  EXPECT_FALSE(ring.TryPush(1));
  EXPECT_EQ(SlotValue(region.data(), 5), 1000u);
  EXPECT_EQ(SlotValue(region.data(), 7), 1002u);
  EXPECT_EQ(SlotValue(region.data(), 0), 1003u);
  EXPECT_EQ(SlotValue(region.data(), 4), 1007u);

  uint64_t out = 0;
  for (uint64_t i = 0; i < kCapacity; ++i) {
    ASSERT_EQ(ring.TryPop(&out), PopResult::kOk) << i;
    EXPECT_EQ(out, 1000 + i);
    EXPECT_EQ(ring.Size(), kCapacity - 1 - i);
  }
  EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);

  // Keep going for a few laps past the wrap with a half-full ring.
  uint64_t next_push = 0;
  uint64_t next_pop = 0;
  for (int step = 0; step < 10 * static_cast<int>(kCapacity); ++step) {
    while (ring.TryPush(next_push)) ++next_push;
    ASSERT_EQ(ring.Size(), kCapacity);
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(ring.TryPop(&out), PopResult::kOk);
      ASSERT_EQ(out, next_pop++);
    }
  }
}

// The same at the exact boundary: consumer at 2^32 - 1, producer at 0.
TEST(SpscRing, SizeAcrossWrapBoundary) {
  GuardedRegion region(Ring::BytesFor(4));
  Ring ring = MustCreate(region.data(), region.size(), 4);
  ConsumerIndex(region.data()).store(0xFFFFFFFFu);
  ProducerIndex(region.data()).store(0u);
  EXPECT_EQ(ring.Size(), 1u);
  uint64_t out = 0;
  EXPECT_EQ(ring.TryPop(&out), PopResult::kOk);
  EXPECT_EQ(ConsumerIndex(region.data()).load(), 0u);
  EXPECT_EQ(ring.Size(), 0u);
  EXPECT_EQ(ring.TryPop(&out), PopResult::kEmpty);
}

// --- Untrusted peers -----------------------------------------------------

// A ring whose last byte is followed by a guard page: any read or write past
// the entries array faults. Everything before it is the guard page in front.
class SpscRingUntrusted : public ::testing::Test {
 protected:
  static constexpr uint32_t kCapacity = 8;
  static constexpr size_t kLen = Ring::BytesFor(kCapacity);
  static_assert(kLen % kCacheLine == 0);

  SpscRingUntrusted() : region_(kLen), base_(region_.end() - kLen) {}
  void SetUp() override {
    ring_ = MustCreate(base_, kLen, kCapacity);
    for (uint32_t i = 0; i < kCapacity; ++i) {
      std::memcpy(base_ + kRingEntriesOffset + i * sizeof(uint64_t), &kSentinel,
                  sizeof(kSentinel));
    }
  }

  static constexpr uint64_t kSentinel = 0x5EA1ED5EA1ED5EA1;
  GuardedRegion region_;
  uint8_t* base_;
  Ring ring_;
};

TEST_F(SpscRingUntrusted, ProducerIndexTooFarAheadIsCorrupted) {
  const uint32_t tail = 5;
  ConsumerIndex(base_).store(tail);
  for (uint32_t head :
       {tail + kCapacity + 1, tail + 1000, tail + 0x7FFFFFFFu, tail - 1}) {
    ProducerIndex(base_).store(head);
    uint64_t out = 42;
    EXPECT_EQ(ring_.TryPop(&out), PopResult::kCorrupted) << "head " << head;
    EXPECT_EQ(out, 42u) << "nothing may be copied out of a corrupted ring";
    EXPECT_EQ(ConsumerIndex(base_).load(), tail) << "nothing consumed";
  }
  // Exactly full is legitimate.
  ProducerIndex(base_).store(tail + kCapacity);
  uint64_t out = 0;
  EXPECT_EQ(ring_.TryPop(&out), PopResult::kOk);
  EXPECT_EQ(out, kSentinel);
}

TEST_F(SpscRingUntrusted, AFreshHandleNearTheIndexWrapPopsNothingUnpublished) {
  // Indices run on across connections; a handle attached when they are just
  // below 2^32 must not take its initial copy of the producer's index (0)
  // for entries published.
  ProducerIndex(base_).store(0xFFFFFFFCu);
  ConsumerIndex(base_).store(0xFFFFFFFCu);
  auto attached = Ring::Attach(base_, kLen);
  ASSERT_TRUE(attached.ok()) << attached.status();
  Ring fresh = *attached;
  uint64_t out = 0;
  EXPECT_EQ(fresh.TryPop(&out), PopResult::kEmpty);
  EXPECT_EQ(ConsumerIndex(base_).load(), 0xFFFFFFFCu);
}

TEST_F(SpscRingUntrusted, AStaleCopyOfAHandleRereadsTheProducerIndex) {
  // `a` pops once with a copy of the producer's index (3); `stale` is a copy
  // of `a` then. After `a` pops again, a peer rewinds the producer index to
  // the tail: `stale` must see an empty ring, not pop from its copy.
  for (uint64_t v = 1; v <= 3; ++v) ASSERT_TRUE(ring_.TryPush(v));
  Ring a = ring_;
  uint64_t out = 0;
  ASSERT_EQ(a.TryPop(&out), PopResult::kOk);
  Ring stale = a;
  ASSERT_EQ(a.TryPop(&out), PopResult::kOk);
  ProducerIndex(base_).store(2);
  EXPECT_EQ(stale.TryPop(&out), PopResult::kEmpty);
  EXPECT_EQ(ConsumerIndex(base_).load(), 2u);
}

TEST_F(SpscRingUntrusted, ConsumerIndexAheadOfProducerBlocksPushes) {
  // A consumer that claims to have read more than was written must not make
  // the producer overwrite unread slots or write outside the ring.
  ProducerIndex(base_).store(3);
  ConsumerIndex(base_).store(10);
  EXPECT_FALSE(ring_.TryPush(1));
  EXPECT_EQ(ProducerIndex(base_).load(), 3u);
}

// Random index pairs, as a peer might scribble them: every outcome follows
// from head - tail alone and no access leaves the ring (the guard pages would
// fault).
TEST_F(SpscRingUntrusted, ArbitraryIndicesStayInBounds) {
  std::mt19937_64 rng(rdmaplane::testing::FuzzSeed());
  for (int trial = 0; trial < 200000; ++trial) {
    const uint32_t tail = rng();
    uint32_t head;
    switch (trial % 4) {
      case 0:
        head = rng();
        break;
      case 1:
        head = tail + rng() % (kCapacity + 1);
        break;
      case 2:
        head = tail + kCapacity + 1 + rng() % 64;
        break;
      default:
        head = tail - 1 - rng() % 64;
        break;
    }
    ProducerIndex(base_).store(head);
    ConsumerIndex(base_).store(tail);
    const uint32_t in_flight = head - tail;
    uint64_t out = 0;
    const PopResult popped = ring_.TryPop(&out);
    if (in_flight == 0) {
      ASSERT_EQ(popped, PopResult::kEmpty);
    } else if (in_flight > kCapacity) {
      ASSERT_EQ(popped, PopResult::kCorrupted) << head << " " << tail;
      ASSERT_EQ(ConsumerIndex(base_).load(), tail);
    } else {
      ASSERT_EQ(popped, PopResult::kOk);
      ASSERT_EQ(ConsumerIndex(base_).load(), tail + 1);
    }
    const uint32_t tail_now = ConsumerIndex(base_).load();
    const bool room = head - tail_now < kCapacity;
    ASSERT_EQ(ring_.TryPush(kSentinel), room) << head << " " << tail_now;
    ASSERT_EQ(ProducerIndex(base_).load(), room ? head + 1 : head);
  }
}

// TryPeek copies the oldest entry out without taking it; Consume takes it.
// A consumer index the peer rewrote between the two is read again, as
// TryPop reads it.
TEST(SpscRingPeek, PeekLeavesTheEntryAndConsumeTakesIt) {
  GuardedRegion region(Ring::BytesFor(8));
  auto ring = Ring::Create(region.data(), region.size(), 8);
  ASSERT_TRUE(ring.ok());
  uint64_t out = 0;
  EXPECT_EQ(ring->TryPeek(&out), PopResult::kEmpty);
  ASSERT_TRUE(ring->TryPush(11));
  ASSERT_TRUE(ring->TryPush(22));
  ASSERT_EQ(ring->TryPeek(&out), PopResult::kOk);
  EXPECT_EQ(out, 11u);
  EXPECT_EQ(ring->Size(), 2u);  // not taken
  ASSERT_EQ(ring->TryPeek(&out), PopResult::kOk);
  EXPECT_EQ(out, 11u);  // still the oldest
  ring->Consume();
  EXPECT_EQ(ring->Size(), 1u);
  EXPECT_EQ(ConsumerIndex(region.data()).load(), 1u);
  ASSERT_EQ(ring->TryPeek(&out), PopResult::kOk);
  EXPECT_EQ(out, 22u);
  ring->Consume();
  EXPECT_EQ(ring->TryPeek(&out), PopResult::kEmpty);
  // Peeks and pops mix: each takes what the other left.
  ASSERT_TRUE(ring->TryPush(33));
  ASSERT_TRUE(ring->TryPush(44));
  ASSERT_EQ(ring->TryPop(&out), PopResult::kOk);
  EXPECT_EQ(out, 33u);
  ASSERT_EQ(ring->TryPeek(&out), PopResult::kOk);
  EXPECT_EQ(out, 44u);
  ring->Consume();
  EXPECT_EQ(ring->TryPop(&out), PopResult::kEmpty);
  // A peer moves the consumer index back by one: the entry there is
  // peeked again, and consumed from where the index now is.
  ConsumerIndex(region.data()).store(3);
  ASSERT_EQ(ring->TryPeek(&out), PopResult::kOk);
  EXPECT_EQ(out, 44u);
  ring->Consume();
  EXPECT_EQ(ConsumerIndex(region.data()).load(), 4u);
  // Moved past the producer: corrupted, as for TryPop.
  ConsumerIndex(region.data()).store(4 + 100);
  EXPECT_EQ(ring->TryPeek(&out), PopResult::kCorrupted);
}

}  // namespace
}  // namespace rdmaplane::shm
