// RC traffic between two DPDK ports in one process, joined back to back by
// rte_rings (the net_ring PMD): the real ethdev burst API, mbufs and mempools,
// with no NIC and no root.
#include "dataplane/port/eth_port.h"

#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_ring.h>
#include <time.h>

#include <cstring>
#include <string>
#include <vector>

#include "dataplane/port/dpdk_env.h"
#include "dataplane/rc/qp.h"

namespace rdmaplane::port {
namespace {

class Clock : public rc::Clock {
 public:
  uint64_t NowNs() const override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1'000'000'000ull + ts.tv_nsec;
  }
};

class Memory : public rc::RemoteMemory {
 public:
  explicit Memory(std::vector<uint8_t>* region) : region_(region) {}
  rc::ResolvedMemory Resolve(wire::Qpn, wire::Rkey rkey, uint64_t va,
                             uint32_t len, rc::RemoteAccess) override {
    if (rkey != wire::Rkey(7) || va + len > region_->size()) {
      return {rc::AccessCheck::kOutOfRange, nullptr};
    }
    return {rc::AccessCheck::kOk, region_->data() + va};
  }
  void Release(wire::Rkey) override {}

 private:
  std::vector<uint8_t>* region_;
};

class Sink : public rc::CompletionSink {
 public:
  void Complete(const rc::Completion& c) override { done.push_back(c); }
  std::vector<rc::Completion> done;
};

class EthPortTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    EalOptions o;
    o.memory_mb = 256;
    ASSERT_TRUE(InitDpdk(o).ok());
  }
  static void TearDownTestSuite() { ShutdownDpdk(); }
};

TEST(DpdkEnvTest, ArgumentsNeverTouchPciUnlessAsked) {
  EalOptions o;
  auto args = EalArguments(o);
  EXPECT_NE(std::find(args.begin(), args.end(), "--no-pci"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "--no-huge"), args.end());
  o.allow_pci = true;
  o.hugepages = true;
  args = EalArguments(o);
  EXPECT_EQ(std::find(args.begin(), args.end(), "--no-pci"), args.end());
  EXPECT_EQ(std::find(args.begin(), args.end(), "--no-huge"), args.end());
  // Hugepage files never outlive the process.
  EXPECT_NE(std::find(args.begin(), args.end(), "--huge-unlink"), args.end());
}

void Transfer(const fault::FaultSpec& faults, const std::string& name) {
  const std::string n_ab = name + "_ab", n_ba = name + "_ba";
  rte_ring* ab =
      rte_ring_create(n_ab.c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* ba =
      rte_ring_create(n_ba.c_str(), 1024, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_TRUE(ab && ba);
  const int pa = rte_eth_from_rings((name + "_a").c_str(), &ba, 1, &ab, 1, 0);
  const int pb = rte_eth_from_rings((name + "_b").c_str(), &ab, 1, &ba, 1, 0);
  ASSERT_GE(pa, 0);
  ASSERT_GE(pb, 0);
  PortConfig ca, cb;
  ca.port_id = static_cast<uint16_t>(pa);
  cb.port_id = static_cast<uint16_t>(pb);
  ca.mbufs = cb.mbufs = 4095;
  auto a = EthPort::Open(ca);
  auto b = EthPort::Open(cb);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GE((*a)->max_frame(), 1500u);
  (*a)->SetFaults(faults);
  fault::FaultSpec reverse = faults;
  reverse.seed += 1;
  (*b)->SetFaults(reverse);

  Clock clock;
  std::vector<uint8_t> region_a(1 << 20), region_b(1 << 20);
  Memory mem_a(&region_a), mem_b(&region_b);
  Sink sink_a, sink_b;
  rc::QpConfig qa;
  qa.pmtu = 1024;
  qa.local_qpn = wire::Qpn(1);
  qa.remote_qpn = wire::Qpn(2);
  qa.send_psn = wire::Psn(100);
  qa.retransmit_timeout_ns = 2'000'000;
  qa.retry_count = 30;
  qa.max_inflight_packets = 64;
  qa.recv_psn = wire::Psn(200);
  qa.path.src_ip = 0x0A000001;
  qa.path.dst_ip = 0x0A000002;
  qa.path.src_mac = (*a)->mac();
  qa.path.dst_mac = (*b)->mac();
  rc::QpConfig qb = qa;
  std::swap(qb.local_qpn, qb.remote_qpn);
  std::swap(qb.send_psn, qb.recv_psn);
  std::swap(qb.path.src_ip, qb.path.dst_ip);
  std::swap(qb.path.src_mac, qb.path.dst_mac);
  rc::RcQp qp_a(qa, {&clock, a->get(), &mem_a, &sink_a});
  rc::RcQp qp_b(qb, {&clock, b->get(), &mem_b, &sink_b});

  std::vector<uint8_t> src(1 << 20), back(1 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13);
  rc::WorkRequest w;
  w.wr_id = 1;
  w.opcode = rc::WrOpcode::kWrite;
  w.num_sge = 1;
  w.sge[0] = {src.data(), static_cast<uint32_t>(src.size())};
  w.rkey = wire::Rkey(7);
  ASSERT_EQ(qp_a.Post(w), rc::PostResult::kOk);
  rc::WorkRequest r = w;
  r.wr_id = 2;
  r.opcode = rc::WrOpcode::kRead;
  r.sge[0] = {back.data(), static_cast<uint32_t>(back.size())};
  ASSERT_EQ(qp_a.Post(r), rc::PostResult::kOk);

  wire::ParseCounters parse;
  auto deliver = [&parse](rc::RcQp& qp) {
    return [&parse, &qp](std::span<const uint8_t> frame) {
      wire::ParsedPacket pkt;
      if (wire::ParseFrame(frame, &pkt, &parse) == wire::ParseError::kOk) {
        qp.HandleFrame(pkt);
      }
    };
  };
  const uint64_t end = clock.NowNs() + 10'000'000'000ull;
  while (sink_a.done.size() < 2 && clock.NowNs() < end) {
    (*a)->Receive(deliver(qp_a));
    (*b)->Receive(deliver(qp_b));
    qp_a.Poll(32);
    qp_b.Poll(32);
    (*a)->Flush();
    (*b)->Flush();
  }
  ASSERT_EQ(sink_a.done.size(), 2u);
  EXPECT_EQ(sink_a.done[0].status, rc::WcStatus::kSuccess);
  EXPECT_EQ(sink_a.done[1].status, rc::WcStatus::kSuccess);
  EXPECT_EQ(region_b, src);
  EXPECT_EQ(back, src);
  EXPECT_EQ(parse[wire::ParseError::kOk],
            (*a)->counters().rx_frames + (*b)->counters().rx_frames);
  EXPECT_GT((*a)->counters().tx_frames, 1000u);
  if (faults.loss > 0) {
    EXPECT_GT((*a)->counters().fault_dropped, 0u);
    EXPECT_GT(qp_a.stats().retransmitted_packets, 0u);
  }
  if (faults.duplicate > 0) {
    EXPECT_GT((*a)->counters().fault_duplicated, 0u);
  }
  a->reset();
  b->reset();
  rte_eth_dev_close(static_cast<uint16_t>(pa));
  rte_eth_dev_close(static_cast<uint16_t>(pb));
  rte_ring_free(ab);
  rte_ring_free(ba);
}

TEST_F(EthPortTest, RcWriteAndReadAcrossTwoPorts) {
  Transfer(fault::FaultSpec{}, "clean");
}

TEST_F(EthPortTest, LossDuplicationReorderingAndDelayAreRecovered) {
  fault::FaultSpec f;
  ASSERT_EQ(fault::ParseFaultSpec(
                "loss=0.05,dup=0.02,reorder=0.02,delay_us=20,jitter_us=10,"
                "reorder_us=100,seed=11",
                &f),
            "");
  Transfer(f, "faulty");
}

}  // namespace
}  // namespace rdmaplane::port
