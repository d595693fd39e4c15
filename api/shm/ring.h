// Single-producer single-consumer ring in shared memory, used for every
// client <-> daemon channel (control requests and responses, send queues,
// completion queues). One ring per direction: multi-producer rings are not
// safe across processes that can be preempted or killed mid-update.
//
// Layout (C-compatible, offsets from the start of the ring):
//
//   0    RingHeader: magic, version, entry size, capacity     (cache line 0)
//   64   producer index: written by the producer only          (cache line 1)
//   128  consumer index: written by the consumer only          (cache line 2)
//   192  entries[capacity], entry_size bytes each
//
// Indices are free-running 32-bit counters masked on access. The producer
// publishes an entry by storing its index with release order; the consumer
// loads it with acquire order (and symmetrically for freeing slots). Entries
// are copied in and out, never used in place, so a peer that scribbles on
// the ring after handing over an entry cannot change what was read.
//
// Thread-safety: one producer thread and one consumer thread per ring, each in
// any process. The side that did not create the ring must treat its contents
// as untrusted: Attach() validates the header, and Pop() reports a corrupted
// producer index instead of reading beyond the ring.
#ifndef RDMAPLANE_API_SHM_RING_H_
#define RDMAPLANE_API_SHM_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "absl/status/statusor.h"

namespace rdmaplane::shm {

inline constexpr uint32_t kRingMagic = 0x52474E52;  // "RNGR"
inline constexpr uint16_t kRingVersion = 1;
inline constexpr size_t kCacheLine = 64;

struct alignas(kCacheLine) RingHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t entry_size;
  uint32_t capacity;  // power of two
  uint32_t reserved[13];
};
static_assert(sizeof(RingHeader) == kCacheLine);

struct alignas(kCacheLine) RingIndex {
  std::atomic<uint32_t> value;
  uint8_t pad[kCacheLine - sizeof(std::atomic<uint32_t>)];
};
static_assert(sizeof(RingIndex) == kCacheLine);
static_assert(std::atomic<uint32_t>::is_always_lock_free,
              "ring indices must be lock-free to work across processes");

inline constexpr size_t kRingProducerOffset = kCacheLine;
inline constexpr size_t kRingConsumerOffset = 2 * kCacheLine;
inline constexpr size_t kRingEntriesOffset = 3 * kCacheLine;

enum class PopResult : uint8_t { kOk, kEmpty, kCorrupted };

// A view of a ring of T living in memory owned by someone else.
template <typename T>
class SpscRing {
  static_assert(std::is_trivially_copyable_v<T>);
  static_assert(sizeof(T) <= 0xFFFF);

 public:
  SpscRing() = default;

  static constexpr size_t BytesFor(uint32_t capacity) {
    return kRingEntriesOffset + size_t{capacity} * sizeof(T);
  }

  // Formats `mem` as an empty ring. `capacity` must be a power of two and
  // `len` at least BytesFor(capacity).
  static absl::StatusOr<SpscRing> Create(void* mem, size_t len,
                                         uint32_t capacity) {
    if (capacity == 0 || (capacity & (capacity - 1)) != 0 ||
        capacity > (1u << 24)) {
      return absl::InvalidArgumentError(
          "ring capacity must be a power of two up to 2^24");
    }
    if (mem == nullptr || len < BytesFor(capacity) ||
        reinterpret_cast<uintptr_t>(mem) % kCacheLine != 0) {
      return absl::InvalidArgumentError(
          "ring memory too small or not cache-line aligned");
    }
    auto* base = static_cast<uint8_t*>(mem);
    std::memset(base, 0, kRingEntriesOffset);
    auto* header = reinterpret_cast<RingHeader*>(base);
    header->entry_size = sizeof(T);
    header->capacity = capacity;
    header->version = kRingVersion;
    new (base + kRingProducerOffset) RingIndex{};
    new (base + kRingConsumerOffset) RingIndex{};
    std::atomic_thread_fence(std::memory_order_release);
    header->magic = kRingMagic;
    return SpscRing(base, capacity);
  }

  // Validates and attaches to a ring another process created in `mem`.
  static absl::StatusOr<SpscRing> Attach(void* mem, size_t len) {
    if (mem == nullptr || len < kRingEntriesOffset ||
        reinterpret_cast<uintptr_t>(mem) % kCacheLine != 0) {
      return absl::InvalidArgumentError("ring region too small or misaligned");
    }
    auto* base = static_cast<uint8_t*>(mem);
    RingHeader header;
    std::memcpy(&header, base, sizeof(header));
    if (header.magic != kRingMagic) {
      return absl::InvalidArgumentError("not a ring (bad magic)");
    }
    if (header.version != kRingVersion) {
      return absl::FailedPreconditionError("unsupported ring version");
    }
    if (header.entry_size != sizeof(T)) {
      return absl::InvalidArgumentError("ring entry size mismatch");
    }
    const uint32_t cap = header.capacity;
    if (cap == 0 || (cap & (cap - 1)) != 0 || cap > (1u << 24) ||
        len < BytesFor(cap)) {
      return absl::InvalidArgumentError("ring capacity invalid for its region");
    }
    return SpscRing(base, cap);
  }

  bool valid() const { return base_ != nullptr; }
  uint32_t capacity() const { return capacity_; }

  // Producer side. Returns false when the ring is full. Reads the
  // consumer's index every time: a consumer in another process that moves
  // it where it cannot be (ahead of the producer, or back) is seen at once.
  bool TryPush(const T& entry) {
    const uint32_t head = producer()->value.load(std::memory_order_relaxed);
    // Pairs with the consumer's release store in TryPop: slots it freed are
    // no longer read when we overwrite them.
    const uint32_t tail = consumer()->value.load(std::memory_order_acquire);
    if (head - tail >= capacity_) return false;
    std::memcpy(slot(head), &entry, sizeof(T));
    // Pairs with the consumer's acquire load of the producer index.
    producer()->value.store(head + 1, std::memory_order_release);
    return true;
  }

  // Consumer side. Keeps the producer's index as last read and reads it
  // again only when that copy says the ring is empty: the index lives on a
  // cache line the producer's CPU writes, and reading it for every entry
  // costs a transfer of that line each time (a burst of entries then costs
  // one). The copy is trusted only while the consumer index is still the
  // one this handle stored after its last pop: then the copy was read after
  // every entry before it was published, and is never ahead of what the
  // producer published. Another handle of the same ring (a copy, a new
  // Attach) or a peer rewriting the index makes this handle read again.
  PopResult TryPop(T* out) {
    const PopResult r = TryPeek(out);
    if (r == PopResult::kOk) Consume();
    return r;
  }

  // TryPop's two steps, for a consumer that decides whether to take the
  // oldest entry from what it sees once that entry is visible (the daemon
  // looks at a client's other rings after it saw the client's request):
  // TryPeek copies the entry out without taking it; Consume, right after a
  // TryPeek that returned kOk, takes it.
  PopResult TryPeek(T* out) {
    const uint32_t tail = consumer()->value.load(std::memory_order_relaxed);
    if (tail != popped_to_ ||
        seen_head_ - tail - 1 >= capacity_) {  // empty, or not ours
      // Pairs with the producer's release store in TryPush.
      seen_head_ = producer()->value.load(std::memory_order_acquire);
      if (seen_head_ == tail) return PopResult::kEmpty;
      if (seen_head_ - tail > capacity_) return PopResult::kCorrupted;
      popped_to_ = tail;
    }
    std::memcpy(out, slot(tail), sizeof(T));
    return PopResult::kOk;
  }
  void Consume() {
    // Pairs with the producer's acquire load of the consumer index.
    consumer()->value.store(popped_to_ + 1, std::memory_order_release);
    ++popped_to_;
  }

  // Entries waiting, as seen from either side (a snapshot).
  uint32_t Size() const {
    const uint32_t head = producer()->value.load(std::memory_order_acquire);
    const uint32_t tail = consumer()->value.load(std::memory_order_acquire);
    return head - tail;
  }

 private:
  SpscRing(uint8_t* base, uint32_t capacity)
      : base_(base), capacity_(capacity), mask_(capacity - 1) {}

  RingIndex* producer() const {
    return reinterpret_cast<RingIndex*>(base_ + kRingProducerOffset);
  }
  RingIndex* consumer() const {
    return reinterpret_cast<RingIndex*>(base_ + kRingConsumerOffset);
  }
  uint8_t* slot(uint32_t index) const {
    return base_ + kRingEntriesOffset + size_t{index & mask_} * sizeof(T);
  }

  uint8_t* base_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  // The producer's index as last read by TryPop, and the consumer index
  // this handle stored after its last pop (the copy is only good with it).
  uint32_t seen_head_ = 0;
  uint32_t popped_to_ = 0;
};

}  // namespace rdmaplane::shm

#endif  // RDMAPLANE_API_SHM_RING_H_
