// The daemon's memory-registration table: maps a 32-bit key (lkey / rkey) to
// the registration it names, so that engines resolve keys in O(1) without
// locks while the control plane registers and deregisters memory.
//
// Key = slot index << 8 | tag. The tag is random (a client cannot predict
// it) and never 0, so key 0 never names a registration. A reused slot always
// gets a tag other than its previous occupant's, so the key just removed
// never names the next registration in that slot; an older key of the slot
// matches a later occupant with probability 1/254 (8-bit tags).
//
// Threading contract:
//   * Control thread (one at a time; thread-compatible, checked in debug
//     builds): Insert, Remove, Reclaim, live, pending_reclaim.
//   * Engine threads (thread-safe, no locks, no allocation): Lookup,
//     in_flight, Quiescent and Offline are wait-free; BeginUse and EndUse are
//     lock-free CAS loops that retry only when another pin or a Remove on the
//     same key won the race. Reader `i` (0 <= i < `readers` given to the
//     constructor) calls Quiescent(i) and Offline(i) from one thread at a
//     time; Lookup and the pins may be called from any engine thread.
//
// Lifetime of what Lookup returns: Remove makes a key stop resolving at once,
// but the slot (and the Registration it holds) is rewritten only after every
// online reader has called Quiescent() since the removal (epoch-based
// reclamation). So a pointer from Lookup stays valid, fields unchanged, until
// the calling reader's next Quiescent() or Offline(). A reader must call
// Quiescent(i) (never just Lookup) after being Offline before it looks up
// again. Until reader i calls Quiescent(i) or Offline(i) for the first time
// it counts as online and blocks reclamation.
//
// The same rule covers the memory a registration points at: an engine may
// still touch it through a pointer it looked up before the removal, so the
// control plane may unmap it only once the slot is reclaimed. Reclaim only
// counts; pending_reclaim() == 0 means every removed registration is
// unreachable.
//
// Layout: one cache line per slot: the 64-bit state word (key << 32 |
// in-flight count) that readers load, followed by the Registration; the
// control-only fields of the slots are in an array of their own. Each
// reader's published epoch has its own cache line; the global epoch has its
// own line too.
#ifndef RDMAPLANE_DATAPLANE_MR_REGISTRATION_TABLE_H_
#define RDMAPLANE_DATAPLANE_MR_REGISTRATION_TABLE_H_

#include <atomic>
#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/base/optimization.h"
#include "absl/random/random.h"
#include "dataplane/rc/memory_owner.h"
#include "dataplane/rc/thread_owner.h"

namespace rdmaplane::mr {

// Access bits of a registration and of a requested access. kAccessLocal lets
// the daemon read the memory (the source of a write); kAccessLocalWrite lets
// it write there (the target of a read). kAccessRemoteAtomic lets the peer's
// COMPARE SWAP and FETCH ADD read and write a word of it; neither remote
// read nor remote write implies it.
inline constexpr uint8_t kAccessLocal = 1;
inline constexpr uint8_t kAccessRemoteRead = 2;
inline constexpr uint8_t kAccessRemoteWrite = 4;
inline constexpr uint8_t kAccessLocalWrite = 8;
inline constexpr uint8_t kAccessRemoteAtomic = 16;
// Every bit a peer's access needs one of.
inline constexpr uint8_t kAccessRemote =
    kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic;
inline constexpr uint8_t kAccessKnownBits =
    kAccessLocal | kAccessRemoteRead | kAccessRemoteWrite | kAccessLocalWrite |
    kAccessRemoteAtomic;

// Connection scope of registrations that are not reachable remotely.
inline constexpr uint32_t kAnyConnection = 0xFFFFFFFF;

// What a key names: memory a client registered, or a memory window bound
// to part of it (verbs ibv_alloc_mw). A window of type 1 is reached through
// any queue pair of its scope; one of type 2 only through the queue pair it
// was bound on (Registration::queue_pair), which may also invalidate it
// (SEND with Invalidate).
enum class KeyKind : uint8_t { kMemory = 0, kWindowType1 = 1, kWindowType2 = 2 };

struct Registration;
// Whether `r` is a local key's registration: memory that no peer reaches.
bool IsLocalRegistration(const Registration& r);

struct Registration {
  uint32_t owner = 0;                    // session id of the registering client
  uint32_t connection = kAnyConnection;  // scope of remote access
  // A type 2 window's queue pair (its connection id): the only one that
  // reaches it. kAnyConnection: any queue pair of the scope.
  uint32_t queue_pair = kAnyConnection;
  uint64_t address = 0;                  // client virtual address of byte 0
  uint64_t length = 0;
  uint8_t* host = nullptr;  // where byte 0 is mapped in the daemon
  // Keeps that mapping alive while transmitted frames point into it
  // (zero-copy transmit); null: frames always carry a copy.
  rc::MemoryOwner* memory_owner = nullptr;
  uint8_t access = 0;       // kAccess* bits
  KeyKind kind = KeyKind::kMemory;
};

inline bool IsLocalRegistration(const Registration& r) {
  return r.kind == KeyKind::kMemory && (r.access & kAccessRemote) == 0;
}

// Why an access was refused. Mirrors rc::AccessCheck value for value, so an
// adapter implementing rc::RemoteMemory converts with a static_cast.
enum class AccessCheck : uint8_t {
  kOk = 0,
  kUnknownKey,       // no live registration under this key (or a stale tag)
  kWrongConnection,  // remote: registered for another connection (or for
                     // none); local: registered by another session
  kNoPermission,     // an access bit that the registration does not grant
  kOutOfRange,       // [address, address + length) not inside it
};

struct AccessResult {
  AccessCheck check = AccessCheck::kUnknownKey;
  uint8_t* host = nullptr;  // daemon address of `address`; set only when kOk
  rc::MemoryOwner* memory_owner = nullptr;  // the registration's, when kOk
};

class RegistrationTable {
 public:
  // Keys carry the slot index in 24 bits.
  static constexpr uint32_t kMaxCapacity = 1u << 24;

  // `capacity`: most live plus not-yet-reclaimed registrations (at most
  // kMaxCapacity; larger values assert in debug builds and are clamped). `readers`: number of engine
  // threads that look keys up and call Quiescent(0 .. readers - 1).
  RegistrationTable(uint32_t capacity, uint32_t readers);
  RegistrationTable(const RegistrationTable&) = delete;
  RegistrationTable& operator=(const RegistrationTable&) = delete;
  ~RegistrationTable();

  // --- Control thread only ------------------------------------------------

  // Publishes `r` and returns its key, or std::nullopt when every slot is
  // live or still waiting for readers (Insert runs Reclaim first when it has
  // no free slot). `r` must be valid: only kAccess* bits, address + length
  // not past 2^64, host set when length > 0 (checked in debug builds).
  std::optional<uint32_t> Insert(const Registration& r);

  enum class RemoveResult : uint8_t { kOk, kUnknown, kInUse };
  // kUnknown: `key` is not live. kInUse: a transfer holds it (BeginUse);
  // nothing changed. kOk: the key stops resolving immediately; the slot is
  // reused only after every online reader has passed Quiescent() since.
  RemoveResult Remove(uint32_t key);

  // Moves removed slots that every online reader has passed a quiescent
  // point since into the free list; returns how many.
  uint32_t Reclaim();

  // Memory windows keep one slot from allocation to deallocation, and are
  // published in it under keys whose tag the client chooses (the verbs
  // consumer key): Reserve takes a slot other than 0 off the free list (it
  // counts as live), Publish makes `index << 8 | tag` name `r` there, Unpublish
  // removes that key as Remove does, and the slot can be published again
  // once every reader passed a quiescent point since (Publish answers
  // nullopt until then, or when the key would be 0). Unreserve gives back
  // a slot that is not published; it joins the free list once quiet.
  std::optional<uint32_t> Reserve();
  std::optional<uint32_t> Publish(uint32_t index, uint8_t tag,
                                  const Registration& r);
  RemoveResult Unpublish(uint32_t key);
  void Unreserve(uint32_t index);
  // Whether reserved slot `index` may be published now.
  bool Quiet(uint32_t index) const {
    return index < capacity_ && control_[index].reserved &&
           !control_[index].pending;
  }

  uint32_t live() const { return live_; }
  uint32_t pending_reclaim() const { return pending_; }
  uint32_t capacity() const { return capacity_; }

  // --- Engine threads -----------------------------------------------------

  // The registration `key` names, or nullptr if it is not live. Valid until
  // the calling reader's next Quiescent() or Offline(), or as long as the
  // caller holds a pin (BeginUse) on `key`.
  const Registration* Lookup(uint32_t key) const {
    const uint32_t index = key >> kTagBits;
    if (ABSL_PREDICT_FALSE(index >= capacity_ || key == 0)) return nullptr;
    const Slot& slot = slots_[index];
    // Acquire pairs with the release store in Insert: the Registration
    // written before the key was published is visible here.
    const uint64_t state = slot.state.load(std::memory_order_acquire);
    if (ABSL_PREDICT_FALSE(KeyOf(state) != key || Invalidated(state))) {
      return nullptr;
    }
    return &slot.registration;
  }

  // Pins the registration for a transfer; false if `key` is not live. While
  // any pin is held Remove returns kInUse: pin and removal are CASes on one
  // word, so a Remove can never succeed while a successful BeginUse is not
  // yet matched by its EndUse.
  bool BeginUse(uint32_t key) {
    const uint32_t index = key >> kTagBits;
    if (ABSL_PREDICT_FALSE(index >= capacity_ || key == 0)) return false;
    std::atomic<uint64_t>& state = slots_[index].state;
    uint64_t s = state.load(std::memory_order_relaxed);
    do {
      if (ABSL_PREDICT_FALSE(KeyOf(s) != key || Invalidated(s) ||
                             CountOf(s) == kMaxCount)) {
        return false;
      }
      // Acquire on success pairs with Insert's release store (the pinned
      // Registration is fully written).
    } while (!state.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                          std::memory_order_relaxed));
    return true;
  }

  // Drops one pin taken by a successful BeginUse(key). A call without a
  // matching pin is ignored (and asserts in debug builds).
  void EndUse(uint32_t key) {
    const uint32_t index = key >> kTagBits;
    if (ABSL_PREDICT_FALSE(index >= capacity_ || key == 0)) {
      assert(false && "EndUse of an invalid key");
      return;
    }
    std::atomic<uint64_t>& state = slots_[index].state;
    uint64_t s = state.load(std::memory_order_relaxed);
    do {
      if (ABSL_PREDICT_FALSE(KeyOf(s) != key || CountOf(s) == 0)) {
        assert(false && "EndUse without a matching BeginUse");
        return;
      }
      // Release pairs with the acquire of Remove's CAS: the transfer's
      // accesses to the memory happen before a later successful removal.
    } while (!state.compare_exchange_weak(s, s - 1, std::memory_order_release,
                                          std::memory_order_relaxed));
  }

  // Makes `key` stop resolving and refuse new pins, from an engine thread
  // (RDMA READ with local invalidate). Pins already held stay valid and are
  // released with EndUse; the control thread still removes the key as
  // usual. Returns false if `key` was not live.
  bool Invalidate(uint32_t key) {
    const uint32_t index = key >> kTagBits;
    if (ABSL_PREDICT_FALSE(index >= capacity_ || key == 0)) return false;
    std::atomic<uint64_t>& state = slots_[index].state;
    uint64_t s = state.load(std::memory_order_relaxed);
    do {
      if (KeyOf(s) != key || Invalidated(s)) return false;
      // Release pairs with the acquire loads in Lookup and BeginUse.
    } while (!state.compare_exchange_weak(s, s | kInvalidBit,
                                          std::memory_order_release,
                                          std::memory_order_relaxed));
    return true;
  }

  // Pins currently held on `key`; 0 if it is not live.
  uint32_t in_flight(uint32_t key) const {
    const uint32_t index = key >> kTagBits;
    if (index >= capacity_ || key == 0) return 0;
    const uint64_t s = slots_[index].state.load(std::memory_order_relaxed);
    return KeyOf(s) == key ? CountOf(s) : 0;
  }

  // Reader `reader` holds no pointer from Lookup any more. Usually one load
  // of the (rarely written) global epoch; a store only when it changed.
  void Quiescent(uint32_t reader) {
    assert(reader < num_readers_);
    std::atomic<uint64_t>& mine = readers_[reader].epoch;
    // Only this reader stores `mine`: relaxed reads its own last value.
    const uint64_t seen = mine.load(std::memory_order_relaxed);
    // Acquire pairs with the release store in Remove: removals counted in
    // `now` are visible, so their keys no longer resolve for this reader.
    const uint64_t now = global_epoch_.load(std::memory_order_acquire);
    if (seen == now) return;
    // Release pairs with the acquire load in Reclaim: everything this reader
    // read through earlier Lookups happens before the slot is rewritten.
    mine.store(now, std::memory_order_release);
    if (ABSL_PREDICT_FALSE(seen == kOffline)) {
      // Coming back online. Pairs with the seq_cst fence in Reclaim: either
      // Reclaim sees this store (and waits for us), or our next Lookups see
      // every removal that Reclaim is about to act on.
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
  }

  // Reader `reader` goes idle holding no pointer from Lookup; it no longer
  // blocks reclamation. Quiescent(reader) brings it back online.
  void Offline(uint32_t reader) {
    assert(reader < num_readers_);
    // Release pairs with the acquire load in Reclaim (as in Quiescent).
    readers_[reader].epoch.store(kOffline, std::memory_order_release);
  }

 private:
  static constexpr int kTagBits = 8;
  static constexpr uint32_t kTagMask = (1u << kTagBits) - 1;
  // The low half of a slot state holds the pin count and, in its top bit,
  // the invalidated flag.
  static constexpr uint64_t kInvalidBit = uint64_t{1} << 31;
  static constexpr uint32_t kMaxCount = 0x7FFFFFFF;
  static constexpr uint32_t kNoSlot = 0xFFFFFFFF;
  static constexpr uint64_t kOffline = ~uint64_t{0};

  // Takes `key` out of slot `index` unless a pin holds it, and queues the
  // slot for Reclaim (Remove and Unpublish).
  RemoveResult ClearKey(uint32_t index, uint32_t key);
  // Removed (its key 0): onto the pending FIFO, for Reclaim.
  void MarkRemoved(uint32_t index);

  static uint32_t KeyOf(uint64_t state) {
    return static_cast<uint32_t>(state >> 32);
  }
  static uint32_t CountOf(uint64_t state) {
    return static_cast<uint32_t>(state) & kMaxCount;
  }
  static bool Invalidated(uint64_t state) { return (state & kInvalidBit) != 0; }

  struct alignas(ABSL_CACHELINE_SIZE) Slot {
    // key << 32 | pins; key 0 while the slot is free or removed. Stored with
    // release by Insert; CAS by Remove (acq_rel), BeginUse/EndUse.
    std::atomic<uint64_t> state{0};
    // Written only while the slot is free (no reader can reach it).
    Registration registration;
  };
  static_assert(sizeof(Slot) <= ABSL_CACHELINE_SIZE);

  // Control thread only, one per slot.
  struct SlotControl {
    uint64_t removed_epoch = 0;  // global epoch when it was removed
    uint32_t next = kNoSlot;     // free list or pending FIFO
    uint8_t last_tag = 0;        // tag of the previous occupant
    bool reserved = false;       // a memory window's (Reserve)
    bool pending = false;        // removed, readers may still see it
    bool unreserve = false;      // Unreserve while pending: free it then
  };

  struct alignas(ABSL_CACHELINE_SIZE) ReaderEpoch {
    // Last global epoch this reader announced at a quiescent point, or
    // kOffline. Stored by the reader, loaded by Reclaim.
    std::atomic<uint64_t> epoch{0};
  };
  static_assert(sizeof(ReaderEpoch) <= ABSL_CACHELINE_SIZE);

  // Read-only after construction; shared by every reader.
  const uint32_t capacity_;
  const uint32_t num_readers_;
  const std::unique_ptr<Slot[]> slots_;
  const std::unique_ptr<ReaderEpoch[]> readers_;
  const std::unique_ptr<SlotControl[]> control_;  // control thread only

  // Bumped (release) by every successful Remove; read by Quiescent. On its
  // own line so that its writes do not evict the fields above.
  alignas(ABSL_CACHELINE_SIZE) std::atomic<uint64_t> global_epoch_{1};

  // Control thread only.
  alignas(ABSL_CACHELINE_SIZE) rc::ThreadOwner control_owner_;
  uint32_t free_head_ = kNoSlot;
  uint32_t pending_head_ = kNoSlot;  // oldest removal first
  uint32_t pending_tail_ = kNoSlot;
  uint32_t live_ = 0;
  uint32_t pending_ = 0;
  absl::BitGen bitgen_;
};

// --- Access checks (pure; used by the responder and by the send path) ------

// Remote access through an rkey: the registration must be scoped to
// `connection` (a kAnyConnection registration is never remotely reachable),
// a type 2 window bound to `queue_pair` (the asking queue pair's connection
// id), grant every bit of `access` (non-zero), and contain [address,
// address + length). Arithmetic is overflow-safe for every input.
AccessResult CheckAccess(const Registration& r, uint32_t connection,
                         uint8_t access, uint64_t address, uint64_t length,
                         uint32_t queue_pair = kAnyConnection);

// Local access through an lkey: the registration must belong to the posting
// session `owner` and, when it is scoped to a protection domain (a verbs
// MR's) and a `scope` is given, to the posting queue pair's `scope`;
// otherwise as CheckAccess.
AccessResult CheckLocalAccess(const Registration& r, uint32_t owner,
                              uint8_t access, uint64_t address,
                              uint64_t length,
                              uint32_t scope = kAnyConnection);

// Lookup + CheckAccess / CheckLocalAccess. The host pointer has the lifetime
// of Lookup's result (until the caller's next Quiescent, or while pinned).
AccessResult ResolveRemote(const RegistrationTable& table, uint32_t rkey,
                           uint32_t connection, uint8_t access,
                           uint64_t address, uint64_t length,
                           uint32_t queue_pair = kAnyConnection);
AccessResult ResolveLocal(const RegistrationTable& table, uint32_t lkey,
                          uint32_t owner, uint8_t access, uint64_t address,
                          uint64_t length, uint32_t scope = kAnyConnection);

}  // namespace rdmaplane::mr

#endif  // RDMAPLANE_DATAPLANE_MR_REGISTRATION_TABLE_H_
