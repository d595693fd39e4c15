// Tests: a client session as SessionServer leaves it after a hello, in
// plain memory instead of a memfd: the control response ring and every
// connection slot's rings attached.
#ifndef RDMAPLANE_CONTROL_TESTING_FAKE_SESSION_H_
#define RDMAPLANE_CONTROL_TESTING_FAKE_SESSION_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <optional>

#include "api/shm/layout.h"
#include "control/sessions.h"

namespace rdmaplane::control {

struct AlignedDelete {
  void operator()(uint8_t* p) const {
    ::operator delete[](p, std::align_val_t(4096));
  }
};

class FakeSession {
 public:
  FakeSession(uint32_t id, uid_t uid)
      : memory_(static_cast<uint8_t*>(::operator new[](
            shm::SessionRegionBytes(), std::align_val_t(4096)))) {
    std::memset(memory_.get(), 0, shm::SessionRegionBytes());
    s.id = id;
    s.uid = uid;
    s.header = new (memory_.get()) shm::SessionHeader{};
    uint64_t offset = sizeof(shm::SessionHeader);
    const size_t responses =
        shm::SpscRing<shm::ControlResponse>::BytesFor(shm::kControlRingEntries);
    s.responses = *shm::SpscRing<shm::ControlResponse>::Create(
        memory_.get() + offset, responses, shm::kControlRingEntries);
    offset += (responses + 63) / 64 * 64;
    for (uint32_t i = 0; i < shm::kMaxConnections; ++i) {
      const size_t send =
          shm::SpscRing<shm::SendEntry>::BytesFor(shm::kSendRingEntries);
      const size_t completion = shm::SpscRing<shm::CompletionEntry>::BytesFor(
          shm::kCompletionRingEntries);
      s.send[i] = *shm::SpscRing<shm::SendEntry>::Create(
          memory_.get() + offset, send, shm::kSendRingEntries);
      offset += (send + 63) / 64 * 64;
      s.completion[i] = *shm::SpscRing<shm::CompletionEntry>::Create(
          memory_.get() + offset, completion, shm::kCompletionRingEntries);
      offset += (completion + 63) / 64 * 64;
    }
  }
  uint32_t state(uint32_t slot) const {
    return s.header->connection_state[slot].load();
  }
  int32_t final_status(uint32_t slot) const {
    return s.header->final_status[slot].load();
  }
  // The next answer the daemon gave to a control request.
  std::optional<shm::ControlResponse> TakeAnswer() {
    shm::ControlResponse r;
    if (s.responses.TryPop(&r) != shm::PopResult::kOk) return std::nullopt;
    return r;
  }
  Session s;

 private:
  std::unique_ptr<uint8_t[], AlignedDelete> memory_;
};

// A control request of type `op` for `service` (and connection slot
// `connection`), as a client's library sends it.
inline shm::ControlRequest Op(uint32_t op, const char* service = "svc",
                              uint32_t connection = 0) {
  shm::ControlRequest r{};
  r.op = op;
  r.connection = connection;
  std::snprintf(r.service, sizeof(r.service), "%s", service);
  return r;
}

}  // namespace rdmaplane::control

#endif  // RDMAPLANE_CONTROL_TESTING_FAKE_SESSION_H_
