// The environment an RC queue pair runs in, injected so that the transport
// runs unchanged over DPDK in the daemon and over a simulated link in tests:
// a clock, a frame transmitter, the responder's remote-key lookup and the
// sink for work completions.
//
// Implementations are called from the engine thread that owns the QP only.
#ifndef RDMAPLANE_DATAPLANE_RC_INTERFACES_H_
#define RDMAPLANE_DATAPLANE_RC_INTERFACES_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "dataplane/rc/types.h"
#include "dataplane/wire/psn.h"

namespace rdmaplane::rc {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;
};

// Transmit side of a port. Frames are built in place: Reserve hands out a
// buffer for one frame, Commit sends the first `len` bytes of it.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A buffer of at least `max_len` bytes, or an empty span when the transmit
  // queue is full (the QP tries again on a later poll).
  virtual std::span<uint8_t> Reserve(size_t max_len) = 0;
  virtual void Commit(size_t len) = 0;
};

// Why the responder refused a remote access. Every value but kOk becomes a
// NAK "remote access error" on the wire; the reason is counted locally.
enum class AccessCheck : uint8_t {
  kOk = 0,
  kUnknownKey,       // no registration under this rkey (or a stale tag)
  kWrongConnection,  // registered for another connection
  kNoPermission,     // read-only target of a write, write-only source of a read
  kOutOfRange,       // [va, va + len) not inside the registration
};

struct ResolvedMemory {
  AccessCheck check = AccessCheck::kUnknownKey;
  uint8_t* addr = nullptr;  // valid when check == kOk
};

// Remote-key lookup for the responder side of a QP.
class RemoteMemory {
 public:
  virtual ~RemoteMemory() = default;
  // Checks that `rkey` names memory registered for the connection of
  // `local_qpn` with `access`, and that [va, va + len) lies inside it.
  // A kOk answer for a non-empty range pins the registration until the
  // matching Release.
  virtual ResolvedMemory Resolve(wire::Qpn local_qpn, wire::Rkey rkey,
                                 uint64_t va, uint32_t len,
                                 RemoteAccess access) = 0;
  // The responder is done with memory it resolved under `rkey`: the write
  // message ended, the read's responses were sent, or the QP failed.
  virtual void Release(wire::Rkey rkey) = 0;
};

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void Complete(const Completion& completion) = 0;
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_INTERFACES_H_
