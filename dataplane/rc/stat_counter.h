// A statistic that one thread (an engine) increments and others (the
// control thread building status) read while it runs. A relaxed atomic load
// and store: no locked instruction on the data path, no torn or racy read.
//
// Thread-safety: one writer at a time; any number of readers.
#ifndef RDMAPLANE_DATAPLANE_RC_STAT_COUNTER_H_
#define RDMAPLANE_DATAPLANE_RC_STAT_COUNTER_H_

#include <atomic>
#include <cstdint>

namespace rdmaplane::rc {

class StatCounter {
 public:
  constexpr StatCounter() = default;
  StatCounter(const StatCounter&) = delete;
  StatCounter& operator=(const StatCounter&) = delete;

  // The one writer.
  void Add(uint64_t n) {
    value_.store(value_.load(std::memory_order_relaxed) + n,
                 std::memory_order_relaxed);
  }
  StatCounter& operator++() {
    Add(1);
    return *this;
  }
  StatCounter& operator+=(uint64_t n) {
    Add(n);
    return *this;
  }

  // Anyone.
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }
  operator uint64_t() const { return value(); }  // NOLINT: reads as a number

 private:
  std::atomic<uint64_t> value_{0};
};

}  // namespace rdmaplane::rc

#endif  // RDMAPLANE_DATAPLANE_RC_STAT_COUNTER_H_
