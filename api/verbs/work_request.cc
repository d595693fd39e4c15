#include "api/verbs/work_request.h"

#include <errno.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace rdmaplane::verbs {
namespace {

// Whether num_sge fits a queue whose requests take up to `max_sge` SGEs.
bool SgeCountFits(int num_sge, uint32_t max_sge) {
  return num_sge >= 0 && static_cast<uint32_t>(num_sge) <= max_sge &&
         static_cast<uint32_t>(num_sge) <= shm::kMaxSge;
}

// The opcode as the application stored it. Loading a value outside the
// enum's range (garbage, or an opcode of a newer rdma-core) as
// ibv_wr_opcode is undefined behaviour; as an integer it is refused.
std::underlying_type_t<ibv_wr_opcode> OpcodeOf(const ibv_send_wr& wr) {
  std::underlying_type_t<ibv_wr_opcode> raw;
  std::memcpy(&raw, &wr.opcode, sizeof(raw));
  return raw;
}

// BIND_MW and LOCAL_INV: connected queue pairs only, no data.
int TranslateWindowWr(const ibv_send_wr& wr, const SendQueueView& sq,
                      SendRequest* out) {
  constexpr unsigned kKnown = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
  if (sq.datagram || (wr.send_flags & ~kKnown) != 0) return EINVAL;
  const bool signaled = sq.sig_all || (wr.send_flags & IBV_SEND_SIGNALED) != 0;
  out->flags = RDP_FLAG_DEFER | (signaled ? 0 : RDP_FLAG_SILENT_SUCCESS) |
               ((wr.send_flags & IBV_SEND_FENCE) ? RDP_FLAG_READ_FENCE : 0);
  out->sge_count = 0;
  out->length = 0;
  if (OpcodeOf(wr) == IBV_WR_LOCAL_INV) {
    if (sq.outstanding >= sq.max_send_wr) return ENOMEM;
    out->op = shm::kSendLocalInvalidate;
    out->wc_opcode = IBV_WC_LOCAL_INV;
    out->rkey = wr.invalidate_rkey;
    return 0;
  }
  const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
  // IBV_ACCESS_LOCAL_WRITE grants a window nothing (it is the region's);
  // taken and ignored, as rxe and mlx5 do.
  constexpr unsigned kWindowAccess =
      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
      IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;
  if (wr.bind_mw.mw == nullptr || (b.mw_access_flags & ~kWindowAccess) != 0 ||
      (b.mr == nullptr && (b.addr != 0 || b.length != 0)) ||
      b.length > UINT32_MAX) {
    return EINVAL;
  }
  if (sq.outstanding >= sq.max_send_wr) return ENOMEM;
  out->op = shm::kSendBindMw;
  out->wc_opcode = IBV_WC_BIND_MW;
  out->rkey = wr.bind_mw.mw->rkey;
  out->imm = wr.bind_mw.rkey;
  out->bind_mw = wr.bind_mw.mw;
  out->bind_mr = b.mr;
  out->swap_add =
      ((b.mw_access_flags & IBV_ACCESS_REMOTE_READ) ? shm::kBindRemoteRead : 0) |
      ((b.mw_access_flags & IBV_ACCESS_REMOTE_WRITE) ? shm::kBindRemoteWrite
                                                     : 0) |
      ((b.mw_access_flags & IBV_ACCESS_REMOTE_ATOMIC) ? shm::kBindRemoteAtomic
                                                      : 0) |
      ((b.mw_access_flags & IBV_ACCESS_ZERO_BASED) ? shm::kBindZeroBased : 0);
  if (b.mr != nullptr && b.length != 0) {
    out->sgl[0].addr = reinterpret_cast<void*>(b.addr);
    out->sgl[0].length = static_cast<uint32_t>(b.length);
    out->sgl[0].lkey = b.mr->lkey;
    out->sge_count = 1;
  }
  return 0;
}

}  // namespace

int TranslateSendWr(const ibv_send_wr& wr, const SendQueueView& sq,
                    SendRequest* out) {
  bool imm = false;
  switch (OpcodeOf(wr)) {
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      imm = true;
      [[fallthrough]];
    case IBV_WR_RDMA_WRITE:
      out->op = shm::kSendWrite;
      out->wc_opcode = IBV_WC_RDMA_WRITE;
      break;
    case IBV_WR_SEND_WITH_IMM:
      imm = true;
      [[fallthrough]];
    case IBV_WR_SEND:
      out->op = shm::kSendSend;
      out->wc_opcode = IBV_WC_SEND;
      break;
    case IBV_WR_RDMA_READ:
      out->op = shm::kSendRead;
      out->wc_opcode = IBV_WC_RDMA_READ;
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      out->op = shm::kSendCompareSwap;
      out->wc_opcode = IBV_WC_COMP_SWAP;
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      out->op = shm::kSendFetchAdd;
      out->wc_opcode = IBV_WC_FETCH_ADD;
      break;
    case IBV_WR_SEND_WITH_INV:
      // RC only: the IBA has no UC or UD opcode for it.
      if (sq.unreliable_connected || sq.datagram) return EINVAL;
      out->op = shm::kSendSend;
      out->wc_opcode = IBV_WC_SEND;
      break;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      return TranslateWindowWr(wr, sq, out);
    default:
      return EOPNOTSUPP;  // TSO, atomic write...: docs/verbs.md
  }
  const bool atomic =
      out->op == shm::kSendCompareSwap || out->op == shm::kSendFetchAdd;
  if (sq.unreliable_connected && (atomic || out->op == shm::kSendRead)) {
    return EINVAL;
  }
  if (sq.datagram &&
      (out->op != shm::kSendSend || wr.wr.ud.ah == nullptr ||
       wr.wr.ud.remote_qpn == 0 || wr.wr.ud.remote_qpn > 0xFFFFFF)) {
    return EINVAL;
  }
  constexpr unsigned kKnown = IBV_SEND_SIGNALED | IBV_SEND_INLINE |
                              IBV_SEND_FENCE | IBV_SEND_SOLICITED;
  if ((wr.send_flags & ~kKnown) != 0) return EINVAL;
  if (!SgeCountFits(wr.num_sge, sq.max_send_sge)) return EINVAL;
  // An atomic's original value lands in one buffer of exactly 8 bytes.
  if (atomic && (wr.num_sge != 1 || wr.sg_list[0].length != sizeof(uint64_t))) {
    return EINVAL;
  }
  if (sq.outstanding >= sq.max_send_wr) return ENOMEM;
  const uint32_t count = static_cast<uint32_t>(wr.num_sge);
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) total += wr.sg_list[i].length;
  // Inline has no meaning where data comes back (READ, atomics): ignored.
  if ((wr.send_flags & IBV_SEND_INLINE) != 0 && out->op != shm::kSendRead &&
      !atomic) {
    // Copied now, so the application may reuse its buffers at once, and
    // they need no lkey.
    if (total > sq.max_inline_data) return EINVAL;
    uint64_t offset = 0;
    for (uint32_t i = 0; i < count; ++i) {
      const ibv_sge& s = wr.sg_list[i];
      if (s.length == 0) continue;
      std::memcpy(sq.inline_dst + offset,
                  reinterpret_cast<const void*>(s.addr), s.length);
      offset += s.length;
    }
    out->sgl[0].addr = sq.inline_dst;
    out->sgl[0].length = static_cast<uint32_t>(total);
    out->sgl[0].lkey = sq.inline_lkey;
    out->sge_count = 1;
  } else {
    for (uint32_t i = 0; i < count; ++i) {
      out->sgl[i].addr = reinterpret_cast<void*>(wr.sg_list[i].addr);
      out->sgl[i].length = wr.sg_list[i].length;
      out->sgl[i].lkey = wr.sg_list[i].lkey;
    }
    out->sge_count = count;
  }
  out->length = total;
  if (sq.datagram && total > sq.datagram_bytes) return EINVAL;  // one packet
  const bool signaled = sq.sig_all || (wr.send_flags & IBV_SEND_SIGNALED) != 0;
  uint32_t flags = RDP_FLAG_DEFER;
  if (!signaled) flags |= RDP_FLAG_SILENT_SUCCESS;
  if ((wr.send_flags & IBV_SEND_FENCE) != 0) flags |= RDP_FLAG_READ_FENCE;
  if ((wr.send_flags & IBV_SEND_SOLICITED) != 0) flags |= shm::kFlagSolicited;
  if (imm) flags |= shm::kFlagImmediate;
  out->flags = flags;
  if (atomic) {
    // compare_add is the value compared with (COMPARE SWAP) or added
    // (FETCH ADD); swap the value a COMPARE SWAP writes.
    out->remote_address = wr.wr.atomic.remote_addr;
    out->rkey = wr.wr.atomic.rkey;
    const bool swap = out->op == shm::kSendCompareSwap;
    out->compare = swap ? wr.wr.atomic.compare_add : 0;
    out->swap_add = swap ? wr.wr.atomic.swap : wr.wr.atomic.compare_add;
  } else if (sq.datagram) {
    out->ah = wr.wr.ud.ah->handle;
    out->remote_qpn = wr.wr.ud.remote_qpn;
    out->remote_qkey = wr.wr.ud.remote_qkey;
  } else {
    out->remote_address = wr.wr.rdma.remote_addr;
    out->rkey = wr.wr.rdma.rkey;
  }
  out->imm = imm ? wr.imm_data : 0;
  if (OpcodeOf(wr) == IBV_WR_SEND_WITH_INV) {
    out->flags |= shm::kFlagInvalidate;
    out->rkey = wr.invalidate_rkey;
  }
  return 0;
}

int TranslateRecvWr(const ibv_recv_wr& wr, const RecvQueueView& rq,
                    RecvRequest* out) {
  if (!SgeCountFits(wr.num_sge, rq.max_recv_sge)) return EINVAL;
  if (rq.outstanding >= rq.max_recv_wr) return ENOMEM;
  const uint32_t count = static_cast<uint32_t>(wr.num_sge);
  uint64_t total = 0;
  for (uint32_t i = 0; i < count; ++i) {
    out->sgl[i].addr = reinterpret_cast<void*>(wr.sg_list[i].addr);
    out->sgl[i].length = wr.sg_list[i].length;
    out->sgl[i].lkey = wr.sg_list[i].lkey;
    total += wr.sg_list[i].length;
  }
  out->sge_count = count;
  out->length = total;
  return 0;
}

}  // namespace rdmaplane::verbs
