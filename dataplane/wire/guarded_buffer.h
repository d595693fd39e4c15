// Memory for fuzz inputs whose end (or start) touches an inaccessible page,
// so that a parser reading even one byte past the end (or before the start)
// of its input crashes at once, with or without a sanitizer.
//
// Test-only. Thread-compatible.
#ifndef RDMAPLANE_DATAPLANE_WIRE_GUARDED_BUFFER_H_
#define RDMAPLANE_DATAPLANE_WIRE_GUARDED_BUFFER_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace rdmaplane::wire {

class GuardedBuffer {
 public:
  // Holds inputs of up to `capacity` bytes; larger ones are copied to an
  // exactly sized heap block instead (guarded only under a sanitizer).
  explicit GuardedBuffer(size_t capacity);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  // Copies `bytes` so that they end right before a guard page. The returned
  // span stays valid until the next call.
  std::span<uint8_t> CopyBeforeGuard(std::span<const uint8_t> bytes);
  // Copies `bytes` so that they start right after a guard page.
  std::span<uint8_t> CopyAfterGuard(std::span<const uint8_t> bytes);

 private:
  std::span<uint8_t> CopyToHeap(std::span<const uint8_t> bytes);

  size_t page_size_;
  size_t usable_len_;  // whole pages between the two guards
  uint8_t* mapping_;   // guard page, usable pages, guard page
  uint8_t* usable_;    // first usable byte
  uint8_t* heap_copy_ = nullptr;
};

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_GUARDED_BUFFER_H_
