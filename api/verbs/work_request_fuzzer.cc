// Fuzz target for the verbs front end's work-request translation
// (work_request.h): chains of arbitrary ibv_send_wr or ibv_recv_wr, posted
// as ibv_post_send and ibv_post_recv post them (in order, up to the first
// refused), against a queue with arbitrary caps and requests outstanding.
// Checks, for every request:
//   - a refused one gets the errno docs/verbs.md gives (EOPNOTSUPP only
//     for an opcode not served, else EINVAL or ENOMEM, as a model of the
//     checks predicts) and leaves the inline slot untouched;
//   - an accepted one is what librdmaplane accepts (an op it serves, no
//     flag beyond shm::kVerbsSendFlags, at most shm::kMaxSge SGEs; an
//     atomic, exactly one SGE of 8 bytes; a memory window request, no
//     data and the window, key and range asked for), its length is the sum of its
//     SGEs, its SGL is theirs or, inline, one buffer holding their bytes in
//     order, and the flags, immediate data, remote address and key, and an
//     atomic's compare and swap or add values are the request's;
//   - no byte is read or written outside the SGEs' buffers, the SGE array
//     (exactly num_sge entries, heap-allocated) and the inline slot
//     (exactly max_inline_data bytes), so AddressSanitizer sees a stray one.
//
// Input: a header of 6 bytes -- flags (bit 0: receives instead of sends;
// bit 1: sq_sig_all), max_wr, max_sge, max_inline_data, requests already
// outstanding, the inline lkey -- then one record per request: opcode,
// send_flags, num_sge (signed), completions retired before it, and for
// each of its SGEs (at most shm::kMaxSge) 4 bytes: offset in the buffer
// (16 bits) and length (16 bits: the low 9 bits, or with bit 15 set a
// length near 4 GiB).
//
// Runs under libFuzzer (--config=fuzz) or, as work_request_fuzzer under
// gcc, replaying api/verbs/corpus/work_request (see
// dataplane/wire/fuzz.bzl).
#include <errno.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "api/rdmaplane.h"
#include "api/shm/layout.h"
#include "api/verbs/work_request.h"
#include "dataplane/wire/fuzz_driver.h"

namespace rdmaplane::verbs {
namespace {

constexpr size_t kHeaderBytes = 6;
constexpr size_t kRecordBytes = 4;
constexpr size_t kSgeBytes = 4;
constexpr uint32_t kMaxChain = 64;
// The application's memory the SGEs point into; a short SGE (up to 511
// bytes) always lies inside it.
constexpr size_t kBufferBytes = 4096;
constexpr uint32_t kShortMax = 511;
constexpr uint8_t kCanary = 0xC5;

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool Has(size_t n) const { return size_ - pos_ >= n; }
  uint8_t U8() { return data_[pos_++]; }
  uint16_t U16() {
    const uint16_t v = static_cast<uint16_t>(data_[pos_] | data_[pos_ + 1] << 8);
    pos_ += 2;
    return v;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct Request {
  uint8_t opcode = 0;
  uint8_t send_flags = 0;
  int8_t num_sge = 0;
  uint8_t retire = 0;
  // Exactly min(max(num_sge, 0), kMaxSge) entries, so that a read past
  // what num_sge allows is a heap overflow.
  std::unique_ptr<ibv_sge[]> sges;
  uint32_t sge_entries = 0;
};

// Reads one request; false when the input ends first.
bool ReadRequest(Reader& in, const uint8_t* buffer, uint32_t index,
                 Request* r) {
  if (!in.Has(kRecordBytes)) return false;
  r->opcode = in.U8();
  r->send_flags = in.U8();
  r->num_sge = static_cast<int8_t>(in.U8());
  r->retire = in.U8();
  r->sge_entries = static_cast<uint32_t>(
      std::clamp<int>(r->num_sge, 0, static_cast<int>(shm::kMaxSge)));
  if (!in.Has(size_t{r->sge_entries} * kSgeBytes)) return false;
  r->sges.reset(new ibv_sge[r->sge_entries]);
  for (uint32_t i = 0; i < r->sge_entries; ++i) {
    const uint16_t offset = in.U16();
    const uint16_t length = in.U16();
    ibv_sge& s = r->sges[i];
    s.addr = reinterpret_cast<uint64_t>(
        buffer + offset % (kBufferBytes - kShortMax));
    s.length = (length & 0x8000) != 0 ? 0xFFFFFFFFu - (length & 0x7FFF)
                                      : length & kShortMax;
    s.lkey = 0x100 * index + i;
  }
  return true;
}

bool Served(uint8_t opcode) {
  switch (opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
      return true;
    default:
      return false;
  }
}

// BIND_MW and LOCAL_INV: memory window requests, which carry no data.
bool WindowOp(uint8_t opcode) {
  return opcode == IBV_WR_BIND_MW || opcode == IBV_WR_LOCAL_INV;
}

bool Atomic(uint8_t opcode) {
  return opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
         opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// Whether IBV_SEND_INLINE copies the request's data: not for a READ or an
// atomic, whose data comes back.
bool InlineData(const Request& r) {
  return (r.send_flags & IBV_SEND_INLINE) != 0 &&
         r.opcode != IBV_WR_RDMA_READ && !Atomic(r.opcode);
}

uint64_t SumOf(const ibv_sge* sges, uint32_t n) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += sges[i].length;
  return total;
}

// What ibv_post_send must answer, from docs/verbs.md section 7.
int ExpectedSend(const Request& r, const ibv_send_wr& wr,
                 const SendQueueView& sq) {
  if (!Served(r.opcode)) return EOPNOTSUPP;
  if (WindowOp(r.opcode)) {
    if ((r.send_flags & ~(IBV_SEND_SIGNALED | IBV_SEND_FENCE)) != 0) {
      return EINVAL;
    }
    if (r.opcode == IBV_WR_BIND_MW && wr.bind_mw.mw == nullptr) return EINVAL;
    return sq.outstanding >= sq.max_send_wr ? ENOMEM : 0;
  }
  constexpr unsigned kKnown = IBV_SEND_SIGNALED | IBV_SEND_INLINE |
                              IBV_SEND_FENCE | IBV_SEND_SOLICITED;
  if ((r.send_flags & ~kKnown) != 0) return EINVAL;
  if (r.num_sge < 0 || static_cast<uint32_t>(r.num_sge) > sq.max_send_sge ||
      static_cast<uint32_t>(r.num_sge) > shm::kMaxSge) {
    return EINVAL;
  }
  if (Atomic(r.opcode) && (r.num_sge != 1 || r.sges[0].length != 8)) {
    return EINVAL;
  }
  if (sq.outstanding >= sq.max_send_wr) return ENOMEM;
  if (InlineData(r) &&
      SumOf(r.sges.get(), r.sge_entries) > sq.max_inline_data) {
    return EINVAL;
  }
  return 0;
}

void CheckSend(const Request& r, const ibv_send_wr& wr, const SendQueueView& sq,
               const std::vector<uint8_t>& inline_slot, int err,
               const SendRequest& out) {
  FUZZ_CHECK(err == ExpectedSend(r, wr, sq));
  const bool inline_data = InlineData(r) && !WindowOp(r.opcode);
  if (err != 0) {
    for (uint8_t b : inline_slot) FUZZ_CHECK(b == kCanary);
    return;
  }
  if (WindowOp(r.opcode)) {
    for (uint8_t b : inline_slot) FUZZ_CHECK(b == kCanary);
    FUZZ_CHECK(out.length == 0);
    FUZZ_CHECK((out.flags & ~(RDP_FLAG_DEFER | RDP_FLAG_SILENT_SUCCESS |
                              RDP_FLAG_READ_FENCE)) == 0);
    if (r.opcode == IBV_WR_LOCAL_INV) {
      FUZZ_CHECK(out.op == shm::kSendLocalInvalidate);
      FUZZ_CHECK(out.wc_opcode == IBV_WC_LOCAL_INV);
      FUZZ_CHECK(out.rkey == wr.invalidate_rkey && out.sge_count == 0);
      return;
    }
    FUZZ_CHECK(out.op == shm::kSendBindMw);
    FUZZ_CHECK(out.wc_opcode == IBV_WC_BIND_MW);
    FUZZ_CHECK(out.rkey == wr.bind_mw.mw->rkey);
    FUZZ_CHECK(out.imm == wr.bind_mw.rkey);
    const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
    FUZZ_CHECK(out.sge_count == (b.length != 0 ? 1u : 0u));
    if (out.sge_count == 1) {
      FUZZ_CHECK(reinterpret_cast<uint64_t>(out.sgl[0].addr) == b.addr);
      FUZZ_CHECK(out.sgl[0].length == b.length);
      FUZZ_CHECK(out.sgl[0].lkey == b.mr->lkey);
    }
    return;
  }
  const uint64_t total = SumOf(r.sges.get(), r.sge_entries);
  FUZZ_CHECK(out.length == total);
  FUZZ_CHECK(out.sge_count <= shm::kMaxSge);
  FUZZ_CHECK((out.flags & ~shm::kVerbsSendFlags) == 0);
  FUZZ_CHECK((out.flags & RDP_FLAG_DEFER) != 0);
  const bool signaled = sq.sig_all || (r.send_flags & IBV_SEND_SIGNALED) != 0;
  FUZZ_CHECK(((out.flags & RDP_FLAG_SILENT_SUCCESS) != 0) == !signaled);
  FUZZ_CHECK(((out.flags & RDP_FLAG_READ_FENCE) != 0) ==
             ((r.send_flags & IBV_SEND_FENCE) != 0));
  FUZZ_CHECK(((out.flags & shm::kFlagSolicited) != 0) ==
             ((r.send_flags & IBV_SEND_SOLICITED) != 0));
  FUZZ_CHECK((out.flags & RDP_FLAG_READ_LOCAL_INVALIDATE) == 0);
  const bool imm = r.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
                   r.opcode == IBV_WR_SEND_WITH_IMM;
  FUZZ_CHECK(((out.flags & shm::kFlagImmediate) != 0) == imm);
  FUZZ_CHECK(out.imm == (imm ? wr.imm_data : 0));
  const bool invalidate = r.opcode == IBV_WR_SEND_WITH_INV;
  FUZZ_CHECK(((out.flags & shm::kFlagInvalidate) != 0) == invalidate);
  switch (r.opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      FUZZ_CHECK(out.op == shm::kSendWrite);
      FUZZ_CHECK(out.wc_opcode == IBV_WC_RDMA_WRITE);
      break;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
      FUZZ_CHECK(out.op == shm::kSendSend);
      FUZZ_CHECK(out.wc_opcode == IBV_WC_SEND);
      break;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      FUZZ_CHECK(out.op == shm::kSendCompareSwap);
      FUZZ_CHECK(out.wc_opcode == IBV_WC_COMP_SWAP);
      break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      FUZZ_CHECK(out.op == shm::kSendFetchAdd);
      FUZZ_CHECK(out.wc_opcode == IBV_WC_FETCH_ADD);
      break;
    default:
      FUZZ_CHECK(out.op == shm::kSendRead);
      FUZZ_CHECK(out.wc_opcode == IBV_WC_RDMA_READ);
      break;
  }
  if (Atomic(r.opcode)) {
    FUZZ_CHECK(out.remote_address == wr.wr.atomic.remote_addr);
    FUZZ_CHECK(out.rkey == wr.wr.atomic.rkey);
    const bool swap = r.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
    FUZZ_CHECK(out.compare == (swap ? wr.wr.atomic.compare_add : 0));
    FUZZ_CHECK(out.swap_add ==
               (swap ? wr.wr.atomic.swap : wr.wr.atomic.compare_add));
    FUZZ_CHECK(out.sge_count == 1 && out.length == 8);
  } else {
    FUZZ_CHECK(out.remote_address == wr.wr.rdma.remote_addr);
    FUZZ_CHECK(out.rkey ==
               (invalidate ? wr.invalidate_rkey : wr.wr.rdma.rkey));
    FUZZ_CHECK(out.compare == 0 && out.swap_add == 0);
  }
  if (inline_data) {
    FUZZ_CHECK(out.sge_count == 1);
    FUZZ_CHECK(out.sgl[0].addr == sq.inline_dst);
    FUZZ_CHECK(out.sgl[0].length == total);
    FUZZ_CHECK(out.sgl[0].lkey == sq.inline_lkey);
    size_t at = 0;
    for (uint32_t i = 0; i < r.sge_entries; ++i) {
      const ibv_sge& s = r.sges[i];
      FUZZ_CHECK(s.length == 0 ||
                 std::memcmp(inline_slot.data() + at,
                             reinterpret_cast<const void*>(s.addr),
                             s.length) == 0);
      at += s.length;
    }
    for (; at < inline_slot.size(); ++at) {
      FUZZ_CHECK(inline_slot[at] == kCanary);
    }
    return;
  }
  for (uint8_t b : inline_slot) FUZZ_CHECK(b == kCanary);
  FUZZ_CHECK(out.sge_count == r.sge_entries);
  for (uint32_t i = 0; i < out.sge_count; ++i) {
    FUZZ_CHECK(reinterpret_cast<uint64_t>(out.sgl[i].addr) == r.sges[i].addr);
    FUZZ_CHECK(out.sgl[i].length == r.sges[i].length);
    FUZZ_CHECK(out.sgl[i].lkey == r.sges[i].lkey);
  }
}

void CheckRecv(const Request& r, const RecvQueueView& rq, int err,
               const RecvRequest& out) {
  int expected = 0;
  if (r.num_sge < 0 || static_cast<uint32_t>(r.num_sge) > rq.max_recv_sge ||
      static_cast<uint32_t>(r.num_sge) > shm::kMaxSge) {
    expected = EINVAL;
  } else if (rq.outstanding >= rq.max_recv_wr) {
    expected = ENOMEM;
  }
  FUZZ_CHECK(err == expected);
  if (err != 0) return;
  FUZZ_CHECK(out.sge_count == r.sge_entries);
  FUZZ_CHECK(out.length == SumOf(r.sges.get(), r.sge_entries));
  for (uint32_t i = 0; i < out.sge_count; ++i) {
    FUZZ_CHECK(reinterpret_cast<uint64_t>(out.sgl[i].addr) == r.sges[i].addr);
    FUZZ_CHECK(out.sgl[i].length == r.sges[i].length);
    FUZZ_CHECK(out.sgl[i].lkey == r.sges[i].lkey);
  }
}

void Run(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return;
  Reader in(data, size);
  const uint8_t mode = in.U8();
  const uint8_t max_wr = in.U8();
  const uint8_t max_sge = in.U8();
  const uint8_t max_inline = in.U8();
  uint64_t outstanding = in.U8();
  const uint8_t inline_lkey = in.U8();
  const bool receives = (mode & 1) != 0;

  auto buffer = std::make_unique<uint8_t[]>(kBufferBytes);
  for (size_t i = 0; i < kBufferBytes; ++i) {
    buffer[i] = static_cast<uint8_t>(i * 131 + (i >> 8));
  }
  // Read the whole chain first, then post it, as an application hands
  // ibv_post_send a linked list.
  std::vector<Request> requests;
  while (requests.size() < kMaxChain) {
    Request r;
    if (!ReadRequest(in, buffer.get(), static_cast<uint32_t>(requests.size()),
                     &r)) {
      break;
    }
    requests.push_back(std::move(r));
  }
  if (receives) {
    std::vector<ibv_recv_wr> chain(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      chain[i].wr_id = i;
      chain[i].num_sge = requests[i].num_sge;
      chain[i].sg_list = requests[i].sges.get();
      chain[i].next = i + 1 < chain.size() ? &chain[i + 1] : nullptr;
    }
    for (ibv_recv_wr* wr = chain.empty() ? nullptr : &chain[0]; wr != nullptr;
         wr = wr->next) {
      const Request& r = requests[wr->wr_id];
      outstanding -= std::min<uint64_t>(outstanding, r.retire);
      RecvQueueView rq;
      rq.max_recv_wr = max_wr;
      rq.max_recv_sge = max_sge;
      rq.outstanding = outstanding;
      RecvRequest out;
      const int err = TranslateRecvWr(*wr, rq, &out);
      CheckRecv(r, rq, err, out);
      if (err != 0) break;  // *bad_wr: the rest is not posted
      ++outstanding;
    }
    return;
  }
  ibv_mw window{};
  window.rkey = 0x3433;
  ibv_mr region{};
  region.lkey = 0x4242;
  std::vector<ibv_send_wr> chain(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    chain[i].wr_id = i;
    // Stored as an application's garbage would be: not through the enum
    // type, whose range it may lie outside.
    const std::underlying_type_t<ibv_wr_opcode> opcode = requests[i].opcode;
    std::memcpy(&chain[i].opcode, &opcode, sizeof(opcode));
    chain[i].send_flags = requests[i].send_flags;
    chain[i].num_sge = requests[i].num_sge;
    chain[i].sg_list = requests[i].sges.get();
    chain[i].imm_data = static_cast<uint32_t>(0x5EED0000u + i);
    if (Atomic(requests[i].opcode)) {
      // Any address: alignment is the peer's to check.
      chain[i].wr.atomic.remote_addr = 0x7F0000000000ull + (i << 12) + i;
      chain[i].wr.atomic.compare_add = 0xC0C0000000000000ull + i;
      chain[i].wr.atomic.swap = 0x5A5A000000000000ull + i;
      chain[i].wr.atomic.rkey = static_cast<uint32_t>(0xB000 + i);
    } else {
      chain[i].wr.rdma.remote_addr = 0x7F0000000000ull + (i << 12);
      chain[i].wr.rdma.rkey = static_cast<uint32_t>(0xA000 + i);
    }
    // A window for every other BIND_MW (none: refused), bound to a range
    // of the SGEs' length (0: an unbind) of a region.
    if (i % 2 == 0) chain[i].bind_mw.mw = &window;
    chain[i].bind_mw.rkey = static_cast<uint32_t>(0x3400 + i);
    chain[i].bind_mw.bind_info.mr = &region;
    chain[i].bind_mw.bind_info.addr = 0x9000 + i;
    chain[i].bind_mw.bind_info.length =
        SumOf(requests[i].sges.get(), requests[i].sge_entries) & 0xFFFF;
    chain[i].bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    chain[i].next = i + 1 < chain.size() ? &chain[i + 1] : nullptr;
  }
  for (ibv_send_wr* wr = chain.empty() ? nullptr : &chain[0]; wr != nullptr;
       wr = wr->next) {
    const Request& r = requests[wr->wr_id];
    outstanding -= std::min<uint64_t>(outstanding, r.retire);
    // The request's slot of the bounce buffer, exactly max_inline_data
    // bytes (none: no buffer, as ibv_create_qp leaves it).
    std::vector<uint8_t> inline_slot(max_inline, kCanary);
    SendQueueView sq;
    sq.max_send_wr = max_wr;
    sq.max_send_sge = max_sge;
    sq.max_inline_data = max_inline;
    sq.sig_all = (mode & 2) != 0;
    sq.outstanding = outstanding;
    sq.inline_dst = inline_slot.empty() ? nullptr : inline_slot.data();
    sq.inline_lkey = inline_lkey;
    SendRequest out;
    const int err = TranslateSendWr(*wr, sq, &out);
    CheckSend(r, *wr, sq, inline_slot, err, out);
    if (err != 0) break;  // *bad_wr: the rest is not posted
    ++outstanding;
  }
}

}  // namespace
}  // namespace rdmaplane::verbs

namespace rdmaplane::wire {

// For the fuzz_driver's mutation mode: a WRITE with two SGEs, an inline
// SEND and a READ on a roomy queue; a COMPARE SWAP and a FETCH ADD, and one
// with a 4-byte SGE; two receives; a bind, a local invalidate, a SEND with
// Invalidate and a bind without a window.
std::vector<std::vector<uint8_t>> FuzzSeedCorpus() {
  return {
      {0, 16, 4, 64, 0, 9,
       IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, 2, 0, 0, 0, 16, 0, 64, 0, 8, 0,
       IBV_WR_SEND_WITH_IMM, IBV_SEND_INLINE, 1, 0, 8, 0, 40, 0,
       IBV_WR_RDMA_READ, IBV_SEND_FENCE, 1, 1, 0, 1, 0, 1},
      {0, 16, 4, 64, 0, 9,
       IBV_WR_ATOMIC_CMP_AND_SWP, IBV_SEND_SIGNALED, 1, 0, 8, 0, 8, 0,
       IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_SEND_INLINE | IBV_SEND_FENCE, 1, 0,
       16, 0, 8, 0,
       IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 1, 0, 16, 0, 4, 0},
      {1, 4, 2, 0, 3, 0,
       0, 0, 2, 0, 0, 0, 32, 0, 32, 0, 32, 0,
       0, 0, 0, 2},
      {0, 16, 4, 64, 0, 9,
       IBV_WR_BIND_MW, IBV_SEND_SIGNALED, 1, 0, 0, 0, 16, 0,
       IBV_WR_LOCAL_INV, IBV_SEND_FENCE, 0, 0,
       IBV_WR_SEND_WITH_INV, IBV_SEND_SIGNALED, 1, 0, 8, 0, 40, 0,
       IBV_WR_BIND_MW, 0, 0, 0},
  };
}

}  // namespace rdmaplane::wire

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rdmaplane::verbs::Run(data, size);
  return 0;
}
