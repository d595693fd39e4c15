// The verbs front end's queue pairs: created as one of the session's
// connections, moved through the verbs state machine (connected out of
// band at RTR and RTS), queried and destroyed.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "api/status.h"
#include "api/verbs/objects.h"

// The lifecycle's numbers are libibverbs' (dataplane/rc/qp_state.h).
namespace lifecycle_abi = rdmaplane::rc::lifecycle;
static_assert(static_cast<int>(lifecycle_abi::QpState::kReset) ==
              IBV_QPS_RESET);
static_assert(static_cast<int>(lifecycle_abi::QpState::kInit) == IBV_QPS_INIT);
static_assert(static_cast<int>(lifecycle_abi::QpState::kRtr) == IBV_QPS_RTR);
static_assert(static_cast<int>(lifecycle_abi::QpState::kRts) == IBV_QPS_RTS);
static_assert(static_cast<int>(lifecycle_abi::QpState::kSqd) == IBV_QPS_SQD);
static_assert(static_cast<int>(lifecycle_abi::QpState::kSqe) == IBV_QPS_SQE);
static_assert(static_cast<int>(lifecycle_abi::QpState::kErr) == IBV_QPS_ERR);
static_assert(lifecycle_abi::kQpAttrState == IBV_QP_STATE);
static_assert(lifecycle_abi::kQpAttrCurState == IBV_QP_CUR_STATE);
static_assert(lifecycle_abi::kQpAttrEnSqdAsyncNotify ==
              IBV_QP_EN_SQD_ASYNC_NOTIFY);
static_assert(lifecycle_abi::kQpAttrAccessFlags == IBV_QP_ACCESS_FLAGS);
static_assert(lifecycle_abi::kQpAttrPkeyIndex == IBV_QP_PKEY_INDEX);
static_assert(lifecycle_abi::kQpAttrPort == IBV_QP_PORT);
static_assert(lifecycle_abi::kQpAttrQkey == IBV_QP_QKEY);
static_assert(lifecycle_abi::kQpAttrAv == IBV_QP_AV);
static_assert(lifecycle_abi::kQpAttrPathMtu == IBV_QP_PATH_MTU);
static_assert(lifecycle_abi::kQpAttrTimeout == IBV_QP_TIMEOUT);
static_assert(lifecycle_abi::kQpAttrRetryCnt == IBV_QP_RETRY_CNT);
static_assert(lifecycle_abi::kQpAttrRnrRetry == IBV_QP_RNR_RETRY);
static_assert(lifecycle_abi::kQpAttrRqPsn == IBV_QP_RQ_PSN);
static_assert(lifecycle_abi::kQpAttrMaxQpRdAtomic == IBV_QP_MAX_QP_RD_ATOMIC);
static_assert(lifecycle_abi::kQpAttrAltPath == IBV_QP_ALT_PATH);
static_assert(lifecycle_abi::kQpAttrMinRnrTimer == IBV_QP_MIN_RNR_TIMER);
static_assert(lifecycle_abi::kQpAttrSqPsn == IBV_QP_SQ_PSN);
static_assert(lifecycle_abi::kQpAttrMaxDestRdAtomic ==
              IBV_QP_MAX_DEST_RD_ATOMIC);
static_assert(lifecycle_abi::kQpAttrPathMigState == IBV_QP_PATH_MIG_STATE);
static_assert(lifecycle_abi::kQpAttrCap == IBV_QP_CAP);
static_assert(lifecycle_abi::kQpAttrDestQpn == IBV_QP_DEST_QPN);
static_assert(lifecycle_abi::kQpAttrRateLimit == IBV_QP_RATE_LIMIT);

namespace rdmaplane::verbs {
namespace {

// QpPeer::remote_access for verbs' qp_access_flags `access`, marked as
// given.
uint8_t QpRemoteAccess(unsigned access) {
  return static_cast<uint8_t>(shm::kQpRemoteAccessSet | RemoteFlagsOf(access));
}

// What a move to RTS changes of the responder: the remote operations it
// serves and its RNR timer, each marked as given where the mask holds it.
shm::QpPeer ResponderChanges(const ibv_qp_attr& attr, int mask) {
  shm::QpPeer peer{};
  if (mask & IBV_QP_ACCESS_FLAGS) {
    peer.remote_access = QpRemoteAccess(attr.qp_access_flags);
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    peer.min_rnr_timer =
        static_cast<uint8_t>(shm::kQpMinRnrTimerSet | attr.min_rnr_timer);
  }
  return peer;
}

}  // namespace

// The queue pair goes to the error state (ibv_modify_qp to ERR): its
// connection ends, and every request not yet reported completes, those
// the daemon had finished as they finished, the rest as flushed. Caller
// holds the context's mutex.
void EnterError(Qp* q) {
  std::lock_guard<std::mutex> lock(q->mu);
  Client* client = q->owner->client.get();
  if (q->life.ShouldFlush() && client->Outstanding(q->conn) == 0 &&
      q->rcompleted == q->rposted) {
    SyncState(q);
    return;
  }
  // The daemon stops the transport and ends every request it did not
  // finish with a flush; gathering then reports those it finished as they
  // finished, the rest flushed.
  absl::Status s =
      client->ModifyQueuePair(q->conn, shm::kQpToErr, shm::QpPeer{});
  q->stopping = true;  // what ends now is the application's doing
  Pump(q);
  q->stopping = false;
  SetError(q);
  if (!s.ok()) ReportFailure(s);
  // What the daemon did not end (it did not answer): flushed here.
  rdp_overlapped* done[64];
  int n;
  while ((n = client->Abandon(q->conn, RDP_ERR_ABORTED, done, 64)) > 0) {
    for (int i = 0; i < n; ++i) AddSendWcOf(q, *done[i], true);
  }
  FlushReceives(q);
}

// The queue pair goes to RESET (from ERR, drained): the daemon makes it new
// with the same QPN, under a new handle, and its completions not polled yet
// leave its CQs (IBA: in Reset the QP's work queues and its entries in
// their CQs are empty; other queue pairs' entries stay), as mlx5 cleans
// them: an application that reuses a queue pair after an error does not
// poll the old flushed receives. Caller holds the context's mutex.
int ResetQp(Qp* q) {
  std::lock_guard<std::mutex> lock(q->mu);
  auto conn = q->owner->client->ResetQueuePair(q->conn);
  if (!conn.ok())
    return Fail<int>(ErrnoOf(conn.status()), ErrnoOf(conn.status()),
                     conn.status());
  q->conn = *conn;
  q->send_wcs.clear();
  q->recv_wcs.clear();
  q->recv_solicited.clear();
  q->posted = 0;
  q->comm_established = false;
  q->rposted = q->rcompleted = 0;
  const ibv_qp_cap cap = q->attr.cap;
  const ibv_mtu mtu = MtuEnum(q->owner->info.path_mtu);
  q->attr = ibv_qp_attr{};
  q->attr.cap = cap;
  q->attr.path_mtu = mtu;
  return 0;
}

ibv_qp* CreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  if (attr == nullptr) return Fail<ibv_qp*>(EINVAL, nullptr);
  constexpr uint32_t kServed = IBV_QP_INIT_ATTR_PD |
                               IBV_QP_INIT_ATTR_CREATE_FLAGS |
                               IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr->pd == nullptr ||
      attr->pd->context != context) {
    return Fail<ibv_qp*>(EINVAL, nullptr);
  }
  // XRC domains, TSO headers, RSS (indirection tables, hashing) and every
  // creation flag (scatter FCS, CVLAN stripping, ...) are not served.
  if ((attr->comp_mask & ~kServed) != 0 ||
      ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
       attr->create_flags != 0)) {
    return Fail<ibv_qp*>(EOPNOTSUPP, nullptr);
  }
  const bool extended = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
  // Only operations its type has and the front end serves (ibv_wr_post(3):
  // "If the QP does not support all the requested work request types then
  // QP creation will fail").
  if (extended && (attr->send_ops_flags & ~SendOpsServed(attr->qp_type)) != 0) {
    return Fail<ibv_qp*>(EOPNOTSUPP, nullptr);
  }
  ibv_qp_init_attr init{};
  init.qp_context = attr->qp_context;
  init.send_cq = attr->send_cq;
  init.recv_cq = attr->recv_cq;
  init.srq = attr->srq;
  init.cap = attr->cap;
  init.qp_type = attr->qp_type;
  init.sq_sig_all = attr->sq_sig_all;
  ibv_qp* qp = ibv_create_qp(attr->pd, &init);
  if (qp == nullptr) return nullptr;
  attr->cap = init.cap;
  if (extended) MakeExtended(QpOf(qp), attr->send_ops_flags);
  return qp;
}

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

// --- Queue pairs -----------------------------------------------------------

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
  if (pd == nullptr || init == nullptr) return Fail<ibv_qp*>(EINVAL, nullptr);
  // RC, UC and UD (XRC and the raw types are not served: docs/verbs.md).
  if (init->qp_type != IBV_QPT_RC && init->qp_type != IBV_QPT_UC &&
      init->qp_type != IBV_QPT_UD) {
    return Fail<ibv_qp*>(EOPNOTSUPP, nullptr);
  }
  // A shared receive queue of the same context.
  if (init->srq != nullptr && init->srq->context != pd->context) {
    return Fail<ibv_qp*>(EINVAL, nullptr);
  }
  Context* c = Ctx(pd->context);
  const shm::DeviceInfo& info = c->info;
  ibv_qp_cap& cap = init->cap;
  if (init->send_cq == nullptr || init->recv_cq == nullptr ||
      cap.max_send_wr > info.max_qp_wr || cap.max_send_sge > info.max_sge ||
      (init->srq == nullptr && (cap.max_recv_wr > shm::kMaxRecvRingEntries ||
                                cap.max_recv_sge > info.max_sge)) ||
      cap.max_inline_data > kMaxInline) {
    return Fail<ibv_qp*>(EINVAL, nullptr);
  }
  auto q = std::make_unique<Qp>();
  q->owner = c;
  q->pd = PdOf(pd);
  q->scq = CqOf(init->send_cq);
  q->rcq = CqOf(init->recv_cq);
  q->sig_all = init->sq_sig_all != 0;
  if (init->srq != nullptr) {
    q->srq = SrqOf(init->srq);
    cap.max_recv_wr = 0;  // its receives are the queue's
    cap.max_recv_sge = 0;
  }
  q->life = rc::lifecycle::QpLifecycle(
      init->qp_type == IBV_QPT_UC   ? rc::lifecycle::QpType::kUc
      : init->qp_type == IBV_QPT_UD ? rc::lifecycle::QpType::kUd
                                    : rc::lifecycle::QpType::kRc);
  cap.max_send_wr = std::max<uint32_t>(cap.max_send_wr, 1);
  cap.max_send_sge = std::max<uint32_t>(cap.max_send_sge, 1);
  q->cap = cap;
  // As many as the daemon's rings for them hold (rounded the same way).
  const uint32_t send_slots = shm::SlotDepths::RoundUp(cap.max_send_wr);
  const uint32_t recv_slots = shm::SlotDepths::RoundUp(cap.max_recv_wr);
  q->slot_mask = send_slots - 1;
  q->recv_ids.reset(new uint64_t[recv_slots]);
  q->recv_mask = recv_slots - 1;
  std::lock_guard<std::mutex> lock(c->mu);
  if (cap.max_inline_data > 0) {
    const size_t bytes = size_t{send_slots} * cap.max_inline_data;
    q->inline_buf = static_cast<uint8_t*>(c->client->Alloc(bytes));
    if (q->inline_buf == nullptr) return Fail<ibv_qp*>(ENOMEM, nullptr);
    auto key = c->client->RegisterMemory(q->inline_buf, bytes, RDP_MEM_READ);
    if (!key.ok()) {
      (void)c->client->Free(q->inline_buf);
      return Fail<ibv_qp*>(ErrnoOf(key.status()), nullptr, key.status());
    }
    q->inline_lkey = *key;
  }
  auto made = c->client->CreateQueuePair(
      q->pd->id, init->qp_type == IBV_QPT_UC   ? shm::kQpServiceUc
                 : init->qp_type == IBV_QPT_UD ? shm::kQpServiceUd
                                               : shm::kQpServiceRc,
      q->srq != nullptr ? q->srq->conn : 0, cap.max_send_wr,
      cap.max_recv_wr);
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
  q->qp.qp_type = init->qp_type;
  q->qp.srq = init->srq;
  if (q->srq != nullptr) ++q->srq->users;
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
  c->qps.push_back(q.get());
  c->qp_count.fetch_add(1);
  KickWatcher(c);  // it looks at queue pairs from now on
  return &q.release()->qp;
}

int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  using rc::lifecycle::QpState;
  Qp* q = QpOf(ibqp);
  Context* c = q->owner;
  if (attr == nullptr) return EINVAL;
  std::lock_guard<std::mutex> lock(c->mu);
  QpState cur;
  {
    std::lock_guard<std::mutex> qp_lock(q->mu);
    Pump(q);  // a connection that broke has taken the queue pair to ERR
    cur = q->life.state();
  }
  const QpState next =
      (mask & IBV_QP_STATE) ? static_cast<QpState>(attr->qp_state) : cur;
  if ((mask & IBV_QP_CUR_STATE) &&
      attr->cur_qp_state != static_cast<ibv_qp_state>(cur)) {
    return EINVAL;
  }
  // The one table of legal moves and their attributes (IBA 11.2.4.2), as
  // the daemon checks it too.
  const rc::lifecycle::QpTransitionCheck check =
      rc::lifecycle::CheckQpTransition(q->life.type(), cur, next,
                                       static_cast<uint32_t>(mask));
  if (!check.ok) {
    return Fail<int>(
        EINVAL, EINVAL,
        absl::InvalidArgumentError(absl::StrCat(
            "ibv_modify_qp ", rc::lifecycle::QpStateName(cur), " -> ",
            rc::lifecycle::QpStateName(next),
            check.transition_exists ? "" : ": no such move",
            check.missing != 0 ? ": attributes missing" : "",
            check.not_allowed != 0 ? ": attributes this move does not take"
                                   : "")));
  }
  // Legal, not served: draining the send queue, alternate paths.
  if (next == QpState::kSqd || cur == QpState::kSqd ||
      (mask & (IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
               IBV_QP_EN_SQD_ASYNC_NOTIFY)) != 0) {
    return EOPNOTSUPP;
  }
  if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
  // A UD queue pair's Q_Key goes to the daemon with RTR; changing it once
  // the queue pair receives is not served.
  if ((mask & IBV_QP_QKEY) && cur != QpState::kReset &&
      cur != QpState::kInit && attr->qkey != q->attr.qkey) {
    return EOPNOTSUPP;
  }
  if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31) return EINVAL;
  if ((mask & IBV_QP_AV) && attr->ah_attr.port_num > 1) return EINVAL;
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) &&
      attr->max_rd_atomic > c->info.max_rd_atomic) {
    return EINVAL;
  }
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) &&
      attr->max_dest_rd_atomic > c->info.max_rd_atomic) {
    return EINVAL;
  }
  if (next == QpState::kInit && cur == QpState::kReset) {
    absl::Status s =
        c->client->ModifyQueuePair(q->conn, shm::kQpToInit, shm::QpPeer{});
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == QpState::kRtr && cur == QpState::kInit &&
             q->qp.qp_type == IBV_QPT_UD) {
    // No peer: datagrams with its Q_Key land from now on.
    shm::QpPeer peer{};
    peer.qkey = (mask & IBV_QP_QKEY) ? attr->qkey : q->attr.qkey;
    absl::Status s = c->client->ModifyQueuePair(q->conn, shm::kQpToRtr, peer);
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == QpState::kRtr && cur == QpState::kInit) {
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
    // Every attribute read here is in the mask (an RC queue pair's move
    // requires these; UC has no READs and no RNR NAKs).
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
      peer.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    }
    if (mask & IBV_QP_MIN_RNR_TIMER) peer.min_rnr_timer = attr->min_rnr_timer;
    // The remote operations the responder serves: set at INIT or now.
    peer.remote_access = QpRemoteAccess((mask & IBV_QP_ACCESS_FLAGS)
                                            ? attr->qp_access_flags
                                            : q->attr.qp_access_flags);
    absl::Status s = c->client->ModifyQueuePair(q->conn, shm::kQpToRtr, peer);
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == QpState::kRts && cur == QpState::kRtr) {
    shm::QpPeer peer = ResponderChanges(*attr, mask);
    peer.sq_psn = attr->sq_psn & 0xFFFFFF;
    // As at RTR: only what the mask holds (UC takes none of these).
    if (mask & IBV_QP_RETRY_CNT) peer.retry_count = attr->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) peer.rnr_retry = attr->rnr_retry;
    if (mask & IBV_QP_TIMEOUT) peer.timeout = attr->timeout;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) peer.max_rd_atomic = attr->max_rd_atomic;
    absl::Status s = c->client->ModifyQueuePair(q->conn, shm::kQpToRts, peer);
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == QpState::kRts && cur == QpState::kRts &&
             (mask & (IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER)) != 0) {
    // An attribute-only modify: the responder serves other operations, or
    // NAKs with another RNR timer, from the next request on.
    absl::Status s = c->client->ModifyQueuePair(
        q->conn, shm::kQpToRts, ResponderChanges(*attr, mask));
    if (!s.ok()) return Fail<int>(ErrnoOf(s), ErrnoOf(s), s);
  } else if (next == QpState::kErr && cur != QpState::kErr) {
    EnterError(q);
  } else if (next == QpState::kReset && cur != QpState::kReset) {
    // Any state -> RESET: through ERR, so that every request ends first.
    EnterError(q);
    if (int err = ResetQp(q); err != 0) return err;
  }
  std::lock_guard<std::mutex> qp_lock(q->mu);  // Pump's SetError writes too
  if (next == QpState::kReset) {
    q->life.Modify(QpState::kReset, rc::lifecycle::kQpAttrState);
    SyncState(q);
    return 0;
  }
  if (mask & IBV_QP_AV) q->attr.ah_attr = attr->ah_attr;
  if (mask & IBV_QP_PATH_MTU) q->attr.path_mtu = attr->path_mtu;
  if (mask & IBV_QP_DEST_QPN) q->attr.dest_qp_num = attr->dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) q->attr.rq_psn = attr->rq_psn;
  if (mask & IBV_QP_SQ_PSN) q->attr.sq_psn = attr->sq_psn;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    q->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
  }
  if (mask & IBV_QP_ACCESS_FLAGS)
    q->attr.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) q->attr.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_QKEY) q->attr.qkey = attr->qkey;
  if (mask & IBV_QP_PORT) q->attr.port_num = attr->port_num;
  if (mask & IBV_QP_TIMEOUT) q->attr.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->attr.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->attr.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->attr.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
    q->attr.max_rd_atomic = attr->max_rd_atomic;
  // A connection that broke meanwhile has left the queue pair in ERR, from
  // which this move does not exist: it stays there.
  q->life.Modify(next, static_cast<uint32_t>(mask));
  SyncState(q);
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
    init->srq = q->qp.srq;
    init->qp_type = q->qp.qp_type;
    init->sq_sig_all = q->sig_all ? 1 : 0;
  }
  return 0;
}

int ibv_destroy_qp(ibv_qp* ibqp) {
  Qp* q = QpOf(ibqp);
  Context* c = q->owner;
  // Out of its CQs' lists, under their channels' locks too: a notifier
  // picks a queue pair to wait on only while it holds its channel's lock.
  for (auto [cq, list] :
       {std::pair{q->scq, &Cq::send_qps}, std::pair{q->rcq, &Cq::recv_qps}}) {
    std::unique_lock<std::mutex> ch_lock;
    if (cq->channel != nullptr) {
      ch_lock = std::unique_lock<std::mutex>(cq->channel->mu);
    }
    std::lock_guard<std::mutex> cq_lock(cq->mu);
    auto& v = cq->*list;
    v.erase(std::remove(v.begin(), v.end(), q), v.end());
  }
  while (q->waiters.load() > 0) usleep(100);
  // Its events not taken go; those taken must be acknowledged first.
  ForgetAsyncEvents(q);
  std::lock_guard<std::mutex> lock(c->mu);
  c->qps.erase(std::remove(c->qps.begin(), c->qps.end(), q), c->qps.end());
  c->qp_count.fetch_sub(1);
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
  if (q->srq != nullptr) --q->srq->users;
  pthread_mutex_destroy(&q->qp.mutex);
  pthread_cond_destroy(&q->qp.cond);
  delete q;
  return 0;
}

// The extended queue pair of an ibv_qp made by ibv_create_qp_ex with
// send_ops_flags; null for any other (as libibverbs answers).
ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* ibqp) {
  if (ibqp == nullptr) return nullptr;
  Qp* q = QpOf(ibqp);
  return q->batch != nullptr ? &q->qp_ex : nullptr;
}

}  // extern "C"
