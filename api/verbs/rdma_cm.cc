// The kernel's rdma_cm device, served in-process beneath the system's own
// librdmacm: /dev/infiniband/rdma_cm and the rdma_ucm command ABI of
// <rdma/rdma_user_cm.h> (version 4), answered here against the daemons'
// RDMA IP CM service (control/ip_cm.h, kOpCm* requests and CmEvents).
//
// librdmacm opens the device (open), checks that it is a character device
// (fstat), and sends each command as one write(2) whose response it reads
// from the user pointer the command carries; events wait in a queue per
// open file, which is an eventfd here, so that poll, select and epoll on
// the channel's fd see them as on the kernel's (readable while the queue
// holds one). Stood in for: open, fstat and write on that file, close of
// it, and socket(AF_NETLINK, *, NETLINK_RDMA), refused as a kernel without
// the RDMA stack refuses it so that librdmacm reads the ABI version from
// sysfs (ibv_read_sysfs_file: none, so the newest). Every other file, and
// every other socket, goes to libc.
//
// AF_IB is refused (BIND fails with EAFNOSUPPORT, as librdmacm probes at
// start), so librdmacm uses the IP commands: BIND_IP, RESOLVE_IP,
// QUERY_ROUTE. Addresses are the daemons' data-port addresses: binding one
// binds that device; 0.0.0.0 binds (and listens on) every device;
// RESOLVE_IP asks every device's daemon (ARP) and takes the first that
// reaches the destination, or the device whose own address it is.
// Multicast is refused (EOPNOTSUPP). What librdmacm reads back mirrors
// Linux's cma.c and ucma.c: the event queue, events_reported, the passive
// id whose events wait until ACCEPT names it, the INIT_QP_ATTR masks and
// values, the fixed private data sizes, REJECTED's status (the reason).
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>
#include <stdarg.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "api/verbs/objects.h"

namespace rdmaplane::verbs::ucma {
namespace {

constexpr char kCmPath[] = "/dev/infiniband/rdma_cm";
constexpr unsigned kMiscMajor = 10;
constexpr unsigned kRdmaCmMinor = 58;
constexpr int kNetlinkRdma = 20;
constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
constexpr uint8_t kRejConsumerDefined = 28;
constexpr uint8_t kRejVendorOptionNotSupported = 35;
constexpr uint32_t kMaxBacklog = 1024;
// A QP's local ACK timeout as rdma_cm gives it (4.096 us * 2^14, 67 ms).
constexpr uint8_t kAckTimeout = 14;
constexpr uint8_t kHopLimit = 64;
// IBV_QP_* attribute masks of INIT_QP_ATTR's answers (Linux's, for RoCE).
constexpr uint32_t kInitMask =
    IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
constexpr uint32_t kUdInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
constexpr uint32_t kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                              IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr uint32_t kRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
                              IBV_QP_TIMEOUT;

// rdma_cm's event numbers (the kernel's enum rdma_cm_event_type, which
// librdmacm's <rdma/rdma_cma.h> repeats).
enum CmEventNumber : uint32_t {
  RDMA_CM_EVENT_ADDR_RESOLVED = 0,
  RDMA_CM_EVENT_ADDR_ERROR = 1,
  RDMA_CM_EVENT_ROUTE_RESOLVED = 2,
  RDMA_CM_EVENT_ROUTE_ERROR = 3,
  RDMA_CM_EVENT_CONNECT_REQUEST = 4,
  RDMA_CM_EVENT_CONNECT_RESPONSE = 5,
  RDMA_CM_EVENT_CONNECT_ERROR = 6,
  RDMA_CM_EVENT_UNREACHABLE = 7,
  RDMA_CM_EVENT_REJECTED = 8,
  RDMA_CM_EVENT_ESTABLISHED = 9,
  RDMA_CM_EVENT_DISCONNECTED = 10,
  RDMA_CM_EVENT_DEVICE_REMOVAL = 11,
  RDMA_CM_EVENT_TIMEWAIT_EXIT = 15,
};

// What an id is doing, as cma.c's states name it.
enum class State : uint8_t {
  kIdle,
  kBound,
  kAddrQuery,
  kAddrResolved,
  kRouteResolved,
  kConnect,  // a connection asked for (REQ out, or a request received)
  kListen,
};

struct Event {
  rdma_ucm_event_resp resp;
  uint32_t counted_on;  // the id whose events_reported it adds to
};

// A channel's file is readable while its queue holds an event: the
// eventfd's count is 1 then and 0 otherwise (Sync keeps it so).
struct Channel {
  int fd = -1;
  uint64_t serial = 0;  // which opening of fd
  std::deque<Event> events;
  bool readable = false;
  void Sync() {
    uint64_t count = 1;
    if (!readable && !events.empty()) {
      readable = syscall(SYS_write, fd, &count, sizeof(count)) == sizeof(count);
    } else if (readable && events.empty()) {
      // The count is 1: this read does not block.
      readable = syscall(SYS_read, fd, &count, sizeof(count)) != sizeof(count);
    }
  }
};

// One daemon's part: a session for the CM, and what its daemon said it is.
struct CmDevice {
  int index = -1;
  std::unique_ptr<Client> client;
  // What its daemon said it is (ip, path MTU, MAC: the node GUID).
  shm::DeviceInfo info{};
  std::thread pump;
};

struct Peer {  // the other end's side of the exchange
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint8_t responder_resources = 0;  // the receiver's side (ours)
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t path_mtu = 0;  // IBA code
  uint32_t qkey = 0;
};

struct Id {
  uint32_t handle = 0;
  uint64_t uid = 0;
  int fd = -1;  // its channel
  uint16_t ps = 0;
  uint8_t qp_type = IBV_QPT_RC;
  State state = State::kIdle;
  int device = -1;  // bound to a device; -1: none (any, or not yet)
  uint32_t src_ip = 0, dst_ip = 0;  // host order
  uint16_t src_port = 0, dst_port = 0;
  // The daemon's ids behind it, by device (one, or one per device for an
  // any-address bind).
  std::map<int, uint32_t> daemon;
  std::set<int> resolving;  // devices asked to resolve dst
  int32_t resolve_error = 0;
  uint32_t events_reported = 0;
  uint32_t backlog = 0;
  uint32_t requests_waiting = 0;   // listener: CONNECT_REQUESTs not taken
  uint32_t listener = UINT32_MAX;  // passive: the listener it came to
  bool have_peer = false;
  Peer peer;
  uint32_t own_psn = 0;
  uint8_t responder_resources = 0;  // negotiated
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t tos = 0;
  uint8_t ack_timeout = kAckTimeout;
  bool passive = false;
};

class Ucma {
 public:
  static Ucma& Get() {
    // Never destroyed: pump threads may still run while the process exits.
    static Ucma* u = new Ucma();
    return *u;
  }

  bool IsChannel(int fd) {
    return fd >= 0 && fd < kMaxFds && channel_fd_[fd].load();
  }

  int Open(int flags);
  void Close(int fd);
  ssize_t Write(int fd, const void* buf, size_t len);

 private:
  static constexpr int kMaxFds = 1 << 16;

  Ucma() : rng_(std::random_device{}()) {}

  // Commands; each returns 0 or a positive errno.
  int CreateId(int fd, const rdma_ucm_create_id& c);
  int DestroyId(int fd, const rdma_ucm_destroy_id& c);
  int BindIp(int fd, const rdma_ucm_bind_ip& c);
  int ResolveIp(int fd, const rdma_ucm_resolve_ip& c);
  int ResolveRoute(int fd, const rdma_ucm_resolve_route& c);
  int QueryRoute(int fd, const rdma_ucm_query& c, uint16_t out);
  int Connect(int fd, const rdma_ucm_connect& c);
  int Listen(int fd, const rdma_ucm_listen& c);
  int Accept(int fd, const rdma_ucm_accept& c);
  int Reject(int fd, const rdma_ucm_reject& c);
  int Disconnect(int fd, const rdma_ucm_disconnect& c);
  int InitQpAttr(int fd, const rdma_ucm_init_qp_attr& c, uint16_t out);
  int GetEvent(int fd, const rdma_ucm_get_event& c, uint16_t out,
               std::unique_lock<std::mutex>& lock);
  int SetOption(int fd, const rdma_ucm_set_option& c);
  int Notify(int fd, const rdma_ucm_notify& c);
  int MigrateId(int fd, const rdma_ucm_migrate_id& c, uint16_t out);

  // The id `handle` of channel `fd`: ENOENT when there is none, EINVAL
  // when it belongs to another channel.
  int Find(int fd, uint32_t handle, Id** id);
  // ... that also has a device.
  int FindWithDevice(int fd, uint32_t handle, Id** id);
  CmDevice* Device(int index);  // made on first use; null: unreachable
  // Binds `id` to `ip`:`port` (0.0.0.0: every device).
  int Bind(Id* id, uint32_t ip, uint16_t port);
  shm::CmParams ParamsFor(const Id& id, int device) const;
  // One kOpCm* request to the daemon of `device`; 0 or an errno.
  int Call(int device, uint32_t op, const shm::CmParams& p,
           shm::ControlResponse* out = nullptr);
  void ReleaseDaemonIds(Id* id, int except = -1);
  void Forget(Id* id);
  void Queue(Id* id, uint32_t event, int32_t status,
             const rdma_ucm_event_resp* base = nullptr,
             uint32_t counted_on = UINT32_MAX);
  // Events of one daemon, as its session's pump takes them.
  void Pump(CmDevice* d);
  void OnEvent(CmDevice* d, const shm::CmEvent& e);
  Id* ByDaemonId(int device, uint32_t daemon_id);
  uint32_t NewHandle();
  uint32_t NewPsn() { return rng_() & 0xFFFFFF; }

  std::mutex mu_;
  std::condition_variable event_came_;
  std::atomic<bool> channel_fd_[kMaxFds] = {};
  std::map<int, Channel> channels_;
  std::map<uint32_t, Id> ids_;
  std::vector<std::unique_ptr<CmDevice>> devices_;
  std::mt19937 rng_;
  uint64_t serial_ = 0;
};

// --- Addresses -------------------------------------------------------------

uint32_t Ipv4Of(const sockaddr_in6& a) {
  const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
  return ntohl(in->sin_addr.s_addr);
}
uint16_t PortOf(const sockaddr_in6& a) {
  return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
}
void PutSockaddr(sockaddr_in6* out, uint32_t ip, uint16_t port) {
  std::memset(out, 0, sizeof(*out));
  auto* in = reinterpret_cast<sockaddr_in*>(out);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(ip);
  in->sin_port = htons(port);
}
void PutGid(uint8_t* gid, uint32_t ip) {
  std::memset(gid, 0, 16);
  gid[10] = gid[11] = 0xFF;
  gid[12] = static_cast<uint8_t>(ip >> 24);
  gid[13] = static_cast<uint8_t>(ip >> 16);
  gid[14] = static_cast<uint8_t>(ip >> 8);
  gid[15] = static_cast<uint8_t>(ip);
}

int ErrnoOfStatus(int32_t status) {
  switch (status) {
    case shm::kStatusOk:
      return 0;
    case shm::kStatusRefused:
      return EADDRINUSE;
    case shm::kStatusLimit:
      return ENOMEM;
    case shm::kStatusAgain:
      return EAGAIN;
    case shm::kStatusNetDown:
      return ENODEV;
    default:
      return EINVAL;
  }
}

// --- Devices ---------------------------------------------------------------

CmDevice* Ucma::Device(int index) {
  if (index < 0) return nullptr;
  if (devices_.size() <= static_cast<size_t>(index)) {
    devices_.resize(static_cast<size_t>(index) + 1);
  }
  std::unique_ptr<CmDevice>& slot = devices_[static_cast<size_t>(index)];
  if (slot != nullptr) return slot->client != nullptr ? slot.get() : nullptr;
  slot = std::make_unique<CmDevice>();
  slot->index = index;
  const std::vector<verbs::Device*>& all = Devices();
  if (static_cast<size_t>(index) >= all.size()) return nullptr;
  ClientOptions options;
  options.socket_path = all[static_cast<size_t>(index)]->socket;
  auto client = Client::Open(options);
  if (!client.ok()) return nullptr;
  auto info = (*client)->QueryDevice();
  if (!info.ok()) return nullptr;
  slot->client = std::move(*client);
  slot->info = *info;
  CmDevice* d = slot.get();
  slot->pump = std::thread([this, d] { Pump(d); });
  slot->pump.detach();
  return d;
}

int Ucma::Call(int device, uint32_t op, const shm::CmParams& p,
               shm::ControlResponse* out) {
  CmDevice* d = Device(device);
  if (d == nullptr) return ENODEV;
  const shm::ControlResponse r = d->client->CmCall(op, p);
  if (out != nullptr) *out = r;
  return ErrnoOfStatus(r.status);
}

shm::CmParams Ucma::ParamsFor(const Id& id, int device) const {
  shm::CmParams p{};
  auto it = id.daemon.find(device);
  p.id = it == id.daemon.end() ? 0 : it->second;
  p.port_space = id.ps;
  p.local_port = id.src_port;
  p.remote_ip = id.dst_ip;
  p.remote_port = id.dst_port;
  return p;
}

// --- Ids and channels ------------------------------------------------------

uint32_t Ucma::NewHandle() {
  uint32_t h = 0;  // the lowest free, as the kernel's table
  for (const auto& [handle, id] : ids_) {
    if (handle != h) break;
    ++h;
  }
  return h;
}

int Ucma::Find(int fd, uint32_t handle, Id** id) {
  auto it = ids_.find(handle);
  if (it == ids_.end()) return ENOENT;
  if (it->second.fd != fd) return EINVAL;
  *id = &it->second;
  return 0;
}

int Ucma::FindWithDevice(int fd, uint32_t handle, Id** id) {
  if (int err = Find(fd, handle, id); err != 0) return err;
  return (*id)->device < 0 ? EINVAL : 0;
}

Id* Ucma::ByDaemonId(int device, uint32_t daemon_id) {
  for (auto& [handle, id] : ids_) {
    auto it = id.daemon.find(device);
    if (it != id.daemon.end() && it->second == daemon_id) return &id;
  }
  return nullptr;
}

void Ucma::ReleaseDaemonIds(Id* id, int except) {
  for (auto it = id->daemon.begin(); it != id->daemon.end();) {
    if (it->first == except) {
      ++it;
      continue;
    }
    shm::CmParams p{};
    p.id = it->second;
    Call(it->first, shm::kOpCmDestroy, p);
    it = id->daemon.erase(it);
  }
}

void Ucma::Forget(Id* id) {
  ReleaseDaemonIds(id);
  // Its events not taken go with it; CONNECT_REQUESTs of a listener take
  // the ids they made along.
  std::vector<uint32_t> children;
  auto ch = channels_.find(id->fd);
  if (ch != channels_.end()) {
    auto& q = ch->second.events;
    for (auto it = q.begin(); it != q.end();) {
      const bool mine = it->counted_on == id->handle ||
                        (it->resp.id == id->handle &&
                         it->resp.event != RDMA_CM_EVENT_CONNECT_REQUEST);
      if (mine) {
        if (it->resp.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
            it->counted_on == id->handle) {
          children.push_back(it->resp.id);
        }
        it = q.erase(it);
      } else {
        ++it;
      }
    }
    ch->second.Sync();
  }
  ids_.erase(id->handle);
  for (uint32_t child : children) {
    auto it = ids_.find(child);
    if (it != ids_.end()) Forget(&it->second);
  }
}

void Ucma::Queue(Id* id, uint32_t event, int32_t status,
                 const rdma_ucm_event_resp* base, uint32_t counted_on) {
  auto ch = channels_.find(id->fd);
  if (ch == channels_.end()) return;
  Event e{};
  if (base != nullptr) e.resp = *base;
  e.resp.uid = id->uid;
  e.resp.id = id->handle;
  e.resp.event = event;
  e.resp.status = static_cast<uint32_t>(status);
  e.counted_on = counted_on == UINT32_MAX ? id->handle : counted_on;
  ch->second.events.push_back(e);
  ch->second.Sync();
  event_came_.notify_all();
}

int Ucma::Open(int flags) {
  const int fd = eventfd(0, ((flags & O_CLOEXEC) != 0 ? EFD_CLOEXEC : 0) |
                                ((flags & O_NONBLOCK) != 0 ? EFD_NONBLOCK : 0));
  if (fd < 0) return -1;
  if (fd >= kMaxFds) {
    syscall(SYS_close, fd);
    errno = EMFILE;
    return -1;
  }
  std::lock_guard<std::mutex> lock(mu_);
  channels_[fd] = Channel{fd, ++serial_, {}, false};
  channel_fd_[fd].store(true);
  return fd;
}

void Ucma::Close(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint32_t> handles;
  for (const auto& [handle, id] : ids_) {
    if (id.fd == fd) handles.push_back(handle);
  }
  for (uint32_t h : handles) {
    auto it = ids_.find(h);
    if (it != ids_.end()) Forget(&it->second);
  }
  channels_.erase(fd);
  channel_fd_[fd].store(false);
  event_came_.notify_all();
}

// --- Commands ----------------------------------------------------------------

int Ucma::CreateId(int fd, const rdma_ucm_create_id& c) {
  uint8_t qp_type;
  switch (c.ps) {
    case RDMA_PS_TCP:
      qp_type = IBV_QPT_RC;
      break;
    case RDMA_PS_UDP:
      qp_type = IBV_QPT_UD;
      break;
    case RDMA_PS_IB:
      qp_type = c.qp_type;
      break;
    default:
      return EINVAL;  // RDMA_PS_IPOIB: no IPoIB here
  }
  Id id;
  id.handle = NewHandle();
  id.uid = c.uid;
  id.fd = fd;
  id.ps = c.ps;
  id.qp_type = qp_type;
  id.own_psn = NewPsn();
  const uint32_t handle = id.handle;
  ids_[handle] = std::move(id);
  rdma_ucm_create_id_resp resp{handle};
  std::memcpy(reinterpret_cast<void*>(c.response), &resp, sizeof(resp));
  return 0;
}

int Ucma::DestroyId(int fd, const rdma_ucm_destroy_id& c) {
  Id* id;
  if (int err = Find(fd, c.id, &id); err != 0) return err;
  rdma_ucm_destroy_id_resp resp{id->events_reported};
  Forget(id);
  std::memcpy(reinterpret_cast<void*>(c.response), &resp, sizeof(resp));
  return 0;
}

int Ucma::Bind(Id* id, uint32_t ip, uint16_t port) {
  std::vector<int> devices;
  const size_t n = Devices().size();
  for (size_t i = 0; i < n; ++i) {
    CmDevice* d = Device(static_cast<int>(i));
    if (d == nullptr) continue;
    if (ip == INADDR_ANY || d->info.ip == ip)
      devices.push_back(static_cast<int>(i));
  }
  if (devices.empty()) return ip == INADDR_ANY ? ENODEV : EADDRNOTAVAIL;
  // The first device picks the port (0: any); the others take the same.
  uint16_t chosen = port;
  for (int dev : devices) {
    shm::CmParams p{};
    p.port_space = id->ps;
    p.local_port = chosen;
    shm::ControlResponse r;
    if (int err = Call(dev, shm::kOpCmBind, p, &r); err != 0) {
      ReleaseDaemonIds(id);
      return err;
    }
    id->daemon[dev] = r.key;
    chosen = static_cast<uint16_t>(r.connection);
  }
  id->src_ip = ip;
  id->src_port = chosen;
  id->device = ip == INADDR_ANY ? -1 : devices.front();
  id->state = State::kBound;
  return 0;
}

int Ucma::BindIp(int fd, const rdma_ucm_bind_ip& c) {
  Id* id;
  if (int err = Find(fd, c.id, &id); err != 0) return err;
  if (c.addr.sin6_family != AF_INET) return EAFNOSUPPORT;
  if (id->state != State::kIdle) return EINVAL;
  return Bind(id, Ipv4Of(c.addr), PortOf(c.addr));
}

int Ucma::ResolveIp(int fd, const rdma_ucm_resolve_ip& c) {
  Id* id;
  if (int err = Find(fd, c.id, &id); err != 0) return err;
  if (c.dst_addr.sin6_family != AF_INET ||
      (c.src_addr.sin6_family != 0 && c.src_addr.sin6_family != AF_INET)) {
    return EAFNOSUPPORT;
  }
  const uint32_t dst = Ipv4Of(c.dst_addr);
  if (dst == INADDR_ANY) return EINVAL;
  if (id->state == State::kIdle) {
    const uint32_t src =
        c.src_addr.sin6_family == AF_INET ? Ipv4Of(c.src_addr) : 0;
    if (int err = Bind(id, src, 0); err != 0) return err;
  }
  if (id->state != State::kBound && id->state != State::kAddrResolved) {
    return EINVAL;
  }
  // The device whose own address it is, else every device bound.
  int own = -1;
  for (const auto& [dev, daemon_id] : id->daemon) {
    if (Device(dev) != nullptr && Device(dev)->info.ip == dst) own = dev;
  }
  if (own >= 0 && id->device < 0) ReleaseDaemonIds(id, own);
  id->dst_ip = dst;
  id->dst_port = PortOf(c.dst_addr);
  id->state = State::kAddrQuery;
  id->resolving.clear();
  id->resolve_error = -EHOSTUNREACH;
  for (const auto& [dev, daemon_id] : id->daemon) {
    shm::CmParams p = ParamsFor(*id, dev);
    p.timeout_ms = c.timeout_ms;
    if (Call(dev, shm::kOpCmResolve, p) == 0) id->resolving.insert(dev);
  }
  if (id->resolving.empty()) {
    id->state = State::kBound;
    return ENODEV;
  }
  return 0;
}

int Ucma::ResolveRoute(int fd, const rdma_ucm_resolve_route& c) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  if (c.timeout_ms == 0) return EINVAL;
  if (id->state != State::kAddrResolved) return EINVAL;
  // RoCE: the path is the addresses; no SA to ask.
  id->state = State::kRouteResolved;
  Queue(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
  return 0;
}

int Ucma::QueryRoute(int fd, const rdma_ucm_query& c, uint16_t out) {
  Id* id;
  if (int err = Find(fd, c.id, &id); err != 0) return err;
  if (out < offsetof(rdma_ucm_query_route_resp, ibdev_index)) return ENOSPC;
  rdma_ucm_query_route_resp resp{};
  PutSockaddr(&resp.src_addr, id->src_ip, id->src_port);
  if (id->dst_ip != 0) PutSockaddr(&resp.dst_addr, id->dst_ip, id->dst_port);
  resp.ibdev_index = UINT32_MAX;
  CmDevice* d = Device(id->device);
  if (d != nullptr) {
    resp.node_guid = GuidOf(d->info);
    resp.ibdev_index = static_cast<uint32_t>(id->device);
    resp.port_num = 1;
    const bool routed =
        id->state == State::kRouteResolved || id->state == State::kConnect;
    resp.num_paths = routed ? 1 : 0;
    ib_user_path_rec& path = resp.ib_route[0];
    PutGid(path.sgid, d->info.ip);
    PutGid(path.dgid, id->dst_ip);
    path.pkey = htons(0xFFFF);
    if (routed) {
      path.reversible = 1;
      path.numb_path = 1;
      path.mtu = static_cast<uint32_t>(MtuEnum(d->info.path_mtu));
      path.mtu_selector = 2;  // exactly
      path.rate_selector = 2;
      path.packet_life_time_selector = 2;
      path.packet_life_time = 16;
      path.hop_limit = kHopLimit;
      path.traffic_class = id->tos;
    }
  }
  std::memcpy(reinterpret_cast<void*>(c.response), &resp,
              std::min<size_t>(out, sizeof(resp)));
  return 0;
}

int Ucma::Connect(int fd, const rdma_ucm_connect& c) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  if (!c.conn_param.valid) return EINVAL;
  if (id->state != State::kRouteResolved) return EINVAL;
  const bool ud = id->qp_type == IBV_QPT_UD;
  const size_t room = ud ? 180 : 56;
  if (c.conn_param.private_data_len > room) return EINVAL;
  shm::CmParams p = ParamsFor(*id, id->device);
  p.qpn = c.conn_param.qp_num & 0xFFFFFF;
  p.psn = id->own_psn;
  p.responder_resources = c.conn_param.responder_resources;
  p.initiator_depth = c.conn_param.initiator_depth;
  p.flow_control = c.conn_param.flow_control;
  p.retry_count = std::min<uint8_t>(c.conn_param.retry_count, 7);
  p.rnr_retry_count = std::min<uint8_t>(c.conn_param.rnr_retry_count, 7);
  p.srq = c.conn_param.srq;
  p.private_data_len = c.conn_param.private_data_len;
  std::memcpy(p.private_data, c.conn_param.private_data,
              c.conn_param.private_data_len);
  if (int err = Call(id->device, shm::kOpCmConnect, p); err != 0) return err;
  id->responder_resources = c.conn_param.responder_resources;
  id->initiator_depth = c.conn_param.initiator_depth;
  id->retry_count = p.retry_count;
  id->state = State::kConnect;
  return 0;
}

int Ucma::Listen(int fd, const rdma_ucm_listen& c) {
  Id* id;
  if (int err = Find(fd, c.id, &id); err != 0) return err;
  if (id->state == State::kIdle) {
    if (int err = Bind(id, INADDR_ANY, 0); err != 0) return err;
  }
  if (id->state != State::kBound && id->state != State::kListen) return EINVAL;
  const uint32_t backlog =
      c.backlog == 0 || c.backlog > kMaxBacklog ? kMaxBacklog : c.backlog;
  for (const auto& [dev, daemon_id] : id->daemon) {
    shm::CmParams p = ParamsFor(*id, dev);
    p.backlog = backlog;
    if (int err = Call(dev, shm::kOpCmListen, p); err != 0) return err;
  }
  id->backlog = backlog;
  id->state = State::kListen;
  return 0;
}

int Ucma::Accept(int fd, const rdma_ucm_accept& c) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  if (id->state != State::kConnect) return EINVAL;
  shm::CmParams p = ParamsFor(*id, id->device);
  if (c.conn_param.valid) {
    if (!id->passive) return EINVAL;
    const bool ud = id->qp_type == IBV_QPT_UD;
    if (c.conn_param.private_data_len > (ud ? 136 : 196)) return EINVAL;
    p.qpn = c.conn_param.qp_num & 0xFFFFFF;
    p.psn = id->own_psn;
    p.qkey = kUdpQkey;
    p.responder_resources = c.conn_param.responder_resources;
    p.initiator_depth = c.conn_param.initiator_depth;
    p.flow_control = c.conn_param.flow_control;
    p.rnr_retry_count = std::min<uint8_t>(c.conn_param.rnr_retry_count, 7);
    p.srq = c.conn_param.srq;
    p.private_data_len = c.conn_param.private_data_len;
    std::memcpy(p.private_data, c.conn_param.private_data,
                c.conn_param.private_data_len);
  } else if (id->passive) {
    return EINVAL;
  }
  if (int err = Call(id->device, shm::kOpCmAccept, p); err != 0) return err;
  if (c.conn_param.valid) {
    id->uid = c.uid;  // its events reach the application from now on
    id->responder_resources = c.conn_param.responder_resources;
    id->initiator_depth = c.conn_param.initiator_depth;
    id->rnr_retry_count = p.rnr_retry_count;
  }
  return 0;
}

int Ucma::Reject(int fd, const rdma_ucm_reject& c) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  uint8_t reason = c.reason == 0 ? kRejConsumerDefined : c.reason;
  if (reason != kRejConsumerDefined && reason != kRejVendorOptionNotSupported) {
    return EINVAL;
  }
  if (id->state != State::kConnect || !id->have_peer) return EINVAL;
  // As Linux's CM: more than a REJ (148 bytes) or a SIDR REP (136) holds is
  // refused, not cut.
  if (c.private_data_len > (id->qp_type == IBV_QPT_UD ? 136 : 148)) {
    return EINVAL;
  }
  shm::CmParams p = ParamsFor(*id, id->device);
  p.reason = reason;
  p.private_data_len = c.private_data_len;
  std::memcpy(p.private_data, c.private_data, p.private_data_len);
  return Call(id->device, shm::kOpCmReject, p);
}

int Ucma::Disconnect(int fd, const rdma_ucm_disconnect& c) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  if (id->state != State::kConnect) return EINVAL;
  Call(id->device, shm::kOpCmDisconnect, ParamsFor(*id, id->device));
  return 0;  // as Linux: whatever became of the connection
}

int Ucma::InitQpAttr(int fd, const rdma_ucm_init_qp_attr& c, uint16_t out) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  if (out < sizeof(ib_uverbs_qp_attr)) return ENOSPC;
  if (c.qp_state > IBV_QPS_ERR) return EINVAL;
  ib_uverbs_qp_attr a{};
  a.qp_state = c.qp_state;
  a.pkey_index = 0;
  a.port_num = 1;
  if (id->qp_type == IBV_QPT_UD) {
    // What a UD queue pair needs (librdmacm moves it to RTR and RTS itself).
    a.qp_attr_mask = kUdInitMask;
    a.qkey = kUdpQkey;
  } else if (c.qp_state == IBV_QPS_INIT) {
    a.qp_attr_mask = kInitMask;
    if (id->have_peer) {
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
      if (id->responder_resources != 0) {
        a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      }
    }
  } else if (c.qp_state == IBV_QPS_RTR || c.qp_state == IBV_QPS_RTS) {
    if (!id->have_peer) return EINVAL;  // before a request or an answer
    CmDevice* d = Device(id->device);
    if (c.qp_state == IBV_QPS_RTR) {
      a.qp_attr_mask = kRtrMask;
      a.ah_attr.is_global = 1;
      PutGid(a.ah_attr.grh.dgid, id->dst_ip);
      a.ah_attr.grh.sgid_index = 0;
      a.ah_attr.grh.hop_limit = kHopLimit;
      a.ah_attr.grh.traffic_class = id->tos;
      a.ah_attr.port_num = 1;
      const uint8_t ours =
          static_cast<uint8_t>(MtuEnum(d != nullptr ? d->info.path_mtu : 1024));
      a.path_mtu =
          id->peer.path_mtu != 0 ? std::min(ours, id->peer.path_mtu) : ours;
      a.dest_qp_num = id->peer.qpn;
      // As Linux: each side receives from its own sequence number, which
      // the peer was told (REQ's or REP's starting PSN) and sends from.
      a.rq_psn = id->own_psn;
      a.max_dest_rd_atomic = id->responder_resources;
      a.min_rnr_timer = 0;
    } else {
      a.qp_attr_mask = kRtsMask;
      a.sq_psn = id->peer.psn;
      a.retry_cnt = id->passive ? id->peer.retry_count : id->retry_count;
      a.rnr_retry =
          id->passive ? id->rnr_retry_count : id->peer.rnr_retry_count;
      a.max_rd_atomic = id->initiator_depth;
      a.timeout = id->ack_timeout;
    }
  } else {
    a.qp_attr_mask = IBV_QP_STATE;
  }
  std::memcpy(reinterpret_cast<void*>(c.response), &a, sizeof(a));
  return 0;
}

int Ucma::GetEvent(int fd, const rdma_ucm_get_event& c, uint16_t out,
                   std::unique_lock<std::mutex>& lock) {
  if (out < offsetof(rdma_ucm_event_resp, reserved)) return ENOSPC;
  const auto opened = channels_.find(fd);
  if (opened == channels_.end()) return EBADF;
  const uint64_t serial = opened->second.serial;
  while (true) {
    auto ch = channels_.find(fd);
    if (ch == channels_.end() || ch->second.serial != serial) {
      // Closed under the wait: as with the kernel's file, which a write in
      // progress keeps open, no event comes any more; the thread waits
      // until the process ends.
      event_came_.wait(lock, [] { return false; });
    }
    if (!ch->second.events.empty()) break;
    const int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK) != 0) return EAGAIN;
    event_came_.wait(lock);
  }
  Channel& ch = channels_[fd];
  const Event e = ch.events.front();
  ch.events.pop_front();
  ch.Sync();
  if (auto it = ids_.find(e.counted_on); it != ids_.end()) {
    ++it->second.events_reported;
    if (e.resp.event == RDMA_CM_EVENT_CONNECT_REQUEST &&
        it->second.requests_waiting > 0) {
      --it->second.requests_waiting;
    }
  }
  std::memcpy(reinterpret_cast<void*>(c.response), &e.resp,
              std::min<size_t>(out, sizeof(e.resp)));
  return 0;
}

int Ucma::SetOption(int fd, const rdma_ucm_set_option& c) {
  Id* id;
  if (int err = Find(fd, c.id, &id); err != 0) return err;
  const auto* value = reinterpret_cast<const uint8_t*>(c.optval);
  if (c.level == RDMA_OPTION_ID) {
    switch (c.optname) {
      case RDMA_OPTION_ID_TOS:
        if (c.optlen != 1) return EINVAL;
        id->tos = value[0];
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
        // Ports are the daemons'; IPv4 only.
        return c.optlen == sizeof(int) ? 0 : EINVAL;
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (c.optlen != 1 || id->qp_type != IBV_QPT_RC) return EINVAL;
        id->ack_timeout = value[0];
        return 0;
      default:
        return ENOSYS;
    }
  }
  return ENOSYS;  // RDMA_OPTION_IB_PATH: no SA paths on RoCE
}

int Ucma::Notify(int fd, const rdma_ucm_notify& c) {
  Id* id;
  if (int err = FindWithDevice(fd, c.id, &id); err != 0) return err;
  if (c.event != IBV_EVENT_COMM_EST || id->state != State::kConnect) {
    return EINVAL;
  }
  return Call(id->device, shm::kOpCmNotify, ParamsFor(*id, id->device));
}

int Ucma::MigrateId(int fd, const rdma_ucm_migrate_id& c, uint16_t out) {
  if (out < sizeof(rdma_ucm_migrate_resp)) return ENOSPC;
  const int from = static_cast<int>(c.fd);
  if (!IsChannel(from)) return fcntl(from, F_GETFD) < 0 ? ENOENT : EINVAL;
  Id* id;
  if (int err = Find(from, c.id, &id); err != 0) return err;
  // The id and its events move to this channel.
  id->fd = fd;
  Channel& src = channels_[from];
  Channel& dst = channels_[fd];
  for (auto it = src.events.begin(); it != src.events.end();) {
    if (it->resp.id == id->handle || it->counted_on == id->handle) {
      dst.events.push_back(*it);
      it = src.events.erase(it);
    } else {
      ++it;
    }
  }
  src.Sync();
  dst.Sync();
  event_came_.notify_all();
  rdma_ucm_migrate_resp resp{id->events_reported};
  std::memcpy(reinterpret_cast<void*>(c.response), &resp, sizeof(resp));
  return 0;
}

ssize_t Ucma::Write(int fd, const void* buf, size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof(hdr)) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.in + sizeof(hdr) > len) {
    errno = EINVAL;
    return -1;
  }
  const auto* body = static_cast<const uint8_t*>(buf) + sizeof(hdr);
  // Each command's arguments as the caller sent them, zero past the end
  // of a shorter command (an older library's).
  auto with = [&](auto args, auto handler) {
    std::memcpy(&args, body, std::min<size_t>(hdr.in, sizeof(args)));
    return handler(args);
  };
  std::unique_lock<std::mutex> lock(mu_);
  int err = EINVAL;
  switch (hdr.cmd) {
    case RDMA_USER_CM_CMD_CREATE_ID:
      err = hdr.out < sizeof(rdma_ucm_create_id_resp)
                ? ENOSPC
                : with(rdma_ucm_create_id{},
                       [&](const auto& c) { return CreateId(fd, c); });
      break;
    case RDMA_USER_CM_CMD_DESTROY_ID:
      err = hdr.out < sizeof(rdma_ucm_destroy_id_resp)
                ? ENOSPC
                : with(rdma_ucm_destroy_id{},
                       [&](const auto& c) { return DestroyId(fd, c); });
      break;
    case RDMA_USER_CM_CMD_BIND_IP:
      err = with(rdma_ucm_bind_ip{},
                 [&](const auto& c) { return BindIp(fd, c); });
      break;
    case RDMA_USER_CM_CMD_RESOLVE_IP:
      err = with(rdma_ucm_resolve_ip{},
                 [&](const auto& c) { return ResolveIp(fd, c); });
      break;
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE:
      err = with(rdma_ucm_resolve_route{},
                 [&](const auto& c) { return ResolveRoute(fd, c); });
      break;
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
      err = with(rdma_ucm_query{},
                 [&](const auto& c) { return QueryRoute(fd, c, hdr.out); });
      break;
    case RDMA_USER_CM_CMD_CONNECT:
      err = hdr.in < offsetof(rdma_ucm_connect, ece)
                ? EINVAL
                : with(rdma_ucm_connect{},
                       [&](const auto& c) { return Connect(fd, c); });
      break;
    case RDMA_USER_CM_CMD_LISTEN:
      err =
          with(rdma_ucm_listen{}, [&](const auto& c) { return Listen(fd, c); });
      break;
    case RDMA_USER_CM_CMD_ACCEPT:
      err = hdr.in < offsetof(rdma_ucm_accept, ece)
                ? EINVAL
                : with(rdma_ucm_accept{},
                       [&](const auto& c) { return Accept(fd, c); });
      break;
    case RDMA_USER_CM_CMD_REJECT:
      err =
          with(rdma_ucm_reject{}, [&](const auto& c) { return Reject(fd, c); });
      break;
    case RDMA_USER_CM_CMD_DISCONNECT:
      err = with(rdma_ucm_disconnect{},
                 [&](const auto& c) { return Disconnect(fd, c); });
      break;
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
      err = with(rdma_ucm_init_qp_attr{},
                 [&](const auto& c) { return InitQpAttr(fd, c, hdr.out); });
      break;
    case RDMA_USER_CM_CMD_GET_EVENT:
      err = with(rdma_ucm_get_event{},
                 [&](const auto& c) { return GetEvent(fd, c, hdr.out, lock); });
      break;
    case RDMA_USER_CM_CMD_SET_OPTION:
      err = with(rdma_ucm_set_option{},
                 [&](const auto& c) { return SetOption(fd, c); });
      break;
    case RDMA_USER_CM_CMD_NOTIFY:
      err =
          with(rdma_ucm_notify{}, [&](const auto& c) { return Notify(fd, c); });
      break;
    case RDMA_USER_CM_CMD_MIGRATE_ID:
      err = with(rdma_ucm_migrate_id{},
                 [&](const auto& c) { return MigrateId(fd, c, hdr.out); });
      break;
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
    case RDMA_USER_CM_CMD_JOIN_MCAST:
      err = EOPNOTSUPP;  // no multicast (docs/rdma_cm.md)
      break;
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
      err = ENOENT;  // none was ever joined
      break;
    case RDMA_USER_CM_CMD_BIND:
    case RDMA_USER_CM_CMD_RESOLVE_ADDR:
      // AF_IB: not served, so that librdmacm keeps to the IP commands.
      err = EAFNOSUPPORT;
      break;
    case RDMA_USER_CM_CMD_QUERY:
    case RDMA_USER_CM_CMD_GET_OPTION:
      err = ENOSYS;
      break;
    default:
      err = EINVAL;
  }
  if (err != 0) {
    errno = err;
    return -1;
  }
  return static_cast<ssize_t>(len);
}

// --- Events of the daemons ---------------------------------------------------

void Ucma::Pump(CmDevice* d) {
  shm::CmEvent e;
  while (true) {
    if (!d->client->TakeCmEvent(&e, -1)) {
      if (!d->client->DaemonGone()) continue;
      // The daemon is gone: its ids' connections with it.
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [handle, id] : ids_) {
        if (id.device == d->index && id.uid != 0) {
          Queue(&id, RDMA_CM_EVENT_DEVICE_REMOVAL, 0);
        }
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    OnEvent(d, e);
  }
}

void FillConn(const shm::CmParams& p, size_t fixed_len,
              rdma_ucm_conn_param* c) {
  c->qp_num = p.qpn;
  std::memcpy(c->private_data, p.private_data,
              std::min<size_t>(p.private_data_len, sizeof(c->private_data)));
  c->private_data_len = static_cast<uint8_t>(fixed_len);
  c->srq = p.srq;
  c->responder_resources = p.responder_resources;
  c->initiator_depth = p.initiator_depth;
  c->flow_control = p.flow_control;
  c->retry_count = p.retry_count;
  c->rnr_retry_count = p.rnr_retry_count;
}

void FillUd(const shm::CmParams& p, size_t fixed_len, uint32_t remote_ip,
            rdma_ucm_ud_param* u) {
  u->qp_num = p.qpn;
  u->qkey = p.qkey;
  u->ah_attr.is_global = 1;
  PutGid(u->ah_attr.grh.dgid, remote_ip);
  u->ah_attr.grh.hop_limit = kHopLimit;
  u->ah_attr.port_num = 1;
  std::memcpy(u->private_data, p.private_data,
              std::min<size_t>(p.private_data_len, sizeof(u->private_data)));
  u->private_data_len = static_cast<uint8_t>(fixed_len);
}

void Ucma::OnEvent(CmDevice* d, const shm::CmEvent& e) {
  const shm::CmParams& p = e.params;
  if (e.type == shm::kCmConnectRequest) {
    Id* listener = ByDaemonId(d->index, e.listener);
    auto refuse = [&] {
      shm::CmParams r{};
      r.id = p.id;
      Call(d->index, shm::kOpCmDestroy, r);
    };
    if (listener == nullptr || listener->state != State::kListen ||
        listener->requests_waiting >= listener->backlog) {
      refuse();
      return;
    }
    Id child;
    child.handle = NewHandle();
    child.uid = 0;  // none until ACCEPT names it
    child.fd = listener->fd;
    child.ps = listener->ps;
    child.qp_type = listener->qp_type;
    child.state = State::kConnect;
    child.device = d->index;
    child.daemon[d->index] = p.id;
    child.src_ip = d->info.ip;
    child.src_port = p.local_port;
    child.dst_ip = p.remote_ip;
    child.dst_port = p.remote_port;
    child.listener = listener->handle;
    child.passive = true;
    child.have_peer = true;
    child.peer = {p.qpn,
                  p.psn,
                  p.responder_resources,
                  p.initiator_depth,
                  p.retry_count,
                  p.rnr_retry_count,
                  p.path_mtu,
                  p.qkey};
    child.responder_resources = p.responder_resources;
    child.initiator_depth = p.initiator_depth;
    child.own_psn = NewPsn();
    child.tos = listener->tos;
    const uint32_t handle = child.handle;
    ids_[handle] = std::move(child);
    ++listener->requests_waiting;
    rdma_ucm_event_resp r{};
    if (listener->qp_type == IBV_QPT_UD) {
      FillUd(p, 180, p.remote_ip, &r.param.ud);
    } else {
      FillConn(p, 56, &r.param.conn);
    }
    // Reported with the listener's uid and the new id's handle.
    Event ev{};
    ev.resp = r;
    ev.resp.uid = listener->uid;
    ev.resp.id = handle;
    ev.resp.event = RDMA_CM_EVENT_CONNECT_REQUEST;
    ev.counted_on = listener->handle;
    auto ch = channels_.find(listener->fd);
    if (ch == channels_.end()) return;
    ch->second.events.push_back(ev);
    ch->second.Sync();
    event_came_.notify_all();
    return;
  }
  Id* id = ByDaemonId(d->index, p.id);
  if (id == nullptr) return;                // destroyed meanwhile
  if (id->passive && id->uid == 0) return;  // as Linux: not named yet
  rdma_ucm_event_resp r{};
  switch (e.type) {
    case shm::kCmAddrResolved:
      if (id->state != State::kAddrQuery) return;
      id->device = d->index;
      id->src_ip = d->info.ip;
      id->resolving.clear();
      ReleaseDaemonIds(id, d->index);  // the other devices' tries end
      id->state = State::kAddrResolved;
      Queue(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
      return;
    case shm::kCmAddrError:
      if (id->state != State::kAddrQuery) return;
      id->resolving.erase(d->index);
      id->resolve_error = e.status;
      if (!id->resolving.empty()) return;  // another device may reach it
      id->state = State::kBound;
      Queue(id, RDMA_CM_EVENT_ADDR_ERROR, e.status);
      return;
    case shm::kCmConnectResponse:
      id->have_peer = true;
      id->peer = {p.qpn,
                  p.psn,
                  p.responder_resources,
                  p.initiator_depth,
                  p.retry_count,
                  p.rnr_retry_count,
                  p.path_mtu,
                  p.qkey};
      // As Linux: the REP's answer is what the queue pair gets.
      id->responder_resources = p.responder_resources;
      id->initiator_depth = p.initiator_depth;
      FillConn(p, 196, &r.param.conn);
      Queue(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &r);
      return;
    case shm::kCmEstablished:
      if (id->qp_type == IBV_QPT_UD) {
        FillUd(p, 136, id->dst_ip, &r.param.ud);
      }
      Queue(id, RDMA_CM_EVENT_ESTABLISHED, 0, &r);
      return;
    case shm::kCmRejected:
      if (id->qp_type == IBV_QPT_UD) {
        FillUd(p, 136, id->dst_ip, &r.param.ud);
      } else {
        FillConn(p, 148, &r.param.conn);
      }
      Queue(id, RDMA_CM_EVENT_REJECTED, p.reason, &r);
      return;
    case shm::kCmUnreachable:
      if (id->qp_type == IBV_QPT_UD) FillUd(p, 136, id->dst_ip, &r.param.ud);
      Queue(id, RDMA_CM_EVENT_UNREACHABLE, e.status, &r);
      return;
    case shm::kCmConnectError:
      Queue(id, RDMA_CM_EVENT_CONNECT_ERROR, e.status);
      return;
    case shm::kCmDisconnected:
      Queue(id, RDMA_CM_EVENT_DISCONNECTED, e.status);
      return;
    case shm::kCmTimewaitExit:
      Queue(id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0);
      return;
    default:
      return;
  }
}

}  // namespace
}  // namespace rdmaplane::verbs::ucma

using rdmaplane::verbs::ucma::Ucma;

namespace {

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

bool IsCmPath(const char* path) {
  return path != nullptr &&
         std::strcmp(path, rdmaplane::verbs::ucma::kCmPath) == 0;
}

}  // namespace

extern "C" int open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & (O_CREAT | O_TMPFILE)) != 0) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  if (IsCmPath(path)) return Ucma::Get().Open(flags);
  static const auto next = Next<int (*)(const char*, int, ...)>("open");
  return next(path, flags, mode);
}

extern "C" int fstat(int fd, struct stat* st) {
  if (Ucma::Get().IsChannel(fd)) {
    std::memset(st, 0, sizeof(*st));
    st->st_mode = S_IFCHR | 0666;
    st->st_nlink = 1;
    st->st_rdev = makedev(rdmaplane::verbs::ucma::kMiscMajor,
                          rdmaplane::verbs::ucma::kRdmaCmMinor);
    st->st_blksize = 4096;
    return 0;
  }
  return static_cast<int>(syscall(SYS_newfstatat, fd, "", st, AT_EMPTY_PATH));
}

extern "C" ssize_t write(int fd, const void* buf, size_t len) {
  if (Ucma::Get().IsChannel(fd)) return Ucma::Get().Write(fd, buf, len);
  static const auto next = Next<ssize_t (*)(int, const void*, size_t)>("write");
  return next(fd, buf, len);
}

extern "C" int close(int fd) {
  if (Ucma::Get().IsChannel(fd)) Ucma::Get().Close(fd);
  static const auto next = Next<int (*)(int)>("close");
  return next(fd);
}

extern "C" int socket(int domain, int type, int protocol) {
  if (domain == AF_NETLINK &&
      protocol == rdmaplane::verbs::ucma::kNetlinkRdma) {
    errno = EPROTONOSUPPORT;  // as a kernel without the RDMA stack
    return -1;
  }
  static const auto next = Next<int (*)(int, int, int)>("socket");
  return next(domain, type, protocol);
}
