#include "dataplane/port/eth_port.h"

#include <rte_errno.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace rdmaplane::port {
namespace {
constexpr uint32_t kScratchBytes = 16384;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

bool Later(const auto& a, const auto& b) {
  return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq;
}
}  // namespace

absl::StatusOr<uint16_t> FindPort(const std::string& device) {
  const std::string name = device.substr(0, device.find(','));
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "no DPDK port named ", name,
        " (a vdev needs its driver, e.g. net_memif0,..., and a PCI device "
        "must be allowed)"));
  }
  return id;
}

absl::StatusOr<std::unique_ptr<EthPort>> EthPort::Open(const PortConfig& c) {
  if (!rte_eth_dev_is_valid_port(c.port_id)) {
    return absl::NotFoundError(absl::StrCat("no DPDK port ", c.port_id));
  }
  std::unique_ptr<EthPort> port(new EthPort(c));
  const std::string pool_name = absl::StrCat("rdp_pool_", c.port_id);
  port->pool_ = rte_pktmbuf_pool_create(pool_name.c_str(), c.mbufs, 256, 0,
                                        c.mbuf_data_room, rte_socket_id());
  if (port->pool_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot create the mbuf pool: ", rte_strerror(rte_errno)));
  }
  rte_eth_dev_info info;
  if (int r = rte_eth_dev_info_get(c.port_id, &info); r != 0) {
    return absl::UnavailableError(absl::StrCat("dev_info: ", rte_strerror(-r)));
  }
  const uint32_t room = c.mbuf_data_room - RTE_PKTMBUF_HEADROOM;
  if (c.max_frame > room) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frames of ", c.max_frame, " bytes do not fit mbufs of ", room));
  }
  if (c.max_frame > info.max_rx_pktlen) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frames of ", c.max_frame, " bytes exceed the port's limit of ",
        info.max_rx_pktlen, " (choose a smaller path MTU)"));
  }
  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof(conf));
  conf.intr_conf.rxq = c.rx_interrupts ? 1 : 0;
  int r = rte_eth_dev_configure(c.port_id, 1, 1, &conf);
  if (r != 0 && c.rx_interrupts) {
    conf.intr_conf.rxq = 0;  // not supported here: nap instead
    r = rte_eth_dev_configure(c.port_id, 1, 1, &conf);
  }
  if (r != 0) {
    return absl::UnavailableError(absl::StrCat("configure: ", rte_strerror(-r)));
  }
  if (c.max_frame > RTE_ETHER_MAX_LEN) {
    const uint32_t mtu = c.max_frame - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN;
    if (int m = rte_eth_dev_set_mtu(c.port_id, static_cast<uint16_t>(mtu));
        m != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the port refuses an MTU of ", mtu, " for ", c.max_frame,
          "-byte frames: ", rte_strerror(-m), " (choose a smaller path MTU)"));
    }
  }
  uint16_t rxd = c.rx_descriptors, txd = c.tx_descriptors;
  rte_eth_dev_adjust_nb_rx_tx_desc(c.port_id, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(c.port_id);
  if (int r = rte_eth_rx_queue_setup(c.port_id, 0, rxd,
                                     socket < 0 ? 0 : socket, nullptr,
                                     port->pool_);
      r != 0) {
    return absl::UnavailableError(absl::StrCat("rx queue: ", rte_strerror(-r)));
  }
  if (int r = rte_eth_tx_queue_setup(c.port_id, 0, txd,
                                     socket < 0 ? 0 : socket, nullptr);
      r != 0) {
    return absl::UnavailableError(absl::StrCat("tx queue: ", rte_strerror(-r)));
  }
  if (int r = rte_eth_dev_start(c.port_id); r != 0) {
    return absl::UnavailableError(absl::StrCat("start: ", rte_strerror(-r)));
  }
  port->started_ = true;
  if (c.promiscuous) rte_eth_promiscuous_enable(c.port_id);
  rte_ether_addr addr;
  rte_eth_macaddr_get(c.port_id, &addr);
  std::memcpy(port->mac_.bytes.data(), addr.addr_bytes, 6);
  port->max_frame_ = std::min<uint32_t>(room, info.max_rx_pktlen);
  port->scratch_.reset(new uint8_t[kScratchBytes]);
  if (conf.intr_conf.rxq != 0) {
    const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(c.port_id, 0);
    if (fd >= 0 && rte_eth_dev_rx_intr_disable(c.port_id, 0) != -ENOTSUP) {
      port->rx_intr_fd_ = fd;
    }
  }
  return port;
}

EthPort::~EthPort() {
  if (pending_ != nullptr) rte_pktmbuf_free(pending_);
  for (uint32_t i = 0; i < delayed_count_; ++i) {
    rte_pktmbuf_free(delayed_[i].mbuf);
  }
  for (uint16_t i = 0; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
  if (started_) {
    rte_eth_dev_stop(config_.port_id);
  }
  if (pool_ != nullptr) rte_mempool_free(pool_);
}

std::span<const uint8_t> EthPort::Linearize(const rte_mbuf* m) {
  ++counters_.rx_segmented;
  const uint32_t len = std::min<uint32_t>(m->pkt_len, kScratchBytes);
  const void* p = rte_pktmbuf_read(m, 0, len, scratch_.get());
  return {static_cast<const uint8_t*>(p), p == nullptr ? 0 : len};
}

std::span<uint8_t> EthPort::Reserve(size_t max_len) {
  if (max_len > max_frame_) return {};
  if (tx_count_ == kBurst) Flush();
  if (tx_count_ == kBurst) return {};  // the device is backed up
  if (pending_ == nullptr) pending_ = rte_pktmbuf_alloc(pool_);
  if (pending_ == nullptr) {
    ++counters_.tx_no_mbuf;
    return {};
  }
  return {rte_pktmbuf_mtod(pending_, uint8_t*), max_len};
}

bool EthPort::Send(std::span<const uint8_t> frame) {
  std::span<uint8_t> buf = Reserve(frame.size());
  if (buf.empty()) return false;
  std::memcpy(buf.data(), frame.data(), frame.size());
  Commit(frame.size());
  return true;
}

void EthPort::ArmRxInterrupt() {
  if (rx_intr_fd_ >= 0) rte_eth_dev_rx_intr_enable(config_.port_id, 0);
}

void EthPort::DisarmRxInterrupt() {
  if (rx_intr_fd_ >= 0) rte_eth_dev_rx_intr_disable(config_.port_id, 0);
}

void EthPort::SetFaults(const fault::FaultSpec& spec) {
  if (!spec.active()) {
    faults_.reset();
    return;
  }
  faults_ = std::make_unique<fault::FaultModel>(spec);
  if (!delayed_) delayed_.reset(new Delayed[kMaxDelayed]);
}

void EthPort::Queue(rte_mbuf* m) {
  if (tx_count_ == kBurst) Flush();
  if (tx_count_ == kBurst) {  // still full: a frame the model delayed
    ++counters_.tx_dropped;
    rte_pktmbuf_free(m);
    return;
  }
  tx_[tx_count_++] = m;
}

void EthPort::Delay(rte_mbuf* m, uint64_t delay_ns, bool reordered) {
  if (delay_ns == 0 || delayed_count_ == kMaxDelayed) {
    Queue(m);
    return;
  }
  ++counters_.fault_delayed;
  const uint64_t due = order_.Due(NowNs(), delay_ns, reordered);
  delayed_[delayed_count_++] = {due, delayed_seq_++, m};
  std::push_heap(delayed_.get(), delayed_.get() + delayed_count_,
                 [](const Delayed& a, const Delayed& b) { return Later(a, b); });
}

void EthPort::ReleaseDue() {
  if (delayed_count_ == 0) return;
  const uint64_t now = NowNs();
  auto later = [](const Delayed& a, const Delayed& b) { return Later(a, b); };
  while (delayed_count_ > 0 && delayed_[0].due_ns <= now &&
         tx_count_ < kBurst) {
    std::pop_heap(delayed_.get(), delayed_.get() + delayed_count_, later);
    --delayed_count_;
    tx_[tx_count_++] = delayed_[delayed_count_].mbuf;
  }
}

void EthPort::Commit(size_t len) {
  rte_mbuf* m = pending_;
  pending_ = nullptr;
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
  if (!faults_) {
    tx_[tx_count_++] = m;
    return;
  }
  const fault::FaultDecision d = faults_->Next();
  if (d.copies == 0) {
    ++counters_.fault_dropped;
    rte_pktmbuf_free(m);
    return;
  }
  if (d.copies == 2) {
    if (rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX)) {
      ++counters_.fault_duplicated;
      Delay(copy, d.delay2_ns, d.reordered2);
    }
  }
  Delay(m, d.delay_ns, d.reordered);
}

void EthPort::Flush() {
  ReleaseDue();
  if (tx_count_ == 0) return;
  const uint16_t sent = rte_eth_tx_burst(config_.port_id, 0, tx_, tx_count_);
  counters_.tx_frames += sent;
  if (sent < tx_count_) {
    // The device (or, for memif, the peer's ring) is full: keep the rest
    // for the next turn. Reserve refuses new frames while the burst is
    // full, so the transport waits instead of losing frames and paying a
    // retransmission timeout.
    ++counters_.tx_backpressure;
    std::memmove(tx_, tx_ + sent, (tx_count_ - sent) * sizeof(tx_[0]));
  }
  tx_count_ = static_cast<uint16_t>(tx_count_ - sent);
}

}  // namespace rdmaplane::port
