#include "dataplane/wire/icrc.h"

#include <isa-l/crc.h>

#include <cstring>

namespace rdmaplane::wire {
namespace {

constexpr size_t kPseudoLrhLen = 8;
constexpr size_t kMaskedLen = 20 + 8 + 12;  // IPv4 + UDP + BTH

// Sets the fields of IPv4, UDP and BTH at `hdr` that may change in flight
// (TOS, TTL, IP checksum, UDP checksum, BTH resv8a/FECN/BECN) to ones.
void MaskVariantFields(uint8_t* hdr) {
  hdr[1] = 0xFF;                     // IPv4 TOS
  hdr[8] = 0xFF;                     // IPv4 TTL
  hdr[10] = hdr[11] = 0xFF;          // IPv4 header checksum
  hdr[20 + 6] = hdr[20 + 7] = 0xFF;  // UDP checksum
  hdr[20 + 8 + 4] = 0xFF;            // BTH FECN/BECN/resv6
}

// Frames this short (small WRITEs, ACKs, read requests) go through one CRC
// call: the masked headers and what follows copied into one block. ISA-L's
// CRC has a fixed cost per call that outweighs copying a few hundred bytes.
constexpr size_t kOneBlockMax = 512;

// Copies the `len` bytes at `ip_udp_bth` (IPv4, UDP, BTH and whatever
// follows; kMaskedLen <= len <= kOneBlockMax) behind eight 0xFF bytes, with
// the variant fields set to ones, and returns the CRC of that block.
uint32_t MaskedBlockCrc(const uint8_t* ip_udp_bth, size_t len) {
  uint8_t block[kPseudoLrhLen + kOneBlockMax];
  std::memset(block, 0xFF, kPseudoLrhLen);
  uint8_t* hdr = block + kPseudoLrhLen;
  std::memcpy(hdr, ip_udp_bth, len);
  MaskVariantFields(hdr);
  return crc32_gzip_refl(0, block, kPseudoLrhLen + len);
}

}  // namespace

uint32_t ComputeIcrc(std::span<const uint8_t> ip_to_end) {
  if (ip_to_end.size() <= kOneBlockMax) {
    return MaskedBlockCrc(ip_to_end.data(), ip_to_end.size());
  }
  return crc32_gzip_refl(MaskedBlockCrc(ip_to_end.data(), kMaskedLen),
                         ip_to_end.data() + kMaskedLen,
                         ip_to_end.size() - kMaskedLen);
}

uint32_t ComputeIcrc(std::span<const uint8_t> ip_udp_bth,
                     std::span<const uint8_t> rest) {
  return ExtendIcrc(ComputeIcrc(ip_udp_bth), rest);
}

// The headers of a frame and what follows them in their buffer: the ICRC
// of those bytes, to be extended.
uint32_t StartIcrc(std::span<const uint8_t> ip_udp_bth) {
  return ComputeIcrc(ip_udp_bth);
}

uint32_t ExtendIcrc(uint32_t icrc, std::span<const uint8_t> bytes) {
  return crc32_gzip_refl(icrc, bytes.data(), bytes.size());
}

uint32_t Crc32(std::span<const uint8_t> data) {
  return crc32_gzip_refl(0, data.data(), data.size());
}

}  // namespace rdmaplane::wire
