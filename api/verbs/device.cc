// The verbs front end's devices and contexts: one device per daemon
// socket, a context per session with it, the device's and port's
// attributes, GIDs and asynchronous events.
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "api/shm/setup.h"
#include "api/status.h"
#include "api/verbs/objects.h"

namespace rdmaplane::verbs {

// The daemons' sockets: $RDMAPLANE_SOCKET split at ':', or the default.
std::vector<std::string> SocketPaths() {
  const char* env = std::getenv("RDMAPLANE_SOCKET");
  if (env == nullptr || env[0] == '\0') return {shm::DefaultSocketPath()};
  std::vector<std::string> paths;
  std::string rest = env;
  while (true) {
    const size_t colon = rest.find(':');
    if (colon != 0 && !rest.empty()) paths.push_back(rest.substr(0, colon));
    if (colon == std::string::npos) break;
    rest = rest.substr(colon + 1);
  }
  return paths;
}

// Every device this process may see, made once (applications keep the
// ibv_device pointers for the life of the process).
const std::vector<Device*>& Devices() {
  static const std::vector<Device*>* devices = [] {
    auto* v = new std::vector<Device*>();
    for (const std::string& path : SocketPaths()) {
      auto* d = new Device();
      const int i = static_cast<int>(v->size());
      d->dev.node_type = IBV_NODE_CA;
      d->dev.transport_type = IBV_TRANSPORT_IB;
      std::snprintf(d->dev.name, sizeof(d->dev.name), "rdmaplane%d", i);
      std::snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", i);
      d->socket = path;
      std::snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s",
                    path.c_str());
      std::snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s",
                    path.c_str());
      v->push_back(d);
    }
    return v;
  }();
  return *devices;
}

Device* DeviceOf(ibv_device* dev) {
  for (Device* d : Devices()) {
    if (&d->dev == dev) return d;
  }
  return nullptr;
}

int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* out,
              size_t out_len) {
  if (port_num != 1) return EINVAL;
  Context* c = Ctx(context);
  const shm::DeviceInfo& info = c->info;
  // The link as it is now: asked from the daemon (the data port's link is
  // up while its peer is there).
  bool link_up = false;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    auto now = c->client->QueryDevice();
    if (!now.ok()) return ErrnoOf(now.status());
    link_up = now->ip != 0 && now->link_up != 0;
  }
  ibv_port_attr a{};
  a.state = link_up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a.max_mtu = IBV_MTU_4096;
  a.active_mtu = MtuEnum(info.path_mtu);
  a.gid_tbl_len = 1;
  a.port_cap_flags = 0;
  a.max_msg_sz = 1u << 31;
  a.pkey_tbl_len = 1;
  a.lid = 0;
  a.lmc = 0;
  a.max_vl_num = 1;
  a.active_width = 1;                   // 1X
  a.active_speed = 32;                  // EDR: 25 Gb/s per lane
  // LinkUp; Polling (a data port whose peer is not there); Disabled.
  a.phys_state = link_up ? 5 : info.ip != 0 ? 2 : 3;
  a.link_layer = IBV_LINK_LAYER_ETHERNET;
  // An application built against older headers passes a shorter struct.
  std::memcpy(out, &a, std::min(out_len, sizeof(a)));
  return 0;
}

int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* out, size_t out_size) {
  if (input != nullptr && input->comp_mask != 0) return EINVAL;
  if (out_size < sizeof(ibv_device_attr)) return EINVAL;
  ibv_device_attr_ex a{};
  if (int err = ibv_query_device(context, &a.orig_attr); err != 0) return err;
  // No extension is served (no on-demand paging, timestamps, TSO, RSS,
  // tag matching or device memory); one physical port, as phys_port_cnt.
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  std::memcpy(out, &a, std::min(out_size, sizeof(a)));
  return 0;
}

bool IsQpEvent(ibv_event_type type) {
  switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return true;
    default:
      return false;
  }
}

void RaiseAsyncEvent(Context* c, const ibv_async_event& event) {
  std::lock_guard<std::mutex> lock(c->async_mu);
  if (event.event_type == IBV_EVENT_DEVICE_FATAL) {
    if (c->device_fatal) return;
    c->device_fatal = true;
  }
  c->async_events.push_back(event);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(c->ctx.async_fd, &one, sizeof(one));
}

void ForgetAsyncEvents(Qp* q) {
  Context* c = q->owner;
  std::unique_lock<std::mutex> lock(c->async_mu);
  auto& events = c->async_events;
  const size_t before = events.size();
  events.erase(std::remove_if(events.begin(), events.end(),
                              [q](const ibv_async_event& e) {
                                return IsQpEvent(e.event_type) &&
                                       e.element.qp == &q->qp;
                              }),
               events.end());
  // One count on the fd each: take them back.
  TakeBackCounts(c->ctx.async_fd, before - events.size());
  // ibv_destroy_qp(3): every event taken must be acknowledged first.
  c->async_acked.wait(lock,
                      [q] { return q->events_acked >= q->events_taken; });
}

// The port's link changed since the watcher last looked: IBV_EVENT_PORT_ERR
// when it went down, IBV_EVENT_PORT_ACTIVE when it came up, in order; of
// many changes since, the last two.
void RaisePortEvents(Context* c) {
  const uint32_t now = c->client->PortState();
  const uint32_t seen = c->port_state_seen;
  if (now == seen) return;
  c->port_state_seen = now;
  const uint32_t changes = std::min<uint32_t>((now >> 1) - (seen >> 1), 2);
  for (uint32_t i = changes; i > 0; --i) {
    // The state after the change i - 1 changes before the last one.
    const bool up = ((now & 1) ^ ((i - 1) & 1)) != 0;
    ibv_async_event event{};
    event.event_type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    event.element.port_num = 1;
    RaiseAsyncEvent(c, event);
  }
}

// The watcher: the session's socket hangs up when the daemon is gone; that
// is IBV_EVENT_DEVICE_FATAL. Sleeps in poll(2) until then, or until the
// context closes, waking every 100 ms to look at the port's state and, with
// queue pairs, to gather what the transport ended (Pump raises their
// events) and to say when one in RTR received its first packet.
void Watch(Context* c) {
  constexpr int kLookMs = 100;
  // POLLRDHUP, not POLLIN: the client reads setup answers on the socket
  // (arenas it hands over), so data there says nothing; the daemon's end
  // shutting down does.
  pollfd fds[2] = {{c->client->session_fd(), POLLRDHUP, 0},
                   {c->watcher_kick, POLLIN, 0}};
  while (!c->watcher_quit.load()) {
    const int n = poll(fds, 2, kLookMs);
    if (n < 0 && errno != EINTR) return;
    if (n > 0 && fds[1].revents != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = read(c->watcher_kick, &count, sizeof(count));
      continue;  // a queue pair came, or the context closes
    }
    if (n > 0 && (fds[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      ibv_async_event event{};
      event.event_type = IBV_EVENT_DEVICE_FATAL;
      RaiseAsyncEvent(c, event);
      return;
    }
    RaisePortEvents(c);
    if (c->qp_count.load(std::memory_order_relaxed) == 0) continue;
    std::lock_guard<std::mutex> lock(c->mu);
    for (Qp* q : c->qps) {
      std::lock_guard<std::mutex> qp_lock(q->mu);
      if (q->conn != 0 && !q->life.ShouldFlush() &&
          c->client->ConnectionEnded(q->conn)) {
        Pump(q);
      }
      // Whether or not the application polls its CQ.
      NoticeEstablished(q);
    }
  }
}

void KickWatcher(Context* c) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(c->watcher_kick, &one, sizeof(one));
}

void StartWatcher(Context* c) {
  c->port_state_seen = c->client->PortState();
  c->watcher_kick = eventfd(0, EFD_CLOEXEC);
  if (c->watcher_kick >= 0) c->watcher = std::thread(Watch, c);
}

void StopWatcher(Context* c) {
  if (c->watcher_kick < 0) return;
  c->watcher_quit.store(true);
  KickWatcher(c);
  if (c->watcher.joinable()) c->watcher.join();
  close(c->watcher_kick);
  c->watcher_kick = -1;
}

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

// --- Devices -------------------------------------------------------------

// The devices whose daemon's socket is there (a daemon that does not run
// shows no device).
ibv_device** ibv_get_device_list(int* num_devices) {
  const std::vector<Device*>& all = Devices();
  auto** list =
      static_cast<ibv_device**>(calloc(all.size() + 1, sizeof(ibv_device*)));
  if (list == nullptr) return Fail<ibv_device**>(ENOMEM, nullptr);
  int n = 0;
  for (Device* d : all) {
    struct stat st;
    if (stat(d->socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) {
      list[n++] = &d->dev;
    }
  }
  if (num_devices != nullptr) *num_devices = n;
  return list;
}

void ibv_free_device_list(ibv_device** list) { free(list); }

const char* ibv_get_device_name(ibv_device* device) {
  return device == nullptr ? nullptr : device->name;
}

__be64 ibv_get_device_guid(ibv_device* device) {
  // The GUID comes from the daemon's MAC: known once a context was opened,
  // else asked of the daemon.
  Device* d = DeviceOf(device);
  if (d == nullptr) return Fail<__be64>(ENODEV, 0);
  if (const uint64_t known = d->guid.load(std::memory_order_relaxed)) {
    return known;
  }
  ibv_context* ctx = ibv_open_device(device);
  if (ctx == nullptr) return 0;
  const uint64_t guid = GuidOf(Ctx(ctx)->info);
  ibv_close_device(ctx);
  return guid;
}

ibv_context* ibv_open_device(ibv_device* device) {
  Device* d = DeviceOf(device);
  if (d == nullptr) return Fail<ibv_context*>(ENODEV, nullptr);
  ClientOptions options;
  options.socket_path = d->socket;
  auto client = Client::Open(options);
  if (!client.ok()) {
    return Fail<ibv_context*>(ErrnoOf(client.status()), nullptr,
                              client.status());
  }
  auto info = (*client)->QueryDevice();
  if (!info.ok()) {
    return Fail<ibv_context*>(ErrnoOf(info.status()), nullptr, info.status());
  }
  auto* c = new Context();
  c->device = d;
  c->client = std::move(*client);
  c->info = *info;
  d->guid.store(GuidOf(c->info), std::memory_order_relaxed);
  c->ctx.device = device;
  // There is no kernel device to send commands to; a descriptor of its own
  // all the same, as programs dup it (rdma-core's tests, for
  // ibv_import_device, which then fails with EOPNOTSUPP).
  c->ctx.cmd_fd = eventfd(0, EFD_CLOEXEC);
  // Counts the asynchronous events raised and not taken (RaiseAsyncEvent).
  c->ctx.async_fd = eventfd(0, EFD_CLOEXEC);
  c->ctx.num_comp_vectors = 1;
  pthread_mutex_init(&c->ctx.mutex, nullptr);
  c->ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  c->vctx.sz = sizeof(verbs_context);
  c->vctx.query_device_ex = QueryDeviceEx;
  c->vctx.query_port = QueryPort;
  c->vctx.create_cq_ex = CreateCqEx;
  c->vctx.create_qp_ex = CreateQpEx;
  ibv_context_ops& ops = c->ctx.ops;
  ops.poll_cq = PollCq;
  ops.req_notify_cq = ReqNotifyCq;
  ops.post_send = PostSend;
  ops.post_recv = PostRecv;
  ops.post_srq_recv = PostSrqRecv;
  ops.alloc_mw = AllocMw;
  ops.bind_mw = BindMw;
  ops.dealloc_mw = DeallocMw;
  StartWatcher(c);
  return &c->ctx;
}

int ibv_close_device(ibv_context* context) {
  Context* c = Ctx(context);
  StopWatcher(c);
  if (c->ctx.async_fd >= 0) close(c->ctx.async_fd);
  if (c->ctx.cmd_fd >= 0) close(c->ctx.cmd_fd);
  pthread_mutex_destroy(&c->ctx.mutex);
  delete c;  // the session ends: the daemon lets go of everything in it
  return 0;
}

int ibv_query_device(ibv_context* context, ibv_device_attr* a) {
  const shm::DeviceInfo& info = Ctx(context)->info;
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "rdmaplane 1.0");
  a->node_guid = GuidOf(info);
  a->sys_image_guid = a->node_guid;
  a->max_mr_size = 1ull << 31;
  a->page_size_cap = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  a->vendor_id = kVendorId;
  a->vendor_part_id = kVendorPartId;
  a->hw_ver = 1;
  a->max_qp = static_cast<int>(info.max_qps);
  a->max_qp_wr = static_cast<int>(info.max_qp_wr);
  // Memory windows of type 1 and type 2B (a type 2 window is bound to a
  // queue pair and reached through it only), as rxe: never 2A as well
  // (o10-37.2.31).
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW |
                        IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  a->max_sge = info.max_sge;
  a->max_sge_rd = info.max_sge;
  a->max_cq = kMaxCq;
  a->max_cqe = kMaxCqe;
  a->max_mr = static_cast<int>(info.max_mrs);
  a->max_pd = static_cast<int>(info.max_mrs);
  a->max_mw = static_cast<int>(info.max_mrs);
  a->max_qp_rd_atom = info.max_rd_atomic;
  a->max_ah = static_cast<int>(shm::kMaxAddressHandles);
  // A shared receive queue is a connection slot whose receive ring holds up
  // to max_qp_wr requests.
  a->max_srq = static_cast<int>(info.max_qps);
  a->max_srq_wr = static_cast<int>(info.max_qp_wr);
  a->max_srq_sge = info.max_sge;
  a->max_res_rd_atom = info.max_rd_atomic * static_cast<int>(info.max_qps);
  a->max_qp_init_rd_atom = info.max_rd_atomic;
  // Atomics run as one atomic instruction on the target word: atomic
  // with respect to every queue pair of every daemon reaching that memory
  // through this one, and to its CPUs.
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  return 0;
}

int ibv_query_port(ibv_context* context, uint8_t port_num,
                   struct _compat_ibv_port_attr* compat) {
  // Callers pass a whole ibv_port_attr (verbs.h's inline ibv_query_port
  // when a context has no query_port op; ours has, but a caller may bind
  // this function directly).
  return QueryPort(context, port_num, reinterpret_cast<ibv_port_attr*>(compat),
                   sizeof(ibv_port_attr));
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index,
                  ibv_gid* gid) {
  if (port_num != 1 || index != 0) return -1;
  *gid = GidOf(Ctx(context)->info.ip);
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num,
                      uint32_t gid_index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  if (port_num != 1 || gid_index != 0) return ENODATA;
  std::memset(entry, 0, sizeof(*entry));
  entry->gid = GidOf(Ctx(context)->info.ip);
  entry->gid_index = 0;
  entry->port_num = 1;
  entry->gid_type = IBV_GID_TYPE_ROCE_V2;
  return 0;
}

// rdma-core's driver.h: enum ibv_gid_type_sysfs, 1 is RoCE v2.
int ibv_query_gid_type(ibv_context*, uint8_t port_num, unsigned int index,
                       int* type) {
  if (port_num != 1 || index != 0) return -1;
  *type = 1;
  return 0;
}

int ibv_query_pkey(ibv_context*, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) return -1;
  *pkey = htons(0xFFFF);
  return 0;
}

int ibv_get_pkey_index(ibv_context*, uint8_t port_num, __be16 pkey) {
  return port_num == 1 && pkey == htons(0xFFFF) ? 0 : -1;
}

int ibv_get_device_index(ibv_device* device) {
  const std::vector<Device*>& all = Devices();
  for (size_t i = 0; i < all.size(); ++i) {
    if (&all[i]->dev == device) return static_cast<int>(i);
  }
  return -1;
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                             size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;
  return _ibv_query_gid_ex(context, 1, 0, entries, 0, entry_size) == 0 ? 1
                                                                       : -EIO;
}

// Blocks until an event is raised (ibv_get_async_event(3)); with
// O_NONBLOCK set on async_fd, fails with EAGAIN when there is none.
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  Context* c = Ctx(context);
  uint64_t count = 0;
  while (read(context->async_fd, &count, sizeof(count)) != sizeof(count)) {
    if (errno != EINTR) return -1;
  }
  std::lock_guard<std::mutex> lock(c->async_mu);
  // An eventfd read takes the whole count: give back all but one.
  if (count > 1) {
    const uint64_t rest = count - 1;
    [[maybe_unused]] ssize_t n = write(context->async_fd, &rest, sizeof(rest));
  }
  if (c->async_events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  *event = c->async_events.front();
  c->async_events.pop_front();
  if (IsQpEvent(event->event_type)) ++QpOf(event->element.qp)->events_taken;
  return 0;
}

void ibv_ack_async_event(ibv_async_event* event) {
  if (event == nullptr || !IsQpEvent(event->event_type)) return;
  Context* c = Ctx(event->element.qp->context);
  std::lock_guard<std::mutex> lock(c->async_mu);
  ++QpOf(event->element.qp)->events_acked;
  c->async_acked.notify_all();
}

}  // extern "C"
