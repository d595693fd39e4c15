#include "api/verbs/work_request.h"

#include <errno.h>

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
    default:
      return EOPNOTSUPP;  // invalidation, memory windows, TSO...: docs/verbs.md
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
