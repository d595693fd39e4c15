// TranslateSendWr and TranslateRecvWr: each opcode served and one not,
// atomics and their one 8-byte SGE, every send flag, the SGE and queue
// limits, inline data, and the order of the checks (the errno a request
// with several faults gets).
#include "api/verbs/work_request.h"

#include <errno.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "api/rdmaplane.h"
#include "api/shm/layout.h"

namespace rdmaplane::verbs {
namespace {

class SendWrTest : public ::testing::Test {
 protected:
  SendWrTest() {
    for (size_t i = 0; i < data_.size(); ++i) {
      data_[i] = static_cast<uint8_t>(i * 7 + 1);
    }
    inline_buf_.fill(0);
    sq_.max_send_wr = 4;
    sq_.max_send_sge = 3;
    sq_.max_inline_data = 64;
    sq_.inline_dst = inline_buf_.data();
    sq_.inline_lkey = 0x777;
    wr_.wr_id = 42;
    wr_.opcode = IBV_WR_RDMA_WRITE;
    wr_.send_flags = IBV_SEND_SIGNALED;
    wr_.wr.rdma.remote_addr = 0x1000;
    wr_.wr.rdma.rkey = 0x55;
    SetSges({{0, 16}, {32, 8}});
  }

  // SGEs over data_: {offset, length} each, lkeys 100, 101, ...
  void SetSges(std::initializer_list<std::pair<uint32_t, uint32_t>> sges) {
    int n = 0;
    for (const auto& [offset, length] : sges) {
      sge_[n].addr = reinterpret_cast<uint64_t>(data_.data() + offset);
      sge_[n].length = length;
      sge_[n].lkey = 100 + static_cast<uint32_t>(n);
      ++n;
    }
    wr_.sg_list = sge_;
    wr_.num_sge = n;
  }

  int Translate() { return TranslateSendWr(wr_, sq_, &out_); }

  std::array<uint8_t, 256> data_;
  std::array<uint8_t, 64> inline_buf_;
  ibv_sge sge_[shm::kMaxSge + 2] = {};
  ibv_send_wr wr_{};
  SendQueueView sq_;
  SendRequest out_;
};

TEST_F(SendWrTest, EachOpcodeServed) {
  struct Case {
    ibv_wr_opcode opcode;
    uint8_t op;
    ibv_wc_opcode wc_opcode;
    bool imm;
  };
  const Case cases[] = {
      {IBV_WR_RDMA_WRITE, shm::kSendWrite, IBV_WC_RDMA_WRITE, false},
      {IBV_WR_RDMA_WRITE_WITH_IMM, shm::kSendWrite, IBV_WC_RDMA_WRITE, true},
      {IBV_WR_SEND, shm::kSendSend, IBV_WC_SEND, false},
      {IBV_WR_SEND_WITH_IMM, shm::kSendSend, IBV_WC_SEND, true},
      {IBV_WR_RDMA_READ, shm::kSendRead, IBV_WC_RDMA_READ, false},
  };
  wr_.imm_data = 0xABCD1234;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.opcode);
    wr_.opcode = c.opcode;
    out_ = SendRequest{};
    ASSERT_EQ(Translate(), 0);
    EXPECT_EQ(out_.op, c.op);
    EXPECT_EQ(out_.wc_opcode, c.wc_opcode);
    EXPECT_EQ((out_.flags & shm::kFlagImmediate) != 0, c.imm);
    EXPECT_EQ(out_.imm, c.imm ? 0xABCD1234u : 0u);
    EXPECT_EQ(out_.remote_address, 0x1000u);
    EXPECT_EQ(out_.rkey, 0x55u);
    ASSERT_EQ(out_.sge_count, 2u);
    EXPECT_EQ(out_.sgl[0].addr, data_.data());
    EXPECT_EQ(out_.sgl[0].length, 16u);
    EXPECT_EQ(out_.sgl[0].lkey, 100u);
    EXPECT_EQ(out_.sgl[1].addr, data_.data() + 32);
    EXPECT_EQ(out_.sgl[1].length, 8u);
    EXPECT_EQ(out_.sgl[1].lkey, 101u);
    EXPECT_EQ(out_.length, 24u);
  }
}

TEST_F(SendWrTest, Atomics) {
  struct Case {
    ibv_wr_opcode opcode;
    uint8_t op;
    ibv_wc_opcode wc_opcode;
    uint64_t compare;
    uint64_t swap_add;
  };
  // compare_add is COMPARE SWAP's compare value and FETCH ADD's addend.
  const Case cases[] = {
      {IBV_WR_ATOMIC_CMP_AND_SWP, shm::kSendCompareSwap, IBV_WC_COMP_SWAP,
       0x1111222233334444ull, 0x5555666677778888ull},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, shm::kSendFetchAdd, IBV_WC_FETCH_ADD, 0,
       0x1111222233334444ull},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.opcode);
    wr_ = ibv_send_wr{};
    wr_.wr_id = 7;
    wr_.opcode = c.opcode;
    wr_.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
    wr_.wr.atomic.remote_addr = 0x7F0000001008ull;
    wr_.wr.atomic.compare_add = 0x1111222233334444ull;
    wr_.wr.atomic.swap = 0x5555666677778888ull;
    wr_.wr.atomic.rkey = 0x66;
    SetSges({{8, 8}});
    out_ = SendRequest{};
    ASSERT_EQ(Translate(), 0);
    EXPECT_EQ(out_.op, c.op);
    EXPECT_EQ(out_.wc_opcode, c.wc_opcode);
    EXPECT_EQ(out_.flags, RDP_FLAG_DEFER | RDP_FLAG_READ_FENCE);
    EXPECT_EQ(out_.remote_address, 0x7F0000001008ull);
    EXPECT_EQ(out_.rkey, 0x66u);
    EXPECT_EQ(out_.compare, c.compare);
    EXPECT_EQ(out_.swap_add, c.swap_add);
    ASSERT_EQ(out_.sge_count, 1u);
    EXPECT_EQ(out_.sgl[0].addr, data_.data() + 8);
    EXPECT_EQ(out_.sgl[0].length, 8u);
    EXPECT_EQ(out_.sgl[0].lkey, 100u);
    EXPECT_EQ(out_.length, 8u);
    // A misaligned remote address is the peer's to refuse.
    wr_.wr.atomic.remote_addr = 0x7F0000001004ull;
    ASSERT_EQ(Translate(), 0);
    EXPECT_EQ(out_.remote_address, 0x7F0000001004ull);
    // Inline is ignored: the value comes back into the SGE.
    wr_.send_flags = IBV_SEND_INLINE;
    ASSERT_EQ(Translate(), 0);
    EXPECT_EQ(out_.sgl[0].addr, data_.data() + 8);
    EXPECT_EQ(inline_buf_[0], 0);
  }
}

TEST_F(SendWrTest, AtomicsTakeOneEightByteSge) {
  for (ibv_wr_opcode op :
       {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
    SCOPED_TRACE(op);
    wr_.opcode = op;
    SetSges({{0, 8}});
    EXPECT_EQ(Translate(), 0);
    for (uint32_t len : {0u, 4u, 7u, 9u, 16u}) {
      SetSges({{0, len}});
      EXPECT_EQ(Translate(), EINVAL) << len;
    }
    SetSges({{0, 8}, {8, 8}});
    EXPECT_EQ(Translate(), EINVAL);
    SetSges({{0, 4}, {4, 4}});  // 8 bytes, but in two SGEs
    EXPECT_EQ(Translate(), EINVAL);
    wr_.num_sge = 0;
    EXPECT_EQ(Translate(), EINVAL);
    // ... checked before the queue's room.
    SetSges({{0, 4}});
    sq_.outstanding = sq_.max_send_wr;
    EXPECT_EQ(Translate(), EINVAL);
    SetSges({{0, 8}});
    EXPECT_EQ(Translate(), ENOMEM);
    sq_.outstanding = 0;
  }
}

TEST_F(SendWrTest, OpcodeNotServed) {
  for (ibv_wr_opcode op : {IBV_WR_TSO, IBV_WR_ATOMIC_WRITE, IBV_WR_DRIVER1}) {
    wr_.opcode = op;
    EXPECT_EQ(Translate(), EOPNOTSUPP) << op;
  }
  // A value outside the enum's range, as garbage or a newer rdma-core's
  // opcode would be stored (not through the enum type: that would be
  // undefined).
  for (std::underlying_type_t<ibv_wr_opcode> raw : {49u, 200u, ~0u}) {
    std::memcpy(&wr_.opcode, &raw, sizeof(raw));
    EXPECT_EQ(Translate(), EOPNOTSUPP) << raw;
  }
  // The opcode is checked first.
  wr_.send_flags = 0x8000;
  wr_.num_sge = 99;
  EXPECT_EQ(Translate(), EOPNOTSUPP);
}

TEST_F(SendWrTest, SendWithInvalidateIsAnRcSendNamingTheKey) {
  wr_.opcode = IBV_WR_SEND_WITH_INV;
  wr_.invalidate_rkey = 0xABCD12;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.op, shm::kSendSend);
  EXPECT_EQ(out_.wc_opcode, IBV_WC_SEND);
  EXPECT_NE(out_.flags & shm::kFlagInvalidate, 0u);
  EXPECT_EQ(out_.flags & shm::kFlagImmediate, 0u);
  EXPECT_EQ(out_.rkey, 0xABCD12u);
  EXPECT_EQ(out_.sge_count, 2u);
  // The IBA has no UC or UD opcode for it.
  sq_.unreliable_connected = true;
  EXPECT_EQ(Translate(), EINVAL);
  sq_.unreliable_connected = false;
  sq_.datagram = true;
  EXPECT_EQ(Translate(), EINVAL);
}

TEST_F(SendWrTest, BindAndLocalInvalidateCarryNoData) {
  ibv_mw mw{};
  mw.rkey = 0x1200 | 0x34;
  ibv_mr mr{};
  mr.lkey = 0x999;
  wr_.opcode = IBV_WR_BIND_MW;
  wr_.send_flags = 0;
  wr_.bind_mw.mw = &mw;
  wr_.bind_mw.rkey = 0x1235;
  wr_.bind_mw.bind_info.mr = &mr;
  wr_.bind_mw.bind_info.addr = 0x5000;
  wr_.bind_mw.bind_info.length = 300;
  wr_.bind_mw.bind_info.mw_access_flags =
      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.op, shm::kSendBindMw);
  EXPECT_EQ(out_.wc_opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(out_.rkey, 0x1234u);
  EXPECT_EQ(out_.imm, 0x1235u);
  EXPECT_EQ(out_.swap_add, shm::kBindRemoteWrite | shm::kBindZeroBased);
  EXPECT_EQ(out_.sge_count, 1u);
  EXPECT_EQ(out_.sgl[0].lkey, 0x999u);
  EXPECT_EQ(out_.sgl[0].length, 300u);
  EXPECT_NE(out_.flags & RDP_FLAG_SILENT_SUCCESS, 0u);
  EXPECT_EQ(out_.bind_mr, &mr);
  // An unbind (type 1): no region, no range.
  wr_.bind_mw.bind_info = {};
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.sge_count, 0u);
  // Local write grants a window nothing: taken and ignored, as rxe does
  // (rdma-core's own tests bind windows with it).
  wr_.bind_mw.bind_info = {&mr, 0x5000, 8,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.swap_add, shm::kBindRemoteWrite);
  // A range without a region, a right a window cannot have, no window, a
  // datagram queue pair, inline: refused.
  wr_.bind_mw.bind_info = {};
  wr_.bind_mw.bind_info.length = 8;
  EXPECT_EQ(Translate(), EINVAL);
  wr_.bind_mw.bind_info = {&mr, 0x5000, 8, IBV_ACCESS_MW_BIND};
  EXPECT_EQ(Translate(), EINVAL);
  wr_.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
  wr_.bind_mw.mw = nullptr;
  EXPECT_EQ(Translate(), EINVAL);
  wr_.bind_mw.mw = &mw;
  wr_.send_flags = IBV_SEND_INLINE;
  EXPECT_EQ(Translate(), EINVAL);
  wr_.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.flags & RDP_FLAG_SILENT_SUCCESS, 0u);
  EXPECT_NE(out_.flags & RDP_FLAG_READ_FENCE, 0u);
  sq_.datagram = true;
  EXPECT_EQ(Translate(), EINVAL);
  sq_.datagram = false;
  // LOCAL_INV names the key; UC takes both (only UD refuses).
  wr_.opcode = IBV_WR_LOCAL_INV;
  wr_.invalidate_rkey = 0x1235;
  sq_.unreliable_connected = true;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.op, shm::kSendLocalInvalidate);
  EXPECT_EQ(out_.wc_opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(out_.rkey, 0x1235u);
  EXPECT_EQ(out_.sge_count, 0u);
  // A full queue.
  sq_.outstanding = sq_.max_send_wr;
  EXPECT_EQ(Translate(), ENOMEM);
}

TEST_F(SendWrTest, UnknownSendFlag) {
  for (unsigned flag : {unsigned{IBV_SEND_IP_CSUM}, 1u << 10, 1u << 31}) {
    wr_.send_flags = IBV_SEND_SIGNALED | flag;
    EXPECT_EQ(Translate(), EINVAL) << flag;
  }
}

TEST_F(SendWrTest, Flags) {
  wr_.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.flags, RDP_FLAG_DEFER);

  wr_.send_flags = 0;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.flags, RDP_FLAG_DEFER | RDP_FLAG_SILENT_SUCCESS);

  sq_.sig_all = true;  // sq_sig_all signals every request
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.flags, RDP_FLAG_DEFER);

  wr_.send_flags = IBV_SEND_FENCE | IBV_SEND_SOLICITED;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.flags,
            RDP_FLAG_DEFER | RDP_FLAG_READ_FENCE | shm::kFlagSolicited);
}

TEST_F(SendWrTest, SgeCount) {
  SetSges({{0, 1}, {1, 1}, {2, 1}});  // max_send_sge
  EXPECT_EQ(Translate(), 0);
  EXPECT_EQ(out_.sge_count, 3u);
  SetSges({{0, 1}, {1, 1}, {2, 1}, {3, 1}});
  EXPECT_EQ(Translate(), EINVAL);
  wr_.num_sge = -1;
  EXPECT_EQ(Translate(), EINVAL);
  // Never more than a send entry holds, whatever the caps say.
  sq_.max_send_sge = 100;
  wr_.num_sge = shm::kMaxSge + 1;
  EXPECT_EQ(Translate(), EINVAL);
  wr_.num_sge = shm::kMaxSge;
  EXPECT_EQ(Translate(), 0);
}

TEST_F(SendWrTest, ZeroLength) {
  wr_.num_sge = 0;
  wr_.sg_list = nullptr;  // never read without SGEs
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.sge_count, 0u);
  EXPECT_EQ(out_.length, 0u);

  SetSges({{0, 0}, {8, 0}});
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.sge_count, 2u);
  EXPECT_EQ(out_.length, 0u);
}

TEST_F(SendWrTest, QueueFull) {
  sq_.outstanding = 3;
  EXPECT_EQ(Translate(), 0);
  sq_.outstanding = 4;
  EXPECT_EQ(Translate(), ENOMEM);
  // A full queue is seen before an inline request too long for it.
  wr_.send_flags = IBV_SEND_INLINE;
  SetSges({{0, 65}});
  EXPECT_EQ(Translate(), ENOMEM);
  // ... but after a bad SGE count.
  wr_.num_sge = 4;
  EXPECT_EQ(Translate(), EINVAL);
}

TEST_F(SendWrTest, InlineCopiesIntoTheSlot) {
  wr_.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  SetSges({{0, 16}, {100, 0}, {32, 48}});  // 64 bytes: exactly the limit
  ASSERT_EQ(Translate(), 0);
  ASSERT_EQ(out_.sge_count, 1u);
  EXPECT_EQ(out_.sgl[0].addr, inline_buf_.data());
  EXPECT_EQ(out_.sgl[0].length, 64u);
  EXPECT_EQ(out_.sgl[0].lkey, 0x777u);
  EXPECT_EQ(out_.length, 64u);
  EXPECT_EQ(std::memcmp(inline_buf_.data(), data_.data(), 16), 0);
  EXPECT_EQ(std::memcmp(inline_buf_.data() + 16, data_.data() + 32, 48), 0);
}

TEST_F(SendWrTest, InlineTooLong) {
  wr_.send_flags = IBV_SEND_INLINE;
  SetSges({{0, 60}, {64, 5}});
  EXPECT_EQ(Translate(), EINVAL);
  EXPECT_EQ(inline_buf_[0], 0);  // nothing copied
  sq_.max_inline_data = 0;
  sq_.inline_dst = nullptr;
  SetSges({{0, 1}});
  EXPECT_EQ(Translate(), EINVAL);
}

TEST_F(SendWrTest, InlineWithoutData) {
  // No bounce buffer and no bytes: one empty SGE under the inline key.
  sq_.max_inline_data = 0;
  sq_.inline_dst = nullptr;
  sq_.inline_lkey = 0;
  wr_.send_flags = IBV_SEND_INLINE;
  SetSges({{0, 0}, {4, 0}});
  ASSERT_EQ(Translate(), 0);
  ASSERT_EQ(out_.sge_count, 1u);
  EXPECT_EQ(out_.sgl[0].addr, nullptr);
  EXPECT_EQ(out_.sgl[0].length, 0u);
  wr_.num_sge = 0;
  ASSERT_EQ(Translate(), 0);
  EXPECT_EQ(out_.sge_count, 1u);
}

TEST_F(SendWrTest, InlineIgnoredForRead) {
  wr_.opcode = IBV_WR_RDMA_READ;
  wr_.send_flags = IBV_SEND_INLINE;
  SetSges({{0, 200}});  // longer than max_inline_data: not inline
  ASSERT_EQ(Translate(), 0);
  ASSERT_EQ(out_.sge_count, 1u);
  EXPECT_EQ(out_.sgl[0].addr, data_.data());
  EXPECT_EQ(out_.sgl[0].lkey, 100u);
  EXPECT_EQ(out_.length, 200u);
  EXPECT_EQ(inline_buf_[0], 0);
}

TEST(RecvWrTest, Translates) {
  uint8_t buf[64];
  ibv_sge sge[shm::kMaxSge + 1] = {};
  for (uint32_t i = 0; i <= shm::kMaxSge; ++i) {
    sge[i] = {reinterpret_cast<uint64_t>(buf + i), i + 1, 200 + i};
  }
  ibv_recv_wr wr{};
  wr.sg_list = sge;
  wr.num_sge = 2;
  RecvQueueView rq;
  rq.max_recv_wr = 2;
  rq.max_recv_sge = 2;
  RecvRequest out;
  ASSERT_EQ(TranslateRecvWr(wr, rq, &out), 0);
  ASSERT_EQ(out.sge_count, 2u);
  EXPECT_EQ(out.sgl[1].addr, buf + 1);
  EXPECT_EQ(out.sgl[1].length, 2u);
  EXPECT_EQ(out.sgl[1].lkey, 201u);
  EXPECT_EQ(out.length, 3u);

  wr.num_sge = 0;
  ASSERT_EQ(TranslateRecvWr(wr, rq, &out), 0);
  EXPECT_EQ(out.sge_count, 0u);
  EXPECT_EQ(out.length, 0u);

  wr.num_sge = 3;
  EXPECT_EQ(TranslateRecvWr(wr, rq, &out), EINVAL);
  wr.num_sge = -2;
  EXPECT_EQ(TranslateRecvWr(wr, rq, &out), EINVAL);
  rq.max_recv_sge = 100;
  wr.num_sge = shm::kMaxSge + 1;
  EXPECT_EQ(TranslateRecvWr(wr, rq, &out), EINVAL);

  wr.num_sge = 1;
  rq.outstanding = 2;
  EXPECT_EQ(TranslateRecvWr(wr, rq, &out), ENOMEM);
  wr.num_sge = shm::kMaxSge + 1;  // the SGE count is checked first
  EXPECT_EQ(TranslateRecvWr(wr, rq, &out), EINVAL);
}

}  // namespace
}  // namespace rdmaplane::verbs
