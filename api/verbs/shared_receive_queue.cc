// Shared receive queues: ibv_create_srq takes a connection slot of the
// session as the queue (the daemon hands its receives to the queue pairs
// made with it, one at a time, as their messages need them), and each
// receive completes on the queue pair that used it. The limit event is
// raised from what the completions show: receives posted and not yet
// reported.
#include <errno.h>

#include <cstring>
#include <mutex>

#include "api/verbs/objects.h"
#include "api/verbs/work_request.h"

namespace rdmaplane::verbs {

Srq* SrqOf(ibv_srq* srq) { return reinterpret_cast<Srq*>(srq); }

uint64_t TakeSharedReceive(Srq* s, uint64_t index) {
  bool limit_reached = false;
  uint64_t wr_id;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    wr_id = s->recv_ids[index & s->id_mask];
    ++s->completed;
    if (s->limit != 0 && s->posted - s->completed < s->limit) {
      s->limit = 0;  // one event per arming (ibv_modify_srq(3))
      limit_reached = true;
    }
  }
  if (limit_reached) {
    ibv_async_event event{};
    event.event_type = IBV_EVENT_SRQ_LIMIT_REACHED;
    event.element.srq = &s->srq;
    RaiseAsyncEvent(s->owner, event);
  }
  return wr_id;
}

int PostSrqRecv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* s = SrqOf(ibsrq);
  std::lock_guard<std::mutex> lock(s->mu);
  for (; wr != nullptr; wr = wr->next) {
    RecvQueueView rq;
    rq.max_recv_wr = s->max_wr;
    rq.max_recv_sge = s->max_sge;
    rq.outstanding = s->posted - s->completed;
    RecvRequest req;
    int err = TranslateRecvWr(*wr, rq, &req);
    if (err == 0) {
      const int r = s->owner->client->PostRecv(s->conn, s->posted, req.sgl,
                                               req.sge_count);
      err = r == RDP_OK ? 0 : r == RDP_ERR_NO_BUFFERS ? ENOMEM : EINVAL;
    }
    if (err != 0) {
      *bad_wr = wr;
      return err;
    }
    s->recv_ids[s->posted & s->id_mask] = wr->wr_id;
    ++s->posted;
  }
  return 0;
}

}  // namespace rdmaplane::verbs

using namespace rdmaplane;         // NOLINT
using namespace rdmaplane::verbs;  // NOLINT

extern "C" {

ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* init) {
  if (pd == nullptr || init == nullptr) return Fail<ibv_srq*>(EINVAL, nullptr);
  ibv_srq_attr& a = init->attr;
  // A receive ring's entries and a receive's SGEs (docs/verbs.md).
  if (a.max_wr == 0 || a.max_wr > shm::kMaxRecvRingEntries || a.max_sge == 0 ||
      a.max_sge > shm::kMaxSge || a.srq_limit > a.max_wr) {
    return Fail<ibv_srq*>(EINVAL, nullptr);
  }
  Context* c = Ctx(pd->context);
  auto s = std::make_unique<Srq>();
  s->owner = c;
  s->pd = PdOf(pd);
  s->max_wr = a.max_wr;
  s->max_sge = a.max_sge;
  s->limit = a.srq_limit;
  const uint32_t ids = shm::SlotDepths::RoundUp(2 * a.max_wr);
  s->recv_ids.reset(new uint64_t[ids]);
  s->id_mask = ids - 1;
  std::lock_guard<std::mutex> lock(c->mu);
  absl::StatusOr<rdp_conn> conn =
      c->client->CreateSharedReceiveQueue(s->pd->id, a.max_wr);
  if (!conn.ok()) {
    return Fail<ibv_srq*>(ErrnoOf(conn.status()), nullptr, conn.status());
  }
  s->conn = *conn;
  s->srq.context = pd->context;
  s->srq.srq_context = init->srq_context;
  s->srq.pd = pd;
  s->srq.handle = static_cast<uint32_t>(*conn);
  pthread_mutex_init(&s->srq.mutex, nullptr);
  pthread_cond_init(&s->srq.cond, nullptr);
  ++s->pd->users;
  return &s.release()->srq;
}

int ibv_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  if (ibsrq == nullptr || attr == nullptr) return EINVAL;
  Srq* s = SrqOf(ibsrq);
  if ((mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0) return EINVAL;
  // Resizing: the queue is a receive ring of fixed size.
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;
  std::lock_guard<std::mutex> lock(s->mu);
  if (mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > s->max_wr) return EINVAL;
    s->limit = attr->srq_limit;
  }
  return 0;
}

int ibv_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  if (ibsrq == nullptr || attr == nullptr) return EINVAL;
  Srq* s = SrqOf(ibsrq);
  std::lock_guard<std::mutex> lock(s->mu);
  attr->max_wr = s->max_wr;
  attr->max_sge = s->max_sge;
  attr->srq_limit = s->limit;
  return 0;
}

int ibv_destroy_srq(ibv_srq* ibsrq) {
  if (ibsrq == nullptr) return EINVAL;
  Srq* s = SrqOf(ibsrq);
  Context* c = s->owner;
  std::lock_guard<std::mutex> lock(c->mu);
  if (s->users != 0) return EBUSY;  // a queue pair still takes from it
  absl::Status st = c->client->DestroySharedReceiveQueue(s->conn);
  if (!st.ok()) return Fail<int>(ErrnoOf(st), ErrnoOf(st), st);
  --s->pd->users;
  pthread_mutex_destroy(&s->srq.mutex);
  pthread_cond_destroy(&s->srq.cond);
  delete s;
  return 0;
}

}  // extern "C"
