// A DPDK ethdev port as the engine uses it: one receive and one transmit
// queue, a mempool sized from the configuration, received frames handed out
// as byte spans, and a transmit side that implements rc::FrameSink so the RC
// code builds frames directly in mbufs.
//
// Zero-copy transmit (the sink's gather path), where the device takes
// multi-segment frames: a frame goes out as a chain [headers] -> [one mbuf
// per payload piece, attached as an external buffer to the registered
// memory it lies in] -> [pad and ICRC]. Each attached mbuf holds a reference
// on the memory's rc::MemoryOwner, dropped by the mbuf's free callback when
// whoever holds the frame last (this port's queues and fault delay, the
// device, a receiver) frees it; the owner of the memory keeps it mapped
// until then. Memory is eligible once RegisterExternalMemory accepted it.
//
// Open/close on the control thread; Receive and the TxQueue on the engine
// thread that owns the port (no locks, no allocation besides mbufs).
// RegisterExternalMemory/UnregisterExternalMemory: control thread, also
// while the engine uses the port.
#ifndef RDMAPLANE_DATAPLANE_PORT_ETH_PORT_H_
#define RDMAPLANE_DATAPLANE_PORT_ETH_PORT_H_

#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "dataplane/fault/fault_model.h"
#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/burst_guard.h"
#include "dataplane/rc/interfaces.h"
#include "dataplane/wire/roce.h"

namespace rdmaplane::port {

struct PortConfig {
  uint16_t port_id = 0;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  // Frames per receive burst, and frames queued before a transmit burst
  // is forced (1..EthPort::kMaxBurst).
  uint16_t burst = 32;
  uint32_t mbufs = 8191;
  // At least: Open raises it where the device receives more than a frame
  // into each buffer (af_packet a whole ring slot, af_xdp a frame behind
  // XDP's headroom).
  uint16_t mbuf_data_room = RTE_MBUF_DEFAULT_BUF_SIZE;
  bool promiscuous = false;
  // Ask for a receive interrupt (an fd to sleep on) where the PMD has one
  // (memif, tap, most NICs); without it an idle engine naps briefly instead.
  bool rx_interrupts = true;
  // Largest frame the engine will send; the port's MTU is raised to fit
  // where the device allows, else Open fails with the limit it found.
  uint32_t max_frame = 0;
  // Zero-copy transmit: payloads of at least this many bytes are sent from
  // the memory they lie in where the device and the memory allow it; 0
  // turns zero copy off. Smaller ones are cheaper to copy: a frame in place
  // costs two more mbufs and two atomic operations, which at 1 KiB of
  // payload outweigh the copy (eth_port_benchmark, BM_SendOnly).
  uint32_t zero_copy_min_payload = 2048;
  // Buffers for payload pieces and frame trailers; 0: twice `mbufs`.
  uint32_t zero_copy_mbufs = 0;
  // Register and DMA-map memory for zero copy even where the device reads
  // frames with the CPU (tests use it to exercise the path NICs take).
  bool map_external_memory = false;
  // The device may unmap the memory its bursts work on from another thread
  // (memif does when its peer leaves; see burst_guard.h). A burst cut short
  // by that fault then loses nothing: the port holds a reference on every
  // frame it hands to a transmit burst, so that it knows which frames the
  // device had finished with, and it takes back the frames a receive burst
  // had completed. Always on for memif in its copy mode; tests set it to
  // exercise the path on other devices.
  bool bursts_may_fault = false;
};

// The port id of a device the EAL probed, by name: a vdev name ("net_memif0",
// the part of its --vdev argument before the first comma) or a PCI address.
absl::StatusOr<uint16_t> FindPort(const std::string& device);

// The MTU of kernel interface `name` in this network namespace, or 0 when
// there is none or it cannot be read.
uint32_t InterfaceMtu(const std::string& name);

// memif's buffer size (its bsize devarg, 2048 unless set) that holds a
// whole frame of `frame` bytes: the next power of two, at least 2048.
// DPDK 22.11's memif does not carry frames chained over several buffers
// reliably under load, so a memif client asks for buffers this large.
uint32_t MemifBufferBytes(uint32_t frame);

// The data room of packet buffers that hold `bytes` behind their headroom:
// at least DPDK's default.
uint32_t PacketBufferRoom(uint32_t bytes);

struct PortCounters {
  rc::StatCounter rx_frames;
  rc::StatCounter tx_frames;
  rc::StatCounter tx_dropped;       // no room even after waiting
  rc::StatCounter tx_backpressure;  // turns the device took less than offered
  rc::StatCounter rx_segmented;     // multi-segment frames, copied to linearize
  rc::StatCounter tx_no_mbuf;
  rc::StatCounter fault_dropped;  // lost on purpose (fault injection)
  rc::StatCounter fault_duplicated;
  rc::StatCounter fault_delayed;
  rc::StatCounter link_down;     // times the link was seen going down
  // A memif client's tries to connect again to its server (see
  // EthPort::Reconnect), and those that found it.
  rc::StatCounter reconnect_tries;
  rc::StatCounter reconnects;
  rc::StatCounter burst_faults;  // bursts cut short by a departed memif peer
  rc::StatCounter tx_looped;     // frames to this port's own MAC, looped back
  rc::StatCounter rx_looped;     // ... received
  rc::StatCounter loop_dropped;  // ... dropped: the loop queue was full
  rc::StatCounter tx_zero_copy;  // frames whose payload went out in place
  // Frames offered in place that were copied after all (no buffer free).
  rc::StatCounter tx_zero_copy_fallback;
  // Of bursts cut short: frames received or queued that were lost with the
  // departed peer (the device had not taken them, or no longer could).
  rc::StatCounter burst_fault_frames;
};

class EthPort : public rc::FrameSink {
 public:
  static constexpr uint16_t kMaxBurst = 256;

  static absl::StatusOr<std::unique_ptr<EthPort>> Open(const PortConfig& c);
  ~EthPort() override;
  EthPort(const EthPort&) = delete;
  EthPort& operator=(const EthPort&) = delete;

  // Receives up to one burst from the device; calls
  // fn(std::span<const uint8_t>) per frame. Frames this port sent to its own
  // MAC (loopback: queue pairs of this daemon connected to each other) come
  // first, up to one burst, link up or not; from the device, nothing while
  // the link is down (see burst_guard.h).
  template <typename Fn>
  uint16_t Receive(Fn&& fn) {
    // A member, not a local: a local would have to survive the guarded
    // burst's setjmp below.
    looped_now_ = loop_head_ != loop_tail_ ? ReceiveLooped(fn) : 0;
    if (!LinkUsable()) return looped_now_;
    rte_mbuf* burst[kMaxBurst];
    // A burst that faults has filled some entries: empty ones tell which.
    if (recovers_bursts_) std::fill_n(burst, config_.burst, nullptr);
    uint16_t n = 0;
    RDP_GUARDED_BURST(
        n = rte_eth_rx_burst(config_.port_id, 0, burst, config_.burst), {
          n = 0;
          OnReceiveFault(burst);
        });
    for (uint16_t i = 0; i < n; ++i) {
      rte_mbuf* m = burst[i];
      if (m->nb_segs == 1) {
        fn(std::span<const uint8_t>(rte_pktmbuf_mtod(m, const uint8_t*),
                                    m->data_len));
      } else {
        fn(Linearize(m));
      }
      rte_pktmbuf_free(m);
    }
    counters_.rx_frames += n;
    return static_cast<uint16_t>(n + looped_now_);
  }

  // rc::FrameSink: the frame is built in a fresh mbuf.
  std::span<uint8_t> Reserve(size_t max_len) override;
  void Commit(size_t len) override;
  uint32_t min_gather_payload() const override { return gather_from_; }
  bool CanGather(std::span<const rc::PayloadPiece> payload) const override;
  void CommitGather(std::span<uint8_t> frame, size_t header_len,
                    std::span<const rc::PayloadPiece> payload,
                    std::span<const uint8_t> trailer) override;

  // Whether frames may carry payload in place (the device takes
  // multi-segment frames and zero copy was not turned off).
  bool zero_copy() const { return gather_from_ != 0; }
  // Makes [addr, addr + len) eligible for zero-copy transmit: where the
  // device reaches memory by DMA, registers it with DPDK and maps it for
  // the device (rte_extmem_register, rte_dev_dma_map), `page_size` being
  // the size of the pages behind it. Returns false when the memory can only
  // be copied (zero copy off, or the device cannot reach it: physical
  // addresses as IOVAs, a failed mapping); that is not an error.
  bool RegisterExternalMemory(void* addr, size_t len, size_t page_size);
  // Undoes RegisterExternalMemory, once no frame references the memory any
  // more (see rc::MemoryOwner). Memory still registered when the port
  // closes is unregistered then.
  void UnregisterExternalMemory(void* addr);
  // Hands queued frames (and delayed ones now due) to the device; call once
  // per engine loop turn.
  void Flush();

  // Whether the link is up now, read from the device. Read-only: callable
  // from any thread (the control thread answers device queries with it).
  bool LinkUp() const;

  // Sends a prebuilt frame (ARP, connection management): one copy.
  bool Send(std::span<const uint8_t> frame);

  // False while the link is down (the peer left); checked every few dozen
  // calls while up, so that bursts stop soon after the peer goes.
  bool LinkUsable() {
    if (!link_down_ && --link_check_ != 0) return true;
    link_check_ = kLinkCheckEvery;
    return CheckLink();
  }

  // Receive interrupt: an fd that becomes readable when a frame arrives
  // while armed, or -1 when the PMD has none. Arm before sleeping, Disarm
  // after. The engine drains the fd when rx_interrupt_drains(); else it is
  // readable for as long as frames wait (af_packet's socket, whose ring
  // receives them) and must not be read.
  int rx_interrupt_fd() const { return rx_intr_fd_; }
  bool rx_interrupt_drains() const { return rx_intr_is_dpdk_; }
  void ArmRxInterrupt();
  void DisarmRxInterrupt();
  // Takes (and so clears) a pending error of the receive interrupt's
  // socket when it is one (af_packet); the engine's thread.
  void ClearRxInterruptError();

  // Fault injection on transmit (this kernel has no netem): loss,
  // duplication, reordering and delay from a seeded model. Control thread,
  // before the engine uses the port.
  void SetFaults(const fault::FaultSpec& spec);
  // Frames held back by the delay model.
  uint32_t delayed() const { return delayed_count_; }
  // Frames queued for the device, and looped frames not yet received.
  uint32_t tx_pending() const { return tx_count_ + (loop_tail_ - loop_head_); }

  const wire::MacAddr& mac() const { return mac_; }
  const PortCounters& counters() const { return counters_; }
  // Frames that reached the port but were lost before the engine received
  // them, since Open: the device's missed count (imissed) and, for
  // af_packet, what the kernel dropped because the socket's receive ring
  // was full. Any thread.
  uint64_t rx_dropped() const;
  // Buffers of the port's pools in use (frames queued, delayed, in the
  // device or held by a receiver). Any thread; approximate while the engine
  // runs (DPDK's per-lcore caches), exact once it is idle.
  uint32_t mbufs_in_use() const;
  uint16_t id() const { return config_.port_id; }
  uint16_t burst() const { return config_.burst; }
  uint32_t max_frame() const { return max_frame_; }

  // Reads the link state now; false while down (and then a memif client
  // may try to connect again: Reconnect). The thread that owns the port.
  bool CheckLink();

 private:
  // A memif client whose server was not there yet, refused it while
  // starting, or went away stays disconnected in DPDK 22.11: while its link
  // is down, the port stops and starts the device (which connects again),
  // kReconnectNs after the link went down (kPeerLeftNs after a link that
  // was up) and then less and less often (up to kMaxReconnectNs), on the
  // engine thread that owns it. It looks at its server's socket every
  // kServerLookNs: while none listens it does not start at all, and once
  // one listens again it connects at once.
  void Reconnect();
  // Frees the frames queued for the device (the link is down).
  void DropQueued();
  // A guarded burst faulted: the peer's memory went away under it. The
  // port counts it and treats the link as down until it comes back.
  void OnBurstFault();
  // After a receive burst faulted: frees the frames it had completed in
  // `burst` (when recovers_bursts_; else they are lost).
  void OnReceiveFault(rte_mbuf** burst);
  // After a transmit burst faulted: frees every queued frame exactly once,
  // whether the device had finished with it (it dropped its reference) or
  // not (when recovers_bursts_; else they are lost rather than risking a
  // double free).
  void OnTransmitFault();
  explicit EthPort(const PortConfig& config) : config_(config) {}
  // Zero-copy setup at Open, given what the device offers.
  void SetUpZeroCopy(const rte_eth_dev_info& info);
  std::span<const uint8_t> Linearize(const rte_mbuf* m);
  // A committed frame: through the fault model, to the transmit burst.
  void Transmit(rte_mbuf* m);
  void Queue(rte_mbuf* m);
  void Delay(rte_mbuf* m, uint64_t delay_ns, bool reordered);
  void ReleaseDue();

  struct Delayed {
    uint64_t due_ns;
    uint64_t seq;
    rte_mbuf* mbuf;
  };
  static constexpr uint32_t kMaxDelayed = 4096;

  // Receive's looped frames, up to one burst.
  template <typename Fn>
  uint16_t ReceiveLooped(Fn&& fn) {
    uint16_t looped = 0;
    while (loop_head_ != loop_tail_ && looped < config_.burst) {
      rte_mbuf* m = loop_[loop_head_++ % kLoopFrames];
      fn(m->nb_segs == 1
             ? std::span<const uint8_t>(rte_pktmbuf_mtod(m, const uint8_t*),
                                        m->data_len)
             : Linearize(m));
      rte_pktmbuf_free(m);
      ++looped;
    }
    counters_.rx_looped += looped;
    return looped;
  }

  // Frames to our own MAC, taken from the transmit path and handed to the
  // next Receive (free-running indices).
  static constexpr uint32_t kLoopFrames = 2 * kMaxBurst;
  rte_mbuf* loop_[kLoopFrames] = {};
  uint32_t loop_head_ = 0;
  uint32_t loop_tail_ = 0;
  bool loops_ = false;  // the port has a MAC of its own (not 0)
  uint16_t looped_now_ = 0;  // looped frames this Receive delivered

  PortConfig config_;
  rte_mempool* pool_ = nullptr;
  wire::MacAddr mac_;
  uint32_t max_frame_ = 0;
  int rx_intr_fd_ = -1;
  bool rx_intr_is_dpdk_ = false;  // else af_packet's socket (never read)
  // af_packet: the PMD's packet sockets on the interface, for their drop
  // counts (the kernel resets them on each read: summed here).
  std::vector<int> packet_fds_;
  mutable std::mutex drops_mu_;
  mutable uint64_t packet_drops_ = 0;
  static constexpr uint32_t kLinkCheckEvery = 64;
  uint32_t link_check_ = kLinkCheckEvery;
  bool link_down_ = false;
  bool reconnects_ = false;  // a memif client
  std::string memif_server_;  // its server's socket (/proc/net/unix's name)
  // Long enough for a handshake, or a server's shutdown, on a busy machine:
  // DPDK 22.11's memif server does not always survive taking a disconnect
  // and a connect at once, or a connection while it closes (its interrupt
  // thread panics or faults).
  static constexpr uint64_t kReconnectNs = 2'000'000'000;
  static constexpr uint64_t kMaxReconnectNs = 8'000'000'000;
  // After a link that was up went down while the server's socket still
  // listens: the server may be closing.
  static constexpr uint64_t kPeerLeftNs = 5'000'000'000;
  // How often a client whose link is down looks at its server's socket.
  static constexpr uint64_t kServerLookNs = 100'000'000;
  uint64_t next_look_ns_ = 0;
  bool server_absent_ = false;  // seen not listening since the last try
  bool was_up_ = false;         // the link was up before it went down
  uint64_t reconnect_wait_ns_ = kReconnectNs;
  uint64_t next_reconnect_ns_ = 0;
  bool tried_since_up_ = false;  // Reconnect ran since the link was up
  bool seen_down_ = false;  // by CheckLink, since the link was last up
  // PortConfig::bursts_may_fault, or a memif port in copy mode.
  bool recovers_bursts_ = false;
  rte_mbuf* pending_ = nullptr;  // reserved, not yet committed
  rte_mbuf* tx_[kMaxBurst];
  uint16_t tx_count_ = 0;
  std::unique_ptr<uint8_t[]> scratch_;  // for Linearize
  PortCounters counters_;
  // Written by the engine thread that owns the port (Reconnect), read by
  // the control thread too (rx_dropped).
  std::atomic<bool> started_{false};
  std::unique_ptr<fault::FaultModel> faults_;
  std::unique_ptr<Delayed[]> delayed_;  // min-heap on (due_ns, seq)
  uint32_t delayed_count_ = 0;
  uint64_t delayed_seq_ = 0;
  fault::DeliveryOrder order_;

  // Zero copy. `ext_pool_` holds mbufs that carry a payload piece (their
  // private area holds the piece's rte_mbuf_ext_shared_info) or, used as
  // plain mbufs, a frame's trailer.
  rte_mempool* ext_pool_ = nullptr;
  uint32_t gather_from_ = 0;  // 0: zero copy off
  uint16_t max_pieces_ = 0;   // payload segments a frame may have
  bool iova_is_va_ = false;
  bool maps_memory_ = false;  // memory must be DMA-mapped for the device
  // Memory RegisterExternalMemory mapped; control thread only.
  struct Mapped {
    void* addr;
    size_t len;
  };
  std::vector<Mapped> mapped_;
};

}  // namespace rdmaplane::port

#endif  // RDMAPLANE_DATAPLANE_PORT_ETH_PORT_H_
