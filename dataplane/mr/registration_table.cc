// Control-thread half of RegistrationTable: insertion, removal and epoch-based
// reclamation. The engine-side half is inline in registration_table.h.
#include "dataplane/mr/registration_table.h"

#include <algorithm>

namespace rdmaplane::mr {

RegistrationTable::RegistrationTable(uint32_t capacity, uint32_t readers)
    : capacity_(std::min(capacity, kMaxCapacity)),
      num_readers_(readers),
      slots_(new Slot[capacity_]),
      readers_(new ReaderEpoch[readers]),
      control_(new SlotControl[capacity_]) {
  assert(capacity <= kMaxCapacity && "capacity over 2^24");
  // Free list in index order, so a fresh table hands out slot 0 first.
  for (uint32_t i = 0; i < capacity_; ++i) {
    control_[i].next = i + 1 < capacity_ ? i + 1 : kNoSlot;
  }
  free_head_ = capacity_ > 0 ? 0 : kNoSlot;
}

RegistrationTable::~RegistrationTable() = default;

std::optional<uint32_t> RegistrationTable::Insert(const Registration& r) {
  control_owner_.Check();
  assert((r.access & ~kAccessKnownBits) == 0 && "unknown access bits");
  assert((r.length == 0 || r.length - 1 <= ~uint64_t{0} - r.address) &&
         "range past 2^64");
  assert((r.length == 0 || r.host != nullptr) && "no host mapping");
  if (free_head_ == kNoSlot && Reclaim() == 0) return std::nullopt;

  const uint32_t index = free_head_;
  Slot& slot = slots_[index];
  SlotControl& control = control_[index];
  free_head_ = control.next;
  control.next = kNoSlot;

  // A random non-zero tag, different from the previous occupant's so that
  // its (stale) key cannot name the new registration.
  uint32_t tag;
  if (control.last_tag == 0) {
    tag = absl::Uniform<uint32_t>(absl::IntervalClosed, bitgen_, 1, kTagMask);
  } else {
    tag =
        absl::Uniform<uint32_t>(absl::IntervalClosed, bitgen_, 1, kTagMask - 1);
    if (tag >= control.last_tag) ++tag;
  }
  control.last_tag = static_cast<uint8_t>(tag);
  const uint32_t key = index << kTagBits | tag;

  // The slot is free: no reader can reach `registration` (its last readers
  // passed a quiescent point before Reclaim freed it).
  slot.registration = r;
  // Release pairs with the acquire in Lookup / BeginUse.
  slot.state.store(uint64_t{key} << 32, std::memory_order_release);
  ++live_;
  return key;
}

RegistrationTable::RemoveResult RegistrationTable::Remove(uint32_t key) {
  control_owner_.Check();
  const uint32_t index = key >> kTagBits;
  if (index >= capacity_ || key == 0) return RemoveResult::kUnknown;
  const RemoveResult result = ClearKey(index, key);
  if (result == RemoveResult::kOk) --live_;
  return result;
}

RegistrationTable::RemoveResult RegistrationTable::ClearKey(uint32_t index,
                                                            uint32_t key) {
  Slot& slot = slots_[index];
  uint64_t s = slot.state.load(std::memory_order_relaxed);
  do {
    if (KeyOf(s) != key) return RemoveResult::kUnknown;
    if (CountOf(s) != 0) return RemoveResult::kInUse;
    // Only an unpinned state can be replaced, and BeginUse only pins a state
    // that still carries the key: both orders are exact. Acquire pairs with
    // EndUse's release (the last transfer is done with the memory); release
    // orders this before the epoch bump in MarkRemoved.
  } while (!slot.state.compare_exchange_weak(s, 0, std::memory_order_acq_rel,
                                             std::memory_order_relaxed));
  MarkRemoved(index);
  return RemoveResult::kOk;
}

void RegistrationTable::MarkRemoved(uint32_t index) {
  // Readers that announce an epoch above `removed` will not see the key.
  const uint64_t removed = global_epoch_.load(std::memory_order_relaxed);
  control_[index].removed_epoch = removed;
  control_[index].pending = true;
  // Release pairs with the acquire load in Quiescent.
  global_epoch_.store(removed + 1, std::memory_order_release);

  // Removal epochs only grow, so the pending FIFO stays sorted by them.
  if (pending_tail_ == kNoSlot) {
    pending_head_ = index;
  } else {
    control_[pending_tail_].next = index;
  }
  pending_tail_ = index;
  ++pending_;
}

std::optional<uint32_t> RegistrationTable::Reserve() {
  control_owner_.Check();
  if (free_head_ == kNoSlot && Reclaim() == 0) return std::nullopt;
  // Never slot 0: there the client's consumer key 0 would make key 0,
  // which names nothing.
  uint32_t* link = &free_head_;
  if (*link == 0) link = &control_[0].next;
  if (*link == kNoSlot) return std::nullopt;
  const uint32_t index = *link;
  SlotControl& control = control_[index];
  *link = control.next;
  control.next = kNoSlot;
  control.reserved = true;
  ++live_;
  return index;
}

std::optional<uint32_t> RegistrationTable::Publish(uint32_t index,
                                                   uint8_t tag,
                                                   const Registration& r) {
  control_owner_.Check();
  assert((r.access & ~kAccessKnownBits) == 0 && "unknown access bits");
  assert((r.length == 0 || r.host != nullptr) && "no host mapping");
  if (!Quiet(index)) return std::nullopt;
  Slot& slot = slots_[index];
  if (slot.state.load(std::memory_order_relaxed) != 0) return std::nullopt;
  const uint32_t key = index << kTagBits | tag;
  if (key == 0) return std::nullopt;
  // No reader can reach `registration`: the slot's last key was removed and
  // every reader passed a quiescent point since (Quiet).
  slot.registration = r;
  // The slot's next occupant after the window (Insert) gets another tag.
  control_[index].last_tag = tag;
  // Release pairs with the acquire in Lookup / BeginUse.
  slot.state.store(uint64_t{key} << 32, std::memory_order_release);
  return key;
}

RegistrationTable::RemoveResult RegistrationTable::Unpublish(uint32_t key) {
  control_owner_.Check();
  const uint32_t index = key >> kTagBits;
  if (index >= capacity_ || key == 0 || !control_[index].reserved) {
    return RemoveResult::kUnknown;
  }
  return ClearKey(index, key);  // the slot stays the window's (live)
}

void RegistrationTable::Unreserve(uint32_t index) {
  control_owner_.Check();
  if (index >= capacity_ || !control_[index].reserved) return;
  assert(slots_[index].state.load(std::memory_order_relaxed) == 0 &&
         "Unreserve of a published slot");
  SlotControl& control = control_[index];
  if (control.pending) {
    control.unreserve = true;  // Reclaim frees it
    return;
  }
  control.reserved = false;
  control.next = free_head_;
  free_head_ = index;
  --live_;
}

uint32_t RegistrationTable::Reclaim() {
  control_owner_.Check();
  if (pending_head_ == kNoSlot) return 0;
  // Pairs with the fence in Quiescent for a reader that comes back online:
  // orders the removals above before the reads of the reader epochs below.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint64_t oldest = kOffline;  // offline readers do not hold anything back
  for (uint32_t i = 0; i < num_readers_; ++i) {
    // Acquire pairs with the release stores in Quiescent and Offline.
    oldest =
        std::min(oldest, readers_[i].epoch.load(std::memory_order_acquire));
  }
  uint32_t freed = 0;
  uint32_t reclaimed = 0;
  while (pending_head_ != kNoSlot &&
         control_[pending_head_].removed_epoch < oldest) {
    const uint32_t index = pending_head_;
    SlotControl& control = control_[index];
    pending_head_ = control.next;
    if (pending_head_ == kNoSlot) pending_tail_ = kNoSlot;
    control.pending = false;
    ++reclaimed;
    if (control.reserved && !control.unreserve) {
      control.next = kNoSlot;  // its window's again, quiet
      continue;
    }
    if (control.reserved) {  // Unreserve came while it was pending
      control.reserved = false;
      control.unreserve = false;
      --live_;
    }
    control.next = free_head_;
    free_head_ = index;
    ++freed;
  }
  pending_ -= reclaimed;
  return freed;
}

}  // namespace rdmaplane::mr
