// Tests: a client's session region in plain memory, as an endpoint sees it
// (the header and slot 0's send and completion rings, its liveness mutex
// held by the calling thread as the client library holds it), and a clock
// the test moves by hand. For endpoint_test and endpoint_send_fuzzer.
//
// Thread-compatible.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_TESTING_SESSION_REGION_H_
#define RDMAPLANE_DATAPLANE_ENGINE_TESTING_SESSION_REGION_H_

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/rc/interfaces.h"

namespace rdmaplane::engine {

class ManualClock : public rc::Clock {
 public:
  uint64_t NowNs() const override { return now; }
  uint64_t now = 1'000'000'000;
};

struct AlignedDelete {
  void operator()(uint8_t* p) const {
    ::operator delete[](p, std::align_val_t(4096));
  }
};

// One client's session region: the header and, for slot 0, its rings.
struct SessionRegion {
  static constexpr size_t kSendBytes =
      shm::SpscRing<shm::SendEntry>::BytesFor(shm::kSendRingEntries);
  static constexpr size_t kCompletionBytes =
      shm::SpscRing<shm::CompletionEntry>::BytesFor(
          shm::kCompletionRingEntries);
  SessionRegion()
      : memory(static_cast<uint8_t*>(::operator new[](
            sizeof(shm::SessionHeader) + kSendBytes + kCompletionBytes,
            std::align_val_t(4096)))) {
    header = new (memory.get()) shm::SessionHeader{};
    send = *shm::SpscRing<shm::SendEntry>::Create(
        memory.get() + sizeof(shm::SessionHeader), kSendBytes,
        shm::kSendRingEntries);
    completion = *shm::SpscRing<shm::CompletionEntry>::Create(
        memory.get() + sizeof(shm::SessionHeader) + kSendBytes,
        kCompletionBytes, shm::kCompletionRingEntries);
    shm::ResetSlot(header, 0);
    // Held by a live thread (ours), as the client library does.
    Liveness(static_cast<uint32_t>(syscall(SYS_gettid)));
  }
  void Liveness(uint32_t word) {
    std::memcpy(header->liveness, &word, sizeof(word));
  }
  std::vector<shm::CompletionEntry> Completions() {
    std::vector<shm::CompletionEntry> out;
    shm::CompletionEntry c;
    while (completion.TryPop(&c) == shm::PopResult::kOk) out.push_back(c);
    return out;
  }
  int32_t final_status() const {
    return header->final_status[0].load(std::memory_order_acquire);
  }
  uint32_t retired() const {
    return header->retired[0].load(std::memory_order_acquire);
  }
  uint32_t state() const {
    return header->connection_state[0].load(std::memory_order_acquire);
  }
  std::unique_ptr<uint8_t[], AlignedDelete> memory;
  shm::SessionHeader* header;
  shm::SpscRing<shm::SendEntry> send;
  shm::SpscRing<shm::CompletionEntry> completion;
};

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_TESTING_SESSION_REGION_H_
