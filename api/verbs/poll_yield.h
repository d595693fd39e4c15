// When a thread that waits by polling completion queues gives its CPU away
// (ibv_poll_cq, RDMAPLANE_VERBS_YIELD_AFTER). An application often polls
// several CQs in turn (UCX: each interface's receive and send CQs); a round
// of empty polls ends when the thread comes back to a CQ it already found
// empty in it (or after kMaxCqs of them), so that it yields once per pass
// over its CQs, not after each: over memif between two daemons on two
// CPUs, UCX's tag_lat of 8 B averaged 29.2 us against 32.7 us yielding at
// every empty CQ (4 runs each, alternated). A completion found ends the
// round. A thread polling one CQ yields at every empty poll but the first.
//
// Thread-compatible: one per thread (thread_local).
#ifndef RDMAPLANE_API_VERBS_POLL_YIELD_H_
#define RDMAPLANE_API_VERBS_POLL_YIELD_H_

#include <cstdint>

namespace rdmaplane::verbs {

class PollYield {
 public:
  static constexpr int kMaxCqs = 16;

  // yield_after: rounds of empty polls in a row between yields (0: never).
  explicit PollYield(uint32_t yield_after) : yield_after_(yield_after) {}

  // After a poll of `cq` that found `n` completions: whether to yield now.
  bool AfterPoll(const void* cq, int n) {
    if (n > 0) {
      seen_ = 0;
      rounds_ = 0;
      return false;
    }
    bool round_over = seen_ == kMaxCqs;
    for (int i = 0; i < seen_ && !round_over; ++i) round_over = cqs_[i] == cq;
    if (round_over) {
      seen_ = 0;
      ++rounds_;
    }
    cqs_[seen_++] = cq;
    return round_over && yield_after_ > 0 && rounds_ % yield_after_ == 0;
  }

 private:
  uint32_t yield_after_;
  const void* cqs_[kMaxCqs];  // found empty in this round
  int seen_ = 0;
  uint32_t rounds_ = 0;  // rounds of empty polls in a row
};

}  // namespace rdmaplane::verbs

#endif  // RDMAPLANE_API_VERBS_POLL_YIELD_H_
