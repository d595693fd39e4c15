// The environment an RC queue pair runs in, injected so that the transport
// runs unchanged over DPDK in the daemon and over a simulated link in tests:
// a clock, a frame transmitter, the responder's remote-key lookup and the
// sink for work completions.
//
// Implementations are called from the engine thread that owns the QP only.
#ifndef RDMAPLANE_DATAPLANE_RC_INTERFACES_H_
#define RDMAPLANE_DATAPLANE_RC_INTERFACES_H_

#include <time.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "dataplane/rc/memory_owner.h"
#include "dataplane/rc/types.h"
#include "dataplane/wire/psn.h"

namespace rdmaplane::rc {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t NowNs() const = 0;
};

// CLOCK_MONOTONIC in nanoseconds: the time of every real clock here.
inline uint64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<uint64_t>(ts.tv_nsec);
}

// A Clock that reads CLOCK_MONOTONIC on every call (ports and tests; the
// engine's MonotonicClock reads it once a turn).
class SystemClock : public Clock {
 public:
  uint64_t NowNs() const override { return MonotonicNowNs(); }
};

// Payload bytes of a frame left where they are (zero-copy transmit):
// registered memory and the owner that keeps it mapped (null: nobody does,
// so the bytes can only be copied).
struct PayloadPiece {
  const uint8_t* data = nullptr;
  uint32_t len = 0;
  MemoryOwner* owner = nullptr;
};

// Transmit side of a port. Frames are built in place: Reserve hands out a
// buffer for one frame, Commit sends the first `len` bytes of it.
//
// A sink may also send a frame's payload from where it lies (gather): the QP
// reserves a buffer for the whole frame as usual, writes the headers, and
// hands the payload as pieces of registered memory together with the
// trailer (pad and ICRC, which the QP computes over headers and pieces).
// The bytes on the wire are the same either way.
class FrameSink {
 public:
  virtual ~FrameSink() = default;
  // A buffer of at least `max_len` bytes, or an empty span when the transmit
  // queue is full (the QP tries again on a later poll).
  virtual std::span<uint8_t> Reserve(size_t max_len) = 0;
  virtual void Commit(size_t len) = 0;

  // Smallest payload worth sending in place, or 0 (the default) when the
  // sink never does: smaller payloads are cheaper to copy.
  virtual uint32_t min_gather_payload() const { return 0; }
  // True when the sink can send these pieces in place; otherwise the QP
  // copies them into the frame and calls Commit.
  virtual bool CanGather(std::span<const PayloadPiece> payload) const {
    return false;
  }
  // Sends the frame made of the first `header_len` bytes of `frame` (the
  // buffer of the last Reserve), the pieces in order and `trailer`. The
  // sink references the pieces' memory until it is done with them (see
  // MemoryOwner). This default copies everything into `frame`, which
  // Reserve made large enough for the whole frame.
  virtual void CommitGather(std::span<uint8_t> frame, size_t header_len,
                            std::span<const PayloadPiece> payload,
                            std::span<const uint8_t> trailer) {
    size_t at = header_len;
    for (const PayloadPiece& p : payload) {
      std::memcpy(frame.data() + at, p.data, p.len);
      at += p.len;
    }
    std::memcpy(frame.data() + at, trailer.data(), trailer.size());
    Commit(at + trailer.size());
  }
};

// Why the responder refused a remote access. Every value but kOk becomes a
// NAK "remote access error" on the wire; the reason is counted locally.
enum class AccessCheck : uint8_t {
  kOk = 0,
  kUnknownKey,       // no registration under this rkey (or a stale tag)
  kWrongConnection,  // registered for another connection
  // A read-only target of a write, a write-only source of a read, the
  // target of an atomic without atomic access.
  kNoPermission,
  kOutOfRange,  // [va, va + len) not inside the registration
};

struct ResolvedMemory {
  AccessCheck check = AccessCheck::kUnknownKey;
  uint8_t* addr = nullptr;  // valid when check == kOk
  MemoryOwner* owner = nullptr;  // keeps it mapped for zero-copy transmit
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
  // The responder of `local_qpn` received a SEND with Invalidate naming
  // `rkey`. True when the key named a memory window this queue pair may
  // invalidate and it is now invalid: it stops resolving before the receive
  // completes. False otherwise (an unknown key, a registration's, another
  // connection's, one already invalid): the receive then completes with
  // WcStatus::kInvalidateError and the queue pair enters the error state.
  virtual bool Invalidate(wire::Qpn local_qpn, wire::Rkey rkey) {
    return false;
  }
  // The receive request `recv` is about to take a message's data: false
  // when a buffer's local key (Sge::lkey) no longer resolves to that buffer
  // (the application deregistered it, or registered it again, after
  // posting the receive), so that nothing lands in memory the application
  // may have given back.
  virtual bool ReceiveBuffersLive(const WorkRequest& recv) { return true; }
};

class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void Complete(const Completion& completion) = 0;
  // A receive request ended (see RecvCompletion); a sink that never posts
  // receive requests is never called.
  virtual void CompleteRecv(const RecvCompletion& completion) {}
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_INTERFACES_H_
