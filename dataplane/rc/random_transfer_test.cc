// Thousands of random RDMA WRITEs and READs in both directions over a
// simulated link with loss, duplication, reordering and delay. Every byte is
// checked at the destination, and every work request completes exactly once,
// in order, successfully. The operations, the data and the link's faults
// are drawn from a new seed every run (printed; RDP_FUZZ_SEED replays one,
// see tests/testing/fuzz.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <vector>

#include "dataplane/rc/qp.h"
#include "dataplane/rc/sgl.h"
#include "dataplane/rc/sim_link.h"
#include "dataplane/rc/test_util.h"
#include "tests/testing/fuzz.h"

namespace rdmaplane::rc {
namespace {

constexpr int kOpsPerSide = 5000;  // 10,000 operations per loss rate
constexpr uint32_t kMaxLen = 1 << 20;
constexpr uint32_t kRegionBytes = 4 << 20;
constexpr int kSlots = 8;
constexpr uint32_t kSgeGap = 64;

// Drives one side: posts random operations against the peer's region and
// checks each completion.
class Driver {
 public:
  Driver(RcQp* qp, CollectingSink* cq, const std::vector<uint8_t>* peer_region,
         wire::Rkey peer_key, uint64_t seed)
      : qp_(qp),
        peer_region_(peer_region),
        peer_key_(peer_key),
        rng_(seed),
        shadow_(*peer_region),
        pool_(testing::Pattern(2 * kMaxLen, static_cast<uint32_t>(seed))) {
    for (auto& s : slots_) s.buffer.resize(kMaxLen + 3 * kSgeGap);
    cq->on_complete = [this](const Completion& c) { OnCompletion(c); };
  }

  void MaybePost() {
    for (Slot& slot : slots_) {
      if (posted_ == kOpsPerSide) return;
      if (slot.busy) continue;
      if (!TryPost(slot)) return;
    }
  }

  bool done() const { return completed_ == kOpsPerSide; }
  int completed() const { return completed_; }
  uint64_t bytes() const { return bytes_; }
  const std::vector<uint8_t>& shadow() const { return shadow_; }
  int failures() const { return failures_; }

 private:
  struct Slot {
    std::vector<uint8_t> buffer;
    bool busy = false;
    bool read = false;
    uint64_t offset = 0;  // in the peer region
    uint32_t length = 0;
    uint64_t seq = 0;
    WorkRequest wr;
  };

  uint32_t LogUniformLength() {
    std::uniform_real_distribution<double> u(0.0,
                                             std::log(double(kMaxLen) + 1));
    uint32_t len = static_cast<uint32_t>(std::exp(u(rng_)));
    return std::clamp<uint32_t>(len, 1, kMaxLen);
  }

  bool Overlaps(bool read, uint64_t off, uint32_t len) const {
    for (const Slot& s : slots_) {
      if (!s.busy || (read && s.read)) continue;  // reads may share ranges
      if (off < s.offset + s.length && s.offset < off + len) return true;
    }
    return false;
  }

  bool TryPost(Slot& slot) {
    const bool read = std::bernoulli_distribution(0.5)(rng_);
    const uint32_t len = LogUniformLength();
    uint64_t off = 0;
    bool found = false;
    for (int attempt = 0; attempt < 4 && !found; ++attempt) {
      off =
          std::uniform_int_distribution<uint64_t>(0, kRegionBytes - len)(rng_);
      found = !Overlaps(read, off, len);
    }
    if (!found) return false;

    // Split into up to three SGEs with gaps between them.
    WorkRequest wr;
    wr.wr_id = (next_seq_ << 8) | static_cast<uint64_t>(&slot - slots_);
    wr.opcode = read ? WrOpcode::kRead : WrOpcode::kWrite;
    wr.remote_va = testing::kRemoteVa + off;
    wr.rkey = peer_key_;
    const uint32_t pieces = len >= 3 ? 1 + rng_() % 3 : 1;
    uint32_t cuts[4] = {0, 0, 0, len};
    for (uint32_t i = 1; i < pieces; ++i) cuts[i] = rng_() % (len + 1);
    if (pieces == 3 && cuts[1] > cuts[2]) std::swap(cuts[1], cuts[2]);
    cuts[pieces] = len;
    wr.num_sge = pieces;
    for (uint32_t i = 0; i < pieces; ++i) {
      wr.sge[i] = {slot.buffer.data() + cuts[i] + i * kSgeGap,
                   cuts[i + 1] - cuts[i]};
    }
    if (read) {
      std::fill(slot.buffer.begin(), slot.buffer.end(), 0xCC);
    } else {
      const uint64_t from = rng_() % (pool_.size() - len);
      CopyToSgl(wr, 0, pool_.data() + from, len);
      std::copy(pool_.begin() + from, pool_.begin() + from + len,
                shadow_.begin() + off);
    }
    const PostResult r = qp_->Post(wr);
    if (r == PostResult::kQueueFull) return false;
    EXPECT_EQ(r, PostResult::kOk);
    slot.busy = true;
    slot.read = read;
    slot.offset = off;
    slot.length = len;
    slot.seq = next_seq_++;
    slot.wr = wr;
    ++posted_;
    return true;
  }

  void OnCompletion(const Completion& c) {
    const size_t index = c.wr_id & 0xFF;
    const uint64_t seq = c.wr_id >> 8;
    if (index >= kSlots || !slots_[index].busy || slots_[index].seq != seq) {
      ADD_FAILURE() << "completion for a request not outstanding: " << c.wr_id;
      ++failures_;
      return;
    }
    Slot& slot = slots_[index];
    EXPECT_EQ(seq, expected_seq_) << "completions out of posting order";
    expected_seq_ = seq + 1;
    EXPECT_EQ(c.status, WcStatus::kSuccess) << WcStatusName(c.status);
    EXPECT_EQ(c.byte_len, slot.length);
    // Reads compare with what the peer region holds; writes compare what the
    // peer region now holds with what was sent.
    std::vector<uint8_t> got(slot.length);
    CopyFromSgl(slot.wr, 0, got.data(), slot.length);
    const uint8_t* expected =
        (slot.read ? shadow_.data() : peer_region_->data()) + slot.offset;
    if (!std::equal(got.begin(), got.end(), expected)) {
      ADD_FAILURE() << (slot.read ? "read" : "write") << " of " << slot.length
                    << " bytes at " << slot.offset << " corrupted";
      ++failures_;
    }
    bytes_ += slot.length;
    slot.busy = false;
    ++completed_;
  }

  RcQp* qp_;
  const std::vector<uint8_t>* peer_region_;
  wire::Rkey peer_key_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> shadow_;
  std::vector<uint8_t> pool_;
  Slot slots_[kSlots];
  uint64_t next_seq_ = 0;
  uint64_t expected_seq_ = 0;
  int posted_ = 0;
  int completed_ = 0;
  int failures_ = 0;
  uint64_t bytes_ = 0;
};

fault::FaultSpec Faults(double loss, uint64_t seed) {
  fault::FaultSpec f;
  f.loss = loss;
  f.duplicate = 0.005;
  f.reorder = 0.01;
  f.delay_ns = 2'000;
  f.jitter_ns = 1'000;
  f.reorder_ns = 20'000;
  f.seed = seed;
  return f;
}

class RandomTransferTest : public ::testing::TestWithParam<double> {};

TEST_P(RandomTransferTest, EveryByteArrivesAndEveryRequestCompletesOnce) {
  const double loss = GetParam();
  const uint64_t seed = rdmaplane::testing::FuzzSeed();
  SCOPED_TRACE("RDP_FUZZ_SEED=" + std::to_string(seed));
  auto seed_of = [seed](uint64_t k) {
    return rdmaplane::testing::IterationSeed(seed, k);
  };
  QpConfig config;
  config.pmtu = 1024;
  config.sq_depth = 16;
  config.max_inflight_packets = 64;
  config.ack_req_every = 16;
  config.max_rd_atomic = 8;
  config.max_dest_rd_atomic = 8;
  // Up to 8 MiB of read responses may queue ahead of an ACK (6.7 ms at
  // 10 Gb/s), so the timeout must exceed that; virtual time costs nothing.
  config.retransmit_timeout_ns = 20'000'000;
  config.retry_count = 15;
  // A 10 Gb/s link with a 64 KiB transmit queue on each side.
  testing::Fixture f(config, Faults(loss, seed_of(0)), Faults(loss, seed_of(1)),
                     kRegionBytes, /*gbps=*/10);
  auto a_init = testing::Pattern(kRegionBytes, 1);
  auto b_init = testing::Pattern(kRegionBytes, 2);
  f.a_region = a_init;
  f.b_region = b_init;
  Driver a(f.pair.a.qp.get(), &f.pair.a.cq, &f.b_region, testing::kKeyOnB,
           seed_of(2));
  Driver b(f.pair.b.qp.get(), &f.pair.b.cq, &f.a_region, testing::kKeyOnA,
           seed_of(3));

  uint64_t steps = 0;
  while (!(a.done() && b.done())) {
    a.MaybePost();
    b.MaybePost();
    ASSERT_TRUE(f.pair.Step()) << "stalled";
    ASSERT_LT(++steps, 200'000'000u) << "no end in sight";
    ASSERT_EQ(f.pair.a.qp->state(), QpState::kReadyToSend);
    ASSERT_EQ(f.pair.b.qp->state(), QpState::kReadyToSend);
    if (a.failures() + b.failures() > 10) FAIL() << "too many failures";
  }
  ASSERT_TRUE(f.pair.RunUntilIdle(1'000'000'000));
  EXPECT_EQ(a.completed(), kOpsPerSide);  // nothing completed twice
  EXPECT_EQ(b.completed(), kOpsPerSide);
  EXPECT_EQ(f.pair.a.cq.completions.size(), size_t{kOpsPerSide});
  EXPECT_EQ(f.pair.b.cq.completions.size(), size_t{kOpsPerSide});
  // Every byte of both regions is what the writes made of it.
  EXPECT_TRUE(f.b_region == a.shadow());
  EXPECT_TRUE(f.a_region == b.shadow());
  EXPECT_EQ(f.pair.rejected_frames, 0u);

  const QpStats& sa = f.pair.a.qp->stats();
  const QpStats& sb = f.pair.b.qp->stats();
  std::printf(
      "loss %.2f: %.1f MB moved, %llu+%llu frames, %llu+%llu retransmitted, "
      "%llu+%llu timeouts, %llu+%llu seq NAKs, %llu dropped, %llu duplicated, "
      "%llu reordered, %.1f ms simulated\n",
      loss, (a.bytes() + b.bytes()) / 1e6, (unsigned long long)sa.tx_packets,
      (unsigned long long)sb.tx_packets,
      (unsigned long long)sa.retransmitted_packets,
      (unsigned long long)sb.retransmitted_packets,
      (unsigned long long)sa.timeouts, (unsigned long long)sb.timeouts,
      (unsigned long long)sa.seq_naks_sent,
      (unsigned long long)sb.seq_naks_sent,
      (unsigned long long)(f.pair.a_to_b.faults().dropped +
                           f.pair.b_to_a.faults().dropped),
      (unsigned long long)(f.pair.a_to_b.faults().duplicated +
                           f.pair.b_to_a.faults().duplicated),
      (unsigned long long)(f.pair.a_to_b.faults().reordered +
                           f.pair.b_to_a.faults().reordered),
      f.pair.clock.NowNs() / 1e6);
  if (loss > 0) {
    EXPECT_GT(sa.retransmitted_packets, 0u);
    EXPECT_GT(sb.retransmitted_packets, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(LossRates, RandomTransferTest,
                         ::testing::Values(0.0, 0.01, 0.10),
                         [](const ::testing::TestParamInfo<double>& p) {
                           return "loss_" + std::to_string(int(p.param * 100)) +
                                  "pct";
                         });

}  // namespace
}  // namespace rdmaplane::rc
