// Fuzz target for SpscRing over memory a hostile peer wrote: the daemon
// attaches to the rings of a client's session region (control requests,
// send and receive entries) and the client to the daemon's (responses,
// completions), and neither may trust a byte of them. Any input is a ring
// image; Attach must accept it only when its header is sound for the
// region, and then TryPop and TryPush must never touch memory outside the
// region (it is an exactly sized heap block, so AddressSanitizer sees a
// stray byte), report a producer index out of reach as kCorrupted, and
// hand out at most `capacity` entries before the ring reads empty.
//
// Input: one byte choosing the entry type (ControlRequest, ControlResponse,
// SendEntry, RecvEntry, CompletionEntry), one byte of pushes to try
// between pops, then the ring image from its header on (RingHeader,
// producer index, consumer index, entries; see ring.h).
//
// Runs under libFuzzer (--config=fuzz) or, as ring_fuzzer under gcc,
// replaying api/shm/corpus/ring (see dataplane/wire/fuzz.bzl).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/wire/fuzz_driver.h"

namespace rdmaplane::shm {
namespace {

// The region, exactly `len` bytes on a cache-line boundary.
class Region {
 public:
  explicit Region(std::span<const uint8_t> image)
      : len_(image.size()),
        mem_(static_cast<uint8_t*>(
            ::operator new(len_ == 0 ? 1 : len_, std::align_val_t(kCacheLine)))) {
    if (len_ > 0) std::memcpy(mem_, image.data(), len_);
  }
  ~Region() { ::operator delete(mem_, std::align_val_t(kCacheLine)); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  uint8_t* data() const { return mem_; }
  size_t size() const { return len_; }

 private:
  size_t len_;
  uint8_t* mem_;
};

template <typename T>
void Exercise(std::span<const uint8_t> image, uint8_t pushes) {
  Region region(image);
  auto ring = SpscRing<T>::Attach(region.data(), region.size());
  if (!ring.ok()) return;
  const uint32_t capacity = ring->capacity();
  FUZZ_CHECK(capacity != 0 && (capacity & (capacity - 1)) == 0);
  FUZZ_CHECK(SpscRing<T>::BytesFor(capacity) <= region.size());

  // Pop until the ring is empty or corrupt; a sound ring holds at most
  // `capacity` entries, and pushing (as the other side of a ring the daemon
  // both reads and answers on would) never makes it hold more.
  T entry;
  std::memset(&entry, 0xA5, sizeof(entry));
  uint32_t popped = 0;
  uint32_t pushed = 0;
  for (;;) {
    const PopResult r = ring->TryPop(&entry);
    if (r != PopResult::kOk) break;
    ++popped;
    if (pushed < pushes && ring->TryPush(entry)) ++pushed;
    FUZZ_CHECK(popped <= capacity + pushed);
  }
  // A second handle, as after a daemon restart re-attaches, sees the same.
  auto again = SpscRing<T>::Attach(region.data(), region.size());
  FUZZ_CHECK(again.ok());
  const PopResult r = again->TryPop(&entry);
  FUZZ_CHECK(r == PopResult::kEmpty || r == PopResult::kCorrupted);
  // The producer side on the same memory stops at a full ring.
  uint32_t fill = 0;
  while (fill <= capacity && again->TryPush(entry)) ++fill;
  FUZZ_CHECK(fill <= capacity);
}

}  // namespace
}  // namespace rdmaplane::shm

namespace rdmaplane::wire {

// For the fuzz_driver's mutation mode: a send ring of 4 with one entry.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  using shm::SendEntry;
  using shm::SpscRing;
  constexpr uint32_t kCapacity = 4;
  const size_t bytes = SpscRing<SendEntry>::BytesFor(kCapacity);
  auto* mem = static_cast<uint8_t*>(
      ::operator new(bytes, std::align_val_t(shm::kCacheLine)));
  auto ring = SpscRing<SendEntry>::Create(mem, bytes, kCapacity);
  SendEntry e{};
  e.wr_id = 7;
  e.op = shm::kSendWrite;
  e.num_sge = 1;
  e.sge[0] = {0x7f0000001000, 4096, 3};
  ring->TryPush(e);
  std::vector<uint8_t> seed = {2, 1};
  seed.insert(seed.end(), mem, mem + bytes);
  ::operator delete(mem, std::align_val_t(shm::kCacheLine));
  return {seed};
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rdmaplane::shm;  // NOLINT: the entry types, briefly
  if (size < 2) return 0;
  const std::span<const uint8_t> image(data + 2, size - 2);
  const uint8_t pushes = data[1];
  switch (data[0] % 5) {
    case 0:
      Exercise<ControlRequest>(image, pushes);
      break;
    case 1:
      Exercise<ControlResponse>(image, pushes);
      break;
    case 2:
      Exercise<SendEntry>(image, pushes);
      break;
    case 3:
      Exercise<RecvEntry>(image, pushes);
      break;
    case 4:
      Exercise<CompletionEntry>(image, pushes);
      break;
  }
  return 0;
}
