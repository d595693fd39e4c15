// Posting work requests on the verbs front end's queue pairs, and
// gathering their completions from the daemon's rings. Each send work
// request is one native request with its own rdp_overlapped in the queue
// pair's slot ring; an unsignaled one is posted as a silent success.
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
#include <vector>

#include "api/verbs/objects.h"
#include "api/verbs/work_request.h"

namespace rdmaplane::verbs {

// A UD receive completion's sl: the RoCE packet type as the mlx5 provider
// reports it (bit 3: a UDP header; bits 2..0: 2, IPv4).
constexpr uint8_t kSlRoceV2Ipv4 = 0x8 | 0x2;

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
    case shm::kDetailMwBind:
      return IBV_WC_MW_BIND_ERR;
    case shm::kDetailLocalOperation:
      return IBV_WC_LOC_QP_OP_ERR;
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
ibv_wc_status RecvStatusOf(int status, uint32_t detail) {
  // A SEND with Invalidate of a key we may not invalidate (IBA class J,
  // as rxe reports it).
  if (detail == shm::kDetailInvalidateRefused) return IBV_WC_REM_INV_REQ_ERR;
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

void SyncState(Qp* q) {
  const auto state = static_cast<ibv_qp_state>(q->life.state());
  q->qp.state = state;
  q->attr.qp_state = state;
  q->attr.cur_qp_state = state;
}

void SetError(Qp* q) {
  // A queue pair with a shared receive queue tells the application when
  // it has taken its last receive from it (IBA 11.6.3: once in ERR).
  if (q->life.OnFatalError() && q->srq != nullptr) {
    ibv_async_event event{};
    event.event_type = IBV_EVENT_QP_LAST_WQE_REACHED;
    event.element.qp = &q->qp;
    RaiseAsyncEvent(q->owner, event);
  }
  SyncState(q);
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
              MakeWc(q, q->recv_ids[q->rcompleted & q->recv_mask], IBV_WC_RECV,
                     IBV_WC_WR_FLUSH_ERR, 0),
              false);
  }
}

void AddSendWcOf(Qp* q, const rdp_overlapped& done, bool abandoned) {
  const ibv_wc_status status =
      abandoned || q->life.ShouldFlush()
          ? IBV_WC_WR_FLUSH_ERR
          : SendStatusOf(done.status, done.internal[0]);
  if (status != IBV_WC_SUCCESS) SetError(q);
  AddSendWc(q, MakeWc(q, done.context,
                      static_cast<ibv_wc_opcode>(done.internal[1]), status,
                      done.bytes));
}

void NoticeEstablished(Qp* q) {
  if (q->comm_established || q->conn == 0 || q->qp.qp_type == IBV_QPT_UD ||
      q->life.state() != rc::lifecycle::QpState::kRtr ||
      !q->owner->client->Established(q->conn)) {
    return;
  }
  q->comm_established = true;
  ibv_async_event event{};
  event.event_type = IBV_EVENT_COMM_EST;
  event.element.qp = &q->qp;
  RaiseAsyncEvent(q->owner, event);
}

// Moves what the daemon completed for qp into its send_wcs and recv_wcs.
// Caller holds q->mu.
void Pump(Qp* q) {
  if (q->conn == 0) return;
  NoticeEstablished(q);
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
    for (int i = 0; i < n; ++i) AddSendWcOf(q, *done[i], false);
    if (n < 64) break;
  }
  shm::CompletionEntry got[64];
  while (true) {
    const int n = client->TakeReceived(q->conn, got, 64);
    for (int i = 0; i < n; ++i) {
      const uint64_t index = got[i].wr_id;
      uint64_t wr_id;
      if (q->srq != nullptr) {
        wr_id = TakeSharedReceive(q->srq, index);  // in any order
      } else if (index < q->rcompleted || index >= q->rposted) {
        continue;  // not ours
      } else {
        wr_id = q->recv_ids[index & q->recv_mask];
      }
      const ibv_wc_status status = q->life.ShouldFlush()
                                       ? IBV_WC_WR_FLUSH_ERR
                                       : RecvStatusOf(got[i].status,
                                                      got[i].detail);
      // A receive that failed breaks an RC queue pair; UC and UD go on
      // (the daemon's queue pair did).
      if (status != IBV_WC_SUCCESS && q->qp.qp_type == IBV_QPT_RC) {
        SetError(q);
      }
      ibv_wc wc =
          MakeWc(q, wr_id,
                 got[i].op == shm::kRecvWriteImm ? IBV_WC_RECV_RDMA_WITH_IMM
                                                 : IBV_WC_RECV,
                 status, got[i].byte_len);
      if (status == IBV_WC_SUCCESS && (got[i].flags & shm::kCompletionImm)) {
        wc.wc_flags |= IBV_WC_WITH_IMM;
        wc.imm_data = got[i].imm;
      }
      if (status == IBV_WC_SUCCESS &&
          (got[i].flags & shm::kCompletionInvalidated)) {
        wc.wc_flags |= IBV_WC_WITH_INV;
        wc.invalidated_rkey = got[i].imm;  // host order, ibv_poll_cq(3)
      }
      if (got[i].flags & shm::kCompletionGrh) {  // UD: a datagram's sender
        wc.wc_flags |= IBV_WC_GRH;
        wc.src_qp = got[i].src_qp;
        // What the packet was, as RoCE NICs' user-space providers (mlx5)
        // report it in sl: an IPv4 header with UDP (RoCEv2), so that the
        // GRH's last 20 bytes are that header. UCX's UD transport reads it
        // to find the destination address in the GRH, and drops every
        // datagram when it says otherwise.
        wc.sl = kSlRoceV2Ipv4;
      }
      AddRecvWc(q, wc, (got[i].flags & shm::kCompletionSolicited) != 0);
      if (q->srq == nullptr) q->rcompleted = index + 1;
    }
    if (n < 64) break;
  }
  if (ended && !q->life.ShouldFlush() && !q->stopping) {
    // The transport ended the connection and no completion says so (our
    // responder refused the peer's request, the daemon went away): the
    // queue pair's affiliated error is an asynchronous event, as IBA
    // 11.6.3 names it: an invalid request refused, an access refused, or
    // any other failure.
    SetError(q);
    ibv_async_event event{};
    switch (client->ConnectionStateOf(q->conn)) {
      case shm::kConnRequestRefused:
        event.event_type = IBV_EVENT_QP_REQ_ERR;
        break;
      case shm::kConnAccessRefused:
        event.event_type = IBV_EVENT_QP_ACCESS_ERR;
        break;
      default:
        event.event_type = IBV_EVENT_QP_FATAL;
    }
    event.element.qp = &q->qp;
    RaiseAsyncEvent(q->owner, event);
  }
  if (ended) SetError(q);
  if (q->life.ShouldFlush()) FlushReceives(q);
}

// The send queue as the request of index `index` (posted or later) sees
// it: its limits, what would be outstanding before it, and the inline
// buffer of its slot.
SendQueueView ViewOf(const Qp* q, uint64_t index) {
  SendQueueView sq;
  sq.max_send_wr = q->cap.max_send_wr;
  sq.max_send_sge = q->cap.max_send_sge;
  sq.max_inline_data = q->cap.max_inline_data;
  sq.sig_all = q->sig_all;
  sq.unreliable_connected = q->qp.qp_type == IBV_QPT_UC;
  sq.datagram = q->qp.qp_type == IBV_QPT_UD;
  sq.datagram_bytes = q->owner->info.path_mtu;
  sq.outstanding =
      q->owner->client->Outstanding(q->conn) + (index - q->posted);
  if (q->inline_buf != nullptr) {
    sq.inline_dst =
        q->inline_buf + (index & q->slot_mask) * q->cap.max_inline_data;
  }
  sq.inline_lkey = q->inline_lkey;
  return sq;
}

// Hands the daemon `req`, translated from the work request `wr_id` as the
// next one posted. Returns 0 or the errno of a post the client refused.
int Submit(Qp* q, uint64_t wr_id, const SendRequest& req) {
  const Client::Tag tag{wr_id, static_cast<uint32_t>(req.wc_opcode)};
  const bool atomic =
      req.op == shm::kSendCompareSwap || req.op == shm::kSendFetchAdd;
  Client* client = q->owner->client.get();
  if (req.op == shm::kSendBindMw || req.op == shm::kSendLocalInvalidate) {
    uint64_t bits = req.swap_add;
    // The region must allow binding and be in the window's protection
    // domain; the daemon refuses the bind otherwise (IBV_WC_MW_BIND_ERR).
    if (req.bind_mr != nullptr && req.bind_mw != nullptr &&
        req.bind_mr->pd == req.bind_mw->pd &&
        (reinterpret_cast<const Mr*>(req.bind_mr)->access &
         IBV_ACCESS_MW_BIND) != 0) {
      bits |= shm::kBindRegionAllowsBind;
    }
    const int r = client->PostMemoryWindow(
        q->conn, req.op, req.sge_count > 0 ? &req.sgl[0] : nullptr, req.rkey,
        req.imm, bits, req.flags, tag);
    if (r != RDP_PENDING) return r == RDP_ERR_NO_BUFFERS ? ENOMEM : EINVAL;
    ++q->posted;
    return 0;
  }
  const int r =
      atomic ? client->PostAtomic(q->conn, req.op, req.sgl[0],
                                  req.remote_address, req.rkey, req.compare,
                                  req.swap_add, req.flags, tag)
      : q->qp.qp_type == IBV_QPT_UD
          ? client->PostDatagram(q->conn, req.sgl, req.sge_count, req.ah,
                                 req.remote_qpn, req.remote_qkey, req.flags,
                                 req.imm, tag)
          : client->PostVerbs(q->conn, req.op, req.sgl, req.sge_count,
                              req.remote_address, req.rkey, req.flags, req.imm,
                              tag);
  if (r != RDP_PENDING) {
    return r == RDP_ERR_NO_BUFFERS ? ENOMEM
           : r == RDP_ERR_INVALID  ? EINVAL
                                   : EIO;
  }
  ++q->posted;
  return 0;
}

int PostOne(Qp* q, const ibv_send_wr* wr) {
  SendRequest req;
  if (int err = TranslateSendWr(*wr, ViewOf(q, q->posted), &req); err != 0) {
    return err;
  }
  return Submit(q, wr->wr_id, req);
}

// A send work request posted in ERR: checked as PostOne checks it, then
// completed flushed without reaching the daemon.
// In ERR nothing is outstanding (EnterError completed everything), so the
// next slot's inline buffer is free to take an inline copy.
int FlushOne(Qp* q, const ibv_send_wr* wr) {
  SendRequest req;
  if (int err = TranslateSendWr(*wr, ViewOf(q, q->posted), &req); err != 0) {
    return err;
  }
  AddSendWc(q, MakeWc(q, wr->wr_id, req.wc_opcode, IBV_WC_WR_FLUSH_ERR, 0));
  return 0;
}

int PostAllOrNone(Qp* q, const ibv_send_wr* wrs, size_t count) {
  std::lock_guard<std::mutex> lock(q->mu);
  const bool flush = q->life.ShouldFlush();
  if (!flush && q->life.state() != rc::lifecycle::QpState::kRts) {
    return EINVAL;
  }
  // Each checked (and an inline one copied into its slot, free until it is
  // posted) as the request it would be, before any is posted.
  thread_local std::vector<SendRequest> reqs;
  reqs.resize(std::max(reqs.size(), count));
  for (size_t i = 0; i < count; ++i) {
    if (int err = TranslateSendWr(wrs[i], ViewOf(q, q->posted + i), &reqs[i]);
        err != 0) {
      return err;
    }
  }
  int err = 0;
  for (size_t i = 0; i < count; ++i) {
    if (flush) {
      // In ERR each completes at once, flushed (IBA 10.3.1).
      AddSendWc(q, MakeWc(q, wrs[i].wr_id, reqs[i].wc_opcode,
                          IBV_WC_WR_FLUSH_ERR, 0));
    } else if ((err = Submit(q, wrs[i].wr_id, reqs[i])) != 0) {
      // The rings hold max_send_wr requests, all checked for room above:
      // only a client that lost its daemon refuses one here.
      break;
    }
  }
  if (!flush) q->owner->client->Flush(q->conn);
  return err;
}

int PostSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* q = QpOf(ibqp);
  std::lock_guard<std::mutex> lock(q->mu);
  int err = 0;
  if (q->life.ShouldFlush()) {
    // In ERR a send work request completes at once, flushed (IBA 10.3.1),
    // signaled or not; one the queue could not take is refused as in RTS.
    for (; wr != nullptr; wr = wr->next) {
      if ((err = FlushOne(q, wr)) != 0) {
        *bad_wr = wr;
        break;
      }
    }
    return err;
  }
  if (q->life.state() != rc::lifecycle::QpState::kRts) {
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
  // Its receives come from its shared receive queue (ibv_post_srq_recv).
  if (!q->life.CanPostRecv() || q->srq != nullptr) {
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
    if (err == 0 && q->life.ShouldFlush()) {
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
    q->recv_ids[q->rposted & q->recv_mask] = wr->wr_id;
    ++q->rposted;
  }
  return 0;
}

}  // namespace rdmaplane::verbs
