#include "dataplane/port/eth_port.h"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_errno.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_memory.h>
#include <dirent.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"

namespace rdmaplane::port {
namespace {
constexpr uint32_t kScratchBytes = 16384;

bool Later(const auto& a, const auto& b) {
  return a.due_ns != b.due_ns ? a.due_ns > b.due_ns : a.seq > b.seq;
}

// Zero copy: room for a frame's trailer (pad and ICRC) in a plain mbuf of
// the piece pool, and the private area that holds a piece's shared info.
constexpr uint16_t kTrailerRoom = 64;
static_assert(kTrailerRoom >= wire::kMaxTrailerLen);
constexpr uint16_t kPiecePrivSize =
    RTE_ALIGN(sizeof(rte_mbuf_ext_shared_info), RTE_MBUF_PRIV_ALIGN);

// How a device reads the frames it sends.
enum class DeviceReads {
  kByCpu,  // a software device copying them out by virtual address
  kByDma,  // hardware: the memory must be mapped for it
  kUnknown,
};

DeviceReads HowDeviceReads(const rte_eth_dev_info& info) {
  if (info.device == nullptr) return DeviceReads::kUnknown;
  const std::string bus = rte_bus_name(rte_dev_bus(info.device));
  if (bus != "vdev") return DeviceReads::kByDma;
  const std::string driver = info.driver_name;
  if (driver == "net_ring" || driver == "net_af_packet" ||
      driver == "net_tap") {
    return DeviceReads::kByCpu;
  }
  if (driver == "net_memif") {
    // memif's own zero-copy mode hands the peer offsets into DPDK's memory,
    // which client memory is not part of.
    const rte_devargs* args = rte_dev_devargs(info.device);
    const bool memif_zero_copy = args != nullptr && args->args != nullptr &&
                                 std::strstr(args->args, "zero-copy=yes");
    return memif_zero_copy ? DeviceReads::kUnknown : DeviceReads::kByCpu;
  }
  // Other virtual devices (vhost, virtio-user, ...) may pass addresses to
  // another process: copy.
  return DeviceReads::kUnknown;
}

// Whether the device's bursts may fault because another thread unmaps the
// memory they work on (see burst_guard.h): memif, whose interrupt thread
// unmaps a departed peer's rings. In its zero-copy mode the device keeps
// references of its own on the frames it sent, which the port cannot tell
// apart from its hold.
// The devargs of a memif port ("" when it has none), or nullopt for any
// other device.
std::optional<std::string_view> MemifArgs(const rte_eth_dev_info& info) {
  if (info.device == nullptr || info.driver_name == nullptr ||
      std::strcmp(info.driver_name, "net_memif") != 0) {
    return std::nullopt;
  }
  const rte_devargs* args = rte_dev_devargs(info.device);
  return args == nullptr || args->args == nullptr
             ? std::string_view()
             : std::string_view(args->args);
}

bool MemifCopyMode(const rte_eth_dev_info& info) {
  const std::optional<std::string_view> args = MemifArgs(info);
  return args && args->find("zero-copy=yes") == std::string_view::npos;
}

// A memif port in the client role (role=client; the default is server):
// the Unix socket its server listens on, as /proc/net/unix names it (an
// abstract one, DPDK's default, with a leading '@'), or nullopt.
std::optional<std::string> MemifClientSocket(const rte_eth_dev_info& info) {
  const std::optional<std::string_view> args = MemifArgs(info);
  if (!args) return std::nullopt;
  const std::optional<std::string_view> role = DeviceArg(*args, "role");
  if (!role || *role != "client") return std::nullopt;
  const std::optional<std::string_view> path = DeviceArg(*args, "socket");
  const std::optional<std::string_view> abstract =
      DeviceArg(*args, "socket-abstract");
  const std::string name(path ? *path : "/run/memif.sock");
  return abstract && *abstract == "no" ? name : "@" + name;
}

// Whether a Unix socket listens at `name` (/proc/net/unix's form): read
// from the kernel's table, without connecting (a connection that comes and
// goes would be one more disconnect for the server to take).
bool UnixSocketListens(const std::string& name) {
  FILE* f = std::fopen("/proc/net/unix", "re");
  if (f == nullptr) return true;  // cannot tell: try
  char line[4096];
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f) != nullptr) {
    // Num RefCount Protocol Flags Type St Inode Path
    unsigned long flags = 0;
    char path[4096];
    if (std::sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %4095s", &flags,
                    path) == 2 &&
        (flags & 0x10000) != 0 && name == path) {
      found = true;
    }
  }
  std::fclose(f);
  return found;
}

bool IsDriver(const rte_eth_dev_info& info, const char* name) {
  return info.driver_name != nullptr && std::strcmp(info.driver_name, name) == 0;
}

// A numeric devarg of the device ("framesz=4352"), or `otherwise`.
uint32_t DevargOr(const rte_eth_dev_info& info, const char* key,
                  uint32_t otherwise) {
  if (info.device == nullptr) return otherwise;
  const rte_devargs* args = rte_dev_devargs(info.device);
  if (args == nullptr || args->args == nullptr) return otherwise;
  const std::optional<std::string_view> value = DeviceArg(args->args, key);
  return value ? static_cast<uint32_t>(
                     std::strtoul(std::string(*value).c_str(), nullptr, 10))
               : otherwise;
}

// The AF_PACKET sockets of this process bound to interface `if_index`:
// those of the af_packet PMD, one per queue pair, which DPDK 22.11 keeps to
// itself. The port reads their drop counts and sleeps on the first.
std::vector<int> PacketSockets(int if_index) {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain,
                   &len) != 0 ||
        domain != AF_PACKET) {
      continue;
    }
    sockaddr_ll addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&addr),
                    &addr_len) == 0 &&
        addr.sll_ifindex == if_index) {
      fds.push_back(static_cast<int>(fd));
    }
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

// ioctl `request` (SIOCGIFMTU, SIOCSIFMTU) about interface ifr->ifr_name:
// 0, or the errno of the socket or the ioctl.
int InterfaceIoctl(unsigned long request, ifreq* ifr) {
  const int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errno;
  const int err = ioctl(s, request, ifr) == 0 ? 0 : errno;
  close(s);
  return err;
}

// The kernel's receive offset of a frame in an af_packet (TPACKET_V2) ring
// slot: the slot header and address, aligned so that the IP header is.
constexpr uint32_t kPacketRxOffset = 66;
// The room XDP keeps in front of a frame in each receive buffer
// (XDP_PACKET_HEADROOM).
constexpr uint32_t kXdpHeadroom = 256;

// Bytes each receive buffer of the device must hold (behind the headroom)
// for frames of `max_frame` bytes: af_packet copies a whole ring slot's
// worth into each (and checks that one fits at queue setup), af_xdp
// receives into the buffers themselves behind XDP's headroom.
uint32_t DeviceReceiveBytes(const rte_eth_dev_info& info, uint32_t max_frame) {
  if (IsDriver(info, "net_af_packet")) {
    return std::max(max_frame, DevargOr(info, "framesz", 2048));
  }
  if (IsDriver(info, "net_af_xdp")) return max_frame + kXdpHeadroom;
  return max_frame;
}
// The MTU of kernel interface `if_index` (af_packet, af_xdp, tap), or 0.
uint32_t KernelInterfaceMtu(int if_index) {
  char name[IF_NAMESIZE];
  if (if_index <= 0 ||
      if_indextoname(static_cast<unsigned>(if_index), name) == nullptr) {
    return 0;
  }
  return InterfaceMtu(name);
}

// Sets the MTU of interface `if_index` to `mtu` (the caller saw it lower),
// as the af_packet PMD would if DPDK's ethdev let it (it refuses any MTU
// above the PMD's reported 1518-byte frame).
absl::Status RaiseInterfaceMtu(int if_index, uint32_t mtu) {
  ifreq ifr{};
  if (if_indextoname(static_cast<unsigned>(if_index), ifr.ifr_name) ==
      nullptr) {
    return absl::UnavailableError(
        absl::StrCat("no interface with index ", if_index));
  }
  ifr.ifr_mtu = static_cast<int>(mtu);
  if (const int err = InterfaceIoctl(SIOCSIFMTU, &ifr); err != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot raise the MTU of ", ifr.ifr_name, " to ", mtu, ": ",
        std::strerror(err), " (choose a smaller path MTU)"));
  }
  return absl::OkStatus();
}

// A reference more on every segment of frame `m`, or one less (segments of
// a chain are freed one by one, so each needs its own).
void HoldFrame(rte_mbuf* m) {
  for (; m != nullptr; m = m->next) rte_mbuf_refcnt_update(m, 1);
}
void UnholdFrame(rte_mbuf* m) {
  for (; m != nullptr; m = m->next) rte_mbuf_refcnt_update(m, -1);
}

// Free callback of a payload piece's external buffer: whoever held the
// frame last let go of it. Runs where the mbuf is freed (usually the engine
// thread, inside tx_burst or a receiver's free): one atomic decrement.
void ReleasePiece(void* /*addr*/, void* owner) {
  static_cast<rc::MemoryOwner*>(owner)->Unref();
}

// DPDK 22.11's af_xdp PMD hands the kernel its mbuf pool as the socket's
// UMEM, registered as one region: populated_size objects from the page of
// the first one. A pool on 4 KiB pages (EAL --no-huge) keeps each object
// inside a page and so leaves gaps, which push the last objects out of that
// region; the kernel then rejects the frames in them without a word
// (XDP_STATISTICS tx_invalid_descs). Such a pool must be dense.
bool NeedsDensePool(const rte_eth_dev_info& info) {
  return info.driver_name != nullptr &&
         std::strcmp(info.driver_name, "net_af_xdp") == 0;
}

// rte_pktmbuf_pool_create, optionally with objects that may cross page
// boundaries (and so lie back to back): fine for devices that read frames
// by virtual address or through an IOMMU, which is all a dense pool is for.
rte_mempool* CreatePacketPool(const std::string& name, const PortConfig& c,
                              bool dense) {
  if (!dense) {
    return rte_pktmbuf_pool_create(name.c_str(), c.mbufs, 256, 0,
                                   c.mbuf_data_room, rte_socket_id());
  }
  rte_mempool* mp = rte_mempool_create_empty(
      name.c_str(), c.mbufs, sizeof(rte_mbuf) + c.mbuf_data_room, 256,
      sizeof(rte_pktmbuf_pool_private), rte_socket_id(),
      RTE_MEMPOOL_F_NO_IOVA_CONTIG);
  if (mp == nullptr) return nullptr;
  rte_pktmbuf_pool_private priv{};
  priv.mbuf_data_room_size = c.mbuf_data_room;
  priv.mbuf_priv_size = 0;
  if (rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr) !=
      0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_pktmbuf_pool_init(mp, &priv);
  if (rte_mempool_populate_default(mp) < 0) {
    rte_mempool_free(mp);
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

}  // namespace

uint32_t InterfaceMtu(const std::string& name) {
  ifreq ifr{};
  if (name.empty() || name.size() >= sizeof(ifr.ifr_name)) return 0;
  std::memcpy(ifr.ifr_name, name.data(), name.size());
  return InterfaceIoctl(SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0
             ? static_cast<uint32_t>(ifr.ifr_mtu)
             : 0;
}

uint32_t MemifBufferBytes(uint32_t frame) {
  uint32_t bsize = 2048;
  while (bsize < frame) bsize *= 2;
  return bsize;
}

uint32_t PacketBufferRoom(uint32_t bytes) {
  return std::max<uint32_t>(RTE_MBUF_DEFAULT_BUF_SIZE,
                            bytes + RTE_PKTMBUF_HEADROOM);
}

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

absl::StatusOr<std::unique_ptr<EthPort>> EthPort::Open(
    const PortConfig& config) {
  if (!rte_eth_dev_is_valid_port(config.port_id)) {
    return absl::NotFoundError(absl::StrCat("no DPDK port ", config.port_id));
  }
  if (config.burst == 0 || config.burst > kMaxBurst) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a burst is 1..", kMaxBurst, " frames, not ", config.burst));
  }
  rte_eth_dev_info info;
  if (int r = rte_eth_dev_info_get(config.port_id, &info); r != 0) {
    return absl::UnavailableError(absl::StrCat("dev_info: ", rte_strerror(-r)));
  }
  PortConfig c = config;
  if (const uint32_t need = DeviceReceiveBytes(info, c.max_frame);
      need + RTE_PKTMBUF_HEADROOM > c.mbuf_data_room) {
    if (need + RTE_PKTMBUF_HEADROOM > UINT16_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "packet buffers of ", need,
          " bytes (for the frames or af_packet's framesz) are larger than a "
          "DPDK buffer can be (", UINT16_MAX - RTE_PKTMBUF_HEADROOM, ")"));
    }
    c.mbuf_data_room = static_cast<uint16_t>(PacketBufferRoom(need));
  }
  std::unique_ptr<EthPort> port(new EthPort(c));
  port->pool_ = CreatePacketPool(absl::StrCat("rdp_pool_", c.port_id), c,
                                 NeedsDensePool(info));
  if (port->pool_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot create the mbuf pool: ", rte_strerror(rte_errno)));
  }
  if (c.mbuf_data_room <= RTE_PKTMBUF_HEADROOM) {
    return absl::InvalidArgumentError(absl::StrCat(
        "packet buffers of ", c.mbuf_data_room, " bytes leave no room after ",
        "their ", RTE_PKTMBUF_HEADROOM, "-byte headroom"));
  }
  const uint32_t room = c.mbuf_data_room - RTE_PKTMBUF_HEADROOM;
  if (c.max_frame > room) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frames of ", c.max_frame, " bytes do not fit mbufs of ", room));
  }
  // Frames beyond Ethernet's default need the port's MTU raised, and the
  // driver's answer to that is what counts: some report the default as
  // their limit whatever they take (af_packet says 1518 whatever its
  // framesz).
  const bool raise_mtu = c.max_frame > RTE_ETHER_MAX_LEN - RTE_ETHER_CRC_LEN;
  if (!raise_mtu && c.max_frame > info.max_rx_pktlen) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frames of ", c.max_frame, " bytes exceed the port's limit of ",
        info.max_rx_pktlen, " (choose a smaller path MTU)"));
  }
  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof(conf));
  conf.intr_conf.rxq = c.rx_interrupts ? 1 : 0;
  const bool gather = c.zero_copy_min_payload != 0 &&
                      (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
  if (gather) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  int r = rte_eth_dev_configure(c.port_id, 1, 1, &conf);
  if (r != 0 && c.rx_interrupts) {
    conf.intr_conf.rxq = 0;  // not supported here: nap instead
    r = rte_eth_dev_configure(c.port_id, 1, 1, &conf);
  }
  if (r != 0) {
    return absl::UnavailableError(
        absl::StrCat("configure: ", rte_strerror(-r)));
  }
  if (raise_mtu) {
    // The IP packet: the frame (which has no FCS) but its Ethernet header.
    const uint32_t mtu = c.max_frame - RTE_ETHER_HDR_LEN;
    // memif has no MTU of its own: in copy mode its rings carry a frame of
    // any length in chained buffers (MEMIF_DESC_FLAG_NEXT), whatever
    // frame limit its driver reports.
    // af_packet carries what its ring slots hold (framesz), on an
    // interface whose MTU ethdev will not let the PMD raise: the port
    // raises it. A kernel interface whose MTU is large enough already is
    // left as it is (ethdev would set it to exactly `mtu`, lowering it).
    const uint32_t have = KernelInterfaceMtu(static_cast<int>(info.if_index));
    if (int m = have >= mtu ? 0
                            : rte_eth_dev_set_mtu(c.port_id,
                                                  static_cast<uint16_t>(mtu));
        m != 0 && !MemifCopyMode(info)) {
      if (!IsDriver(info, "net_af_packet")) {
        return absl::InvalidArgumentError(
            absl::StrCat("the port refuses an MTU of ", mtu, " for ",
                         c.max_frame, "-byte frames: ", rte_strerror(-m),
                         " (choose a smaller path MTU)"));
      }
      if (absl::Status st = RaiseInterfaceMtu(info.if_index, mtu); !st.ok()) {
        return st;
      }
    }
  }
  if (IsDriver(info, "net_af_packet")) {
    const uint32_t slot = DevargOr(info, "framesz", 2048);
    const uint32_t block = DevargOr(
        info, "blocksz", static_cast<uint32_t>(sysconf(_SC_PAGESIZE)));
    // DPDK 22.11 looks for slot i at i * framesz, the kernel puts it at the
    // start of its block plus its place there: a gap at a block's end puts
    // every slot after it where the kernel does not.
    if (slot == 0 || block % slot != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "af_packet blocks of ", block, " bytes (blocksz) do not hold a whole "
          "number of ", slot, "-byte slots (framesz): DPDK would look for "
          "frames where the kernel does not put them"));
    }
    if (c.max_frame + kPacketRxOffset > slot) {
      return absl::InvalidArgumentError(absl::StrCat(
          "af_packet ring slots of ", slot, " bytes (framesz) hold frames of ",
          slot > kPacketRxOffset ? slot - kPacketRxOffset : 0,
          " bytes, not ", c.max_frame, " (give framesz=",
          c.max_frame + kPacketRxOffset, " or more, or a smaller path MTU)"));
    }
  }
  uint16_t rxd = c.rx_descriptors, txd = c.tx_descriptors;
  rte_eth_dev_adjust_nb_rx_tx_desc(c.port_id, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(c.port_id);
  if (int r = rte_eth_rx_queue_setup(c.port_id, 0, rxd, socket < 0 ? 0 : socket,
                                     nullptr, port->pool_);
      r != 0) {
    return absl::UnavailableError(absl::StrCat("rx queue: ", rte_strerror(-r)));
  }
  if (int r = rte_eth_tx_queue_setup(c.port_id, 0, txd, socket < 0 ? 0 : socket,
                                     nullptr);
      r != 0) {
    return absl::UnavailableError(absl::StrCat("tx queue: ", rte_strerror(-r)));
  }
  // A memif client connects when it starts, and fails to start while its
  // server is not there yet: it tries again while its link is down
  // (Reconnect), so daemons joined by memif link in any start order.
  // A client whose server does not listen yet is not started at all (a
  // failed start leaves DPDK 22.11's memif client in a state whose later
  // connection its server does not always survive).
  if (std::optional<std::string> server = MemifClientSocket(info)) {
    port->reconnects_ = true;
    port->memif_server_ = std::move(*server);
  }
  if (!port->reconnects_ || UnixSocketListens(port->memif_server_)) {
    if (int r = rte_eth_dev_start(c.port_id); r != 0 && !port->reconnects_) {
      return absl::UnavailableError(absl::StrCat("start: ", rte_strerror(-r)));
    } else {
      port->started_ = r == 0;
    }
  }
  InstallBurstGuard();
  port->recovers_bursts_ = c.bursts_may_fault || MemifCopyMode(info);
  if (c.promiscuous) rte_eth_promiscuous_enable(c.port_id);
  rte_ether_addr addr;
  rte_eth_macaddr_get(c.port_id, &addr);
  std::memcpy(port->mac_.bytes.data(), addr.addr_bytes, 6);
  port->loops_ = port->mac_ != wire::MacAddr{};
  port->max_frame_ = std::min<uint32_t>(
      room,
      std::max<uint32_t>(info.max_rx_pktlen, raise_mtu ? c.max_frame : 0));
  port->scratch_.reset(new uint8_t[kScratchBytes]);
  if (gather) port->SetUpZeroCopy(info);
  if (conf.intr_conf.rxq != 0) {
    const int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(c.port_id, 0);
    if (fd >= 0 && rte_eth_dev_rx_intr_disable(c.port_id, 0) != -ENOTSUP) {
      port->rx_intr_fd_ = fd;
      port->rx_intr_is_dpdk_ = true;
    }
  }
  if (IsDriver(info, "net_af_packet")) {
    port->packet_fds_ = PacketSockets(info.if_index);
    // Its socket is readable while frames wait in the receive ring: an
    // engine sleeps on it instead of napping, during which the ring could
    // fill and the kernel drop what follows.
    if (c.rx_interrupts && port->rx_intr_fd_ < 0 &&
        !port->packet_fds_.empty()) {
      port->rx_intr_fd_ = port->packet_fds_.front();
    }
  }
  return port;
}

void EthPort::SetUpZeroCopy(const rte_eth_dev_info& info) {
  const DeviceReads reads = HowDeviceReads(info);
  iova_is_va_ = rte_eal_iova_mode() == RTE_IOVA_VA;
  // A device that reads by DMA gets client memory mapped at IOVA == VA; the
  // physical addresses of client pages are not known (nor fixed, unless
  // they are hugepages).
  if (reads == DeviceReads::kUnknown ||
      (reads == DeviceReads::kByDma && !iova_is_va_)) {
    return;
  }
  maps_memory_ = reads == DeviceReads::kByDma || config_.map_external_memory;
  const uint16_t seg_limit = std::min<uint16_t>(
      info.tx_desc_lim.nb_seg_max == 0 ? UINT16_MAX
                                       : info.tx_desc_lim.nb_seg_max,
      info.tx_desc_lim.nb_mtu_seg_max == 0 ? UINT16_MAX
                                           : info.tx_desc_lim.nb_mtu_seg_max);
  if (seg_limit < 3) return;  // headers, a piece, the trailer
  const uint32_t n = config_.zero_copy_mbufs != 0 ? config_.zero_copy_mbufs
                                                  : 2 * config_.mbufs;
  const std::string name = absl::StrCat("rdp_zc_", config_.port_id);
  ext_pool_ = rte_pktmbuf_pool_create(name.c_str(), n, 256, kPiecePrivSize,
                                      kTrailerRoom, rte_socket_id());
  if (ext_pool_ == nullptr) return;  // copy instead
  max_pieces_ = std::min<uint16_t>(seg_limit - 2, rc::kMaxSge);
  gather_from_ = config_.zero_copy_min_payload;
}

bool EthPort::RegisterExternalMemory(void* addr, size_t len, size_t page_size) {
  if (gather_from_ == 0 || len == 0) return false;
  if (!maps_memory_) return true;  // the device reads it by address
  const uintptr_t start = reinterpret_cast<uintptr_t>(addr);
  if (page_size == 0 || start % page_size != 0) return false;
  const size_t bytes = (len + page_size - 1) / page_size * page_size;
  if (rte_extmem_register(addr, bytes, nullptr, 0, page_size) != 0) {
    return false;
  }
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(config_.port_id, &info) != 0 ||
      rte_dev_dma_map(info.device, addr, start, bytes) != 0) {
    rte_extmem_unregister(addr, bytes);
    return false;
  }
  mapped_.push_back({addr, bytes});
  return true;
}

void EthPort::UnregisterExternalMemory(void* addr) {
  auto it = std::find_if(mapped_.begin(), mapped_.end(),
                         [addr](const Mapped& m) { return m.addr == addr; });
  if (it == mapped_.end()) return;
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(config_.port_id, &info) == 0) {
    rte_dev_dma_unmap(info.device, it->addr,
                      reinterpret_cast<uintptr_t>(it->addr), it->len);
  }
  rte_extmem_unregister(it->addr, it->len);
  mapped_.erase(it);
}

EthPort::~EthPort() {
  if (pending_ != nullptr) rte_pktmbuf_free(pending_);
  while (loop_head_ != loop_tail_) {
    rte_pktmbuf_free(loop_[loop_head_++ % kLoopFrames]);
  }
  for (uint32_t i = 0; i < delayed_count_; ++i) {
    rte_pktmbuf_free(delayed_[i].mbuf);
  }
  for (uint16_t i = 0; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
  {
    // af_packet closes its sockets when stopped.
    std::lock_guard<std::mutex> lock(drops_mu_);
    packet_fds_.clear();
  }
  if (started_) {
    // Frames the device has sent but not yet given back (their pieces
    // still reference client memory).
    rte_eth_tx_done_cleanup(config_.port_id, 0, 0);
    rte_eth_dev_stop(config_.port_id);
  }
  while (!mapped_.empty()) UnregisterExternalMemory(mapped_.back().addr);
  if (pool_ != nullptr) rte_mempool_free(pool_);
  if (ext_pool_ != nullptr) rte_mempool_free(ext_pool_);
}

std::span<const uint8_t> EthPort::Linearize(const rte_mbuf* m) {
  ++counters_.rx_segmented;
  const uint32_t len = std::min<uint32_t>(m->pkt_len, kScratchBytes);
  const void* p = rte_pktmbuf_read(m, 0, len, scratch_.get());
  return {static_cast<const uint8_t*>(p), p == nullptr ? 0 : len};
}

std::span<uint8_t> EthPort::Reserve(size_t max_len) {
  if (max_len > max_frame_) return {};
  if (tx_count_ == config_.burst) Flush();
  if (tx_count_ == config_.burst) return {};  // the device is backed up
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
  if (rx_intr_is_dpdk_) rte_eth_dev_rx_intr_enable(config_.port_id, 0);
}

void EthPort::DisarmRxInterrupt() {
  if (rx_intr_is_dpdk_) rte_eth_dev_rx_intr_disable(config_.port_id, 0);
}

void EthPort::ClearRxInterruptError() {
  if (rx_intr_fd_ < 0 || rx_intr_is_dpdk_) return;
  int error = 0;
  socklen_t len = sizeof(error);
  getsockopt(rx_intr_fd_, SOL_SOCKET, SO_ERROR, &error, &len);
}

uint64_t EthPort::rx_dropped() const {
  uint64_t dropped = 0;
  rte_eth_stats stats;
  if (started_.load(std::memory_order_relaxed) &&
      rte_eth_stats_get(config_.port_id, &stats) == 0) {
    dropped += stats.imissed;
  }
  std::lock_guard<std::mutex> lock(drops_mu_);
  for (int fd : packet_fds_) {
    tpacket_stats st{};
    socklen_t len = sizeof(st);
    if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0) {
      packet_drops_ += st.tp_drops;
    }
  }
  return dropped + packet_drops_;
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
  if (tx_count_ == config_.burst) Flush();
  if (tx_count_ == config_.burst) {  // still full: a frame the model delayed
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
  const uint64_t due = order_.Due(rc::MonotonicNowNs(), delay_ns, reordered);
  delayed_[delayed_count_++] = {due, delayed_seq_++, m};
  std::push_heap(
      delayed_.get(), delayed_.get() + delayed_count_,
      [](const Delayed& a, const Delayed& b) { return Later(a, b); });
}

void EthPort::ReleaseDue() {
  if (delayed_count_ == 0) return;
  const uint64_t now = rc::MonotonicNowNs();
  auto later = [](const Delayed& a, const Delayed& b) { return Later(a, b); };
  while (delayed_count_ > 0 && delayed_[0].due_ns <= now &&
         tx_count_ < config_.burst) {
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
  Transmit(m);
}

bool EthPort::CanGather(std::span<const rc::PayloadPiece> payload) const {
  if (gather_from_ == 0 || payload.empty() || payload.size() > max_pieces_) {
    return false;
  }
  for (const rc::PayloadPiece& p : payload) {
    if (p.owner == nullptr || !p.owner->zero_copy() || p.len == 0 ||
        p.len > UINT16_MAX) {
      return false;
    }
  }
  return true;
}

void EthPort::CommitGather(std::span<uint8_t> frame, size_t header_len,
                           std::span<const rc::PayloadPiece> payload,
                           std::span<const uint8_t> trailer) {
  const size_t n = payload.size();
  rte_mbuf* segs[rc::kMaxSge + 1];
  if (ABSL_PREDICT_FALSE(n > rc::kMaxSge || trailer.size() > kTrailerRoom ||
                         rte_pktmbuf_alloc_bulk(ext_pool_, segs, n + 1) != 0)) {
    ++counters_.tx_zero_copy_fallback;
    rc::FrameSink::CommitGather(frame, header_len, payload, trailer);
    return;
  }
  rte_mbuf* head = pending_;
  pending_ = nullptr;
  head->data_len = static_cast<uint16_t>(header_len);
  uint32_t total = static_cast<uint32_t>(header_len);
  rte_mbuf* last = head;
  for (size_t i = 0; i < n; ++i) {
    const rc::PayloadPiece& p = payload[i];
    rte_mbuf* m = segs[i];
    // The shared info lives in the piece's own mbuf: it is read when that
    // mbuf is freed, before the mbuf goes back to its pool.
    auto* shinfo = static_cast<rte_mbuf_ext_shared_info*>(rte_mbuf_to_priv(m));
    shinfo->free_cb = &ReleasePiece;
    shinfo->fcb_opaque = p.owner;
    rte_mbuf_ext_refcnt_set(shinfo, 1);
    p.owner->Ref();
    void* addr = const_cast<uint8_t*>(p.data);
    rte_pktmbuf_attach_extbuf(
        m, addr,
        iova_is_va_ ? static_cast<rte_iova_t>(reinterpret_cast<uintptr_t>(addr))
                    : RTE_BAD_IOVA,
        static_cast<uint16_t>(p.len), shinfo);
    m->data_len = static_cast<uint16_t>(p.len);
    last->next = m;
    last = m;
    total += p.len;
  }
  rte_mbuf* tail = segs[n];
  tail->data_off = 0;
  std::memcpy(rte_pktmbuf_mtod(tail, uint8_t*), trailer.data(), trailer.size());
  tail->data_len = static_cast<uint16_t>(trailer.size());
  last->next = tail;
  total += static_cast<uint32_t>(trailer.size());
  head->nb_segs = static_cast<uint16_t>(n + 2);
  head->pkt_len = total;
  ++counters_.tx_zero_copy;
  Transmit(head);
}

void EthPort::Transmit(rte_mbuf* m) {
  // To our own MAC: looped back to our receive path, not sent (the
  // device would not bring it back), fault model or not. Not for a port
  // without a MAC of its own (net_ring's ports all have 0).
  if (ABSL_PREDICT_FALSE(loops_ &&
                         std::memcmp(rte_pktmbuf_mtod(m, const uint8_t*),
                                     mac_.bytes.data(), 6) == 0)) {
    if (loop_tail_ - loop_head_ == kLoopFrames) {
      ++counters_.loop_dropped;
      rte_pktmbuf_free(m);
      return;
    }
    loop_[loop_tail_++ % kLoopFrames] = m;
    ++counters_.tx_looped;
    return;
  }
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

bool EthPort::LinkUp() const {
  rte_eth_link link{};
  return rte_eth_link_get_nowait(config_.port_id, &link) == 0 &&
         link.link_status == RTE_ETH_LINK_UP;
}

bool EthPort::CheckLink() {
  const bool up = LinkUp();
  if (!up && !link_down_) ++counters_.link_down;
  if (up && link_down_ && tried_since_up_) ++counters_.reconnects;
  link_down_ = !up;
  if (up) {
    tried_since_up_ = false;
    seen_down_ = false;
    was_up_ = true;
  } else if (reconnects_) {
    if (!seen_down_) {
      // Seen down for the first time (link_down_ may have been set by a
      // burst that faulted). A connection may be on its way (the device
      // just started), and a server that was there may be shutting down
      // (its socket goes with it last): the first try waits a while.
      seen_down_ = true;
      reconnect_wait_ns_ = kReconnectNs;
      next_reconnect_ns_ =
          rc::MonotonicNowNs() + (was_up_ ? kPeerLeftNs : kReconnectNs);
      was_up_ = false;
    }
    Reconnect();
  }
  return up;
}

void EthPort::Reconnect() {
  const uint64_t now = rc::MonotonicNowNs();
  if (now < next_look_ns_) return;
  next_look_ns_ = now + kServerLookNs;
  DropQueued();
  if (!UnixSocketListens(memif_server_)) {
    server_absent_ = true;  // connect as soon as one listens
    return;
  }
  if (!server_absent_ && now < next_reconnect_ns_) return;
  server_absent_ = false;
  // Longer each time, so that a handshake slowed by a busy machine is not
  // cut short again and again.
  next_reconnect_ns_ = now + reconnect_wait_ns_;
  reconnect_wait_ns_ = std::min(2 * reconnect_wait_ns_, kMaxReconnectNs);
  if (started_) {
    rte_eth_dev_stop(config_.port_id);
    started_ = false;
  }
  ++counters_.reconnect_tries;
  tried_since_up_ = true;
  started_ = rte_eth_dev_start(config_.port_id) == 0;
}

void EthPort::DropQueued() {
  // Frames for a peer that is gone: dropped, like a switch would, so that
  // none waits (holding buffers and client memory) for a link that may
  // never come back.
  for (uint16_t i = 0; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
  counters_.tx_dropped += tx_count_;
  tx_count_ = 0;
}

uint32_t EthPort::mbufs_in_use() const {
  uint32_t n = 0;
  if (pool_ != nullptr) n += rte_mempool_in_use_count(pool_);
  if (ext_pool_ != nullptr) n += rte_mempool_in_use_count(ext_pool_);
  return n;
}

void EthPort::OnBurstFault() {
  ++counters_.burst_faults;
  link_down_ = true;
  link_check_ = kLinkCheckEvery;
}

void EthPort::OnReceiveFault(rte_mbuf** burst) {
  OnBurstFault();
  if (!recovers_bursts_) return;
  // The device stores a frame once it has copied all of it; the one it was
  // copying when the fault came is lost with the peer.
  for (uint16_t i = 0; i < config_.burst && burst[i] != nullptr; ++i) {
    rte_pktmbuf_free(burst[i]);
    ++counters_.burst_fault_frames;
  }
}

void EthPort::OnTransmitFault() {
  OnBurstFault();
  if (recovers_bursts_) {
    for (uint16_t i = 0; i < tx_count_; ++i) {
      rte_mbuf* m = tx_[i];
      // memif's copy mode frees a frame as a whole once it has copied it,
      // which leaves only our hold; a frame with more was not taken.
      if (rte_mbuf_refcnt_read(m) > 1) {
        UnholdFrame(m);
        ++counters_.burst_fault_frames;
      } else {
        ++counters_.tx_frames;
      }
      rte_pktmbuf_free(m);
    }
  }
  tx_count_ = 0;
}

void EthPort::Flush() {
  ReleaseDue();
  if (tx_count_ == 0) return;
  if (!LinkUsable()) {
    DropQueued();
    return;
  }
  if (recovers_bursts_) {
    for (uint16_t i = 0; i < tx_count_; ++i) HoldFrame(tx_[i]);
  }
  uint16_t sent = 0;
  RDP_GUARDED_BURST(sent = rte_eth_tx_burst(config_.port_id, 0, tx_, tx_count_),
                    {
                      OnTransmitFault();
                      return;
                    });
  if (recovers_bursts_) {
    // The device has finished with the frames it took (freed, or holding
    // references of its own); the rest stay queued.
    for (uint16_t i = 0; i < sent; ++i) rte_pktmbuf_free(tx_[i]);
    for (uint16_t i = sent; i < tx_count_; ++i) UnholdFrame(tx_[i]);
  }
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
