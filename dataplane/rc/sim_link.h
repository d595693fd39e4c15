// A simulated Ethernet link between two endpoints with virtual time and a
// seeded fault model per direction (loss, duplication, reordering, delay), and
// a harness that joins two RC queue pairs over it. Tests and benchmarks only.
//
// Thread-compatible: one thread drives the clock, the link and both QPs.
#ifndef RDMAPLANE_DATAPLANE_RC_SIM_LINK_H_
#define RDMAPLANE_DATAPLANE_RC_SIM_LINK_H_

#include <cstdint>
#include <algorithm>
#include <functional>
#include <memory>
#include <queue>
#include <span>
#include <vector>

#include "dataplane/fault/fault_model.h"
#include "dataplane/rc/interfaces.h"
#include "dataplane/rc/qp.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::rc {

class SimClock : public Clock {
 public:
  uint64_t NowNs() const override { return now_ns_; }
  void AdvanceTo(uint64_t t) {
    if (t > now_ns_) now_ns_ = t;
  }
  void Advance(uint64_t dt) { now_ns_ += dt; }

 private:
  uint64_t now_ns_ = 1;
};

// One direction of the link. With a rate, frames are serialized one after
// another and the transmit queue holds at most `backlog_bytes`; Reserve fails
// while it is full, as a NIC's transmit ring does.
class SimWire : public FrameSink {
 public:
  SimWire(const SimClock* clock, const fault::FaultSpec& faults,
          double gbps = 0, uint32_t backlog_bytes = 64 * 1024);

  std::span<uint8_t> Reserve(size_t max_len) override;
  void Commit(size_t len) override;

  // Zero-copy transmit as a port offers it: payloads of at least
  // `min_payload` bytes (0: never) whose pieces all have an owner are handed
  // over in place; the wire assembles the frame from them.
  void EnableGather(uint32_t min_payload) { gather_from_ = min_payload; }
  uint32_t min_gather_payload() const override { return gather_from_; }
  bool CanGather(std::span<const PayloadPiece> payload) const override;
  void CommitGather(std::span<uint8_t> frame, size_t header_len,
                    std::span<const PayloadPiece> payload,
                    std::span<const uint8_t> trailer) override;
  uint64_t gathered_frames() const { return gathered_frames_; }

  // Hands every frame due by now to `rx`; returns how many.
  size_t Deliver(const std::function<void(std::span<const uint8_t>)>& rx);
  // Time the next frame is due, or UINT64_MAX when the wire is empty.
  uint64_t NextDueNs() const;
  // When a full transmit queue has room again, or UINT64_MAX if it has room.
  uint64_t TxReadyNs() const;
  const fault::FaultCounters& faults() const { return model_.counters(); }
  uint64_t bytes_sent() const { return bytes_sent_; }

  // Test hooks: `tap` sees every frame sent; a frame for which `drop`
  // returns true is lost (before the fault model runs).
  std::function<void(std::span<const uint8_t>)> tap;
  std::function<bool(std::span<const uint8_t>)> drop;
  // Sees the pieces of every frame sent in place.
  std::function<void(std::span<const PayloadPiece>)> on_gather;

 private:
  struct InFlight {
    uint64_t due_ns;
    uint64_t seq;
    std::vector<uint8_t> frame;
    bool operator>(const InFlight& o) const {
      return due_ns != o.due_ns ? due_ns > o.due_ns : seq > o.seq;
    }
  };
  const SimClock* clock_;
  fault::FaultModel model_;
  std::vector<uint8_t> scratch_;
  std::priority_queue<InFlight, std::vector<InFlight>, std::greater<>> queue_;
  void Enqueue(uint64_t delay_ns, bool reordered, size_t len);

  uint64_t seq_ = 0;
  fault::DeliveryOrder order_;
  double ns_per_byte_ = 0;    // 0: infinitely fast
  uint64_t backlog_ns_ = 0;
  uint64_t tx_free_ns_ = 0;   // when the wire has sent all it was given
  uint64_t bytes_sent_ = 0;
  uint32_t gather_from_ = 0;
  uint64_t gathered_frames_ = 0;
};

// Remote memory for tests: a list of registrations, and the R_Keys a SEND
// with Invalidate may invalidate.
class TestMemory : public RemoteMemory {
 public:
  struct Region {
    wire::Qpn qpn;
    wire::Rkey rkey;
    uint64_t va = 0;
    uint8_t* base = nullptr;
    uint32_t length = 0;
    bool readable = false;
    bool writable = false;
    MemoryOwner* owner = nullptr;
    bool atomic = false;  // the target of COMPARE SWAP and FETCH ADD
  };
  void Add(const Region& r) { regions_.push_back(r); }
  ResolvedMemory Resolve(wire::Qpn local_qpn, wire::Rkey rkey, uint64_t va,
                         uint32_t len, RemoteAccess access) override;
  void Release(wire::Rkey) override { --pins_; }
  uint64_t lookups() const { return lookups_; }
  // Resolutions not yet released.
  int64_t pins() const { return pins_; }

  // Lets the responder of `qpn` invalidate `rkey` (as if it named a memory
  // window bound to that queue pair), once: Invalidate then forgets the key
  // and every region under it, which no longer resolve (kUnknownKey), and
  // a second Invalidate of it fails until it is allowed again.
  void AllowInvalidate(wire::Qpn qpn, wire::Rkey rkey) {
    invalidatable_.push_back({qpn, rkey});
  }
  bool Invalidate(wire::Qpn local_qpn, wire::Rkey rkey) override;
  // Invalidate calls, and those that invalidated a key.
  uint64_t invalidate_calls() const { return invalidate_calls_; }
  uint64_t invalidations() const { return invalidations_; }
  // Test hook: sees every Invalidate call, before it is decided.
  std::function<void(wire::Rkey)> on_invalidate;
  // Local keys that no longer reach their buffers (as if deregistered):
  // ReceiveBuffersLive is false for a receive with an SGE under one.
  std::vector<uint32_t> dead_lkeys;
  bool ReceiveBuffersLive(const WorkRequest& recv) override {
    for (uint32_t i = 0; i < recv.num_sge; ++i) {
      if (std::find(dead_lkeys.begin(), dead_lkeys.end(), recv.sge[i].lkey) !=
          dead_lkeys.end()) {
        return false;
      }
    }
    return true;
  }

 private:
  struct Invalidatable {
    wire::Qpn qpn;
    wire::Rkey rkey;
  };
  std::vector<Region> regions_;
  std::vector<Invalidatable> invalidatable_;
  uint64_t lookups_ = 0;
  int64_t pins_ = 0;
  uint64_t invalidate_calls_ = 0;
  uint64_t invalidations_ = 0;
};

class CollectingSink : public CompletionSink {
 public:
  // Keeps what a client would see: silent successes are only counted.
  void Complete(const Completion& c) override {
    if (c.silent) {
      ++silent;
      return;
    }
    completions.push_back(c);
    if (on_complete) on_complete(c);
  }
  void CompleteRecv(const RecvCompletion& c) override { receives.push_back(c); }
  std::vector<RecvCompletion> receives;
  std::vector<Completion> completions;
  uint64_t silent = 0;
  std::function<void(const Completion&)> on_complete;
};

// Two QPs, A and B, connected by a pair of SimWires.
class SimPair {
 public:
  struct Side {
    std::unique_ptr<RcQp> qp;
    TestMemory memory;
    CollectingSink cq;
    wire::ParseCounters parse;
  };

  // `base` supplies MTU, depths and timers; addressing is filled in.
  SimPair(const QpConfig& base, const fault::FaultSpec& a_to_b,
          const fault::FaultSpec& b_to_a, double gbps = 0);

  // One round: deliver due frames, poll both QPs. Returns true if anything
  // moved; when nothing did, time jumps to the next event.
  bool Step(uint32_t budget = 32);
  // Steps until `done()` or `max_ns` of virtual time passed.
  bool RunUntil(const std::function<bool()>& done, uint64_t max_ns);
  // Steps until both QPs have nothing outstanding.
  bool RunUntilIdle(uint64_t max_ns);

  Side a;
  Side b;
  SimClock clock;
  SimWire a_to_b;
  SimWire b_to_a;
  // Frames that failed to parse (must stay 0 on a healthy link).
  uint64_t rejected_frames = 0;

 private:
  void Receive(Side& side, std::span<const uint8_t> frame);
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_SIM_LINK_H_
