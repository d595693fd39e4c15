// Remote access violations: the responder refuses them with NAK "remote
// access error" before touching memory, and the requester completes the work
// request with the matching error and moves the connection to error.
#include <gtest/gtest.h>

#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"

namespace rdmaplane::rc {
namespace {

using testing::Fixture;
using testing::Pattern;

constexpr uint64_t kSecond = 1'000'000'000;
constexpr uint64_t kReadOnlyVa = 0x100000000ull;
constexpr uint64_t kWriteOnlyVa = 0x200000000ull;
constexpr uint64_t kOtherConnVa = 0x300000000ull;
const wire::Rkey kReadOnlyKey{0x3001};
const wire::Rkey kWriteOnlyKey{0x3002};
const wire::Rkey kOtherConnKey{0x3003};
constexpr uint32_t kRegionLen = 8192;

struct Violation {
  const char* name;
  bool read;
  wire::Rkey rkey;
  uint64_t va;
  uint32_t length;
  AccessCheck reason;
};

class AccessTest : public ::testing::TestWithParam<Violation> {
 protected:
  AccessTest()
      : read_only_(Pattern(kRegionLen, 1)),
        write_only_(Pattern(kRegionLen, 2)),
        other_conn_(Pattern(kRegionLen, 3)) {
    const wire::Qpn b_qpn = f_.pair.b.qp->config().local_qpn;
    f_.pair.b.memory.Add({b_qpn, kReadOnlyKey, kReadOnlyVa, read_only_.data(),
                          kRegionLen, true, false});
    f_.pair.b.memory.Add({b_qpn, kWriteOnlyKey, kWriteOnlyVa,
                          write_only_.data(), kRegionLen, false, true});
    // Registered on B for a different connection.
    f_.pair.b.memory.Add({wire::Qpn(0x777), kOtherConnKey, kOtherConnVa,
                          other_conn_.data(), kRegionLen, true, true});
    auto main = Pattern(f_.b_region.size(), 4);
    std::copy(main.begin(), main.end(), f_.b_region.begin());
  }

  Fixture f_;
  std::vector<uint8_t> read_only_, write_only_, other_conn_;
};

TEST_P(AccessTest, RefusedWithoutTouchingMemory) {
  const Violation& v = GetParam();
  const auto b_before = f_.b_region;
  const auto ro_before = read_only_;
  const auto wo_before = write_only_;
  const auto other_before = other_conn_;

  auto src = Pattern(v.length, 99);
  std::vector<uint8_t> dst(v.length, 0x5A);
  WorkRequest wr;
  wr.wr_id = 42;
  wr.opcode = v.read ? WrOpcode::kRead : WrOpcode::kWrite;
  wr.num_sge = 1;
  wr.sge[0] = {v.read ? dst.data() : src.data(), v.length};
  wr.remote_va = v.va;
  wr.rkey = v.rkey;
  ASSERT_EQ(f_.pair.a.qp->Post(wr), PostResult::kOk);
  // A request behind the bad one is flushed, not executed.
  auto later = Pattern(64, 5);
  ASSERT_EQ(f_.pair.a.qp->Post(Fixture::Write(43, later.data(), 64, 0)),
            PostResult::kOk);
  ASSERT_TRUE(f_.pair.RunUntil(
      [&] { return f_.pair.a.cq.completions.size() == 2; }, kSecond));

  EXPECT_EQ(f_.pair.a.cq.completions[0].wr_id, 42u);
  EXPECT_EQ(f_.pair.a.cq.completions[0].status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(f_.pair.a.cq.completions[0].byte_len, 0u);
  EXPECT_EQ(f_.pair.a.cq.completions[1].status, WcStatus::kFlushed);
  EXPECT_EQ(f_.pair.a.qp->state(), QpState::kError);
  EXPECT_EQ(f_.pair.b.qp->stats().access_errors, 1u);

  EXPECT_EQ(f_.b_region, b_before);
  EXPECT_EQ(read_only_, ro_before);
  EXPECT_EQ(write_only_, wo_before);
  EXPECT_EQ(other_conn_, other_before);
  if (v.read) {
    EXPECT_EQ(dst, std::vector<uint8_t>(v.length, 0x5A)) << "data leaked";
  }
  // The refusal has the expected reason.
  EXPECT_EQ(f_.pair.b.memory.Resolve(f_.pair.b.qp->config().local_qpn, v.rkey,
                                     v.va, v.length,
                                     v.read ? RemoteAccess::kRead
                                            : RemoteAccess::kWrite)
                .check,
            v.reason);
}

INSTANTIATE_TEST_SUITE_P(
    Violations, AccessTest,
    ::testing::Values(
        Violation{"WriteUnknownKey", false, wire::Rkey(0xDEAD), testing::kRemoteVa,
                  100, AccessCheck::kUnknownKey},
        Violation{"ReadUnknownKey", true, wire::Rkey(0xDEAD), testing::kRemoteVa,
                  100, AccessCheck::kUnknownKey},
        Violation{"WriteOtherConnectionsKey", false, kOtherConnKey,
                  kOtherConnVa, 100, AccessCheck::kWrongConnection},
        Violation{"ReadOtherConnectionsKey", true, kOtherConnKey, kOtherConnVa,
                  100, AccessCheck::kWrongConnection},
        Violation{"WritePastEnd", false, kWriteOnlyKey,
                  kWriteOnlyVa + kRegionLen - 50, 100, AccessCheck::kOutOfRange},
        Violation{"MultiPacketWritePastEnd", false, kWriteOnlyKey, kWriteOnlyVa,
                  kRegionLen + 1, AccessCheck::kOutOfRange},
        Violation{"WriteBeforeStart", false, kWriteOnlyKey, kWriteOnlyVa - 1,
                  10, AccessCheck::kOutOfRange},
        Violation{"ReadPastEnd", true, kReadOnlyKey, kReadOnlyVa + 1,
                  kRegionLen, AccessCheck::kOutOfRange},
        Violation{"WriteToReadOnly", false, kReadOnlyKey, kReadOnlyVa, 100,
                  AccessCheck::kNoPermission},
        Violation{"MultiPacketWriteToReadOnly", false, kReadOnlyKey,
                  kReadOnlyVa, 3000, AccessCheck::kNoPermission},
        Violation{"ReadFromWriteOnly", true, kWriteOnlyKey, kWriteOnlyVa, 100,
                  AccessCheck::kNoPermission}),
    [](const ::testing::TestParamInfo<Violation>& p) { return p.param.name; });

TEST(AccessAllowedTest, PermittedAccessesSucceed) {
  Fixture f;
  std::vector<uint8_t> ro(kRegionLen), wo(kRegionLen, 0);
  ro = Pattern(kRegionLen, 8);
  const wire::Qpn b_qpn = f.pair.b.qp->config().local_qpn;
  f.pair.b.memory.Add({b_qpn, kReadOnlyKey, kReadOnlyVa, ro.data(), kRegionLen,
                       true, false});
  f.pair.b.memory.Add({b_qpn, kWriteOnlyKey, kWriteOnlyVa, wo.data(),
                       kRegionLen, false, true});
  std::vector<uint8_t> dst(kRegionLen);
  auto src = Pattern(kRegionLen, 9);
  WorkRequest rd = Fixture::Read(1, dst.data(), kRegionLen, 0, 0, kReadOnlyKey);
  rd.remote_va = kReadOnlyVa;
  WorkRequest wr = Fixture::Write(2, src.data(), kRegionLen, 0, 0, kWriteOnlyKey);
  wr.remote_va = kWriteOnlyVa;
  ASSERT_EQ(f.pair.a.qp->Post(rd), PostResult::kOk);
  ASSERT_EQ(f.pair.a.qp->Post(wr), PostResult::kOk);
  ASSERT_TRUE(f.pair.RunUntilIdle(kSecond));
  ASSERT_EQ(f.pair.a.cq.completions.size(), 2u);
  EXPECT_EQ(f.pair.a.cq.completions[0].status, WcStatus::kSuccess);
  EXPECT_EQ(f.pair.a.cq.completions[1].status, WcStatus::kSuccess);
  EXPECT_EQ(dst, ro);
  EXPECT_EQ(wo, src);
}

}  // namespace
}  // namespace rdmaplane::rc
