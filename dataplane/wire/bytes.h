// Big-endian (network order) field access for the wire codecs.
//
// Pure functions: thread-safe.
#ifndef RDMAPLANE_DATAPLANE_WIRE_BYTES_H_
#define RDMAPLANE_DATAPLANE_WIRE_BYTES_H_

#include <cstdint>

namespace rdmaplane::wire {

inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void Put24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
inline void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}
inline void Put64(uint8_t* p, uint64_t v) {
  Put32(p, static_cast<uint32_t>(v >> 32));
  Put32(p + 4, static_cast<uint32_t>(v));
}
inline uint16_t Get16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
inline uint32_t Get24(const uint8_t* p) {
  return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
}
inline uint32_t Get32(const uint8_t* p) {
  return uint32_t{Get16(p)} << 16 | Get16(p + 2);
}
inline uint64_t Get64(const uint8_t* p) {
  return uint64_t{Get32(p)} << 32 | Get32(p + 4);
}

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_BYTES_H_
