// The owner of memory that transmitted frames may point into (zero-copy
// transmit): in the daemon, its mapping of one client arena. A frame sink
// that sends payload in place takes a reference for every buffer of a frame
// that points into the memory and drops it when whatever held the frame (the
// port's queues, its fault-injection delay, the device's transmit ring, a
// receiver) lets go of it. The memory must stay mapped while any reference
// is held: a frame can outlive the work request it was built for (a
// go-back-N resend builds new frames while old ones still wait to be sent).
//
// Thread-safe and lock-free: Ref on the engine thread that builds frames,
// Unref wherever frames are freed (the engine thread, or the control thread
// tearing a port down), references() on the control thread.
#ifndef RDMAPLANE_DATAPLANE_RC_MEMORY_OWNER_H_
#define RDMAPLANE_DATAPLANE_RC_MEMORY_OWNER_H_

#include <atomic>
#include <cstdint>

namespace rdmaplane::rc {

class MemoryOwner {
 public:
  // `zero_copy`: the port may hand this memory to the device in place (it
  // can reach it, see port::EthPort::RegisterExternalMemory); false: frames
  // always carry a copy of it.
  explicit MemoryOwner(bool zero_copy) : zero_copy_(zero_copy) {}
  MemoryOwner(const MemoryOwner&) = delete;
  MemoryOwner& operator=(const MemoryOwner&) = delete;

  bool zero_copy() const { return zero_copy_; }

  // A frame buffer points into the memory from now on. Relaxed: the engine
  // only refs memory of connections it serves, and the control plane reads
  // the count after the engine acknowledged removing them.
  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  // That buffer was let go. Release pairs with the acquire in references():
  // every read of the memory through the buffer happens before the control
  // plane sees the count drop.
  void Unref() { refs_.fetch_sub(1, std::memory_order_release); }
  // Buffers still pointing into the memory; 0 means it may be unmapped (once
  // no engine can build frames from it any more).
  uint64_t references() const { return refs_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> refs_{0};
  const bool zero_copy_;
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_MEMORY_OWNER_H_
