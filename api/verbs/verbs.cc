// The verbs front end: the libibverbs entry points RDMA applications call,
// served by rdmaplaned through librdmaplane's client (api/client.h). An
// application reaches it through LD_PRELOAD (rdmaplane-run): its ibv_*
// calls bind here before libibverbs, and the inline verbs of
// <infiniband/verbs.h> (ibv_post_send, ibv_poll_cq, ibv_req_notify_cq, ...)
// go through the context's ops table, filled here. DPDK is never linked.
//
// One device per daemon: rdmaplane0 is the daemon at $RDMAPLANE_SOCKET (or
// at the default socket); a list there, separated by ':', names several
// daemons, rdmaplane0, rdmaplane1, ... in its order. What is served and what is refused (with which
// errno) is in docs/verbs.md.
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
// Thread-safety: as libibverbs promises, calls may come from any thread; a
// queue pair's posts and polls serialize on its mutex, control calls on the
// context's.
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <infiniband/verbs.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/shm/setup.h"
#include "api/status.h"
#include "api/verbs/work_request.h"

// These are macros in <infiniband/verbs.h> (over inline wrappers); the
// exported functions carry the plain names.
#undef ibv_get_device_list
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace rdmaplane::verbs {
namespace {

// Not a vendor with a driver of its own in perftest (Mellanox's 0x02c9
// switches it to mlx5 direct verbs).
constexpr uint32_t kVendorId = 0x000000;
constexpr uint32_t kVendorPartId = 0x0001;
// Send work requests one queue pair tracks at once (the client's ledger);
// a slot is reused only after this many later posts.
constexpr uint32_t kSlots = 1024;
constexpr uint32_t kMaxInline = 256;

struct Device {
  ibv_device dev;  // first: the application holds ibv_device*
  std::string socket;
};

struct Context {
  ibv_context ctx;  // first
  Device* device = nullptr;
  std::unique_ptr<Client> client;
  shm::DeviceInfo info{};
  std::mutex mu;  // control calls
};

struct Pd {
  ibv_pd pd;
  uint32_t id = 0;  // the daemon's protection domain
  uint32_t users = 0;  // MRs and QPs in it
};

struct Mr {
  ibv_mr mr;
  uint32_t local_flags = 0;
  uint32_t remote_flags = 0;  // 0: no remote key
};

struct Qp;
struct Channel;

struct Cq {
  ibv_cq cq;
  Channel* channel = nullptr;
  std::mutex mu;
  std::vector<Qp*> send_qps;  // queue pairs whose sends complete here
  std::vector<Qp*> recv_qps;  // ... whose receives complete here
  bool armed = false;
  bool solicited_only = false;  // armed for solicited and failed ones only
  uint64_t armed_at = 0;        // Gathered() when it was armed
  uint32_t events = 0;  // taken by ibv_get_cq_event
  uint32_t acked = 0;   // events the application acknowledged
  std::condition_variable acked_cv;  // ibv_destroy_cq waits for acks
  uint32_t empty_polls = 0;
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

struct Slot {
  rdp_overlapped ov;
  uint64_t wr_id = 0;
  ibv_wc_opcode opcode = IBV_WC_RDMA_WRITE;
  uint32_t length = 0;
};

struct Qp {
  ibv_qp qp;
  Context* owner = nullptr;
  Pd* pd = nullptr;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  std::mutex mu;  // posts and polls
  rdp_conn conn = 0;
  ibv_qp_cap cap{};
  bool sig_all = false;
  ibv_qp_attr attr{};  // what ibv_query_qp reports
  std::unique_ptr<Slot[]> slots;
  uint64_t posted = 0;     // send work requests posted
  uint64_t completed = 0;  // every one before this index has completed
  uint8_t* inline_buf = nullptr;  // kSlots x cap.max_inline_data
  uint32_t inline_lkey = 0;
  bool failed = false;  // a completion failed: later ones are flushed
  // Receives: wr_ids of [rcompleted, rposted), by index modulo kSlots.
  std::unique_ptr<uint64_t[]> recv_ids;
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
  // ibv_get_cq_event's notifier sleeps on this queue pair's doorbell:
  // ibv_destroy_qp waits until it is done.
  std::atomic<int> waiters{0};
};

Context* Ctx(ibv_context* c) { return reinterpret_cast<Context*>(c); }
Pd* PdOf(ibv_pd* p) { return reinterpret_cast<Pd*>(p); }
Cq* CqOf(ibv_cq* c) { return reinterpret_cast<Cq*>(c); }
Qp* QpOf(ibv_qp* q) { return reinterpret_cast<Qp*>(q); }

// errno for a failed control call.
int ErrnoOf(const absl::Status& s) {
  switch (RdpCode(s)) {
    case RDP_ERR_INVALID:
      return EINVAL;
    case RDP_ERR_FAULT:
      return EFAULT;
    case RDP_ERR_NO_BUFFERS:
    case RDP_ERR_LIMIT:
      return ENOMEM;
    case RDP_ERR_PERMISSION:
      return EPERM;
    case RDP_ERR_TIMEOUT:
      return ETIMEDOUT;
    case RDP_ERR_NET_DOWN:
      return ENETDOWN;
    default:
      return EIO;
  }
}

// Reports a failure: errno set, the library's explanation on stderr when
// RDMAPLANE_VERBS_DEBUG is set.
template <typename T>
T Fail(int err, T value, const absl::Status& why = absl::OkStatus()) {
  const char* debug = std::getenv("RDMAPLANE_VERBS_DEBUG");
  if (!why.ok() && debug != nullptr && debug[0] != '\0' &&
      std::strcmp(debug, "0") != 0) {
    std::fprintf(stderr, "rdmaplane verbs: %s\n",
                 std::string(why.message()).c_str());
  }
  errno = err;
  return value;
}

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

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 0;
}

ibv_mtu MtuEnum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

// The RoCEv2 GID of an IPv4 address: ::ffff:a.b.c.d.
ibv_gid GidOf(uint32_t ip) {
  ibv_gid g{};
  g.raw[10] = 0xFF;
  g.raw[11] = 0xFF;
  const uint32_t be = htonl(ip);
  std::memcpy(&g.raw[12], &be, 4);
  return g;
}

bool Ipv4OfGid(const ibv_gid& g, uint32_t* ip) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0,
                                          0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(g.raw, kPrefix, sizeof(kPrefix)) != 0) return false;
  uint32_t be;
  std::memcpy(&be, &g.raw[12], 4);
  *ip = ntohl(be);
  return *ip != 0;
}

// EUI-64 of the data port's MAC, as NICs derive their node GUID.
uint64_t GuidOf(const shm::DeviceInfo& info) {
  const uint8_t* m = info.mac;
  const uint8_t eui[8] = {static_cast<uint8_t>(m[0] ^ 2), m[1], m[2], 0xFF,
                          0xFE, m[3], m[4], m[5]};
  uint64_t guid;
  std::memcpy(&guid, eui, 8);
  return guid;  // network order, as ibv_device_attr holds it
}

// The work completion status of a send request that ended with `status`
// and the transport's `detail` (shm::CompletionDetail).
ibv_wc_status SendStatusOf(int status, uint32_t detail) {
  switch (detail) {
    case shm::kDetailRetryExceeded:
      return IBV_WC_RETRY_EXC_ERR;
    case shm::kDetailRnrRetryExceeded:
      return IBV_WC_RNR_RETRY_EXC_ERR;
    case shm::kDetailRemoteAccess:
      return IBV_WC_REM_ACCESS_ERR;
    case shm::kDetailRemoteInvalid:
      return IBV_WC_REM_INV_REQ_ERR;
    case shm::kDetailRemoteOperational:
      return IBV_WC_REM_OP_ERR;
    case shm::kDetailBadResponse:
      return IBV_WC_BAD_RESP_ERR;
    default:
      break;
  }
  switch (status) {
    case RDP_OK:
      return IBV_WC_SUCCESS;
    case RDP_ERR_FAULT:
      // The daemon refused a local buffer: a key or range the local
      // registration does not cover.
      return IBV_WC_LOC_PROT_ERR;
    case RDP_ERR_INVALID:
      return IBV_WC_LOC_QP_OP_ERR;
    case RDP_ERR_CONN_ABORTED:
    case RDP_ERR_NET_DOWN:
      return IBV_WC_RETRY_EXC_ERR;
    default:
      return IBV_WC_WR_FLUSH_ERR;
  }
}

// ... of a receive request.
ibv_wc_status RecvStatusOf(int status) {
  switch (status) {
    case RDP_OK:
      return IBV_WC_SUCCESS;
    case RDP_ERR_NO_BUFFERS:
      return IBV_WC_LOC_LEN_ERR;  // the message did not fit
    case RDP_ERR_FAULT:
      return IBV_WC_LOC_PROT_ERR;
    case RDP_ERR_INVALID:
      return IBV_WC_LOC_QP_OP_ERR;
    default:
      return IBV_WC_WR_FLUSH_ERR;
  }
}

void SetError(Qp* q) {
  q->failed = true;
  q->qp.state = IBV_QPS_ERR;
  q->attr.qp_state = IBV_QPS_ERR;
  q->attr.cur_qp_state = IBV_QPS_ERR;
}

ibv_wc MakeWc(const Qp* q, uint64_t wr_id, ibv_wc_opcode opcode,
              ibv_wc_status status, uint32_t bytes) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.opcode = opcode;
  wc.status = status;
  wc.byte_len = status == IBV_WC_SUCCESS ? bytes : 0;
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->attr.dest_qp_num;
  return wc;
}

void AddSendWc(Qp* q, const ibv_wc& wc) {
  q->send_wcs.push_back(wc);
  ++q->gathered[1];
  if (wc.status != IBV_WC_SUCCESS) ++q->gathered_solicited[1];
}

void AddRecvWc(Qp* q, const ibv_wc& wc, bool solicited) {
  q->recv_wcs.push_back(wc);
  q->recv_solicited.push_back(solicited);
  ++q->gathered[0];
  if (solicited || wc.status != IBV_WC_SUCCESS) ++q->gathered_solicited[0];
}

// Receives still posted when the queue pair is in the error state complete
// flushed (the daemon ends them without a word).
void FlushReceives(Qp* q) {
  for (; q->rcompleted < q->rposted; ++q->rcompleted) {
    AddRecvWc(q,
              MakeWc(q, q->recv_ids[q->rcompleted % kSlots], IBV_WC_RECV,
                     IBV_WC_WR_FLUSH_ERR, 0),
              false);
  }
}

// Moves what the daemon completed for qp into its send_wcs and recv_wcs.
// Caller holds q->mu.
void Pump(Qp* q) {
  if (q->conn == 0) return;
  Client* client = q->owner->client.get();
  // Whether the daemon is done with the connection (it broke: the peer's
  // NAK, retries exhausted, our responder refused a request), read before
  // draining: everything it completed before is then in the rings, and a
  // failed request shows its own status before the rest are flushed.
  const bool ended = client->ConnectionEnded(q->conn);
  rdp_overlapped* done[64];
  while (true) {
    const int n = client->Poll(q->conn, done, 64);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t index = done[i]->context;
      const Slot& s = q->slots[index % kSlots];
      const ibv_wc_status status =
          q->failed ? IBV_WC_WR_FLUSH_ERR
                    : SendStatusOf(done[i]->status, done[i]->internal[0]);
      if (status != IBV_WC_SUCCESS) SetError(q);
      AddSendWc(q, MakeWc(q, s.wr_id, s.opcode, status, done[i]->bytes));
      q->completed = std::max(q->completed, index + 1);
    }
    if (n < 64) break;
  }
  shm::CompletionEntry got[64];
  while (true) {
    const int n = client->TakeReceived(q->conn, got, 64);
    for (int i = 0; i < n; ++i) {
      const uint64_t index = got[i].wr_id;
      if (index < q->rcompleted || index >= q->rposted) continue;  // not ours
      const ibv_wc_status status =
          q->failed ? IBV_WC_WR_FLUSH_ERR : RecvStatusOf(got[i].status);
      if (status != IBV_WC_SUCCESS) SetError(q);
      ibv_wc wc = MakeWc(q, q->recv_ids[index % kSlots],
                         got[i].op == shm::kRecvWriteImm
                             ? IBV_WC_RECV_RDMA_WITH_IMM
                             : IBV_WC_RECV,
                         status, got[i].byte_len);
      if (status == IBV_WC_SUCCESS && (got[i].flags & shm::kCompletionImm)) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data = got[i].imm;
      }
      AddRecvWc(q, wc, (got[i].flags & shm::kCompletionSolicited) != 0);
      q->rcompleted = index + 1;
    }
    if (n < 64) break;
  }
  if (ended) SetError(q);
  if (q->failed) FlushReceives(q);
}

// The queue pair goes to the error state (ibv_modify_qp to ERR): its
// connection ends, and every request not yet reported completes, those
// the daemon had finished as they finished, the rest as flushed. Caller
// holds the context's mutex.
void EnterError(Qp* q) {
  std::lock_guard<std::mutex> lock(q->mu);
  Pump(q);
  SetError(q);
  if (q->conn == 0) return;
  (void)q->owner->client->Disconnect(q->conn);
  q->conn = 0;
  for (uint64_t i = q->completed; i < q->posted; ++i) {
    const Slot& s = q->slots[i % kSlots];
    const int status = __atomic_load_n(&s.ov.status, __ATOMIC_ACQUIRE);
    if (status == RDP_PENDING) continue;  // an unsignaled one that succeeded
    AddSendWc(q, MakeWc(q, s.wr_id, s.opcode,
                        status == RDP_OK ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR,
                        s.ov.bytes));
  }
  q->completed = q->posted;
  FlushReceives(q);
}

// Takes up to `max` of the completions of queue pairs `qps` (their send
// or receive side) into wc; gathers from the daemon what is not there yet.
int TakeCompletions(const std::vector<Qp*>& qps, bool sends, int max,
                    ibv_wc* wc) {
  int n = 0;
  for (Qp* q : qps) {
    if (n >= max) break;
    std::lock_guard<std::mutex> lock(q->mu);
    std::deque<ibv_wc>& wcs = sends ? q->send_wcs : q->recv_wcs;
    if (wcs.size() < static_cast<size_t>(max - n)) Pump(q);
    while (n < max && !wcs.empty()) {
      wc[n++] = wcs.front();
      wcs.pop_front();
      if (!sends) q->recv_solicited.pop_front();
    }
  }
  return n;
}

// The completions gathered for an armed CQ so far (see Qp::gathered), from
// the daemon's rings now. Caller holds the CQ's mutex.
uint64_t Gathered(Cq* cq) {
  uint64_t n = 0;
  for (const auto* qps : {&cq->recv_qps, &cq->send_qps}) {
    const int side = qps == &cq->send_qps ? 1 : 0;
    for (Qp* q : *qps) {
      std::lock_guard<std::mutex> lock(q->mu);
      Pump(q);
      n += cq->solicited_only ? q->gathered_solicited[side]
                              : q->gathered[side];
    }
  }
  return n;
}

// Empty polls of a CQ in a row after which ibv_poll_cq gives the CPU away
// once: RDMAPLANE_VERBS_YIELD_AFTER, a number (0: never), default 1. An
// application that waits by polling often shares its CPU with the engine
// that would complete its request (two daemons and two perftest ends on two
// CPUs): yielding at once lets that engine run, where 64 polls in a row
// (about 10 us) doubled ib_write_lat's typical over memif. With a CPU to
// itself the yield returns at once.
uint32_t YieldAfter() {
  const char* env = std::getenv("RDMAPLANE_VERBS_YIELD_AFTER");
  if (env == nullptr || env[0] == '\0') return 1;
  char* end = nullptr;
  const int saved_errno = errno;  // the application's
  errno = 0;
  const unsigned long n = std::strtoul(env, &end, 10);
  const bool bad =
      errno != 0 || *end != '\0' || env[0] == '-' || n > UINT32_MAX;
  errno = saved_errno;
  if (bad) {
    std::fprintf(stderr,
                 "rdmaplane verbs: RDMAPLANE_VERBS_YIELD_AFTER=%s is not a "
                 "number from 0 to %u; yielding after every empty poll\n",
                 env, UINT32_MAX);
    return 1;
  }
  return static_cast<uint32_t>(n);
}

int PollCq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = CqOf(ibcq);
  if (num_entries < 0) return -EINVAL;
  std::lock_guard<std::mutex> lock(cq->mu);
  int n = TakeCompletions(cq->send_qps, true, num_entries, wc);
  n += TakeCompletions(cq->recv_qps, false, num_entries - n, wc + n);
  // An application that spins on an empty CQ holds a CPU the daemon's
  // engine may share: give it away (YieldAfter).
  static const uint32_t yield_after = YieldAfter();
  if (n == 0 && yield_after > 0 && ++cq->empty_polls % yield_after == 0) {
    sched_yield();
  }
  if (n > 0) cq->empty_polls = 0;
  return n;
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  Cq* cq = CqOf(ibcq);
  if (cq->channel == nullptr) return EINVAL;
  {
    // An event comes when a completion is added from now on
    // (ibv_req_notify_cq(3)), not for those already in the CQ.
    std::lock_guard<std::mutex> lock(cq->mu);
    cq->solicited_only = solicited_only != 0;
    cq->armed_at = Gathered(cq);
    cq->armed = true;
  }
  std::lock_guard<std::mutex> lock(cq->channel->mu);
  cq->channel->armed_cv.notify_one();
  return 0;
}

// The notifier of a channel: raises an event for each armed CQ with a
// completion, and writes the channel's eventfd.
void Notify(Channel* ch) {
  std::unique_lock<std::mutex> lock(ch->mu);
  while (!ch->stop) {
    bool armed = false;
    Qp* wait_on = nullptr;
    size_t queue_pairs = 0;
    for (Cq* cq : ch->cqs) {
      std::lock_guard<std::mutex> cq_lock(cq->mu);
      if (!cq->armed) continue;
      armed = true;
      if (Gathered(cq) > cq->armed_at) {
        cq->armed = false;
        ch->events.push_back(cq);
        const uint64_t one = 1;
        [[maybe_unused]] ssize_t n = write(ch->ch.fd, &one, sizeof(one));
        continue;
      }
      for (const auto* qps : {&cq->send_qps, &cq->recv_qps}) {
        for (Qp* q : *qps) {
          if (q != wait_on) ++queue_pairs;
          wait_on = q;
        }
      }
    }
    if (!armed) {
      ch->armed_cv.wait(lock);
      continue;
    }
    // One queue pair to watch: sleep on its completion doorbell (it is not
    // destroyed meanwhile: see Qp::waiters). Several: look again shortly.
    rdp_conn conn = 0;
    if (queue_pairs == 1) {
      std::lock_guard<std::mutex> qp_lock(wait_on->mu);
      conn = wait_on->conn;
    }
    if (conn != 0) {
      wait_on->waiters.fetch_add(1);
      Client* client = wait_on->owner->client.get();
      lock.unlock();
      client->WaitForCompletions(conn, 10'000'000);
      wait_on->waiters.fetch_sub(1);
      lock.lock();
    } else {
      ch->armed_cv.wait_for(lock, std::chrono::microseconds(
                                      queue_pairs == 0 ? 1000 : 50));
    }
  }
}

int PostOne(Qp* q, const ibv_send_wr* wr) {
  const uint64_t index = q->posted;
  SendQueueView sq;
  sq.max_send_wr = q->cap.max_send_wr;
  sq.max_send_sge = q->cap.max_send_sge;
  sq.max_inline_data = q->cap.max_inline_data;
  sq.sig_all = q->sig_all;
  sq.outstanding = q->posted - q->completed;
  if (q->inline_buf != nullptr) {
    sq.inline_dst = q->inline_buf + (index % kSlots) * q->cap.max_inline_data;
  }
  sq.inline_lkey = q->inline_lkey;
  SendRequest req;
  if (int err = TranslateSendWr(*wr, sq, &req); err != 0) return err;
  Slot& s = q->slots[index % kSlots];
  s.wr_id = wr->wr_id;
  s.opcode = req.wc_opcode;
  s.ov.context = index;
  const int r = q->owner->client->PostVerbs(
      q->conn, req.op, req.sgl, req.sge_count, req.remote_address, req.rkey,
      req.flags, req.imm, &s.ov);
  if (r != RDP_PENDING) {
    return r == RDP_ERR_NO_BUFFERS ? ENOMEM : r == RDP_ERR_INVALID ? EINVAL
                                                                   : EIO;
  }
  ++q->posted;
  return 0;
}

int PostSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* q = QpOf(ibqp);
  std::lock_guard<std::mutex> lock(q->mu);
  int err = 0;
  if (q->qp.state != IBV_QPS_RTS) {
    err = EINVAL;
    *bad_wr = wr;
  } else {
    for (; wr != nullptr; wr = wr->next) {
      if ((err = PostOne(q, wr)) != 0) {
        *bad_wr = wr;
        break;
      }
    }
  }
  // What was posted before a failure goes out all the same.
  q->owner->client->Flush(q->conn);
  return err;
}

int PostRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* q = QpOf(ibqp);
  std::lock_guard<std::mutex> lock(q->mu);
  if (q->qp.state == IBV_QPS_RESET) {
    *bad_wr = wr;
    return EINVAL;
  }
  for (; wr != nullptr; wr = wr->next) {
    RecvQueueView rq;
    rq.max_recv_wr = q->cap.max_recv_wr;
    rq.max_recv_sge = q->cap.max_recv_sge;
    rq.outstanding = q->rposted - q->rcompleted;
    RecvRequest req;
    int err = TranslateRecvWr(*wr, rq, &req);
    if (err == 0 && q->failed) {
      // In the error state a receive completes at once, flushed.
      AddRecvWc(q, MakeWc(q, wr->wr_id, IBV_WC_RECV, IBV_WC_WR_FLUSH_ERR, 0),
                false);
      continue;
    }
    if (err == 0) {
      const int r = q->owner->client->PostRecv(q->conn, q->rposted, req.sgl,
                                               req.sge_count);
      err = r == RDP_OK ? 0 : r == RDP_ERR_NO_BUFFERS ? ENOMEM : EINVAL;
    }
    if (err != 0) {
      *bad_wr = wr;
      return err;
    }
    q->recv_ids[q->rposted % kSlots] = wr->wr_id;
    ++q->rposted;
  }
  return 0;
}

int PostSrqRecv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  *bad_wr = wr;
  return EOPNOTSUPP;
}

ibv_mw* AllocMw(ibv_pd*, ibv_mw_type) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int BindMw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }
int DeallocMw(ibv_mw*) { return EOPNOTSUPP; }

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

}  // namespace
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
  // The GUID comes from the daemon's MAC: ask it.
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
  c->ctx.device = device;
  c->ctx.cmd_fd = -1;
  // No asynchronous events are ever raised: a reader of this fd (or of
  // ibv_get_async_event) waits, as on a device where nothing goes wrong.
  c->ctx.async_fd = eventfd(0, EFD_CLOEXEC);
  c->ctx.num_comp_vectors = 1;
  pthread_mutex_init(&c->ctx.mutex, nullptr);
  c->ctx.abi_compat = nullptr;  // a plain context: inline verbs use ops
  ibv_context_ops& ops = c->ctx.ops;
  ops.poll_cq = PollCq;
  ops.req_notify_cq = ReqNotifyCq;
  ops.post_send = PostSend;
  ops.post_recv = PostRecv;
  ops.post_srq_recv = PostSrqRecv;
  ops.alloc_mw = AllocMw;
  ops.bind_mw = BindMw;
  ops.dealloc_mw = DeallocMw;
  return &c->ctx;
}

int ibv_close_device(ibv_context* context) {
  Context* c = Ctx(context);
  if (c->ctx.async_fd >= 0) close(c->ctx.async_fd);
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
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN;
  a->max_sge = info.max_sge;
  a->max_sge_rd = info.max_sge;
  a->max_cq = static_cast<int>(info.max_qps);
  a->max_cqe = static_cast<int>(info.max_cqe * info.max_qps);
  a->max_mr = static_cast<int>(info.max_mrs);
  a->max_pd = static_cast<int>(info.max_mrs);
  a->max_qp_rd_atom = info.max_rd_atomic;
  a->max_res_rd_atom = info.max_rd_atomic * static_cast<int>(info.max_qps);
  a->max_qp_init_rd_atom = info.max_rd_atomic;
  a->atomic_cap = IBV_ATOMIC_NONE;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  return 0;
}

int ibv_query_port(ibv_context* context, uint8_t port_num,
                   struct _compat_ibv_port_attr* compat) {
  if (port_num != 1) return EINVAL;
  const shm::DeviceInfo& info = Ctx(context)->info;
  // The caller passes a whole ibv_port_attr, cleared (verbs.h's inline
  // ibv_query_port for a context without extended ops).
  auto* a = reinterpret_cast<ibv_port_attr*>(compat);
  a->state = info.ip != 0 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = MtuEnum(info.path_mtu);
  a->gid_tbl_len = 1;
  a->port_cap_flags = 0;
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->lid = 0;
  a->lmc = 0;
  a->max_vl_num = 1;
  a->active_width = 1;  // 1X
  a->active_speed = 32;  // EDR: 25 Gb/s per lane
  a->phys_state = info.ip != 0 ? 5 : 3;  // LinkUp / Disabled
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index,
                  ibv_gid* gid) {
  if (port_num != 1 || index != 0) return -1;
  *gid = GidOf(Ctx(context)->info.ip);
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num,
                      uint32_t gid_index, ibv_gid_entry* entry,
                      uint32_t flags, size_t entry_size) {
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

// No sysfs behind this device.
int ibv_read_sysfs_file(const char*, const char*, char*, size_t) { return -1; }

int ibv_fork_init(void) { return 0; }

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

// Blocks until an event: none ever comes (see ibv_open_device's async_fd);
// with O_NONBLOCK set on the fd, fails with EAGAIN.
int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  uint64_t count = 0;
  while (read(context->async_fd, &count, sizeof(count)) != sizeof(count)) {
    if (errno != EINTR) return -1;
  }
  std::memset(event, 0, sizeof(*event));
  event->event_type = IBV_EVENT_DEVICE_FATAL;
  return 0;
}

void ibv_ack_async_event(ibv_async_event*) {}

// --- Protection domains and memory ---------------------------------------

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  Context* c = Ctx(context);
  std::lock_guard<std::mutex> lock(c->mu);
  auto id = c->client->AllocPd();
  if (!id.ok()) return Fail<ibv_pd*>(ErrnoOf(id.status()), nullptr, id.status());
  auto* p = new Pd();
  p->pd.context = context;
  p->pd.handle = *id;
  p->id = *id;
  return &p->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  Pd* p = PdOf(pd);
  Context* c = Ctx(pd->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (p->users != 0) return EBUSY;
  if (absl::Status s = c->client->DeallocPd(p->id); !s.ok()) {
    return ErrnoOf(s);
  }
  delete p;
  return 0;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                         unsigned int access) {
  constexpr unsigned kServed = IBV_ACCESS_LOCAL_WRITE |
                               IBV_ACCESS_REMOTE_WRITE |
                               IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC |
                               IBV_ACCESS_RELAXED_ORDERING;
  if (pd == nullptr || length == 0) return Fail<ibv_mr*>(EINVAL, nullptr);
  if ((access & ~kServed) != 0) return Fail<ibv_mr*>(EOPNOTSUPP, nullptr);
  // Remote writes (and atomics) need local write, as the verbs say.
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
      (access & IBV_ACCESS_LOCAL_WRITE) == 0) {
    return Fail<ibv_mr*>(EINVAL, nullptr);
  }
  // Peers name remote memory by our virtual address.
  if (iova != reinterpret_cast<uint64_t>(addr)) {
    return Fail<ibv_mr*>(EOPNOTSUPP, nullptr);
  }
  Pd* p = PdOf(pd);
  Context* c = Ctx(pd->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (absl::Status s = c->client->ShareMemory(addr, length); !s.ok()) {
    return Fail<ibv_mr*>(ErrnoOf(s), nullptr, s);
  }
  auto m = std::make_unique<Mr>();
  m->local_flags = RDP_MEM_READ |
                   ((access & IBV_ACCESS_LOCAL_WRITE) ? RDP_MEM_WRITE : 0);
  auto lkey = c->client->RegisterMemory(addr, length, m->local_flags);
  if (!lkey.ok()) return Fail<ibv_mr*>(ErrnoOf(lkey.status()), nullptr, lkey.status());
  m->remote_flags = ((access & IBV_ACCESS_REMOTE_READ) ? RDP_MEM_READ : 0) |
                    ((access & IBV_ACCESS_REMOTE_WRITE) ? RDP_MEM_WRITE : 0);
  uint32_t rkey = *lkey;  // reaches nothing remotely
  if (m->remote_flags != 0) {
    auto r = c->client->RegisterPdMemory(p->id, addr, length, m->remote_flags);
    if (!r.ok()) {
      (void)c->client->DeregisterMemory(*lkey);
      return Fail<ibv_mr*>(ErrnoOf(r.status()), nullptr, r.status());
    }
    rkey = *r;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.handle = *lkey;
  m->mr.lkey = *lkey;
  m->mr.rkey = rkey;
  ++p->users;
  return &m.release()->mr;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uint64_t>(addr),
                          static_cast<unsigned>(access));
}

ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                        int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova,
                          static_cast<unsigned>(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
  auto* m = reinterpret_cast<Mr*>(mr);
  Context* c = Ctx(mr->context);
  std::lock_guard<std::mutex> lock(c->mu);
  if (m->remote_flags != 0) {
    absl::Status s = c->client->DeregisterPdMemory(
        PdOf(mr->pd)->id, mr->rkey, mr->addr, mr->length, m->remote_flags);
    if (!s.ok()) return RdpCode(s) == RDP_ERR_INVALID ? EBUSY : ErrnoOf(s);
    m->remote_flags = 0;
  }
  if (absl::Status s = c->client->DeregisterMemory(mr->lkey); !s.ok()) {
    return RdpCode(s) == RDP_ERR_INVALID ? EBUSY : ErrnoOf(s);
  }
  --PdOf(mr->pd)->users;
  delete m;  // the pages stay where they are, with their contents
  return 0;
}

// --- Completion queues and channels -----------------------------------------

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  auto* ch = new Channel();
  ch->ch.context = context;
  // Blocking, as a kernel device's channel fd is; an application may set
  // O_NONBLOCK on it, and ibv_get_cq_event then fails with EAGAIN.
  ch->ch.fd = eventfd(0, EFD_CLOEXEC);
  ch->ch.refcnt = 0;
  if (ch->ch.fd < 0) {
    delete ch;
    return Fail<ibv_comp_channel*>(EMFILE, nullptr);
  }
  ch->notifier = std::thread(Notify, ch);
  return &ch->ch;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  {
    std::lock_guard<std::mutex> lock(ch->mu);
    if (!ch->cqs.empty()) return EBUSY;
    ch->stop = true;
    ch->armed_cv.notify_one();
  }
  ch->notifier.join();
  close(ch->ch.fd);
  delete ch;
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                      ibv_comp_channel* channel, int comp_vector) {
  const shm::DeviceInfo& info = Ctx(context)->info;
  if (cqe <= 0 || static_cast<uint64_t>(cqe) >
                      uint64_t{info.max_cqe} * info.max_qps ||
      comp_vector != 0) {
    return Fail<ibv_cq*>(EINVAL, nullptr);
  }
  auto* cq = new Cq();
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  pthread_mutex_init(&cq->cq.mutex, nullptr);
  pthread_cond_init(&cq->cq.cond, nullptr);
  if (channel != nullptr) {
    cq->channel = reinterpret_cast<Channel*>(channel);
    std::lock_guard<std::mutex> lock(cq->channel->mu);
    cq->channel->cqs.push_back(cq);
  }
  return &cq->cq;
}

int ibv_destroy_cq(ibv_cq* ibcq) {
  Cq* cq = CqOf(ibcq);
  {
    std::lock_guard<std::mutex> lock(cq->mu);
    if (!cq->send_qps.empty() || !cq->recv_qps.empty()) return EBUSY;
  }
  if (cq->channel != nullptr) {
    // Every event it raised must be acknowledged first (ibv_get_cq_event(3)).
    {
      std::unique_lock<std::mutex> lock(cq->mu);
      cq->acked_cv.wait(lock, [cq] { return cq->acked >= cq->events; });
    }
    std::lock_guard<std::mutex> lock(cq->channel->mu);
    auto& v = cq->channel->cqs;
    v.erase(std::remove(v.begin(), v.end(), cq), v.end());
    // Events raised and never taken go with it (one count each on the fd).
    auto& pending = cq->channel->events;
    const size_t before = pending.size();
    pending.erase(std::remove(pending.begin(), pending.end(), cq),
                  pending.end());
    uint64_t gone = before - pending.size();
    uint64_t count = 0;
    const int flags = fcntl(cq->channel->ch.fd, F_GETFL);
    fcntl(cq->channel->ch.fd, F_SETFL, flags | O_NONBLOCK);
    if (gone > 0 && read(cq->channel->ch.fd, &count, sizeof(count)) ==
                        sizeof(count) && count > gone) {
      count -= gone;
      [[maybe_unused]] ssize_t n =
          write(cq->channel->ch.fd, &count, sizeof(count));
    }
    fcntl(cq->channel->ch.fd, F_SETFL, flags);
  }
  pthread_mutex_destroy(&cq->cq.mutex);
  pthread_cond_destroy(&cq->cq.cond);
  delete cq;
  return 0;
}

// Takes the next event the notifier raised: blocks on the channel's fd
// (EAGAIN when the application made it non-blocking and there is none).
int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq_out,
                     void** cq_context) {
  auto* ch = reinterpret_cast<Channel*>(channel);
  uint64_t count = 0;
  while (read(ch->ch.fd, &count, sizeof(count)) != sizeof(count)) {
    if (errno != EINTR) return -1;
  }
  std::lock_guard<std::mutex> lock(ch->mu);
  // An eventfd read takes the whole count: give back all but one.
  if (count > 1) {
    const uint64_t rest = count - 1;
    [[maybe_unused]] ssize_t n = write(ch->ch.fd, &rest, sizeof(rest));
  }
  if (ch->events.empty()) {
    errno = EAGAIN;
    return -1;
  }
  Cq* cq = ch->events.front();
  ch->events.pop_front();
  {
    std::lock_guard<std::mutex> cq_lock(cq->mu);
    ++cq->events;  // to be acknowledged before the CQ may go
  }
  *cq_out = &cq->cq;
  *cq_context = cq->cq.cq_context;
  return 0;
}

void ibv_ack_cq_events(ibv_cq* ibcq, unsigned int nevents) {
  Cq* cq = CqOf(ibcq);
  std::lock_guard<std::mutex> lock(cq->mu);
  cq->cq.comp_events_completed += nevents;
  cq->acked += nevents;
  cq->acked_cv.notify_all();
}

// --- Queue pairs -----------------------------------------------------------

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (pd == nullptr || init == nullptr) return Fail<ibv_qp*>(EINVAL, nullptr);
  if (init->qp_type != IBV_QPT_RC) return Fail<ibv_qp*>(EOPNOTSUPP, nullptr);
  if (init->srq != nullptr) return Fail<ibv_qp*>(EOPNOTSUPP, nullptr);
  Context* c = Ctx(pd->context);
  const shm::DeviceInfo& info = c->info;
  ibv_qp_cap& cap = init->cap;
  if (init->send_cq == nullptr || init->recv_cq == nullptr ||
      cap.max_send_wr > info.max_qp_wr || cap.max_send_sge > info.max_sge ||
      cap.max_recv_wr > shm::kRecvRingEntries ||
      cap.max_recv_sge > info.max_sge || cap.max_inline_data > kMaxInline) {
    return Fail<ibv_qp*>(EINVAL, nullptr);
  }
  auto q = std::make_unique<Qp>();
  q->owner = c;
  q->pd = PdOf(pd);
  q->scq = CqOf(init->send_cq);
  q->rcq = CqOf(init->recv_cq);
  q->sig_all = init->sq_sig_all != 0;
  cap.max_send_wr = std::max<uint32_t>(cap.max_send_wr, 1);
  cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  q->cap = cap;
  q->slots.reset(new Slot[kSlots]);
  q->recv_ids.reset(new uint64_t[kSlots]);
  std::lock_guard<std::mutex> lock(c->mu);
  if (cap.max_inline_data > 0) {
    const size_t bytes = size_t{kSlots} * cap.max_inline_data;
    q->inline_buf = static_cast<uint8_t*>(c->client->Alloc(bytes));
    if (q->inline_buf == nullptr) return Fail<ibv_qp*>(ENOMEM, nullptr);
    auto key = c->client->RegisterMemory(q->inline_buf, bytes, RDP_MEM_READ);
    if (!key.ok()) {
      (void)c->client->Free(q->inline_buf);
      return Fail<ibv_qp*>(ErrnoOf(key.status()), nullptr, key.status());
    }
    q->inline_lkey = *key;
  }
  auto made = c->client->CreateQueuePair(q->pd->id);
  if (!made.ok()) {
    if (q->inline_buf != nullptr) {
      (void)c->client->DeregisterMemory(q->inline_lkey);
      (void)c->client->Free(q->inline_buf);
    }
    return Fail<ibv_qp*>(ErrnoOf(made.status()), nullptr, made.status());
  }
  q->conn = made->conn;
  q->qp.context = pd->context;
  q->qp.qp_context = init->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.handle = made->qpn;
  q->qp.qp_num = made->qpn;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_init(&q->qp.mutex, nullptr);
  pthread_cond_init(&q->qp.cond, nullptr);
  q->attr.qp_state = IBV_QPS_RESET;
  q->attr.cur_qp_state = IBV_QPS_RESET;
  q->attr.cap = cap;
  q->attr.path_mtu = MtuEnum(info.path_mtu);
  ++q->pd->users;
  {
    std::lock_guard<std::mutex> cq_lock(q->scq->mu);
    q->scq->send_qps.push_back(q.get());
  }
  {
    std::lock_guard<std::mutex> cq_lock(q->rcq->mu);
    q->rcq->recv_qps.push_back(q.get());
  }
  return &q.release()->qp;
}

int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  Qp* q = QpOf(ibqp);
  Context* c = q->owner;
  std::lock_guard<std::mutex> lock(c->mu);
  ibv_qp_state cur;
  {
    std::lock_guard<std::mutex> qp_lock(q->mu);
    cur = q->qp.state;
  }
  const ibv_qp_state next =
      (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
  // The moves of the verbs state machine for RC that are served.
  const bool ok = (cur == IBV_QPS_RESET && (next == IBV_QPS_INIT ||
                                            next == IBV_QPS_RESET)) ||
                  (cur == IBV_QPS_INIT && (next == IBV_QPS_INIT ||
                                           next == IBV_QPS_RTR)) ||
                  (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) ||
                  (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) ||
                  next == IBV_QPS_ERR;
  if (!ok) return EINVAL;
  // The attributes each move of an RC queue pair requires
  // (ibv_modify_qp(3)); the device has one port.
  int needed = 0;
  if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
    needed = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    needed = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    needed = IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
             IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  if ((mask & IBV_QP_STATE) == 0 || (mask & needed) != needed) return EINVAL;
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_AV) && attr->ah_attr.port_num > 1) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
      attr->max_rd_atomic > c->info.max_rd_atomic) {
    return EINVAL;
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
      attr->max_dest_rd_atomic > c->info.max_rd_atomic) {
    return EINVAL;
  }
  if (next == IBV_QPS_RTR && cur == IBV_QPS_INIT) {
    uint32_t ip = 0;
    if (!attr->ah_attr.is_global || !Ipv4OfGid(attr->ah_attr.grh.dgid, &ip)) {
      return EINVAL;  // RoCEv2 needs the peer's IPv4-mapped GID
    }
    shm::QpPeer peer{};
    peer.peer_ip = ip;
    peer.peer_qpn = attr->dest_qp_num;
    peer.rq_psn = attr->rq_psn & 0xFFFFFF;
    peer.path_mtu = MtuBytes(attr->path_mtu);
    peer.max_rd_atomic = c->info.max_rd_atomic;
    // Every attribute read here is one the move requires (above).
    peer.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    peer.min_rnr_timer = attr->min_rnr_timer;
    absl::Status s = c->client->ModifyQueuePair(q->conn, shm::kQpToRtr, peer);
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == IBV_QPS_RTS && cur == IBV_QPS_RTR) {
    shm::QpPeer peer{};
    peer.sq_psn = attr->sq_psn & 0xFFFFFF;
    peer.retry_count = attr->retry_cnt;
    peer.rnr_retry = attr->rnr_retry;
    peer.timeout = attr->timeout;
    peer.max_rd_atomic = attr->max_rd_atomic;
    absl::Status s = c->client->ModifyQueuePair(q->conn, shm::kQpToRts, peer);
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
    EnterError(q);
  } else if (next == IBV_QPS_RESET && cur != IBV_QPS_RESET) {
    return EINVAL;
  }
  std::lock_guard<std::mutex> qp_lock(q->mu);  // Pump's SetError writes too
  if (mask & IBV_QP_AV) q->attr.ah_attr = attr->ah_attr;
  if (mask & IBV_QP_PATH_MTU) q->attr.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) q->attr.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) q->attr.rq_psn = attr->rq_psn;
  if (mask & IBV_QP_SQ_PSN) q->attr.sq_psn = attr->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    q->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  }
  if (mask & IBV_QP_ACCESS_FLAGS) q->attr.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) q->attr.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_PORT) q->attr.port_num = attr->port_num;
  if (mask & IBV_QP_TIMEOUT) q->attr.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->attr.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->attr.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->attr.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q->attr.max_rd_atomic = attr->max_rd_atomic;
  // A connection that broke meanwhile leaves the queue pair in ERR.
  const ibv_qp_state now = q->failed ? IBV_QPS_ERR : next;
  q->qp.state = now;
  q->attr.qp_state = now;
  q->attr.cur_qp_state = now;
  return 0;
}

int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int /*mask*/,
                 ibv_qp_init_attr* init) {
  Qp* q = QpOf(ibqp);
  std::lock_guard<std::mutex> lock(q->owner->mu);
  std::lock_guard<std::mutex> qp_lock(q->mu);  // Pump's SetError writes attr
  *attr = q->attr;
  if (init != nullptr) {
    std::memset(init, 0, sizeof(*init));
    init->qp_context = q->qp.qp_context;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
    init->cap = q->cap;
    init->qp_type = IBV_QPT_RC;
    init->sq_sig_all = q->sig_all ? 1 : 0;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
  Qp* q = QpOf(ibqp);
  Context* c = q->owner;
  // Out of its CQs' lists, under their channels' locks too: a notifier
  // picks a queue pair to wait on only while it holds its channel's lock.
  for (auto [cq, list] : {std::pair{q->scq, &Cq::send_qps},
                           std::pair{q->rcq, &Cq::recv_qps}}) {
    std::unique_lock<std::mutex> ch_lock;
    if (cq->channel != nullptr) {
      ch_lock = std::unique_lock<std::mutex>(cq->channel->mu);
    }
    std::lock_guard<std::mutex> cq_lock(cq->mu);
    auto& v = cq->*list;
    v.erase(std::remove(v.begin(), v.end(), q), v.end());
  }
  while (q->waiters.load() > 0) usleep(100);
  std::lock_guard<std::mutex> lock(c->mu);
  {
    std::lock_guard<std::mutex> qp_lock(q->mu);
    if (q->conn != 0) (void)c->client->Disconnect(q->conn);
    q->conn = 0;
  }
  if (q->inline_buf != nullptr) {
    (void)c->client->DeregisterMemory(q->inline_lkey);
    (void)c->client->Free(q->inline_buf);
  }
  --q->pd->users;
  pthread_mutex_destroy(&q->qp.mutex);
  pthread_cond_destroy(&q->qp.cond);
  delete q;
  return 0;
}

ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp*) {
  errno = EOPNOTSUPP;
  return nullptr;
}

// --- Not served: refused with EOPNOTSUPP (docs/verbs.md) ------------------

ibv_srq* ibv_create_srq(ibv_pd*, ibv_srq_init_attr*) {
  return Fail<ibv_srq*>(EOPNOTSUPP, nullptr);
}
int ibv_destroy_srq(ibv_srq*) { return EOPNOTSUPP; }
int ibv_resize_cq(ibv_cq*, int) { return EOPNOTSUPP; }
int ibv_rereg_mr(ibv_mr*, int, ibv_pd*, void*, size_t, int) {
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_INPUT;
}
ibv_ah* ibv_create_ah(ibv_pd*, ibv_ah_attr*) {
  return Fail<ibv_ah*>(EOPNOTSUPP, nullptr);
}
ibv_ah* ibv_create_ah_from_wc(ibv_pd*, ibv_wc*, ibv_grh*, uint8_t) {
  return Fail<ibv_ah*>(EOPNOTSUPP, nullptr);
}
int ibv_destroy_ah(ibv_ah*) { return EOPNOTSUPP; }
int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }
int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) { return EOPNOTSUPP; }

}  // extern "C"
