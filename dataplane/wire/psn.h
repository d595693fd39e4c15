// Strong types for RoCEv2 transport quantities: the 24-bit packet sequence
// number with wrap-aware ordering, queue-pair numbers and remote keys.
//
// Thread-compatible value types; no dependencies beyond the standard library,
// so the RC state machines and the wire codec share them without DPDK.
#ifndef RDMAPLANE_DATAPLANE_WIRE_PSN_H_
#define RDMAPLANE_DATAPLANE_WIRE_PSN_H_

#include <cstdint>
#include <utility>

namespace rdmaplane::wire {

// A 24-bit packet sequence number. Arithmetic wraps modulo 2^24; ordering is
// defined only for values less than 2^23 apart, as in the InfiniBand spec.
class Psn {
 public:
  static constexpr uint32_t kMask = 0xFFFFFF;

  constexpr Psn() = default;
  constexpr explicit Psn(uint32_t v) : value_(v & kMask) {}

  constexpr uint32_t value() const { return value_; }

  // Signed distance from `other` to this PSN (positive when this is later).
  constexpr int32_t DistanceFrom(Psn other) const {
    return static_cast<int32_t>((value_ - other.value_) << 8) >> 8;
  }

  constexpr Psn operator+(uint32_t n) const { return Psn(value_ + n); }
  constexpr Psn operator-(uint32_t n) const { return Psn(value_ - n); }
  constexpr Psn& operator+=(uint32_t n) {
    value_ = (value_ + n) & kMask;
    return *this;
  }
  constexpr Psn& operator++() { return *this += 1; }

  friend constexpr bool operator==(Psn a, Psn b) {
    return a.value_ == b.value_;
  }
  friend constexpr bool operator!=(Psn a, Psn b) { return !(a == b); }
  friend constexpr bool operator<(Psn a, Psn b) {
    return a.DistanceFrom(b) < 0;
  }
  friend constexpr bool operator>(Psn a, Psn b) { return b < a; }
  friend constexpr bool operator<=(Psn a, Psn b) { return !(b < a); }
  friend constexpr bool operator>=(Psn a, Psn b) { return !(a < b); }

 private:
  uint32_t value_ = 0;
};

// A typed 32-bit identifier: values of different tags do not mix.
template <typename Tag>
class Id32 {
 public:
  constexpr Id32() = default;
  constexpr explicit Id32(uint32_t v) : value_(v) {}
  constexpr uint32_t value() const { return value_; }
  friend constexpr bool operator==(Id32 a, Id32 b) {
    return a.value_ == b.value_;
  }
  friend constexpr bool operator!=(Id32 a, Id32 b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, Id32 id) {
    return H::combine(std::move(h), id.value_);
  }

 private:
  uint32_t value_ = 0;
};

struct QpnTag {};
struct RkeyTag {};

// Queue-pair number: 24 bits on the wire.
using Qpn = Id32<QpnTag>;
// Remote key: names a registration for the peer's RDMA operations.
using Rkey = Id32<RkeyTag>;

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_PSN_H_
