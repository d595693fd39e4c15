// Tests: a client session as SessionServer leaves it after a hello, in
// anonymous memory instead of a memfd: the control response ring attached,
// a connection slot's rings formatted as the daemon hands the slot out.
#ifndef RDMAPLANE_CONTROL_TESTING_FAKE_SESSION_H_
#define RDMAPLANE_CONTROL_TESTING_FAKE_SESSION_H_

#include <sys/mman.h>
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

// The region in anonymous memory: zero pages, touched only where the
// daemon formats rings, as a client's memfd is.
struct RegionUnmap {
  void operator()(uint8_t* p) const { munmap(p, shm::SessionRegionBytes()); }
};

class FakeSession {
 public:
  FakeSession(uint32_t id, uid_t uid)
      : memory_(static_cast<uint8_t*>(
            mmap(nullptr, shm::SessionRegionBytes(), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))) {
    s.id = id;
    s.uid = uid;
    s.region = memory_.get();
    s.region_bytes = shm::SessionRegionBytes();
    s.header = new (memory_.get()) shm::SessionHeader{};
    shm::PlanRings(s.header);
    const shm::RingRef responses = shm::SessionRings::ControlResponses();
    s.responses = *shm::SpscRing<shm::ControlResponse>::Create(
        memory_.get() + responses.offset, responses.bytes,
        responses.capacity);
    const shm::RingRef events = shm::SessionRings::CmEvents();
    s.cm_events = *shm::SpscRing<shm::CmEvent>::Create(
        memory_.get() + events.offset, events.bytes, events.capacity);
    // A slot's rings: formatted by Session::ResetSlot when handed out.
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
  // The next rdma_cm event the daemon has for the client.
  std::optional<shm::CmEvent> TakeCmEvent() {
    shm::CmEvent e;
    if (s.cm_events.TryPop(&e) != shm::PopResult::kOk) return std::nullopt;
    return e;
  }
  Session s;

 private:
  std::unique_ptr<uint8_t[], RegionUnmap> memory_;
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
