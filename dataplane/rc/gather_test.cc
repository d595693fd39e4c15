// Zero-copy transmit from the QP's side: with a sink that takes payload in
// place, WRITE packets and READ responses are the same bytes on the wire as
// with the copy path, for every size around the MTU and for scatter/gather
// lists of several entries, and the pieces handed over are the registered
// memory itself, with its owner.
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
constexpr uint32_t kRegion = 1 << 20;

// One run of a scenario: the frames each wire carried, in order.
struct Capture {
  std::vector<std::vector<uint8_t>> a_to_b;
  std::vector<std::vector<uint8_t>> b_to_a;
  uint64_t gathered_a_to_b = 0;
  uint64_t gathered_b_to_a = 0;
  uint64_t pieces_checked = 0;
  std::vector<uint8_t> b_region;
  std::vector<std::vector<uint8_t>> read_back;
};

// A list of SGEs (lengths) for one request; the request moves their sum.
using Sges = std::vector<uint32_t>;

// Writes each SGL to B, then reads each back, optionally with the gather
// path on (payloads of at least `gather_from` bytes).
Capture RunScenario(const std::vector<Sges>& requests, uint32_t gather_from,
            bool sge_owners = true) {
  QpConfig config = testing::SmallConfig();
  config.pmtu = 1024;
  config.max_inflight_packets = 256;
  Fixture f(config, {}, {}, kRegion);
  MemoryOwner local_owner(/*zero_copy=*/true);
  MemoryOwner region_owner(/*zero_copy=*/true);
  // B's region is what B's responder reads from: give it an owner.
  TestMemory b_memory;
  b_memory.Add({f.pair.b.qp->config().local_qpn, testing::kKeyOnB,
                testing::kRemoteVa, f.b_region.data(), kRegion, true, true,
                &region_owner});
  f.pair.b.memory = b_memory;
  Capture out;
  f.pair.a_to_b.tap = [&](std::span<const uint8_t> fr) {
    out.a_to_b.emplace_back(fr.begin(), fr.end());
  };
  f.pair.b_to_a.tap = [&](std::span<const uint8_t> fr) {
    out.b_to_a.emplace_back(fr.begin(), fr.end());
  };
  if (gather_from != 0) {
    f.pair.a_to_b.EnableGather(gather_from);
    f.pair.b_to_a.EnableGather(gather_from);
  }

  // Sources: one buffer per SGE, each with its own pattern.
  std::vector<std::vector<uint8_t>> sources;
  std::vector<std::vector<uint8_t>> sinks;
  uint32_t seed = 1;
  for (const Sges& sges : requests) {
    for (uint32_t len : sges) {
      sources.push_back(Pattern(len, seed++));
      sinks.emplace_back(len, 0);
    }
  }
  auto in_sources = [&](const PayloadPiece& p) {
    for (const auto& s : sources) {
      if (p.data >= s.data() && p.data + p.len <= s.data() + s.size()) {
        return true;
      }
    }
    return false;
  };
  f.pair.a_to_b.on_gather = [&](std::span<const PayloadPiece> pieces) {
    for (const PayloadPiece& p : pieces) {
      EXPECT_EQ(p.owner, &local_owner);
      EXPECT_TRUE(in_sources(p)) << "a piece that is not the source memory";
      ++out.pieces_checked;
    }
  };
  f.pair.b_to_a.on_gather = [&](std::span<const PayloadPiece> pieces) {
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].owner, &region_owner);
    EXPECT_GE(pieces[0].data, f.b_region.data());
    EXPECT_LE(pieces[0].data + pieces[0].len, f.b_region.data() + kRegion);
    ++out.pieces_checked;
  };

  uint64_t offset = 0;
  size_t buffer = 0;
  std::vector<uint64_t> offsets;
  for (size_t r = 0; r < requests.size(); ++r) {
    WorkRequest wr = Fixture::Write(r, nullptr, 0, offset);
    wr.num_sge = static_cast<uint32_t>(requests[r].size());
    uint32_t total = 0;
    for (uint32_t i = 0; i < wr.num_sge; ++i, ++buffer) {
      wr.sge[i] = {sources[buffer].data(), requests[r][i], 0,
                   sge_owners ? &local_owner : nullptr};
      total += requests[r][i];
    }
    EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kOk);
    offsets.push_back(offset);
    offset += total + 13;  // unaligned targets
  }
  EXPECT_TRUE(f.pair.RunUntilIdle(kSecond));
  buffer = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    WorkRequest wr = Fixture::Read(100 + r, nullptr, 0, offsets[r]);
    wr.num_sge = static_cast<uint32_t>(requests[r].size());
    for (uint32_t i = 0; i < wr.num_sge; ++i, ++buffer) {
      wr.sge[i] = {sinks[buffer].data(), requests[r][i]};
    }
    EXPECT_EQ(f.pair.a.qp->Post(wr), PostResult::kOk);
  }
  EXPECT_TRUE(f.pair.RunUntilIdle(kSecond));
  for (const Completion& c : f.pair.a.cq.completions) {
    EXPECT_EQ(c.status, WcStatus::kSuccess) << c.wr_id;
  }
  EXPECT_EQ(f.pair.a.cq.completions.size(), 2 * requests.size());
  EXPECT_EQ(f.pair.rejected_frames, 0u);
  // Every byte went there and came back.
  EXPECT_EQ(sinks, sources);
  out.gathered_a_to_b = f.pair.a_to_b.gathered_frames();
  out.gathered_b_to_a = f.pair.b_to_a.gathered_frames();
  out.b_region = f.b_region;
  out.read_back = sinks;
  return out;
}

void ExpectSameFrames(const Capture& copied, const Capture& gathered) {
  ASSERT_EQ(copied.a_to_b.size(), gathered.a_to_b.size());
  ASSERT_EQ(copied.b_to_a.size(), gathered.b_to_a.size());
  for (size_t i = 0; i < copied.a_to_b.size(); ++i) {
    ASSERT_EQ(copied.a_to_b[i], gathered.a_to_b[i]) << "A->B frame " << i;
  }
  for (size_t i = 0; i < copied.b_to_a.size(); ++i) {
    ASSERT_EQ(copied.b_to_a[i], gathered.b_to_a[i]) << "B->A frame " << i;
  }
  EXPECT_EQ(copied.b_region, gathered.b_region);
}

TEST(GatherTest, EverySizeAroundTheMtuIsTheSameOnTheWire) {
  std::vector<Sges> requests;
  for (uint32_t len : {1u, 2u, 3u, 4u, 5u, 255u, 256u, 257u, 1021u, 1022u,
                       1023u, 1024u, 1025u, 1026u, 1027u, 2047u, 2048u,
                       2049u, 3071u, 3072u, 3073u, 4096u, 65537u}) {
    requests.push_back({len});
  }
  const Capture copied = RunScenario(requests, 0);
  const Capture gathered = RunScenario(requests, 1);
  EXPECT_EQ(copied.gathered_a_to_b + copied.gathered_b_to_a, 0u);
  // Every WRITE packet and every READ response carries payload here.
  EXPECT_GT(gathered.gathered_a_to_b, requests.size());
  EXPECT_GT(gathered.gathered_b_to_a, requests.size());
  EXPECT_GT(gathered.pieces_checked, 0u);
  ExpectSameFrames(copied, gathered);
}

TEST(GatherTest, ScatterGatherListsBecomeSeveralPieces) {
  const std::vector<Sges> requests = {
      {100, 1500, 7},                       // across packet boundaries
      {130, 130, 130, 130, 130, 130, 130, 130},  // 8 SGEs in one packet
      {1024, 1024, 1},                      // SGE ends on a packet end
      {3, 1, 2, 1019, 1},                   // odd pieces, odd pads
      {0, 4096, 0},                         // empty SGEs
  };
  const Capture copied = RunScenario(requests, 0);
  const Capture gathered = RunScenario(requests, 1);
  EXPECT_GT(gathered.gathered_a_to_b, 0u);
  // Each of those requests has at least one packet of several pieces.
  EXPECT_GT(gathered.pieces_checked,
            gathered.gathered_a_to_b + gathered.gathered_b_to_a);
  ExpectSameFrames(copied, gathered);
}

TEST(GatherTest, SmallPayloadsAndMemoryWithoutOwnerAreCopied) {
  const std::vector<Sges> requests = {{100}, {511}, {512}, {3000}};
  const Capture copied = RunScenario(requests, 0);
  // Only packets with 512 bytes or more go in place: the 512-byte message,
  // the 3000-byte message's full packets, and its 952-byte last one.
  const Capture threshold = RunScenario(requests, 512);
  EXPECT_EQ(threshold.gathered_a_to_b, 1u + 3u);
  EXPECT_EQ(threshold.gathered_b_to_a, 1u + 3u);
  ExpectSameFrames(copied, threshold);
  // Without owners the write side cannot go in place; read responses still
  // do (their memory has one).
  const Capture no_owner = RunScenario(requests, 1, /*sge_owners=*/false);
  EXPECT_EQ(no_owner.gathered_a_to_b, 0u);
  EXPECT_GT(no_owner.gathered_b_to_a, 0u);
  ExpectSameFrames(copied, no_owner);
}

}  // namespace
}  // namespace rdmaplane::rc
