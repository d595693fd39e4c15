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

#include "api/status.h"
#include "api/verbs/objects.h"

namespace rdmaplane::verbs {

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

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

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
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
  // The moves of the verbs state machine for RC that are served.
  const bool ok =
      (cur == IBV_QPS_RESET &&
       (next == IBV_QPS_INIT || next == IBV_QPS_RESET)) ||
      (cur == IBV_QPS_INIT && (next == IBV_QPS_INIT || next == IBV_QPS_RTR)) ||
      (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) ||
      (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) || next == IBV_QPS_ERR;
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
  if (mask & IBV_QP_ACCESS_FLAGS)
    q->attr.qp_access_flags = attr->qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) q->attr.pkey_index = attr->pkey_index;
  if (mask & IBV_QP_PORT) q->attr.port_num = attr->port_num;
  if (mask & IBV_QP_TIMEOUT) q->attr.timeout = attr->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->attr.retry_cnt = attr->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->attr.rnr_retry = attr->rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->attr.min_rnr_timer = attr->min_rnr_timer;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
    q->attr.max_rd_atomic = attr->max_rd_atomic;
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

}  // extern "C"
