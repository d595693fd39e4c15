// The ibv_wr_* post path (ibv_wr_post(3)) of the verbs front end's
// extended queue pairs, made by ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS. ibv_wr_start opens a critical region;
// each builder (ibv_wr_send, ibv_wr_rdma_write, ...) starts a work request
// from the queue pair's wr_id and wr_flags, its setters add the data and
// the UD address; ibv_wr_complete posts them all, through the same checks
// as ibv_post_send, or none, and returns the errno of the first mistake.
// The builders return nothing, as the API wants: a mistake is remembered
// (a builder the queue pair was not made for, a setter with no request to
// set, more SGEs or inline bytes than the queue takes) and reported by
// ibv_wr_complete. ibv_wr_abort drops the batch.
#include <errno.h>

#include <cstring>

#include "api/verbs/objects.h"

namespace rdmaplane::verbs {
namespace {

// A token of the calling thread: which thread is in a region.
const void* ThisThread() {
  static thread_local char token;
  return &token;
}

Qp* QpOfEx(ibv_qp_ex* qpx) { return QpOf(&qpx->qp_base); }

// The batch of qpx when the calling thread is in its region, else null.
WrBatch* OpenBatch(ibv_qp_ex* qpx) {
  WrBatch* b = QpOfEx(qpx)->batch.get();
  return b->owner.load(std::memory_order_relaxed) == ThisThread() ? b : nullptr;
}

void Remember(WrBatch* b, int err) {
  if (b->error == 0) b->error = err;
}

// Starts a work request of `opcode` (the queue pair being made for
// `send_op`): its wr_id and flags from qpx, no data yet. Null when the
// calling thread is not in the region (nothing to remember it in).
ibv_send_wr* Begin(ibv_qp_ex* qpx, ibv_wr_opcode opcode, uint64_t send_op) {
  WrBatch* b = OpenBatch(qpx);
  if (b == nullptr) return nullptr;
  if ((b->send_ops & send_op) == 0) Remember(b, EINVAL);
  if (b->count == b->entries.size()) b->entries.emplace_back();
  WrBatch::Entry& e = b->entries[b->count++];
  e.wr = ibv_send_wr{};
  e.wr.wr_id = qpx->wr_id;
  e.wr.send_flags = qpx->wr_flags;
  e.wr.opcode = opcode;
  e.inline_data.clear();
  return &e.wr;
}

// The request the setters add to: the last one begun, or null (a setter
// with none is a mistake).
WrBatch::Entry* Last(ibv_qp_ex* qpx) {
  WrBatch* b = OpenBatch(qpx);
  if (b == nullptr) return nullptr;
  if (b->count == 0) {
    Remember(b, EINVAL);
    return nullptr;
  }
  return &b->entries[b->count - 1];
}

// ... an RDMA WRITE or READ at `remote_addr` under `rkey`.
ibv_send_wr* BeginRdma(ibv_qp_ex* qpx, ibv_wr_opcode opcode, uint64_t send_op,
                       uint32_t rkey, uint64_t remote_addr) {
  ibv_send_wr* wr = Begin(qpx, opcode, send_op);
  if (wr != nullptr) {
    wr->wr.rdma.rkey = rkey;
    wr->wr.rdma.remote_addr = remote_addr;
  }
  return wr;
}

// ... an atomic on the word at `remote_addr` under `rkey`.
ibv_send_wr* BeginAtomic(ibv_qp_ex* qpx, ibv_wr_opcode opcode,
                         uint64_t send_op, uint32_t rkey,
                         uint64_t remote_addr, uint64_t compare_add) {
  ibv_send_wr* wr = Begin(qpx, opcode, send_op);
  if (wr != nullptr) {
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.remote_addr = remote_addr;
    wr->wr.atomic.compare_add = compare_add;
  }
  return wr;
}

void WrRdmaWrite(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  BeginRdma(qpx, IBV_WR_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE, rkey,
            remote_addr);
}

void WrRdmaWriteImm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                    __be32 imm) {
  if (ibv_send_wr* wr = BeginRdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM,
                                  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, rkey,
                                  remote_addr)) {
    wr->imm_data = imm;
  }
}

void WrRdmaRead(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  BeginRdma(qpx, IBV_WR_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ, rkey,
            remote_addr);
}

void WrSend(ibv_qp_ex* qpx) { Begin(qpx, IBV_WR_SEND, IBV_QP_EX_WITH_SEND); }

void WrSendImm(ibv_qp_ex* qpx, __be32 imm) {
  if (ibv_send_wr* wr =
          Begin(qpx, IBV_WR_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM)) {
    wr->imm_data = imm;
  }
}

void WrAtomicCmpSwp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                    uint64_t compare, uint64_t swap) {
  if (ibv_send_wr* wr = BeginAtomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP,
                                    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, rkey,
                                    remote_addr, compare)) {
    wr->wr.atomic.swap = swap;
  }
}

void WrAtomicFetchAdd(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr,
                      uint64_t add) {
  BeginAtomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD,
              IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, rkey, remote_addr, add);
}

// Builders of operations no queue pair here is made for (SendOpsServed):
// a queue pair cannot have asked for them, so using one is a mistake.
void WrNotServed(ibv_qp_ex* qpx) {
  if (WrBatch* b = OpenBatch(qpx)) Remember(b, EINVAL);
}
void WrSendInv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr =
          Begin(qpx, IBV_WR_SEND_WITH_INV, IBV_QP_EX_WITH_SEND_WITH_INV)) {
    wr->invalidate_rkey = invalidate_rkey;
  }
}

void WrLocalInv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  if (ibv_send_wr* wr =
          Begin(qpx, IBV_WR_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV)) {
    wr->invalidate_rkey = invalidate_rkey;
  }
}

// `rkey`: the key the window is bound under (ibv_wr_bind_mw(3)).
void WrBindMw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey,
              const ibv_mw_bind_info* bind_info) {
  if (ibv_send_wr* wr = Begin(qpx, IBV_WR_BIND_MW, IBV_QP_EX_WITH_BIND_MW)) {
    wr->bind_mw.mw = mw;
    wr->bind_mw.rkey = rkey;
    if (bind_info != nullptr) wr->bind_mw.bind_info = *bind_info;
  }
}
void WrSendTso(ibv_qp_ex* qpx, void*, uint16_t, uint16_t) { WrNotServed(qpx); }
void WrAtomicWrite(ibv_qp_ex* qpx, uint32_t, uint64_t, const void*) {
  WrNotServed(qpx);
}
void WrSetXrcSrqn(ibv_qp_ex* qpx, uint32_t) { WrNotServed(qpx); }

void WrSetUdAddr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn,
                 uint32_t remote_qkey) {
  if (WrBatch::Entry* e = Last(qpx)) {
    e->wr.wr.ud.ah = ah;
    e->wr.wr.ud.remote_qpn = remote_qpn;
    e->wr.wr.ud.remote_qkey = remote_qkey;
  }
}

void WrSetSgeList(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  WrBatch::Entry* e = Last(qpx);
  if (e == nullptr) return;
  if (num_sge > shm::kMaxSge || (num_sge > 0 && sg_list == nullptr)) {
    Remember(QpOfEx(qpx)->batch.get(), EINVAL);
    return;
  }
  if (num_sge > 0) std::memcpy(e->sge, sg_list, num_sge * sizeof(ibv_sge));
  e->wr.num_sge = static_cast<int>(num_sge);
  e->wr.send_flags &= ~IBV_SEND_INLINE;
}

void WrSetSge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  WrSetSgeList(qpx, 1, &sge);
}

// Copied now (the application may reuse its buffers at once), into the
// request's own bytes: ibv_wr_complete copies them on into the queue
// pair's inline buffer, as ibv_post_send does with IBV_SEND_INLINE.
void WrSetInlineDataList(ibv_qp_ex* qpx, size_t num_buf,
                         const ibv_data_buf* buf_list) {
  WrBatch::Entry* e = Last(qpx);
  if (e == nullptr) return;
  Qp* q = QpOfEx(qpx);
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += buf_list[i].length;
  if (total > q->cap.max_inline_data) {
    Remember(q->batch.get(), EINVAL);
    return;
  }
  e->inline_data.resize(total);
  size_t offset = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (buf_list[i].length == 0) continue;
    std::memcpy(e->inline_data.data() + offset, buf_list[i].addr,
                buf_list[i].length);
    offset += buf_list[i].length;
  }
  // One SGE, pointed at inline_data by ibv_wr_complete (none for no bytes).
  e->wr.num_sge = total > 0 ? 1 : 0;
  e->wr.send_flags |= IBV_SEND_INLINE;
}

void WrSetInlineData(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  WrSetInlineDataList(qpx, 1, &buf);
}

void WrStart(ibv_qp_ex* qpx) {
  WrBatch* b = QpOfEx(qpx)->batch.get();
  if (b->owner.load(std::memory_order_relaxed) == ThisThread()) {
    Remember(b, EINVAL);  // already in the region: a second start
    return;
  }
  b->mu.lock();
  b->owner.store(ThisThread(), std::memory_order_relaxed);
  b->error = 0;
  b->count = 0;
}

void EndRegion(WrBatch* b) {
  b->count = 0;
  b->error = 0;
  b->owner.store(nullptr, std::memory_order_relaxed);
  b->mu.unlock();
}

int WrComplete(ibv_qp_ex* qpx) {
  WrBatch* b = OpenBatch(qpx);
  if (b == nullptr) return EINVAL;  // no ibv_wr_start on this thread
  int err = b->error;
  if (err == 0) {
    // The SGLs point into the entries only now that none moves any more.
    thread_local std::vector<ibv_send_wr> wrs;
    wrs.resize(b->count);
    for (size_t i = 0; i < b->count; ++i) {
      WrBatch::Entry& e = b->entries[i];
      wrs[i] = e.wr;
      wrs[i].next = nullptr;
      if ((e.wr.send_flags & IBV_SEND_INLINE) != 0 && !e.inline_data.empty()) {
        e.sge[0] = ibv_sge{reinterpret_cast<uintptr_t>(e.inline_data.data()),
                           static_cast<uint32_t>(e.inline_data.size()), 0};
      }
      wrs[i].sg_list = e.sge;
    }
    err = PostAllOrNone(QpOfEx(qpx), wrs.data(), b->count);
  }
  EndRegion(b);
  return err;
}

void WrAbort(ibv_qp_ex* qpx) {
  if (WrBatch* b = OpenBatch(qpx)) EndRegion(b);
}

}  // namespace

uint64_t SendOpsServed(ibv_qp_type type) {
  constexpr uint64_t kUd = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  constexpr uint64_t kUc = kUd | IBV_QP_EX_WITH_RDMA_WRITE |
                           IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                           IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
  // SEND with Invalidate has no UC opcode in the IBA.
  constexpr uint64_t kRc = kUc | IBV_QP_EX_WITH_RDMA_READ |
                           IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                           IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                           IBV_QP_EX_WITH_SEND_WITH_INV;
  switch (type) {
    case IBV_QPT_RC:
      return kRc;
    case IBV_QPT_UC:
      return kUc;
    case IBV_QPT_UD:
      return kUd;
    default:
      return 0;
  }
}

void MakeExtended(Qp* q, uint64_t send_ops) {
  q->batch = std::make_unique<WrBatch>();
  q->batch->send_ops = send_ops;
  ibv_qp_ex& x = q->qp_ex;
  x.comp_mask = 0;
  x.wr_atomic_cmp_swp = WrAtomicCmpSwp;
  x.wr_atomic_fetch_add = WrAtomicFetchAdd;
  x.wr_bind_mw = WrBindMw;
  x.wr_local_inv = WrLocalInv;
  x.wr_rdma_read = WrRdmaRead;
  x.wr_rdma_write = WrRdmaWrite;
  x.wr_rdma_write_imm = WrRdmaWriteImm;
  x.wr_send = WrSend;
  x.wr_send_imm = WrSendImm;
  x.wr_send_inv = WrSendInv;
  x.wr_send_tso = WrSendTso;
  x.wr_set_ud_addr = WrSetUdAddr;
  x.wr_set_xrc_srqn = WrSetXrcSrqn;
  x.wr_set_inline_data = WrSetInlineData;
  x.wr_set_inline_data_list = WrSetInlineDataList;
  x.wr_set_sge = WrSetSge;
  x.wr_set_sge_list = WrSetSgeList;
  x.wr_start = WrStart;
  x.wr_complete = WrComplete;
  x.wr_abort = WrAbort;
  x.wr_atomic_write = WrAtomicWrite;
}

}  // namespace rdmaplane::verbs
