#include "dataplane/wire/guarded_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace rdmaplane::wire {

GuardedBuffer::GuardedBuffer(size_t capacity)
    : page_size_(static_cast<size_t>(sysconf(_SC_PAGESIZE))),
      usable_len_((capacity + page_size_ - 1) / page_size_ * page_size_) {
  void* p = mmap(nullptr, usable_len_ + 2 * page_size_, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("GuardedBuffer: mmap");
    std::abort();
  }
  mapping_ = static_cast<uint8_t*>(p);
  usable_ = mapping_ + page_size_;
  if (usable_len_ > 0 &&
      mprotect(usable_, usable_len_, PROT_READ | PROT_WRITE) != 0) {
    std::perror("GuardedBuffer: mprotect");
    std::abort();
  }
}

GuardedBuffer::~GuardedBuffer() {
  munmap(mapping_, usable_len_ + 2 * page_size_);
  delete[] heap_copy_;
}

std::span<uint8_t> GuardedBuffer::CopyBeforeGuard(
    std::span<const uint8_t> bytes) {
  if (bytes.size() > usable_len_) return CopyToHeap(bytes);
  uint8_t* start = usable_ + usable_len_ - bytes.size();
  if (!bytes.empty()) std::memcpy(start, bytes.data(), bytes.size());
  return {start, bytes.size()};
}

std::span<uint8_t> GuardedBuffer::CopyAfterGuard(
    std::span<const uint8_t> bytes) {
  if (bytes.size() > usable_len_) return CopyToHeap(bytes);
  if (!bytes.empty()) std::memcpy(usable_, bytes.data(), bytes.size());
  return {usable_, bytes.size()};
}

std::span<uint8_t> GuardedBuffer::CopyToHeap(std::span<const uint8_t> bytes) {
  delete[] heap_copy_;
  heap_copy_ = new uint8_t[bytes.size()];
  std::memcpy(heap_copy_, bytes.data(), bytes.size());
  return {heap_copy_, bytes.size()};
}

}  // namespace rdmaplane::wire
