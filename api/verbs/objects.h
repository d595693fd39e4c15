// The verbs front end: the libibverbs entry points RDMA applications call,
// served by rdmaplaned through librdmaplane's client (api/client.h). An
// application reaches it through LD_PRELOAD (rdmaplane-run): its ibv_*
// calls bind here before libibverbs, and the inline verbs of
// <infiniband/verbs.h> (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq, ...)
// go through the context's ops table, filled here. DPDK is never linked.
//
// One device per daemon: rdmaplane0 is the daemon at $RDMAPLANE_SOCKET (or
// at the default socket); a list there, separated by ':', names several
// daemons, rdmaplane0, rdmaplane1, ... in its order. What is served and
// what is refused (with which errno) is in docs/verbs.md.
//
// Memory: ibv_reg_mr moves the application's pages onto shared memory at
// the same addresses (Client::ShareMemory), registers them for local use
// and, with remote access, in the protection domain, whose queue pairs all
// serve that rkey.
//
// Work requests: a queue pair is one of the session's connections,
// connected out of band (RTR: the peer's address, QPN and PSN; RTS: our
// PSN). Each send work request is one native request with its own
// rdp_overlapped in the queue pair's slot ring; an unsignaled one is posted
// as a silent success. Completion queues gather the completions of their
// queue pairs as ibv_wc.
//
// This header: what stands behind each handle an application holds, and
// the helpers the files serving them share; internal to //api/verbs.
//
// Files, by object: device.cc (devices, contexts, queries, async events),
// memory.cc (protection domains and memory regions), completion_queue.cc
// (CQs, completion channels and their notifier), queue_pair.cc (creating,
// modifying, querying and destroying queue pairs), post.cc (posting work
// requests and gathering their completions), post_builder.cc (the
// ibv_wr_* post path of extended queue pairs), shared_receive_queue.cc
// (SRQs), address_handle.cc (UD address handles), unserved.cc (entry points
// refused with the errno docs/verbs.md gives), convert.cc (errnos, MTUs,
// GIDs).
//
// Thread-safety: as libibverbs promises, calls may come from any thread.
// Locks, always taken in this order (never the reverse):
//   1. Context::mu      control calls of one context (PD, MR, QP changes)
//   2. Channel::mu      a completion channel's CQ list and events
//   3. Cq::mu           a CQ's queue-pair lists, arming and event counts
//   4. Qp::mu           a queue pair's posts, completions and state
//   5. Srq::mu          a shared receive queue's posts and counts
//   6. Context::async_mu  the context's asynchronous events
// Two locks are held by the application's thread between its calls, each
// taken while it holds none of the above, and each before them: a
// queue pair's WrBatch::mu from ibv_wr_start to ibv_wr_complete or
// ibv_wr_abort, and an extended CQ's Cq::poll_mu from ibv_start_poll to
// ibv_end_poll. Inside either region the application may call any verb
// (poll inside a post region, post inside a poll region), as with a
// hardware provider.
// A notifier thread waiting on a queue pair's doorbell holds none of them
// (Qp::waiters keeps the queue pair alive meanwhile).
#ifndef RDMAPLANE_API_VERBS_OBJECTS_H_
#define RDMAPLANE_API_VERBS_OBJECTS_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "dataplane/rc/qp_state.h"

// These are macros in <infiniband/verbs.h> (over inline wrappers); the
// exported functions carry the plain names.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace rdmaplane::verbs {

// A software device has no IEEE OUI of its own: 0xFFFFFF, as Linux's
// soft-RoCE reports, is no vendor with a driver of its own in perftest or
// UCX (Mellanox's 0x02c9 switches them to mlx5 direct verbs), and not 0,
// which no device reports.
inline constexpr uint32_t kVendorId = 0xFFFFFF;
inline constexpr uint32_t kVendorPartId = 0x0001;
inline constexpr uint32_t kMaxInline = 256;
// Completion queues live in the front end (lists the completions of their
// queue pairs are gathered into; they never overflow): what bounds them is
// this process's memory, not the daemon. The limits reported are those a
// device of this kind offers.
inline constexpr int kMaxCq = 65536;
inline constexpr int kMaxCqe = 65535;

struct Device {
  ibv_device dev;  // first: the application holds ibv_device*
  std::string socket;
  // The node GUID the daemon's MAC gave when a context was last opened;
  // 0 before (ibv_get_device_guid then opens one).
  std::atomic<uint64_t> guid{0};
};

// An extended context (verbs_context), as every provider of rdma-core
// makes: the inline verbs of <infiniband/verbs.h> find its extended ops
// (query_device_ex, query_port, create_cq_ex, ...) just before the
// ibv_context the application holds, and fail with EOPNOTSUPP where one is
// not set.
struct Qp;

struct Context {
  verbs_context vctx;  // first: Ctx() finds the Context from its context
  ibv_context& ctx = vctx.context;
  Device* device = nullptr;
  std::unique_ptr<Client> client;
  shm::DeviceInfo info{};
  std::mutex mu;  // control calls
  // Asynchronous events (ibv_get_async_event(3)): raised here, counted on
  // ctx.async_fd (an eventfd the application may poll), taken in order.
  std::mutex async_mu;  // the last lock taken: nothing is locked under it
  std::deque<ibv_async_event> async_events;
  std::condition_variable async_acked;  // an event of a queue pair acked
  bool device_fatal = false;            // raised once
  // Its queue pairs (guarded by mu), which the watcher looks at.
  std::vector<Qp*> qps;
  std::atomic<size_t> qp_count{0};
  std::atomic<int> cq_count{0};  // CQs made, at most kMaxCq
  // Waits on the session's socket: the daemon gone raises
  // IBV_EVENT_DEVICE_FATAL. Every 100 ms it also looks at the port's state
  // word (IBV_EVENT_PORT_ERR and IBV_EVENT_PORT_ACTIVE when the link went
  // down or up) and, while the context has queue pairs, at them, so that a
  // connection the transport ended raises its event even when nobody
  // polls its CQs. Woken through watcher_kick (an eventfd), stopped with
  // watcher_quit too.
  std::thread watcher;
  int watcher_kick = -1;
  uint32_t port_state_seen = 0;  // the watcher's; shm port_state format
  std::atomic<bool> watcher_quit{false};
};

struct Pd {
  ibv_pd pd;
  uint32_t id = 0;     // the daemon's protection domain
  uint32_t users = 0;  // MRs and QPs in it
};

struct Ah {
  ibv_ah ah;
  uint32_t handle = 0;  // the daemon's (kOpCreateAh)
  ibv_ah_attr attr{};
};
Ah* AhOf(ibv_ah* ah);

struct Mr {
  ibv_mr mr;
  unsigned access = 0;  // the ibv_access_flags it was registered with
  uint32_t local_flags = 0;
  uint32_t remote_flags = 0;  // 0: no remote key
};

struct Qp;
struct Channel;

// A shared receive queue: a connection slot of the session whose receive
// ring the queue pairs made with it take receives from (the daemon hands
// each queue pair one as a message needs it), reported on that queue
// pair's completions.
struct Srq {
  ibv_srq srq;
  Context* owner = nullptr;
  Pd* pd = nullptr;
  rdp_conn conn = 0;  // the slot's handle
  std::mutex mu;
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  // Armed limit (ibv_modify_srq IBV_SRQ_LIMIT): when fewer receives than
  // this are left, IBV_EVENT_SRQ_LIMIT_REACHED, once; 0: not armed.
  uint32_t limit = 0;
  // wr_ids of the receives posted, by index modulo id_mask + 1 (twice
  // max_wr: they complete in any order); `posted` counts them, `completed`
  // those reported.
  std::unique_ptr<uint64_t[]> recv_ids;
  uint32_t id_mask = 0;
  uint64_t posted = 0;
  uint64_t completed = 0;
  uint32_t users = 0;  // queue pairs made with it (under Context::mu)
};
Srq* SrqOf(ibv_srq* srq);
// A receive of `s` (index `index`) completed: its wr_id, and the limit
// event if it is due. Caller holds the queue pair's mutex.
uint64_t TakeSharedReceive(Srq* s, uint64_t index);

struct Cq {
  // first: the application holds ibv_cq* (and, for a CQ of
  // ibv_create_cq_ex, ibv_cq_ex*, whose head is an ibv_cq)
  union {
    ibv_cq cq;
    ibv_cq_ex cq_ex;
  };
  Channel* channel = nullptr;
  std::mutex mu;
  std::vector<Qp*> send_qps;  // queue pairs whose sends complete here
  std::vector<Qp*> recv_qps;  // ... whose receives complete here
  bool armed = false;
  bool solicited_only = false;       // armed for solicited and failed ones only
  uint64_t armed_at = 0;             // Gathered() when it was armed
  uint32_t events = 0;               // taken by ibv_get_cq_event
  uint32_t acked = 0;                // events the application acknowledged
  std::condition_variable acked_cv;  // ibv_destroy_cq waits for acks
  // The extended poll (ibv_start_poll ... ibv_end_poll) of a CQ made by
  // ibv_create_cq_ex: one batch at a time holds poll_mu, taken before mu;
  // `current` is the completion the iterator is on.
  std::mutex poll_mu;
  ibv_wc current{};
};

// A completion channel: its eventfd counts the events waiting in
// `events`; a notifier thread raises them for armed CQs (so that the fd
// can be polled, as with a kernel device), and sleeps while none is
// armed.
struct Channel {
  ibv_comp_channel ch;
  std::mutex mu;
  std::vector<Cq*> cqs;
  std::deque<Cq*> events;  // raised, not yet taken by ibv_get_cq_event
  std::condition_variable armed_cv;
  bool stop = false;
  std::thread notifier;
};

// The ibv_wr_* post path of an extended queue pair (ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS): the requests built between
// ibv_wr_start and ibv_wr_complete, which posts them all or none
// (ibv_wr_post(3)). The thread in the critical region holds `mu`
// throughout.
struct WrBatch {
  struct Entry {
    ibv_send_wr wr;
    ibv_sge sge[shm::kMaxSge];
    std::vector<uint8_t> inline_data;  // ibv_wr_set_inline_data*'s copy
  };
  uint64_t send_ops = 0;  // the IBV_QP_EX_WITH_* the queue pair was made for
  std::mutex mu;          // the critical region
  // The thread inside the critical region (a token of its own), or null.
  std::atomic<const void*> owner{nullptr};
  int error = 0;     // the first mistake found while building, or 0
  size_t count = 0;  // entries built (entries[0, count))
  std::vector<Entry> entries;
};

struct Qp {
  // first: the application holds ibv_qp* (and, for an extended queue
  // pair, ibv_qp_ex*, whose head is an ibv_qp)
  union {
    ibv_qp qp;
    ibv_qp_ex qp_ex;
  };
  // Extended queue pairs only (ibv_qp_to_qp_ex finds qp_ex): their
  // ibv_wr_* batch.
  std::unique_ptr<WrBatch> batch;
  Context* owner = nullptr;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  std::mutex mu;  // posts and polls
  rdp_conn conn = 0;
  ibv_qp_cap cap{};
  bool sig_all = false;
  ibv_qp_attr attr{};  // what ibv_query_qp reports
  // Send work requests posted. Each one's record, until its completion is
  // gathered, is librdmaplane's (Client::Tag: its wr_id and completion
  // opcode), which also counts those outstanding (Client::Outstanding).
  uint64_t posted = 0;
  // Inline data: cap.max_inline_data bytes for each of slot_mask + 1 slots
  // (at least cap.max_send_wr), by index: a slot is reused only that many
  // posts later, when at most max_send_wr - 1 requests are outstanding.
  uint32_t slot_mask = 0;
  uint8_t* inline_buf = nullptr;
  uint32_t inline_lkey = 0;
  // Its state: RESET, INIT, RTR, RTS or ERR (a completion failed, or the
  // application moved it there: later ones are flushed). qp.state and
  // attr.qp_state mirror it (SyncState).
  rc::lifecycle::QpLifecycle life{rc::lifecycle::QpType::kRc};
  // Its shared receive queue, or null (its own receives).
  Srq* srq = nullptr;
  // Receives: wr_ids of [rcompleted, rposted), by index modulo
  // recv_mask + 1 (at least cap.max_recv_wr).
  std::unique_ptr<uint64_t[]> recv_ids;
  uint32_t recv_mask = 0;
  uint64_t rposted = 0;
  uint64_t rcompleted = 0;
  // Completions gathered from the daemon, not yet polled; for receives,
  // whether their message asked for a solicited event.
  std::deque<ibv_wc> send_wcs;
  std::deque<ibv_wc> recv_wcs;
  std::deque<bool> recv_solicited;
  // Completions gathered so far, per side ([0] receives, [1] sends): all,
  // and those a solicited-only CQ reports (failed ones, receives of
  // solicited messages). An armed CQ raises an event once these pass what
  // they were when it was armed.
  uint64_t gathered[2] = {0, 0};
  uint64_t gathered_solicited[2] = {0, 0};
  // Its asynchronous events taken by ibv_get_async_event and acknowledged
  // (guarded by the context's async_mu): ibv_destroy_qp waits for the acks.
  uint32_t events_taken = 0;
  uint32_t events_acked = 0;
  // IBV_EVENT_COMM_EST was raised (a message arrived in RTR); a queue pair
  // reset and used again may raise it again.
  bool comm_established = false;
  // EnterError is ending the connection for the application: what Pump
  // sees end is no transport failure (no event).
  bool stopping = false;
  // ibv_get_cq_event's notifier sleeps on this queue pair's doorbell:
  // ibv_destroy_qp waits until it is done.
  std::atomic<int> waiters{0};
};

inline Context* Ctx(ibv_context* c) {
  return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) -
                                    offsetof(verbs_context, context));
}
inline Pd* PdOf(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
inline Cq* CqOf(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
inline Qp* QpOf(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }

// --- Shared helpers (convert.cc) ------------------------------------------

// errno for a failed control call.
int ErrnoOf(const absl::Status& s);

// Prints why a call failed on stderr when RDMAPLANE_VERBS_DEBUG is set.
void ReportFailure(const absl::Status& why);

// Reports a failure: errno set, the library's explanation on stderr when
// RDMAPLANE_VERBS_DEBUG is set.
template <typename T>
T Fail(int err, T value, const absl::Status& why = absl::OkStatus()) {
  if (!why.ok()) ReportFailure(why);
  errno = err;
  return value;
}

uint32_t MtuBytes(ibv_mtu mtu);
ibv_mtu MtuEnum(uint32_t bytes);
// The remote rights in ibv_access_flags `access`, as librdmaplane's access
// flags (RDP_MEM_READ, RDP_MEM_WRITE, shm::kAccessAtomic).
uint32_t RemoteFlagsOf(unsigned access);
// The RoCEv2 GID of an IPv4 address: ::ffff:a.b.c.d.
ibv_gid GidOf(uint32_t ip);
bool Ipv4OfGid(const ibv_gid& g, uint32_t* ip);
// EUI-64 of the data port's MAC, as NICs derive their node GUID.
uint64_t GuidOf(const shm::DeviceInfo& info);

// An eventfd counting events in a queue (a completion channel's, a
// context's async_fd) whose `gone` events were dropped: takes their counts
// back, leaving the rest (never blocking, whatever the fd's mode).
void TakeBackCounts(int fd, uint64_t gone);

// --- Devices (device.cc) ----------------------------------------------------

// Every device this process may see, made once.
const std::vector<Device*>& Devices();
Device* DeviceOf(ibv_device* dev);
// The extended ops of a context (verbs_context's query_port and
// query_device_ex): each fills at most the caller's size.
int QueryPort(ibv_context* context, uint8_t port_num, ibv_port_attr* out,
              size_t out_len);
int QueryDeviceEx(ibv_context* context, const ibv_query_device_ex_input* input,
                  ibv_device_attr_ex* out, size_t out_size);

// Whether an event names a queue pair (element.qp).
bool IsQpEvent(ibv_event_type type);
// Raises an asynchronous event on the context (and wakes its async_fd).
// Caller may hold any lock but async_mu.
void RaiseAsyncEvent(Context* c, const ibv_async_event& event);
// Drops the events of `q` not yet taken, and waits until those taken are
// acknowledged (ibv_destroy_qp).
void ForgetAsyncEvents(Qp* q);
// Starts and stops a context's watcher thread.
void StartWatcher(Context* c);
void StopWatcher(Context* c);
// Wakes the watcher (a queue pair was added).
void KickWatcher(Context* c);

// --- Posting and completions (post.cc) -------------------------------------

int PostSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
// Posts `count` send work requests all or none (ibv_wr_complete): checks
// every one first, and returns its errno if one is refused (nothing is
// posted then). Takes q->mu.
int PostAllOrNone(Qp* q, const ibv_send_wr* wrs, size_t count);
int PostRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// The queue pair's state into qp.state and attr (what the application
// reads, and ibv_query_qp reports).
void SyncState(Qp* q);
// The queue pair goes to ERR (a completion failed, or the connection broke).
void SetError(Qp* q);
ibv_wc MakeWc(const Qp* q, uint64_t wr_id, ibv_wc_opcode opcode,
              ibv_wc_status status, uint32_t bytes);
void AddSendWc(Qp* q, const ibv_wc& wc);
void AddRecvWc(Qp* q, const ibv_wc& wc, bool solicited);
// Receives still posted when the queue pair is in the error state complete
// flushed.
void FlushReceives(Qp* q);
// The send completion of a request librdmaplane ended (`done`, the
// ledger's overlapped structure of a request posted with a Client::Tag):
// flushed when `abandoned` or when q is in ERR.
void AddSendWcOf(Qp* q, const rdp_overlapped& done, bool abandoned);
// Moves what the daemon completed for q into its send_wcs and recv_wcs.
// Caller holds q->mu.
void Pump(Qp* q);
// A connected queue pair still in RTR whose daemon saw its first packet:
// IBV_EVENT_COMM_EST, once (IBA 11.6.3.1; the application typically moves
// it to RTS then). Caller holds q->mu.
void NoticeEstablished(Qp* q);

// --- Queue pairs (queue_pair.cc) --------------------------------------------

// verbs_context's create_qp_ex (ibv_create_qp_ex(3)).
ibv_qp* CreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr);
// The IBV_QP_EX_WITH_* a queue pair of `type` may be made with.
uint64_t SendOpsServed(ibv_qp_type type);
// Makes q an extended queue pair for `send_ops`: its ibv_qp_ex builders
// (post_builder.cc).
void MakeExtended(Qp* q, uint64_t send_ops);

// The queue pair goes to the error state. Caller holds the context's mutex.
void EnterError(Qp* q);
// ... and from there to RESET, reusable. Returns 0 or an errno.
int ResetQp(Qp* q);

// --- Completion queues (completion_queue.cc) --------------------------------

int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc);
// verbs_context's create_cq_ex (ibv_create_cq_ex(3)).
ibv_cq_ex* CreateCqEx(ibv_context* context, ibv_cq_init_attr_ex* attr);
int ReqNotifyCq(ibv_cq* ibcq, int solicited_only);

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);

// --- Memory windows (memory_window.cc) --------------------------------------

ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type);
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);
int DeallocMw(ibv_mw* mw);

}  // namespace rdmaplane::verbs

#endif  // RDMAPLANE_API_VERBS_OBJECTS_H_
