// One end of a connection as an engine serves it: the client's send and
// completion rings, the RC queue pair, the adapters that connect the QP to
// the registration table and to the completion ring, and its link: either
// the in-process loopback link to a peer endpoint of the same daemon (the
// frame queue the peer's transmissions land in), or the engine's DPDK port
// towards a peer in another daemon (the engine hands it received frames).
//
// Created and destroyed by the control plane; between Engine::AddPair and
// the acknowledgement of Engine::RemovePair it is used by the engine thread
// only.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_ENDPOINT_H_
#define RDMAPLANE_DATAPLANE_ENGINE_ENDPOINT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "api/shm/layout.h"
#include "api/shm/ring.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/mr/registration_table.h"
#include "dataplane/rc/interfaces.h"
#include "dataplane/rc/qp.h"

namespace rdmaplane::engine {

class MonotonicClock : public rc::Clock {
 public:
  uint64_t NowNs() const override;
};

// Fixed-size FIFO of frames, filled by the peer's transmitter: the loopback
// link. Single producer and consumer, both the engine thread.
class FrameQueue {
 public:
  static constexpr uint32_t kSlots = 512;
  static constexpr uint32_t kSlotBytes = 4352;  // 4096 MTU + headers

  FrameQueue();
  std::span<uint8_t> Reserve(size_t len);
  void Commit(size_t len);
  // Oldest frame, or an empty span.
  std::span<const uint8_t> Front() const;
  void Pop() { ++head_; }
  bool empty() const { return head_ == tail_; }

 private:
  std::unique_ptr<uint8_t[]> frames_;
  uint32_t lengths_[kSlots];
  uint32_t head_ = 0;
  uint32_t tail_ = 0;
};

// Transmits into the peer's FrameQueue, through an optional fault model.
class LoopbackTx : public rc::FrameSink {
 public:
  explicit LoopbackTx(const fault::FaultSpec& faults) : faults_(faults) {}
  void Connect(FrameQueue* peer_rx) { peer_rx_ = peer_rx; }
  std::span<uint8_t> Reserve(size_t max_len) override;
  void Commit(size_t len) override;

 private:
  FrameQueue* peer_rx_ = nullptr;
  fault::FaultModel faults_;
  uint8_t scratch_[FrameQueue::kSlotBytes];  // frames the model drops
  bool reserved_in_peer_ = false;
};

// A client session's wake-up socket as the engines see it (the read end of
// the socket pair whose other end the client rings after posting to a
// sleeping engine). Each engine serving one of the session's connections
// watches it; the one that drains a kick wakes the others that serve the
// session, so a kick meant for one engine is never lost to another.
// Owned by the control plane, which frees it only once no engine serves the
// session (every endpoint naming it was removed).
struct WakeRoute {
  static constexpr uint32_t kMaxEngines = 32;
  int fd = -1;
  // Bit i: engine i watches the socket. Set and cleared by engine i;
  // read by the others when they forward a kick.
  std::atomic<uint32_t> engines{0};
  // Endpoints of the session engine i serves; engine i only.
  uint32_t endpoints[kMaxEngines] = {};
};

struct EndpointInfo {
  uint32_t connection_id = 0;  // registration scope
  uint32_t session_id = 0;     // owner, for local keys
  shm::SessionHeader* header = nullptr;
  uint32_t slot = 0;  // connection slot in the session
  WakeRoute* wake = nullptr;  // the session's, or null (nothing to watch)
  shm::SpscRing<shm::SendEntry> send;
  shm::SpscRing<shm::CompletionEntry> completion;
  rc::QpConfig qp;
};

struct EndpointStats {
  uint64_t posted = 0;
  uint64_t completed = 0;
  uint64_t local_key_errors = 0;
  uint64_t bad_entries = 0;
  uint64_t rx_rejected = 0;
  uint64_t direct = 0;  // requests carried out directly (same engine)
};

class Endpoint : public rc::RemoteMemory, public rc::CompletionSink {
 public:
  // `port_tx` null: an in-process link to a peer endpoint (see Wire), with
  // `faults` on its transmit side. Otherwise frames go out through
  // `port_tx` and come in through HandleFrame.
  Endpoint(const EndpointInfo& info, mr::RegistrationTable* table,
           const rc::Clock* clock, const fault::FaultSpec& faults,
           rc::FrameSink* port_tx = nullptr);
  ~Endpoint() override;

  // Engine thread. Moves work: client requests in, frames in, frames and
  // completions out. Returns how much it did (0: idle).
  uint32_t Poll(uint32_t budget);
  // Engine thread: the connection is closing. Outstanding work completes
  // with `status` and the client sees `state`.
  void Close(int32_t status, shm::ConnectionState state);
  // Completes requests still waiting in the send ring with `status`, as far
  // as the completion ring has room. The engine thread while it serves the
  // endpoint; the control thread once it no longer does.
  void AbortQueued(int32_t status);
  bool HasWork() const;
  uint64_t next_timer_ns() const { return qp_->timer_deadline_ns(); }
  void SetIdle(bool idle);
  // Tells the client what became of the connection.
  void PublishState(shm::ConnectionState state);

  void Wire(Endpoint* peer);
  // A port endpoint learns its peer's QP, first PSN and MAC from the
  // connection manager; before the engine serves it (control thread).
  void SetPeer(wire::Qpn remote_qpn, wire::Psn recv_psn,
               const wire::MacAddr& mac);
  // A frame for this endpoint's QP arrived on the port (engine thread).
  void HandleFrame(const wire::ParsedPacket& pkt);
  // True once, after a transport error closed a port endpoint: the engine
  // tells the control plane, which tells the peer daemon.
  bool TakeTransportError();
  bool remote() const { return rx_ == nullptr; }
  const EndpointInfo& info() const { return info_; }
  const EndpointStats& stats() const { return stats_; }
  const rc::QpStats& qp_stats() const { return qp_->stats(); }
  // Why the queue pair broke (rc::RcQp::error_status).
  rc::WcStatus qp_error() const { return qp_->error_status(); }
  Endpoint* peer() const { return peer_; }

  // rc::RemoteMemory
  rc::ResolvedMemory Resolve(wire::Qpn local_qpn, wire::Rkey rkey,
                             uint64_t va, uint32_t len,
                             rc::RemoteAccess access) override;
  void Release(wire::Rkey rkey) override;
  // rc::CompletionSink
  void Complete(const rc::Completion& c) override;

 private:
  // Locks pinned for one posted request, released at its completion.
  struct Pins {
    uint32_t lkeys[shm::kMaxSge];
    uint32_t count;
    uint32_t invalidate;  // lkey to invalidate on success, or 0
  };

  uint32_t PullRequests(uint32_t budget);
  // Closes the connection (both ends, and tells the control plane of a
  // port endpoint) once its queue pair is in the error state, whatever put
  // it there. True when the endpoint is closed.
  bool CloseOnTransportError();
  // Carries out a request at once against the peer endpoint's memory
  // (direct_ connections only): the responder's checks, one copy.
  void ExecuteDirect(const rc::WorkRequest& wr, Pins& pins, uint8_t op);
  void ReleasePins(Pins& pins);
  // Turns a client entry into a work request; returns an rdp_status.
  int Translate(const shm::SendEntry& e, rc::WorkRequest* wr, Pins* pins);
  void PushCompletion(uint64_t wr_id, int32_t status, uint8_t op,
                      uint32_t bytes);

  EndpointInfo info_;
  mr::RegistrationTable* table_;
  const rc::Clock* clock_;
  rc::FrameSink* port_tx_;
  std::unique_ptr<FrameQueue> rx_;  // loopback endpoints only
  LoopbackTx tx_;
  std::unique_ptr<rc::RcQp> qp_;
  Endpoint* peer_ = nullptr;
  std::unique_ptr<Pins[]> pins_;  // FIFO, one per outstanding request
  uint32_t pins_head_ = 0;
  uint32_t pins_tail_ = 0;
  uint32_t pins_mask_;
  int32_t flush_status_;  // status of flushed requests (Close sets it)
  bool ring_bell_ = false;
  bool closed_ = false;
  // Both ends in this engine and a clean link: requests are carried out
  // directly instead of as RoCEv2 frames through the loopback link.
  bool direct_ = false;
  bool transport_error_ = false;  // not yet taken by the engine
  EndpointStats stats_;
};

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_ENDPOINT_H_
