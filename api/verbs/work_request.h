// The part of ibv_post_send and ibv_post_recv that needs no daemon: checks
// one work request against its queue's limits and turns it into what the
// verbs front end hands librdmaplane (Client::PostVerbs, Client::PostRecv):
// the operation, the flags and the SGL, an inline request's data copied
// into its slot of the queue pair's bounce buffer. What is refused here
// gets the errno of docs/verbs.md section 7: an opcode not served,
// EOPNOTSUPP; any other malformed request, EINVAL; a full queue, ENOMEM.
// The client library checks the rest when the request is posted (the
// connection's state, more than 2 GiB in all).
//
// Thread-compatible: pure functions of their arguments; TranslateSendWr
// writes only *out and the inline destination it is given, and reads the
// application's buffers only for an inline request.
#ifndef RDMAPLANE_API_VERBS_WORK_REQUEST_H_
#define RDMAPLANE_API_VERBS_WORK_REQUEST_H_

#include <infiniband/verbs.h>

#include <cstdint>

#include "api/rdmaplane.h"
#include "api/shm/layout.h"

namespace rdmaplane::verbs {

// A send queue as a post sees it: the caps ibv_create_qp settled on and
// how many requests are outstanding.
struct SendQueueView {
  uint32_t max_send_wr = 1;
  uint32_t max_send_sge = 1;
  uint32_t max_inline_data = 0;
  bool sig_all = false;  // sq_sig_all: every request is signaled
  // A UC queue pair's: SENDs and WRITEs only (IBA 9.8.1), anything else
  // is EINVAL.
  bool unreliable_connected = false;
  // A UD queue pair's: one-packet SENDs (with immediate data or not) of at
  // most `datagram_bytes` through an address handle; anything else is
  // EINVAL.
  bool datagram = false;
  uint32_t datagram_bytes = 0;
  uint64_t outstanding = 0;  // posted and not yet completed
  // Where an inline request's data goes: max_inline_data bytes registered
  // under inline_lkey (the request's slot of the queue pair's bounce
  // buffer); null when max_inline_data is 0.
  uint8_t* inline_dst = nullptr;
  uint32_t inline_lkey = 0;
};

// A send request ready for Client::PostVerbs (Client::PostAtomic for
// shm::kSendCompareSwap and kSendFetchAdd).
struct SendRequest {
  // shm::kSendWrite, kSendRead, kSendSend, kSendCompareSwap or
  // kSendFetchAdd
  uint8_t op = 0;
  ibv_wc_opcode wc_opcode = IBV_WC_RDMA_WRITE;  // of its completion
  // RDP_FLAG_DEFER always; RDP_FLAG_SILENT_SUCCESS, RDP_FLAG_READ_FENCE,
  // shm::kFlagSolicited and shm::kFlagImmediate as the request asks.
  uint32_t flags = 0;
  rdp_sge sgl[shm::kMaxSge] = {};
  uint32_t sge_count = 0;
  uint64_t length = 0;  // the SGL's bytes in all
  uint64_t remote_address = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;  // with shm::kFlagImmediate
  // Atomics: COMPARE SWAP's compare and swap values; FETCH ADD's addend in
  // swap_add.
  uint64_t compare = 0;
  uint64_t swap_add = 0;
  // UD: the address handle (ibv_ah::handle), the destination queue pair
  // (24 bits) and Q_Key.
  uint32_t ah = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // shm::kSendBindMw: rkey is the window's, imm the key it is bound under,
  // swap_add its shm::kBind* bits but kBindRegionAllowsBind (the caller
  // knows whether `bind_mr` allows binding), the SGL the window (none: an
  // unbind) in `bind_mr`. shm::kSendLocalInvalidate: rkey is the key to
  // invalidate; so is a SEND with shm::kFlagInvalidate's.
  const ibv_mr* bind_mr = nullptr;
  const ibv_mw* bind_mw = nullptr;
};

// Translates `wr` (not the requests chained after it). Returns 0 and fills
// *out, or returns the errno ibv_post_send gives for it, in this order of
// checks: EOPNOTSUPP for an opcode other than RDMA WRITE (with or without
// immediate), RDMA READ, SEND (with or without immediate), ATOMIC CMP AND
// SWP and ATOMIC FETCH AND ADD; EINVAL for a send flag other than
// SIGNALED, INLINE, FENCE and SOLICITED, a num_sge below 0 or above
// max_send_sge (or shm::kMaxSge), or an atomic whose SGL is not one SGE of
// exactly 8 bytes; ENOMEM when max_send_wr requests are outstanding; EINVAL
// for an inline request (IBV_SEND_INLINE on anything but a READ or an
// atomic) of more than max_inline_data bytes. An inline request's data is
// copied to sq.inline_dst and its SGL is that one buffer. An atomic's
// remote address is not checked here: the peer refuses a misaligned one.
int TranslateSendWr(const ibv_send_wr& wr, const SendQueueView& sq,
                    SendRequest* out);

// A receive queue as a post sees it.
struct RecvQueueView {
  uint32_t max_recv_wr = 0;
  uint32_t max_recv_sge = 0;
  uint64_t outstanding = 0;  // posted and not yet completed
};

// A receive request ready for Client::PostRecv.
struct RecvRequest {
  rdp_sge sgl[shm::kMaxSge] = {};
  uint32_t sge_count = 0;
  uint64_t length = 0;  // the SGL's bytes in all
};

// Translates `wr` (not the requests chained after it). Returns 0 and fills
// *out, or EINVAL for a num_sge below 0 or above max_recv_sge (or
// shm::kMaxSge), or ENOMEM when max_recv_wr requests are outstanding.
int TranslateRecvWr(const ibv_recv_wr& wr, const RecvQueueView& rq,
                    RecvRequest* out);

}  // namespace rdmaplane::verbs

#endif  // RDMAPLANE_API_VERBS_WORK_REQUEST_H_
