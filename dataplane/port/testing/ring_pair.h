// Tests: two DPDK ports joined back to back by a pair of rte_rings
// (net_ring), each opened as an EthPort. Needs an initialized EAL and the
// ring PMD linked in (-lrte_net_ring).
#ifndef RDMAPLANE_DATAPLANE_PORT_TESTING_RING_PAIR_H_
#define RDMAPLANE_DATAPLANE_PORT_TESTING_RING_PAIR_H_

#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dataplane/port/eth_port.h"
#include "dataplane/rc/interfaces.h"

namespace rdmaplane::port {

class RingPair {
 public:
  // Ports `a` and `b` from `base` (its port_id is replaced); `name` must
  // be unique among the rings and ports of the process.
  RingPair(const std::string& name, const PortConfig& base) {
    const std::string n_ab = name + "_ab", n_ba = name + "_ba";
    ab_ = rte_ring_create(n_ab.c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ba_ = rte_ring_create(n_ba.c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
    EXPECT_TRUE(ab_ && ba_);
    pa = rte_eth_from_rings((name + "_a").c_str(), &ba_, 1, &ab_, 1, 0);
    pb = rte_eth_from_rings((name + "_b").c_str(), &ab_, 1, &ba_, 1, 0);
    EXPECT_GE(pa, 0);
    EXPECT_GE(pb, 0);
    PortConfig ca = base, cb = base;
    ca.port_id = static_cast<uint16_t>(pa);
    cb.port_id = static_cast<uint16_t>(pb);
    auto oa = EthPort::Open(ca);
    auto ob = EthPort::Open(cb);
    EXPECT_TRUE(oa.ok()) << oa.status();
    EXPECT_TRUE(ob.ok()) << ob.status();
    if (oa.ok()) a = std::move(*oa);
    if (ob.ok()) b = std::move(*ob);
  }
  ~RingPair() {
    a.reset();
    b.reset();
    rte_eth_dev_close(static_cast<uint16_t>(pa));
    rte_eth_dev_close(static_cast<uint16_t>(pb));
    rte_ring_free(ab_);
    rte_ring_free(ba_);
  }
  RingPair(const RingPair&) = delete;
  RingPair& operator=(const RingPair&) = delete;

  // Flushes a until b receives a frame (at most 2 s); returns it, or
  // nothing.
  std::vector<uint8_t> NextFrameFromAToB() {
    std::vector<uint8_t> got;
    const uint64_t end = rc::MonotonicNowNs() + 2'000'000'000;
    while (got.empty() && rc::MonotonicNowNs() < end) {
      a->Flush();
      b->Receive([&got](std::span<const uint8_t> frame) {
        got.assign(frame.begin(), frame.end());
      });
    }
    return got;
  }

  // Moves everything still on its way (delayed, queued, in the rings) to
  // the receiving port, which frees it; `on_frame` sees each frame.
  template <typename Fn>
  void Drain(Fn on_frame, uint64_t timeout_ns = 2'000'000'000) {
    const uint64_t end = rc::MonotonicNowNs() + timeout_ns;
    uint32_t quiet = 0;
    while (quiet < 100 && rc::MonotonicNowNs() < end) {
      a->Flush();
      b->Flush();
      const uint16_t n = a->Receive(on_frame) + b->Receive(on_frame);
      const bool idle = n == 0 && a->delayed() == 0 && b->delayed() == 0 &&
                        a->tx_pending() == 0 && b->tx_pending() == 0;
      quiet = idle ? quiet + 1 : 0;
    }
  }

  std::unique_ptr<EthPort> a;
  std::unique_ptr<EthPort> b;
  int pa = -1;  // their DPDK port ids
  int pb = -1;

 private:
  rte_ring* ab_ = nullptr;
  rte_ring* ba_ = nullptr;
};

}  // namespace rdmaplane::port

#endif  // RDMAPLANE_DATAPLANE_PORT_TESTING_RING_PAIR_H_
