// The RoCEv2 invariant CRC: CRC-32 (reflected, the Ethernet/zlib polynomial)
// over a pseudo-LRH of eight 0xFF bytes, the IPv4 and UDP headers and the BTH
// with their variant fields masked to ones, then the rest of the packet.
//
// Computed with ISA-L. Thread-safe (pure functions).
#ifndef RDMAPLANE_DATAPLANE_WIRE_ICRC_H_
#define RDMAPLANE_DATAPLANE_WIRE_ICRC_H_

#include <cstdint>
#include <span>

namespace rdmaplane::wire {

// ICRC of a frame starting at the IPv4 header and ending before the ICRC
// field: `ip_to_end` holds IPv4 header, UDP header, BTH, and everything after.
// Requires ip_to_end.size() >= 40.
uint32_t ComputeIcrc(std::span<const uint8_t> ip_to_end);

// Same, with the part after the BTH given separately (for frames whose
// payload lives in another buffer).
uint32_t ComputeIcrc(std::span<const uint8_t> ip_udp_bth,
                     std::span<const uint8_t> rest);

// The same, built up piece by piece (for a frame whose payload lies in
// several buffers): StartIcrc over IPv4 header, UDP header, BTH and whatever
// follows them in the same buffer (at least 40 bytes), then ExtendIcrc over
// each further piece in order. The result of the last call is the ICRC.
uint32_t StartIcrc(std::span<const uint8_t> ip_udp_bth);
uint32_t ExtendIcrc(uint32_t icrc, std::span<const uint8_t> bytes);

// Plain CRC-32 (zlib), exposed for benchmarks and cross-checks.
uint32_t Crc32(std::span<const uint8_t> data);

}  // namespace rdmaplane::wire

#endif  // RDMAPLANE_DATAPLANE_WIRE_ICRC_H_
