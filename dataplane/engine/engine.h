// An engine: one thread that runs every connection endpoint it was given in
// a run-to-completion loop (port rx_burst -> RC responder and completer,
// client send rings -> RC requester -> tx_burst, timers, completion rings),
// with no locks and no allocation on the loop. Changes arrive as commands
// from the control plane, applied at the top of the loop. When idle, an
// adaptive engine spins briefly, then yields its CPU between turns (so that
// clients and other engines sharing the CPU run at once), and after a while
// without work sleeps until a client rings its session's wake-up socket
// after posting to a sleeping engine, or the port's receive interrupt fires
// (or, for a port without one, after a short nap), waking at least for the
// next retransmit timer. A busy engine never yields or sleeps.
//
// With a port, frames that are not for a connection's QP (ARP, connection
// management to QP 1) go to the control plane through a ring, and frames
// the control plane sends come back through another; the control plane
// also learns there of connections a transport error broke.
//
// A daemon runs one or more engines. Each owns the connections it was given
// for their whole life; engine 0 also owns the data port, if any. Engines
// know each other only by their wake-up eventfds (SetSiblings), through
// which they pass on a client's kick that one of them drained for another
// (see WakeRoute).
//
// Thread-safety: AddPair/AddRemote/RemovePair/Stop and the control-frame
// calls are made from one control thread (the former block until the
// engine applied them); everything else is internal to the engine thread.
#ifndef RDMAPLANE_DATAPLANE_ENGINE_ENGINE_H_
#define RDMAPLANE_DATAPLANE_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "api/shm/ring.h"
#include "dataplane/engine/endpoint.h"
#include "dataplane/engine/idle_policy.h"
#include "dataplane/mr/registration_table.h"

namespace rdmaplane::port {
class EthPort;
}  // namespace rdmaplane::port

namespace rdmaplane::engine {

struct EngineOptions {
  PollMode mode = PollMode::kAdaptive;
  // This engine's index among the daemon's engines, and its reader slot
  // in the registration table.
  uint32_t reader_index = 0;
  uint32_t max_endpoints = 1024;
  uint32_t budget = 32;  // frames or requests per endpoint per turn
  // Adaptive idle (see idle_policy.h): empty turns spun back to back, then
  // time without work, yielding the CPU between turns, before sleeping.
  // Few spins: an empty turn takes a fraction of a microsecond, and where
  // the engine shares its CPU (with a client, or the other daemon of a
  // memif pair on a 2-CPU host) every turn spun before yielding delays the
  // thread that has work. Over memif between two adaptive daemons on two
  // CPUs, 4 spins against 64 gave 8 B WRITE p50 5.3-6.3 us against
  // 9.5-10.7 us, 64 B WRITEs 1.5-1.7 against 1.0 Mops and 64 KiB WRITEs
  // 4.5-4.8 against 2.9 GB/s (docs/performance.md).
  uint32_t idle_spins = 4;
  uint64_t idle_ns = 500'000;
  uint64_t max_sleep_ns = 10'000'000;
  // While a port without a receive interrupt is attached, the engine naps
  // instead of sleeping: first this long, doubling while nothing arrives,
  // up to port_max_nap_ns (bounding how late it sees a frame).
  uint64_t port_nap_ns = 20'000;
  uint64_t port_max_nap_ns = 200'000;
  // EAL lcore to run on (rte_eal_remote_launch; the caller must be the EAL
  // main thread), or -1 for a plain thread, pinned to `cpu` unless that is
  // -1 too.
  int lcore = -1;
  int cpu = -1;
};

// A frame between the engine and the control plane, or an event.
struct ControlFrame {
  static constexpr uint32_t kMaxBytes = 376;
  // kLocalOp: an endpoint's memory window request (Endpoint::
  // TakeLocalOp): bytes hold a LocalOpRequest.
  enum Kind : uint16_t { kFrame = 1, kTransportError = 2, kLocalOp = 3 };
  uint16_t kind = kFrame;
  uint16_t length = 0;
  uint32_t connection_id = 0;  // kTransportError, kLocalOp: the endpoint's
  uint8_t bytes[kMaxBytes];
};
static_assert(sizeof(ControlFrame) == 384);

// What a kLocalOp frame carries: the request, and the seq to answer it
// with (Endpoint::AnswerLocalOp).
struct LocalOpRequest {
  shm::SendEntry entry;
  uint64_t incarnation;  // Endpoint::incarnation()
  uint32_t seq;
};
static_assert(sizeof(LocalOpRequest) <= ControlFrame::kMaxBytes);

struct EngineCounters {
  std::atomic<uint64_t> loops{0};
  std::atomic<uint64_t> sleeps{0};
  std::atomic<uint64_t> wakeups{0};
  // Errors taken from the data port's socket (af_packet: its interface
  // went down).
  std::atomic<uint64_t> port_socket_errors{0};
  std::atomic<uint64_t> asleep{0};  // 1 while the engine sleeps (a gauge)
  std::atomic<uint64_t> kicks_passed_on{0};         // to sibling engines
  std::atomic<uint64_t> rx_unknown_qpn{0};          // no endpoint has the QPN
  std::atomic<uint64_t> rx_rejected{0};             // malformed RoCE frames
  std::atomic<uint64_t> control_frames_in{0};       // to the control plane
  std::atomic<uint64_t> control_frames_out{0};      // from the control plane
  std::atomic<uint64_t> control_frames_dropped{0};  // a ring was full
  // TSC cycles of the loop turns that did work (TscHz() per second), and
  // what the engine's endpoints took from their clients.
  rc::StatCounter busy_cycles;
  EngineLoad load;
};

class Engine {
 public:
  Engine(mr::RegistrationTable* table, const EngineOptions& options);
  ~Engine();  // stops the thread

  // Before Start: the engine owns the port's queues from then on.
  void AttachPort(port::EthPort* port);
  port::EthPort* port() const { return port_; }
  // Before Start, for a daemon without a data port: a link from the engine
  // to itself, over which the remote endpoints it serves reach each other
  // (verbs queue pairs of this daemon connected by its own address). Frames
  // sent into self_link() come back through the receive path, one turn
  // later; a full link pushes back on the sender.
  void AttachSelfLink();
  rc::FrameSink* self_link() const { return self_tx_.get(); }

  void Start();
  void Stop();

  // Wires a and b to each other and starts serving both.
  void AddPair(Endpoint* a, Endpoint* b);
  // Stops serving `e` and its peer, closing them (Endpoint::Close) with
  // `reason` and `peer_reason` unless they closed already. The caller may
  // delete both once this returns.
  void RemovePair(Endpoint* e, CloseReason reason, CloseReason peer_reason);
  // Starts serving `e`, whose peer is in another daemon: frames for its
  // local QPN are handed to it. Remove it with RemovePair (no peer).
  void AddRemote(Endpoint* e);
  // Sets the first PSN and retry settings of a served endpoint's requester
  // (nothing posted yet; see Endpoint::StartRequester).
  void StartRequester(Endpoint* e, const rc::RequesterSettings& s);
  // Changes what a served endpoint's responder serves and its RNR timer
  // (Endpoint::ModifyResponder), in the engine's next turn.
  void ModifyResponder(Endpoint* e, const rc::ResponderSettings& s);

  // Control plane: queue a frame for transmission on the port (false when
  // the ring is full), and take frames and events the engine passed up.
  bool SendControlFrame(std::span<const uint8_t> frame);
  bool TakeControlFrame(ControlFrame* out);
  // Frames the control plane queued that the engine has not sent yet.
  uint32_t control_backlog() const { return from_control_.Size(); }
  // Readable when the engine passed something up (an eventfd the control
  // plane drains).
  int control_notify_fd() const { return notify_fd_; }

  // Before Start: the wake-up eventfds of all the daemon's engines, by
  // index (this one's included), to pass kicks on to.
  void SetSiblings(std::span<const int> wake_fds);
  // Written to wake this engine (commands, kicks passed on).
  int wake_fd() const { return eventfd_; }
  // Endpoints the engine serves (control thread: a snapshot).
  uint32_t endpoint_count() const {
    return served_.load(std::memory_order_relaxed);
  }
  const EngineCounters& counters() const { return counters_; }
  const rc::Clock* clock() const { return &clock_; }

 private:
  enum class CommandType : uint8_t {
    kAddPair,
    kAddRemote,
    kRemovePair,
    kStartRequester,
    kModifyResponder
  };
  struct Command {
    CommandType type;
    Endpoint* a;
    Endpoint* b;
    CloseReason reason;
    CloseReason peer_reason;
    std::atomic<bool>* done;
    rc::RequesterSettings requester;  // kStartRequester
    rc::ResponderSettings responder;  // kModifyResponder
  };

  static int LaunchOnLcore(void* engine);
  // "rdp-engine-<index>", as ps and /proc/<pid>/task/*/comm show it.
  std::string ThreadName() const;
  void Run();
  void ApplyCommands();
  uint32_t PollPort();
  uint32_t PollSelfLink();
  void Dispatch(std::span<const uint8_t> frame);
  bool PassUp(const ControlFrame& f);
  void Remove(Endpoint* e);
  void Submit(const Command& c);
  // Returns true when something woke the engine (a doorbell, a command, a
  // receive interrupt) rather than the time running out.
  bool Sleep();
  // Starts or stops watching a session's wake-up socket as endpoints of the
  // session come and go (engine thread).
  void Watch(WakeRoute* route);
  void Unwatch(WakeRoute* route);
  // epoll registration of an fd the engine watches.
  void AddToEpoll(WakeRoute* route);
  // Wakes the other engines serving a session whose kick this one drained.
  void PassOnKick(const WakeRoute& route);

  mr::RegistrationTable* table_;
  EngineOptions options_;
  MonotonicClock clock_;
  int eventfd_ = -1;  // commands, Stop, kicks passed on by siblings
  // eventfd_, the port's receive interrupt and the wake-up sockets of the
  // sessions whose connections the engine serves; epoll data points at the
  // route (the engine's own have no engines to pass kicks on to).
  int epoll_fd_ = -1;
  WakeRoute own_route_;
  WakeRoute port_route_;
  // Receive bursts a turn takes at most while they come back full.
  static constexpr uint32_t kRxBurstsPerTurn = 4;
  std::unique_ptr<int[]> sibling_fds_;
  uint32_t siblings_ = 0;
  struct AlignedDelete {
    void operator()(uint8_t* p) const {
      ::operator delete[](p, std::align_val_t(shm::kCacheLine));
    }
  };
  std::unique_ptr<uint8_t[], AlignedDelete> command_memory_;
  shm::SpscRing<Command> commands_;
  std::unique_ptr<uint8_t[], AlignedDelete> control_memory_;
  shm::SpscRing<ControlFrame> to_control_;    // engine -> control
  shm::SpscRing<ControlFrame> from_control_;  // control -> engine
  int notify_fd_ = -1;
  port::EthPort* port_ = nullptr;
  std::unique_ptr<FrameQueue> self_rx_;  // AttachSelfLink
  std::unique_ptr<LoopbackTx> self_tx_;
  // Remote endpoints by local QPN; capacity reserved up front, so the loop
  // never allocates.
  absl::flat_hash_map<uint32_t, Endpoint*> by_qpn_;
  std::unique_ptr<Endpoint*[]> endpoints_;
  uint32_t count_ = 0;
  std::atomic<uint32_t> served_{0};  // count_, for the control thread
  std::atomic<bool> stop_{false};
  std::thread thread_;
  bool launched_on_lcore_ = false;
  IdlePolicy idle_;
  std::atomic<bool> running_{false};
  EngineCounters counters_;
};

}  // namespace rdmaplane::engine

#endif  // RDMAPLANE_DATAPLANE_ENGINE_ENGINE_H_
