// RC traffic between two DPDK ports in one process, joined back to back by
// rte_rings (the net_ring PMD): the real ethdev burst API, mbufs and mempools,
// with no NIC and no root.
#include "dataplane/port/eth_port.h"

#include <gtest/gtest.h>
#include <rte_eth_ring.h>
#include <rte_memory.h>
#include <rte_ring.h>
#include <sys/mman.h>
#include <time.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/port/dpdk_env.h"
#include "dataplane/port/testing/ring_pair.h"
#include "dataplane/rc/memory_owner.h"
#include "dataplane/rc/qp.h"
#include "dataplane/wire/icrc.h"

namespace rdmaplane::port {
namespace {

using Clock = rc::SystemClock;

class Memory : public rc::RemoteMemory {
 public:
  explicit Memory(std::vector<uint8_t>* region,
                  rc::MemoryOwner* owner = nullptr)
      : region_(region), owner_(owner) {}
  rc::ResolvedMemory Resolve(wire::Qpn, wire::Rkey rkey, uint64_t va,
                             uint32_t len, rc::RemoteAccess) override {
    if (rkey != wire::Rkey(7) || va + len > region_->size()) {
      return {rc::AccessCheck::kOutOfRange, nullptr};
    }
    return {rc::AccessCheck::kOk, region_->data() + va, owner_};
  }
  void Release(wire::Rkey) override {}

 private:
  std::vector<uint8_t>* region_;
  rc::MemoryOwner* owner_;
};

// `base` with zero copy on or off: on, every payload of 256 bytes or more
// goes in place (the path MTU here is 1024).
PortConfig ZeroCopy(PortConfig base, bool on) {
  base.zero_copy_min_payload = on ? 256 : 0;
  return base;
}

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
  // The EAL refuses --huge-unlink with --single-file-segments (memif's
  // zero-copy mode): ShutdownDpdk removes those files instead.
  o.args = {"--single-file-segments"};
  args = EalArguments(o);
  EXPECT_EQ(std::find(args.begin(), args.end(), "--huge-unlink"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "--single-file-segments"),
            args.end());
  // memif's zero-copy mode asks for them itself.
  o.args = {"--vdev=net_memif0,role=client,zero-copy=yes"};
  args = EalArguments(o);
  EXPECT_EQ(std::find(args.begin(), args.end(), "--huge-unlink"), args.end());
  EXPECT_NE(std::find(args.begin(), args.end(), "--single-file-segments"),
            args.end());
}

// 1 MiB written from A into B's region, then read back, over two ports. With
// `zero_copy`, WRITE payload leaves from `src` and READ responses from B's
// region in place; every frame referencing them is freed by the end.
// `burst` is the ports' PortConfig::burst: no Receive returns more frames.
void Transfer(const fault::FaultSpec& faults, const std::string& name,
              bool zero_copy = false, uint16_t burst = 32) {
  // Frames may point into these until the ports are gone: they go last.
  std::vector<uint8_t> src(1 << 20), back(1 << 20);
  std::vector<uint8_t> region_a(1 << 20), region_b(1 << 20);
  std::unique_ptr<rc::MemoryOwner> src_owner, region_b_owner;
  PortConfig base;
  base.mbufs = 4095;
  base.burst = burst;
  RingPair ports(name, ZeroCopy(base, zero_copy));
  ASSERT_TRUE(ports.a && ports.b);
  std::unique_ptr<EthPort>* a = &ports.a;
  std::unique_ptr<EthPort>* b = &ports.b;
  EXPECT_GE((*a)->max_frame(), 1500u);
  EXPECT_EQ((*a)->zero_copy(), zero_copy);
  (*a)->SetFaults(faults);
  fault::FaultSpec reverse = faults;
  reverse.seed += 1;
  (*b)->SetFaults(reverse);

  Clock clock;
  // What the daemon does for each arena it maps.
  src_owner = std::make_unique<rc::MemoryOwner>(
      (*a)->RegisterExternalMemory(src.data(), src.size(), 4096));
  region_b_owner = std::make_unique<rc::MemoryOwner>(
      (*b)->RegisterExternalMemory(region_b.data(), region_b.size(), 4096));
  EXPECT_EQ(src_owner->zero_copy(), zero_copy);
  Memory mem_a(&region_a), mem_b(&region_b, region_b_owner.get());
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

  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13);
  rc::WorkRequest w;
  w.wr_id = 1;
  w.opcode = rc::WrOpcode::kWrite;
  // Two SGEs, split off a packet boundary: some packets have two pieces.
  w.num_sge = 2;
  w.sge[0] = {src.data(), 5000, 0, src_owner.get()};
  w.sge[1] = {src.data() + 5000, static_cast<uint32_t>(src.size()) - 5000, 0,
              src_owner.get()};
  w.rkey = wire::Rkey(7);
  ASSERT_EQ(qp_a.Post(w), rc::PostResult::kOk);
  rc::WorkRequest r = w;
  r.wr_id = 2;
  r.opcode = rc::WrOpcode::kRead;
  r.num_sge = 1;
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
  uint16_t largest_burst = 0;
  while (sink_a.done.size() < 2 && clock.NowNs() < end) {
    largest_burst = std::max({largest_burst, (*a)->Receive(deliver(qp_a)),
                              (*b)->Receive(deliver(qp_b))});
    qp_a.Poll(32);
    qp_b.Poll(32);
    (*a)->Flush();
    (*b)->Flush();
  }
  ASSERT_EQ(sink_a.done.size(), 2u);
  EXPECT_LE(largest_burst, burst);
  EXPECT_GT(largest_burst, 0);
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
  if (zero_copy) {
    // WRITE packets from A and READ responses from B went out in place.
    EXPECT_GT((*a)->counters().tx_zero_copy, 1000u);
    EXPECT_GT((*b)->counters().tx_zero_copy, 1000u);
    EXPECT_GT((*b)->counters().rx_segmented, 1000u);
  } else {
    EXPECT_EQ((*a)->counters().tx_zero_copy + (*b)->counters().tx_zero_copy,
              0u);
  }
  // Stale copies may still be on their way; once they arrived, nothing
  // references the memory any more.
  ports.Drain([](std::span<const uint8_t>) {});
  EXPECT_EQ(src_owner->references(), 0u);
  EXPECT_EQ(region_b_owner->references(), 0u);
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

TEST_F(EthPortTest, BurstsOfOneFrameAndOfTheMostAllowed) {
  Transfer(fault::FaultSpec{}, "burst1", /*zero_copy=*/false, /*burst=*/1);
  Transfer(fault::FaultSpec{}, "burst256", /*zero_copy=*/false,
           EthPort::kMaxBurst);
}

TEST_F(EthPortTest, BurstOutOfRangeIsRefused) {
  rte_ring* r =
      rte_ring_create("burst_bad", 64, 0, RING_F_SP_ENQ | RING_F_SC_DEQ);
  ASSERT_NE(r, nullptr);
  const int id = rte_eth_from_rings("burst_bad_port", &r, 1, &r, 1, 0);
  ASSERT_GE(id, 0);
  for (const uint16_t burst : {uint16_t{0}, uint16_t{EthPort::kMaxBurst + 1}}) {
    PortConfig c;
    c.port_id = static_cast<uint16_t>(id);
    c.burst = burst;
    c.max_frame = 1100;
    auto port = EthPort::Open(c);
    ASSERT_FALSE(port.ok()) << burst;
    EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(port.status().message().find("burst"), std::string::npos)
        << port.status();
  }
  rte_eth_dev_close(static_cast<uint16_t>(id));
  rte_ring_free(r);
}

TEST_F(EthPortTest, ZeroCopyWriteAndRead) {
  Transfer(fault::FaultSpec{}, "zc_clean", /*zero_copy=*/true);
}

TEST_F(EthPortTest, ZeroCopyRecoversFromLossDuplicationReorderingAndDelay) {
  fault::FaultSpec f;
  ASSERT_EQ(fault::ParseFaultSpec(
                "loss=0.05,dup=0.05,reorder=0.05,delay_us=20,jitter_us=10,"
                "reorder_us=100,seed=17",
                &f),
            "");
  Transfer(f, "zc_faulty", /*zero_copy=*/true);
}

// A frame built by hand through the gather path: headers of a WRITE ONLY,
// the payload in two pieces of `memory`, the trailer computed over both.
void SendInPlace(EthPort& port, const uint8_t* memory, uint32_t len,
                 rc::MemoryOwner* owner, std::vector<uint8_t>* expected) {
  wire::PacketHeaders h;
  h.path.src_ip = 0x0A000001;
  h.path.dst_ip = 0x0A000002;
  h.bth.opcode = wire::Opcode::kWriteOnly;
  h.bth.dest_qp = wire::Qpn(5);
  h.reth.dma_length = len;
  const size_t frame_len = wire::FrameLength(h.bth.opcode, len);
  expected->resize(frame_len);
  ASSERT_EQ(wire::EncodeFrame(h, {memory, len}, *expected), frame_len);
  std::span<uint8_t> buf = port.Reserve(frame_len);
  ASSERT_FALSE(buf.empty());
  const size_t header_len = wire::EncodeHeaders(h, len, buf);
  const rc::PayloadPiece pieces[] = {{memory, len / 2, owner},
                                     {memory + len / 2, len - len / 2, owner}};
  ASSERT_TRUE(port.CanGather(pieces));
  uint32_t icrc = wire::HeadersIcrc(buf.first(header_len));
  for (const auto& p : pieces) icrc = wire::ExtendIcrc(icrc, {p.data, p.len});
  uint8_t trailer[wire::kMaxTrailerLen];
  const size_t trailer_len =
      wire::EncodeTrailer(buf.first(header_len), icrc, trailer);
  port.CommitGather(buf, header_len, pieces, {trailer, trailer_len});
}

// Frames the fault model holds back, and frames sitting in the rings, keep
// their memory referenced until the receiver frees them.
TEST_F(EthPortTest, FramesInFlightHoldTheirMemory) {
  std::vector<uint8_t> memory(8192);
  std::unique_ptr<rc::MemoryOwner> owner_storage;
  PortConfig base;
  RingPair ports("held", ZeroCopy(base, /*zero_copy=*/true));
  ASSERT_TRUE(ports.a && ports.b);
  fault::FaultSpec f;
  ASSERT_EQ(fault::ParseFaultSpec("delay_us=200000,seed=3", &f), "");
  ports.a->SetFaults(f);
  for (size_t i = 0; i < memory.size(); ++i)
    memory[i] = static_cast<uint8_t>(i * 7);
  owner_storage = std::make_unique<rc::MemoryOwner>(
      ports.a->RegisterExternalMemory(memory.data(), memory.size(), 4096));
  rc::MemoryOwner& owner = *owner_storage;
  ASSERT_TRUE(owner.zero_copy());
  std::vector<uint8_t> expected[3];
  SendInPlace(*ports.a, memory.data(), 1000, &owner, &expected[0]);
  SendInPlace(*ports.a, memory.data() + 1000, 1901, &owner, &expected[1]);
  SendInPlace(*ports.a, memory.data() + 2901, 257, &owner, &expected[2]);
  EXPECT_EQ(ports.a->counters().tx_zero_copy, 3u);
  EXPECT_EQ(ports.a->delayed(), 3u);
  EXPECT_EQ(owner.references(), 6u);  // two pieces each
  ports.a->Flush();                   // not due yet
  EXPECT_EQ(owner.references(), 6u);

  const Clock clock;
  const uint64_t due = clock.NowNs() + 250'000'000;
  while (ports.a->delayed() > 0 && clock.NowNs() < due) ports.a->Flush();
  ASSERT_EQ(ports.a->delayed(), 0u);
  // In the ring now: still referenced.
  EXPECT_EQ(owner.references(), 6u);
  std::vector<std::vector<uint8_t>> got;
  ports.b->Receive([&got](std::span<const uint8_t> frame) {
    got.emplace_back(frame.begin(), frame.end());
  });
  EXPECT_EQ(owner.references(), 0u);
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], expected[i]) << i;
}

// Frames still queued or delayed when a port closes are freed with it.
TEST_F(EthPortTest, ClosingThePortReleasesHeldFrames) {
  std::vector<uint8_t> memory(4096, 0x5A);
  std::unique_ptr<rc::MemoryOwner> owner_storage;
  PortConfig base;
  RingPair ports("closing", ZeroCopy(base, /*zero_copy=*/true));
  ASSERT_TRUE(ports.a && ports.b);
  fault::FaultSpec f;
  ASSERT_EQ(fault::ParseFaultSpec("delay_us=1000000,seed=3", &f), "");
  ports.a->SetFaults(f);
  owner_storage = std::make_unique<rc::MemoryOwner>(
      ports.a->RegisterExternalMemory(memory.data(), memory.size(), 4096));
  rc::MemoryOwner& owner = *owner_storage;
  std::vector<uint8_t> expected;
  SendInPlace(*ports.a, memory.data(), 1900, &owner, &expected);
  EXPECT_EQ(owner.references(), 2u);
  ports.a.reset();
  EXPECT_EQ(owner.references(), 0u);
}

// Memory for a device that reads by DMA is registered with DPDK and mapped
// for it; the ring device does not need that, so the test asks for it.
TEST_F(EthPortTest, ExternalMemoryIsRegisteredAndMappedWhereNeeded) {
  const size_t len = 1 << 21;
  void* mem = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  // Unmapped only after the ports are gone, whatever happens.
  std::unique_ptr<void, std::function<void(void*)>> unmap(
      mem, [len](void* p) { munmap(p, len); });
  PortConfig base;
  base.map_external_memory = true;
  RingPair ports("mapped", ZeroCopy(base, /*zero_copy=*/true));
  ASSERT_TRUE(ports.a && ports.b);
  auto* bytes = static_cast<uint8_t*>(mem);
  EXPECT_FALSE(ports.a->RegisterExternalMemory(bytes + 8, 4096, 4096));
  ASSERT_TRUE(ports.a->RegisterExternalMemory(mem, len - 100, 4096));
  EXPECT_NE(rte_mem_virt2memseg_list(bytes + len - 1), nullptr);
  // Frames from registered memory go out and arrive intact.
  for (size_t i = 0; i < 8192; ++i) bytes[i] = static_cast<uint8_t>(i);
  rc::MemoryOwner owner(true);
  std::vector<uint8_t> expected;
  SendInPlace(*ports.a, bytes, 1900, &owner, &expected);
  ports.a->Flush();
  std::vector<uint8_t> got;
  ports.b->Receive([&got](std::span<const uint8_t> frame) {
    got.assign(frame.begin(), frame.end());
  });
  EXPECT_EQ(got, expected);
  EXPECT_EQ(owner.references(), 0u);
  ports.a->UnregisterExternalMemory(mem);
  EXPECT_EQ(rte_mem_virt2memseg_list(mem), nullptr);
  // Registered again and left so: the port unregisters it when it closes.
  ASSERT_TRUE(ports.a->RegisterExternalMemory(mem, len, 4096));
  ports.a.reset();
  EXPECT_EQ(rte_mem_virt2memseg_list(mem), nullptr);
}

TEST_F(EthPortTest, ZeroCopyOffMeansCopyOnly) {
  PortConfig base;
  RingPair ports("off", ZeroCopy(base, /*zero_copy=*/false));
  ASSERT_TRUE(ports.a && ports.b);
  EXPECT_FALSE(ports.a->zero_copy());
  EXPECT_EQ(ports.a->min_gather_payload(), 0u);
  std::vector<uint8_t> memory(4096);
  EXPECT_FALSE(
      ports.a->RegisterExternalMemory(memory.data(), memory.size(), 4096));
}

// A burst that faults because the device's memory went away under it, the
// way DPDK's memif does when its peer leaves (see burst_guard.h), staged
// with the ethdev callbacks: armed, a callback lets the "device" finish with
// the first `finish` frames (a transmit burst frees them, as memif's copy
// mode does) and then touches memory that is gone.
struct StagedFault {
  StagedFault() {
    gone = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(gone, MAP_FAILED);
  }
  ~StagedFault() { munmap(gone, 4096); }
  void Touch() {
    armed = false;
    ++faults;
    *static_cast<volatile uint8_t*>(gone) = 1;
  }
  static uint16_t OnTransmit(uint16_t, uint16_t, rte_mbuf** pkts, uint16_t n,
                             void* arg) {
    auto* f = static_cast<StagedFault*>(arg);
    if (!f->armed) return n;
    for (uint16_t i = 0; i < f->finish && i < n; ++i) rte_pktmbuf_free(pkts[i]);
    f->Touch();
    return n;
  }
  static uint16_t OnReceive(uint16_t, uint16_t, rte_mbuf**, uint16_t n,
                            uint16_t, void* arg) {
    auto* f = static_cast<StagedFault*>(arg);
    if (f->armed) f->Touch();
    return n;
  }

  void* gone = nullptr;
  bool armed = false;
  uint16_t finish = 0;
  int faults = 0;
};

// A transmit burst cut short frees every queued frame exactly once (the
// ones the device had finished with and the ones it had not), so that no
// buffer and no reference on client memory is lost, and the port goes on.
TEST_F(EthPortTest, ATransmitBurstCutShortLosesNoBufferAndNoMemory) {
  PortConfig base;
  base.bursts_may_fault = true;
  RingPair ports("txfault", ZeroCopy(base, /*zero_copy=*/true));
  ASSERT_TRUE(ports.a && ports.b);
  std::vector<uint8_t> memory(8192);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = uint8_t(i * 13);
  rc::MemoryOwner owner(
      ports.a->RegisterExternalMemory(memory.data(), memory.size(), 4096));
  ASSERT_TRUE(owner.zero_copy());
  const uint32_t baseline = ports.a->mbufs_in_use() + ports.b->mbufs_in_use();
  StagedFault fault;
  fault.finish = 2;
  const rte_eth_rxtx_callback* cb = rte_eth_add_tx_callback(
      static_cast<uint16_t>(ports.pa), 0, &StagedFault::OnTransmit, &fault);
  ASSERT_NE(cb, nullptr);
  std::vector<uint8_t> expected;
  for (int i = 0; i < 5; ++i) {
    SendInPlace(*ports.a, memory.data() + 1000 * i, 1000, &owner, &expected);
  }
  EXPECT_EQ(ports.a->tx_pending(), 5u);
  EXPECT_EQ(owner.references(), 10u);  // two pieces each
  fault.armed = true;
  ports.a->Flush();
  EXPECT_EQ(fault.faults, 1);
  EXPECT_EQ(ports.a->counters().burst_faults, 1u);
  EXPECT_EQ(ports.a->counters().tx_frames, 2u);
  EXPECT_EQ(ports.a->counters().burst_fault_frames, 3u);
  EXPECT_EQ(ports.a->tx_pending(), 0u);
  EXPECT_EQ(owner.references(), 0u);
  EXPECT_EQ(ports.a->mbufs_in_use() + ports.b->mbufs_in_use(), baseline);

  // The link is looked at again, and frames flow.
  SendInPlace(*ports.a, memory.data() + 5000, 1900, &owner, &expected);
  EXPECT_EQ(ports.NextFrameFromAToB(), expected);
  EXPECT_EQ(owner.references(), 0u);
  EXPECT_EQ(ports.a->mbufs_in_use() + ports.b->mbufs_in_use(), baseline);
  EXPECT_EQ(rte_eth_remove_tx_callback(static_cast<uint16_t>(ports.pa), 0, cb),
            0);
}

// A receive burst cut short frees the frames it had completed.
TEST_F(EthPortTest, AReceiveBurstCutShortLosesNoBuffer) {
  PortConfig base;
  base.bursts_may_fault = true;
  RingPair ports("rxfault", ZeroCopy(base, false));
  ASSERT_TRUE(ports.a && ports.b);
  const uint32_t baseline = ports.a->mbufs_in_use() + ports.b->mbufs_in_use();
  StagedFault fault;
  const rte_eth_rxtx_callback* cb = rte_eth_add_rx_callback(
      static_cast<uint16_t>(ports.pb), 0, &StagedFault::OnReceive, &fault);
  ASSERT_NE(cb, nullptr);
  const std::vector<uint8_t> frame(200, 0x42);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ports.a->Send(frame));
  ports.a->Flush();
  EXPECT_EQ(ports.a->counters().tx_frames, 4u);
  fault.armed = true;
  int seen = 0;
  ports.b->Receive([&seen](std::span<const uint8_t>) { ++seen; });
  EXPECT_EQ(fault.faults, 1);
  EXPECT_EQ(seen, 0);
  EXPECT_EQ(ports.b->counters().burst_faults, 1u);
  EXPECT_EQ(ports.b->counters().burst_fault_frames, 4u);
  EXPECT_EQ(ports.a->mbufs_in_use() + ports.b->mbufs_in_use(), baseline);

  ASSERT_TRUE(ports.a->Send(frame));
  const Clock clock;
  const uint64_t end = clock.NowNs() + 2'000'000'000;
  while (seen == 0 && clock.NowNs() < end) {
    ports.a->Flush();
    ports.b->Receive([&seen](std::span<const uint8_t>) { ++seen; });
  }
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(ports.a->mbufs_in_use() + ports.b->mbufs_in_use(), baseline);
  EXPECT_EQ(rte_eth_remove_rx_callback(static_cast<uint16_t>(ports.pb), 0, cb),
            0);
}

// While the link is down, frames are dropped as they are flushed rather
// than held for a link that may never come back: no buffer and no client
// memory waits for it.
TEST_F(EthPortTest, FramesForADownLinkAreDroppedNotHeld) {
  PortConfig base;
  RingPair ports("down", ZeroCopy(base, /*zero_copy=*/true));
  ASSERT_TRUE(ports.a && ports.b);
  std::vector<uint8_t> memory(8192, 0x3C);
  rc::MemoryOwner owner(
      ports.a->RegisterExternalMemory(memory.data(), memory.size(), 4096));
  ASSERT_TRUE(owner.zero_copy());
  const uint32_t baseline = ports.a->mbufs_in_use() + ports.b->mbufs_in_use();
  ASSERT_EQ(rte_eth_dev_set_link_down(static_cast<uint16_t>(ports.pa)), 0);
  // The port looks at the link every few dozen bursts.
  for (int i = 0; i < 200; ++i)
    ports.a->Receive([](std::span<const uint8_t>) {});
  EXPECT_EQ(ports.a->counters().link_down, 1u);
  std::vector<uint8_t> expected;
  for (int i = 0; i < 40; ++i) {  // more than a burst
    SendInPlace(*ports.a, memory.data() + 100 * i, 1000, &owner, &expected);
    ports.a->Flush();
  }
  EXPECT_EQ(ports.a->tx_pending(), 0u);
  EXPECT_EQ(ports.a->counters().tx_dropped, 40u);
  EXPECT_EQ(ports.a->counters().tx_frames, 0u);
  EXPECT_EQ(owner.references(), 0u);
  EXPECT_EQ(ports.a->mbufs_in_use() + ports.b->mbufs_in_use(), baseline);

  ASSERT_EQ(rte_eth_dev_set_link_up(static_cast<uint16_t>(ports.pa)), 0);
  SendInPlace(*ports.a, memory.data(), 1900, &owner, &expected);
  EXPECT_EQ(ports.NextFrameFromAToB(), expected);
  EXPECT_EQ(owner.references(), 0u);
}

}  // namespace
}  // namespace rdmaplane::port
